//! The snapshot: a plain copy of the service's counters ([`Snapshot`]),
//! and the one table of its fields ([`FIELDS`]: name, Prometheus name,
//! kind, help, value) from which `spool run --json`, `/metrics` and
//! Python's dicts are all generated.

use std::path::PathBuf;

use FieldKind::{Counter, Gauge, Text};
use FieldValue::{Flag, List, Number};

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
    /// Bundles stored: objects holding more than one pack.
    pub bundles: u64,
    /// Packs stored inside those bundles (`bundled_packs / bundles` is
    /// packs per bundle).
    pub bundled_packs: u64,
    /// Bytes of packs in bundles this service stored and then stopped
    /// indexing (their rows owed past half of `upload.orphan_grace`; the
    /// packs went up again in fresh bundles): bytes no row will name, until
    /// `spool sweep` reclaims them. Orphans a crash leaves are the sweep's
    /// to count (`spool sweep --dry-run`).
    pub orphaned_bytes: u64,
    /// Small packs waiting for their bundle to fill (the own packs' and
    /// the hand-off's), as of the last cycle.
    pub open_bundle: crate::OpenBundle,
    /// Siblings drained by this service.
    pub adopted_spools: u64,
    /// Sibling packs uploaded by this service.
    pub adopted_packs: u64,
    /// Adoptable work not done yet.
    pub adoption_owed: bool,
    /// The hand-off of live sink-only owners' packs (this service ships
    /// them while it holds the node lease).
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

/// How a [`Field`] behaves over time, which is how `/metrics` types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// Only grows while the process runs: a Prometheus counter (`_total`).
    Counter,
    /// Goes up and down (a flag is 0 or 1): a Prometheus gauge.
    Gauge,
    /// Text (or a list of paths): in `/metrics` a gauge of its presence
    /// (0/1), or of the list's length.
    Text,
}

/// One field's value in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldValue {
    /// A count, a size or a duration in the field's unit.
    Number(u64),
    /// A flag.
    Flag(bool),
    /// A text, when there is one.
    Text(Option<String>),
    /// A list of texts (paths).
    List(Vec<String>),
}

impl FieldValue {
    /// The number `/metrics` shows: the number, the flag as 0/1, a text's
    /// presence as 0/1, a list's length.
    pub fn as_metric(&self) -> u64 {
        match self {
            FieldValue::Number(n) => *n,
            FieldValue::Flag(b) => u64::from(*b),
            FieldValue::Text(t) => u64::from(t.is_some()),
            FieldValue::List(l) => l.len() as u64,
        }
    }
}

/// One field of the snapshot as every view shows it: `spool run --json`
/// and Python's dicts by [`Field::name`] (a dotted name nests: `hand_off.shipped`
/// is `{"hand_off": {"shipped": ...}}`), `/metrics` by [`Field::metric`]
/// (prefix `spool_`, counters' `_total` added by the encoder). The one list
/// is [`FIELDS`]; a view iterates it, so a new field is one entry there.
#[derive(Debug)]
pub struct Field {
    name: &'static str,
    metric: &'static str,
    kind: FieldKind,
    help: &'static str,
    value: fn(&Snapshot) -> FieldValue,
}

impl Field {
    const fn new(
        name: &'static str,
        metric: &'static str,
        kind: FieldKind,
        help: &'static str,
        value: fn(&Snapshot) -> FieldValue,
    ) -> Field {
        Field {
            name,
            metric,
            kind,
            help,
            value,
        }
    }

    /// The name in JSON and Python (dotted when nested).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Prometheus name, its unit in it (`_packs`, `_bytes`,
    /// `_milliseconds`), without the `spool_` prefix and `_total` suffix.
    pub fn metric(&self) -> &'static str {
        self.metric
    }

    /// Counter, gauge or text.
    pub fn kind(&self) -> FieldKind {
        self.kind
    }

    /// One sentence saying what it counts.
    pub fn help(&self) -> &'static str {
        self.help
    }

    /// Its value in `s`.
    pub fn value(&self, s: &Snapshot) -> FieldValue {
        (self.value)(s)
    }
}

