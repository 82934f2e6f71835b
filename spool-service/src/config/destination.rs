//! From URLs to a destination: the one place the configuration
//! and `spool produce --spool-root` spell a [`Destination`], so both always
//! agree on the catalog key, and the embedded defaults under a spool root —
//! a local-directory store at `ROOT/.store` and a SQLite catalog at
//! `ROOT/.catalog.db` — so one machine needs no server. Both names start
//! with a dot and hold no `.owner.lock`, so no spool walk, lock check or
//! adoption discovery ever looks inside them.

use std::path::{Path, PathBuf};

use spool_lock::Access;

use spool_catalog::CatalogUrl;
use spool_core::layout::{EMBEDDED_CATALOG_FILE, EMBEDDED_STORE_DIR};
use spool_core::Destination;

/// `path` as a URL path: percent-encoded where a URL needs it (`%`, `?`,
/// `#`, spaces, ...), so a spool root of any name gives URLs that name it.
/// A relative path (never given: the root is made absolute) is used as is.
fn url_path(path: &Path) -> String {
    match url::Url::from_file_path(path) {
        Ok(u) => u.path().to_string(),
        Err(()) => path.display().to_string(),
    }
}

/// The embedded store URL for `root`: `file://ROOT/.store`.
pub fn embedded_store_url(root: &Path) -> String {
    format!("file://{}", url_path(&root.join(EMBEDDED_STORE_DIR)))
}

/// The embedded catalog URL for `root`: `sqlite:///ROOT/.catalog.db`.
pub fn embedded_catalog_url(root: &Path) -> String {
    format!("sqlite://{}", url_path(&root.join(EMBEDDED_CATALOG_FILE)))
}

/// Creates what a local destination needs and is missing — a `file://`
/// store's directory and a `sqlite://` catalog's file (and their missing
/// parents) — with the spool's access (`spool.mode`, `spool.group`:
/// private, 0700 / 0600, by default), before the store and catalog open
/// them with the process umask. SQLite gives its journal and WAL files the
/// database file's mode. What exists is left as it is. Other URLs: nothing.
pub(crate) fn create_local_destination(
    store_url: &str,
    catalog_url: &str,
    access: &Access,
) -> Result<(), crate::Error> {
    if let Some(dir) = local_path(store_url, "file") {
        create_dirs(&dir, access)?;
    }
    if let Some(file) = local_path(catalog_url, "sqlite") {
        if let Some(parent) = file.parent() {
            create_dirs(parent, access)?;
        }
        create_private_file(&file, access)?;
    }
    Ok(())
}

/// The absolute local path of a `scheme:///ABS/PATH` URL, if it is one.
fn local_path(url: &str, scheme: &str) -> Option<PathBuf> {
    let parsed = url::Url::parse(url).ok()?;
    if parsed.scheme() != scheme || parsed.host_str().is_some_and(|h| !h.is_empty()) {
        return None;
    }
    // as a file URL, whose path `to_file_path` percent-decodes
    let path = url::Url::parse(&format!("file://{}", parsed.path()))
        .ok()?
        .to_file_path()
        .ok()?;
    (path.is_absolute() && path != Path::new("/")).then_some(path)
}

fn create_dirs(dir: &Path, access: &Access) -> Result<(), crate::Error> {
    spool_lock::create_parents(dir, access)
        .map(drop)
        .map_err(crate::Error::from)
}

fn create_private_file(file: &Path, access: &Access) -> Result<(), crate::Error> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::OpenOptionsExt;
    let failed = |source| crate::Error::LocalDestination {
        path: file.to_path_buf(),
        mode: access.file_mode(),
        source,
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(access.file_mode())
        .open(file)
    {
        Ok(f) => access.apply(f.as_fd(), false).map_err(failed),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(failed(e)),
    }
}

/// The destination spelled out from its URLs. Credentials are removed from
/// the catalog URL (the key never includes them either way).
pub fn destination(
    catalog_url: &str,
    store_url: &str,
    store_id: &str,
) -> Result<Destination, spool_catalog::Error> {
    let parsed = CatalogUrl::parse(catalog_url)?;
    Ok(Destination {
        catalog_url: spool_core::layout::strip_credentials(catalog_url),
        database: parsed.database().to_string(),
        table_prefix: parsed.table_prefix().to_string(),
        // a credential in a store URL (refused when the store opens) never
        // changes the key either
        store_url: spool_core::layout::strip_credentials(store_url),
        store_id: store_id.to_string(),
    })
}
