//! `spool` with test seams: the very command users get
//! ([`spool_cli::main_with`]), after setting the seams its leading options
//! ask for. The shipped `spool` binary has none of these options.
//!
//! ```text
//! spool-with-seams [--pause-before-publish FILE] [--test-filesystem-type HEX] [--panic-on-index]
//!                  [--kill-at NAME[:N]] SPOOL-ARGS...
//! ```
//!
//! - `--pause-before-publish FILE`: every stage pauses before its publish
//!   until FILE exists (spool-core's seam);
//! - `--test-filesystem-type HEX`: every path is on the filesystem with this
//!   statfs magic, e.g. `0x6969` (NFS; spool-lock's seam);
//! - `--panic-on-index`: every catalog's `index()` panics (spool-catalog's
//!   seam): a bug in the service loop.
//! - `--kill-at NAME[:N]`: the process SIGKILLs itself the N-th time (1 if
//!   omitted) it passes the kill point NAME (spool-core's `seams`; the
//!   points inside spool-catalog and spool-lock are wired to it here).
//!   `cargo xtask torture` uses it.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    while args.get(1).and_then(|a| a.to_str()) == Some("--panic-on-index") {
        spool_catalog::testing::panic_on_index();
        args.remove(1);
    }
    while let (Some(opt), Some(value)) = (args.get(1), args.get(2)) {
        let value = value.clone();
        match opt.to_str() {
            Some("--pause-before-publish") => {
                spool_core::spool::set_pause_before_publish(Some(Path::new(&value)))
                    .expect("spool-core built with its `testing` feature");
            }
            Some("--kill-at") => arm_kill_point(&value.to_string_lossy()),
            Some("--test-filesystem-type") => {
                let hex = value.to_string_lossy();
                let digits = hex.trim_start_matches("0x").trim_start_matches("0X");
                let magic = u32::from_str_radix(digits, 16)
                    .unwrap_or_else(|e| panic!("--test-filesystem-type {hex}: not hex: {e}"));
                spool_lock::set_filesystem_type_for_testing(Path::new("/"), magic)
                    .expect("spool-lock built with its `testing` feature");
            }
            _ => break,
        }
        args.drain(1..3);
    }
    args[0] = "spool".into();
    spool_cli::main_with(args)
}

/// `--kill-at NAME[:N]`: arms spool-core's kill point and routes the
/// points of the crates below it (which cannot call spool-core) there.
fn arm_kill_point(spec: &str) {
    let (name, nth) = match spec.split_once(':') {
        Some((name, n)) => (
            name,
            n.parse::<u64>()
                .unwrap_or_else(|e| panic!("--kill-at {spec}: {n:?} is not a count: {e}")),
        ),
        None => (spec, 1),
    };
    spool_core::seams::set_kill_at(name, nth).unwrap_or_else(|e| panic!("--kill-at {spec}: {e}"));
    spool_catalog::testing::set_kill_hook(spool_core::seams::kill_point);
    spool_lock::testing::set_lock_hook(
        Path::new("/"),
        std::sync::Arc::new(|point, _dir| {
            if point == spool_lock::HookPoint::RemovingDirectory {
                spool_core::seams::kill_point("remove_dir");
            }
        }),
    );
}
