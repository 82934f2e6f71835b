//! One budget per node's destination, whatever the incarnations
//! (`charge_dead_siblings`): real `spool produce
//! --serve` processes SIGKILLed one after another while the store (moto,
//! behind the fault proxy) refuses connections, then `spool run --once`
//! once it is back.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spool_tests::proxy::Proxy;
use spool_tests::servers::moto;
use spool_tests::{describe, output, spool, KillOnDrop};

/// Bytes of every pack file (ready, open, quarantined, rejected) under `dir`.
fn pack_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in rd.flatten() {
        let m = e.metadata().unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if m.is_dir() {
            total += pack_bytes(&e.path());
        } else if [".ready", ".open", ".quarantined", ".rejected"]
            .iter()
            .any(|s| name.ends_with(s))
        {
            total += m.len();
        }
    }
    total
}

/// `.ready` files under `dir`, at any depth.
fn count_ready(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            if e.file_type().unwrap().is_dir() {
                count_ready(&e.path())
            } else {
                usize::from(e.file_name().to_string_lossy().ends_with(".ready"))
            }
        })
        .sum()
}

#[test]
fn five_sigkilled_incarnations_never_hold_more_than_one_budget_and_run_once_drains_them() {
    let Some(m) = moto() else { return };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let proxy = rt.block_on(Proxy::start(m.addr())).unwrap();
    proxy.set_refusing(true);
    let store_url = format!("s3://{}/budget-{}", m.bucket, uuid::Uuid::new_v4().simple());
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // One record of 8192 bytes per pack: 8192 + 4 + 136 bytes of framing.
    let pack_len: u64 = 8192 + 4 + spool_core::pack::MIN_PACK_LEN;
    let budget = 4 * pack_len + 100;
    let budget_arg = budget.to_string();
    let mut printed = 0usize;
    for incarnation in 0..5 {
        let ids = Arc::new(Mutex::new(0usize));
        let mut child = KillOnDrop(
            spool()
                .args(["produce", "--spool-root"])
                .arg(root)
                .args(["--store", &store_url, "--serve", "--max-bytes", &budget_arg])
                .args(["--packs", "20", "--pack-bytes", "8192", "--records", "1"])
                .args([
                    "--lease-ttl",
                    "5",
                    "--poll-interval",
                    "0.2",
                    "--timeout",
                    "1",
                ])
                .env("AWS_ENDPOINT", proxy.url())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let out = child.0.stdout.take().unwrap();
        let i = ids.clone();
        std::thread::spawn(move || {
            for _ in BufReader::new(out).lines().map_while(Result::ok) {
                *i.lock().unwrap() += 1;
            }
        });
        let err = child.0.stderr.take().unwrap();
        let full = Arc::new(Mutex::new(None::<String>));
        let f = full.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if line.contains("the spool is full:") && f.lock().unwrap().is_none() {
                    *f.lock().unwrap() = Some(line.clone());
                }
                eprintln!("[producer {incarnation}] {line}");
            }
        });
        // Until it is told the directory (and the node's budget) is full.
        let deadline = Instant::now() + Duration::from_secs(60);
        while full.lock().unwrap().is_none() {
            if let Some(status) = child.0.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(200)); // the stderr reader
                assert!(
                    full.lock().unwrap().is_some(),
                    "incarnation {incarnation} exited ({status}) without filling its budget"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "incarnation {incarnation} never filled its budget"
            );
            assert!(
                pack_bytes(root) <= budget + pack_len,
                "over one budget plus a pack"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.0.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        child.0.wait().unwrap();
        let used = pack_bytes(root);
        // "the spool is full: USED of BUDGET bytes used, DEAD of them by dead siblings"
        let msg = full.lock().unwrap().clone().unwrap();
        assert!(msg.contains(&format!(" of {budget} bytes used")), "{msg}");
        let dead: u64 = msg
            .split(" of them by dead siblings")
            .next()
            .and_then(|h| h.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("the refusal names the dead siblings' share: {msg}"));
        if incarnation > 0 {
            assert!(dead > 0, "the dead incarnations' packs are charged: {msg}");
        }
        printed += *ids.lock().unwrap();
        assert!(
            used <= budget + pack_len,
            "after incarnation {incarnation}: {used} bytes under the key, budget {budget}"
        );
    }
    assert!(
        printed >= 4,
        "the first incarnation filled the budget: {printed}"
    );
    let staged = count_ready(root);
    assert!(
        staged >= printed,
        "{staged} packs on disk, {printed} reported"
    );

    // The store is back: the daemon adopts every dead directory and ships it.
    proxy.set_refusing(false);
    let out = output(
        spool()
            .args(["run", "--once", "--spool-root"])
            .arg(root)
            .args(["--store", &store_url])
            .args([
                "--lease-ttl",
                "5",
                "--timeout",
                "90",
                "--poll-interval",
                "0.2",
            ])
            .env("AWS_ENDPOINT", proxy.url()),
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(pack_bytes(root), 0, "drained\n{}", describe(&out));
    let catalog = spool_catalog::open(&format!(
        "sqlite://{}",
        root.canonicalize().unwrap().join(".catalog.db").display()
    ))
    .unwrap();
    assert_eq!(rt.block_on(catalog.count()).unwrap(), staged as u64);
}
