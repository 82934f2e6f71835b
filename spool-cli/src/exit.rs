//! Exit codes of every `spool` command (SPEC §8).

/// The documented exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// 0: success.
    Ok = 0,
    /// 1: any other error.
    Other = 1,
    /// 2: bad usage (clap uses 2 for its own errors too).
    Usage = 2,
    /// 3: the spool directory is owned by another process.
    Owned = 3,
    /// 4: the spool is on a shared (network) filesystem and no override was given.
    SharedFilesystem = 4,
    /// 5: the spool is full.
    Full = 5,
    /// 6: a deadline passed without draining.
    Deadline = 6,
    /// 7: the lease was lost (latched).
    LeaseLost = 7,
    /// 8: corrupt packs were found (verify).
    Corrupt = 8,
    /// 9: a pack read back from the store does not match its checksum
    /// (cat); nothing was written.
    Checksum = 9,
    /// 10: the service loop failed (a panic); the supervisor should restart
    /// the daemon.
    LoopFailed = 10,
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        std::process::ExitCode::from(code as u8)
    }
}

/// The exit-code table printed at the end of `spool --help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  ok
  1  other error (also: spool run --once found blocked siblings)
  2  usage error (bad flag, bad or unreadable config file, bad value)
  3  spool directory owned by another process
  4  shared (network) filesystem refused (see --allow-shared-filesystem)
  5  spool full
  6  deadline passed without draining (spool run --once --timeout)
  7  lease lost (latched): another writer held the lease for 2 x TTL
  8  corrupt packs found (verify)
  9  pack read back does not match its checksum (cat); nothing written
 10  the service loop failed (a panic): spool run stopped, restart it";

/// Maps an error to its exit code by looking for the typed errors of the
/// library crates in its chain.
pub fn exit_code_of(err: &anyhow::Error) -> ExitCode {
    for cause in err.chain() {
        if let Some(code) = cause.downcast_ref::<ExitCode>() {
            return *code;
        }
        if cause.is::<spool_service::config::ConfigError>() {
            return ExitCode::Usage;
        }
        if let Some(c) = cause.downcast_ref::<Coded>() {
            return c.code;
        }
        let code = if let Some(e) = cause.downcast_ref::<spool_core::Error>() {
            core_code(e)
        } else if let Some(l) = cause.downcast_ref::<spool_lock::Error>() {
            lock_code(l)
        } else if let Some(s) = cause.downcast_ref::<spool_service::Error>() {
            // The service's wrapping variants are transparent: their inner
            // error is not in the chain, so look inside here.
            match s {
                spool_service::Error::Core(e) => core_code(e),
                spool_service::Error::Lock(l) => lock_code(l),
                spool_service::Error::Sink { source, .. } => core_code(source),
                spool_service::Error::FlushTimeout { .. } => Some(ExitCode::Deadline),
                spool_service::Error::LoopFailed { .. } => Some(ExitCode::LoopFailed),
                spool_service::Error::Config(_) => Some(ExitCode::Usage),
                _ => None,
            }
        } else {
            None
        };
        if let Some(code) = code {
            return code;
        }
    }
    ExitCode::Other
}

fn core_code(e: &spool_core::Error) -> Option<ExitCode> {
    match e {
        spool_core::Error::Full { .. } | spool_core::Error::SpoolFull { .. } => {
            Some(ExitCode::Full)
        }
        spool_core::Error::Lock(l) => lock_code(l),
        _ => None,
    }
}

fn lock_code(l: &spool_lock::Error) -> Option<ExitCode> {
    if l.is_owned_by_another() {
        Some(ExitCode::Owned)
    } else if l.is_shared_filesystem() {
        Some(ExitCode::SharedFilesystem)
    } else {
        None
    }
}

impl std::fmt::Display for ExitCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit code {}", *self as u8)
    }
}

impl std::error::Error for ExitCode {}

/// An error whose message is the whole story and which carries its own
/// exit code (a usage error found after parsing, a checksum mismatch).
#[derive(Debug)]
pub struct Coded {
    /// The exit code.
    pub code: ExitCode,
    /// What is wrong and what to do.
    pub message: String,
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// An `anyhow::Error` that exits with `code` (see [`exit_code_of`]).
pub fn coded(code: ExitCode, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Coded {
        code,
        message: message.into(),
    })
}
