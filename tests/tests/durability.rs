//! The spool keeps its word on disk: a pack leaves the spool only
//! once its object is durable. Black-box, on the real binary under Debian's
//! `strace`: the order of the system calls is the evidence.
//!
//! `strace` is installed by `cargo xtask test` (which sets
//! `SPOOL_REQUIRE_ALL=1`, so a missing one fails there); elsewhere a test
//! that finds no `strace` says so and skips ([`spool_tests::required`]).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use spool_tests::{describe, output, spool_bin};

/// `strace`'s path, or `None` (after saying why) when it is missing and not
/// required.
fn strace() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("strace"))
            .find(|p| p.is_file())
    });
    spool_tests::required(
        found.is_some(),
        "strace (apt-get install -y strace; cargo xtask test installs it)",
    );
    found
}

/// The index of the first line of `trace` that `pred` accepts, with the line.
fn first<'a>(trace: &'a [&'a str], pred: impl Fn(&str) -> bool) -> Option<(usize, &'a str)> {
    trace.iter().copied().enumerate().find(|(_, l)| pred(l))
}

/// The trace with every call strace split across threads (`pid call(args
/// <unfinished ...>` … `pid <... call resumed>) = 0`) joined into one line,
/// placed where it returned: a call counts as done where it finished.
fn joined(text: &str) -> Vec<String> {
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let pid = line.split_whitespace().next().unwrap_or("").to_string();
        if let Some(start) = line.strip_suffix(" <unfinished ...>") {
            pending.push((pid, start.to_string()));
        } else if let Some(at) = line.find("resumed>") {
            match pending.iter().position(|(p, _)| *p == pid) {
                Some(i) => {
                    let (_, start) = pending.remove(i);
                    out.push(format!("{start}{}", &line[at + "resumed>".len()..]));
                }
                None => out.push(line.to_string()),
            }
        } else {
            out.push(line.to_string());
        }
    }
    out
}

/// `fsync(FD</path>)` or `fdatasync(FD</path>)` on exactly `path` (strace
/// `-y` prints each descriptor's path), or on a file whose name starts with
/// `name_prefix` inside `path`'s directory when `prefix` is set.
fn is_sync_of(line: &str, path: &Path, prefix: bool) -> bool {
    let Some(rest) = line
        .split_once("fsync(")
        .or_else(|| line.split_once("fdatasync("))
        .map(|(_, r)| r)
    else {
        return false;
    };
    if !rest.trim_end().ends_with("= 0") {
        return false;
    }
    let Some(start) = rest.find('<') else {
        return false;
    };
    let Some(end) = rest[start..].find(">)") else {
        return false;
    };
    let synced = &rest[start + 1..start + end];
    let want = path.to_string_lossy();
    if prefix {
        synced.starts_with(&*want)
    } else {
        synced == want
    }
}

