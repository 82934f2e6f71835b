//! SIGTERM/SIGINT/SIGHUP without handlers: the signals are blocked before any
//! thread starts (so every thread inherits the mask) and taken with
//! `sigwait`, never delivered to an arbitrary thread.

use std::sync::mpsc::{self, Receiver};

use anyhow::Context;
use nix::sys::signal::{SigSet, Signal};

/// The signals that stop a command the way an operator expects: SIGTERM
/// (a supervisor), SIGINT (Ctrl-C) and SIGHUP (the terminal went away), each
/// after the command's bounded flush and release.
pub fn stop_signals() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.add(Signal::SIGHUP);
    set
}

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in every thread
/// it starts from now on). Call it first, before any runtime or thread.
pub fn block_stop_signals() -> anyhow::Result<SigSet> {
    let set = stop_signals();
    set.thread_block()
        .context("blocking SIGTERM/SIGINT/SIGHUP")?;
    Ok(set)
}

/// A thread that `sigwait`s on `set` and sends each signal taken.
pub fn spawn_waiter(set: SigSet) -> anyhow::Result<Receiver<Signal>> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("spool-signals".into())
        .spawn(move || loop {
            match set.wait() {
                Ok(sig) => {
                    if tx.send(sig).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!("sigwait: {e}");
                    return;
                }
            }
        })
        .context("starting the signal thread")?;
    Ok(rx)
}
