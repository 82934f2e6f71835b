//! The command line's surface never panics: arbitrary argument vectors,
//! built from the real subcommands, flags and hostile values (control
//! characters, huge numbers, secrets in URLs, paths to devices), are parsed
//! and — for `config show`, which resolves every key and the destination
//! without touching a spool — run end to end. A parse error or a refusal
//! is fine; a panic is not. (The config file's own parser has a fuzz
//! target: `fuzz/fuzz_targets/config.rs`.)

use proptest::prelude::*;

use crate::{cmd, Cli};
use clap::Parser;

const WORDS: &[&str] = &[
    "run",
    "produce",
    "config",
    "show",
    "status",
    "verify",
    "recover",
    "lock",
    "owner",
    "hold",
    "ls",
    "cat",
    "unblock",
    "requeue",
    "demo",
    "--once",
    "--json",
    "--timeout",
    "--store",
    "--catalog",
    "--store-id",
    "--rank",
    "--lease-scope",
    "--lease-ttl",
    "--poll-interval",
    "--recheck-interval",
    "--max-backoff",
    "--metrics-addr",
    "--set",
    "--spool-root",
    "--packs",
    "--dir",
    "--out",
    "--records",
    "--hex",
    "--max-bytes",
    "--config",
    "--log-format",
    "--allow-shared-filesystem",
    "--serve",
    "--hold",
    "--ordinal",
];

const VALUES: &[&str] = &[
    "0",
    "-1",
    "5",
    "18446744073709551616",
    "1e309",
    "NaN",
    "inf",
    "0.000000001",
    "",
    " ",
    "\u{1b}[2J",
    "\u{0}",
    "lease.ttl=3",
    "upload.max_workers=0",
    "spool.mode=0777",
    "spool.group=\u{7}",
    "nokey",
    "a=b=c",
    "catalog.url=memory://",
    "s3://b/p?secret_access_key=x",
    "gs://b/p#token=x",
    "clickhouse://u:pw@h:1/db?password=x",
    "sqlite:///dev/null",
    "file:///",
    "memory://",
    "http://[::1",
    "/dev/zero",
    "/nonexistent",
    "127.0.0.1:0",
    "300:99999",
    "64MiB",
    "1GB",
    "9999999TiB",
    "node",
    "catalog",
    "text",
    "json",
];

fn arg() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(WORDS).prop_map(str::to_string),
        prop::sample::select(VALUES).prop_map(str::to_string),
        "\\PC{0,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_argument_vector_panics(args in prop::collection::vec(arg(), 0..8)) {
        let argv = std::iter::once("spool".to_string()).chain(args);
        if let Ok(cli) = Cli::try_parse_from(argv) {
            // only the commands that touch nothing on disk run end to end
            if let cmd::Command::Config(_) = cli.command {
                let _ = cmd::run(cli.command, cli.config.as_deref());
            }
        }
    }

    #[test]
    fn no_config_show_flag_value_panics(
        key in prop::sample::select(crate::config::keys::KEYS)
            .prop_map(|k| k.name),
        value in prop_oneof![prop::sample::select(VALUES).prop_map(str::to_string), "\\PC{0,16}"],
    ) {
        let argv = ["spool", "config", "show", "--json", "--set"]
            .map(str::to_string)
            .into_iter()
            .chain([format!("{key}={value}")]);
        let cli = Cli::try_parse_from(argv).expect("config show --set parses");
        let _ = cmd::run(cli.command, cli.config.as_deref());
    }
}
