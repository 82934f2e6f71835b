//! From URLs to a destination (SPEC §4.4): the one place the configuration
//! and `spool produce --spool-root` spell a [`Destination`], so both always
//! agree on the catalog key, and the embedded defaults under a spool root —
//! a local-directory store at `ROOT/.store` and a SQLite catalog at
//! `ROOT/.catalog.db` — so one machine needs no server. Both names start
//! with a dot and hold no `.owner.lock`, so no spool walk, lock check or
//! adoption discovery ever looks inside them.

use std::path::Path;

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
        store_url: store_url.to_string(),
        store_id: store_id.to_string(),
    })
}
