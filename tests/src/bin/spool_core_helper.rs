//! Test-only helper for spool-core's cross-process tests. Each command
//! prints one line per event on stdout (flushed), so a parent that
//! SIGKILLs it knows what it reported before dying.
//!
//! - `stage DIR SEED PACKS MAX_PAYLOAD [ORDINAL]`: open DIR (take), stage
//!   PACKS packs of seeded sizes, printing `staged <id>` after each stage
//!   returns.
//! - `stage-paused DIR RELEASE_FILE [READY]`: open DIR (take), stage READY
//!   packs (default 0) printing `staged <id>` after each, then one pack
//!   paused before its publish until RELEASE_FILE exists; prints
//!   `staging <id>` before and `staged <id>` after.
//! - `recover DIR take|held_by_caller`: open and recover; prints the counts,
//!   or `refused: <error>` and exits 3.
//! - `charge DIR BUDGET [UID]`: drop to UID (and its gid) first if given,
//!   open DIR (take) with charge_dead_siblings, print
//!   `dead_sibling_bytes <n>`.
//! - `hold DIR`: acquire DIR, print `held`, sleep until killed.
//! - `fork-ids N`: mint one pack id, fork (no exec, as a DataLoader worker
//!   is made), and mint N ids with one timestamp in both parent and child,
//!   printing `id <hex>` for each.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::Path;

use rand::{Rng, SeedableRng};
use spool_core::spool::{set_pause_before_publish, Spool, SpoolConfig};
use spool_core::{PackId, PackWriter};
use spool_lock::{LockMode, LockOptions};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn make_pack(rng: &mut impl Rng, max_payload: usize) -> (PackId, Vec<u8>) {
    let id = PackId::generate();
    let mut w = PackWriter::new(id, id.timestamp_ms());
    let records = rng.random_range(0..4);
    for _ in 0..records {
        let len = rng.random_range(0..=max_payload / 4);
        let rec: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        w.push_record(&rec);
    }
    (id, w.finish())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a = |i: usize| {
        args.get(i).map(String::as_str).unwrap_or_else(|| {
            eprintln!("usage: see the source of spool-core-helper");
            std::process::exit(2)
        })
    };
    match a(0) {
        "stage" => {
            let dir = Path::new(a(1));
            let seed: u64 = a(2).parse().unwrap();
            let packs: usize = a(3).parse().unwrap();
            let max_payload: usize = a(4).parse().unwrap();
            let ordinal: Option<u32> = args.get(5).map(|s| s.parse().unwrap());
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let spool = Spool::open(dir, &SpoolConfig::default()).unwrap();
            for _ in 0..packs {
                let (id, bytes) = make_pack(&mut rng, max_payload);
                spool.stage(ordinal, id, &bytes).unwrap();
                say(&format!("staged {id}"));
            }
            say("done");
        }
        "stage-paused" => {
            let dir = Path::new(a(1));
            let ready: usize = args.get(3).map_or(0, |s| s.parse().unwrap());
            let spool = Spool::open(dir, &SpoolConfig::default()).unwrap();
            for _ in 0..ready {
                let (id, bytes) = make_pack(&mut rand::rng(), 1000);
                spool.stage(None, id, &bytes).unwrap();
                say(&format!("staged {id}"));
            }
            set_pause_before_publish(Some(Path::new(a(2)))).unwrap();
            let (id, bytes) = make_pack(&mut rand::rng(), 1000);
            say(&format!("staging {id}"));
            match spool.stage(None, id, &bytes) {
                Ok(_) => say(&format!("staged {id}")),
                Err(e) => {
                    say(&format!("failed: {e}"));
                    std::process::exit(1);
                }
            }
        }
        "recover" => {
            let dir = Path::new(a(1));
            let mode: LockMode = a(2).parse().unwrap();
            let config = SpoolConfig {
                lock_mode: mode,
                ..SpoolConfig::default()
            };
            match Spool::open(dir, &config).and_then(|s| s.recover()) {
                Ok(r) => say(&format!(
                    "swept {} quarantined {} valid {}",
                    r.swept.len(),
                    r.quarantined.len(),
                    r.valid.len()
                )),
                Err(e) => {
                    say(&format!("refused: {e}"));
                    std::process::exit(3);
                }
            }
        }
        "charge" => {
            let dir = Path::new(a(1));
            let budget: u64 = a(2).parse().unwrap();
            if let Some(uid) = args.get(3) {
                let uid: u32 = uid.parse().unwrap();
                nix::unistd::setgroups(&[]).unwrap();
                nix::unistd::setgid(nix::unistd::Gid::from_raw(uid)).unwrap();
                nix::unistd::setuid(nix::unistd::Uid::from_raw(uid)).unwrap();
            }
            let config = SpoolConfig {
                max_bytes: Some(budget),
                charge_dead_siblings: true,
                ..SpoolConfig::default()
            };
            let spool = Spool::open(dir, &config).unwrap();
            say(&format!(
                "dead_sibling_bytes {}",
                spool.usage().dead_sibling_bytes
            ));
        }
        "hold" => {
            let claim = spool_lock::acquire(Path::new(a(1)), &LockOptions::default()).unwrap();
            say("held");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
                let _ = &claim;
            }
        }
        "fork-ids" => {
            let n: usize = a(1).parse().unwrap();
            let _warm = PackId::generate();
            let ms = PackId::generate().timestamp_ms();
            let side = spool_lock::testing::fork_single_threaded().unwrap();
            // One write(2) a line (well under PIPE_BUF), so the two
            // processes' lines never mix.
            for _ in 0..n {
                say(&format!("id {}", PackId::with_timestamp(ms).to_hex()));
            }
            // The parent exits without waiting: a reader of stdout sees EOF
            // once both sides have exited.
            let _ = side;
        }
        other => {
            eprintln!("unknown command {other}");
            std::process::exit(2);
        }
    }
}
