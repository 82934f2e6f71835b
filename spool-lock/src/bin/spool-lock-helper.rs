//! A helper process for spool-lock's cross-process tests (built only with
//! the `testing` feature). Each mode takes a lock, forks, races or watches,
//! and reports on stdout, one line per event; stdin closing ends it.
//!
//! Modes:
//! * `hold DIR` — acquire, print `held <dir> <pid>`, wait for stdin EOF,
//!   release, print `released`.
//! * `try DIR take|adopt` — one attempt; print `ok` (and keep holding until
//!   stdin EOF) or `refused owned=<bool> <message>`.
//! * `race DIR` — wait for a line on stdin, acquire, print `won` or
//!   `refused <message>`, then hold until stdin EOF.
//! * `hold-fork DIR` — acquire, fork a worker (which reports `child <pid>
//!   closed=<0|1> held=<0|1>` and pauses), print `held ...`, wait.
//! * `fork-in-take DIR` — acquire with a hook between the lock file's open
//!   and its flock that has another thread fork a worker (`child <pid>`),
//!   print `held ...`, wait.
//! * `fork-in-release DIR` — acquire, release with a hook inside the
//!   release that has another thread fork a worker, print `released`, wait.
//! * `mark-in-fork DIR` — acquire, fork a plain child that opens
//!   `DIR.scratch` and tries to mark the claim blocked (`child ok`,
//!   `child not-held` or `child error <message>`); the parent prints
//!   `forked <pid>` and `held ...`, and waits.
//! * `watch PARENT N` — list PARENT over and over, probing every entry not
//!   yet seen held; print `unheld <name>` and exit 1 on one seen unheld,
//!   `ok` once N have been seen held.
//!
//! Its forks go through `spool_lock::testing`, so it has no `unsafe`.

#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spool_lock::testing::{self, ChildProbe};
use spool_lock::{acquire, read_owner, try_adopt, HookPoint, LockOptions};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Says `held DIR PID`: the line a test waits for once the claim is taken.
fn say_held(claim: &spool_lock::Claim) {
    say(&format!(
        "held {} {}",
        claim.dir().display(),
        std::process::id()
    ));
}

fn wait_for_eof() {
    let mut sink = String::new();
    while std::io::stdin().lock().read_line(&mut sink).unwrap_or(0) > 0 {
        sink.clear();
    }
}

/// A thread that forks a worker each time it is asked, and answers once
/// the fork returned in the parent.
fn forker() -> (mpsc::Sender<()>, mpsc::Receiver<i32>) {
    let (ask_tx, ask_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<i32>();
    std::thread::spawn(move || {
        for () in ask_rx {
            let pid = testing::fork_paused_child(ChildProbe::Nothing);
            let _ = done_tx.send(pid);
        }
    });
    (ask_tx, done_rx)
}

fn hook_forking_at(dir: &Path, at: HookPoint) {
    let (ask, done) = forker();
    let state = std::sync::Mutex::new((ask, done, false));
    testing::set_lock_hook(
        dir,
        Arc::new(move |point, _path| {
            let mut s = state.lock().unwrap();
            if point == at && !s.2 {
                s.2 = true;
                s.0.send(()).unwrap();
                let pid = s.1.recv().unwrap();
                say(&format!("forked {pid}"));
            }
        }),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = LockOptions::default();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let dir = PathBuf::from(args.get(1).cloned().unwrap_or_default());
    match mode {
        "hold" => {
            let claim = acquire(&dir, &opts).unwrap_or_else(|e| {
                say(&format!("refused {e}"));
                std::process::exit(3)
            });
            say_held(&claim);
            wait_for_eof();
            claim.release().unwrap();
            say("released");
        }
        "try" => {
            let how = args.get(2).map(String::as_str).unwrap_or("take");
            let result = if how == "adopt" {
                try_adopt(&dir, &opts)
            } else {
                acquire(&dir, &opts)
            };
            match result {
                Ok(claim) => {
                    say("ok");
                    wait_for_eof();
                    claim.release().unwrap();
                }
                Err(e) => say(&format!("refused owned={} {e}", e.is_owned_by_another())),
            }
        }
        "race" => {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).unwrap();
            match acquire(&dir, &opts) {
                Ok(claim) => {
                    say("won");
                    wait_for_eof();
                    claim.release().unwrap();
                }
                Err(e) => {
                    say(&format!("refused {e}"));
                    wait_for_eof();
                }
            }
        }
        "hold-fork" => {
            let claim = acquire(&dir, &opts).unwrap();
            let pid = testing::fork_paused_child(ChildProbe::Claim(&claim));
            say(&format!("forked {pid}"));
            say_held(&claim);
            wait_for_eof();
            claim.release().unwrap();
        }
        "fork-in-take" => {
            hook_forking_at(&dir, HookPoint::LockFileOpened);
            let claim = acquire(&dir, &opts).unwrap();
            say_held(&claim);
            wait_for_eof();
            claim.release().unwrap();
        }
        "fork-in-release" => {
            let claim = acquire(&dir, &opts).unwrap();
            hook_forking_at(&dir, HookPoint::ReleaseBeforeClose);
            claim.release().unwrap();
            say("released");
            wait_for_eof();
        }
        "mark-in-fork" => {
            let claim = acquire(&dir, &opts).unwrap();
            match testing::fork_single_threaded().unwrap() {
                testing::Forked::Child => {
                    // The child's copies of the claim's descriptors are
                    // closed; a file opened now takes the lowest free
                    // number, one of theirs.
                    let _scratch = std::fs::File::create(dir.with_extension("scratch")).unwrap();
                    let answer = match claim.mark_blocked("marked in a fork child") {
                        Ok(()) => "ok".to_owned(),
                        Err(spool_lock::Error::NotHeld { .. }) => "not-held".to_owned(),
                        Err(e) => format!("error {e}"),
                    };
                    say(&format!("child {answer}"));
                    std::process::exit(0);
                }
                testing::Forked::Parent(pid) => {
                    say(&format!("forked {pid}"));
                    say_held(&claim);
                    wait_for_eof();
                    claim.release().unwrap();
                }
            }
        }
        "watch" => {
            let want: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(1);
            let mut seen = std::collections::HashSet::new();
            let deadline = Instant::now() + Duration::from_secs(120);
            say("watching");
            while seen.len() < want && Instant::now() < deadline {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let name = entry.file_name();
                    if name.to_string_lossy().starts_with('.') || seen.contains(&name) {
                        continue;
                    }
                    match read_owner(&entry.path()) {
                        Ok(s) if s.held => {
                            seen.insert(name);
                        }
                        Ok(_) => {
                            say(&format!("unheld {}", name.to_string_lossy()));
                            std::process::exit(1);
                        }
                        Err(e) => {
                            say(&format!("error {e}"));
                            std::process::exit(1);
                        }
                    }
                }
            }
            say(&format!("ok {}", seen.len()));
        }
        _ => {
            eprintln!("usage: spool-lock-helper hold|try|race|hold-fork|fork-in-take|fork-in-release|mark-in-fork|watch DIR [..]");
            std::process::exit(2);
        }
    }
}
