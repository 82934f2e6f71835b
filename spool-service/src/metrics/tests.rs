//! Unit tests of the exposition: every field of the snapshot table, with its units.

use super::*;
use std::time::Duration;

#[test]
fn render_names_every_snapshot_field_with_units() {
    let st = Published::new();
    let s = Snapshot {
        uploaded: 7,
        ..Snapshot::default()
    };
    st.publish(&s, None);
    let text = render(&st);
    for name in [
        "spool_uploaded_packs_total 7",
        "spool_indexed_packs_total",
        "spool_pending_index_packs",
        "spool_sibling_bytes",
        "spool_latched",
        "spool_cycles_total",
        "spool_lease_losses_total",
        "spool_catalog_quorum_contention_total",
        "spool_catalog_quorum_contention_gave_up_total",
    ] {
        assert!(text.contains(name), "{name} missing in\n{text}");
    }
}

/// `run --json` and `/metrics` are both generated from spool-service's one
/// table: each field, with a value of its own, shows in both with it.
#[test]
fn every_field_of_the_table_shows_in_run_json_and_metrics_alike() {
    let mut s = Snapshot {
        staged: 1,
        uploaded: 2,
        indexed: 3,
        pending_index: 4,
        upload_failures: 5,
        cancelled_uploads: 6,
        deferred: 7,
        quarantined: 8,
        rejected: 9,
        bundles: 19,
        bundled_packs: 20,
        orphaned_bytes: 31,
        open_bundle: crate::OpenBundle {
            packs: 21,
            bytes: 22,
            age: Duration::from_millis(23),
            since: None,
        },
        adopted_spools: 10,
        adopted_packs: 11,
        adoption_owed: true,
        live_siblings: 12,
        blocked_siblings: vec!["/s/k/r1-00000001".into(), "/s/k/r2-00000002".into()],
        sibling_bytes: 13,
        cycles: 14,
        lease_held: true,
        lease_holder: Some(spool_catalog::LeaseHolder::parse("h:1")),
        lease_renewals: 15,
        max_renewal_gap: Some(Duration::from_millis(16)),
        lease_losses: 17,
        latched: true,
        last_error: Some("e".into()),
        waiting_on: Some("w".into()),
        destination_refused: Some("r".into()),
        index_pace: Duration::from_millis(18),
        loop_failed: Some("l".into()),
        ..Snapshot::default()
    };
    s.hand_off.owners = 19;
    s.hand_off.waiting = 20;
    s.hand_off.shipped = 21;
    s.hand_off.confirmed = 22;
    s.hand_off.refused = 23;
    s.hand_off.unconfirmed = 24;
    s.hand_off.last_lag_ms = 25;
    s.hand_off.max_lag_ms = 26;
    s.catalog.quorum_contention = 27;
    s.catalog.quorum_contention_gave_up = 28;
    s.stage_times.list = Duration::from_millis(29);
    s.stage_times.validate = Duration::from_millis(30);
    s.stage_times.upload = Duration::from_millis(31);
    s.stage_times.index = Duration::from_millis(32);
    s.stage_times.remove = Duration::from_millis(33);
    s.stage_times.idle = Duration::from_millis(34);
    let st = Published::new();
    st.publish(&s, None);
    let text = render(&st);
    let json = s.to_json();
    let mut numbers = std::collections::BTreeSet::new();
    for (field, value) in s.fields() {
        let at = field.name().split('.').fold(&json, |v, part| &v[part]);
        let want = match &value {
            crate::FieldValue::Number(n) => serde_json::json!(n),
            crate::FieldValue::Flag(b) => serde_json::json!(b),
            crate::FieldValue::Text(t) => serde_json::json!(t),
            crate::FieldValue::List(l) => serde_json::json!(l),
        };
        assert_eq!(at, &want, "{} in run --json: {json}", field.name());
        assert_ne!(
            value,
            field.value(&Snapshot::default()),
            "{}: set it above",
            field.name()
        );
        let suffix = if field.kind() == crate::FieldKind::Counter {
            "_total"
        } else {
            ""
        };
        let line = format!("spool_{}{suffix} {}\n", field.metric(), value.as_metric());
        assert!(text.contains(&line), "{line:?} missing in\n{text}");
        assert!(numbers.insert(field.metric()), "{} twice", field.metric());
    }
}