/// The whole flow of the README's main job (`produce --serve` to the
/// embedded `file://` store) under `strace -f -y -e
/// trace=fsync,fdatasync,unlink,unlinkat`: the object's fsync and its
/// directory's fsync both come before the unlink of the pack's `.ready`
/// in the spool. Without the fsyncs of spool-upload's `file://` path there is
/// no fsync of the object at all, and this is red.
#[test]
fn a_pack_is_unlinked_from_the_spool_only_after_its_object_and_directory_are_fsynced() {
    let Some(strace) = strace() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let trace_file = tmp.path().join("trace");
    let out = output(
        std::process::Command::new(&strace)
            .args([
                "-f",
                "-y",
                "-qq",
                "-e",
                "trace=fsync,fdatasync,unlink,unlinkat",
                "-o",
            ])
            .arg(&trace_file)
            .arg(spool_bin())
            .env("RUST_LOG", "warn")
            .args(["produce", "--packs", "1", "--serve", "--spool-root"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(id.len(), 32, "one pack id printed\n{}", describe(&out));
    let pid = spool_core::PackId::from_hex(&id).unwrap();
    let store = root.join(".store");
    let key = spool_upload::object_key(&object_store::path::Path::default(), &pid);
    let object = store.join(key.as_ref());
    assert!(object.is_file(), "{} was uploaded", object.display());
    let object_dir = object.parent().unwrap().to_path_buf();

    let text = std::fs::read_to_string(&trace_file).unwrap();
    let trace = joined(&text);
    let trace: Vec<&str> = trace.iter().map(String::as_str).collect();
    let ready = format!("{id}.ready");
    let (unlink_at, unlink) = first(&trace, |l| {
        (l.contains("unlink(") || l.contains("unlinkat("))
            && l.contains(&ready)
            && l.ends_with("= 0")
    })
    .unwrap_or_else(|| panic!("no unlink of {ready} in the trace:\n{text}"));
    // The uploader's `file://` path stages the object beside its final name
    // (`<key>#<n>`) and fsyncs that file before renaming it into place.
    let (object_at, _) = first(&trace, |l| is_sync_of(l, &object, true)).unwrap_or_else(|| {
        panic!(
            "no fsync of the object {} in the trace:\n{text}",
            object.display()
        )
    });
    let (dir_at, _) = first(&trace, |l| is_sync_of(l, &object_dir, false)).unwrap_or_else(|| {
        panic!(
            "no fsync of the object's directory {} in the trace:\n{text}",
            object_dir.display()
        )
    });
    assert!(
        object_at < unlink_at && dir_at < unlink_at,
        "the object's fsync (line {object_at}) and its directory's (line {dir_at}) must come before the pack's unlink (line {unlink_at}: {unlink}):\n{text}"
    );
    // The directories created on the way (`v1/`, `date=…/`) and the store
    // root's entry for them are durable too, before the pack leaves.
    for d in [object_dir.parent().unwrap(), store.as_path()] {
        let (at, _) = first(&trace, |l| is_sync_of(l, d, false))
            .unwrap_or_else(|| panic!("no fsync of {} in the trace:\n{text}", d.display()));
        assert!(
            at < unlink_at,
            "{} fsynced at line {at}, after the unlink at {unlink_at}:\n{text}",
            d.display()
        );
    }
}

/// What ships writes a `file://` store through spool-upload's own path
/// (`spool-upload`'s crate docs, "`file://` at copy speed"): `spool run
/// --once` adopting a dead producer's packs into the embedded store copies
/// each in the kernel (`copy_file_range`, which reflinks where the
/// filesystem can, or a `FICLONE` ioctl) and publishes it with
/// `renameat2(RENAME_NOREPLACE)`. A service handed a store that lost that
/// path (object_store's `LocalFileSystem` writes `<key>#<n>` and links it)
/// makes neither call, and this is red.
#[test]
fn spool_run_writes_a_file_store_with_copy_file_range_and_renameat2() {
    let Some(strace) = strace() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir(&root).unwrap();
    // a sink-only producer: its exit leaves a dead sibling to adopt
    let staged = output(
        std::process::Command::new(spool_bin())
            .env("RUST_LOG", "warn")
            .args(["produce", "--packs", "3", "--pack-bytes", "300000"])
            .arg("--spool-root")
            .arg(&root),
    );
    assert!(staged.status.success(), "{}", describe(&staged));
    let ids: Vec<String> = String::from_utf8_lossy(&staged.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), 3, "{}", describe(&staged));

    let trace_file = tmp.path().join("trace");
    let out = output(
        std::process::Command::new(&strace)
            .args([
                "-f",
                "-qq",
                "-e",
                "trace=copy_file_range,renameat2,ioctl",
                "-o",
            ])
            .arg(&trace_file)
            .arg(spool_bin())
            .env("RUST_LOG", "warn")
            .args(["run", "--once", "--timeout", "60", "--spool-root"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let text = std::fs::read_to_string(&trace_file).unwrap();
    let trace = joined(&text);
    let copies = trace
        .iter()
        .filter(|l| {
            (l.contains("copy_file_range(")
                && !l.trim_end().ends_with("= 0")
                && !l.contains("= -1"))
                || (l.contains("ioctl(") && l.contains("FICLONE") && l.trim_end().ends_with("= 0"))
        })
        .count();
    let publishes = trace
        .iter()
        .filter(|l| {
            l.contains("renameat2(")
                && l.contains("RENAME_NOREPLACE")
                && l.trim_end().ends_with("= 0")
        })
        .count();
    assert!(
        copies >= ids.len() && publishes >= ids.len(),
        "{} packs shipped with {copies} in-kernel copies and {publishes} \
         renameat2(RENAME_NOREPLACE) publishes:\n{text}",
        ids.len()
    );
    for id in &ids {
        assert!(
            trace
                .iter()
                .any(|l| l.contains("renameat2(") && l.contains(&format!("{id}.pack"))),
            "no renameat2 onto {id}.pack:\n{text}"
        );
    }
}
