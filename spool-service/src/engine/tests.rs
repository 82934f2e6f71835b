//! Engine tests on fakes: the memory catalog, the
//! fault-scripting store, real temp directories and real locks.

use std::time::Duration;

use spool_catalog::Catalog;
use spool_core::sink::{AdmissionPolicy, SinkConfig};
use spool_upload::testing::{Action, Injected, Op, Rule};

use crate::engine::{Engine, EngineConfig, HandOffConfig, Shipping};
use crate::service::tests::Fixture;
use crate::Error;

/// One sink sealing every record into its own pack.
fn sink() -> SinkConfig {
    SinkConfig {
        seal_records: 1,
        release_flush_timeout: Duration::from_secs(5),
        ..SinkConfig::default()
    }
}

fn engine_config(fx: &Fixture, sinks: Vec<SinkConfig>) -> EngineConfig {
    // The service config's dir is set by the engine; any path will do here.
    let mut service = fx.config(&fx.root);
    service.lock_mode = spool_lock::LockMode::Take; // the engine must override it
    EngineConfig {
        spool_root: fx.root.clone(),
        rank: 3,
        shipping: Shipping::Itself(Box::new(service)),
        sinks,
        close_flush_timeout: Duration::from_secs(10),
    }
}

/// The service config of an engine config that ships itself.
fn service(cfg: &mut EngineConfig) -> &mut crate::ServiceConfig {
    match &mut cfg.shipping {
        Shipping::Itself(s) => s,
        Shipping::Daemon(_) => panic!("a hand-off engine has no service config"),
    }
}

/// Makes `cfg` ship through the node's daemon, keeping its destination,
/// lock, registry and budget.
fn ship_by_daemon(cfg: &mut EngineConfig) {
    let s = service(cfg).clone();
    cfg.shipping = Shipping::Daemon(HandOffConfig {
        destination: s.destination,
        lock: s.lock,
        registry: s.registry,
        max_bytes: s.max_bytes,
    });
}

/// The node's shipper (rank 8, adopting, so the hand-off's shipper too)
/// with `sinks`, bundling packs under `bundle_bytes` for up to `linger`.
fn bundling_shipper(
    fx: &Fixture,
    sinks: Vec<SinkConfig>,
    bundle_bytes: u64,
    linger: Duration,
) -> EngineConfig {
    let mut cfg = engine_config(fx, sinks);
    service(&mut cfg).adopt = true;
    service(&mut cfg).upload.bundle_bytes = bundle_bytes;
    service(&mut cfg).upload.bundle_linger = linger;
    cfg.rank = 8;
    cfg
}

/// Rank `rank` with one sink, handing its packs off to `shipper` (the
/// same registry).
fn hand_off_rank(fx: &Fixture, shipper: &mut EngineConfig, rank: u64) -> EngineConfig {
    let mut cfg = engine_config(fx, vec![sink()]);
    cfg.rank = rank;
    service(&mut cfg).registry = service(shipper).registry.clone();
    ship_by_daemon(&mut cfg);
    cfg
}

fn rank_dirs(fx: &Fixture) -> Vec<std::path::PathBuf> {
    let key_dir = fx.root.join(fx.dest.catalog_key().unwrap());
    std::fs::read_dir(key_dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| !p.ends_with(spool_lock::RESERVE_NAME))
                .collect()
        })
        .unwrap_or_default()
}

fn ready(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "ready"))
        .count()
}

#[test]
fn start_claims_then_starts_the_service_then_opens_sinks_held_by_caller() {
    let fx = Fixture::new();
    let mut cfg = engine_config(&fx, vec![sink(), sink()]);
    let registry = service(&mut cfg).registry.clone();
    let engine = Engine::start(cfg).unwrap();
    let dir = engine.dir().to_path_buf();
    // The claim: a fresh rank directory under the key, held by this process.
    assert_eq!(rank_dirs(&fx), vec![dir.clone()]);
    let name = dir.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("r3-"), "{name}");
    assert!(spool_lock::held_by_this_process(&dir).unwrap());
    // The service runs on it (its loop registered a reader) ...
    assert_eq!(engine.service().unwrap().dir(), dir);
    assert_eq!(registry.readers(), 1);
    // ... and both sinks publish into the service's registry.
    assert_eq!(engine.sinks().len(), 2);
    assert!(!registry.points_of(&dir).is_empty());
    let report = engine.close();
    assert!(
        report.removed && report.sealed && report.drained,
        "{report:?}"
    );
    assert_eq!(registry.readers(), 0, "the service's reader is gone");
}

