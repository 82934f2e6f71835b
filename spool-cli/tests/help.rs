//! `spool --help` documents every exit code. Also makes cargo
//! build the `spool` binary in every workspace test build, so the black-box
//! tests in `tests/tests/` find it next to their executables.
#![forbid(unsafe_code)]

use std::process::Command;

#[test]
fn help_lists_every_exit_code_and_the_lock_commands() {
    let out = Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "0  ok",
        "2  usage error",
        "3  spool directory owned by another process",
        "4  shared (network) filesystem refused",
        "5  spool full",
        "6  deadline passed without draining",
        "7  lease lost (latched)",
        "8  corrupt packs found",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(text.contains("lock"), "{text}");
    for cmd in ["run", "config", "--config", "--log-format"] {
        assert!(text.contains(cmd), "missing {cmd:?} in:\n{text}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--spool-root",
        "--store",
        "--catalog",
        "--store-id",
        "--rank",
        "--once",
        "--timeout",
        "--lease-scope",
        "--lease-ttl",
        "--poll-interval",
        "--recheck-interval",
        "--max-backoff",
        "--allow-shared-filesystem",
        "--json",
        "--metrics-addr",
        "--set",
    ] {
        assert!(
            text.contains(flag),
            "spool run --help lacks {flag}:\n{text}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["lock", "hold", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("--release-on-eof") && text.contains("--allow-shared-filesystem"),
        "{text}"
    );
    assert!(
        !text.contains("--test-filesystem-type"),
        "the seam option is hidden"
    );
}
