//! The hostile input suite, in one place: corrupt packs of
//! every kind, hostile names in a spool directory, lock files of garbage,
//! empty, huge or not a file at all, another user's directory, a config
//! with every field wrong, catalog rows of garbage.
//!
//! Black-box: the real `spool` binary in real child processes (`verify`,
//! `status`, `lock owner`, `lock hold`, `recover`, `requeue`, `run --once`,
//! `ls`, `config show`), a real lock holder, a privilege-dropped child for
//! another user's files; the library (spool-core) where the command cannot
//! reach. Each case gets a clear error (what is wrong, what to do) or a
//! quarantine, and nothing else is touched: every test snapshots the trees
//! it must not change (files outside the spool, other spools, the
//! directory itself when it is refused) and compares them afterwards.
//! RELIABILITY.md, "Hostile input", names the test of each case.
//!
//! Every command runs under a bound (`bounded`): a FIFO opened blocking
//! would hang it, and the bound turns that into a failure naming the
//! command instead of a stuck suite.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use spool_core::pack::{PackId, PackWriter, FOOTER_LEN, HEADER_LEN, TRAILER_LEN};
use spool_tests::{describe, spool, KillOnDrop};

/// `nobody` (the privilege-dropped child's user and group).
const NOBODY: u32 = 65534;

/// Runs `cmd` to completion within `within`, or SIGKILLs it and fails
/// naming it (a FIFO opened blocking, a wait without bound).
fn bounded(cmd: &mut Command, within: Duration) -> Output {
    let what = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not run {what}: {e}"));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let t = Instant::now();
    match rx.recv_timeout(within) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!(
                "{what} did not return within {within:?} (after {:?}): something blocks",
                t.elapsed()
            )
        }
    }
}

/// [`bounded`] with 20 s: every command here takes well under 5 s.
fn run(cmd: &mut Command) -> Output {
    bounded(cmd, Duration::from_secs(20))
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// One entry of a [`tree`] snapshot: what it is and, for a file, its
/// bytes' SHA-256 (a FIFO or socket is never opened).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File(String),
    Dir,
    Symlink(PathBuf),
    Fifo,
    Socket,
    Other,
}

