//! spool-upload: uploads sealed packs to an object store through the
//! `object_store` crate (SPEC §5).
#![forbid(unsafe_code)]
