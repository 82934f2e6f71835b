//! Never hang: with the catalog stalled (accepts,
//! never answers), the store stalled mid-body, or both — each through the
//! fault proxy in front of the real ClickHouse and moto — `flush(1 s)`
//! returns within 2 s and `stop()` within 2 s, the packs stay (owed or
//! ready, never lost) and a successor with the servers back indexes each
//! exactly once. Black-box: `spool run` with its catalog stalled mid-drain
//! exits within `service.stop_flush_timeout + 2 s` of SIGTERM. A refusal
//! of the whole destination (a bucket that does not exist) keeps every pack
//! ready and ships everything by itself once the bucket is made.

#![forbid(unsafe_code)]

/// `spool run` against a moto bucket that does not exist yet (NoSuchBucket:
/// a refusal of the whole destination): a dead sibling's packs all
/// stay `.ready`, the sibling is never blocked, `/healthz` says 503 naming
/// the store; then the bucket is made (a plain PUT, as an operator's fix)
/// and every pack arrives byte-equal and indexed, the sibling is gone and
/// `/healthz` says 200, with no person touching a file.
#[test]
fn a_missing_bucket_keeps_every_pack_ready_and_ships_all_once_it_exists() {
    use spool_tests::{describe, output, spool, KillOnDrop};
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::Duration;

    let Some(moto) = spool_tests::servers::moto() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let healthz = |addr: &str| {
        rt.block_on(spool_tests::http::request(addr, "GET", "/healthz"))
            .unwrap()
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let bucket = format!("late-{}", std::process::id());
    let store = format!("s3://{bucket}/packs");
    let flags = |cmd: &mut std::process::Command| {
        cmd.arg("--spool-root")
            .arg(&root)
            .args(["--store", &store])
            .env("AWS_ENDPOINT", moto.endpoint.as_str())
            .env("SPOOL_MAX_BACKOFF", "1s")
            .env("SPOOL_UNHEALTHY_AFTER", "1s")
            .env("SPOOL_RECHECK_INTERVAL", "1s");
    };
    let (sib, staged) = dead_sibling(&flags, 6);

    let mut run = spool();
    run.args(["run", "--json", "--metrics-addr", "127.0.0.1:0"]);
    flags(&mut run);
    // stderr to a file: a pipe nobody reads would fill with the refusals
    // logged and stall the daemon on its own log line
    let log = std::fs::File::create(tmp.path().join("run.log")).unwrap();
    let mut child = KillOnDrop(
        run.stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap(),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        // read to the end, so the daemon never writes to a closed pipe
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let started: serde_json::Value = serde_json::from_str(&first).unwrap();
    let addr = started["metrics_addr"].as_str().unwrap().to_string();

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (status, body) = healthz(&addr);
        if status == 503 {
            break body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/healthz never turned 503 with the bucket missing: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(body.contains(&bucket), "/healthz names the store: {body}");
    // several backoffs later: nothing set aside, nothing blocked
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        spool_tests::ready_files(&sib),
        staged,
        "every pack stays ready"
    );
    let owner = spool_lock::read_owner(&sib).unwrap();
    assert!(
        !matches!(
            owner.record.map(|r| r.purpose),
            Some(spool_lock::Purpose::Blocked(_))
        ),
        "the sibling is never marked blocked"
    );

    let host = moto
        .endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let (status, made) = rt
        .block_on(spool_tests::http::request(
            &host,
            "PUT",
            &format!("/{bucket}"),
        ))
        .unwrap();
    assert_eq!(status, 200, "moto made no bucket {bucket}: {made}");

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while sib.exists() || healthz(&addr).0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing shipped within 30 s of the fix: {:?} left, /healthz {:?}",
            spool_tests::ready_files(&sib).len(),
            healthz(&addr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let objects = spool_tests::servers::s3_object_store(&moto.endpoint, &bucket);
    let out = output(spool().args(["ls", "--json", "--spool-root"]).arg(&root));
    assert!(out.status.success(), "{}", describe(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    let rows: std::collections::HashMap<String, serde_json::Value> = listed
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|r| Some((r["pack_id"].as_str()?.to_string(), r)))
        .collect();
    for (id, bytes) in &staged {
        let row = rows
            .get(id)
            .unwrap_or_else(|| panic!("{id} not indexed: {listed}"));
        let (offset, len) = (
            row["object_offset"].as_u64().unwrap(),
            row["bytes"].as_u64().unwrap(),
        );
        let got = rt
            .block_on(async {
                use object_store::ObjectStoreExt;
                let key = object_store::path::Path::from(row["object_key"].as_str().unwrap());
                objects.get_range(&key, offset..offset + len).await
            })
            .unwrap_or_else(|e| panic!("pack {id} is not in the store: {e}"));
        assert_eq!(&got[..], &bytes[..], "pack {id} arrived changed");
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = child.0.wait();
}

/// A dead producer's rank directory `r1-0000abcd` under the key directory
/// the command's `flags` name (`spool config show`), with `packs` packs of
/// 4 KiB staged by `spool produce`: its path and its ready files.
fn dead_sibling(
    flags: &dyn Fn(&mut std::process::Command),
    packs: usize,
) -> (
    std::path::PathBuf,
    std::collections::HashMap<String, Vec<u8>>,
) {
    use spool_tests::{describe, output, spool};
    let mut show = spool();
    show.args(["config", "show", "--json"]);
    flags(&mut show);
    let out = output(&mut show);
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let key_dir = std::path::PathBuf::from(v["derived"]["key_dir"].as_str().unwrap());
    let sib = key_dir.join("r1-0000abcd");
    std::fs::create_dir_all(&key_dir).unwrap();
    let n = packs.to_string();
    let out = output(
        spool()
            .args(["produce", "--packs", &n, "--pack-bytes", "4096", "--dir"])
            .arg(&sib),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let staged = spool_tests::ready_files(&sib);
    assert_eq!(staged.len(), packs);
    (sib, staged)
}

mod serial {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use spool_catalog::CatalogUrl;
    use spool_core::Destination;
    use spool_lock::LockMode;
    use spool_service::{Error, StorageService};
    use spool_tests::proxy::{EventKind, ProxyAction, ProxyRule};
    use spool_tests::servers::{proxied_servers, s3_object_store, Proxied};
    use spool_tests::service::{files, is_held, wait_for, Fixture};
    use spool_tests::upload_suite::prefix;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Stall {
        Catalog,
        Store,
        Both,
    }

    type Servers = Proxied;

    trait Case {
        fn fixture(&self, tag: &str) -> Fixture;
        fn stall(&self, stall: Stall);
        fn heal(&self);
        fn finish(self, fx: &Fixture);
    }

    impl Case for Servers {
        fn fixture(&self, tag: &str) -> Fixture {
            let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&self.url).unwrap() else {
                unreachable!()
            };
            let p = prefix(tag);
            let dest = Destination {
                catalog_url: self.url.clone(),
                database: t.database.clone(),
                table_prefix: t.table_prefix.clone(),
                store_url: format!("s3://{}/{p}", self.moto.bucket),
                store_id: "default".into(),
            };
            Fixture::with_backends(
                dest,
                s3_object_store(&self.s3_proxy.url(), &self.moto.bucket),
                &p,
                spool_catalog::open(&self.url).unwrap(),
            )
        }

        fn stall(&self, stall: Stall) {
            if matches!(stall, Stall::Catalog | Stall::Both) {
                self.ch_proxy.add_rule(ProxyRule::new(ProxyAction::Stall));
            }
            if matches!(stall, Stall::Store | Stall::Both) {
                self.s3_proxy
                    .add_rule(ProxyRule::new(ProxyAction::StallRequestAfter(100)).method("PUT"));
            }
        }

        fn heal(&self) {
            self.ch_proxy.clear_rules();
            self.s3_proxy.clear_rules();
        }

        fn finish(self, fx: &Fixture) {
            let url = self.url.clone();
            self.rt
                .block_on(async {
                    fx.clear_store().await;
                    self.admin.testing_drop_database().await
                })
                .unwrap_or_else(|e| panic!("could not drop the test database of {url}: {e}"));
        }
    }

    /// Own packs staged; the stall set once the service is working (the
    /// catalog after the first upload, so the packs are owed; the store at
    /// once); flush(1 s) and stop() bounded; a successor with the servers
    /// back indexes every pack exactly once.
    fn bounded(stall: Stall) {
        let Some(s) = proxied_servers() else { return };
        let fx = s.fixture(&format!("nohang-{stall:?}").to_lowercase());
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&s, &fx, stall)));
        s.heal();
        s.finish(&fx);
        if let Err(e) = outcome {
            std::panic::resume_unwind(e);
        }
    }

    fn case(s: &Servers, fx: &Fixture, stall: Stall) {
        // the service takes its own directory's lock (lock mode Take), so
        // a stop whose loop did not end cleanly shows as a lock left held;
        // one round of 4 (max_workers); each PUT body (~400 bytes) stalls
        // after 100
        let (own, packs) = fx.dead_sibling(0, 4);
        let fired = Arc::new(AtomicBool::new(false));
        if stall == Stall::Catalog {
            // the catalog stops answering once the first pack is PUT: the
            // round is uploaded and its index stalls (owed)
            let (ch, fired) = (s.ch_proxy.clone(), fired.clone());
            s.s3_proxy.on_event(move |e| {
                if e.kind == EventKind::Received
                    && e.method == "PUT"
                    && !fired.swap(true, Ordering::SeqCst)
                {
                    ch.add_rule(ProxyRule::new(ProxyAction::Stall));
                }
            });
        } else {
            s.stall(stall);
        }
        let mut c = fx.config(&own);
        c.lock_mode = LockMode::Take;
        c.catalog = spool_catalog::open(&s.proxied_url).unwrap();
        c.upload.max_workers = 4;
        let mut svc = StorageService::new(c).unwrap();
        svc.start().unwrap();
        // let the loop get into its stalled call
        let stalled_kind = EventKind::Stalled;
        assert!(
            wait_for(Duration::from_secs(20), || s
                .ch_proxy
                .count(stalled_kind.clone())
                + s.s3_proxy.count(stalled_kind.clone())
                > 0),
            "nothing stalled: {:?}",
            svc.snapshot()
        );
        std::thread::sleep(Duration::from_millis(1500));
        let snap = svc.snapshot();
        assert!(
            snap.waiting_on.is_some(),
            "the snapshot names what the service waits on: {snap:?}"
        );

        let cycles = svc.snapshot().cycles;
        let t = Instant::now();
        let r = svc.flush(Duration::from_secs(1));
        let took = t.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "{stall:?}: flush(1 s) took {took:?}: {r:?}"
        );
        eprintln!("{stall:?}: flush(1 s) returned after {took:?}: {r:?}");
        let err = r.expect_err("nothing can drain");
        let Error::FlushTimeout { cycles: after, .. } = &err else {
            panic!("{err}")
        };
        assert!(
            *after > cycles,
            "{stall:?}: the flush cut the loop's call and ran a cycle of its own ({cycles} -> {after})"
        );
        let msg = err.to_string();
        assert!(
            !msg.contains("last error: none; waiting on: nothing"),
            "{stall:?}: the flush error names the cause: {msg}"
        );
        if stall == Stall::Catalog {
            assert!(
                msg.contains("did not answer within") || msg.contains("waiting on: catalog"),
                "{msg}"
            );
        }

        let t = Instant::now();
        svc.stop().unwrap();
        let took = t.elapsed();
        eprintln!("{stall:?}: stop() returned after {took:?}");
        assert!(
            took < Duration::from_secs(2),
            "{stall:?}: stop() took {took:?}"
        );
        assert!(
            !is_held(&own),
            "{stall:?}: stop let go of the directory's lock"
        );
        assert_eq!(files(&own, "ready"), 4, "every pack stays until indexed");

        // the servers back: a successor indexes each pack exactly once
        s.heal();
        let mut c = fx.config(&own);
        c.lock_mode = LockMode::Take;
        c.catalog = spool_catalog::open(&s.proxied_url).unwrap();
        let mut next = StorageService::new(c).unwrap();
        next.start().unwrap();
        assert!(
            next.flush(Duration::from_secs(30)).unwrap(),
            "{:?}",
            next.snapshot()
        );
        next.stop().unwrap();
        assert!(!own.exists(), "drained and removed by the successor's stop");
        s.rt.block_on(async {
            fx.read_back(&packs).await;
            assert_eq!(fx.catalog.count().await.unwrap(), 4);
        });
    }

    #[test]
    fn a_stalled_catalog_bounds_flush_and_stop() {
        bounded(Stall::Catalog);
    }

    #[test]
    fn a_store_stalled_mid_body_bounds_flush_and_stop() {
        bounded(Stall::Store);
    }

    #[test]
    fn both_stalled_bound_flush_and_stop() {
        bounded(Stall::Both);
    }

    /// Black-box: `spool run` adopting a dead sibling of 40 packs, its
    /// catalog stalled (through the proxy) from the first upload on; SIGTERM
    /// makes it exit 0 within `service.stop_flush_timeout` (3 s) + 2 s, and
    /// the sibling keeps every pack that is not indexed.
    #[test]
    fn spool_run_with_its_catalog_stalled_mid_drain_exits_in_time_on_sigterm() {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        use spool_tests::{spool, KillOnDrop};
        use std::process::Stdio;

        let Some(s) = proxied_servers() else { return };
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let store = format!("s3://{}/{}", s.moto.bucket, prefix("nohang-run"));
        let flags = |cmd: &mut std::process::Command| {
            cmd.arg("--spool-root")
                .arg(&root)
                .args(["--catalog", &s.proxied_url, "--store", &store])
                .args(["--lease-ttl", "5"])
                .env("AWS_ENDPOINT", s.moto.endpoint.as_str())
                .env("SPOOL_STOP_FLUSH_TIMEOUT", "3s")
                .env("SPOOL_RECHECK_INTERVAL", "1s");
        };
        let (sib, staged) = super::dead_sibling(&flags, 40);
        // the catalog stops answering once the first adopted pack is PUT
        let ch = s.ch_proxy.clone();
        let fired = Arc::new(AtomicBool::new(false));
        let f2 = fired.clone();
        s.s3_proxy.on_event(move |e| {
            if e.kind == EventKind::Received
                && e.method == "PUT"
                && !f2.swap(true, Ordering::SeqCst)
            {
                ch.add_rule(ProxyRule::new(ProxyAction::Stall));
            }
        });
        let mut run = spool();
        run.args(["run", "--json"]);
        flags(&mut run);
        // through the proxy to moto, so the first PUT trips the catalog
        run.env("AWS_ENDPOINT", s.s3_proxy.url());
        let mut child = KillOnDrop(
            run.stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        assert!(
            wait_for(Duration::from_secs(30), || fired.load(Ordering::SeqCst)),
            "the daemon never uploaded"
        );
        // well into the stalled index (the per-statement timeout is 30 s)
        std::thread::sleep(Duration::from_secs(2));
        let t = Instant::now();
        kill(Pid::from_raw(child.0.id() as i32), Signal::SIGTERM).unwrap();
        let status = loop {
            if let Some(st) = child.0.try_wait().unwrap() {
                break st;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "spool run did not exit within 30 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = t.elapsed();
        let mut err = String::new();
        use std::io::Read;
        let _ = child.0.stderr.take().unwrap().read_to_string(&mut err);
        eprintln!("spool run exited {status:?} {took:?} after SIGTERM");
        assert!(
            took < Duration::from_secs(5),
            "spool run took {took:?} to exit after SIGTERM (stop_flush_timeout 3 s + 2 s): {err}"
        );
        assert_eq!(status.code(), Some(0), "{err}");
        let left = spool_tests::ready_files(&sib);
        assert!(!left.is_empty(), "the stalled round stays in the sibling");
        for (id, bytes) in &left {
            assert_eq!(staged.get(id), Some(bytes), "{id} changed");
        }
        s.heal();
        s.rt.block_on(s.admin.testing_drop_database()).unwrap();
    }
}
