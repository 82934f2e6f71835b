//! `spool`: the command-line face of the spool workspace (SPEC §8).
//!
//! Each subcommand lives in its own module under `cmd/`; this file holds the
//! top-level argument parser and maps errors to the documented exit codes
//! (see [`exit::ExitCode`]).
#![forbid(unsafe_code)]

mod cmd;
mod config;
mod dest;
mod engine;
mod exit;
mod logging;
mod metrics;
mod signals;

use std::path::PathBuf;

use clap::Parser;

/// Gets data packs from the processes that produce them to an object store
/// and a catalog, through a crash-safe node-local spool directory.
#[derive(Debug, Parser)]
#[command(name = "spool", version, about, long_about = None, after_help = exit::EXIT_CODES_HELP)]
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

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        cmd::Command::Run(_) => "info",
        _ => "warn",
    };
    logging::init(cli.log_format, default_level);
    match cmd::run(cli.command, cli.config.as_deref()) {
        Ok(code) => code.into(),
        Err(err) => {
            let code = exit::classify(&err);
            eprintln!("spool: {err:#}");
            code.into()
        }
    }
}
