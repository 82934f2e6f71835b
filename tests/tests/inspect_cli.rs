//! Black-box tests of the inspection commands — `spool ls`, `spool cat`,
//! `spool status ROOT`, `spool unblock` — and of the progress output of
//! `spool verify` / `spool recover`, driving the real `spool` binary.
//!
//! Catalog and store are the embedded ones of a scratch spool root
//! (`ROOT/.catalog.db`, `ROOT/.store`), filled through the real libraries
//! ([`spool_tests::inspect::store_and_index`]). A live owner is a real
//! `spool lock hold` child process.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use serde_json::Value;
use spool_tests::inspect::{catalog_url, store_and_index, store_url, LockHolder, StoredPack};
use spool_tests::{describe, output, spool};

const HOUR_MS: u64 = 3_600_000;

fn now_ms() -> u64 {
    spool_core::pack::now_ms()
}

fn text_records(n: usize, tag: &str) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{tag} record {i}").into_bytes())
        .collect()
}

/// A scratch root with three packs: created 3 h, 90 min and 10 min ago.
fn root_with_packs() -> (tempfile::TempDir, PathBuf, Vec<StoredPack>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap().join("spool");
    std::fs::create_dir(&root).unwrap();
    let now = now_ms();
    let packs = vec![
        store_and_index(&root, now - 3 * HOUR_MS, &text_records(3, "old")),
        store_and_index(&root, now - 90 * 60_000, &text_records(2, "mid")),
        store_and_index(&root, now - 10 * 60_000, &text_records(4, "new")),
    ];
    (tmp, root, packs)
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_lines(out: &std::process::Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

// ---------------------------------------------------------------- ls

#[test]
fn ls_lists_every_pack_as_a_table_and_filters_by_time_as_json() {
    let (_tmp, root, packs) = root_with_packs();
    let out = output(spool().args(["ls", "--spool-root"]).arg(&root));
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout(&out);
    assert!(text.starts_with("PACK ID"), "{text}");
    for p in &packs {
        let line = text
            .lines()
            .find(|l| l.starts_with(&p.id.to_hex()))
            .unwrap_or_else(|| panic!("{} missing in:\n{text}", p.id));
        // HOST, PID, RANK DIR, then ORDINAL (`-`: the rows have none),
        // right-aligned to its heading
        assert!(
            line.contains(&format!("  node7  4242  r3-0badcafe  {:>7}  ", "-")),
            "{line}"
        );
        assert!(line.contains(&p.row.object_key), "{line}");
    }
    // Oldest first.
    let order: Vec<_> = packs
        .iter()
        .map(|p| text.find(&p.id.to_hex()).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert!(stderr(&out).contains("3 of 3 packs"), "{}", describe(&out));

    // --since 1h: the newest only; JSON lines carry every column.
    let out = output(
        spool()
            .args(["ls", "--since", "1h", "--json", "--spool-root"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 1, "{}", describe(&out));
    let row: spool_catalog::PackRow = serde_json::from_value(rows[0].clone()).unwrap();
    assert_eq!(row.pack_id, packs[2].id.to_hex());
    assert_eq!(row.sha256, packs[2].row.sha256);

    // --since 2h --until 30m: the middle one; --limit keeps the newest.
    let out = output(
        spool()
            .args([
                "ls",
                "--since",
                "2h",
                "--until",
                "30m",
                "--json",
                "--catalog",
            ])
            .arg(catalog_url(&root)),
    );
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 1, "{}", describe(&out));
    assert_eq!(rows[0]["pack_id"], packs[1].id.to_hex());
    let out = output(
        spool()
            .args([
                "ls",
                "--since",
                "1970-01-01",
                "--limit",
                "2",
                "--json",
                "--spool-root",
            ])
            .arg(&root),
    );
    let ids: Vec<_> = json_lines(&out)
        .iter()
        .map(|r| r["pack_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, [packs[1].id.to_hex(), packs[2].id.to_hex()]);

    // Without flags: the configuration's spool.root, from a file or from
    // SPOOL_ROOT.
    let config = root.join("spool.toml");
    std::fs::write(
        &config,
        format!("[spool]\nroot = {:?}\n", root.display().to_string()),
    )
    .unwrap();
    let out = output(spool().args(["ls", "--json", "--config"]).arg(&config));
    assert_eq!(json_lines(&out).len(), 3, "{}", describe(&out));
    let out = output(spool().args(["ls", "--json"]).env("SPOOL_ROOT", &root));
    assert_eq!(json_lines(&out).len(), 3, "{}", describe(&out));
}

#[test]
fn ls_refuses_bad_input_with_the_right_exit_codes() {
    let (_tmp, root, _packs) = root_with_packs();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (vec![], 2, "--catalog URL"),
        (
            vec!["--config".into(), "/nonexistent/spool.toml".into()],
            2,
            "spool.toml",
        ),
        (vec!["--catalog".into(), "ftp://x/y".into()], 2, "ftp"),
        (
            vec![
                "--spool-root".into(),
                root.join("missing").display().to_string(),
            ],
            1,
            "does not exist",
        ),
        (
            vec![
                "--catalog".into(),
                format!("sqlite://{}/nope.db", root.display()),
            ],
            1,
            "no catalog at",
        ),
        (
            vec![
                "--since".into(),
                "last tuesday".into(),
                "--spool-root".into(),
                root.display().to_string(),
            ],
            2,
            "--since",
        ),
        (
            vec![
                "--since".into(),
                "1h".into(),
                "--until".into(),
                "2h".into(),
                "--spool-root".into(),
                root.display().to_string(),
            ],
            2,
            "window is empty",
        ),
    ];
    for (args, code, says) in cases {
        let out = output(spool().arg("ls").args(&args));
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            describe(&out)
        );
        assert!(stderr(&out).contains(says), "{args:?}: {}", describe(&out));
        assert!(out.stdout.is_empty(), "{args:?}: {}", describe(&out));
    }
    assert!(!root.join("nope.db").exists(), "ls never creates a catalog");
}

// ---------------------------------------------------------------- cat

#[test]
fn cat_writes_the_checked_pack_to_a_file_or_stdout_and_prints_records() {
    let (tmp, root, packs) = root_with_packs();
    let p = &packs[1];
    let out_file = tmp.path().join("got.pack");
    let out = output(
        spool()
            .args(["cat", &p.id.to_hex(), "--spool-root"])
            .arg(&root)
            .arg("--out")
            .arg(&out_file),
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(std::fs::read(&out_file).unwrap(), p.bytes);
    assert!(out.stdout.is_empty(), "{}", describe(&out));

    // To stdout (a pipe here), with explicit URLs.
    let out = output(spool().args([
        "cat",
        &p.id.to_hex(),
        "--catalog",
        &catalog_url(&root),
        "--store",
        &store_url(&root),
    ]));
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(out.stdout, p.bytes);

    // Catalog and store from the configuration file.
    let config = tmp.path().join("spool.toml");
    std::fs::write(
        &config,
        format!(
            "[destination]\ncatalog = {:?}\nstore = {:?}\n",
            catalog_url(&root),
            store_url(&root)
        ),
    )
    .unwrap();
    let out = output(
        spool()
            .args(["cat", &p.id.to_hex(), "--config"])
            .arg(&config),
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(out.stdout, p.bytes);

    // Records: text, hex, JSON.
    let out = output(
        spool()
            .args(["cat", &p.id.to_hex(), "--records", "--spool-root"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(stdout(&out), "mid record 0\nmid record 1\n");
    let out = output(
        spool()
            .args(["cat", &p.id.to_hex(), "--records", "--hex", "--spool-root"])
            .arg(&root),
    );
    let want: String = p
        .records
        .iter()
        .map(|r| r.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n")
        .collect();
    assert_eq!(stdout(&out), want);
    let out = output(
        spool()
            .args(["cat", &p.id.to_hex(), "--records", "--json", "--spool-root"])
            .arg(&root),
    );
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["index"], 1);
    assert_eq!(rows[1]["text"], "mid record 1");
}

#[test]
fn cat_of_binary_records_needs_hex_or_json_and_prints_nothing_otherwise() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let p = store_and_index(
        &root,
        now_ms(),
        &[
            b"fine".to_vec(),
            vec![0, 159, 146, 150],
            b"two\nlines".to_vec(),
        ],
    );
    let out = output(
        spool()
            .args(["cat", &p.id.to_hex(), "--records", "--spool-root"])
            .arg(&root),
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(out.stdout.is_empty(), "nothing printed before the refusal");
    assert!(stderr(&out).contains("record 1") && stderr(&out).contains("--hex"));
    let out = output(
        spool()
            .args(["cat", &p.id.to_hex(), "--records", "--json", "--spool-root"])
            .arg(&root),
    );
    let rows = json_lines(&out);
    assert_eq!(rows[1]["hex"], "009f9296");
    assert_eq!(rows[2]["text"], "two\nlines");
}

#[test]
fn cat_of_a_corrupt_object_exits_9_and_writes_nothing() {
    let (tmp, root, packs) = root_with_packs();
    let p = &packs[0];
    // One flipped bit in a record of the stored object.
    let mut bytes = std::fs::read(&p.object_path).unwrap();
    bytes[45] ^= 0x01;
    std::fs::write(&p.object_path, &bytes).unwrap();
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out_file = out_dir.join("got.pack");
    let out = output(
        spool()
            .args(["cat", &p.id.to_hex(), "--spool-root"])
            .arg(&root)
            .arg("--out")
            .arg(&out_file),
    );
    assert_eq!(out.status.code(), Some(9), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("does not match its checksum"), "{err}");
    assert!(err.contains(&p.row.object_key), "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    assert!(!out_file.exists(), "no output file after a mismatch");
    assert_eq!(
        std::fs::read_dir(&out_dir).unwrap().count(),
        0,
        "no temporary file left beside --out"
    );
    // To stdout: nothing either.
    let out = output(
        spool()
            .args(["cat", &p.id.to_hex(), "--spool-root"])
            .arg(&root),
    );
    assert_eq!(out.status.code(), Some(9), "{}", describe(&out));
    assert!(out.stdout.is_empty());

    // A whole, valid pack that is not the one the catalog indexed (another
    // pack's bytes under this key... here: a valid pack with other records
    // of the same sizes and the same id) is a mismatch too.
    let mut w = spool_core::pack::PackWriter::new(p.id, p.id.timestamp_ms());
    for record in text_records(3, "OLD") {
        w.push_record(&record);
    }
    std::fs::write(&p.object_path, w.finish()).unwrap();
    let out = output(
        spool()
            .args(["cat", &p.id.to_hex(), "--spool-root"])
            .arg(&root)
            .arg("--out")
            .arg(&out_file),
    );
    assert_eq!(out.status.code(), Some(9), "{}", describe(&out));
    assert!(
        stderr(&out).contains("the catalog says sha256"),
        "{}",
        describe(&out)
    );
    assert!(!out_file.exists());
}

/// A row whose range runs past its object's end (a wrong offset, a wrong
/// length) is a read-back mismatch: exit 9, the message naming where the
/// row's range ends and how long the object is, nothing written.
#[test]
fn cat_of_a_row_past_its_objects_end_exits_9_naming_both_sizes() {
    let (tmp, root, packs) = root_with_packs();
    let p = &packs[0];
    let size = std::fs::metadata(&p.object_path).unwrap().len();
    let out_file = tmp.path().join("got.pack");
    for (offset, bytes) in [(size + 1000, p.row.bytes), (0, size + 5)] {
        let db = rusqlite::Connection::open(root.join(".catalog.db")).unwrap();
        db.execute(
            "UPDATE spool_packs SET object_offset = ?1, bytes = ?2 WHERE pack_id = ?3",
            rusqlite::params![offset as i64, bytes as i64, p.id.to_hex()],
        )
        .unwrap();
        drop(db);
        let out = output(
            spool()
                .args(["cat", &p.id.to_hex(), "--spool-root"])
                .arg(&root)
                .arg("--out")
                .arg(&out_file),
        );
        assert_eq!(out.status.code(), Some(9), "{}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("ends at byte {}", offset + bytes)),
            "{err}"
        );
        assert!(
            err.contains(&format!("the object is {size} bytes long")),
            "{err}"
        );
        assert!(err.contains(&p.row.object_key), "{err}");
        assert!(!out_file.exists());
    }
}

#[test]
fn cat_refuses_bad_input_with_the_right_exit_codes() {
    let (_tmp, root, packs) = root_with_packs();
    let unknown = spool_core::pack::PackId::generate().to_hex();
    let r = root.display().to_string();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec![unknown.clone(), "--spool-root".into(), r.clone()],
            1,
            "is not in catalog",
        ),
        (
            vec!["xyz".into(), "--spool-root".into(), r.clone()],
            2,
            "not a pack id",
        ),
        (
            vec![packs[0].id.to_hex(), "--catalog".into(), catalog_url(&root)],
            2,
            "no object store",
        ),
        (
            vec![
                packs[0].id.to_hex(),
                "--spool-root".into(),
                r.clone(),
                "--store".into(),
                "ftp://b/x".into(),
            ],
            2,
            "ftp",
        ),
        (
            vec![
                packs[0].id.to_hex(),
                "--spool-root".into(),
                format!("{r}/missing"),
            ],
            1,
            "does not exist",
        ),
    ];
    for (args, code, says) in cases {
        let out = output(spool().arg("cat").args(&args));
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            describe(&out)
        );
        assert!(stderr(&out).contains(says), "{args:?}: {}", describe(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // Indexed but gone from the store.
    std::fs::remove_file(&packs[0].object_path).unwrap();
    let out = output(
        spool()
            .args(["cat", &packs[0].id.to_hex(), "--spool-root"])
            .arg(&root),
    );
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr(&out).contains("has no object at key"),
        "{}",
        describe(&out)
    );
}

// ------------------------------------------------------- status, unblock

/// A root with the embedded catalog and store, and three rank directories
/// under one key: one live (a `spool lock hold` child), one dead with two
/// packs, one blocked.
struct Root {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    live: PathBuf,
    dead: PathBuf,
    blocked: PathBuf,
    holder: LockHolder,
}

const WHY: &str = "pack 0192 refused by the store: 403 Forbidden";

fn produce(dir: &Path, packs: u32) {
    let out = output(
        spool()
            .args(["produce", "--packs", &packs.to_string(), "--dir"])
            .arg(dir),
    );
    assert!(out.status.success(), "{}", describe(&out));
}

fn mark_blocked(dir: &Path, why: &str) {
    let claim = spool_lock::try_adopt(dir, &spool_lock::LockOptions::default()).unwrap();
    claim.mark_blocked(why).unwrap();
    claim.release().unwrap();
}

fn layout_root() -> Root {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap().join("spool");
    let key = root.join("3f2a9c01b7de");
    let (live, dead, blocked) = (
        key.join("r0-00c0ffee"),
        key.join("r1-0000dead"),
        key.join("r2-0b10c4ed"),
    );
    std::fs::create_dir_all(&key).unwrap();
    produce(&dead, 2);
    produce(&blocked, 1);
    mark_blocked(&blocked, WHY);
    let holder = LockHolder::start(&live);
    // The embedded defaults, which status skips.
    store_and_index(&root, now_ms(), &text_records(1, "x"));
    Root {
        _tmp: tmp,
        root,
        live,
        dead,
        blocked,
        holder,
    }
}

fn status_json(path: &Path) -> Value {
    let out = output(spool().args(["status", "--json"]).arg(path));
    assert!(out.status.success(), "{}", describe(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn lock_bytes(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join(".owner.lock")).unwrap()
}

#[test]
fn status_of_a_root_shows_every_rank_dir_with_owner_state_and_reason_and_changes_nothing() {
    let r = layout_root();
    let before: Vec<_> = [&r.live, &r.dead, &r.blocked]
        .iter()
        .map(|d| lock_bytes(d))
        .collect();
    let out = output(spool().arg("status").arg(&r.root));
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout(&out);
    assert!(text.contains("(3 rank directories)"), "{text}");
    assert!(
        !text.contains(".store") && !text.contains(".catalog.db"),
        "{text}"
    );
    let row = |name: &str| {
        text.lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{name} missing in:\n{text}"))
            .to_owned()
    };
    let host = spool_lock::host_name();
    let live = row("r0-00c0ffee");
    assert!(
        live.contains("3f2a9c01b7de") && live.contains(" live "),
        "{live}"
    );
    assert!(
        live.contains(&format!("pid {} on {host} (claim)", r.holder.pid())),
        "{live}"
    );
    let dead = row("r1-0000dead");
    assert!(
        dead.contains(" dead ") && dead.contains("last pid"),
        "{dead}"
    );
    let blocked = row("r2-0b10c4ed");
    assert!(
        blocked.contains(" blocked ") && blocked.ends_with(WHY),
        "{blocked}"
    );

    let v = status_json(&r.root);
    let rows = v["rank_dirs"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{v}");
    let by = |dir: &str| rows.iter().find(|x| x["dir"] == dir).unwrap().clone();
    assert_eq!(by("r0-00c0ffee")["state"], "live");
    assert_eq!(by("r0-00c0ffee")["pid"], r.holder.pid());
    assert_eq!(by("r0-00c0ffee")["host"], host.as_str());
    assert_eq!(by("r1-0000dead")["state"], "dead");
    assert_eq!(by("r1-0000dead")["packs"], 2);
    assert_eq!(by("r1-0000dead")["key"], "3f2a9c01b7de");
    assert!(by("r1-0000dead")["bytes"].as_u64().unwrap() > 0);
    assert_eq!(by("r2-0b10c4ed")["state"], "blocked");
    assert_eq!(by("r2-0b10c4ed")["reason"], WHY);

    // The key directory itself lists the same rows.
    let v = status_json(r.live.parent().unwrap());
    assert_eq!(v["rank_dirs"].as_array().unwrap().len(), 3, "{v}");

    // A probe only: every record as it was, the live one still held.
    let after: Vec<_> = [&r.live, &r.dead, &r.blocked]
        .iter()
        .map(|d| lock_bytes(d))
        .collect();
    assert_eq!(before, after);
    assert!(spool_lock::read_owner(&r.live).unwrap().held);

    let out = output(spool().arg("status").arg(r.root.join("missing")));
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr(&out).contains("is not a directory"),
        "{}",
        describe(&out)
    );
}

#[test]
fn unblock_clears_the_mark_once_then_says_nothing_to_clear() {
    let r = layout_root();
    let out = output(spool().arg("unblock").arg(&r.blocked));
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout(&out);
    assert!(text.contains("cleared the blocked mark"), "{text}");
    assert!(text.contains(WHY), "{text}");
    let v = status_json(&r.root);
    let row = v["rank_dirs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["dir"] == "r2-0b10c4ed")
        .unwrap()
        .clone();
    assert_eq!(row["state"], "dead", "{row}");
    assert_eq!(row["reason"], Value::Null);
    assert_eq!(row["packs"], 1, "its pack is still there");

    // Again: nothing to clear, nothing changed, exit 0.
    let before = lock_bytes(&r.blocked);
    let out = output(spool().args(["unblock", "--json"]).arg(&r.blocked));
    assert!(out.status.success(), "{}", describe(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["cleared"], false);
    assert_eq!(lock_bytes(&r.blocked), before);
    let out = output(spool().arg("unblock").arg(&r.dead));
    assert!(
        stdout(&out).contains("nothing to clear"),
        "{}",
        describe(&out)
    );
}

#[test]
fn unblock_refuses_a_live_directory_naming_its_holder_and_a_missing_one() {
    let r = layout_root();
    let before = lock_bytes(&r.live);
    let out = output(spool().arg("unblock").arg(&r.live));
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "is owned by pid {} on host {}",
            r.holder.pid(),
            spool_lock::host_name()
        )),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(lock_bytes(&r.live), before);
    assert!(spool_lock::read_owner(&r.live).unwrap().held);

    let out = output(spool().arg("unblock").arg(r.root.join("missing")));
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr(&out).contains("does not exist"),
        "{}",
        describe(&out)
    );
}

// ---------------------------------------------------------- progress

fn spool_dir_with_packs(n: u32) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r0-00000001");
    produce(&dir, n);
    (tmp, dir)
}

#[test]
fn verify_and_recover_show_plain_progress_on_stderr_and_keep_json_clean() {
    let (_tmp, dir) = spool_dir_with_packs(4);
    for cmd in ["verify", "recover"] {
        let out = output(spool().args([cmd, "--json"]).arg(&dir));
        assert!(out.status.success(), "{}", describe(&out));
        // stdout is exactly one JSON document.
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{cmd} --json stdout is not JSON ({e}): {}", describe(&out))
        });
        assert_eq!(v["valid"], 4, "{v}");
        let err = stderr(&out);
        let want_start = format!("{cmd} {}: 0/4 packs", dir.display());
        let want_end = format!("{cmd} {}: 4/4 packs", dir.display());
        assert!(err.contains(&want_start), "{cmd}: {err}");
        assert!(
            err.contains(&want_end) && err.contains("4 valid"),
            "{cmd}: {err}"
        );

        // Not a terminal, no --json: plain lines too; --no-progress: none.
        let out = output(spool().arg(cmd).arg(&dir));
        assert!(stderr(&out).contains(&want_end), "{}", describe(&out));
        let out = output(spool().args([cmd, "--no-progress"]).arg(&dir));
        assert!(out.status.success(), "{}", describe(&out));
        assert!(out.stderr.is_empty(), "{}", describe(&out));
    }
}

#[test]
fn verify_and_recover_of_a_missing_directory_fail_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    for cmd in ["verify", "recover"] {
        let out = output(spool().arg(cmd).arg(&missing));
        assert_eq!(out.status.code(), Some(1), "{cmd}: {}", describe(&out));
        assert!(
            stderr(&out).contains(&missing.display().to_string()),
            "{cmd}: {}",
            describe(&out)
        );
    }
}

// ------------------------------------------------------------- help

#[test]
fn every_command_has_a_long_help_with_examples_and_the_exit_codes_are_listed() {
    let out = output(spool().arg("--help"));
    let top = stdout(&out);
    for cmd in [
        "ls", "cat", "status", "unblock", "verify", "recover", "lock", "produce",
    ] {
        assert!(
            top.contains(&format!("  {cmd} ")),
            "{cmd} missing in:\n{top}"
        );
    }
    assert!(
        top.contains("9  pack read back does not match its checksum"),
        "{top}"
    );
    for cmd in [
        "ls", "cat", "status", "unblock", "verify", "recover", "lock", "produce",
    ] {
        let out = output(spool().args([cmd, "--help"]));
        assert!(out.status.success(), "{}", describe(&out));
        let text = stdout(&out);
        assert!(text.contains("Examples:"), "{cmd} --help:\n{text}");
        assert!(
            text.contains(&format!("spool {cmd}")),
            "{cmd} --help:\n{text}"
        );
    }
}

#[test]
fn on_a_terminal_verify_and_recover_draw_a_bar_instead_of_plain_lines() {
    // `script` (util-linux) gives the child a pseudo-terminal.
    if !spool_tests::required(
        spool_tests::on_path("script"),
        "`script` (util-linux), to allocate a terminal",
    ) {
        return;
    }
    let (_tmp, dir) = spool_dir_with_packs(3);
    for cmd in ["verify", "recover"] {
        let line = format!(
            "{} {cmd} {}",
            spool_tests::spool_bin().display(),
            dir.display()
        );
        let out = output(
            std::process::Command::new("script")
                .args(["-qec", &line, "/dev/null"])
                .env("RUST_LOG", "warn"),
        );
        assert!(out.status.success(), "{cmd}: {}", describe(&out));
        let text = stdout(&out);
        assert!(text.contains("3 valid"), "{cmd}: {text}");
        assert!(
            text.contains("] 3/3 packs") || text.contains("] 0/3 packs"),
            "{cmd}: a bar: {text:?}"
        );
        assert!(
            !text.contains(&format!("{}: 0/3 packs", dir.display())),
            "{cmd}: no plain progress lines on a terminal: {text:?}"
        );
    }
}

#[test]
fn cat_refuses_to_write_a_raw_pack_to_a_terminal() {
    if !spool_tests::required(
        spool_tests::on_path("script"),
        "`script` (util-linux), to allocate a terminal",
    ) {
        return;
    }
    let (_tmp, root, packs) = root_with_packs();
    let line = format!(
        "{} cat {} --spool-root {}",
        spool_tests::spool_bin().display(),
        packs[0].id.to_hex(),
        root.display()
    );
    let out = output(
        std::process::Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .env("RUST_LOG", "warn"),
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let text = stdout(&out);
    assert!(
        text.contains("refusing to write a binary pack to a terminal"),
        "{text:?}"
    );
    assert!(!text.contains("SPOOLPK"), "no pack bytes on the terminal");
    // --records is fine on a terminal.
    let line = format!("{line} --records");
    let out = output(std::process::Command::new("script").args(["-qec", &line, "/dev/null"]));
    assert!(out.status.success(), "{}", describe(&out));
    assert!(stdout(&out).contains("old record 2"), "{}", describe(&out));
}
