//! Unit tests of the sink: on the in-memory [`MemoryTarget`] (admission,
//! sealing, release), `on_disk` on a real [`Spool`], and `serial` for the
//! liveness bounds.

use super::fake::MemoryTarget;
use super::*;
use crate::registry::Waker;

const DIR: &str = "/nonexistent/spool/key/r0-0000abcd";

/// What an empty pack weighs finished (header, footer, trailer).
fn overhead() -> u64 {
    PackWriter::new(PackId::generate(), 0).finished_len() as u64
}

fn config(registry: &Arc<Registry>) -> SinkConfig {
    SinkConfig {
        spool: SpoolConfig::default(),
        ordinal: None,
        seal_bytes: 1 << 20,
        seal_records: 1_000,
        seal_age: Duration::from_secs(3600),
        admission: AdmissionPolicy::Refuse,
        buffer_bytes: 16 << 20,
        release_flush_timeout: Duration::from_secs(10),
        registry: registry.clone(),
        hand_off: false,
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn open(target: &Arc<MemoryTarget>, config: SinkConfig) -> Sink {
    Sink::start(target.clone(), config).expect("sink starts")
}

/// A fresh registry, an open fake, and a sink on it with `adjust`ed
/// settings.
fn sink_with(adjust: impl FnOnce(&mut SinkConfig)) -> (Arc<Registry>, Arc<MemoryTarget>, Sink) {
    let registry = Arc::new(Registry::new());
    let target = MemoryTarget::new(DIR);
    let mut config = config(&registry);
    adjust(&mut config);
    let sink = open(&target, config);
    (registry, target, sink)
}

#[test]
fn open_claimed_owns_the_claim_released_after_sealing_kept_when_not() {
    let root = tempfile::tempdir().unwrap();
    let key = "0123456789ab";
    let opts = spool_lock::LockOptions::default();
    let registry = Arc::new(Registry::new());
    // Sealed on release: the drop lets go of the claim, the pack stays.
    let claim = crate::layout::claim_rank_dir(root.path(), key, 0, &opts).unwrap();
    let dir = claim.dir().to_path_buf();
    let sink = Sink::open_claimed(claim, config(&registry)).unwrap();
    assert!(spool_lock::held_by_this_process(&dir).unwrap());
    sink.write(b"one").unwrap();
    sink.release().unwrap();
    drop(sink);
    assert!(!spool_lock::read_owner(&dir).unwrap().held, "released");
    assert!(!spool_lock::held_claims().contains(&dir));
    let ready = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "ready"))
        .count();
    assert_eq!(ready, 1, "the pack stays for the adopter");
    // Not sealed (its spool refuses every stage): the claim is kept.
    let claim = crate::layout::claim_rank_dir(root.path(), key, 1, &opts).unwrap();
    let dir = claim.dir().to_path_buf();
    let mut cfg = config(&registry);
    cfg.spool.max_bytes = Some(8);
    cfg.release_flush_timeout = Duration::from_millis(100);
    let sink = Sink::open_claimed(claim, cfg).unwrap();
    sink.write(b"too big for the budget").unwrap();
    assert!(sink.release().is_err());
    drop(sink);
    assert!(
        spool_lock::held_claims().contains(&dir),
        "an unsealed sink keeps its claim until exit"
    );
}

#[test]
fn seals_by_record_count() {
    let (_, target, sink) = sink_with(|c| {
        c.seal_records = 3;
    });
    for i in 0..7u8 {
        sink.write(&[i; 10]).unwrap();
    }
    wait_for("two full packs staged", || target.staged().len() == 2);
    assert_eq!(
        sink.stats().pending_packs,
        0,
        "the seventh record is still open"
    );
    sink.flush(Duration::from_secs(10)).unwrap();
    let staged = target.staged();
    assert_eq!(staged.len(), 3);
    let one_record = overhead() + 4 + 10;
    assert_eq!(staged[0].bytes.len() as u64, one_record + 2 * 14);
    assert_eq!(staged[2].bytes.len() as u64, one_record);
}

