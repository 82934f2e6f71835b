//! SIGTERM/SIGINT without handlers: the signals are blocked before any
//! thread starts (so every thread inherits the mask) and taken with
//! `sigwait`, never delivered to an arbitrary thread.

use std::sync::mpsc::{self, Receiver};

use anyhow::Context;
use nix::sys::signal::{SigSet, Signal};

/// Blocks SIGTERM and SIGINT in the calling thread (and so in every thread
/// it starts from now on). Call it first, before any runtime or thread.
pub fn block_stop_signals() -> anyhow::Result<SigSet> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().context("blocking SIGTERM/SIGINT")?;
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
