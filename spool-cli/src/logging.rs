//! Logs: `tracing-subscriber` on stderr, filtered like `RUST_LOG`
//! (EnvFilter; default `info` for `spool run`, `warn` for the rest), as text
//! or JSON lines (`--log-format`, `SPOOL_LOG_FORMAT`).

use tracing_subscriber::EnvFilter;

/// The log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber.
pub fn init(format: LogFormat, default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    // Colours only on a terminal: a log file or a journal gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
