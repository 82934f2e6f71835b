//! From URLs to a destination: the store and catalog a command writes to,
//! and the [`Destination`] whose catalog key names its rank directories
//! (SPEC §4.4). The spelling of a destination and of the embedded defaults
//! is the library's ([`spool_service::config::destination`]), shared with
//! the configuration.
//!
//! With no store or catalog URL a command uses the embedded defaults under
//! the spool root — a local-directory store at `ROOT/.store` and a SQLite
//! catalog at `ROOT/.catalog.db` — so one machine needs no server. Both
//! names start with a dot and hold no `.owner.lock`, so no spool walk, lock
//! check or adoption discovery ever looks inside them (the walks only look
//! at `<ROOT>/<12-hex key>/r<rank>-<8 hex>/`).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use spool_catalog::{mask_url, Catalog};
use spool_core::Destination;
use spool_upload::{ClientConfig, Store};

pub use spool_core::layout::EMBEDDED_STORE_DIR;
pub use spool_service::config::{destination, embedded_catalog_url, embedded_store_url};

/// A destination with its store and catalog opened.
pub struct Opened {
    /// The destination (its catalog key names the rank directories).
    pub destination: Destination,
    /// The object store, with its key prefix.
    pub store: Store,
    /// The catalog.
    pub catalog: Arc<dyn Catalog>,
}

/// Opens the store and catalog named by the URLs (or the embedded defaults
/// under `root`) and spells out the destination. `root` must exist. A local
/// store directory or catalog file it creates gets `access`.
pub fn open(
    root: &Path,
    store_url: Option<&str>,
    catalog_url: Option<&str>,
    store_id: &str,
    access: &spool_lock::Access,
) -> anyhow::Result<Opened> {
    let root = root
        .canonicalize()
        .with_context(|| format!("spool root {} (create it first)", root.display()))?;
    let store_url = store_url.map_or_else(|| embedded_store_url(&root), str::to_string);
    let catalog_url = catalog_url.map_or_else(|| embedded_catalog_url(&root), str::to_string);
    let destination = destination(&catalog_url, &store_url, store_id)?;
    // the embedded store and catalog are as private as the spool
    spool_service::config::create_local_destination(&store_url, &catalog_url, access)?;
    let client = ClientConfig {
        allow_http: allow_http(),
        ..ClientConfig::default()
    };
    let store = Store::from_url(&store_url, &client)
        .with_context(|| format!("cannot open the object store {}", mask_url(&store_url)))?;
    let catalog = spool_catalog::open(&catalog_url)?;
    Ok(Opened {
        destination,
        store,
        catalog,
    })
}

/// Plain-HTTP endpoints (test servers, emulators) are allowed when the
/// environment asks for them the way object_store's builders read it.
fn allow_http() -> bool {
    let truthy = |v: String| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes");
    std::env::var("AWS_ALLOW_HTTP").map(truthy).unwrap_or(false)
        || std::env::var("AZURE_ALLOW_HTTP")
            .map(truthy)
            .unwrap_or(false)
        || std::env::var("GOOGLE_ALLOW_HTTP")
            .map(truthy)
            .unwrap_or(false)
}

/// Refuses a `memory://` store or catalog for a command that drains a
/// spool (`run`, `produce --serve`): a memory store would "upload" every
/// pack into this process's RAM and then delete it from the spool. Exit 2.
/// (The libraries keep `memory://` for tests.)
pub fn refuse_memory(store_url: &str, catalog_url: &str) -> anyhow::Result<()> {
    for (what, url) in [("store", store_url), ("catalog", catalog_url)] {
        if url.trim_start().to_ascii_lowercase().starts_with("memory:") {
            return Err(crate::exit::coded(
                crate::exit::ExitCode::Usage,
                format!(
                    "{what} {} is in-memory: it would lose every pack the spool hands it \
                     (they are removed once \"uploaded\"); give a real {what} \
                     (s3://, gs://, az://, file:// store; clickhouse:// or sqlite:// catalog)",
                    mask_url(url)
                ),
            ));
        }
    }
    Ok(())
}
