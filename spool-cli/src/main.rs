//! `spool`: the command-line face of the spool workspace (SPEC §8).
//!
//! Each subcommand lives in its own module under `cmd/`; this file holds the
//! top-level argument parser and maps errors to the documented exit codes
//! (see [`exit::ExitCode`]).
#![forbid(unsafe_code)]

mod cmd;
mod dest;
mod exit;

use clap::Parser;

/// Gets data packs from the processes that produce them to an object store
/// and a catalog, through a crash-safe node-local spool directory.
#[derive(Debug, Parser)]
#[command(name = "spool", version, about, long_about = None, after_help = exit::EXIT_CODES_HELP)]
struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cmd::run(cli.command) {
        Ok(code) => code.into(),
        Err(err) => {
            let code = exit::classify(&err);
            eprintln!("spool: {err:#}");
            code.into()
        }
    }
}
