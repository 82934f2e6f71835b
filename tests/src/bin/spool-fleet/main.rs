//! `spool-fleet`: the fleet simulator behind `cargo xtask fleet` and the
//! "Fleet" section of BENCHMARKS.md. N simulated nodes (each its own spool
//! root and node name, its daemon and R ranks producing packs at P per
//! second) run in a few host processes against one ClickHouse and a local
//! `file://` store; some nodes are SIGKILLed and restarted mid-run (and,
//! on a replicated catalog, one replica); the report says what the server saw and whether every sealed pack reached
//! the store and the catalog exactly once.
//!
//! ```text
//! spool-fleet run --nodes N --ranks R --rate P --minutes M [--kill K]
//!     [--kill-replica I] [--processes W] [--seed S] [--scratch DIR] [--clickhouse URL]
//!     [--set KEY=VALUE]... [--ship self|daemon] [--drain-timeout SECS]
//!     [--json FILE] [--keep] [--server-pid PID] [--store URL --store-dir DIR]
//! spool-fleet host ...      (internal: one host process)
//! ```
//!
//! Exit 0 when the oracle passes, 1 when it does not, 2 on bad usage.
#![forbid(unsafe_code)]

mod catalog;
mod host;
mod node;
mod options;
mod oracle;
mod report;
mod run;
mod server;

use anyhow::Result;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => {
            let o = match options::Options::parse(&args[1..]) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("spool-fleet: {e:#}");
                    std::process::exit(2);
                }
            };
            let (report, leftovers) = run::run(&o)?;
            print!("{report}");
            if let Some(path) = &o.json {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?;
                writeln!(f, "{}", serde_json::to_string(&report)?)?;
            }
            leftovers.remove();
            if !report.passed() {
                std::process::exit(1);
            }
            Ok(())
        }
        Some("host") => host::main(&args[1..]),
        _ => {
            eprintln!("usage: spool-fleet run --nodes N --ranks R --rate P --minutes M [--kill K] [--kill-replica I] [--processes W] [--seed S] [--scratch DIR] [--clickhouse URL] [--set KEY=VALUE]... [--ship self|daemon] [--drain-timeout SECS] [--json FILE] [--keep] [--server-pid PID] [--store URL --store-dir DIR]");
            std::process::exit(2);
        }
    }
}
