//! Shared harness for spool-lock's integration tests: the exec'd helper
//! process (`spool-lock-helper`, built with the `testing` feature).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// A running `spool-lock-helper`.
pub struct Helper {
    pub child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
}

impl Helper {
    pub fn spawn(args: &[&str]) -> Helper {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spool-lock-helper"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn spool-lock-helper");
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        Helper { child, stdin, out }
    }

    pub fn spawn_in(mode: &str, dir: &Path, extra: &[&str]) -> Helper {
        let mut args = vec![mode, dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        Helper::spawn(&args)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line of output (empty at EOF).
    pub fn line(&mut self) -> String {
        let mut line = String::new();
        self.out.read_line(&mut line).expect("read helper output");
        line.trim_end().to_owned()
    }

    /// Reads lines until one starts with `prefix`; panics at EOF.
    pub fn expect(&mut self, prefix: &str) -> String {
        loop {
            let line = self.line();
            assert!(!line.is_empty(), "helper ended before printing {prefix:?}");
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    /// Reads lines until one starting with each prefix was seen (in any
    /// order: a fork child and its parent write concurrently); returns them
    /// in the order of `prefixes`.
    pub fn expect_each(&mut self, prefixes: &[&str]) -> Vec<String> {
        let mut found: Vec<Option<String>> = vec![None; prefixes.len()];
        while found.iter().any(Option::is_none) {
            let line = self.line();
            assert!(
                !line.is_empty(),
                "helper ended before printing {prefixes:?}"
            );
            if let Some(i) = prefixes
                .iter()
                .position(|p| line.starts_with(p))
                .filter(|&i| found[i].is_none())
            {
                found[i] = Some(line);
            }
        }
        found.into_iter().map(Option::unwrap).collect()
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin (the helper releases and exits) and waits.
    pub fn finish(mut self) -> String {
        self.stdin.take();
        let mut rest = String::new();
        while {
            let l = self.line();
            rest.push_str(&l);
            !l.is_empty()
        } {}
        self.child.wait().unwrap();
        rest
    }

    /// SIGKILLs the helper and reaps it.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGKILLs a process that is not our child (a helper's fork worker).
pub fn kill_pid(pid: i32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
}

/// Whether a process exists.
pub fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// The pid in a `child <pid> ...` or `forked <pid>` line.
pub fn pid_in(line: &str) -> i32 {
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// SIGKILLs a (non-child) process when dropped, so a failed assertion
/// never leaks a paused fork worker.
pub struct KillOnDrop(pub i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        kill_pid(self.0);
    }
}
