//! The subcommands. Each module owns one command's arguments and its run
//! function; `run` dispatches.

use crate::exit::ExitCode;

pub mod lock;

/// Every `spool` subcommand.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Take and hold a spool directory's owner lock, or show who holds it.
    Lock(lock::LockArgs),
}

/// Runs one subcommand.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Lock(args) => lock::run(args),
    }
}
