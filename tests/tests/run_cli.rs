//! Black-box tests of `spool run` and `spool config show`: the real binary,
//! real producer processes (`spool produce`, which exit and leave dead
//! sibling directories behind), the real lock, the embedded store and
//! SQLite catalog, real signals, wiremock for wrong credentials.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use spool_tests::{describe, output, spool, KillOnDrop};

/// `ROOT/<catalog key>` for `root` and these extra flags, as `spool config
/// show` derives it.
fn key_dir(root: &Path, extra: &[&str]) -> PathBuf {
    let out = output(
        spool()
            .args(["config", "show", "--json", "--spool-root"])
            .arg(root)
            .args(extra),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    PathBuf::from(v["derived"]["key_dir"].as_str().expect("key_dir"))
}

/// Stages `n` packs into `dir` with a real producer process that then
/// exits (so `dir` is a dead sibling); returns their ids.
fn stage(dir: &Path, n: usize) -> Vec<String> {
    fs::create_dir_all(dir.parent().unwrap()).unwrap();
    let out = output(
        spool()
            .args(["produce", "--pack-bytes", "2048", "--packs"])
            .arg(n.to_string())
            .arg("--dir")
            .arg(dir),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), n);
    ids
}

fn ready(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter_map(|n| n.strip_suffix(".ready").map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn stored_object(root: &Path, id: &str) -> Option<PathBuf> {
    spool_tests::store_objects(root).remove(id)
}

/// The catalog's rows as `spool ls --json` prints them.
fn ls_json(root: &Path) -> Vec<Value> {
    let out = output(spool().args(["ls", "--json", "--spool-root"]).arg(root));
    assert!(out.status.success(), "{}", describe(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn catalog_rows(root: &Path) -> BTreeSet<String> {
    spool_tests::indexed_ids(root)
}

/// Claims lease `name` as `holder` for `ttl_s` seconds in the embedded
/// catalog of `root` (another service's lease row).
fn hold_lease(root: &Path, name: &str, holder: &str, ttl_s: u64) {
    let url = format!(
        "sqlite://{}/.catalog.db",
        root.canonicalize().unwrap().display()
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let cat = spool_catalog::open(&url).unwrap();
        let cfg = spool_catalog::LeaseConfig::new(Duration::from_secs(ttl_s)).unwrap();
        let claim = cat.acquire(name, holder, &cfg).await.unwrap();
        assert!(
            matches!(claim, spool_catalog::LeaseClaim::Held(_)),
            "{claim:?}"
        );
    });
}

/// A dead sibling `r1-0000abcd` with 2 packs under `root`'s key directory,
/// and the node lease held for `ttl_s` by `holder(sibling)`.
fn sibling_beside_node_lease(
    root: &Path,
    holder: impl Fn(&Path) -> String,
    ttl_s: u64,
) -> (PathBuf, Vec<String>) {
    let kd = key_dir(root, &[]);
    let key = kd.file_name().unwrap().to_str().unwrap().to_string();
    let sib = kd.join("r1-0000abcd");
    let ids = stage(&sib, 2);
    let name = spool_catalog::LeaseScope::Node.lease_name(&key, &spool_lock::host_name());
    hold_lease(root, &name, &holder(&sib), ttl_s);
    (sib, ids)
}

fn run_once(root: &Path, extra: &[&str]) -> Output {
    output(
        spool()
            .args(["run", "--once", "--spool-root"])
            .arg(root)
            .args(extra),
    )
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn assert_unheld(dir: &Path) {
    let st = spool_lock::read_owner(dir).unwrap();
    assert!(!st.held, "{} is still locked", dir.display());
}

/// Lines of a child's stdout as they come.
fn lines(child: &mut Child) -> Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn spawn_daemon(
    root: &Path,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> (KillOnDrop, Receiver<String>, Value) {
    let mut child = KillOnDrop(
        spool()
            .args(["run", "--json", "--spool-root"])
            .arg(root)
            .args(extra)
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let rx = lines(&mut child);
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the daemon prints its start event");
    let v: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["event"], "started", "{first}");
    (child, rx, v)
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the daemon did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn child_stderr(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// A run for one destination beside another destination's packs in the
/// same spool root: drained is true of its own destination only, and the
/// message says what it left under the other catalog key (and ships none
/// of it).
#[test]
fn run_once_says_what_another_destination_left_under_the_root() {
    let root = tempfile::tempdir().unwrap();
    let kd = key_dir(root.path(), &[]);
    let ids = stage(&kd.join("r1-0000abcd"), 3);
    let other_catalog = format!("sqlite://{}/other.db", root.path().display());
    let out = run_once(
        root.path(),
        &["--timeout", "60", "--catalog", &other_catalog],
    );
    assert_eq!(code(&out), 0, "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("drained: 0 pack(s)")
            && stdout.contains(&format!(
                "Not this run's destination: 3 ready pack(s) under 1 other catalog key(s) of this \
                 spool root ({} (3))",
                kd.display()
            )),
        "{}",
        describe(&out)
    );
    assert_eq!(ready(&kd.join("r1-0000abcd")), ids.into_iter().collect());
}

#[test]
fn run_once_on_embedded_defaults_drains_dead_siblings_into_store_and_catalog() {
    let root = tempfile::tempdir().unwrap();
    let kd = key_dir(root.path(), &[]);
    let a = kd.join("r1-0000abcd");
    let b = kd.join("r2-0000abce");
    let mut ids = stage(&a, 5);
    ids.extend(stage(&b, 3));
    // the staged bytes, to compare with what lands in the store
    let staged: Vec<(String, Vec<u8>)> = ids
        .iter()
        .map(|id| {
            let p = [&a, &b]
                .iter()
                .map(|d| d.join(format!("{id}.ready")))
                .find(|p| p.exists())
                .unwrap();
            (id.clone(), fs::read(p).unwrap())
        })
        .collect();
    let out = run_once(root.path(), &["--timeout", "60"]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("drained: 8 pack(s)") && stdout.contains("2 sibling directories adopted"),
        "{}",
        describe(&out)
    );
    // progress lines (stderr is not a terminal)
    assert!(
        stderr(&out).contains("pack(s) drained"),
        "{}",
        describe(&out)
    );
    for (id, bytes) in &staged {
        let obj = stored_object(root.path(), id).unwrap_or_else(|| panic!("{id} not in the store"));
        assert_eq!(&fs::read(obj).unwrap(), bytes, "{id} differs in the store");
    }
    let rows = catalog_rows(root.path());
    assert_eq!(rows, ids.iter().cloned().collect(), "catalog rows");
    // the siblings and the daemon's own directory are gone
    let left: Vec<_> = fs::read_dir(&kd)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| !spool_tests::is_reserve(p))
        .collect();
    assert!(left.is_empty(), "left under the key: {left:?}");

    // The embedded store and catalog are outside every walk: a pack-named
    // file in the store is no flat pack, a second run claims and drains
    // nothing, and `spool status ROOT` does not list them.
    // a directory of the store's key layout, beside the objects
    let (_, any) = spool_tests::store_objects(root.path()).pop_first().unwrap();
    let day = any.parent().unwrap().to_path_buf();
    fs::write(day.join(format!("{}.ready", "0".repeat(32))), b"not a pack").unwrap();
    let out = run_once(root.path(), &["--timeout", "60", "--json"]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
    assert!(
        !stderr(&out).contains("outside the spool layout"),
        "{}",
        describe(&out)
    );
    let done: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(done["event"], "done");
    assert_eq!(done["snapshot"]["indexed"], 0, "{done}");
    let out = output(spool().arg("status").arg(root.path()));
    assert_eq!(code(&out), 0, "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains(".store") && !text.contains(".catalog.db"),
        "{text}"
    );
}

/// A row's `sha256` is what a standard tool prints of its object
/// (`sha256sum`, the coreutils binary), and the one `spool produce
/// --print-sha256` reported; its `trailer_sha256` is the checksum the
/// pack's trailer carries (its last 32 bytes), a different value.
#[test]
fn every_row_carries_the_sha256_that_sha256sum_prints_of_its_object() {
    let root = tempfile::tempdir().unwrap();
    let dir = key_dir(root.path(), &[]).join("r1-0000abcd");
    fs::create_dir_all(dir.parent().unwrap()).unwrap();
    let out = output(
        spool()
            .args(["produce", "--pack-bytes", "4096", "--packs", "3"])
            .args(["--print-sha256", "--dir"])
            .arg(&dir),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let reported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(reported.len(), 3, "{}", describe(&out));
    let out = run_once(root.path(), &["--timeout", "60"]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
    let mut rows = BTreeSet::new();
    for row in ls_json(root.path()) {
        let id = row["pack_id"].as_str().unwrap();
        let (sha, trailer) = (
            row["sha256"].as_str().unwrap(),
            row["trailer_sha256"].as_str().unwrap(),
        );
        let obj = stored_object(root.path(), id).unwrap();
        let sum = output(std::process::Command::new("sha256sum").arg(&obj));
        assert!(sum.status.success(), "{}", describe(&sum));
        let printed = String::from_utf8_lossy(&sum.stdout);
        assert_eq!(printed.split_whitespace().next(), Some(sha), "{row}");
        let bytes = fs::read(&obj).unwrap();
        let tail: String = bytes[bytes.len() - 32..]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(trailer, tail, "{row}");
        assert_ne!(sha, trailer, "{row}");
        rows.insert(format!("{id} {sha}"));
    }
    assert_eq!(rows, reported, "the rows against what produce reported");
}

#[test]
fn run_once_leaves_a_live_sibling_alone_and_json_progress() {
    let root = tempfile::tempdir().unwrap();
    let kd = key_dir(root.path(), &[]);
    let live = kd.join("r3-0000beef");
    fs::create_dir_all(&kd).unwrap();
    // a producer that keeps its lock (a live sibling with ready packs)
    let mut holder = KillOnDrop(
        spool()
            .args(["produce", "--packs", "2", "--hold", "--dir"])
            .arg(&live)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let rx = lines(&mut holder);
    for _ in 0..2 {
        rx.recv_timeout(Duration::from_secs(30)).expect("staged");
    }
    let dead = kd.join("r4-0000cafe");
    let ids = stage(&dead, 2);
    let before = ready(&live);
    let out = run_once(root.path(), &["--timeout", "60", "--json"]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["event"], "started");
    assert!(
        events.iter().any(|e| e["event"] == "progress"),
        "{events:?}"
    );
    let done = events.last().unwrap();
    assert_eq!(done["snapshot"]["live_siblings"], 1, "{done}");
    assert_eq!(done["snapshot"]["indexed"], 2, "{done}");
    // where the drains' time went, in ms per stage
    for stage in ["list", "validate", "upload", "index", "remove", "idle"] {
        assert!(
            done["snapshot"]["stage_ms"][stage].is_u64(),
            "{stage}: {done}"
        );
    }
    assert_eq!(
        ready(&live),
        before,
        "the live sibling's packs were touched"
    );
    assert_eq!(catalog_rows(root.path()), ids.into_iter().collect());
    for id in &before {
        assert!(
            stored_object(root.path(), id).is_none(),
            "a live pack was uploaded"
        );
    }
    kill(Pid::from_raw(holder.id() as i32), Signal::SIGTERM).unwrap();
    holder.wait().unwrap();
}

#[test]
fn run_once_timeout_exits_6_saying_what_is_owed() {
    let root = tempfile::tempdir().unwrap();
    let store = "s3://bucket/spool";
    let kd = key_dir(root.path(), &["--store", store]);
    let sib = kd.join("r1-0000abcd");
    let ids = stage(&sib, 3);
    let port = closed_port();
    let out = output(
        spool()
            .args([
                "run",
                "--once",
                "--timeout",
                "3",
                "--store",
                store,
                "--spool-root",
            ])
            .arg(root.path())
            .env("AWS_ENDPOINT", format!("http://127.0.0.1:{port}"))
            .env("AWS_ACCESS_KEY_ID", "k")
            .env("AWS_SECRET_ACCESS_KEY", "s")
            .env("AWS_REGION", "us-east-1")
            .env("SPOOL_CLIENT_ALLOW_HTTP", "true")
            .env("SPOOL_CLIENT_MAX_RETRIES", "0"),
    );
    assert_eq!(code(&out), 6, "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("not drained within 3s")
            && err.contains("r1-0000abcd (3)")
            && err.contains("adoption owed"),
        "{err}"
    );
    assert_eq!(ready(&sib), ids.into_iter().collect(), "packs kept");
    assert_unheld(&sib);
}

#[test]
fn run_latched_exits_7_naming_the_other_holder() {
    let root = tempfile::tempdir().unwrap();
    let kd = key_dir(root.path(), &[]);
    let key = kd.file_name().unwrap().to_str().unwrap().to_string();
    let sib = kd.join("r1-0000abcd");
    let ids = stage(&sib, 2);
    // another single publisher holds the catalog-scope lease for a minute
    hold_lease(
        root.path(),
        &spool_catalog::LeaseScope::Catalog.lease_name(&key, "any"),
        "someone-else:4242",
        60,
    );
    let t0 = Instant::now();
    let out = run_once(
        root.path(),
        &[
            "--lease-scope",
            "catalog",
            "--lease-ttl",
            "5",
            "--timeout",
            "60",
        ],
    );
    assert_eq!(code(&out), 7, "{}", describe(&out));
    assert!(t0.elapsed() < Duration::from_secs(50), "{:?}", t0.elapsed());
    let err = stderr(&out);
    assert!(
        err.contains("latched") && err.contains("pid 4242 on host someone-else"),
        "{err}"
    );
    assert_eq!(ready(&sib), ids.into_iter().collect(), "nothing taken");
    assert!(catalog_rows(root.path()).is_empty());
}

/// `run --once` beside another live service that holds the node's adopter
/// lease: says so at once naming its holder, ships its own directory, and
/// exits 0 saying who adopts the rest, without touching the sibling; with
/// `--wait-for-siblings` it waits for them, bounded by `--timeout` (exit 6
/// naming the holder).
#[test]
fn run_once_beside_the_lease_holder_exits_0_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let (sib, ids) = sibling_beside_node_lease(
        root.path(),
        |_| "otherhost:4242:/srv/spool/r9-00000009".into(),
        60,
    );
    let t0 = Instant::now();
    let out = run_once(root.path(), &["--lease-ttl", "5", "--timeout", "60"]);
    let took = t0.elapsed();
    assert_eq!(code(&out), 0, "{}", describe(&out));
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let all = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    assert!(
        all.contains("held by pid 4242 on host otherhost")
            && all.contains("adopts the dead siblings"),
        "{all}"
    );
    assert_eq!(
        ready(&sib),
        ids.iter().cloned().collect(),
        "the sibling is the holder's"
    );

    let t0 = Instant::now();
    let out = run_once(
        root.path(),
        &["--lease-ttl", "5", "--timeout", "3", "--wait-for-siblings"],
    );
    assert_eq!(code(&out), 6, "{}", describe(&out));
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    let err = stderr(&out);
    assert!(
        err.contains("the node lease is held by pid 4242 on host otherhost"),
        "{err}"
    );
    assert_eq!(ready(&sib), ids.into_iter().collect());
}

/// A lease row of a service on this host whose rank directory is no longer
/// locked (it was SIGKILLed) is not another live adopter: `run --once` waits
/// for that lease to lapse, takes it, and adopts the sibling (the demo's
/// SIGKILLed rank), never "left to the holder".
#[test]
fn run_once_beside_a_dead_same_host_lease_holder_adopts_after_it_lapses() {
    let root = tempfile::tempdir().unwrap();
    // the dead rank held the node's lease (5 s) when it died
    let (sib, ids) = sibling_beside_node_lease(
        root.path(),
        |sib| format!("{}:999999:{}", spool_lock::host_name(), sib.display()),
        5,
    );
    let t0 = Instant::now();
    let out = run_once(root.path(), &["--lease-ttl", "5", "--timeout", "40"]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let all = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    assert!(
        all.contains("drained:") && !all.contains("adopts the dead siblings"),
        "{all}"
    );
    assert!(ready(&sib).is_empty(), "adopted: {:?}", ready(&sib));
    assert_eq!(catalog_rows(root.path()), ids.into_iter().collect());
}

/// A catalog that accepts connections and never answers, from the start:
/// `run --once --timeout 5` exits 6 within its timeout (plus the bounded
/// stop) and its message names the catalog (credentials masked) and what it
/// waited for, never "last error: none".
#[test]
fn run_once_with_the_catalog_stalled_at_start_exits_6_naming_the_catalog() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // accept every connection and keep it open, never answering
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            held.push(c);
        }
    });
    let root = tempfile::tempdir().unwrap();
    let catalog = format!("clickhouse://spooler:Sup3rS3cretPw@127.0.0.1:{port}/spooldb");
    let kd = key_dir(root.path(), &["--catalog", &catalog]);
    let sib = kd.join("r1-0000abcd");
    let ids = stage(&sib, 2);
    let t0 = Instant::now();
    let out = run_once(
        root.path(),
        &["--catalog", &catalog, "--timeout", "5", "--lease-ttl", "5"],
    );
    let took = t0.elapsed();
    assert_eq!(code(&out), 6, "{}", describe(&out));
    assert!(took < Duration::from_secs(5 + 5), "took {took:?}");
    let all = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    let done = all
        .lines()
        .find(|l| l.contains("not drained within 5s"))
        .unwrap_or_else(|| panic!("no timeout message: {all}"));
    assert!(
        done.contains(&format!("127.0.0.1:{port}")) && done.contains("spooldb"),
        "names the catalog: {done}"
    );
    assert!(!done.contains("last error: none"), "{done}");
    assert!(!all.contains("Sup3rS3cretPw"), "{all}");
    assert_eq!(ready(&sib), ids.into_iter().collect(), "packs kept");
}

fn scrape(addr: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(spool_tests::http::request(addr, "GET", "/metrics"))
        .unwrap()
}

fn healthz(addr: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(spool_tests::http::request(addr, "GET", "/healthz"))
        .unwrap()
}

/// The value of one sample, parsed as Prometheus text exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text");
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name)
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

fn wait_until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn metrics_move_as_packs_flow_and_healthz_turns_503_on_latch() {
    let root = tempfile::tempdir().unwrap();
    let kd = key_dir(root.path(), &[]);
    let key = kd.file_name().unwrap().to_str().unwrap().to_string();
    let (mut child, _rx, started) = spawn_daemon(
        root.path(),
        &[
            "--metrics-addr",
            "127.0.0.1:0",
            "--recheck-interval",
            "1",
            "--lease-ttl",
            "5",
            "--set",
            "metrics.linger=30s",
        ],
        &[],
    );
    let addr = started["metrics_addr"].as_str().unwrap().to_string();
    let (status, text) = scrape(&addr);
    assert_eq!(status, 200);
    for name in [
        "spool_uploaded_packs_total",
        "spool_indexed_packs_total",
        "spool_pending_index_packs",
        "spool_adopted_spools_total",
        "spool_sibling_bytes",
        "spool_latched",
        "spool_lease_held",
        "spool_cycles_total",
    ] {
        assert!(sample(&text, name).is_some(), "{name} missing:\n{text}");
    }
    assert_eq!(sample(&text, "spool_indexed_packs_total"), Some(0.0));
    assert_eq!(healthz(&addr).0, 200);
    // packs flow: a producer dies, the daemon adopts its directory
    stage(&kd.join("r1-0000abcd"), 4);
    wait_until(
        "4 packs indexed in /metrics",
        Duration::from_secs(30),
        || sample(&scrape(&addr).1, "spool_indexed_packs_total") == Some(4.0),
    );
    let text = scrape(&addr).1;
    assert_eq!(sample(&text, "spool_uploaded_packs_total"), Some(4.0));
    assert_eq!(sample(&text, "spool_adopted_spools_total"), Some(1.0));
    assert_eq!(sample(&text, "spool_lease_held"), Some(1.0));
    assert_eq!(healthz(&addr).0, 200);
    // another adopter takes over the node lease and keeps it: the daemon
    // loses it, latches after 2 x TTL, /healthz says 503, it exits 7
    let url = format!(
        "sqlite://{}/.catalog.db",
        root.path().canonicalize().unwrap().display()
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let cat = spool_catalog::open(&url).unwrap();
        let name = spool_catalog::LeaseScope::Node.lease_name(&key, &spool_lock::host_name());
        let head = cat.read_lease_head(&name).await.unwrap();
        cat.append_claim(&spool_catalog::NewClaim {
            name: name.clone(),
            term: head.term() + 1,
            lease_id: uuid::Uuid::new_v4(),
            holder: "usurper:77".into(),
            ttl_ms: 600_000,
        })
        .await
        .unwrap();
    });
    let mut body = String::new();
    wait_until("/healthz 503", Duration::from_secs(60), || {
        let (s, b) = healthz(&addr);
        body = b;
        s == 503
    });
    assert!(
        body.contains("latched") && body.contains("pid 77 on host usurper"),
        "{body}"
    );
    assert_eq!(sample(&scrape(&addr).1, "spool_latched"), Some(1.0));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap(); // ends the linger
    let st = wait_exit(&mut child, Duration::from_secs(30));
    assert_eq!(st.code(), Some(7), "{}", child_stderr(&mut child));
}

#[test]
fn bad_inputs_are_refused_with_their_exit_codes() {
    let root = tempfile::tempdir().unwrap();
    // missing spool root
    let missing = root.path().join("nope");
    let out = run_once(&missing, &[]);
    assert_eq!(code(&out), 1, "{}", describe(&out));
    assert!(
        stderr(&out).contains(&format!("{} does not exist", missing.display())),
        "{}",
        describe(&out)
    );
    // no spool root at all
    let out = output(spool().args(["run", "--once"]).env_remove("SPOOL_ROOT"));
    assert_eq!(code(&out), 2, "{}", describe(&out));
    assert!(stderr(&out).contains("no spool root"), "{}", describe(&out));
    // unreadable config
    let out = output(
        spool()
            .args(["run", "--once", "--config"])
            .arg(root.path().join("absent.toml"))
            .arg("--spool-root")
            .arg(root.path()),
    );
    assert_eq!(code(&out), 2, "{}", describe(&out));
    assert!(stderr(&out).contains("absent.toml"), "{}", describe(&out));
    // unknown key, bad value
    let cfg = root.path().join("spool.toml");
    fs::write(&cfg, "[lease]\nttl = 10\nttl_seconds = 3\n").unwrap();
    let out = output(
        spool()
            .args(["run", "--once", "--config"])
            .arg(&cfg)
            .arg("--spool-root")
            .arg(root.path()),
    );
    assert_eq!(code(&out), 2, "{}", describe(&out));
    assert!(
        stderr(&out).contains("ttl_seconds") && stderr(&out).contains("spool.toml"),
        "{}",
        describe(&out)
    );
    fs::write(&cfg, "[upload]\nmax_workers = \"many\"\n").unwrap();
    let out = output(spool().args(["config", "show", "--config"]).arg(&cfg));
    assert_eq!(code(&out), 2, "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("upload.max_workers")
            && err.contains("\"many\"")
            && err.contains("whole number"),
        "{err}"
    );
    fs::write(&cfg, "[lease]\nscope = \"rack\"\n").unwrap();
    let out = output(spool().args(["config", "show", "--config"]).arg(&cfg));
    assert_eq!(code(&out), 2, "{}", describe(&out));
    assert!(
        stderr(&out).contains("node or catalog"),
        "{}",
        describe(&out)
    );
    // bad URL scheme
    let out = run_once(root.path(), &["--store", "ftp://host/dir"]);
    assert_eq!(code(&out), 2, "{}", describe(&out));
    assert!(
        stderr(&out).contains("destination.store") && stderr(&out).contains("s3://"),
        "{}",
        describe(&out)
    );
    let out = run_once(root.path(), &["--catalog", "postgres://h/db"]);
    assert_eq!(code(&out), 2, "{}", describe(&out));
    assert!(
        stderr(&out).contains("destination.catalog"),
        "{}",
        describe(&out)
    );
}

#[test]
fn a_spool_root_held_by_another_process_exits_3_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let mut holder = KillOnDrop(
        spool()
            .args(["lock", "hold"])
            .arg(root.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let rx = lines(&mut holder);
    let held = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(held.starts_with("held"), "{held}");
    let out = run_once(root.path(), &["--timeout", "10"]);
    assert_eq!(code(&out), 3, "{}", describe(&out));
    assert!(
        stderr(&out).contains(&format!("pid {}", holder.id())),
        "{}",
        describe(&out)
    );
    kill(Pid::from_raw(holder.id() as i32), Signal::SIGTERM).unwrap();
    holder.wait().unwrap();
}

#[test]
fn config_show_says_where_each_value_came_from_and_masks_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("spool.toml");
    fs::write(
        &cfg,
        "[lease]\nttl = 12\n[service]\npoll_interval = \"250ms\"\n[destination]\ncatalog = \"clickhouse://admin:filepw@ch:8123/db?table_prefix=t_\"\n",
    )
    .unwrap();
    let out = output(
        spool()
            .args([
                "config",
                "show",
                "--lease-ttl",
                "20",
                "--set",
                "upload.max_workers=8",
                "--spool-root",
            ])
            .arg(dir.path())
            .current_dir(dir.path()) // ./spool.toml found without --config
            .env("SPOOL_POLL_INTERVAL", "2s")
            .env("AWS_SECRET_ACCESS_KEY", "awssecretvalue")
            .env("SPOOL_STORE", "s3://bucket/pre"),
    );
    assert_eq!(code(&out), 0, "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    for (key, value, source) in [
        ("lease.ttl", "20s", "flag --lease-ttl"),
        ("service.poll_interval", "2s", "env SPOOL_POLL_INTERVAL"),
        (
            "destination.catalog",
            "clickhouse://admin:****@ch:8123/db?table_prefix=t_",
            "file",
        ),
        ("destination.store", "s3://bucket/pre", "env SPOOL_STORE"),
        ("upload.max_workers", "8", "flag --set upload.max_workers"),
        ("service.max_backoff", "30s", "default"),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("{key} missing:\n{text}"));
        assert!(line.contains(value) && line.contains(source), "{line}");
    }
    assert!(
        text.contains("table_prefix  t_") && text.contains("catalog_key"),
        "{text}"
    );
    assert!(text.contains("AWS_SECRET_ACCESS_KEY=**** (set)"), "{text}");
    assert!(
        !text.contains("filepw") && !text.contains("awssecretvalue"),
        "{text}"
    );
}

/// Wrong ClickHouse credentials (wiremock answering every request with
/// ClickHouse's authentication error): the run cannot get the lease nor
/// index, and says so at once (exit 1 long before its 60 s timeout: a
/// destination-wide refusal is not waited out), and the password given
/// in the catalog URL appears nowhere — not in errors, not in debug logs
/// (text or JSON), not in `config show`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_clickhouse_credentials_fail_at_once_and_never_leak_the_password() {
    use wiremock::{matchers::any, Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    Mock::given(any())
        .respond_with(
            ResponseTemplate::new(516).insert_header("X-ClickHouse-Exception-Code", "516").set_body_string(
                "Code: 516. DB::Exception: spooler: Authentication failed: password is incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)",
            ),
        )
        .mount(&server)
        .await;
    let port = server.address().port();
    let root = tempfile::tempdir().unwrap();
    let catalog = format!("clickhouse://spooler:Sup3rS3cretPw@127.0.0.1:{port}/spooldb");
    let catalog2 = catalog.clone();
    let r = root.path().to_path_buf();
    let (outs, ids, sib) = tokio::task::spawn_blocking(move || {
        let kd = key_dir(&r, &["--catalog", &catalog2]);
        let sib = kd.join("r1-0000abcd");
        let ids = stage(&sib, 2);
        let mut outs = Vec::new();
        for fmt in ["text", "json"] {
            let t = std::time::Instant::now();
            outs.push(output(
                spool()
                    .args([
                        "--log-format",
                        fmt,
                        "run",
                        "--once",
                        "--timeout",
                        "60",
                        "--lease-ttl",
                        "5",
                        "--catalog",
                    ])
                    .arg(&catalog2)
                    .arg("--spool-root")
                    .arg(&r)
                    .env("RUST_LOG", "debug"),
            ));
            assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        }
        outs.push(output(
            spool()
                .args(["config", "show", "--spool-root"])
                .arg(&r)
                .env("SPOOL_CATALOG", &catalog2),
        ));
        outs.push(output(
            spool()
                .args(["config", "show", "--json", "--spool-root"])
                .arg(&r)
                .env(
                    "SPOOL_CATALOG",
                    format!(
                        "clickhouse://127.0.0.1:{port}/spooldb?user=spooler&password=Sup3rS3cretPw"
                    ),
                ),
        ));
        (outs, ids, sib)
    })
    .await
    .unwrap();
    let _ = catalog;
    for out in &outs[..2] {
        assert_eq!(code(out), 1, "{}", describe(out));
        assert!(
            stderr(out).contains("Authentication failed") && stderr(out).contains("refuses"),
            "{}",
            describe(out)
        );
    }
    for out in &outs {
        let all = describe(out);
        assert!(
            !all.contains("Sup3rS3cretPw"),
            "the password leaked:\n{all}"
        );
    }
    assert_eq!(ready(&sib), ids.into_iter().collect());
    assert_unheld(&sib);
}

/// Wrong S3 credentials (wiremock: HEAD 404, PUT 403 AccessDenied): a
/// refusal of the whole destination, so the adopted sibling is
/// never blocked nor any pack set aside: `run --once` says at once (exit 1,
/// long before its 60 s timeout) that the store refuses the destination,
/// and the sibling is let go whole, unmarked, for the run after the
/// credentials are fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_access_denied_never_blocks_the_sibling_and_fails_at_once_naming_the_refusal() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    Mock::given(method("HEAD"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .respond_with(ResponseTemplate::new(403).set_body_string(
            "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>",
        ))
        .mount(&server)
        .await;
    let uri = server.uri();
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_path_buf();
    let t = std::time::Instant::now();
    let (out, ids, sib) = tokio::task::spawn_blocking(move || {
        let store = "s3://bucket/p";
        let kd = key_dir(&r, &["--store", store]);
        let sib = kd.join("r1-0000abcd");
        let ids = stage(&sib, 2);
        let out = output(
            spool()
                .args([
                    "run",
                    "--once",
                    "--timeout",
                    "60",
                    "--store",
                    store,
                    "--spool-root",
                ])
                .arg(&r)
                .env("AWS_ENDPOINT", &uri)
                .env("AWS_ACCESS_KEY_ID", "wrong")
                .env("AWS_SECRET_ACCESS_KEY", "wrong")
                .env("AWS_REGION", "us-east-1")
                .env("SPOOL_CLIENT_ALLOW_HTTP", "true"),
        );
        (out, ids, sib)
    })
    .await
    .unwrap();
    assert_eq!(code(&out), 1, "{}", describe(&out));
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    let err = stderr(&out);
    assert!(
        err.contains("refuses this destination") && err.contains("403"),
        "{err}"
    );
    assert!(!err.contains("spool unblock"), "{err}");
    assert_eq!(ready(&sib), ids.into_iter().collect());
    let owner = spool_lock::read_owner(&sib).unwrap();
    assert!(!owner.held);
    assert!(
        !matches!(
            owner.record.map(|r| r.purpose),
            Some(spool_lock::Purpose::Blocked(_))
        ),
        "never marked blocked"
    );
}

/// Liveness bounds: one at a time (nextest group `serial`).
mod serial {
    use super::*;

    /// SIGTERM while the daemon is stuck adopting a sibling (its store is a
    /// closed port): exit 0 promptly, the sibling whole and unlocked.
    #[test]
    fn sigterm_stops_promptly_with_the_sibling_kept_whole() {
        let root = tempfile::tempdir().unwrap();
        let store = "s3://bucket/spool";
        let kd = key_dir(root.path(), &["--store", store]);
        let sib = kd.join("r1-0000abcd");
        let ids = stage(&sib, 3);
        let endpoint = format!("http://127.0.0.1:{}", closed_port());
        let (mut child, _rx, started) = spawn_daemon(
            root.path(),
            &[
                "--store",
                store,
                "--metrics-addr",
                "127.0.0.1:0",
                "--set",
                "service.unhealthy_after=1s",
            ],
            &[
                ("AWS_ENDPOINT", endpoint.as_str()),
                ("AWS_ACCESS_KEY_ID", "k"),
                ("AWS_SECRET_ACCESS_KEY", "s"),
                ("AWS_REGION", "us-east-1"),
                ("SPOOL_CLIENT_ALLOW_HTTP", "true"),
            ],
        );
        let own = PathBuf::from(started["dir"].as_str().unwrap());
        let addr = started["metrics_addr"].as_str().unwrap().to_string();
        // the store keeps failing: /healthz turns 503 and says why
        let mut body = String::new();
        wait_until("/healthz 503", Duration::from_secs(30), || {
            let (s, b) = healthz(&addr);
            body = b;
            s == 503
        });
        assert!(
            body.contains("stores failing") && body.contains("last error"),
            "{body}"
        );
        // wait until it took the sibling (adopting record) or 3 s passed
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            let o = spool_lock::read_owner(&sib).unwrap();
            if o.held {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let t0 = Instant::now();
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let st = wait_exit(&mut child, Duration::from_secs(20));
        let took = t0.elapsed();
        assert_eq!(st.code(), Some(0), "{}", child_stderr(&mut child));
        assert!(took < Duration::from_secs(5), "stop took {took:?}");
        assert_eq!(ready(&sib), ids.into_iter().collect(), "packs kept whole");
        assert_unheld(&sib);
        assert!(!own.exists(), "the daemon's empty own directory is removed");
    }

    /// Black-box: `spool run` (through `spool-with-seams
    /// --panic-on-index`, whose catalog's `index()` panics) adopting a dead
    /// sibling: `/healthz` says 503 `loop_failed` naming the panic, the
    /// daemon exits 10 within a bounded stop, the sibling is let go with
    /// every pack in it.
    #[test]
    fn a_panicked_loop_makes_spool_run_exit_10_and_let_go_of_the_sibling() {
        let root = tempfile::tempdir().unwrap();
        let kd = key_dir(root.path(), &[]);
        let sib = kd.join("r1-0000abcd");
        let ids = stage(&sib, 2);
        let mut child = KillOnDrop(
            spool_tests::spool_with_seams(&["--panic-on-index"])
                .args(["run", "--json", "--metrics-addr", "127.0.0.1:0"])
                .arg("--spool-root")
                .arg(root.path())
                .env("SPOOL_METRICS_LINGER", "3s")
                .env("SPOOL_STOP_FLUSH_TIMEOUT", "2s")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let rx = lines(&mut child);
        let first = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        let started: Value = serde_json::from_str(&first).unwrap();
        let addr = started["metrics_addr"].as_str().unwrap().to_string();
        let t = Instant::now();
        let mut body = String::new();
        wait_until("/healthz 503 loop_failed", Duration::from_secs(20), || {
            let (s, b) = healthz(&addr);
            body = b;
            s == 503 && body.contains("loop_failed")
        });
        assert!(body.contains("index() exploded on purpose"), "{body}");
        // stop_flush_timeout 2 s + the 3 s linger for the scrape + margin
        let st = wait_exit(&mut child, Duration::from_secs(20));
        let took = t.elapsed();
        let err = child_stderr(&mut child);
        assert_eq!(st.code(), Some(10), "{err}");
        assert!(err.contains("index() exploded on purpose"), "{err}");
        assert!(took < Duration::from_secs(2 + 3 + 3), "exit took {took:?}");
        assert_eq!(ready(&sib), ids.into_iter().collect(), "packs kept whole");
        assert_unheld(&sib);
    }

    /// SIGTERM after the daemon drained: exit 0 at once, nothing left.
    #[test]
    fn sigterm_after_draining_exits_0_quickly() {
        let root = tempfile::tempdir().unwrap();
        let kd = key_dir(root.path(), &[]);
        let ids = stage(&kd.join("r1-0000abcd"), 3);
        let (mut child, _rx, started) = spawn_daemon(root.path(), &[], &[]);
        let own = PathBuf::from(started["dir"].as_str().unwrap());
        wait_until(
            "3 rows in the catalog, the sibling removed",
            Duration::from_secs(30),
            || {
                root.path().join(".catalog.db").exists()
                    && catalog_rows(root.path()).len() == ids.len()
                    && !kd.join("r1-0000abcd").exists()
            },
        );
        let t0 = Instant::now();
        kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
        let st = wait_exit(&mut child, Duration::from_secs(20));
        assert_eq!(st.code(), Some(0), "{}", child_stderr(&mut child));
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert!(!own.exists(), "the daemon's own directory is removed");
    }

    /// `run --once` spends no fixed interval: with nothing to drain it
    /// returns (start, lease, stop, release) as soon as one cycle with the
    /// lease has looked, and with a dead sibling as soon as that is
    /// drained, not a poll interval later. The poll interval is set to
    /// 30 s, so a run that waits for the loop's next tick (or sleeps any
    /// fixed second) fails the 3 s bound by far; on the embedded defaults
    /// it takes a few tens of milliseconds.
    #[test]
    fn run_once_returns_when_drained_not_a_poll_interval_later() {
        let root = tempfile::tempdir().unwrap();
        let slow_poll = ["--poll-interval", "30s", "--timeout", "60"];
        let t0 = Instant::now();
        let out = run_once(root.path(), &slow_poll);
        let empty = t0.elapsed();
        assert_eq!(code(&out), 0, "{}", describe(&out));
        assert!(
            empty < Duration::from_secs(3),
            "nothing to drain took {empty:?}\n{}",
            describe(&out)
        );

        let kd = key_dir(root.path(), &[]);
        let ids = stage(&kd.join("r1-0000abcd"), 3);
        let t0 = Instant::now();
        let out = run_once(root.path(), &slow_poll);
        let one_sibling = t0.elapsed();
        assert_eq!(code(&out), 0, "{}", describe(&out));
        assert_eq!(catalog_rows(root.path()).len(), ids.len());
        assert!(
            one_sibling < Duration::from_secs(3),
            "a dead sibling of 3 packs took {one_sibling:?}\n{}",
            describe(&out)
        );
    }
}

/// README's main job: a sink-only `spool produce --spool-root ROOT` stages
/// packs and exits; `spool run --once --spool-root ROOT` on the embedded
/// defaults finds them under the same catalog key and drains them.
#[test]
fn produce_spool_root_then_run_once_drains_on_embedded_defaults() {
    let root = tempfile::tempdir().unwrap();
    let mut ids = BTreeSet::new();
    for rank in ["0", "1"] {
        let out = output(
            spool()
                .args(["produce", "--packs", "3", "--rank", rank, "--spool-root"])
                .arg(root.path()),
        );
        assert!(out.status.success(), "{}", describe(&out));
        ids.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string),
        );
    }
    assert_eq!(ids.len(), 6);
    let out = run_once(root.path(), &["--timeout", "60"]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
    assert_eq!(catalog_rows(root.path()), ids);
    for id in &ids {
        assert!(
            stored_object(root.path(), id).is_some(),
            "{id} not in the store"
        );
    }
    let kd = key_dir(root.path(), &[]);
    assert_eq!(
        fs::read_dir(&kd)
            .unwrap()
            .flatten()
            .filter(|e| !spool_tests::is_reserve(&e.path()))
            .count(),
        0,
        "rank directories left"
    );
}

/// The shipped example configuration is valid: every key known, every value
/// allowed.
#[test]
fn the_example_config_file_is_accepted() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/spool.toml");
    let out = output(
        spool()
            .args(["config", "show", "--json", "--config"])
            .arg(&example),
    );
    assert_eq!(code(&out), 0, "{}", describe(&out));
}

/// End to end: two real producers (`spool produce --hold`,
/// one sink without an ordinal, one with `--ordinal 0`) stage packs and
/// are SIGKILLed; `spool run --once` adopts their directories; the catalog
/// rows name each dead producer's pid and host — never the adopter's —
/// with a null ordinal for the sink without one and 0 for `w0/`, and
/// `spool ls` shows host, pid and ordinal (`-` for none).
#[test]
fn adopted_rows_name_the_dead_producer_and_a_null_ordinal() {
    let root = tempfile::tempdir().unwrap();
    let kd = key_dir(root.path(), &[]);
    fs::create_dir_all(&kd).unwrap();
    let mut producers = Vec::new();
    for (name, ordinal) in [("r1-0000aaaa", None), ("r2-0000bbbb", Some("0"))] {
        let mut cmd = spool();
        cmd.args(["produce", "--packs", "2", "--hold", "--dir"])
            .arg(kd.join(name))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(k) = ordinal {
            cmd.args(["--ordinal", k]);
        }
        let mut child = KillOnDrop(cmd.spawn().unwrap());
        let rx = lines(&mut child);
        let ids: Vec<String> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(30)).expect("staged"))
            .collect();
        let pid = child.id();
        // SIGKILL: no release, no clean-up; the record stays as it wrote it.
        child.kill().unwrap();
        child.wait().unwrap();
        producers.push((name, pid, ids, ordinal.map(|k| k.parse::<u64>().unwrap())));
    }
    let out = run_once(root.path(), &["--timeout", "60"]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
    let rows = ls_json(root.path());
    assert_eq!(rows.len(), 4, "{rows:?}");
    let host = spool_lock::host_name();
    for (name, pid, ids, ordinal) in &producers {
        for id in ids {
            let row = rows
                .iter()
                .find(|r| r["pack_id"] == id.as_str())
                .unwrap_or_else(|| panic!("pack {id} of {name} not listed: {rows:?}"));
            assert_eq!(row["rank_dir"], *name, "{row}");
            assert_eq!(
                row["source_pid"].as_u64(),
                Some(u64::from(*pid)),
                "the dead producer's pid, not the adopter's: {row}"
            );
            assert_eq!(row["source_host"], host.as_str(), "{row}");
            assert_eq!(row["ordinal"].as_u64(), *ordinal, "{row}");
            assert_eq!(row["ordinal"].is_null(), ordinal.is_none(), "{row}");
        }
    }
    // The table: host, pid and ordinal columns, `-` for no ordinal.
    let out = output(spool().args(["ls", "--spool-root"]).arg(root.path()));
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let head = text.lines().next().unwrap();
    for h in ["HOST", "PID", "RANK DIR", "ORDINAL"] {
        assert!(head.contains(h), "no {h} column: {text}");
    }
    for (name, pid, _, ordinal) in &producers {
        let want = ordinal.map_or("-".to_string(), |k| k.to_string());
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(name)).collect();
        assert_eq!(lines.len(), 2, "{text}");
        for line in lines {
            // PID (right-aligned) then RANK DIR, then ORDINAL (right-aligned
            // to its heading's width)
            assert!(
                line.contains(&format!(" {pid}  {name}  {want:>7}  ")),
                "{line:?} in\n{text}"
            );
        }
    }
}
