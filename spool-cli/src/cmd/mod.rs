//! The subcommands. Each module owns one command's arguments and its run
//! function; `run` dispatches.

use crate::exit::ExitCode;

pub mod cat;
pub mod config;
pub mod demo;
pub mod lock;
pub mod ls;
pub mod produce;
pub mod recover;
pub mod run;
pub mod status;
pub mod unblock;
pub mod verify;

/// Every `spool` subcommand.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Take and hold a spool directory's owner lock, or show who holds it.
    #[command(long_about = lock::LONG_ABOUT)]
    Lock(lock::LockArgs),
    /// Show a spool directory's owner and packs, or a spool root's rank
    /// directories.
    #[command(long_about = status::LONG_ABOUT)]
    Status(status::Args),
    /// Validate every ready pack without taking the lock or changing
    /// anything (exit 8 if any is corrupt).
    #[command(long_about = verify::LONG_ABOUT)]
    Verify(verify::Args),
    /// Take the lock, sweep dead writers' temp files and quarantine corrupt
    /// packs.
    #[command(long_about = recover::LONG_ABOUT)]
    Recover(recover::Args),
    /// Stage N synthetic packs into a spool directory (taking its lock) and
    /// print each staged pack's id.
    #[command(long_about = produce::LONG_ABOUT)]
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
    /// List the packs in the catalog (by creation time; --since, --json).
    #[command(long_about = ls::LONG_ABOUT)]
    Ls(ls::Args),
    /// Read one pack back from catalog + store, checking its checksum
    /// (exit 9 and nothing written if it does not match).
    #[command(long_about = cat::LONG_ABOUT)]
    Cat(cat::Args),
    /// Clear a rank directory's blocked mark once its cause is fixed.
    #[command(long_about = unblock::LONG_ABOUT)]
    Unblock(unblock::Args),
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
        Command::Ls(a) => ls::run(a),
        Command::Cat(a) => cat::run(a),
        Command::Unblock(a) => unblock::run(a),
    }
}
