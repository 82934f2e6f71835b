//! Bundles on fakes: small packs share one object and one PUT, each keeps
//! a row naming its range that reads back checksum-clean; large packs go
//! alone; a corrupt pack is left out and quarantined; a failed PUT is
//! retried at a fresh key or leaves every pack ready; an owed row naming a
//! bundle near its sweep's grace is uploaded again, never indexed; the
//! service lets a trickle linger for a bundle, a flush does not.

use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};

use super::*;

/// Upload knobs with bundles of at most `bundle_bytes` and no linger.
fn bundling(fx: &Fixture, dir: &Path, bundle_bytes: u64) -> spool_upload::UploadConfig {
    let mut u = fx.config(dir).upload;
    u.bundle_bytes = bundle_bytes;
    u.bundle_linger = Duration::ZERO;
    u
}

/// `uploader` rebuilt on its store with its configuration changed by
/// `change`, and no bundle linger unless `change` sets one.
fn reconfigure(
    uploader: &mut spool_upload::Uploader,
    change: impl FnOnce(&mut spool_upload::UploadConfig),
) {
    let mut u = uploader.config().clone();
    u.bundle_linger = Duration::ZERO;
    change(&mut u);
    *uploader = spool_upload::Uploader::new(uploader.store().clone(), u).unwrap();
}

/// Every row of the fixture's catalog, by id.
fn rows(catalog: &dyn Catalog) -> Vec<PackRow> {
    block_on(catalog.list_range(0, u64::MAX)).unwrap()
}

/// Each row's range, read with one ranged GET, hashes to its `sha256`.
fn assert_ranges_read_back(fx: &Fixture, rows: &[PackRow]) {
    for r in rows {
        let key = object_store::path::Path::from(r.object_key.as_str());
        let bytes = block_on(
            fx.store
                .inner()
                .get_range(&key, r.object_offset..r.object_offset + r.bytes),
        )
        .unwrap();
        assert_eq!(
            hex::encode(Sha256::digest(&bytes)),
            r.sha256,
            "pack {} at {}+{} of {}",
            r.pack_id,
            r.object_offset,
            r.bytes,
            r.object_key
        );
    }
}

fn run_all(path: &mut Drain, dir: &Path) -> Vec<(Job, PackOutcome)> {
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(dir, &never).unwrap();
    let jobs = jobs_of(path, packs);
    block_on(path.run(jobs, &no_cut(), &never))
}

#[test]
fn small_packs_share_one_object_and_each_row_names_its_range() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 40);
    let mut p = parts(&fx, own.dir(), bundling(&fx, own.dir(), 1 << 20));
    p.pipeline_depth = 64;
    p.index_batch = 64;
    let mut path = Drain::new(p);
    let done = run_all(&mut path, own.dir());
    assert_eq!(outcome_names(&done), vec!["Indexed"; 40]);
    assert_eq!(fx.store.calls(Op::Put), 1, "one PUT for 40 small packs");
    assert_eq!(objects(&fx), 1);
    let rows = rows(fx.catalog.as_ref());
    assert_eq!(rows.len(), 40);
    let keys: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r.object_key.as_str()).collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(keys.iter().all(|k| k.ends_with(".bundle")), "{keys:?}");
    let mut ranges: Vec<(u64, u64)> = rows.iter().map(|r| (r.object_offset, r.bytes)).collect();
    ranges.sort();
    let mut end = 0;
    for (offset, bytes) in ranges {
        assert_eq!(offset, end, "ranges tile the bundle");
        end = offset + bytes;
    }
    assert_ranges_read_back(&fx, &rows);
    assert_eq!(files(own.dir(), "ready"), 0);
    assert_eq!(
        (path.counters().bundles(), path.counters().bundled_packs()),
        (1, 40)
    );
}