#[test]
fn seals_by_size_without_exceeding_it() {
    let registry = Arc::new(Registry::new());
    let target = MemoryTarget::new(DIR);
    // Room for exactly three 100-byte records per pack.
    let seal_bytes = overhead() + 3 * 104;
    let sink = open(
        &target,
        SinkConfig {
            seal_bytes,
            ..config(&registry)
        },
    );
    for _ in 0..9 {
        sink.write(&[7; 100]).unwrap();
    }
    wait_for("three packs", || target.staged().len() == 3);
    sink.flush(Duration::from_secs(10)).unwrap();
    // A record that brings the pack to exactly seal_bytes still fits.
    let staged = target.staged();
    assert_eq!(staged.len(), 3, "three records a pack");
    assert!(staged.iter().all(|s| s.bytes.len() as u64 == seal_bytes));
    // Two records, then one that would not fit beside them: the open
    // pack is sealed before it.
    sink.write(&[1; 100]).unwrap();
    sink.write(&[1; 100]).unwrap();
    sink.write(&[1; 105]).unwrap();
    sink.flush(Duration::from_secs(10)).unwrap();
    let staged = target.staged();
    assert_eq!(staged.len(), 5);
    assert!(staged.iter().all(|s| s.bytes.len() as u64 <= seal_bytes));
    // A record larger than seal_bytes gets a pack of its own.
    sink.write(&vec![2; seal_bytes as usize]).unwrap();
    wait_for("the oversized pack", || target.staged().len() == 6);
}

#[test]
fn a_released_sink_admits_nothing() {
    let (_, target, sink) = sink_with(|_| {});
    sink.write(b"one").unwrap();
    sink.release().unwrap();
    let err = sink.write(b"two").unwrap_err();
    assert!(matches!(err, Error::SinkReleased { .. }), "{err}");
    assert!(err.to_string().contains(DIR), "{err}");
    assert_eq!(
        target.staged().len(),
        1,
        "what it held was staged on release"
    );
}

#[test]
fn sealed_on_release_only_after_a_release_whose_flush_went_through() {
    let (registry, _, sink) = sink_with(|_| {});
    let point = registry.get_or_create(Path::new(DIR), None);
    assert!(!sink.sealed_on_release(), "false while attached");
    assert!(point.read().is_some(), "published at open");
    sink.write(b"record").unwrap();
    sink.flush(Duration::from_secs(10)).unwrap();
    assert!(!sink.sealed_on_release(), "a flush is not a release");
    sink.release().unwrap();
    assert!(sink.sealed_on_release());
    assert_eq!(point.read().unwrap().staged_packs, 1);
    sink.release().unwrap();
    assert!(sink.sealed_on_release(), "a second release changes nothing");
}

#[test]
fn a_release_whose_stage_fails_does_not_seal() {
    let (_, target, sink) = sink_with(|c| {
        c.release_flush_timeout = Duration::from_millis(200);
    });
    sink.write(b"record").unwrap();
    target.set_failure(Some("disk on fire"));
    let err = sink.release().unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, Error::FlushTimeout { packs: 1, .. }),
        "{text}"
    );
    assert!(text.contains("disk on fire"), "{text}");
    assert!(!sink.sealed_on_release());
    assert!(matches!(sink.write(b"x"), Err(Error::SinkReleased { .. })));
    // The failure clears: a retried release goes through.
    target.set_failure(None);
    sink.release().unwrap();
    assert!(sink.sealed_on_release());
    assert_eq!(target.staged().len(), 1);
}

