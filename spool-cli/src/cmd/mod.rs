//! The subcommands. Each module owns one command's arguments and its run
//! function; `run` dispatches.

use crate::exit::ExitCode;

pub mod config;
pub mod demo;
pub mod lock;
pub mod produce;
pub mod recover;
pub mod run;
pub mod status;
pub mod verify;

/// Every `spool` subcommand.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Take and hold a spool directory's owner lock, or show who holds it.
    Lock(lock::LockArgs),
    /// Show a spool directory's owner and packs, or a spool root's rank
    /// directories.
    Status(status::Args),
    /// Validate every ready pack without taking the lock or changing
    /// anything (exit 8 if any is corrupt).
    Verify(verify::Args),
    /// Take the lock, sweep dead writers' temp files and quarantine corrupt
    /// packs.
    Recover(recover::Args),
    /// Stage N synthetic packs into a spool directory (taking its lock) and
    /// print each staged pack's id.
    Produce(Box<produce::Args>),
    /// Run the whole product on embedded defaults in a scratch directory:
    /// producers as real processes, one SIGKILLed mid-stream, the daemon
    /// adopting its directory, and a read-back table (exit 0 only if
    /// nothing was lost).
    Demo(demo::Args),
    /// Run the storage service daemon: claim a rank directory, adopt dead
    /// siblings' packs into the store and catalog (until SIGTERM/SIGINT, or
    /// with --once until drained).
    Run(run::Args),
    /// Show the effective configuration (file, SPOOL_* environment, flags).
    Config(config::Args),
}

/// Runs one subcommand.
pub fn run(command: Command, config_file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    match command {
        Command::Lock(args) => lock::run(args),
        Command::Status(a) => status::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Recover(a) => recover::run(a),
        Command::Produce(args) => produce::run(*args),
        Command::Demo(args) => demo::run(args),
        Command::Run(args) => run::run(args, config_file),
        Command::Config(args) => config::run(args, config_file),
    }
}
