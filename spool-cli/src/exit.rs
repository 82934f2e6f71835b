//! Exit codes of every `spool` command.

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

/// Maps an error to its exit code by walking its chain for the typed errors
/// of the library crates. Their wrapping variants keep the inner error as
/// their `source`, so each crate's error is matched on its own variants
/// only: the first link that has a code decides.
pub fn exit_code_of(err: &anyhow::Error) -> ExitCode {
    err.chain().find_map(code_of).unwrap_or(ExitCode::Other)
}

/// The exit code one link of a chain stands for, if any.
fn code_of(cause: &(dyn std::error::Error + 'static)) -> Option<ExitCode> {
    if let Some(code) = cause.downcast_ref::<ExitCode>() {
        return Some(*code);
    }
    if let Some(c) = cause.downcast_ref::<Coded>() {
        return Some(c.code);
    }
    if cause.is::<spool_service::config::ConfigError>() {
        return Some(ExitCode::Usage);
    }
    // a boxed one too (spool-service's `Sink` boxes it for size)
    let core = cause
        .downcast_ref::<spool_core::Error>()
        .or_else(|| cause.downcast_ref::<Box<spool_core::Error>>().map(|b| &**b));
    if let Some(e) = core {
        return match e {
            spool_core::Error::Full { .. } | spool_core::Error::SpoolFull { .. } => {
                Some(ExitCode::Full)
            }
            _ => None,
        };
    }
    if let Some(l) = cause.downcast_ref::<spool_lock::Error>() {
        return if l.is_owned_by_another() {
            Some(ExitCode::Owned)
        } else if l.is_shared_filesystem() {
            Some(ExitCode::SharedFilesystem)
        } else {
            None
        };
    }
    if let Some(s) = cause.downcast_ref::<spool_service::Error>() {
        return match s {
            spool_service::Error::FlushTimeout { .. } => Some(ExitCode::Deadline),
            spool_service::Error::LoopFailed { .. } => Some(ExitCode::LoopFailed),
            spool_service::Error::OpenStore { .. }
            | spool_service::Error::Catalog(spool_catalog::Error::InvalidUrl { .. }) => {
                Some(ExitCode::Usage)
            }
            _ => None,
        };
    }
    None
}

/// The message of an error and its causes, joined by `": "` as anyhow's
/// `{:#}` does, leaving out a cause whose message the text so far already
/// ends with: the library errors show their source's message in their own
/// (`"open /x: Permission denied"`, a wrapping variant's `"{0}"`), and a
/// person should read it once.
///
/// When a cause is a permission refusal (another user's spool directory or
/// lock file), what to do is added once at the end.
pub fn message_of(err: &anyhow::Error) -> String {
    let mut text = String::new();
    let mut denied = false;
    for cause in err.chain() {
        denied |= cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied);
        let line = cause.to_string();
        if text.is_empty() {
            text = line;
        } else if !text.ends_with(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
    }
    if denied {
        text.push_str(&format!(
            " (this process runs as uid {}: run spool as the user that owns the spool, \
             or give this user's group access with spool.mode and spool.group)",
            nix::unistd::geteuid()
        ));
    }
    text
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

/// The error of a failed write to stdout (closed, a reader that went
/// away, a full disk behind a redirect): exit 1 with one line.
pub fn stdout_error(err: std::io::Error) -> anyhow::Error {
    coded(
        ExitCode::Other,
        format!("cannot write to stdout: {err} (was the reading end closed?)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;
    use std::path::PathBuf;

    fn owned() -> spool_lock::Error {
        spool_lock::Error::OwnedByOther {
            dir: PathBuf::from("/spool/r0-aa"),
            holder: spool_lock::Holder {
                pid: Some(4242),
                host: "node7".into(),
            },
            lock_path: PathBuf::from("/spool/r0-aa/.owner.lock"),
        }
    }

    fn full() -> spool_core::Error {
        spool_core::Error::SpoolFull {
            dir: PathBuf::from("/spool/r0-aa"),
            used: 10,
            budget: 8,
            dead_sibling_bytes: 0,
            buffered: 1,
            buffer_bytes: 4,
        }
    }

    #[test]
    fn the_code_is_found_through_every_wrapping_layer() {
        let cases: Vec<(anyhow::Error, ExitCode)> = vec![
            (anyhow::Error::new(owned()), ExitCode::Owned),
            (
                anyhow::Error::new(spool_core::Error::Lock(owned())),
                ExitCode::Owned,
            ),
            (
                anyhow::Error::new(spool_service::Error::Core(spool_core::Error::Lock(owned())))
                    .context("cannot start"),
                ExitCode::Owned,
            ),
            (
                anyhow::Error::new(spool_service::Error::Lock(owned())),
                ExitCode::Owned,
            ),
            (
                anyhow::Error::new(spool_service::Error::Sink {
                    dir: PathBuf::from("/spool/r0-aa"),
                    index: 1,
                    source: Box::new(full()),
                }),
                ExitCode::Full,
            ),
            (
                anyhow::Error::new(spool_service::Error::Config(
                    spool_service::config::ConfigError("bad key".into()),
                )),
                ExitCode::Usage,
            ),
            (anyhow::anyhow!("something else"), ExitCode::Other),
        ];
        for (err, code) in cases {
            assert_eq!(exit_code_of(&err), code, "{err:#}");
        }
    }

    #[test]
    fn a_chain_is_printed_once_whatever_its_layers() {
        let inner = owned().to_string();
        let err = anyhow::Error::new(spool_service::Error::Core(spool_core::Error::Lock(owned())));
        assert_eq!(
            message_of(&err),
            inner,
            "each wrapper repeats it: said once"
        );
        let err = Err::<(), _>(spool_service::Error::Lock(owned()))
            .context("cannot claim")
            .unwrap_err();
        assert_eq!(message_of(&err), format!("cannot claim: {inner}"));
        let io = spool_lock::Error::Io {
            op: "open",
            path: PathBuf::from("/spool/x"),
            source: std::io::Error::from_raw_os_error(13),
        };
        let text = message_of(&anyhow::Error::new(io));
        assert_eq!(text.matches("denied").count(), 1, "{text}");
    }
}