#[test]
fn a_clean_close_without_a_flush_seals_ships_the_tail_and_removes_the_directory() {
    let fx = Fixture::new();
    let engine = Engine::start(engine_config(&fx, vec![sink()])).unwrap();
    let dir = engine.dir().to_path_buf();
    for i in 0..3 {
        engine.sinks()[0]
            .write(format!("record {i}").as_bytes())
            .unwrap();
    }
    let report = engine.close();
    assert!(report.sealed, "{report:?}");
    assert!(report.drained, "{report:?}");
    assert!(report.removed, "{report:?}");
    assert!(
        !report.claim_kept && report.problems.is_empty(),
        "{report:?}"
    );
    assert!(!dir.exists(), "the rank directory is removed");
    let count = crate::service::tests::block_on(fx.catalog.count()).unwrap();
    assert_eq!(count, 3, "every record's pack is indexed");
    assert_eq!(crate::service::tests::block_on(fx.objects()), 3);
}

#[test]
fn with_the_store_down_a_close_keeps_the_directory_unlocked_with_its_packs() {
    let fx = Fixture::new();
    fx.store
        .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))));
    let mut cfg = engine_config(&fx, vec![sink()]);
    cfg.close_flush_timeout = Duration::from_millis(800);
    let engine = Engine::start(cfg).unwrap();
    let dir = engine.dir().to_path_buf();
    engine.sinks()[0].write(b"one").unwrap();
    engine.sinks()[0].write(b"two").unwrap();
    let report = engine.close();
    assert!(report.sealed && !report.drained, "{report:?}");
    assert!(!report.removed && !report.claim_kept, "{report:?}");
    assert!(
        report.problems.iter().any(|p| p.contains("service flush")),
        "{report:?}"
    );
    assert_eq!(ready(&dir), 2, "both packs stay for a successor");
    let owner = spool_lock::read_owner(&dir).unwrap();
    assert!(
        !owner.held,
        "the directory is left unlocked (a dead sibling)"
    );
    assert!(spool_lock::held_claims().is_empty());
}

#[test]
fn a_sink_that_did_not_seal_keeps_the_claim_until_the_process_exits() {
    let fx = Fixture::new();
    let mut full = sink();
    full.spool.max_bytes = Some(64); // no pack fits: staging keeps failing
    full.admission = AdmissionPolicy::Refuse;
    full.release_flush_timeout = Duration::from_millis(300);
    let engine = Engine::start(engine_config(&fx, vec![full])).unwrap();
    let dir = engine.dir().to_path_buf();
    engine.sinks()[0].write(&[7u8; 1024]).unwrap();
    let report = engine.close();
    assert!(!report.sealed && report.claim_kept, "{report:?}");
    assert!(!report.removed, "{report:?}");
    assert!(
        report.problems.iter().any(|p| p.contains("sink 0")),
        "{report:?}"
    );
    assert!(dir.exists());
    assert!(
        spool_lock::held_by_this_process(&dir).unwrap(),
        "the claim is kept: nobody may adopt a directory a sink may still write"
    );
    assert_eq!(spool_lock::held_claims(), vec![dir]);
}

#[test]
fn a_service_that_fails_to_start_leaves_no_lock_and_opens_no_sink() {
    let fx = Fixture::new();
    let mut cfg = engine_config(&fx, vec![sink()]);
    service(&mut cfg).poll_interval = Duration::ZERO; // the service refuses this
    let registry = service(&mut cfg).registry.clone();
    let err = Engine::start(cfg).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    assert!(
        rank_dirs(&fx).is_empty(),
        "the claimed directory is removed"
    );
    assert!(spool_lock::held_claims().is_empty(), "no lock is left");
    assert_eq!(registry.readers(), 0);
    let key_dir = fx.root.join(fx.dest.catalog_key().unwrap());
    assert!(
        registry.points_of(&key_dir).is_empty(),
        "no sink published anything"
    );
}

#[test]
fn a_sink_that_fails_to_open_undoes_the_service_and_the_claim() {
    let fx = Fixture::new();
    let bad = SinkConfig {
        seal_bytes: 0,
        ..sink()
    };
    let mut cfg = engine_config(&fx, vec![sink(), bad]);
    let registry = service(&mut cfg).registry.clone();
    let err = Engine::start(cfg).unwrap_err();
    assert!(matches!(err, Error::Sink { index: 1, .. }), "{err}");
    assert!(
        rank_dirs(&fx).is_empty(),
        "the claimed directory is removed"
    );
    assert!(spool_lock::held_claims().is_empty());
    assert_eq!(registry.readers(), 0, "the service was stopped");
}

