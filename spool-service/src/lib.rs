//! spool-service: the storage service — drains its own spool directory into
//! store and catalog, flushes and stops on deadlines, adopts dead siblings
//! through an explicit state machine (SPEC §7).
#![forbid(unsafe_code)]
