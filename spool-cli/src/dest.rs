//! The embedded destination and the refusal of in-memory ones. Every
//! command resolves its destination through [`crate::config`] (the library's
//! [`spool_service::config::Config`], which spells the [`Destination`] whose
//! catalog key names its rank directories); this module only
//! names the embedded defaults and refuses `memory://` for a command that
//! drains.
//!
//! With no store or catalog URL a command uses the embedded defaults under
//! the spool root — a local-directory store at `ROOT/.store` and a SQLite
//! catalog at `ROOT/.catalog.db` — so one machine needs no server. Both
//! names start with a dot and hold no `.owner.lock`, so no spool walk, lock
//! check or adoption discovery ever looks inside them (the walks only look
//! at `<ROOT>/<12-hex key>/r<rank>-<8 hex>/`).

use spool_catalog::mask_url;
#[cfg(doc)]
use spool_core::Destination;

pub use spool_service::config::{embedded_catalog_url, embedded_store_url};

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