/// A run lingers only when it has packs and every one of them would go in a
/// bundle: none lingers with nothing to send, and one pack at or over the
/// bundle size among small ones sends the run at once.
#[test]
fn only_a_run_of_small_packs_lingers() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let mut upload = bundling(&fx, own.dir(), 64 << 10);
    upload.bundle_linger = Duration::from_secs(1);
    let path = upload_path(&fx, own.dir(), upload);
    let never = Arc::new(AtomicBool::new(false));
    let mut linger = crate::drain::Linger::default();
    assert!(!path.hold_for_bundle(&mut linger, &[]), "nothing to send");
    stage(own.dir(), 3);
    let small = jobs_of(
        &path,
        spool_core::spool::scan_dir(own.dir(), &never).unwrap(),
    );
    assert!(
        path.hold_for_bundle(&mut linger, &small),
        "three small packs"
    );
    assert!(linger.due().is_some());
    std::thread::sleep(Duration::from_millis(5));
    stage_sized(own.dir(), 1, 70 << 10);
    let mixed = jobs_of(
        &path,
        spool_core::spool::scan_dir(own.dir(), &never).unwrap(),
    );
    assert_eq!(mixed.len(), 4);
    assert!(
        !path.hold_for_bundle(&mut linger, &mixed),
        "a pack over the bundle size goes at once, and the run with it"
    );
    assert!(linger.due().is_none());

    // packs uploaded and owed to the catalog go to the index at once
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 3);
    let (mut path, _catalog) = gated_path(&fx, own.dir(), |p| {
        reconfigure(&mut p.uploader, |u| u.bundle_bytes = 1 << 20)
    });
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = jobs_of(&path, packs);
    let deadline = Instant::now() + Duration::from_millis(300);
    let done = block_on(path.run(jobs, &cut_after_300ms(deadline), &never));
    assert_eq!(outcome_names(&done), vec!["Owed"; 3]);
    reconfigure(&mut path.uploader, |u| {
        u.bundle_linger = Duration::from_secs(1)
    });
    let listed = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let owed = path.own_jobs(listed);
    assert_eq!(owed.len(), 3);
    assert!(
        !path.hold_for_bundle(&mut crate::drain::Linger::default(), &owed),
        "rows owed to the catalog wait for no bundle"
    );
}

/// A backlog of small packs starts its bundles together, each read on a
/// thread of its own, not one per answer of the store.
#[test]
fn a_backlog_starts_its_bundles_together() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage_sized(own.dir(), 40, 4 << 10);
    fx.store.script(Rule::new(
        Op::Put,
        Action::Delay(Duration::from_millis(200)),
    ));
    let mut p = parts(&fx, own.dir(), bundling(&fx, own.dir(), 40 << 10));
    p.pipeline_depth = 64;
    let mut path = Drain::new(p);
    let done = run_all(&mut path, own.dir());
    assert_eq!(outcome_names(&done), vec!["Indexed"; 40]);
    let puts = fx.store.calls(Op::Put);
    assert!(puts >= 4, "{puts} bundles");
    assert_eq!(
        fx.store.max_concurrent_transfers(),
        puts,
        "every bundle of the backlog in flight at once"
    );
}

/// `pipeline_depth` counts the packs of a bundle: none holds more, and a
/// crash can still cost a successor at most that many packs.
#[test]
fn a_bundle_holds_at_most_pipeline_depth_packs() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 40);
    let mut p = parts(&fx, own.dir(), bundling(&fx, own.dir(), 1 << 20));
    p.pipeline_depth = 16;
    p.index_batch = 64;
    let mut path = Drain::new(p);
    let done = run_all(&mut path, own.dir());
    assert_eq!(outcome_names(&done), vec!["Indexed"; 40]);
    let rows = rows(fx.catalog.as_ref());
    let mut per_key: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in &rows {
        *per_key.entry(&r.object_key).or_default() += 1;
    }
    assert!(per_key.values().all(|&n| n <= 16), "{per_key:?}");
    assert!(per_key.len() >= 3, "{per_key:?}");
    assert_ranges_read_back(&fx, &rows);
}

/// A pack at or over `bundle_bytes` goes alone, at its own key; the small
/// ones around it are bundled, and no bundle grows past `bundle_bytes`.
#[test]
fn a_pack_at_or_over_the_bundle_size_goes_alone() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    // ids sort by their millisecond: a pause keeps the three groups in
    // list order (a small pack listed between the two large ones would go
    // alone as a bundle of one)
    // (six packs of 20 KiB are more than one bundle of 64 KiB holds)
    stage_sized(own.dir(), 6, 20 << 10);
    std::thread::sleep(Duration::from_millis(5));
    stage_sized(own.dir(), 2, 70 << 10);
    std::thread::sleep(Duration::from_millis(5));
    stage_sized(own.dir(), 6, 20 << 10);
    let mut path = upload_path(&fx, own.dir(), bundling(&fx, own.dir(), 64 << 10));
    let done = run_all(&mut path, own.dir());
    assert_eq!(outcome_names(&done), vec!["Indexed"; 14]);
    let rows = rows(fx.catalog.as_ref());
    let alone: Vec<&PackRow> = rows.iter().filter(|r| r.bytes >= 64 << 10).collect();
    assert_eq!(alone.len(), 2);
    for r in alone {
        assert!(
            r.object_key.ends_with(&format!("{}.pack", r.pack_id)),
            "{}",
            r.object_key
        );
        assert_eq!(r.object_offset, 0);
    }
    let bundled = rows
        .iter()
        .filter(|r| r.object_key.ends_with(".bundle"))
        .count();
    assert_eq!(bundled, 12);
    let mut sizes: std::collections::BTreeMap<&str, u64> = Default::default();
    for r in &rows {
        *sizes.entry(&r.object_key).or_default() += r.bytes;
    }
    // no bundle exceeds bundle_bytes: what its rows name, and the object
    for (key, named) in &sizes {
        if key.ends_with(".bundle") {
            let size = block_on(fx.store.inner().head(&object_store::path::Path::from(*key)))
                .unwrap()
                .size;
            assert!(size <= 64 << 10, "{key}: {size} bytes; {sizes:?}");
            assert_eq!(*named, size, "{key}: rows name {named} of {size} bytes");
        }
    }
    assert_ranges_read_back(&fx, &rows);
}

