//! `reindex-100k`: `spool reindex` of a store of 100 000 packs of 2 KiB in
//! bundles of about 8 MiB (4 096 packs each, the uploader's default bundle
//! size) into a lost embedded catalog: the store is `file://ROOT/.store`
//! (written here as spool-upload lays bundles out: packs back to back at
//! `v2/<spread>/date=<day>/<bundle id>.bundle`), the SQLite catalog
//! `ROOT/.catalog.db` is missing, so the release `spool reindex` creates
//! it and indexes every pack. Measured: rows per second (wall time of the
//! command from spawn to exit) and the command's peak RSS (`getrusage` of
//! the waited child) against 64 MiB, which bounds a walk's one window
//! (8 MiB) and a batch of rows.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::core::make_pack;
use crate::{env, Ctx, Figure};

/// Packs per bundle: 4 096 × 2 KiB = 8 MiB, the default bundle size.
const PACKS_PER_BUNDLE: usize = 4096;

pub fn run(ctx: &Ctx) -> Result<()> {
    let n = ctx.size.pick(100_000, 10_000, 300);
    let bin = PathBuf::from(env("SPOOL_BENCH_SPOOL")?);
    let root = ctx.dir("reindex-root")?;
    let store = root.join(".store");
    let t = Instant::now();
    let mut written = 0usize;
    let mut bundles = 0usize;
    while written < n {
        let count = PACKS_PER_BUNDLE.min(n - written);
        let mut body = Vec::with_capacity(count * 2048);
        for i in 0..count {
            let (_, pack) = make_pack(2048, (written + i) as u64);
            body.extend_from_slice(&pack);
        }
        let bundle = spool_core::pack::PackId::generate();
        let key = spool_upload::object_key(&object_store::path::Path::from(""), &bundle);
        let key = key.as_ref().replace(".pack", spool_upload::BUNDLE_SUFFIX);
        let path = store.join(&key);
        std::fs::create_dir_all(path.parent().context("a bundle key has a directory")?)?;
        std::fs::write(&path, &body)?;
        written += count;
        bundles += 1;
    }
    nix::unistd::sync();
    let staged = t.elapsed().as_secs_f64();
    let log = root.join("reindex.log");
    let out = root.join("reindex.json");
    let started = Instant::now();
    let status = Command::new(&bin)
        .args(["reindex", "--json", "--spool-root"])
        .arg(&root)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out)?)
        .stderr(std::fs::File::create(&log)?)
        .status()
        .context("starting spool reindex")?;
    let wall = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("spool reindex exited {status} (its log: {})", log.display());
    }
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&out)?)?;
    if report["inserted"].as_u64() != Some(n as u64) {
        bail!(
            "spool reindex indexed {} of {n} packs: {report}",
            report["inserted"]
        );
    }
    let peak_mib = {
        use nix::sys::resource::{getrusage, UsageWho};
        getrusage(UsageWho::RUSAGE_CHILDREN)?.max_rss() as f64 / 1024.0
    };
    let what = format!("{n} × 2 KiB in {bundles} bundles");
    ctx.record(
        Figure::new(
            ctx,
            "reindex",
            format!("spool reindex of {what} into a lost SQLite catalog"),
            "rows/s",
            format!(
                "the release `spool reindex --json --spool-root ROOT` from spawn to exit \
                 ({wall:.1} s), the store written and synced in {staged:.0} s; every pack \
                 validated from its bundle's 8 MiB windows and checked against the catalog"
            ),
        )
        .ours(n as f64 / wall)
        .vs("goal: 10 000 rows/s", 10_000.0)
        .goal(1.0),
    )?;
    ctx.record(
        Figure::new(
            ctx,
            "reindex",
            format!("peak RSS of spool reindex of {what}"),
            "MiB",
            "the `spool reindex` above (`getrusage` of the waited child)".to_string(),
        )
        .ours(peak_mib)
        .vs("goal: 64 MiB", 64.0)
        .lower_is_better()
        .goal(1.0),
    )?;
    std::fs::remove_dir_all(&root).ok();
    Ok(())
}
