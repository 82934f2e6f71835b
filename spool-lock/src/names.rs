//! Names: the lock file's, this host's (as owner records spell it), and
//! random suffixes for staging names.

/// The lock file's name inside a spool directory.
pub const LOCK_FILE_NAME: &str = ".owner.lock";

/// This host's name, as owner records spell it (control characters
/// escaped, as a record is parsed, so the record of this host compares
/// equal to this name).
pub fn host_name() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        nix::unistd::gethostname()
            .ok()
            .map(|h| {
                crate::record::one_line(&h.to_string_lossy())
                    .trim()
                    .to_owned()
            })
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "unknown".to_owned())
    })
    .clone()
}

/// The reserve a directory of spool directories keeps for a full
/// filesystem (`lock::make_reserve_at`, `lock::acquire_reserve_at`):
/// hidden, so no walk takes it for a spool directory.
pub const RESERVE_NAME: &str = ".reserve";

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