/// A pack whose bytes do not match its checksum is left out of its bundle
/// and quarantined; the others go up and read back.
#[test]
fn a_corrupt_pack_is_left_out_of_its_bundle_and_quarantined() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let ids = stage(own.dir(), 5);
    let victim = own.dir().join(format!("{}.ready", ids[2].to_hex()));
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[40] ^= 0xff;
    std::fs::write(&victim, &bytes).unwrap();
    let mut path = upload_path(&fx, own.dir(), bundling(&fx, own.dir(), 1 << 20));
    let done = run_all(&mut path, own.dir());
    let mut names = outcome_names(&done);
    names.sort();
    assert_eq!(
        names,
        ["Indexed", "Indexed", "Indexed", "Indexed", "Quarantined"]
    );
    assert_eq!(fx.store.calls(Op::Put), 1);
    assert_eq!(files(own.dir(), "quarantined"), 1);
    let rows = rows(fx.catalog.as_ref());
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r.pack_id != ids[2].to_hex()));
    assert_ranges_read_back(&fx, &rows);
}

/// A failed PUT of a bundle is tried again at a fresh key (the key of an
/// attempt whose answer was lost is never reused); a store that keeps
/// failing leaves every pack of the bundle ready, none indexed.
#[test]
fn a_failed_bundle_put_is_retried_at_a_fresh_key_or_leaves_every_pack_ready() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 8);
    fx.store
        .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))).times(1));
    let mut path = upload_path(&fx, own.dir(), bundling(&fx, own.dir(), 1 << 20));
    let done = run_all(&mut path, own.dir());
    assert_eq!(outcome_names(&done), vec!["Indexed"; 8]);
    assert_eq!(fx.store.calls(Op::Put), 2);
    let rows = rows(fx.catalog.as_ref());
    assert_ranges_read_back(&fx, &rows);
    let key = object_store::path::Path::from(rows[0].object_key.as_str());
    assert_eq!(
        fx.store.calls_on(Op::Put, &key),
        1,
        "a retry reused the key of the failed attempt"
    );

    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 8);
    fx.store
        .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))));
    let mut path = upload_path(&fx, own.dir(), bundling(&fx, own.dir(), 1 << 20));
    let done = run_all(&mut path, own.dir());
    assert!(
        done.iter().all(|(_, o)| matches!(
            o,
            PackOutcome::Failed {
                retryable: true,
                ..
            }
        )),
        "{:?}",
        outcome_names(&done)
    );
    assert_eq!(block_on(fx.catalog.count()).unwrap(), 0);
    assert_eq!(files(own.dir(), "ready"), 8);
}

