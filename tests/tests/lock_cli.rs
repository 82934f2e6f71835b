//! Black-box tests of `spool lock hold` and `spool lock owner`, driving the
//! real `spool` binary in real child processes.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use spool_tests::{describe, output, spool, spool_with_seams};

struct Holder {
    child: Child,
    out: BufReader<ChildStdout>,
    line: String,
}

fn hold(dir: &Path, extra: &[&str]) -> Holder {
    hold_with(spool(), dir, extra)
}

/// `hold` through `cmd` (`spool`, or `spool-with-seams` and its seams).
fn hold_with(mut cmd: Command, dir: &Path, extra: &[&str]) -> Holder {
    let mut child = cmd
        .args(["lock", "hold"])
        .arg(dir)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn spool lock hold");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    Holder {
        child,
        out,
        line: line.trim_end().to_owned(),
    }
}

impl Holder {
    fn signal(&mut self, sig: &str) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.out, &mut rest);
        self.child.wait().unwrap()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn owner_json(dir: &Path) -> serde_json::Value {
    let out = output(spool().args(["lock", "owner", "--json"]).arg(dir));
    assert!(out.status.success(), "{}", describe(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn host() -> String {
    spool_lock::host_name()
}

#[test]
fn hold_prints_its_line_refuses_a_second_holder_and_releases_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let mut first = hold(&dir, &[]);
    let abs = dir.canonicalize().unwrap();
    assert_eq!(
        first.line,
        format!("held {} pid {}", abs.display(), first.child.id())
    );

    let second = output(spool().args(["lock", "hold"]).arg(&dir));
    assert_eq!(second.status.code(), Some(3), "{}", describe(&second));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains(&format!(
            "is owned by pid {} on host {} (it holds {}/.owner.lock)",
            first.child.id(),
            host(),
            abs.display()
        )),
        "{stderr}"
    );

    let v = owner_json(&dir);
    assert_eq!(v["held"], true);
    assert_eq!(v["pid"], first.child.id());
    assert_eq!(v["host"], host());
    assert_eq!(v["purpose"], "claim");
    assert_eq!(v["blocked"], serde_json::Value::Null);
    assert_eq!(v["lock_file_replaced"], false);

    let status = first.signal("-TERM");
    assert_eq!(status.code(), Some(0));
    assert!(!dir.exists(), "an empty directory is removed on release");
}

#[test]
fn sigint_and_stdin_eof_release_and_a_directory_with_files_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let mut h = hold(&dir, &[]);
    assert!(h.line.starts_with("held "));
    assert_eq!(h.signal("-INT").code(), Some(0));
    assert!(!dir.exists());

    let mut h = hold(&dir, &["--release-on-eof"]);
    assert!(h.line.starts_with("held "), "{}", h.line);
    std::fs::write(dir.join("0123456789abcdef0123456789abcdef.ready"), b"x").unwrap();
    h.child.stdin.take().unwrap().flush().unwrap();
    let status = h.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(dir.join("0123456789abcdef0123456789abcdef.ready").exists());
    let v = owner_json(&dir);
    assert_eq!(v["held"], false);
    assert_eq!(v["purpose"], "claim");
    let human = output(spool().args(["lock", "owner"]).arg(&dir));
    assert!(
        String::from_utf8_lossy(&human.stdout).contains("not held"),
        "{}",
        describe(&human)
    );
}

#[test]
fn after_the_holder_is_sigkilled_the_lock_is_free_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let mut h = hold(&dir, &[]);
    assert!(h.line.starts_with("held "));
    h.child.kill().unwrap();
    h.child.wait().unwrap();
    assert_eq!(owner_json(&dir)["held"], false);
    let mut again = hold(&dir, &["--release-on-eof"]);
    assert!(again.line.starts_with("held "), "{}", again.line);
    drop(again.child.stdin.take());
    assert_eq!(again.child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_shared_filesystem_exits_4_unless_overridden() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("spool");
    let out = output(
        spool_with_seams(&["--test-filesystem-type", "0x6969"])
            .args(["lock", "hold"])
            .arg(&dir),
    );
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NFS") && stderr.contains("--allow-shared-filesystem"),
        "{stderr}"
    );
    assert!(!dir.exists());
    let mut h = hold_with(
        spool_with_seams(&["--test-filesystem-type", "0x6969"]),
        &dir,
        &["--allow-shared-filesystem", "--release-on-eof"],
    );
    assert!(h.line.starts_with("held "), "{}", h.line);
    drop(h.child.stdin.take());
    assert_eq!(h.child.wait().unwrap().code(), Some(0));
}

#[test]
fn owner_of_a_missing_directory_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let out = output(spool().args(["lock", "owner"]).arg(tmp.path().join("nope")));
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nope"),
        "{}",
        describe(&out)
    );
}
