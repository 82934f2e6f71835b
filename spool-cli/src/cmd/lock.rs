//! `spool lock hold` / `spool lock owner`: take and hold a spool directory's
//! owner lock, or show who holds it.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use nix::sys::signal::Signal;
use spool_lock::LockOptions;

use crate::exit::ExitCode;

/// The long help of `spool lock` (with examples).
pub const LONG_ABOUT: &str = "\
Take and hold a spool directory's owner lock, or show who holds it.

`spool lock owner DIR` probes without blocking and without taking the lock:
who holds it (pid and host from the owner record), why (claim, adopting),
and a blocked mark's reason. `spool lock hold DIR` takes the lock (creating
DIR already locked if it is missing), prints `held DIR pid PID`, and holds
it until SIGTERM, SIGINT or SIGHUP (or, with --release-on-eof, until stdin closes);
a second holder is refused with exit 3 naming this one. Useful to keep a
directory live by hand (an adopter never touches it) and in tests.

Examples:
  spool lock owner /var/lib/spool/3f2a9c01b7de/r0-1a2b3c4d
  spool lock owner DIR --json | jq .held
  spool lock hold /tmp/try-me --release-on-eof < /dev/null";

/// `spool lock ...`.
#[derive(Debug, clap::Args)]
pub struct LockArgs {
    #[command(subcommand)]
    command: LockCommand,
}

#[derive(Debug, clap::Subcommand)]
enum LockCommand {
    /// Take DIR's owner lock (creating DIR, already locked, if missing),
    /// print `held <dir> pid <pid>`, and hold it until SIGTERM, SIGINT or SIGHUP
    /// (or, with --release-on-eof, until stdin closes); then release it,
    /// removing DIR if nothing but its lock file is left.
    Hold {
        /// The spool directory.
        dir: PathBuf,
        /// Admit a filesystem where flock does not exclude other nodes
        /// (NFS, Lustre, FUSE, ...): only for one that a single node uses.
        #[arg(long)]
        allow_shared_filesystem: bool,
        /// Release when stdin reaches end of file (as well as on a signal).
        #[arg(long)]
        release_on_eof: bool,
    },
    /// Show who holds DIR's owner lock. Never blocks, never takes it.
    Owner {
        /// The spool directory.
        dir: PathBuf,
        /// Print one JSON object: held, pid, host, purpose, blocked,
        /// lock_file_replaced, lock_file_present.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `spool lock ...`.
pub fn run(args: LockArgs) -> Result<ExitCode> {
    match args.command {
        LockCommand::Hold {
            dir,
            allow_shared_filesystem,
            release_on_eof,
        } => hold(dir, allow_shared_filesystem, release_on_eof),
        LockCommand::Owner { dir, json } => owner(dir, json),
    }
}

fn hold(dir: PathBuf, allow_shared_filesystem: bool, release_on_eof: bool) -> Result<ExitCode> {
    // Block the signals we wait for before any thread exists, so every
    // thread inherits the mask and sigwait below receives them.
    let mut signals = crate::signals::stop_signals();
    signals.add(Signal::SIGUSR1);
    signals
        .thread_block()
        .context("cannot block SIGTERM/SIGINT/SIGHUP to wait for them")?;

    let opts = LockOptions {
        allow_shared_filesystem,
        ..LockOptions::default()
    };
    let claim = spool_lock::acquire(&dir, &opts)?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "held {} pid {}",
            claim.dir().display(),
            std::process::id()
        )?;
        out.flush().map_err(crate::exit::stdout_error)?;
    }
    if release_on_eof {
        std::thread::spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            // Wake the main thread's sigwait.
            let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGUSR1);
        });
    }
    let signal = signals
        .wait()
        .context("waiting for SIGTERM/SIGINT/SIGHUP")?;
    let dir = claim.dir().to_path_buf();
    let removed = claim.release_and_remove_if_empty()?;
    tracing::info!(
        dir = %dir.display(),
        ?signal,
        removed,
        "released spool directory {} ({})",
        dir.display(),
        if removed { "removed: it was empty" } else { "kept: it holds files" }
    );
    Ok(ExitCode::Ok)
}

fn owner(dir: PathBuf, json: bool) -> Result<ExitCode> {
    let owner = spool_service::status::lock_owner(&dir)?;
    let mut out = std::io::stdout().lock();
    if json {
        let value = serde_json::to_string(&owner)?;
        writeln!(out, "{value}").map_err(crate::exit::stdout_error)?;
        out.flush().map_err(crate::exit::stdout_error)?;
        return Ok(ExitCode::Ok);
    }
    let who = match (&owner.host, owner.pid) {
        (Some(host), pid) => format!(
            "pid {} on host {host}",
            pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
        ),
        (None, _) => "no owner record".to_owned(),
    };
    let d = dir.display();
    let line = if owner.lock_file_replaced {
        format!("{d}: held by a process whose lock file was removed or replaced (the record cannot name it)")
    } else if owner.held {
        format!("{d}: held by {who} ({})", owner.purpose.unwrap_or_default())
    } else if let Some(why) = owner.blocked {
        format!("{d}: not held; blocked: {why} (last held by {who})")
    } else if owner.lock_file_present {
        format!("{d}: not held (last held by {who})")
    } else {
        format!("{d}: not held (no lock file)")
    };
    writeln!(out, "{line}").map_err(crate::exit::stdout_error)?;
    if let Some(shipper) = owner.served_by.filter(|s| s.live) {
        let by = shipper.describe();
        writeln!(out, "{d}: its handed-off packs are shipped by {by}")
            .map_err(crate::exit::stdout_error)?;
    }
    out.flush().map_err(crate::exit::stdout_error)?;
    Ok(ExitCode::Ok)
}