/// An owed row naming a bundle uploaded more than half of `orphan_grace`
/// ago is never indexed: a sweep may delete that bundle once it is
/// `orphan_grace` old and no row names it. Its packs go up again in a
/// fresh bundle, and the rows name that one.
#[test]
fn an_owed_row_naming_a_bundle_near_its_grace_is_uploaded_again_not_indexed() {
    let fx = Fixture::new();
    fx.record("p", Duration::from_secs(2));
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 3);
    let (mut path, catalog) = gated_path(&fx, own.dir(), |p| {
        reconfigure(&mut p.uploader, |u| {
            u.bundle_bytes = 1 << 20;
        })
    });
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let staged: u64 = packs.iter().map(|p| p.bytes).sum();
    let jobs = jobs_of(&path, packs);
    let deadline = Instant::now() + Duration::from_millis(300);
    let done = block_on(path.run(jobs, &cut_after_300ms(deadline), &never));
    assert_eq!(outcome_names(&done), vec!["Owed"; 3]);
    let first: Vec<String> = path.backlog_keys();
    assert!(first.iter().all(|k| k.ends_with(".bundle")), "{first:?}");
    assert_eq!(path.counters().orphaned_bytes(), 0);
    std::thread::sleep(Duration::from_millis(1100));
    catalog.set_open(true);
    let listed = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = path.own_jobs(listed);
    let done = block_on(path.run(jobs, &no_cut(), &never));
    assert_eq!(outcome_names(&done), vec!["Indexed"; 3]);
    assert_eq!(fx.store.calls(Op::Put), 2, "uploaded again");
    assert_eq!(
        path.counters().orphaned_bytes(),
        staged,
        "the abandoned bundle's packs are counted as orphaned bytes"
    );
    let rows = block_on(catalog.list_range(0, u64::MAX)).unwrap();
    assert_eq!(rows.len(), 3);
    assert!(
        rows.iter().all(|r| !first.contains(&r.object_key)),
        "a row names the bundle past half its grace: {first:?}"
    );
    assert_ranges_read_back(&fx, &rows);
}

mod serial {
    use super::*;

    /// The service lets a trickle of small packs wait for a bundle, at most
    /// `bundle_linger` (here 1.5 s) after it first saw them; a flush never
    /// waits.
    #[test]
    fn a_trickle_lingers_for_its_bundle_and_a_flush_does_not() {
        let fx = Fixture::new();
        let own = fx.claim(&fx.dest, 0);
        let mut c = fx.config(own.dir());
        c.adopt = false;
        c.upload.bundle_bytes = 1 << 20;
        c.upload.bundle_linger = Duration::from_millis(1500);
        c.index_linger = Duration::ZERO;
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        stage(own.dir(), 3);
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(700));
        assert_eq!(fx.store.calls(Op::Put), 0, "uploaded before the linger");
        let snap = svc.snapshot();
        assert_eq!(snap.open_bundle.packs, 3, "{snap:?}");
        assert!(
            wait_for(Duration::from_secs(10), || block_on(fx.catalog.count())
                .unwrap()
                == 3),
            "never indexed"
        );
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(1400), "{took:?}");
        assert!(took < Duration::from_millis(3500), "{took:?}");
        assert_eq!(fx.store.calls(Op::Put), 1, "one bundle");

        stage(own.dir(), 2);
        let t = Instant::now();
        assert!(svc.flush(Duration::from_secs(5)).unwrap());
        assert!(
            t.elapsed() < Duration::from_millis(1000),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(block_on(fx.catalog.count()).unwrap(), 5);
        svc.stop().unwrap();
    }
}

/// A crash between a bundle's PUT and its index: the successor uploads
/// the packs again in a bundle of its own and indexes them; the sweep
/// then deletes the first bundle, which no row names, and keeps the one
/// rows name; every row reads back.
#[test]
fn a_bundle_orphaned_by_a_crash_before_its_index_is_swept_and_nothing_is_lost() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage(own.dir(), 5);
    let store = spool_upload::Store::new(fx.store.clone(), "p", "memory", true).unwrap();
    // the destination's grace: 1 s (each drain here indexes within half
    // of it; the sweep waits it out)
    fx.record("p", Duration::from_secs(1));
    let identity = fx.identity();
    let (mut dead, _) = gated_path(&fx, own.dir(), |p| {
        p.uploader = spool_upload::Uploader::new(
            p.uploader.store().clone(),
            bundling(&fx, own.dir(), 1 << 20),
        )
        .unwrap();
    });
    let never = Arc::new(AtomicBool::new(false));
    let packs = spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    let jobs = jobs_of(&dead, packs);
    let deadline = Instant::now() + Duration::from_millis(300);
    let done = block_on(dead.run(jobs, &cut_after_300ms(deadline), &never));
    assert_eq!(outcome_names(&done), vec!["Owed"; 5]);
    let orphan = dead.backlog_keys()[0].clone();
    drop(dead); // the crash: its backlog is gone, its files stay

    let mut successor = upload_path(&fx, own.dir(), bundling(&fx, own.dir(), 1 << 20));
    let done = run_all(&mut successor, own.dir());
    assert_eq!(outcome_names(&done), vec!["Indexed"; 5]);
    assert_eq!(objects(&fx), 2);
    std::thread::sleep(Duration::from_millis(1100));
    let report = block_on(crate::sweep::sweep(
        fx.catalog.as_ref(),
        &store,
        &identity,
        (1000, false),
        &AtomicBool::new(false),
    ))
    .unwrap();
    assert_eq!((report.deleted, report.kept), (1, 1), "{report:?}");
    assert_eq!(objects(&fx), 1);
    let rows = rows(fx.catalog.as_ref());
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().all(|r| r.object_key != orphan));
    assert_ranges_read_back(&fx, &rows);
}