/// Everything under `root` (not following symlinks), by path.
fn tree(root: &Path) -> BTreeMap<PathBuf, Node> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let ft = m.file_type();
        let node = if ft.is_symlink() {
            Node::Symlink(std::fs::read_link(&p).unwrap())
        } else if ft.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                todo.push(e.unwrap().path());
            }
            Node::Dir
        } else if ft.is_file() {
            Node::File(hex(&Sha256::digest(std::fs::read(&p).unwrap())))
        } else if ft.is_fifo() {
            Node::Fifo
        } else if ft.is_socket() {
            Node::Socket
        } else {
            Node::Other
        };
        out.insert(p, node);
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A scratch spool root on the embedded defaults, a directory of files
/// outside it that nothing may touch, and the root's catalog key
/// directory.
struct Scratch {
    _tmp: tempfile::TempDir,
    top: PathBuf,
    root: PathBuf,
    key_dir: PathBuf,
    outside: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().canonicalize().unwrap();
        let root = top.join("spool");
        std::fs::create_dir(&root).unwrap();
        let outside = top.join("outside");
        std::fs::create_dir_all(outside.join("dir")).unwrap();
        std::fs::write(outside.join("secret"), b"not a pack, never read or moved").unwrap();
        // a valid pack outside the spool: reached only by following a
        // symlink, so it must never be uploaded or removed
        let (id, bytes) = pack_bytes(&[b"outside record"]);
        std::fs::write(outside.join("dir").join(format!("{id}.ready")), bytes).unwrap();
        let out = run(spool()
            .args(["config", "show", "--json", "--spool-root"])
            .arg(&root));
        assert!(out.status.success(), "{}", describe(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let key_dir = PathBuf::from(v["derived"]["key_dir"].as_str().unwrap());
        std::fs::create_dir_all(&key_dir).unwrap();
        Scratch {
            _tmp: tmp,
            top,
            root,
            key_dir,
            outside,
        }
    }

    /// A dead sibling `name` with `n` valid packs, staged by a real
    /// producer process that then exited; returns the dir and the ids.
    fn dead_sibling(&self, name: &str, n: usize) -> (PathBuf, Vec<String>) {
        let dir = self.key_dir.join(name);
        let ids = produce(&dir, n);
        (dir, ids)
    }

    fn run_once(&self, extra: &[&str]) -> Output {
        let mut cmd = spool();
        cmd.args(["run", "--once", "--spool-root"]).arg(&self.root);
        if !extra.contains(&"--timeout") {
            cmd.args(["--timeout", "15"]);
        }
        run(cmd.args(extra))
    }

    /// Ids of the objects in the embedded store.
    fn stored(&self) -> BTreeSet<String> {
        spool_tests::store_objects(&self.root).into_keys().collect()
    }

    /// Pack ids of the embedded catalog's rows.
    fn indexed(&self) -> BTreeSet<String> {
        spool_tests::indexed_ids(&self.root)
    }
}

/// Stages `n` packs into `dir` with `spool produce` (a real process that
/// takes the lock, stages and exits); returns their ids.
fn produce(dir: &Path, n: usize) -> Vec<String> {
    let out = run(spool()
        .args(["produce", "--pack-bytes", "1024", "--packs"])
        .arg(n.to_string())
        .arg("--dir")
        .arg(dir));
    assert!(out.status.success(), "{}", describe(&out));
    stdout(&out).lines().map(str::to_string).collect()
}

/// A valid pack of these records: its id and bytes.
fn pack_bytes(records: &[&[u8]]) -> (PackId, Vec<u8>) {
    let id = PackId::generate();
    (id, pack_with_id(id, records))
}

fn pack_with_id(id: PackId, records: &[&[u8]]) -> Vec<u8> {
    let mut w = PackWriter::new(id, id.timestamp_ms());
    for r in records {
        w.push_record(r);
    }
    w.finish()
}

/// Recomputes the trailer's SHA-256 over everything before it, so that
/// only the field a case breaks is wrong.
fn rehash(p: &mut [u8]) {
    let n = p.len();
    let h = Sha256::digest(&p[..n - 32]);
    p[n - 32..].copy_from_slice(&h);
}

/// Every kind of corrupt pack: (what is wrong, id, bytes).
fn corrupt_packs() -> Vec<(&'static str, PackId, Vec<u8>)> {
    let records: [&[u8]; 3] = [b"first record", b"second", b"third and last"];
    let mut out = Vec::new();
    let mut case = |what: &'static str, f: &dyn Fn(&mut Vec<u8>)| {
        let id = PackId::generate();
        let mut p = pack_with_id(id, &records);
        f(&mut p);
        out.push((what, id, p));
    };
    let footer = |p: &Vec<u8>| p.len() - TRAILER_LEN - FOOTER_LEN;
    case("empty file", &|p| p.clear());
    case("cut inside the header", &|p| p.truncate(HEADER_LEN / 2));
    case("cut after the header", &|p| p.truncate(HEADER_LEN));
    case("cut inside a record's length", &|p| {
        p.truncate(HEADER_LEN + 2)
    });
    case("cut inside the first record", &|p| {
        p.truncate(HEADER_LEN + 4 + 3)
    });
    case("cut after the first record", &|p| {
        p.truncate(HEADER_LEN + 4 + records[0].len())
    });
    case("cut after the last record", &|p| {
        let f = footer(p);
        p.truncate(f)
    });
    case("cut inside the footer", &|p| {
        let f = footer(p);
        p.truncate(f + 10)
    });
    case("cut before the trailer", &|p| {
        let n = p.len() - TRAILER_LEN;
        p.truncate(n)
    });
    case("cut inside the trailer", &|p| {
        let n = p.len() - 10;
        p.truncate(n)
    });
    case("bad magic", &|p| {
        p[0] ^= 0xFF;
        rehash(p)
    });
    case("future major version", &|p| {
        p[8..10].copy_from_slice(&2u16.to_le_bytes());
        rehash(p)
    });
    case("a record length pointing past the end", &|p| {
        p[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&0x7FFF_FFF0u32.to_le_bytes());
        rehash(p)
    });
    case("a footer length pointing past the end", &|p| {
        let f = footer(p);
        p[f + 12..f + 20].copy_from_slice(&u64::MAX.to_le_bytes());
        rehash(p)
    });
    case("a trailer length pointing past the end", &|p| {
        let t = p.len() - TRAILER_LEN;
        p[t + 24..t + 32].copy_from_slice(&(1u64 << 40).to_le_bytes());
        rehash(p)
    });
    case("a trailer footer offset pointing past the end", &|p| {
        let t = p.len() - TRAILER_LEN;
        p[t + 32..t + 40].copy_from_slice(&(1u64 << 40).to_le_bytes());
        rehash(p)
    });
    case("a valid trailer over changed bytes", &|p| {
        p[HEADER_LEN + 4] ^= 0x20
    });
    case("the valid trailer of another pack of this id", &|p| {
        // same id, same length, other records: its trailer is a real
        // pack's, over bytes it does not describe
        let id = PackId::from_hex(&hex(&p[12..28])).unwrap();
        let other = pack_with_id(id, &[b"FIRST RECORD", b"SECOND", b"THIRD AND LAST"]);
        let t = p.len() - TRAILER_LEN;
        p[t..].copy_from_slice(&other[t..]);
    });
    case("bytes after the trailer", &|p| {
        p.extend_from_slice(b"extra")
    });
    // a whole, valid pack filed under another id's name
    let id = PackId::generate();
    let (_, valid) = pack_bytes(&records);
    out.push(("a valid pack under another id's name", id, valid));
    out
}

