//! The subcommands. Each module owns one command's arguments and its run
//! function; `run` dispatches.

use crate::exit::ExitCode;

pub mod produce;

/// Every `spool` subcommand.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Stage N synthetic packs into a spool directory (taking its lock) and
    /// print each staged pack's id.
    Produce(produce::Args),
}

/// Runs one subcommand.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Produce(args) => produce::run(args),
    }
}
