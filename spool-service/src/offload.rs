//! Blocking file system work off the service's async workers.
//!
//! Probes, takes (with spool-lock's retry sleeps), `Spool::open` of a
//! sibling (its reconcile lists every file), listings, staging-copy and
//! directory removal with their fsyncs, `/proc/self/fd` walks: each runs on
//! tokio's blocking pool through [`blocking`], so the runtime's workers stay
//! free for the lease keeper, the watchers and the uploads. A lease renewal
//! is then never later than `ttl / 3` plus scheduling noise, however large a
//! sibling is (the snapshot's `max_renewal_gap` records it).

/// Runs `f` on the blocking pool and waits for it without holding a worker.
/// A panic in `f` is resumed here (a cycle's `catch_unwind` reports it as a
/// failed loop). `None` only when the runtime is shutting down and dropped
/// the task before it ran.
pub(crate) async fn blocking<T, F>(f: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => Some(v),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}
