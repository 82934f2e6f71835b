//! spool-core: packs, the crash-safe spool directory, the sink and the
//! per-process publication registry (SPEC §4). No async runtime.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod registry;
