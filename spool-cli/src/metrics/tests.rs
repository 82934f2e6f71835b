//! Unit tests of the health verdict and the exposition.

use super::*;

#[test]
fn health_turns_on_latch_and_on_stuck_failing_work() {
    let mut h = Health::new(Duration::from_millis(50));
    let mut s = Snapshot::default();
    assert_eq!(h.judge(&s), None);
    s.deferred = 3;
    s.last_error = Some("store down".into());
    assert_eq!(h.judge(&s), None, "not stuck long enough yet");
    std::thread::sleep(Duration::from_millis(80));
    let why = h.judge(&s).expect("stuck");
    assert!(
        why.contains("3 own pack(s)") && why.contains("store down"),
        "{why}"
    );
    s.uploaded = 1; // progress clears it
    assert_eq!(h.judge(&s), None);
    s.latched = true;
    s.lease_holder = Some(spool_catalog::LeaseHolder::parse("h:1"));
    assert!(h.judge(&s).unwrap().contains("latched"));
}

#[test]
fn render_names_every_snapshot_field_with_units() {
    let st = shared();
    st.lock().unwrap().snapshot.uploaded = 7;
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
