//! The environment's part: every key's `SPOOL_*` variable (read through
//! [`Environment`], so tests and embedders can hand in their own), the
//! values derived from other variables (`RANK`, `AWS_ALLOW_HTTP`), and the
//! store variables `spool config show` reports.

/// Where variables are read from: the process environment, or a map
/// (tests, embedders).
pub trait Environment {
    /// The variable's value, if set.
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Environment for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl<F: Fn(&str) -> Option<String>> Environment for F {
    fn var(&self, name: &str) -> Option<String> {
        self(name)
    }
}

/// The variable naming the config file.
pub const CONFIG_ENV: &str = "SPOOL_CONFIG";

/// Environment variables the object store backends read that hold secrets:
/// `spool config show` says whether they are set, never what they are.
pub const SECRET_ENV: &[&str] = &[
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_CLIENT_SECRET",
];

/// Store environment shown as is.
pub const PLAIN_ENV: &[&str] = &[
    "AWS_ENDPOINT",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_ALLOW_HTTP",
    "GOOGLE_SERVICE_ACCOUNT",
    "AZURE_STORAGE_ACCOUNT_NAME",
];

/// `spool.rank` when no source sets it: `$RANK` (parsed as spool-core
/// parses it), else 0. Returns the rank and the variable it came from.
pub(crate) fn derived_rank(env: &dyn Environment) -> (u64, Option<&'static str>) {
    match env.var("RANK") {
        Some(r) => (spool_core::layout::parse_rank(Some(&r)), Some("RANK")),
        None => (0, None),
    }
}

/// `client.allow_http` when no source sets it: `$AWS_ALLOW_HTTP` is `true`
/// or `1`.
pub(crate) fn derived_allow_http(env: &dyn Environment) -> (bool, Option<&'static str>) {
    match env.var("AWS_ALLOW_HTTP") {
        Some(r) => (
            matches!(r.trim().to_ascii_lowercase().as_str(), "true" | "1"),
            Some("AWS_ALLOW_HTTP"),
        ),
        None => (false, None),
    }
}
