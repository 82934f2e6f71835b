//! spool-upload: uploads sealed packs to an object store (SPEC §5).
//!
//! DESIGN DOC PLACEHOLDER
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backoff;
pub mod classify;
mod config;
mod error;
mod key;
mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod uploader;

pub use config::{ClientConfig, UploadConfig};
pub use error::{Error, Result};
pub use key::object_key;
pub use store::Store;
pub use uploader::{UploadFailure, UploadItem, UploadOutcome, UploadQueue, UploadResult, Uploader};
pub use tokio_util::sync::CancellationToken;
