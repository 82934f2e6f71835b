//! The subcommands. Each module owns one command's arguments and its run
//! function; `run` dispatches.

use crate::exit::ExitCode;

/// Every `spool` subcommand.
#[derive(Debug, clap::Subcommand)]
pub enum Command {}

/// Runs one subcommand.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {}
}
