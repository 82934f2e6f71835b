//! spool-lock: one owner per spool directory (SPEC §3).
//!
//! TODO(design doc) — filled in below once the API settles.
#![warn(missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "spool-lock supports Linux only: it relies on flock semantics, /proc/self/fdinfo, \
     statfs filesystem magics and renameat2(RENAME_NOREPLACE)"
);

mod error;
mod fdinfo;
mod lock;
mod mode;
mod node_local;
mod probe;
mod record;
mod seams;
mod sys;

pub use error::{Error, Holder};
pub use fdinfo::held_by_this_process;
pub use lock::{
    acquire, held_claims, is_staging_name, remove_stale_staging, try_adopt, verify_held_by_caller,
    Claim,
};
pub use mode::{LockMode, LockOptions};
pub use node_local::{check_node_local, shared_filesystem_name, SHARED_FILESYSTEMS};
pub use probe::{is_nested_spool, lock_path, read_owner, OwnerStatus};
pub use record::{OwnerRecord, Purpose};
pub use seams::set_filesystem_type_for_testing;
#[cfg(any(test, feature = "testing"))]
pub use seams::{testing, HookPoint};

/// The lock file's name inside a spool directory.
pub const LOCK_FILE_NAME: &str = ".owner.lock";

/// This host's name, as owner records spell it.
pub fn host_name() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown".to_owned())
    })
    .clone()
}

/// A random-enough 32-bit number for staging names (no cryptography
/// needed: names are created with `mkdir`, which refuses a collision).
pub(crate) fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish() as u32
}