/// Packs that fill a bundle to the byte: the bundle still closes (the
/// feed keeps one pack past it), and one run drains them all. (A run once
/// ended with every pack not done, and the service cycled on it forever.)
#[test]
fn packs_that_fill_a_bundle_exactly_still_close_it() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    stage_sized(own.dir(), 60, 1000);
    let never = Arc::new(AtomicBool::new(false));
    let size = spool_core::spool::scan_dir(own.dir(), &never).unwrap()[0].bytes;
    let mut p = parts(&fx, own.dir(), bundling(&fx, own.dir(), 20 * size));
    p.pipeline_depth = 1024;
    p.index_batch = 256;
    let mut path = Drain::new(p);
    let done = run_all(&mut path, own.dir());
    assert_eq!(outcome_names(&done), vec!["Indexed"; 60]);
    assert_eq!(fx.store.calls(Op::Put), 3, "three full bundles");
}

/// A run a stream's linger holds back rides in front of the cycle's next
/// run: one bundle for both, each run's outcomes back to its own stream;
/// riders no run took are dropped at the cycle's end, never carried into
/// the next cycle's runs (their stream lists them again).
#[test]
fn parked_packs_ride_along_the_next_run_of_the_cycle_only() {
    let fx = Fixture::new();
    let own = fx.claim(&fx.dest, 0);
    let mut path = upload_path(&fx, own.dir(), bundling(&fx, own.dir(), 1 << 20));
    let never = Arc::new(AtomicBool::new(false));
    let listed = || spool_core::spool::scan_dir(own.dir(), &never).unwrap();
    // two streams park, one pack each: both ride, neither replaces the other
    stage(own.dir(), 1);
    let first = jobs_of(&path, listed());
    path.park(crate::drain::Stream::Own, first.clone());
    stage(own.dir(), 1);
    let first_id = first[0].pack().id;
    let second: Vec<Job> = jobs_of(&path, listed())
        .into_iter()
        .filter(|j| j.pack().id != first_id)
        .collect();
    path.park(crate::drain::Stream::HandOff, second.clone());
    let parked_ids: std::collections::HashSet<_> =
        first.iter().chain(&second).map(|j| j.pack().id).collect();
    stage(own.dir(), 3);
    let fresh: Vec<Job> = jobs_of(&path, listed())
        .into_iter()
        .filter(|j| !parked_ids.contains(&j.pack().id))
        .collect();
    let done = block_on(path.run(fresh, &no_cut(), &never));
    assert_eq!(outcome_names(&done), vec!["Indexed"; 3], "the run's own");
    let carried = path.end_cycle();
    assert_eq!(carried.len(), 2);
    for (stream, job, outcome) in &carried {
        let parked_by = if job.pack().id == first_id {
            crate::drain::Stream::Own
        } else {
            crate::drain::Stream::HandOff
        };
        assert_eq!(*stream, parked_by);
        assert!(parked_ids.contains(&job.pack().id));
        assert!(matches!(outcome, PackOutcome::Indexed), "{outcome:?}");
    }
    assert_eq!(block_on(fx.objects()), 1, "five packs, one bundle");
    assert_ranges_read_back(&fx, &rows(&*fx.catalog));

    // parked, and the cycle ends with no other run: dropped
    let dropped = stage(own.dir(), 1)[0];
    path.park(crate::drain::Stream::Own, jobs_of(&path, listed()));
    assert!(path.end_cycle().is_empty());
    stage(own.dir(), 1);
    let next = jobs_of(&path, listed());
    assert_eq!(next.len(), 2, "the dropped rider is still ready");
    let lone = next
        .into_iter()
        .filter(|j| j.pack().id != dropped)
        .collect();
    let done = block_on(path.run(lone, &no_cut(), &never));
    assert_eq!(done.len(), 1);
    assert!(path.end_cycle().is_empty(), "nothing rode the next cycle");
    assert_eq!(
        spool_core::spool::scan_dir(own.dir(), &never)
            .unwrap()
            .len(),
        1
    );
}
