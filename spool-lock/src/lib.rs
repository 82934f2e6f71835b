//! spool-lock: one owner per spool directory (SPEC §3).
//!
//! Will own: the flock on `<dir>/.owner.lock` and on the directory itself,
//! the owner record, create-locked directories (`.creating` staging copy +
//! `renameat2(RENAME_NOREPLACE)`), nesting checks, the node-local (statfs)
//! check, and fork safety (`pthread_atfork`).

#[cfg(not(target_os = "linux"))]
compile_error!(
    "spool-lock supports Linux only: it relies on flock semantics, /proc/self/fdinfo, \
     statfs filesystem magics and renameat2(RENAME_NOREPLACE)"
);
