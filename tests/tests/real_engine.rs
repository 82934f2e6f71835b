//! The embedded engine and the daemon as real processes against the real
//! servers `cargo xtask test` starts (moto's S3 server, ClickHouse), with the
//! fault proxy in front of moto.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use spool_core::PackId;
use spool_tests::proxy::Proxy;
use spool_tests::servers::fresh_clickhouse;
use spool_tests::{describe, output, spool};

fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Collects a child's stdout lines (pack ids) and its stderr's rank
/// directory line.
struct Watched {
    child: Child,
    ids: Arc<Mutex<Vec<String>>>,
    dir: Arc<Mutex<Option<PathBuf>>>,
}

fn watch(mut child: Child) -> Watched {
    let ids = Arc::new(Mutex::new(Vec::new()));
    let dir = Arc::new(Mutex::new(None));
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let i = ids.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            i.lock().unwrap().push(line);
        }
    });
    let d = dir.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if let Some(p) = line.strip_prefix("spool: rank directory ") {
                *d.lock().unwrap() = Some(PathBuf::from(p));
            }
            eprintln!("[producer] {line}");
        }
    });
    Watched { child, ids, dir }
}

#[test]
fn a_sigkilled_serving_producer_is_adopted_by_spool_run_once_and_every_pack_reads_back() {
    let Some((ch, endpoint, bucket)) = spool_tests::servers::clickhouse_and_s3() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let upstream = endpoint.trim_start_matches("http://").parse().unwrap();
    let proxy = rt.block_on(Proxy::start(upstream)).unwrap();
    let (db_url, db_admin) = fresh_clickhouse(&ch);
    let prefix = format!("engine-{}", uuid::Uuid::new_v4().simple());
    let store_url = format!("s3://{bucket}/{prefix}");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();

    // 1. A serving producer: its own service uploads through the proxy and
    //    indexes into ClickHouse as it goes; it holds the node's adopter
    //    lease (it is the only service there).
    let mut producer = watch(
        spool()
            .args(["produce", "--spool-root"])
            .arg(root)
            .args(["--store", &store_url, "--catalog", &db_url, "--serve"])
            .args([
                "--packs",
                "400",
                "--pack-interval",
                "0.05",
                "--lease-ttl",
                "5",
            ])
            .args(["--poll-interval", "0.2", "--hold"])
            .env("AWS_ENDPOINT", proxy.url())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let catalog = spool_catalog::open(&db_url).unwrap();
    wait_for("part of the packs indexed", Duration::from_secs(60), || {
        rt.block_on(catalog.count()).unwrap_or(0) >= 3
    });
    // 2. Cut the store: what is staged from now on stays in the spool.
    proxy.set_refusing(true);
    let at_cut = producer.ids.lock().unwrap().len();
    wait_for(
        "packs staged after the cut",
        Duration::from_secs(60),
        || producer.ids.lock().unwrap().len() >= at_cut + 5,
    );
    let dir = producer
        .dir
        .lock()
        .unwrap()
        .clone()
        .expect("rank directory");
    // A torn stage, as a SIGKILL mid-write leaves one.
    std::fs::write(
        dir.join(".0123456789abcdef0123456789abcdef.1a2b3c4d.open"),
        b"torn",
    )
    .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(producer.child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    producer.child.wait().unwrap();
    let staged: Vec<String> = producer.ids.lock().unwrap().clone();
    let indexed_before = rt.block_on(catalog.count()).unwrap();
    let left = spool_tests::ready_files(&dir);
    assert!(
        !left.is_empty() && indexed_before > 0,
        "part indexed ({indexed_before}), part staged ({})",
        left.len()
    );
    proxy.set_refusing(false);

    // 3. The daemon, straight to moto: waits out the dead producer's lease,
    //    adopts its directory, ships every pack, removes the directory.
    let started = Instant::now();
    let out = output(
        spool()
            .args(["run", "--once", "--json", "--spool-root"])
            .arg(root)
            .args(["--store", &store_url, "--catalog", &db_url])
            .args([
                "--lease-ttl",
                "5",
                "--timeout",
                "90",
                "--poll-interval",
                "0.2",
            ]),
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        !dir.exists(),
        "the adopted directory is removed (stale .open swept)\n{}",
        describe(&out)
    );
    let took = started.elapsed();

    // 4. Every pack the producer reported staged is in the catalog, and its
    //    object reads back from the store byte-equal (to the spooled copy
    //    where we have one) and valid.
    let s3: Arc<dyn ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::from_env()
            .with_endpoint(&endpoint)
            .with_allow_http(true)
            .with_bucket_name(&bucket)
            .build()
            .unwrap(),
    );
    let mut named = std::collections::BTreeSet::new();
    for id in &staged {
        let row = rt
            .block_on(catalog.get(id))
            .unwrap()
            .unwrap_or_else(|| panic!("{id} is not indexed"));
        named.insert(row.object_key.clone());
        // the pack's own range (a bundle holds the adopted ones)
        let bytes = rt
            .block_on(s3.get_range(
                &object_store::path::Path::from(row.object_key.as_str()),
                row.object_offset..row.object_offset + row.bytes,
            ))
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        if let Some(copy) = left.get(id) {
            assert_eq!(&bytes[..], &copy[..], "{id} differs from its spooled bytes");
        }
        spool_core::validate(
            std::io::Cursor::new(bytes.to_vec()),
            Some(PackId::from_hex(id).unwrap()),
            &AtomicBool::new(false),
        )
        .unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    assert_eq!(rt.block_on(catalog.count()).unwrap(), staged.len() as u64);
    eprintln!(
        "{} packs: {indexed_before} indexed by the producer, {} adopted; run --once took {took:?}",
        staged.len(),
        left.len()
    );
    let listed: Vec<_> = rt
        .block_on(async {
            s3.list(Some(&prefix.as_str().into()))
                .try_collect::<Vec<_>>()
                .await
        })
        .unwrap();
    // (and the prefix record, spool's own)
    let listed: std::collections::BTreeSet<String> = listed
        .iter()
        .map(|m| m.location.to_string())
        .filter(|k| !spool_service::prefix_record::is_record_key(k))
        .collect();
    assert_eq!(listed, named, "the objects rows name, nothing else");
    rt.block_on(db_admin.testing_drop_database()).unwrap();
}
