//! Test-only helper: a storage service in a process of its own, optionally
//! as another user, for the cases about another user's files (as root the
//! test process would open anything).
//!
//! `serve-as UID ROOT KEY_TAG STORE_DIR CATALOG_DB SECONDS`: drops to UID
//! (and its gid) unless UID is `-`, claims rank directory 0 under the
//! layout of the destination named KEY_TAG (memory-style URLs, as the
//! harness's `destination()` spells them) in ROOT, and runs a service on it
//! with a `file://` store in STORE_DIR and the SQLite catalog CATALOG_DB
//! (200 ms poll, 10 s max backoff). Once a sibling is blocked and every
//! other one adopted (or after SECONDS) it prints, one per line: `blocked
//! <dir>` for each blocked sibling, `adopted_spools <n>`, `adoption_owed
//! <bool>`, `cycles_in_3s <n>`, `own_ship_ms <n>` (the longest of five
//! own packs staged one at a time, from its stage to its index: the loop
//! woken by the registry, not backing off), `flush_ms <n>` (a flush's
//! duration) and `done`, then stops the service and releases its
//! directory.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spool_core::{claim_rank_dir, Destination};
use spool_lock::{LockMode, LockOptions};
use spool_service::{ServiceConfig, StorageService};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 7 || args[0] != "serve-as" {
        eprintln!("usage: service-helper serve-as UID ROOT KEY_TAG STORE_DIR CATALOG_DB SECONDS");
        std::process::exit(2);
    }
    if args[1] != "-" {
        let uid: u32 = args[1].parse().unwrap();
        nix::unistd::setgroups(&[]).unwrap();
        nix::unistd::setgid(nix::unistd::Gid::from_raw(uid)).unwrap();
        nix::unistd::setuid(nix::unistd::Uid::from_raw(uid)).unwrap();
    }
    let (root, tag) = (Path::new(&args[2]), &args[3]);
    let seconds: u64 = args[6].parse().unwrap();
    let dest = Destination {
        catalog_url: format!("memory://{tag}"),
        database: "db".into(),
        table_prefix: "spool_".into(),
        store_url: format!("memory://{tag}"),
        store_id: "default".into(),
    };
    let claim = claim_rank_dir(
        root,
        &dest.catalog_key().unwrap(),
        0,
        &LockOptions::default(),
    )
    .unwrap();
    let store = object_store::local::LocalFileSystem::new_with_prefix(&args[4]).unwrap();
    let catalog =
        Arc::new(spool_catalog::SqliteCatalog::new(args[5].clone().into(), "spool_").unwrap());
    let store = spool_upload::Store::new(Arc::new(store), "", "file://helper", true).unwrap();
    let mut c = ServiceConfig::new(claim.dir(), dest, store, catalog);
    c.lock_mode = LockMode::HeldByCaller;
    c.lease_ttl = Duration::from_secs(10);
    c.poll_interval = Duration::from_millis(200);
    // the memory catalog stands in for a remote one: its index linger
    c.index_linger = spool_service::config::keys::INDEX_LINGER.default_value();
    c.max_backoff = Duration::from_secs(10);
    // each own pack alone and at once: the pace it reports is per pack
    c.upload.bundle_bytes = 0;
    let registry = Arc::new(spool_core::registry::Registry::new());
    c.registry = registry.clone();
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(seconds) {
        let s = svc.snapshot();
        if !s.blocked_siblings.is_empty() && !s.adoption_owed && s.adopted_spools > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = svc.snapshot();
    for b in &s.blocked_siblings {
        say(&format!("blocked {}", b.display()));
    }
    say(&format!("adopted_spools {}", s.adopted_spools));
    say(&format!("adoption_owed {}", s.adoption_owed));
    std::thread::sleep(Duration::from_secs(3));
    say(&format!(
        "cycles_in_3s {}",
        svc.snapshot().cycles - s.cycles
    ));
    let own = svc.spool().unwrap().clone();
    let mut slowest = Duration::ZERO;
    for i in 0..5 {
        let before = svc.snapshot().indexed;
        let id = spool_core::PackId::generate();
        let mut w = spool_core::PackWriter::new(id, spool_core::pack::now_ms());
        w.push_record(format!("own record {i}").as_bytes());
        let t = Instant::now();
        own.stage(None, id, &w.finish()).unwrap();
        registry.notify(own.dir());
        while svc.snapshot().indexed == before && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        slowest = slowest.max(t.elapsed());
    }
    say(&format!("own_ship_ms {}", slowest.as_millis()));
    let f = Instant::now();
    let drained = svc.flush(Duration::from_secs(10));
    say(&format!("flush_ms {} {drained:?}", f.elapsed().as_millis()));
    svc.stop().unwrap();
    claim.release().unwrap();
    say("done");
}
