//! A lease contender for the cross-process lease tests: one process per
//! contender, all on one catalog.
//!
//! `lease-contender URL NAME HOLDER ROUNDS STALL_EVERY`
//!
//! Each round: acquire NAME (polling every 50–150 ms, at most 60 s), index
//! one pack under the fence, then either release it at once, or — every
//! STALL_EVERY-th round — stop renewing for ttl + 1.5 s and try one more
//! fenced insert with the stale guard. Every event is one JSON line on
//! stdout: `{"ev":"held","term":T,"lease_id":"…"}`, `{"ev":"indexed","pack":"…"}`,
//! `{"ev":"stale","pack":"…","result":"fenced"|"inserted"}`, `{"ev":"done"}`.
//! Lease timing: ttl 5 s, renew 1 s, fence margin 2 s.
#![forbid(unsafe_code)]

use spool_catalog::{Error, LeaseClaim, LeaseConfig, PackRow};
use std::time::{Duration, Instant};

fn pack(holder: &str, round: u64, what: &str) -> PackRow {
    // A deterministic id per (holder, round, what): FNV-1a, twice.
    let mut h: u64 = 0xcbf29ce484222325;
    let mut h2: u64 = 0x84222325cbf29ce4;
    for b in format!("{holder}/{round}/{what}").bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        h2 = (h2 ^ b as u64).wrapping_mul(0x100000001b3).rotate_left(7);
    }
    let pack_id = format!("{h:016x}{h2:016x}");
    PackRow {
        object_offset: 0,
        object_key: format!("contend/{pack_id}.pack"),
        pack_id,
        store_id: "default".into(),
        sha256: "0".repeat(64),
        bytes: 1,
        records: round,
        source_host: holder.into(),
        source_pid: std::process::id(),
        rank_dir: what.into(),
        ordinal: None,
        created_at_ms: 1_000 + round,
        indexed_at_ms: 0,
        trailer_sha256: "1".repeat(64),
    }
}

fn emit(v: serde_json::Value) {
    println!("{v}");
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, name, holder, rounds, stall_every] = args.as_slice() else {
        eprintln!("usage: lease-contender URL NAME HOLDER ROUNDS STALL_EVERY");
        std::process::exit(2);
    };
    let rounds: u64 = rounds.parse().expect("ROUNDS is a number");
    let stall_every: u64 = stall_every.parse().expect("STALL_EVERY is a number");
    let cfg = LeaseConfig {
        ttl: Duration::from_secs(5),
        renew_interval: Duration::from_secs(1),
        fence_margin: Duration::from_secs(2),
    };
    cfg.validate().expect("valid lease config");
    let catalog = spool_catalog::open(url).expect("catalog URL");
    let mut seed = std::process::id() as u64;
    let mut jitter = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        Duration::from_millis(50 + (seed >> 33) % 100)
    };
    for round in 0..rounds {
        let deadline = Instant::now() + Duration::from_secs(60);
        let guard = loop {
            match catalog.acquire(name, holder, &cfg).await {
                Ok(LeaseClaim::Held(g)) => break g,
                Ok(_) => {}
                Err(e) if e.is_retryable() => eprintln!("retrying: {e}"),
                Err(e) => panic!("acquire failed: {e}"),
            }
            assert!(Instant::now() < deadline, "{holder}: no lease within 60 s");
            tokio::time::sleep(jitter()).await;
        };
        emit(
            serde_json::json!({"ev": "held", "round": round, "term": guard.term, "lease_id": guard.lease_id.to_string()}),
        );
        let live = pack(holder, round, "live");
        match catalog
            .index(std::slice::from_ref(&live), Some(&guard))
            .await
        {
            Ok(()) => {
                emit(serde_json::json!({"ev": "indexed", "pack": live.pack_id, "term": guard.term}))
            }
            Err(Error::Fenced { .. }) => emit(
                serde_json::json!({"ev": "fenced_live", "pack": live.pack_id, "term": guard.term}),
            ),
            Err(e) => panic!("index failed: {e}"),
        }
        if stall_every > 0 && round % stall_every == stall_every - 1 {
            // Stop renewing: the lease lapses and a rival may take it.
            tokio::time::sleep(cfg.ttl + Duration::from_millis(1500)).await;
            let stale = pack(holder, round, "stale");
            let result = match catalog
                .index(std::slice::from_ref(&stale), Some(&guard))
                .await
            {
                Ok(()) => "inserted",
                Err(Error::Fenced { .. }) => "fenced",
                Err(e) => panic!("stale index failed otherwise: {e}"),
            };
            emit(
                serde_json::json!({"ev": "stale", "pack": stale.pack_id, "result": result, "term": guard.term}),
            );
        } else {
            catalog.release(&guard).await.expect("release");
            emit(serde_json::json!({"ev": "released", "term": guard.term}));
        }
        tokio::time::sleep(jitter()).await;
    }
    emit(serde_json::json!({"ev": "done"}));
}
