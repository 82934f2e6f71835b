//! `spool run --once` against the real servers `cargo xtask test` starts:
//! moto's S3 server (the `AWS_*` variables xtask exports) and ClickHouse,
//! configured the way an operator would — a `spool.toml` naming the
//! destination, overridden by a `SPOOL_*` variable — with `/metrics` on.
//! Dead siblings left by real producer processes are adopted, each
//! sibling's packs in one bundle; every pack reads back from catalog +
//! store byte-equal with one ranged GET; the directories are gone; `spool
//! sweep` keeps the bundles rows name and deletes an old one none does.
//! `spool status` shows the open bundle a daemon holds a live producer's
//! packs in, read from the daemon's `/metrics`.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::Value;
use spool_core::PackId;
use spool_tests::{describe, output, spool, KillOnDrop};

#[test]
fn run_once_with_a_config_file_drains_dead_siblings_into_clickhouse_and_moto() {
    let Some((ch, endpoint, bucket)) = spool_tests::servers::clickhouse_and_s3() else {
        return;
    };
    let (catalog_url, admin) = spool_tests::servers::fresh_clickhouse(&ch);
    let prefix = format!("run-{}", uuid::Uuid::new_v4().simple());
    let store_url = format!("s3://{bucket}/{prefix}");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let cfg = tmp.path().join("spool.toml");
    // the file names a wrong store; SPOOL_STORE overrides it (env > file)
    std::fs::write(
        &cfg,
        format!(
            "[spool]\nroot = \"{}\"\n[destination]\ncatalog = \"{catalog_url}\"\nstore = \"s3://wrong-bucket/x\"\n\
             [lease]\nttl = 5\n[service]\nrecheck_interval = \"1s\"\n[metrics]\naddr = \"127.0.0.1:0\"\n\
             [catalog]\nrequest_timeout = \"500ms\"\n[upload]\norphan_grace = \"2s\"\n",
            root.display()
        ),
    )
    .unwrap();
    let show = output(
        spool()
            .args(["config", "show", "--json", "--config"])
            .arg(&cfg)
            .env("SPOOL_STORE", &store_url),
    );
    assert!(show.status.success(), "{}", describe(&show));
    let show: Value = serde_json::from_slice(&show.stdout).unwrap();
    let key_dir = std::path::PathBuf::from(show["derived"]["key_dir"].as_str().unwrap());

    // two producers die with packs staged (sink-only, then exit)
    let mut staged = HashMap::new();
    for (rank, n) in [("r1-0000abcd", 6), ("r2-0000abce", 4)] {
        let dir = key_dir.join(rank);
        std::fs::create_dir_all(&key_dir).unwrap();
        let out = output(
            spool()
                .args([
                    "produce",
                    "--packs",
                    &n.to_string(),
                    "--pack-bytes",
                    "65536",
                    "--dir",
                ])
                .arg(&dir),
        );
        assert!(out.status.success(), "{}", describe(&out));
        staged.extend(spool_tests::ready_files(&dir));
    }
    assert_eq!(staged.len(), 10);

    let out = output(
        spool()
            .args(["run", "--once", "--timeout", "120", "--json", "--config"])
            .arg(&cfg)
            .env("SPOOL_STORE", &store_url),
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let done: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(done["snapshot"]["indexed"], 10, "{done}");
    assert_eq!(done["snapshot"]["adopted_spools"], 2, "{done}");
    assert_eq!(
        std::fs::read_dir(&key_dir)
            .unwrap()
            .flatten()
            .filter(|e| !spool_tests::is_reserve(&e.path()))
            .count(),
        0,
        "rank directories left"
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let catalog = spool_catalog::open(&catalog_url).unwrap();
    let s3: Arc<dyn ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::from_env()
            .with_endpoint(&endpoint)
            .with_allow_http(true)
            .with_bucket_name(&bucket)
            .build()
            .unwrap(),
    );
    let mut bundles = std::collections::BTreeSet::new();
    for (id, copy) in &staged {
        let row = rt
            .block_on(catalog.get(id))
            .unwrap()
            .unwrap_or_else(|| panic!("{id} is not indexed"));
        assert!(row.object_key.starts_with(&prefix), "{}", row.object_key);
        assert!(row.object_key.ends_with(".bundle"), "{}", row.object_key);
        bundles.insert(row.object_key.clone());
        let range = row.object_offset..row.object_offset + row.bytes;
        let bytes = rt
            .block_on(s3.get_range(
                &object_store::path::Path::from(row.object_key.as_str()),
                range,
            ))
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(&bytes[..], &copy[..], "{id} differs from its spooled bytes");
        spool_core::validate(
            std::io::Cursor::new(bytes.to_vec()),
            Some(PackId::from_hex(id).unwrap()),
            &AtomicBool::new(false),
        )
        .unwrap();
    }
    assert_eq!(rt.block_on(catalog.count()).unwrap(), 10);
    assert_eq!(
        bundles.len(),
        2,
        "one bundle per adopted sibling: {bundles:?}"
    );

    // The destination's grace is the prefix record's, written by `run
    // --once` from the file (2 s, four request bounds of 500 ms). An old
    // bundle no row names whose packs are indexed in the bundles above (a
    // successor's copies after a crash) is deleted; one holding a pack no
    // row names (a catalog that lost it), an object spool never wrote and
    // the bundles rows name stay.
    let ids: Vec<&String> = staged.keys().take(2).collect();
    let put_bundle = |packs: &[&[u8]]| {
        let key = spool_upload::bundle_key(
            &object_store::path::Path::from(prefix.as_str()),
            &PackId::generate(),
        );
        let bytes: Vec<u8> = packs.concat();
        rt.block_on(s3.put(&key, bytes.into())).unwrap();
        key.to_string()
    };
    let spare = put_bundle(&[&staged[ids[0]], &staged[ids[1]]]);
    let unindexed_pack = {
        let id = PackId::generate();
        let mut w = spool_core::pack::PackWriter::new(id, id.timestamp_ms());
        w.push_record(b"a pack whose row the catalog lost");
        w.finish()
    };
    let lost = put_bundle(&[&staged[ids[0]], &unindexed_pack]);
    let foreign = format!("{prefix}/notes/repo.bundle");
    rt.block_on(s3.put(
        &object_store::path::Path::from(foreign.as_str()),
        vec![0u8; 4096].into(),
    ))
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let swept = output(
        spool()
            .args(["sweep", "--json", "--config"])
            .arg(&cfg)
            .env("SPOOL_STORE", &store_url)
            // a grace of the sweeper's own is not used (with an hour it
            // would delete nothing)
            .env("SPOOL_UPLOAD_ORPHAN_GRACE", "1h"),
    );
    assert!(swept.status.success(), "{}", describe(&swept));
    let report: Value = serde_json::from_slice(&swept.stdout).unwrap();
    assert_eq!(report["grace_ms"], 2000, "{report}");
    assert_eq!(report["clock"], "store", "{report}");
    assert_eq!(report["deleted"], 1, "{report}");
    assert_eq!(
        report["deleted_bytes"],
        (staged[ids[0]].len() + staged[ids[1]].len()) as u64,
        "{report}"
    );
    assert_eq!(report["kept"], 2, "{report}");
    assert_eq!(report["orphaned_bytes"], 0, "{report}");
    assert_eq!(report["unindexed_bundles"], 1, "{report}");
    assert_eq!(report["unindexed_packs"], 1, "{report}");
    assert_eq!(report["foreign"], 1, "{report}");
    let exists = |key: &str| {
        rt.block_on(s3.head(&object_store::path::Path::from(key)))
            .is_ok()
    };
    assert!(!exists(&spare), "the spare bundle is still there");
    assert!(
        exists(&lost),
        "a bundle holding an unindexed pack was deleted"
    );
    assert!(exists(&foreign), "an object spool never wrote was deleted");
    assert!(
        bundles.iter().all(|b| exists(b)),
        "a bundle rows name was deleted"
    );
    rt.block_on(admin.testing_drop_database()).unwrap();
}

/// A fresh prefix of moto's bucket.
fn fresh_store(moto: &spool_tests::servers::Moto) -> String {
    format!("s3://{}/run-{}", moto.bucket, uuid::Uuid::new_v4().simple())
}

/// On moto (None without it): a fresh store URL, and an empty spool root
/// in a temp directory (kept while the directory lives).
fn moto_root() -> Option<(String, tempfile::TempDir, std::path::PathBuf)> {
    let moto = spool_tests::servers::moto()?;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    Some((fresh_store(&moto), tmp, root))
}

/// How many objects the rows of `root`'s embedded catalog name.
fn objects_named(root: &Path) -> i64 {
    let db = rusqlite::Connection::open(root.join(".catalog.db")).unwrap();
    db.query_row(
        "SELECT COUNT(DISTINCT object_key) FROM spool_packs",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// The node's daemon on `root` (the catalog embedded there, the store
/// `store_url`), lingering `linger` for a bundle, polling only every 60 s.
fn lingering_daemon(root: &Path, store_url: &str, linger: &str, args: &[&str]) -> KillOnDrop {
    KillOnDrop(
        spool()
            .args(["run", "--poll-interval", "60"])
            .args(args)
            .args(["--set", &format!("upload.bundle_linger={linger}")])
            .env("SPOOL_STORE", store_url)
            .arg("--spool-root")
            .arg(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// A live sink-only producer of 16 KiB packs in `root`'s layout (`args`:
/// how many, how far apart), holding its lock once done; its ids on
/// `stdout`.
fn holding_producer(root: &Path, store_url: &str, args: &[&str], stdout: Stdio) -> KillOnDrop {
    KillOnDrop(
        spool()
            .args(["produce", "--pack-bytes", "16384", "--hold"])
            .args(args)
            .arg("--spool-root")
            .arg(root)
            .env("SPOOL_STORE", store_url)
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// A running daemon holds a live sink-only producer's small packs back
/// for its bundle (`upload.bundle_linger`, here 4 s): `spool status`
/// shows that open bundle — its packs, bytes and wait — read from the
/// daemon's `/metrics`; when the linger ends it ships as one bundle.
#[test]
fn spool_status_shows_the_open_bundle_of_a_running_daemon() {
    let Some((store_url, _tmp, root)) = moto_root() else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut daemon = lingering_daemon(&root, &store_url, "4s", &["--metrics-addr", &addr]);
    let mut producer = holding_producer(&root, &store_url, &["--packs", "3"], Stdio::null());
    let status = || {
        let out = output(
            spool()
                .args(["status", "--json", "--metrics-addr", &addr])
                .arg(&root),
        );
        assert!(out.status.success(), "{}", describe(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let seen = loop {
        let s = status();
        if s["daemon"]["open_bundle"]["packs"] == 3 {
            break s;
        }
        assert!(Instant::now() < deadline, "no open bundle of 3 packs: {s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let ready: u64 = spool_tests::ready_under(&root)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(seen["daemon"]["answer"], "answered", "{seen}");
    assert_eq!(seen["daemon"]["open_bundle"]["bytes"], ready, "{seen}");
    std::thread::sleep(Duration::from_millis(300));
    let text = output(spool().args(["status", "--metrics-addr", &addr]).arg(&root));
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("daemon: open bundle of 3 pack(s)"))
        .unwrap_or_else(|| panic!("no open bundle line:\n{text}"));
    let waited: f64 = line
        .split("the oldest waiting ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(waited >= 0.3, "{line}");
    assert!(
        spool_tests::indexed_ids(&root).is_empty(),
        "shipped before the linger"
    );

    let deadline = Instant::now() + Duration::from_secs(20);
    while spool_tests::indexed_ids(&root).len() < 3 {
        assert!(Instant::now() < deadline, "the bundle never shipped");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status()["daemon"]["open_bundle"]["packs"], 0);
    let objects = objects_named(&root);
    assert_eq!(objects, 1, "one bundle");
    for child in [&mut producer, &mut daemon] {
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        assert!(child.wait().unwrap().success());
    }
}

/// A URL whose first host accepts and never answers: `spool ls` names that
/// host in a warning about 2 s into its wait (`SLOW_NOTICE` in
/// spool-catalog), long before the 8 s request timeout runs out and it
/// moves on to the live server, and then lists.
/// The node's daemon puts a crashed rank's packs and a live rank's in
/// one object: the live rank's small packs wait for their bundle (the
/// linger here 60 s), the crashed rank is adopted, and its step's run
/// carries them, long before the linger ends (on moto, the daemon's own
/// embedded catalog).
#[test]
fn a_crashed_rank_and_a_live_one_share_the_daemons_bundle() {
    let Some((store_url, _tmp, root)) = moto_root() else {
        return;
    };
    let mut daemon = lingering_daemon(&root, &store_url, "60s", &["--recheck-interval", "200ms"]);
    let mut live = holding_producer(&root, &store_url, &["--packs", "3"], Stdio::null());
    let mut crashed = holding_producer(&root, &store_url, &["--packs", "2"], Stdio::null());
    let deadline = Instant::now() + Duration::from_secs(30);
    while spool_tests::ready_under(&root).len() < 5 {
        assert!(Instant::now() < deadline, "the producers staged no 5 packs");
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(Pid::from_raw(crashed.id() as i32), Signal::SIGKILL).unwrap();
    crashed.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while spool_tests::indexed_ids(&root).len() < 5 {
        assert!(
            Instant::now() < deadline,
            "{} of 5 packs indexed 20 s after the crash",
            spool_tests::indexed_ids(&root).len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let objects = objects_named(&root);
    assert_eq!(
        objects, 1,
        "the crashed rank's packs and the live one's share one bundle"
    );
    for child in [&mut live, &mut daemon] {
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        assert!(child.wait().unwrap().success());
    }
}

#[test]
fn a_replica_that_stalls_at_start_is_named_while_it_is_waited_for() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let Some(ch) = spool_tests::server_env("SPOOL_TEST_CLICKHOUSE_URL") else {
        return;
    };
    let (catalog_url, admin) = spool_tests::servers::fresh_clickhouse(&ch);
    // a catalog a service made (a read never makes one)
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(spool_catalog::Catalog::ensure_schema(&admin))
        .unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_at = silent.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s);
        }
    });
    let authority = catalog_url
        .split("://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let url = catalog_url.replacen(&authority, &format!("{silent_at},{authority}"), 1);
    let started = Instant::now();
    let mut child = spool_tests::KillOnDrop(
        spool()
            .args(["ls", "--json", "--catalog", &url])
            .env("SPOOL_CATALOG_REQUEST_TIMEOUT", "8s")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let lines: Vec<(Duration, String)> = std::io::BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .map(|l| (started.elapsed(), l))
        .collect();
    let status = child.wait().unwrap();
    let _ = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(admin.testing_drop_database());
    let shown: String = lines.iter().map(|(t, l)| format!("{t:?} {l}\n")).collect();
    assert!(status.success(), "spool ls failed:\n{shown}");
    let named = lines
        .iter()
        .find(|(_, l)| l.contains(&silent_at) && l.contains("no answer yet"))
        .unwrap_or_else(|| panic!("no line names the stalled host {silent_at}:\n{shown}"));
    assert!(
        named.0 >= Duration::from_millis(1500) && named.0 < Duration::from_secs(5),
        "the stalled host is named {:?} into the wait (about 2 s wanted, the timeout is 8 s):\n{shown}",
        named.0
    );
}
