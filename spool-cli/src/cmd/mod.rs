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
pub mod reindex;
pub mod requeue;
pub mod run;
mod spool_dir;
pub mod status;
pub mod sweep;
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
    #[command(long_about = DEMO_LONG_ABOUT)]
    Demo(demo::Args),
    /// Run the storage service daemon: claim a rank directory, adopt dead
    /// siblings' packs into the store and catalog (until SIGTERM/SIGINT/SIGHUP, or
    /// with --once until drained).
    #[command(long_about = RUN_LONG_ABOUT)]
    Run(run::Args),
    /// Show the effective configuration (file, SPOOL_* environment, flags).
    #[command(long_about = CONFIG_LONG_ABOUT)]
    Config(config::Args),
    /// List the packs in the catalog (by creation time; --since, --json).
    #[command(long_about = ls::LONG_ABOUT)]
    Ls(ls::Args),
    /// Read one pack back from catalog + store, checking its checksum
    /// (exit 9 and nothing written if it does not match).
    #[command(long_about = cat::LONG_ABOUT)]
    Cat(cat::Args),
    /// Make a catalog whole from its store: index every valid pack it
    /// lacks (never a duplicate, never an object that is not a pack).
    #[command(long_about = reindex::LONG_ABOUT)]
    Reindex(reindex::Args),
    /// Delete the bundles proven spare copies: every pack in one indexed
    /// in another object (never anything else, never a pack's only copy).
    #[command(long_about = sweep::LONG_ABOUT)]
    Sweep(sweep::Args),
    /// Clear a rank directory's blocked mark once its cause is fixed.
    #[command(long_about = unblock::LONG_ABOUT)]
    Unblock(unblock::Args),
    /// Turn rejected (and, asked, quarantined-but-valid) packs back into
    /// ready packs once their cause is fixed.
    #[command(long_about = requeue::LONG_ABOUT)]
    Requeue(requeue::Args),
}

/// Runs one subcommand.
pub fn run(command: Command, config_file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    match command {
        Command::Lock(args) => lock::run(args),
        Command::Status(a) => status::run(a, config_file),
        Command::Verify(a) => verify::run(a),
        Command::Recover(a) => recover::run(a),
        Command::Produce(args) => produce::run(*args, config_file),
        Command::Demo(args) => demo::run(args),
        Command::Run(args) => run::run(args, config_file),
        Command::Config(args) => config::run(args, config_file),
        Command::Ls(a) => ls::run(a, config_file),
        Command::Cat(a) => cat::run(a, config_file),
        Command::Reindex(a) => reindex::run(a, config_file),
        Command::Sweep(a) => sweep::run(a, config_file),
        Command::Unblock(a) => unblock::run(a),
        Command::Requeue(a) => requeue::run(a),
    }
}

/// The long help of `spool run` (with examples).
const RUN_LONG_ABOUT: &str = "\
Run the storage service daemon: an engine with no sink. It claims
its own (empty) rank directory under the destination's catalog key,
competes for the node lease, and uploads and indexes the packs
of dead siblings (producers that crashed or finished without a service of
their own). It never touches a directory someone holds.

Without --once it runs until SIGTERM/SIGINT/SIGHUP, then flushes for at most
service.stop_flush_timeout and stops (exit 0); what it did not drain stays
for the next service. With --once it runs until everything adoptable is
drained (exit 0), --timeout passes (exit 6, saying what is owed), or
blocked siblings remain (exit 1, naming them and why). A lease lost to
another writer latches it: exit 7. Configuration: --config FILE,
SPOOL_* variables and the flags below (`spool config show` prints the
result). --metrics-addr serves Prometheus /metrics and /healthz.

Examples:
  spool run --spool-root /var/lib/spool
  spool run --config /etc/spool/spool.toml --metrics-addr 127.0.0.1:9464
  spool run --once --timeout 300 --spool-root /var/lib/spool
  SPOOL_CATALOG='clickhouse://ch1:8123/spool' SPOOL_STORE=s3://bucket/packs spool run";

/// The long help of `spool demo` (with examples).
const DEMO_LONG_ABOUT: &str = "\
Run the whole product on embedded defaults (a local-directory store and a
SQLite catalog) in a scratch directory: several producer ranks as real
processes, one of them SIGKILLed mid-stream, then the daemon adopting its
directory. Ends with a table of packs produced / uploaded / indexed /
adopted / lost, bytes, time, and where the data is. Exit 0 only if nothing
was lost. --keep keeps the scratch directory to look at with `spool
status`, `spool ls` and `spool cat`.

Examples:
  spool demo
  spool demo --ranks 5 --packs 40 --keep
  spool demo --json";

/// The long help of `spool config` (with examples).
const CONFIG_LONG_ABOUT: &str = "\
Show the effective configuration: every key with its value and where it
came from (default, the config file, a SPOOL_* variable, or a flag),
secrets masked, plus what is derived from it (the catalog key and the
rank directories' parent). The file is --config FILE, else $SPOOL_CONFIG,
else ./spool.toml if present; examples/spool.toml lists every key. An
unknown key or a bad value is refused (exit 2), naming the key, the value
and what is allowed.

Examples:
  spool config show
  spool config show --config /etc/spool/spool.toml
  SPOOL_LEASE_TTL=60s spool config show --json | jq '.keys[] | select(.key == \"lease.ttl\")'";