#[test]
fn registry_is_published_only_after_the_stage_returned() {
    let registry = Arc::new(Registry::new());
    let target = MemoryTarget::new(DIR);
    let reader = registry.register_waker(Waker::current_thread());
    let sink = open(
        &target,
        SinkConfig {
            seal_records: 1,
            ..config(&registry)
        },
    );
    let point = registry.get_or_create(Path::new(DIR), None);
    reader.take_dirty();
    target.close_gate();
    sink.write(b"held at the gate").unwrap();
    wait_for("the stage to be in progress", || target.entered() == 1);
    assert!(
        reader.take_dirty().is_empty(),
        "nothing published mid-stage"
    );
    assert_eq!(point.read().unwrap().last_pack, None);
    target.open_gate();
    // A woken reader drains, then reads the point, then looks for the pack.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let dirty = reader.take_dirty();
        if dirty.contains(Path::new(DIR)) {
            let published = point.read().unwrap();
            let last = published.last_pack.expect("a pack was published");
            assert!(
                target.staged().iter().any(|s| s.id == last),
                "the woken reader finds the published pack staged"
            );
            assert_eq!(published.staged_packs, 1);
            break;
        }
        assert!(Instant::now() < deadline, "never woken");
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// A sink's `Debug` (what logs and panics print) names its spool
/// directory and its ordinal, nothing else.
#[test]
fn a_sinks_debug_names_its_directory_and_ordinal() {
    let (_registry, _target, sink) = sink_with(|c| c.ordinal = Some(3));
    assert_eq!(
        format!("{sink:?}"),
        format!("Sink {{ dir: {DIR:?}, ordinal: Some(3) }}")
    );
}

#[test]
fn ordinals_get_their_own_slots_and_carry_the_count_over() {
    let (registry, target, w3) = sink_with(|c| {
        c.ordinal = Some(3);
        c.seal_records = 1;
    });
    let w5 = open(
        &target,
        SinkConfig {
            ordinal: Some(5),
            seal_records: 1,
            ..config(&registry)
        },
    );
    // The engine finds a worker's sink by this ordinal.
    assert_eq!((w3.ordinal(), w5.ordinal()), (Some(3), Some(5)));
    w3.write(b"a").unwrap();
    w3.write(b"b").unwrap();
    w5.write(b"c").unwrap();
    w3.flush(Duration::from_secs(10)).unwrap();
    w5.flush(Duration::from_secs(10)).unwrap();
    let ordinals: Vec<_> = target.staged().iter().map(|s| s.ordinal).collect();
    assert_eq!(ordinals.iter().filter(|o| **o == Some(3)).count(), 2);
    assert_eq!(ordinals.iter().filter(|o| **o == Some(5)).count(), 1);
    let slots = registry.points_of(Path::new(DIR));
    assert_eq!(slots.len(), 2);
    assert_eq!(slots[0].read().unwrap().staged_packs, 2);
    assert_eq!(slots[1].read().unwrap().staged_packs, 1);
    drop(w3);
    // A new sink on the same slot continues the counter, attached again.
    let again = open(
        &target,
        SinkConfig {
            ordinal: Some(3),
            seal_records: 1,
            ..config(&registry)
        },
    );
    let point = registry.get_or_create(Path::new(DIR), Some(3));
    assert_eq!(point.read().unwrap().staged_packs, 2);
    again.write(b"d").unwrap();
    again.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(point.read().unwrap().staged_packs, 3);
}

#[test]
fn dropping_an_unreleased_sink_releases_it() {
    let (registry, target, sink) = sink_with(|_| {});
    sink.write(b"tail").unwrap();
    drop(sink);
    assert_eq!(target.staged().len(), 1, "the tail was sealed and staged");
    let point = registry.get_or_create(Path::new(DIR), None);
    assert_eq!(point.read().unwrap().staged_packs, 1);
}

#[test]
fn concurrent_producers_lose_nothing() {
    let registry = Arc::new(Registry::new());
    let target = MemoryTarget::new(DIR);
    let sink = Arc::new(open(
        &target,
        SinkConfig {
            seal_records: 7,
            buffer_bytes: 4096,
            admission: AdmissionPolicy::Block(Duration::from_secs(30)),
            ..config(&registry)
        },
    ));
    let producers: Vec<_> = (0..4u8)
        .map(|p| {
            let sink = sink.clone();
            std::thread::spawn(move || {
                for i in 0..250u32 {
                    let mut record = vec![p];
                    record.extend_from_slice(&i.to_le_bytes());
                    sink.write(&record).unwrap();
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    sink.flush(Duration::from_secs(30)).unwrap();
    let mut seen = vec![Vec::new(); 4];
    for staged in target.staged() {
        crate::pack::validate_bytes(&staged.bytes, Some(staged.id)).expect("a valid pack");
        let mut reader = crate::PackReader::new(&staged.bytes[..]).unwrap();
        while let Some(record) = reader.next_record().unwrap() {
            let i = u32::from_le_bytes(record[1..5].try_into().unwrap());
            seen[record[0] as usize].push(i);
        }
    }
    for (p, order) in seen.iter().enumerate() {
        assert_eq!(
            *order,
            (0..250).collect::<Vec<u32>>(),
            "producer {p}: every record once, in order"
        );
    }
    assert_eq!(sink.stats().buffered_bytes, 0);
}

#[test]
fn bad_configs_are_refused() {
    let registry = Arc::new(Registry::new());
    let target = MemoryTarget::new(DIR);
    for bad in [
        SinkConfig {
            seal_bytes: 0,
            ..config(&registry)
        },
        SinkConfig {
            seal_records: 0,
            ..config(&registry)
        },
        SinkConfig {
            buffer_bytes: 0,
            ..config(&registry)
        },
        SinkConfig {
            seal_age: Duration::ZERO,
            ..config(&registry)
        },
    ] {
        let err = Sink::start(target.clone(), bad).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    }
}

/// The sink on a real spool directory.
mod on_disk {
    use super::*;
    use crate::lk::LockMode;
    use std::sync::atomic::AtomicBool;

    fn real_config(registry: &Arc<Registry>) -> SinkConfig {
        SinkConfig {
            seal_records: 1,
            ..config(registry)
        }
    }

    #[test]
    fn an_ordinal_stages_valid_packs_under_its_worker_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r0-00000001");
        let registry = Arc::new(Registry::new());
        let sink = Sink::open(
            &dir,
            SinkConfig {
                ordinal: Some(4),
                ..real_config(&registry)
            },
        )
        .unwrap();
        sink.write(b"hello").unwrap();
        sink.flush(Duration::from_secs(10)).unwrap();
        let id = sink.stats().last_staged.unwrap();
        let path = dir.join("w4").join(format!("{}.ready", id.to_hex()));
        let summary = crate::spool::validate_file(&path, id, &AtomicBool::new(false)).unwrap();
        // the checksum the sink reports is the staged pack's whole SHA-256
        // (what `spool produce --print-sha256` prints for the torture's
        // oracle, and `sha256sum` of the file)
        assert_eq!(
            sink.stats().last_staged_sha256,
            Some(<sha2::Sha256 as sha2::Digest>::digest(std::fs::read(&path).unwrap()).into())
        );
        assert_eq!(sink.stats().last_staged_sha256, Some(summary.sha256));
        assert!(!dir.join(format!("{}.ready", id.to_hex())).exists());
        let point = registry.get_or_create(sink.dir(), Some(4));
        assert_eq!(point.read().unwrap().last_pack, Some(id));
    }

    #[test]
    fn a_woken_readers_scan_sees_every_published_pack() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r0-00000001");
        let registry = Arc::new(Registry::new());
        let sink = Sink::open(&dir, real_config(&registry)).unwrap();
        let id = sink.dir().to_path_buf();
        let reader = registry.register_waker(Waker::current_thread());
        let producer = {
            let sink = Arc::new(sink);
            let s = sink.clone();
            (
                std::thread::spawn(move || {
                    for i in 0..50u32 {
                        s.write(&i.to_le_bytes()).unwrap();
                    }
                    s.flush(Duration::from_secs(30)).unwrap();
                }),
                sink,
            )
        };
        let point = registry.get_or_create(&id, None);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut checked = 0;
        loop {
            reader.take_dirty();
            let published = point.read().unwrap();
            if let Some(last) = published.last_pack {
                let ready = crate::spool::scan_dir(&id, &AtomicBool::new(false)).unwrap();
                assert!(
                    ready.iter().any(|p| p.id == last),
                    "published pack {} is not in the scan",
                    last.to_hex()
                );
                assert!(ready.len() as u64 >= published.staged_packs);
                checked += 1;
            }
            if published.staged_packs == 50 {
                break;
            }
            assert!(Instant::now() < deadline, "never saw all 50 packs");
            std::thread::park_timeout(Duration::from_secs(5));
        }
        assert!(checked > 0);
        producer.0.join().unwrap();
    }

    #[test]
    fn the_claim_is_let_go_only_after_sealing_on_release() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = Arc::new(Registry::new());

        // Sealed: the claim is released with the sink.
        let sealed = tmp.path().join("r0-00000001");
        let sink = Sink::open(&sealed, real_config(&registry)).unwrap();
        sink.write(b"x").unwrap();
        sink.release().unwrap();
        drop(sink);
        Spool::open(&sealed, &SpoolConfig::default()).expect("the claim was let go");

        // Not sealed (the spool is full): the claim is kept.
        let kept = tmp.path().join("r0-00000002");
        let spool = SpoolConfig {
            max_bytes: Some(10),
            ..SpoolConfig::default()
        };
        let sink = Sink::open(
            &kept,
            SinkConfig {
                spool,
                release_flush_timeout: Duration::from_millis(100),
                ..real_config(&registry)
            },
        )
        .unwrap();
        sink.write(b"x").unwrap();
        assert!(sink.release().is_err());
        assert!(!sink.sealed_on_release());
        drop(sink);
        let err = Spool::open(&kept, &SpoolConfig::default()).unwrap_err();
        assert!(matches!(err, Error::Lock(_)), "{err}");
    }

    #[test]
    fn held_by_caller_stages_beside_the_callers_claim() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r0-00000001");
        let registry = Arc::new(Registry::new());
        let owner = Spool::open(&dir, &SpoolConfig::default()).unwrap();
        let spool = SpoolConfig {
            lock_mode: LockMode::HeldByCaller,
            ..SpoolConfig::default()
        };
        let sink = Sink::open(
            &dir,
            SinkConfig {
                spool,
                ..real_config(&registry)
            },
        )
        .unwrap();
        sink.write(b"x").unwrap();
        sink.release().unwrap();
        drop(sink);
        assert_eq!(owner.scan(&AtomicBool::new(false)).unwrap().len(), 1);
    }
}

/// Liveness bounds: run one at a time (nextest `serial` group).
mod serial {
    use super::*;

    const BOUND: Duration = Duration::from_secs(1);

    /// A hand-off sink consents to each pack once it is staged, keeps it
    /// until the shipper confirms it, and at rest removes it (then its ref)
    /// promptly after the confirmation appears: woken by the kernel, not a
    /// poll. Without hand-off nothing is consented.
    #[test]
    fn a_hand_off_sink_consents_and_removes_a_pack_promptly_once_confirmed() {
        let tmp = tempfile::tempdir().unwrap();
        let key = tmp.path().join("0123456789ab");
        std::fs::create_dir_all(&key).unwrap();
        let dir = key.join("r0-h-1-1");
        let registry = Arc::new(Registry::new());
        let sink = Sink::open(
            &dir,
            SinkConfig {
                seal_records: 1,
                hand_off: true,
                ..config(&registry)
            },
        )
        .unwrap();
        sink.write(b"one").unwrap();
        sink.flush(Duration::from_secs(5)).unwrap();
        let id = sink.stats().last_staged.unwrap();
        let consented = crate::handoff::list_consented(sink.dir()).unwrap();
        assert_eq!(
            consented.packs.iter().map(|p| p.id).collect::<Vec<_>>(),
            vec![id]
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            sink.dir().join(format!("{id}.ready")).exists(),
            "removed unconfirmed"
        );
        let t = Instant::now();
        crate::handoff::confirm(sink.dir(), &[(None, id)], &spool_lock::Access::PRIVATE).unwrap();
        wait_for("the confirmed pack's removal", || {
            !sink.dir().join(format!("{id}.ready")).exists()
        });
        assert!(t.elapsed() < BOUND, "removed after {:?}", t.elapsed());
        wait_for("its ref's removal", || {
            !sink.dir().join("_refs").join(format!("{id}.ref")).exists()
        });
        drop(sink);
        // without hand-off, no consent
        let plain = Sink::open(
            &key.join("r1-h-1-1"),
            SinkConfig {
                seal_records: 1,
                ..config(&registry)
            },
        )
        .unwrap();
        plain.write(b"two").unwrap();
        plain.flush(Duration::from_secs(5)).unwrap();
        assert!(!plain.dir().join("_refs").exists());
    }

    /// A target that is full, and a sink whose buffer holds one pack.
    fn full_sink(admission: AdmissionPolicy) -> (Arc<MemoryTarget>, Sink) {
        let registry = Arc::new(Registry::new());
        let target = MemoryTarget::new(DIR);
        target.set_budget(Some(0));
        let sink = open(
            &target,
            SinkConfig {
                seal_records: 1,
                buffer_bytes: 2 * (overhead() + 104),
                admission,
                // The drop at the end releases against a full spool.
                release_flush_timeout: Duration::from_millis(100),
                ..config(&registry)
            },
        );
        (target, sink)
    }

    fn fill(target: &MemoryTarget, sink: &Sink) {
        sink.write(&[0; 100]).unwrap();
        sink.write(&[0; 100]).unwrap();
        wait_for("a refused stage", || {
            target.attempts() > 0 && sink.stats().spool_full.is_some()
        });
    }

    #[test]
    fn seals_by_age() {
        let (_, target, sink) = sink_with(|c| {
            c.seal_age = Duration::from_millis(100);
        });
        let start = Instant::now();
        sink.write(b"lonely").unwrap();
        wait_for("the age seal", || target.staged().len() == 1);
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(100), "sealed early: {took:?}");
        assert!(
            took < Duration::from_millis(100) + BOUND,
            "sealed late: {took:?}"
        );
    }

    #[test]
    fn refuse_returns_at_once_naming_dir_used_and_budget() {
        let (target, sink) = full_sink(AdmissionPolicy::Refuse);
        fill(&target, &sink);
        let start = Instant::now();
        let err = sink.write(&[0; 100]).unwrap_err();
        assert!(start.elapsed() < BOUND, "refused at once");
        let text = err.to_string();
        assert!(
            matches!(
                err,
                Error::SpoolFull {
                    used: 0,
                    budget: 0,
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains(DIR) && text.contains("0 of 0 bytes used"),
            "{text}"
        );
        assert_eq!(target.staged().len(), 0);
    }

    #[test]
    fn write_with_refuse_returns_at_once_whatever_the_configured_policy() {
        let (target, sink) = full_sink(AdmissionPolicy::Block(Duration::from_secs(30)));
        fill(&target, &sink);
        let start = Instant::now();
        let err = sink
            .write_with(&[0; 100], AdmissionPolicy::Refuse)
            .unwrap_err();
        assert!(
            start.elapsed() < BOUND,
            "refused at once: {:?}",
            start.elapsed()
        );
        assert!(matches!(err, Error::SpoolFull { .. }), "{err}");
        // ...and a block of its own waits its own deadline, not 30 s.
        let wait = Duration::from_millis(300);
        let start = Instant::now();
        let err = sink
            .write_with(&[0; 100], AdmissionPolicy::Block(wait))
            .unwrap_err();
        let took = start.elapsed();
        assert!(took >= wait && took < wait + BOUND, "took {took:?}");
        assert!(matches!(err, Error::SpoolFull { .. }), "{err}");
    }

    #[test]
    fn block_returns_by_its_deadline_with_the_error() {
        let wait = Duration::from_millis(300);
        let (target, sink) = full_sink(AdmissionPolicy::Block(wait));
        fill(&target, &sink);
        let start = Instant::now();
        let err = sink.write(&[0; 100]).unwrap_err();
        let took = start.elapsed();
        assert!(took >= wait && took < wait + BOUND, "took {took:?}");
        assert!(matches!(err, Error::SpoolFull { .. }), "{err}");
    }

    #[test]
    fn block_admits_once_space_returns() {
        let (target, sink) = full_sink(AdmissionPolicy::Block(Duration::from_secs(30)));
        fill(&target, &sink);
        let t = target.clone();
        let freer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            t.set_budget(None);
        });
        sink.write(&[0; 100])
            .expect("admitted once the spool had room");
        freer.join().unwrap();
        sink.flush(Duration::from_secs(10)).unwrap();
        assert_eq!(target.staged().len(), 3);
    }

    #[test]
    fn flush_returns_by_its_deadline_while_a_stage_hangs() {
        let (_, target, sink) = sink_with(|_| {});
        // One pack staged before: the count is of the packs still owed.
        sink.write(b"staged").unwrap();
        sink.flush(Duration::from_secs(10)).unwrap();
        target.close_gate();
        sink.write(b"stuck").unwrap();
        let timeout = Duration::from_millis(300);
        let start = Instant::now();
        let err = sink.flush(timeout).unwrap_err();
        let took = start.elapsed();
        assert!(took >= timeout && took < timeout + BOUND, "took {took:?}");
        assert!(matches!(err, Error::FlushTimeout { packs: 1, .. }), "{err}");
        assert!(err.to_string().contains("in progress"), "{err}");
        target.open_gate();
        sink.flush(Duration::from_secs(10)).unwrap();
    }

    #[test]
    fn release_times_out_by_its_deadline_and_does_not_seal() {
        let registry = Arc::new(Registry::new());
        let target = MemoryTarget::new(DIR);
        let timeout = Duration::from_millis(300);
        let sink = open(
            &target,
            SinkConfig {
                release_flush_timeout: timeout,
                ..config(&registry)
            },
        );
        target.close_gate();
        sink.write(b"stuck").unwrap();
        let start = Instant::now();
        assert!(sink.release().is_err());
        let took = start.elapsed();
        assert!(took >= timeout && took < timeout + BOUND, "took {took:?}");
        assert!(!sink.sealed_on_release(), "false after a timed-out release");
        target.open_gate();
        sink.release().unwrap();
        assert!(sink.sealed_on_release());
    }

    /// A refused stage is retried with a backoff that doubles from 20 ms to
    /// its cap (retries at 20, 60, 140, 300, 620 and 1260 ms: 6 in 2 s), not
    /// every 20 ms (100 in 2 s): a full spool is not polled hot.
    #[test]
    fn a_refused_stage_is_retried_with_a_doubling_backoff() {
        let (target, sink) = full_sink(AdmissionPolicy::Refuse);
        fill(&target, &sink);
        let first = target.attempts();
        std::thread::sleep(Duration::from_secs(2));
        let retries = target.attempts() - first;
        assert!((3..=12).contains(&retries), "{retries} retries in 2 s");
        assert!(target.staged().is_empty());
        drop(sink);
    }

    #[test]
    fn flush_retries_a_full_spool_without_waiting_out_the_backoff() {
        let (target, sink) = full_sink(AdmissionPolicy::Refuse);
        fill(&target, &sink);
        // Let the backoff grow to its cap.
        std::thread::sleep(MAX_RETRY_BACKOFF * 2);
        target.set_budget(None);
        let start = Instant::now();
        sink.flush(Duration::from_secs(10)).unwrap();
        assert!(start.elapsed() < BOUND, "took {:?}", start.elapsed());
        assert_eq!(target.staged().len(), 2);
    }
}