fn ms(d: std::time::Duration) -> FieldValue {
    FieldValue::Number(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Every field of the snapshot, in the order the views show them.
#[rustfmt::skip]
pub const FIELDS: &[Field] = &[
    Field::new("staged", "staged_packs", Counter, "Packs staged by the sinks of this directory in this process.", |s| Number(s.staged)),
    Field::new("uploaded", "uploaded_packs", Counter, "Packs put in the object store (own and adopted).", |s| Number(s.uploaded)),
    Field::new("indexed", "indexed_packs", Counter, "Packs indexed in the catalog (own and adopted).", |s| Number(s.indexed)),
    Field::new("pending_index", "pending_index_packs", Gauge, "Packs uploaded and not yet indexed (owed to the catalog).", |s| Number(s.pending_index)),
    Field::new("upload_failures", "upload_failures", Counter, "Failed upload attempt series.", |s| Number(s.upload_failures)),
    Field::new("cancelled_uploads", "cancelled_uploads", Counter, "Uploads cut by a cancel (deadline, flush, stop).", |s| Number(s.cancelled_uploads)),
    Field::new("deferred", "deferred_packs", Gauge, "Own ready packs not uploaded at the end of the last cycle.", |s| Number(s.deferred)),
    Field::new("quarantined", "quarantined_packs", Counter, "Corrupt packs set aside as .quarantined.", |s| Number(s.quarantined)),
    Field::new("rejected", "rejected_packs", Counter, "Own packs set aside as .rejected after a non-retryable failure.", |s| Number(s.rejected)),
    Field::new("bundles", "bundles", Counter, "Bundles stored: objects holding more than one pack.", |s| Number(s.bundles)),
    Field::new("bundled_packs", "bundled_packs", Counter, "Packs stored inside bundles (bundled_packs / bundles: packs per bundle).", |s| Number(s.bundled_packs)),
    Field::new("orphaned_bytes", "orphaned_bytes", Counter, "Bytes of packs in stored bundles this service stopped indexing (sent again in fresh bundles); spool sweep reclaims them.", |s| Number(s.orphaned_bytes)),
    Field::new("open_bundle.packs", "open_bundle_packs", Gauge, "Small packs waiting for a bundle to fill (upload.bundle_linger).", |s| Number(s.open_bundle.packs)),
    Field::new("open_bundle.bytes", "open_bundle_bytes", Gauge, "Bytes of the small packs waiting for a bundle to fill.", |s| Number(s.open_bundle.bytes)),
    Field::new("open_bundle.age_ms", "open_bundle_age_milliseconds", Gauge, "How long the oldest pack waiting for a bundle has waited.", |s| ms(s.open_bundle.age)),
    Field::new("adopted_spools", "adopted_spools", Counter, "Dead sibling directories drained by this service.", |s| Number(s.adopted_spools)),
    Field::new("adopted_packs", "adopted_packs", Counter, "Sibling packs uploaded by this service.", |s| Number(s.adopted_packs)),
    Field::new("adoption_owed", "adoption_owed", Gauge, "1 while adoptable sibling work is not done.", |s| Flag(s.adoption_owed)),
    Field::new("hand_off.owners", "handed_off_owners", Gauge, "Live sink-only owners served in the last full rescan or since.", |s| Number(s.hand_off.owners)),
    Field::new("hand_off.waiting", "handed_off_waiting_packs", Gauge, "Consented packs seen waiting to be shipped in the last step.", |s| Number(s.hand_off.waiting)),
    Field::new("hand_off.shipped", "handed_off_shipped", Counter, "Packs live sink-only owners handed off, indexed by this service.", |s| Number(s.hand_off.shipped)),
    Field::new("hand_off.confirmed", "handed_off_confirmed", Counter, "Handed-off packs whose owners were told their rows are confirmed.", |s| Number(s.hand_off.confirmed)),
    Field::new("hand_off.refused", "handed_off_refused", Counter, "Consent refs refused (no valid pack behind them).", |s| Number(s.hand_off.refused)),
    Field::new("hand_off.unconfirmed", "handed_off_unconfirmed", Gauge, "Handed-off packs indexed whose confirmations cannot be written yet (kept by their owners).", |s| Number(s.hand_off.unconfirmed)),
    Field::new("hand_off.last_lag_ms", "handed_off_last_lag_milliseconds", Gauge, "Consent to confirmation of the last handed-off pack confirmed.", |s| Number(s.hand_off.last_lag_ms)),
    Field::new("hand_off.max_lag_ms", "handed_off_max_lag_milliseconds", Gauge, "The longest consent-to-confirmation lag of a handed-off pack so far.", |s| Number(s.hand_off.max_lag_ms)),
    Field::new("live_siblings", "live_siblings", Gauge, "Sibling directories found live at their last probe.", |s| Number(s.live_siblings as u64)),
    Field::new("blocked_siblings", "blocked_siblings", Text, "Sibling directories nobody adopts until a person acts.", |s| List(s.blocked_siblings.iter().map(|p| p.display().to_string()).collect())),
    Field::new("sibling_bytes", "sibling_bytes", Gauge, "Bytes held by dead siblings (charged to the own budget).", |s| Number(s.sibling_bytes)),
    Field::new("cycles", "cycles", Counter, "Service cycles run (loop and flush).", |s| Number(s.cycles)),
    Field::new("lease_held", "lease_held", Gauge, "1 while this service holds its lease.", |s| Flag(s.lease_held)),
    Field::new("lease_holder", "lease_foreign_holder_present", Text, "The foreign lease holder last seen (1 when there is one; /metrics also names it in lease_foreign_holder).", |s| FieldValue::Text(s.lease_holder.as_ref().map(|h| h.as_str().to_owned()))),
    Field::new("lease_renewals", "lease_renewals", Counter, "Renewals of this service's lease holding.", |s| Number(s.lease_renewals)),
    Field::new("max_renewal_gap_ms", "lease_max_renewal_gap_milliseconds", Gauge, "The longest time from one claim of the lease to its next renewal.", |s| s.max_renewal_gap.map_or(Number(0), ms)),
    Field::new("lease_losses", "lease_losses", Counter, "Holdings of this service's lease lost (superseded, lapsed, or not renewed in time).", |s| Number(s.lease_losses)),
    Field::new("catalog.quorum_contention", "catalog_quorum_contention", Counter, "Replicated catalog: answers that an earlier quorum insert was not satisfied yet (ClickHouse code 286), each tried again.", |s| Number(s.catalog.quorum_contention)),
    Field::new("catalog.quorum_contention_gave_up", "catalog_quorum_contention_gave_up", Counter, "Replicated catalog: statements that met code 286 until the end of their budget (retried at a later cycle).", |s| Number(s.catalog.quorum_contention_gave_up)),
    Field::new("latched", "latched", Gauge, "1 once a foreign lease outlived 2 x TTL (lease-gated work stopped).", |s| Flag(s.latched)),
    Field::new("last_error", "last_error_present", Text, "1 when an error has been recorded (the text is in /healthz).", |s| FieldValue::Text(s.last_error.clone())),
    Field::new("waiting_on", "waiting_on_present", Text, "1 while a store or catalog call has been in flight for more than a second.", |s| FieldValue::Text(s.waiting_on.clone())),
    Field::new("destination_refused", "destination_refused", Text, "1 while the store or catalog refuses the whole destination (401, 403, missing bucket); packs stay ready.", |s| FieldValue::Text(s.destination_refused.clone())),
    Field::new("index_pace_ms", "index_pace_milliseconds", Gauge, "The index linger in force: service.index_linger, longer while the catalog pushes back.", |s| ms(s.index_pace)),
    Field::new("loop_failed", "loop_failed", Text, "1 once the service loop panicked (the daemon stops and exits 10).", |s| FieldValue::Text(s.loop_failed.clone())),
    Field::new("stage_ms.list", "stage_list_milliseconds", Counter, "Drain time spent listing ready packs.", |s| ms(s.stage_times.list)),
    Field::new("stage_ms.validate", "stage_validate_milliseconds", Counter, "Drain time spent validating packs (overlaps other stages).", |s| ms(s.stage_times.validate)),
    Field::new("stage_ms.upload", "stage_upload_milliseconds", Counter, "Drain time with an upload in flight (overlaps other stages).", |s| ms(s.stage_times.upload)),
    Field::new("stage_ms.index", "stage_index_milliseconds", Counter, "Drain time with an index call in flight (overlaps other stages).", |s| ms(s.stage_times.index)),
    Field::new("stage_ms.remove", "stage_remove_milliseconds", Counter, "Drain time spent removing indexed packs.", |s| ms(s.stage_times.remove)),
    Field::new("stage_ms.idle", "stage_idle_milliseconds", Counter, "Drain time with nothing in flight.", |s| ms(s.stage_times.idle)),
];

impl Snapshot {
    /// The snapshot as JSON (`spool run --json`): every field of
    /// [`FIELDS`], dotted names nested.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::{json, Value};
        let mut root = serde_json::Map::new();
        for (field, value) in self.fields() {
            let value = match value {
                FieldValue::Number(n) => json!(n),
                FieldValue::Flag(b) => json!(b),
                FieldValue::Text(t) => json!(t),
                FieldValue::List(l) => json!(l),
            };
            let mut at = &mut root;
            let mut parts = field.name().split('.').peekable();
            while let Some(part) = parts.next() {
                if parts.peek().is_none() {
                    at.insert(part.to_owned(), value);
                    break;
                }
                at = at
                    .entry(part)
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .expect("a dotted name's parent is an object");
            }
        }
        Value::Object(root)
    }
    /// Every field of [`FIELDS`] with its value in this snapshot.
    pub fn fields(&self) -> impl Iterator<Item = (&'static Field, FieldValue)> + '_ {
        FIELDS.iter().map(move |f| (f, f.value(self)))
    }
}