#[test]
fn a_daemon_engine_has_no_sink_and_adopts_a_dead_sibling() {
    let fx = Fixture::new();
    let dead = fx.claim(&fx.dest, 0);
    let dead_dir = dead.dir().to_path_buf();
    let ids = crate::service::tests::stage(&dead_dir, 2);
    dead.release().unwrap();
    let mut cfg = engine_config(&fx, Vec::new());
    service(&mut cfg).recheck_interval = Duration::from_millis(100);
    let engine = Engine::start(cfg).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while dead_dir.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !dead_dir.exists(),
        "the dead sibling is adopted and removed"
    );
    for id in ids {
        assert!(
            crate::service::tests::block_on(fx.catalog.get(&id.to_hex()))
                .unwrap()
                .is_some()
        );
    }
    assert!(engine.close().removed);
}

/// Every sink of an engine stages through the
/// directory's one spool, so two sinks with a budget of 10 packs never hold
/// more than 10 packs (a pack in flight is reserved first). With a spool
/// per sink they held up to 20.
#[test]
fn two_sinks_of_an_engine_share_one_budget_for_their_directory() {
    let fx = Fixture::new();
    fx.store
        .script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))));
    let record = vec![0x5a; 1000];
    let pack_len = spool_core::pack::MIN_PACK_LEN + 4 + record.len() as u64;
    let budget = 10 * pack_len;
    let mut s = sink();
    s.spool.max_bytes = Some(budget);
    s.release_flush_timeout = Duration::from_millis(200);
    s.admission = AdmissionPolicy::Refuse;
    let mut cfg = engine_config(&fx, vec![s.clone(), s]);
    cfg.close_flush_timeout = Duration::from_millis(300);
    let engine = Engine::start(cfg).unwrap();
    let dir = engine.dir().to_path_buf();
    let full = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for sink in engine.sinks() {
            let (record, full) = (&record, &full);
            scope.spawn(move || {
                for _ in 0..8 {
                    if sink.write(record).is_err()
                        || sink.flush(Duration::from_millis(300)).is_err()
                    {
                        full.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            });
        }
        for _ in 0..200 {
            assert!(ready(&dir) <= 10, "more than the budget on disk");
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    assert_eq!(ready(&dir), 10, "the budget is filled, never passed");
    assert!(full.load(std::sync::atomic::Ordering::SeqCst) > 0);
    let spool = engine.service().unwrap().spool().unwrap().clone();
    assert!(spool.usage().used() <= budget, "{:?}", spool.usage());
    let told = engine
        .sinks()
        .iter()
        .find_map(|s| s.stats().spool_full)
        .expect("a sink was told the spool is full");
    assert_eq!(told.budget, budget);
    assert!(told.used <= budget, "{told:?}");
    drop(spool);
    engine.close();
}

#[test]
fn open_sink_adds_a_sink_the_close_seals_and_refuses_a_second_on_one_ordinal() {
    let fx = Fixture::new();
    let mut engine = Engine::start(engine_config(&fx, Vec::new())).unwrap();
    let dir = engine.dir().to_path_buf();
    let first = engine.open_sink(sink()).unwrap();
    let err = engine.open_sink(sink()).unwrap_err();
    assert!(
        matches!(err, Error::InvalidConfig { .. }) && err.to_string().contains("ordinal none"),
        "{err}"
    );
    let worker = engine
        .open_sink(SinkConfig {
            ordinal: Some(2),
            ..sink()
        })
        .unwrap();
    assert_eq!(engine.sinks().len(), 2);
    first.write(b"main").unwrap();
    worker.write(b"worker").unwrap();
    // A released sink frees its ordinal.
    first.release().unwrap();
    let again = engine.open_sink(sink()).unwrap();
    again.write(b"again").unwrap();
    let report = engine.close();
    assert!(
        report.sealed && report.drained && report.removed,
        "{report:?}"
    );
    assert!(!dir.exists());
    assert_eq!(
        crate::service::tests::block_on(fx.catalog.count()).unwrap(),
        3
    );
    assert!(
        matches!(
            worker.write(b"late"),
            Err(spool_core::Error::SinkReleased { .. })
        ),
        "a sink handed out is released by the close"
    );
}

/// The packs of `dir` consented to the node's shipper, as `(ordinal, id)`.
fn consented(dir: &std::path::Path) -> Vec<(Option<u32>, spool_core::PackId)> {
    std::fs::read_dir(dir.join(spool_core::spool::REFS_DIR))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| spool_core::handoff::parse_ref_name(e.file_name().to_str()?))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_engine_shipping_by_the_daemon_starts_no_service_and_waits_for_confirmations() {
    let fx = Fixture::new();
    let mut cfg = engine_config(&fx, vec![sink()]);
    let registry = service(&mut cfg).registry.clone();
    ship_by_daemon(&mut cfg);
    let engine = Engine::start(cfg).unwrap();
    let dir = engine.dir().to_path_buf();
    assert!(engine.service().is_none(), "no service of its own");
    assert_eq!(registry.readers(), 0, "no service loop reads the registry");
    for i in 0..3 {
        engine.sinks()[0]
            .write(format!("record {i}").as_bytes())
            .unwrap();
    }
    // Not shipped by itself: a flush waits for the daemon and says so.
    let err = engine.flush(Duration::from_millis(300)).unwrap_err();
    assert!(
        matches!(err, Error::HandOffTimeout { waiting: 3, .. }),
        "{err}"
    );
    assert_eq!(ready(&dir), 3);
    assert_eq!(
        crate::service::tests::block_on(fx.catalog.count()).unwrap(),
        0
    );
    assert_eq!(crate::service::tests::block_on(fx.objects()), 0);
    // The node's shipper confirms two: they leave, the third waits.
    let packs = consented(&dir);
    assert_eq!(packs.len(), 3, "every staged pack is consented");
    spool_core::handoff::confirm(&dir, &packs[..2], &spool_lock::Access::PRIVATE).unwrap();
    assert!(engine.flush(Duration::from_millis(300)).is_err());
    assert_eq!(ready(&dir), 1, "the confirmed packs are removed");
    spool_core::handoff::confirm(&dir, &packs[2..], &spool_lock::Access::PRIVATE).unwrap();
    assert!(engine.flush(Duration::from_secs(5)).unwrap());
    assert_eq!(ready(&dir), 0);
    let report = engine.close();
    assert!(
        report.sealed && report.drained && report.removed && report.problems.is_empty(),
        "{report:?}"
    );
}

#[test]
fn an_engine_shipping_by_the_daemon_leaves_unconfirmed_packs_to_adoption_after_a_stalled_second() {
    let fx = Fixture::new();
    let mut cfg = engine_config(&fx, vec![sink()]);
    ship_by_daemon(&mut cfg);
    cfg.close_flush_timeout = Duration::from_secs(30);
    let engine = Engine::start(cfg).unwrap();
    let dir = engine.dir().to_path_buf();
    engine.sinks()[0].write(b"one").unwrap();
    let started = std::time::Instant::now();
    let report = engine.close();
    let took = started.elapsed();
    assert!(
        report.sealed && !report.drained && !report.removed,
        "{report:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "close waited {took:?} with no daemon (it gives up after a second without a confirmation)"
    );
    assert_eq!(ready(&dir), 1, "the pack stays, for adoption");
    assert!(
        !spool_lock::held_by_this_process(&dir).unwrap(),
        "the directory is let go of: a dead sibling to adopt"
    );
}

/// In one process, an engine shipping by itself (the node's daemon, here
/// holding the node's lease) ships the packs another engine of the same
/// process hands off: a claim this process keeps is served like another
/// process's, and the hand-off engine's flush sees them confirmed.
#[test]
fn the_daemon_ships_a_hand_off_engine_of_its_own_process() {
    let fx = Fixture::new();
    let mut daemon = engine_config(&fx, Vec::new());
    service(&mut daemon).adopt = true;
    daemon.rank = 8;
    let registry = service(&mut daemon).registry.clone();
    let daemon = Engine::start(daemon).unwrap();
    let mut rank = engine_config(&fx, vec![sink()]);
    service(&mut rank).registry = registry;
    ship_by_daemon(&mut rank);
    let rank = Engine::start(rank).unwrap();
    for i in 0..3 {
        rank.sinks()[0]
            .write(format!("record {i}").as_bytes())
            .unwrap();
    }
    assert!(rank.flush(Duration::from_secs(20)).unwrap(), "not shipped");
    assert_eq!(ready(rank.dir()), 0);
    assert_eq!(
        crate::service::tests::block_on(fx.catalog.count()).unwrap(),
        3
    );
    let report = rank.close();
    assert!(report.drained && report.removed, "{report:?}");
    daemon.close();
}

/// The node's daemon puts a dead sibling's packs and the packs live
/// owners hand off in one bundle: the hand-off's waiting packs ride along
/// the adoption step's run instead of waiting out their linger for an
/// object of their own (the drain's `riders`).
#[test]
fn the_daemon_bundles_an_adopted_sibling_with_the_hand_off() {
    let fx = Fixture::new();
    let dead = fx.dead_sibling(0, 3);
    let mut daemon = bundling_shipper(&fx, Vec::new(), 1 << 20, Duration::from_secs(30));
    let rank = Engine::start(hand_off_rank(&fx, &mut daemon, 3)).unwrap();
    for i in 0..2 {
        rank.sinks()[0]
            .write(format!("record {i}").as_bytes())
            .unwrap();
    }
    let daemon = Engine::start(daemon).unwrap();
    // the flush sees its packs confirmed long before their linger ends
    assert!(rank.flush(Duration::from_secs(10)).unwrap(), "not shipped");
    assert!(crate::service::tests::wait_for(
        Duration::from_secs(10),
        || !dead.exists()
    ));
    assert_eq!(
        crate::service::tests::block_on(fx.catalog.count()).unwrap(),
        5
    );
    assert_eq!(
        crate::service::tests::block_on(fx.objects()),
        1,
        "the sibling's three packs and the hand-off's two share one object"
    );
    rank.close();
    daemon.close();
}

/// An engine that ships its own packs and is the node's shipper: its own
/// small packs waiting for their bundle ride the hand-off's run when a
/// live rank hands off a pack that goes at once (over the bundle size),
/// instead of waiting out their linger (the drain's `riders`).
#[test]
fn own_packs_waiting_for_a_bundle_ride_the_hand_offs_run() {
    let fx = Fixture::new();
    let mut shipper = bundling_shipper(&fx, vec![sink()], 64 << 10, Duration::from_secs(30));
    let rank = hand_off_rank(&fx, &mut shipper, 3);
    let shipper = Engine::start(shipper).unwrap();
    for i in 0..2 {
        shipper.sinks()[0]
            .write(format!("own {i}").as_bytes())
            .unwrap();
    }
    assert!(crate::service::tests::wait_for(
        Duration::from_secs(5),
        || ready(shipper.dir()) == 2
    ));
    let rank = Engine::start(rank).unwrap();
    rank.sinks()[0].write(&vec![7u8; 70 << 10]).unwrap();
    assert!(rank.flush(Duration::from_secs(10)).unwrap(), "not shipped");
    assert!(
        crate::service::tests::wait_for(Duration::from_secs(5), || ready(shipper.dir()) == 0),
        "the own packs still wait for their bundle"
    );
    assert_eq!(
        crate::service::tests::block_on(fx.catalog.count()).unwrap(),
        3
    );
    assert_eq!(
        crate::service::tests::block_on(fx.objects()),
        2,
        "the large pack alone, the two own packs in one bundle"
    );
    rank.close();
    shipper.close();
}

mod serial {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    /// Two ranks of the daemon's own process each seal a pack every 100 ms
    /// into a bundling store: their packs ship once the bundle linger (1 s)
    /// is over, not when they stop. While packs wait, every hand-off step
    /// looks at every owner; a step over only the owner that woke it would
    /// leave the other's packs out of the run and restart their linger, so
    /// two trickles would hold each other back for as long as they last
    /// (bound: the linger and 2 s).
    #[test]
    fn ranks_trickling_together_ship_within_the_bundle_linger() {
        let fx = Fixture::new();
        let mut daemon = bundling_shipper(&fx, Vec::new(), 1 << 20, Duration::from_secs(1));
        let ranks: Vec<EngineConfig> = (0..2).map(|r| hand_off_rank(&fx, &mut daemon, r)).collect();
        let daemon = Engine::start(daemon).unwrap();
        let ranks: Vec<Engine> = ranks
            .into_iter()
            .map(|rank| Engine::start(rank).unwrap())
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let names: std::collections::BTreeSet<String> = ranks
            .iter()
            .map(|r| r.dir().file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        std::thread::scope(|s| {
            for rank in &ranks {
                let (sink, stop) = (rank.sinks()[0].clone(), stop.clone());
                s.spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        sink.write(b"a record").unwrap();
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
            }
            // every rank ships within the linger, not only the first
            loop {
                let rows =
                    crate::service::tests::block_on(fx.catalog.list_range(0, u64::MAX)).unwrap();
                let shipped: std::collections::BTreeSet<String> =
                    rows.into_iter().map(|r| r.rank_dir).collect();
                if names.is_subset(&shipped) {
                    break;
                }
                if started.elapsed() > Duration::from_secs(3) {
                    stop.store(true, Ordering::SeqCst);
                    panic!(
                        "in {:?} while the ranks trickled, only {shipped:?} of {names:?} shipped",
                        started.elapsed()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.store(true, Ordering::SeqCst);
        });
        for rank in ranks {
            rank.close();
        }
        daemon.close();
    }
}
