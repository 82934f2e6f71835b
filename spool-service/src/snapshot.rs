//! The snapshot.

use std::path::PathBuf;

/// A plain copy of the service's counters, cheap to take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Packs staged by the sinks of this directory in this process: the sum
    /// of the sealed-pack counters they publish in the registry,
    /// every worker ordinal; as of the last cycle.
    pub staged: u64,
    /// Packs put in the store (own and adopted).
    pub uploaded: u64,
    /// Packs indexed (own and adopted).
    pub indexed: u64,
    /// Packs uploaded and not yet indexed (owed).
    pub pending_index: u64,
    /// Upload failures (each failed attempt series).
    pub upload_failures: u64,
    /// Where the drains' time went so far, stage by stage (as of the last
    /// cycle).
    pub stage_times: crate::StageTimes,
    /// Uploads cut by a cancel.
    pub cancelled_uploads: u64,
    /// Own ready packs not uploaded at the end of the last cycle.
    pub deferred: u64,
    /// Packs quarantined (corrupt).
    pub quarantined: u64,
    /// Own packs renamed `.rejected` after a non-retryable failure.
    pub rejected: u64,
    /// Siblings drained by this service.
    pub adopted_spools: u64,
    /// Sibling packs uploaded by this service.
    pub adopted_packs: u64,
    /// Adoptable work not done yet.
    pub adoption_owed: bool,
    /// The hand-off of live sink-only owners' packs (this service ships
    /// them while it holds the node's adopter lease).
    pub hand_off: crate::handoff::HandOffCounts,
    /// Siblings found live at their last probe.
    pub live_siblings: usize,
    /// Siblings nobody adopts until a person acts.
    pub blocked_siblings: Vec<PathBuf>,
    /// Bytes held by dead siblings (the own spool's charge).
    pub sibling_bytes: u64,
    /// Cycles run (loop and flush).
    pub cycles: u64,
    /// This service holds its lease.
    pub lease_held: bool,
    /// The foreign holder last seen, if any.
    pub lease_holder: Option<spool_catalog::LeaseHolder>,
    /// Renewals of this service's lease holding so far (live at each
    /// `snapshot()`).
    pub lease_renewals: u64,
    /// The longest time from one claim of the lease to its next renewal
    /// (`ttl / 3` plus how late the lease keeper ran; blocking
    /// file system work never runs on the service's async workers, so this
    /// stays near `ttl / 3`). Live at each `snapshot()`.
    pub max_renewal_gap: Option<std::time::Duration>,
    /// Holdings of this service's lease lost (superseded, lapsed, or not
    /// renewed before the local deadline) while it ran. Live at each
    /// `snapshot()`.
    pub lease_losses: u64,
    /// What the catalog counted in this process (quorum contention on a
    /// replicated catalog: answers retried, statements that gave up). Live
    /// at each `snapshot()`; the catalog's, so services sharing one
    /// catalog object show the same counts.
    pub catalog: spool_catalog::CatalogCounters,
    /// A foreign lease outlived 2 x TTL: lease-gated work stopped for good.
    pub latched: bool,
    /// The last error recorded.
    pub last_error: Option<String>,
    /// The catalog or store call in flight for more than a second, if any,
    /// and for how long (`catalog X: indexing 4 pack(s), waiting for 12 s`):
    /// the cause when nothing has failed yet. Live at each `snapshot()`.
    pub waiting_on: Option<String>,
    /// The store or catalog refuses the whole destination (401, 403, a
    /// missing bucket, catalog credentials, the lease's claims refused for
    /// good): what it said. Uploads to it back off; every pack stays ready;
    /// cleared once one lands (or a claim is answered) again.
    pub destination_refused: Option<String>,
    /// The index linger in force: `index_linger`, or longer (up to 5 s)
    /// while the catalog pushes back (failed or slow index calls).
    pub index_pace: std::time::Duration,
    /// The service loop (or its lease keeper) panicked: the message. The
    /// service does no more work and let go of every adopted sibling;
    /// restart it (`spool run` exits 10).
    pub loop_failed: Option<String>,
}
