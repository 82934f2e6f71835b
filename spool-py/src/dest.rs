//! From URLs to a destination (SPEC §4.4), as `spool run` spells it: with
//! no store or catalog, the embedded ones under the spool root
//! (`file://ROOT/.store`, `sqlite:///ROOT/.catalog.db`).

use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use spool_core::layout::{EMBEDDED_CATALOG_FILE, EMBEDDED_STORE_DIR};
use spool_core::Destination;

use crate::errors;

/// A destination and its URLs.
pub struct Dest {
    /// The spool root, absolute.
    pub root: PathBuf,
    /// The store URL.
    pub store_url: String,
    /// The catalog URL.
    pub catalog_url: String,
    /// The destination spelled out.
    pub destination: Destination,
}

/// Resolves the URLs (or the embedded defaults under `root`).
pub fn resolve(
    py: Python<'_>,
    root: &Path,
    store: Option<String>,
    catalog: Option<String>,
    store_id: &str,
) -> PyResult<Dest> {
    let root = root.canonicalize().map_err(|e| {
        errors::config(
            py,
            format!(
                "spool root {}: {e} (create it first: mkdir -p {0})",
                root.display()
            ),
        )
    })?;
    let store_url = store.unwrap_or_else(|| embedded_store_url(&root));
    let catalog_url = catalog.unwrap_or_else(|| embedded_catalog_url(&root));
    let parsed =
        spool_catalog::CatalogUrl::parse(&catalog_url).map_err(|e| errors::catalog(py, &e))?;
    let destination = Destination {
        catalog_url: spool_core::layout::strip_credentials(&catalog_url),
        database: parsed.database().to_string(),
        table_prefix: parsed.table_prefix().to_string(),
        store_url: store_url.clone(),
        store_id: store_id.to_string(),
    };
    Ok(Dest {
        root,
        store_url,
        catalog_url,
        destination,
    })
}

/// `file://ROOT/.store`.
pub fn embedded_store_url(root: &Path) -> String {
    format!("file://{}", root.join(EMBEDDED_STORE_DIR).display())
}

/// `sqlite:///ROOT/.catalog.db`.
pub fn embedded_catalog_url(root: &Path) -> String {
    format!("sqlite://{}", root.join(EMBEDDED_CATALOG_FILE).display())
}

/// Plain-HTTP endpoints allowed the way object_store's builders read it.
pub fn allow_http() -> bool {
    let truthy = |v: String| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes");
    ["AWS_ALLOW_HTTP", "AZURE_ALLOW_HTTP", "GOOGLE_ALLOW_HTTP"]
        .iter()
        .any(|k| std::env::var(k).map(truthy).unwrap_or(false))
}