fn names_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Corrupt packs of every kind in a dead sibling: `spool verify` names
/// each (exit 8) and changes nothing; `spool run --once` quarantines each
/// (bytes kept as they were), ships the valid packs beside them and
/// another sibling's whole, blocks the directory (quarantined packs are
/// left for a person), stores and indexes nothing corrupt, and touches
/// nothing outside; `spool requeue --quarantined` keeps every one of them
/// quarantined (they still fail).
#[test]
fn corrupt_packs_of_every_kind_are_quarantined_and_nothing_else_is_touched() {
    let s = Scratch::new();
    let (bad, bad_valid) = s.dead_sibling("r1-0000c0de", 2);
    let (clean, clean_ids) = s.dead_sibling("r2-0000beef", 2);
    let cases = corrupt_packs();
    for (_, id, bytes) in &cases {
        std::fs::write(bad.join(format!("{id}.ready")), bytes).unwrap();
    }
    let outside = tree(&s.outside);
    let before = tree(&bad);

    let out = run(spool().args(["verify", "--json"]).arg(&bad));
    assert_eq!(code(&out), 8, "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], 2, "{v}");
    let corrupt: BTreeMap<String, String> = v["corrupt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (what, id, _) in &cases {
        let path = bad.join(format!("{id}.ready")).display().to_string();
        let reason = corrupt
            .get(&path)
            .unwrap_or_else(|| panic!("verify does not name {what} ({path}): {v}"));
        assert!(!reason.is_empty(), "{what}: no reason");
    }
    assert_eq!(tree(&bad), before, "verify changed the directory");

    let out = s.run_once(&[]);
    assert_eq!(code(&out), 1, "blocked: {}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&bad.display().to_string()) && err.contains("spool unblock"),
        "the block names the directory and what to do: {err}"
    );
    // only the valid packs went up, each once, and the clean sibling whole
    let want: BTreeSet<String> = bad_valid.iter().chain(&clean_ids).cloned().collect();
    assert_eq!(s.stored(), want, "the store holds exactly the valid packs");
    assert_eq!(
        s.indexed(),
        want,
        "the catalog holds exactly the valid packs"
    );
    assert!(!clean.exists(), "the clean sibling is drained and removed");
    // every corrupt pack is quarantined byte for byte, nothing else left
    let mut names: BTreeSet<String> = cases
        .iter()
        .map(|(_, id, _)| format!("{id}.quarantined"))
        .collect();
    names.insert(".owner.lock".into());
    assert_eq!(names_in(&bad), names);
    for (what, id, bytes) in &cases {
        let kept = std::fs::read(bad.join(format!("{id}.quarantined"))).unwrap();
        assert_eq!(&kept, bytes, "{what}: the quarantined bytes changed");
    }
    assert_eq!(tree(&s.outside), outside, "files outside the spool changed");

    // requeue hashes them first: every one still fails and stays
    let q = tree(&bad);
    let out = run(spool().args(["requeue", "--quarantined"]).arg(&bad));
    assert!(out.status.success(), "{}", describe(&out));
    let quarantined: BTreeMap<_, _> = tree(&bad)
        .into_iter()
        .filter(|(p, _)| p.extension() == Some(OsStr::new("quarantined")))
        .collect();
    let q: BTreeMap<_, _> = q
        .into_iter()
        .filter(|(p, _)| p.extension() == Some(OsStr::new("quarantined")))
        .collect();
    assert_eq!(quarantined, q, "requeue let a corrupt pack back");
}

/// A `spool` command run as `nobody` (a privilege-dropped child). It runs
/// a copy of the binary under `top` (the scratch tree, which `nobody` may
/// traverse): the build's own may sit under a directory `nobody` cannot
/// traverse (a fresh clone in a `mktemp -d` directory is 0700).
fn as_nobody(top: &Path) -> Command {
    let copy = top.join("bin").join("spool");
    if !copy.exists() {
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::set_permissions(
            copy.parent().unwrap(),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::copy(spool_tests::spool_bin(), &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut c = Command::new(copy);
    if std::env::var_os("RUST_LOG").is_none() {
        c.env("RUST_LOG", "warn");
    }
    c.uid(NOBODY).gid(NOBODY);
    c
}

/// Another user's spool directory and lock file: the commands of a user
/// who may not read them (`nobody`, privilege-dropped) fail at once naming
/// the path and saying what to do; `spool status ROOT` shows the directory
/// as unreadable and goes on; `nobody`'s `spool run --once` adopts its own
/// dead sibling, blocks the other user's at once, and changes nothing in
/// it.
#[test]
fn another_users_directory_gives_clear_errors_and_is_left_whole() {
    let s = Scratch::new();
    // the scratch tree and the root are nobody's to traverse and use
    std::fs::set_permissions(&s.top, std::fs::Permissions::from_mode(0o755)).unwrap();
    for p in [&s.root, &s.key_dir] {
        nix::unistd::chown(
            p.as_path(),
            Some(nix::unistd::Uid::from_raw(NOBODY)),
            Some(nix::unistd::Gid::from_raw(NOBODY)),
        )
        .unwrap();
    }
    // root's dead sibling (0700, its lock file 0600), and nobody's own
    let (roots, _) = s.dead_sibling("r1-00000001", 2);
    let out = run(as_nobody(&s.top)
        .args(["produce", "--pack-bytes", "1024", "--packs", "2", "--dir"])
        .arg(s.key_dir.join("r2-00000002")));
    assert!(out.status.success(), "{}", describe(&out));
    let nobodys: BTreeSet<String> = stdout(&out).lines().map(str::to_string).collect();
    let before = tree(&roots);

    for args in [
        &["verify"][..],
        &["lock", "owner"][..],
        &["recover"][..],
        &["requeue"][..],
        &["status"][..],
        &["unblock"][..],
    ] {
        let out = run(as_nobody(&s.top).args(args).arg(&roots));
        assert_eq!(code(&out), 1, "{args:?}: {}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&roots.display().to_string())
                && err.contains("Permission denied")
                && err.contains(&format!("runs as uid {NOBODY}"))
                && err.contains("run spool as the user that owns the spool"),
            "{args:?}: names the path, the refusal and what to do: {err}"
        );
    }
    let out = run(as_nobody(&s.top).args(["status", "--json"]).arg(&s.root));
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rank_dirs"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|r| r["dir"] == "r1-00000001")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(row["state"], "unreadable", "{row}");
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{row}"
    );
    assert_eq!(rows.len(), 2, "{v}");

    let out = run(as_nobody(&s.top)
        .args(["run", "--once", "--timeout", "15", "--spool-root"])
        .arg(&s.root));
    assert_eq!(code(&out), 1, "blocked: {}", describe(&out));
    assert!(
        stderr(&out).contains(&roots.display().to_string()),
        "{}",
        describe(&out)
    );
    assert_eq!(s.stored(), nobodys, "nobody's own sibling is shipped");
    assert_eq!(s.indexed(), nobodys);
    assert_eq!(tree(&roots), before, "the other user's directory changed");
}

/// Every configuration key given a value of the wrong type (an array, a
/// table, a datetime) and a value out of its range, one at a time: `spool
/// config show` and `spool run --once` refuse it with exit 2 naming the key
/// and the file, and `run` creates nothing; unknown keys and sections,
/// bytes that are not UTF-8, TOML that does not parse (with its line) and
/// a `SPOOL_*` variable out of range are refused the same way.
#[test]
fn a_config_with_every_field_wrong_is_refused_naming_the_key_and_the_file() {
    let s = Scratch::new();
    let out = run(spool().args(["config", "show", "--json"]));
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: Vec<(String, String)> = v["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["key"].as_str().unwrap().to_string(),
                k["env"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(keys.len() > 30, "{keys:?}");
    let file = s.top.join("bad.toml");
    let before = tree(&s.root);
    // keys whose values are free text: any string is one (a path, a
    // name) or is checked only where used (a group on this host)
    let free_text = ["spool.root"];
    let mut refusals = 0;
    for (key, _) in &keys {
        let (section, field) = key.split_once('.').unwrap();
        let mut values = vec!["[1, 2]", "{ a = 1 }", "1979-05-27T07:32:00Z"];
        if !free_text.contains(&key.as_str()) {
            values.push("\"-1 \\u0007 not valid\"");
        }
        for value in values {
            std::fs::write(&file, format!("[{section}]\n{field} = {value}\n")).unwrap();
            let out = run(spool().args(["config", "show", "--config"]).arg(&file));
            assert_eq!(code(&out), 2, "{key} = {value}: {}", describe(&out));
            let err = stderr(&out);
            assert!(
                err.contains(key.as_str()) && err.contains(&file.display().to_string()),
                "{key} = {value}: the refusal names the key and the file: {err}"
            );
            assert!(
                err.contains("allowed"),
                "{key} = {value}: says what is: {err}"
            );
            refusals += 1;
        }
    }
    // and the daemon never starts on one
    std::fs::write(&file, "[upload]\nmax_workers = 0\n").unwrap();
    let out = run(spool()
        .args(["run", "--once", "--spool-root"])
        .arg(&s.root)
        .arg("--config")
        .arg(&file));
    assert_eq!(code(&out), 2, "{}", describe(&out));
    assert!(
        stderr(&out).contains("upload.max_workers"),
        "{}",
        describe(&out)
    );
    // a variable out of range names itself
    let out = run(spool().args(["config", "show"]).env("SPOOL_LEASE_TTL", "1"));
    assert_eq!(code(&out), 2, "{}", describe(&out));
    assert!(
        stderr(&out).contains("SPOOL_LEASE_TTL") || stderr(&out).contains("lease.ttl"),
        "{}",
        describe(&out)
    );
    for (text, says) in [
        (&b"[lease]\nttls = 3\n"[..], "ttls"),
        (b"[leases]\nttl = 3\n", "leases"),
        (b"ttl = 3\n", "ttl"),
        (b"[lease]\nttl = 10\n[lease]\nttl = 10\n", "line 3"),
        (b"[upload]\nmax_workers = 99999999999999999999\n", "line 2"),
        (b"[lease\n", "line 1"),
        (b"\xff\xfe[lease]\n", "UTF-8"),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = run(spool().args(["config", "show", "--config"]).arg(&file));
        assert_eq!(
            code(&out),
            2,
            "{}: {}",
            String::from_utf8_lossy(text),
            describe(&out)
        );
        let err = stderr(&out);
        assert!(
            err.contains(says) && err.contains(&file.display().to_string()),
            "{}: {err}",
            String::from_utf8_lossy(text)
        );
        refusals += 1;
    }
    assert!(refusals > 100, "{refusals}");
    assert_eq!(tree(&s.root), before, "a refused config created something");
}

/// The embedded catalog's cases of garbage: a row with a blob where text
/// belongs, a negative ordinal, a real where an integer belongs, a wrong
/// table, a newer schema, a schema version of text, a file that is no
/// database. `spool ls` refuses each (exit 1) naming the catalog (and, for
/// a row, its pack id and what to do) and never changes the file; `spool
/// run --once` beside a catalog it cannot use keeps every pack where it is
/// and says why.
#[test]
fn catalog_garbage_gives_clear_errors_and_changes_nothing() {
    let s = Scratch::new();
    s.dead_sibling("r1-00000001", 2);
    let out = s.run_once(&[]);
    assert!(out.status.success(), "{}", describe(&out));
    let db = s.root.join(".catalog.db");
    let row = |id: &str, object_key: &str, bytes: &str, ordinal: &str| {
        format!(
            "INSERT INTO spool_packs VALUES ('{id}', {object_key}, 'default', 'ab', {bytes}, 1, \
             'h', 1, 'r9-00000000', {ordinal}, 1796153435430, 1796153435430, 'ab', 0)"
        )
    };
    let id = "01a23316652658cfc2d65896fafb3299";
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "a blob where text belongs",
            row(id, "x'00ff'", "5", "NULL"),
            vec![id, "fix or delete that row"],
        ),
        (
            "a negative ordinal",
            row(id, "'k'", "5", "-7"),
            vec![id, "-7", "fix or delete that row"],
        ),
        (
            "a negative size",
            row(id, "'k'", "-5", "NULL"),
            vec![id, "-5", "fix or delete that row"],
        ),
        (
            "a real where an integer belongs",
            row(id, "'k'", "5.5", "NULL"),
            vec![id, "fix or delete that row"],
        ),
        (
            "a table of other columns",
            "DROP TABLE spool_packs; CREATE TABLE spool_packs(x)".into(),
            vec!["spool_packs has columns", "Point spool at another database"],
        ),
        (
            "a newer schema",
            "UPDATE spool_schema_version SET version = 99".into(),
            vec!["schema version 99", "upgrade this spool"],
        ),
        (
            "a schema version of text",
            "INSERT INTO spool_schema_version VALUES ('two', 'x')".into(),
            vec!["schema version"],
        ),
    ];
    let side_files = || {
        for ext in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(s.root.join(format!(".catalog.db{ext}")));
        }
    };
    // every row in the main file, none left in the write-ahead log
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    side_files();
    let original = std::fs::read(&db).unwrap();
    for (what, sql, says) in &cases {
        side_files();
        std::fs::write(&db, &original).unwrap();
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(sql).unwrap();
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        drop(conn);
        let bytes = std::fs::read(&db).unwrap();
        let out = run(spool().args(["ls", "--spool-root"]).arg(&s.root));
        assert_eq!(code(&out), 1, "{what}: {}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&db.display().to_string()),
            "{what}: names the catalog: {err}"
        );
        for w in says {
            assert!(err.contains(w), "{what}: says {w:?}: {err}");
        }
        assert!(
            !stdout(&out).contains("4294967289"),
            "{what}: a wrapped value was shown"
        );
        assert_eq!(
            std::fs::read(&db).unwrap(),
            bytes,
            "{what}: ls changed the catalog"
        );
    }
    // not a database at all
    side_files();
    std::fs::write(&db, b"this is not an SQLite database, it is garbage").unwrap();
    let out = run(spool().args(["ls", "--spool-root"]).arg(&s.root));
    assert_eq!(code(&out), 1, "{}", describe(&out));
    assert!(
        stderr(&out).contains("not a database"),
        "{}",
        describe(&out)
    );
    // the service beside it: every pack stays, the refusal is named
    let (dir, _) = s.dead_sibling("r2-00000002", 2);
    let before = tree(&dir);
    // (refused for good: said at once, exit 1, not waited out)
    let out = s.run_once(&["--timeout", "60"]);
    assert_eq!(code(&out), 1, "{}", describe(&out));
    assert!(
        stderr(&out).contains("not a database") && stderr(&out).contains("nothing is lost"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        tree(&dir),
        before,
        "a pack moved beside an unusable catalog"
    );
}

/// Where the command cannot reach: a sink's worker subdirectory that is a
/// symlink to a directory outside, or a FIFO, is refused by `stage`
/// naming it, and nothing is written outside or into the FIFO.
#[test]
fn a_worker_subdirectory_that_is_no_directory_is_refused_by_stage() {
    let s = Scratch::new();
    let dir = s.key_dir.join("r0-00000abc");
    let config = spool_core::SpoolConfig::default();
    let spool = spool_core::Spool::open(&dir, &config).unwrap();
    std::os::unix::fs::symlink(s.outside.join("dir"), dir.join("w1")).unwrap();
    nix::unistd::mkfifo(
        &dir.join("w2"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let outside = tree(&s.outside);
    for k in [1, 2] {
        let (id, bytes) = pack_bytes(&[b"r"]);
        let e = spool.stage(Some(k), id, &bytes).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&dir.join(format!("w{k}")).display().to_string())
                && text.contains("not a directory"),
            "w{k}: {text}"
        );
    }
    assert_eq!(tree(&s.outside), outside);
    assert_eq!(
        names_in(&dir),
        [".owner.lock", "w1", "w2"]
            .map(String::from)
            .into_iter()
            .collect()
    );
}

#[path = "hostile/operator.rs"]
mod operator;

/// Liveness bounds (a FIFO never blocks, a refused lock file is never
/// retried until a timeout): one at a time (nextest's `serial` group).
mod serial {
    use super::*;

    /// Hostile names in a dead sibling: `..`-like names, a symlink named like
    /// a pack to a file outside and one to a live spool's pack (same id),
    /// `w0` as a symlink to an outside directory holding a valid pack, a
    /// 255-byte name, non-UTF-8 names, a directory named like a pack, FIFOs
    /// and sockets (named like a pack and not). Every command returns within
    /// its bound (a FIFO is never opened blocking); `spool status` counts
    /// only the real packs; `spool run --once` ships the two real packs
    /// only, sets aside each non-file named like a pack (a rename: the
    /// symlinks' targets stay as they were), blocks the directory naming a
    /// leftover, and touches nothing outside it or in the live spool.
    #[test]
    fn hostile_names_are_never_followed_opened_or_removed() {
        let s = Scratch::new();
        let (dir, ids) = s.dead_sibling("r1-00000bad", 2);
        // a live spool with a pack, held by a real `spool lock hold`
        let (live, live_ids) = s.dead_sibling("r2-0000a11e", 1);
        let mut holder = KillOnDrop(
            spool()
                .args(["lock", "hold"])
                .arg(&live)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert!(line.starts_with("held "), "{line}");

        let j = |n: &str| dir.join(n);
        let fifo_pack = PackId::generate();
        let socket_pack = PackId::generate();
        let outside_link = PackId::generate();
        std::os::unix::fs::symlink(
            s.outside.join("secret"),
            j(&format!("{outside_link}.ready")),
        )
        .unwrap();
        // the live spool's own pack, under its own id: shipping it would
        // upload (and remove) a live owner's file
        std::os::unix::fs::symlink(
            live.join(format!("{}.ready", live_ids[0])),
            j(&format!("{}.ready", live_ids[0])),
        )
        .unwrap();
        std::os::unix::fs::symlink(s.outside.join("dir"), j("w0")).unwrap();
        for n in [
            "..ready",
            "...",
            ".ready",
            "....quarantined",
            "..open",
            "...open",
        ] {
            std::fs::write(j(n), b"x").unwrap();
        }
        std::fs::write(j(&"a".repeat(255)), b"long").unwrap();
        std::fs::write(dir.join(OsStr::from_bytes(b"\xff\xfe.ready")), b"x").unwrap();
        // a pack id, then a byte that is no UTF-8, then `.ready`
        let mut name = PackId::generate().to_hex().into_bytes();
        name.extend_from_slice(b"\xff.ready");
        std::fs::write(dir.join(OsStr::from_bytes(&name)), b"x").unwrap();
        let dir_pack = PackId::generate();
        std::fs::create_dir(j(&format!("{dir_pack}.ready"))).unwrap();
        std::fs::write(j(&format!("{dir_pack}.ready/inside")), b"x").unwrap();
        nix::unistd::mkfifo(
            &j(&format!("{fifo_pack}.ready")),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        nix::unistd::mkfifo(&j("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let _sock1 =
            std::os::unix::net::UnixListener::bind(j(&format!("{socket_pack}.ready"))).unwrap();
        let _sock2 = std::os::unix::net::UnixListener::bind(j("sock")).unwrap();

        let outside = tree(&s.outside);
        let live_before = tree(&live);
        let before = tree(&dir);

        // probes: bounded, and they change nothing
        let out = run(spool().args(["verify", "--json"]).arg(&dir));
        assert_eq!(code(&out), 8, "{}", describe(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["valid"], 2, "{v}");
        let said = v["corrupt"].to_string();
        for (id, what) in [
            (fifo_pack, "a FIFO"),
            (socket_pack, "a socket"),
            (outside_link, "a symlink"),
        ] {
            assert!(
                said.contains(&format!("{id}.ready")) && said.contains(what),
                "verify names {id} as {what}: {said}"
            );
        }
        let out = run(spool().args(["status", "--json"]).arg(&dir));
        assert!(out.status.success(), "{}", describe(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            v["packs"]["ready"]["count"], 2,
            "status counts only the real packs: {v}"
        );
        for args in [&["status"][..], &["lock", "owner"][..]] {
            let out = run(spool().args(args).arg(&dir));
            assert!(out.status.success(), "{args:?}: {}", describe(&out));
        }
        let out = run(spool().arg("status").arg(&s.root));
        assert!(out.status.success(), "{}", describe(&out));
        assert_eq!(tree(&dir), before, "a probe changed the directory");

        let out = s.run_once(&[]);
        assert_eq!(code(&out), 1, "blocked: {}", describe(&out));
        assert!(
            stderr(&out).contains(&dir.display().to_string()),
            "{}",
            describe(&out)
        );
        let ids: BTreeSet<String> = ids.into_iter().collect();
        assert_eq!(s.stored(), ids, "only the two real packs went up");
        assert_eq!(s.indexed(), ids);
        // what was set aside is a rename of the very entry; nothing else moved
        let after = tree(&dir);
        let mut want = before.clone();
        for id in &ids {
            want.remove(&j(&format!("{id}.ready")));
        }
        let linked = PackId::from_hex(&live_ids[0]).unwrap();
        for id in [fifo_pack, socket_pack, outside_link, linked] {
            let node = want.remove(&j(&format!("{id}.ready"))).unwrap();
            want.insert(j(&format!("{id}.quarantined")), node);
        }
        let lock = j(spool_lock::LOCK_FILE_NAME);
        want.remove(&lock);
        let mut after_wo_lock = after.clone();
        after_wo_lock.remove(&lock);
        assert_eq!(
            after_wo_lock, want,
            "the adopter changed more than it set aside"
        );
        assert_eq!(tree(&s.outside), outside, "files outside the spool changed");
        assert_eq!(tree(&live), live_before, "the live spool was touched");
        assert!(
            spool_lock::read_owner(&live).unwrap().held,
            "the holder still holds its spool"
        );
    }

    /// Lock files of garbage, empty, huge (8 MiB), and ones that are no file
    /// (a FIFO, a directory, a socket, a symlink to a file outside): `spool
    /// lock owner` and `spool status` return at once saying "not held"; the
    /// garbage, empty and huge ones are adopted and drained; the others are
    /// refused by `spool lock hold` and `spool produce` naming what the lock
    /// file is (exit 1, no hang), and blocked by `spool run --once` at once
    /// (not retried until its timeout), their packs and lock files as they
    /// were; the file outside is unchanged.
    #[test]
    fn lock_files_of_garbage_or_not_a_file_never_hang_and_are_adopted_or_blocked() {
        let s = Scratch::new();
        let mut adoptable = Vec::new();
        let mut refused = Vec::new();
        let mut shipped = BTreeSet::new();
        let mut contents: Vec<(&str, Vec<u8>)> = vec![
            (
                "garbage",
                (0..3000u32).map(|i| (i * 7919 % 251) as u8).collect(),
            ),
            ("empty", Vec::new()),
            ("huge", b"host: x\npid: 1\n".repeat((8 << 20) / 14)),
        ];
        contents.push((
            "utf8-garbage",
            "pid: -1\nhost: \u{0}\n\r\r".repeat(50).into_bytes(),
        ));
        for (i, (what, bytes)) in contents.iter().enumerate() {
            let (d, ids) = s.dead_sibling(&format!("r{}-0000000{i}", i + 1), 2);
            std::fs::write(d.join(spool_lock::LOCK_FILE_NAME), bytes).unwrap();
            shipped.extend(ids);
            adoptable.push((*what, d));
        }
        let mut sockets = Vec::new();
        for (i, what) in ["a FIFO", "a directory", "a socket", "a symlink"]
            .iter()
            .enumerate()
        {
            let (d, _) = s.dead_sibling(&format!("r{}-000000f{i}", i + 10), 2);
            let lock = d.join(spool_lock::LOCK_FILE_NAME);
            std::fs::remove_file(&lock).unwrap();
            match *what {
                "a FIFO" => {
                    nix::unistd::mkfifo(&lock, nix::sys::stat::Mode::from_bits_truncate(0o600))
                        .unwrap()
                }
                "a directory" => std::fs::create_dir(&lock).unwrap(),
                "a socket" => sockets.push(std::os::unix::net::UnixListener::bind(&lock).unwrap()),
                _ => std::os::unix::fs::symlink(s.outside.join("secret"), &lock).unwrap(),
            }
            refused.push((*what, d));
        }
        let outside = tree(&s.outside);
        let refused_before: Vec<_> = refused.iter().map(|(_, d)| tree(d)).collect();

        for (what, d) in adoptable.iter().chain(&refused) {
            let out = run(spool().args(["lock", "owner", "--json"]).arg(d));
            if ["a socket", "a symlink"].contains(what) {
                // no non-blocking open reaches them: the probe says what
                // the lock file is
                assert_eq!(code(&out), 1, "{what}: {}", describe(&out));
                assert!(
                    stderr(&out).contains(&format!("is {what}, not a regular file")),
                    "{what}: {}",
                    describe(&out)
                );
                continue;
            }
            assert!(out.status.success(), "{what}: {}", describe(&out));
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["held"], false, "{what}: {v}");
        }
        let out = run(spool().args(["status", "--json"]).arg(&s.root));
        assert!(out.status.success(), "{}", describe(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["rank_dirs"].as_array().unwrap().len(), 8, "{v}");

        for (what, d) in &refused {
            let lock = d.join(spool_lock::LOCK_FILE_NAME);
            for args in [
                vec!["lock".to_string(), "hold".into(), d.display().to_string()],
                vec![
                    "produce".into(),
                    "--packs".into(),
                    "1".into(),
                    "--dir".into(),
                    d.display().to_string(),
                ],
                vec!["recover".into(), d.display().to_string()],
            ] {
                let out = run(spool().args(&args));
                assert_eq!(code(&out), 1, "{what} {args:?}: {}", describe(&out));
                let err = stderr(&out);
                assert!(
                    err.contains(&format!("{} is {what}, not a regular file", lock.display()))
                        && err.contains("remove it"),
                    "{what} {args:?}: the refusal names the lock file, what it is and what to do: {err}"
                );
            }
        }

        let t = Instant::now();
        let out = s.run_once(&[]);
        assert_eq!(code(&out), 1, "blocked, not a timeout: {}", describe(&out));
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "run --once took {:?}: the refused lock files were retried",
            t.elapsed()
        );
        let err = stderr(&out);
        for (what, d) in &refused {
            assert!(
                err.contains(&d.display().to_string()) && err.contains(what),
                "{what}: the block names it: {err}"
            );
        }
        for (what, d) in &adoptable {
            assert!(!d.exists(), "{what}: adopted and removed");
        }
        assert_eq!(s.stored(), shipped);
        assert_eq!(s.indexed(), shipped);
        for ((what, d), before) in refused.iter().zip(&refused_before) {
            assert_eq!(&tree(d), before, "{what}: the blocked directory changed");
        }
        assert_eq!(tree(&s.outside), outside, "the symlinked file changed");
    }
}
