//! `spool`: the command-line face of the spool workspace, as a
//! library with one entry point, [`main_with`], so the binary `src/main.rs`
//! is two lines and the test helper `spool-with-seams` (spool-tests) can set
//! its test seams and then run the very same command. The binary has no
//! test seam and no hidden option.
//!
//! Each subcommand lives in its own module under `cmd/`; this file holds the
//! top-level argument parser and maps errors to the documented exit codes
//! (see [`exit::ExitCode`]).
//!
//! Shared parts: [`config`] (every knob from a TOML file,
//! `SPOOL_*` variables and flags, with sources and masked secrets; `spool
//! config show`; every command that ships, stages or reads back resolves
//! its destination there, so `run`, `produce`, `ls` and `cat` agree),
//! [`dest`] (the embedded store and catalog under a spool root, and the
//! refusal of `memory://` for a command that drains), [`engine`] (the
//! `spool_service::Engine` of `spool run` and `spool produce --serve`, from
//! the library's one wiring, `Config::engine_config`), spool-service's `metrics` (`/metrics` and `/healthz`),
//! [`logging`] (`RUST_LOG` filtering, `--log-format text|json`) and
//! [`signals`] (SIGTERM/SIGINT taken by `sigwait`, never a handler).
//! Black-box tests: `tests/tests/run_cli.rs` (run, config), `real_run.rs`,
//! `engine_cli.rs`, `produce.rs`, `demo.rs`, `lock_cli.rs`.
//!
//! # Features
//!
//! None: the `spool` binary has every store and catalog backend (spool-service's
//! default features) and no test seam.
#![forbid(unsafe_code)]

/// `println!` that returns an error instead of panicking when stdout is
/// closed or full (`spool status | head -1`, `>&-`): the caller's `?` turns
/// it into exit 1 with one line, never a panic with a backtrace.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err(crate::exit::stdout_error)?
    }};
}

mod cmd;
mod config;
mod dest;
mod engine;
mod exit;
mod logging;
mod progress;
mod signals;
mod source;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

/// Gets data packs from the processes that produce them to an object store
/// and a catalog, through a crash-safe node-local spool directory.
#[derive(Debug, Parser)]
#[command(name = "spool", version, about, long_about = LONG_ABOUT, after_help = exit::EXIT_CODES_HELP)]
struct Cli {
    /// Configuration file (TOML). Default: $SPOOL_CONFIG, else ./spool.toml
    /// if present. See `spool config show`.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log format on stderr (filter with RUST_LOG, e.g. RUST_LOG=spool=debug).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "SPOOL_LOG_FORMAT"
    )]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: cmd::Command,
}

const LONG_ABOUT: &str = "\
Gets data packs from the processes that produce them to an object store
and a catalog, through a crash-safe node-local spool directory.

Producers write packs into their own rank directory under a spool root
(ROOT/<catalog key>/r<rank>-<incarnation>/). A storage service, embedded
in the producer or run as a daemon, uploads and indexes them, and adopts
the directories of producers that died. The main commands:

  spool demo                 the whole product on one machine, with a read-back table
  spool run --spool-root ROOT [--once]   the daemon: drain and adopt into store + catalog
  spool produce --spool-root ROOT --packs N [--serve]   stage synthetic packs
  spool config show          the effective configuration and where each key came from
  spool status ROOT          every rank directory: owner, live/dead/blocked, packs
  spool ls --spool-root ROOT packs in the catalog
  spool cat ID --spool-root ROOT --out F   read one back, checksum checked
  spool verify DIR           validate packs without the lock (exit 8 if corrupt)
  spool recover DIR          take the lock, sweep temp files, quarantine corrupt packs
  spool unblock DIR          clear a blocked mark after fixing its cause
  spool requeue DIR          turn rejected packs back into ready ones after fixing the cause
  spool lock owner DIR       who holds a directory

Logs go to stderr, filtered by RUST_LOG (default `warn`, `info` for run),
as text or with --log-format json. Each command's --help has examples.";

/// Runs `spool` with these arguments (the first is the program name) and
/// returns its exit code: parses, sets up logging, runs the subcommand and
/// maps an error to its documented code.
pub fn main_with<I, T>(args: I) -> std::process::ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::parse_from(args);
    let default_level = match cli.command {
        cmd::Command::Run(_) => "info",
        _ => "warn",
    };
    logging::init(cli.log_format, default_level);
    match cmd::run(cli.command, cli.config.as_deref()) {
        Ok(code) => code.into(),
        Err(err) => {
            let code = exit::exit_code_of(&err);
            eprintln!("spool: {}", exit::message_of(&err));
            code.into()
        }
    }
}

#[cfg(test)]
mod surface_tests;
