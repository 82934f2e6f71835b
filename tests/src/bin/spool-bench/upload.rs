//! spool-upload: the uploader against `rclone copy` to the same
//! moto server, and against `cp -r` + `sync` for `file://`.

use anyhow::{bail, Context, Result};
use spool_core::PackId;
use spool_upload::{CancellationToken, ClientConfig, Store, UploadConfig, UploadItem, Uploader};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::core::write_backlog;
use crate::{env, rclone, run_cmd, size_label, timed, Ctx, Figure};

const MIB: f64 = (1 << 20) as f64;

/// Which pack shape.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// 64 × 16 MiB in a full run.
    Large,
    /// 1,000 × 256 KiB in a full run.
    Small,
}

impl Shape {
    fn counts(self, ctx: &Ctx) -> (usize, usize) {
        match self {
            Shape::Large => ctx.size.pick((64, 16 << 20), (8, 4 << 20), (2, 1 << 20)),
            Shape::Small => ctx
                .size
                .pick((1000, 256 << 10), (100, 64 << 10), (4, 16 << 10)),
        }
    }
}

fn items(files: &[PathBuf]) -> Result<Vec<UploadItem>> {
    files
        .iter()
        .map(|p| {
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            Ok(UploadItem {
                path: p.clone(),
                pack_id: PackId::from_hex(stem)?,
                size: std::fs::metadata(p)?.len(),
            })
        })
        .collect()
}

/// A tokio runtime like the service's (two workers).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// Uploads every file with the default `UploadConfig` (4 workers, 256 MiB
/// in flight, multipart above 32 MiB).
fn upload_all(store: Store, files: &[PathBuf]) -> Result<f64> {
    upload_with(store, files, UploadConfig::default())
}

/// Uploads every file with `config`: one `Uploader::upload_one` per pack,
/// `max_workers` at once.
fn upload_with(store: Store, files: &[PathBuf], config: UploadConfig) -> Result<f64> {
    use futures::StreamExt;
    let workers = config.max_workers;
    let up = Uploader::new(store, config)?;
    let items = items(files)?;
    let rt = runtime()?;
    let cancel = CancellationToken::new();
    let (results, secs) = timed(|| {
        Ok(rt.block_on(
            futures::stream::iter(items.into_iter().map(|item| up.upload_one(item, &cancel)))
                .buffered(workers)
                .collect::<Vec<_>>(),
        ))
    })?;
    let failed: Vec<_> = results
        .iter()
        .filter_map(|r| r.outcome.failure().map(|f| f.error.to_string()))
        .collect();
    if !failed.is_empty() {
        bail!("{} uploads failed, first: {}", failed.len(), failed[0]);
    }
    Ok(secs)
}

fn total_mib(files: &[PathBuf]) -> f64 {
    files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum::<u64>() as f64
        / MIB
}

fn detail(n: usize, bytes: usize) -> String {
    format!(
        "{n} packs of {}; ours: `Uploader::upload_one`, 4 at once (default config)",
        size_label(bytes)
    )
}

/// Ours, then `rclone copy --transfers 4`, to the same (fresh) moto server.
pub fn s3(ctx: &Ctx, shape: Shape) -> Result<()> {
    let (n, bytes) = shape.counts(ctx);
    let bucket = env("SPOOL_TEST_S3_BUCKET")?;
    let src = ctx.dir(&format!("upload-src-{shape:?}"))?;
    let files = write_backlog(&src, n, bytes)?;
    let mib = total_mib(&files);
    let client = ClientConfig {
        allow_http: true,
        ..ClientConfig::default()
    };
    let store = Store::from_url(&format!("s3://{bucket}/ours"), &client)?;
    let ours = upload_all(store, &files)?;
    let mut rc = rclone(&ctx.scratch)?;
    rc.arg("copy")
        .arg(&src)
        .arg(format!("moto:{bucket}/rclone"));
    let (_, base) = timed(|| run_cmd(&mut rc))?;
    ctx.record(
        Figure::new(
            ctx,
            "upload",
            format!("upload {n} × {} to moto (S3)", size_label(bytes)),
            "MiB/s",
            format!("{}; fresh moto, ours first", detail(n, bytes)),
        )
        .ours(mib / ours)
        .vs("rclone copy --transfers 4", mib / base)
        .goal(1.0),
    )?;
    std::fs::remove_dir_all(&src).ok();
    Ok(())
}

/// Multipart with parallel parts: 64 × 16 MiB to moto, one
/// pack at a time (`max_workers` 1) so only the parts of one upload run in
/// parallel, multipart from 8 MiB in 5 MiB parts (4 parts a pack), with
/// `part_concurrency` 2 (the default) and 4 against 1, one moto for all.
pub fn s3_parts(ctx: &Ctx) -> Result<()> {
    let (n, bytes) = ctx.size.pick((64, 16 << 20), (8, 16 << 20), (2, 6 << 20));
    let bucket = env("SPOOL_TEST_S3_BUCKET")?;
    let src = ctx.dir("upload-parts-src")?;
    let files = write_backlog(&src, n, bytes)?;
    let mib = total_mib(&files);
    let client = ClientConfig {
        allow_http: true,
        ..ClientConfig::default()
    };
    let run = |parts: usize| -> Result<f64> {
        let store = Store::from_url(&format!("s3://{bucket}/parts-{parts}"), &client)?;
        let config = UploadConfig {
            max_workers: 1,
            multipart_threshold: 8 << 20,
            part_size: 5 << 20,
            part_concurrency: parts,
            ..UploadConfig::default()
        };
        upload_with(store, &files, config)
    };
    let one = run(1)?;
    for parts in [2, 4] {
        let ours = run(parts)?;
        ctx.record(
            Figure::new(
                ctx,
                "upload",
                format!(
                    "multipart {n} × {} to moto, {parts} parts in flight",
                    size_label(bytes)
                ),
                "MiB/s",
                format!(
                    "one pack at a time (max_workers 1), multipart from 8 MiB in 5 MiB parts; \
                     part_concurrency {parts} against 1 on the same moto, 1 first"
                ),
            )
            .ours(mib / ours)
            .vs("part_concurrency 1", mib / one),
        )?;
    }
    std::fs::remove_dir_all(&src).ok();
    Ok(())
}

/// Flushes every dirty page (untimed), so a timed run pays only for its own
/// writes.
fn sync_all() -> Result<()> {
    run_cmd(&mut Command::new("sync"))
}

/// How a `file://` store is written in [`file`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileWriter {
    /// spool-upload's own path: what `Store::from_url("file://…")` builds.
    Own,
    /// object_store's `LocalFileSystem` with fsync on, handed in.
    LocalFileSystem,
}

/// Drains the `.ready` packs of `dir` into a `file://` store at `dst` with
/// the service's own pipeline (what `spool run` and an engine run:
/// validation, upload, index into an in-memory catalog, removal), no
/// adoption; returns the seconds from start to every pack indexed and the
/// service stopped.
fn drain_to_file(dir: &Path, dst: &Path, writer: FileWriter, packs: usize) -> Result<f64> {
    use object_store::ObjectStore;
    use spool_service::{ServiceConfig, StorageService};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let url = format!("file://{}", dst.display());
    let store = match writer {
        FileWriter::Own => Store::from_url(&url, &ClientConfig::default())?,
        FileWriter::LocalFileSystem => {
            std::fs::create_dir_all(dst)?;
            let lfs = object_store::local::LocalFileSystem::new_with_prefix(dst)?.with_fsync(true);
            Store::new(Arc::new(lfs) as Arc<dyn ObjectStore>, "", &url, true)?
        }
    };
    let dest = spool_core::Destination {
        catalog_url: "memory://".into(),
        database: "bench".into(),
        table_prefix: "spool_".into(),
        store_url: url,
        store_id: "default".into(),
    };
    let mut c = ServiceConfig::new(dir, dest, store, spool_catalog::open("memory://")?);
    c.adopt = false;
    let t = Instant::now();
    let mut svc = StorageService::new(c)?;
    svc.start()?;
    let mut seen = 0;
    while svc.snapshot().indexed < packs as u64 {
        if t.elapsed() > Duration::from_secs(900) {
            bail!("not drained within 900 s: {:?}", svc.snapshot());
        }
        seen = svc.wait_published(seen, Duration::from_millis(20));
    }
    svc.stop()?;
    Ok(t.elapsed().as_secs_f64())
}

/// The median of `xs` (the upper one of an even count).
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The service's drain into `file://` through spool-upload's own path and
/// through object_store's `LocalFileSystem` with fsync, against `cp -r` of
/// the same files followed by `sync`, for 1000 × 1 MiB, 64 × 16 MiB and
/// 10 000 × 16 KiB. Each side starts from its own copy of the backlog with
/// dirty pages flushed; a full run repeats each shape three times, the two
/// writers in alternating order, and reports the medians of wall time and
/// of this process's CPU time (user + system) per side.
pub fn file(ctx: &Ctx) -> Result<()> {
    let shapes = [
        ctx.size
            .pick((1000, 1 << 20), (100, 1 << 20), (4, 16 << 10)),
        ctx.size.pick((64, 16 << 20), (8, 4 << 20), (2, 1 << 20)),
        ctx.size
            .pick((10_000, 16 << 10), (1000, 16 << 10), (8, 16 << 10)),
    ];
    let reps = ctx.size.pick(3, 1, 1);
    let writers = [FileWriter::Own, FileWriter::LocalFileSystem];
    for (i, (n, bytes)) in shapes.into_iter().enumerate() {
        let src = ctx.dir(&format!("file-src-{i}"))?;
        let files = write_backlog(&src, n, bytes)?;
        let mib = total_mib(&files);
        let (mut wall, mut cpu) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        let mut base = Vec::new();
        for rep in 0..reps {
            let dst = ctx.dir(&format!("file-dst-{i}"))?;
            let order: [usize; 2] = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
            for w in order {
                let writer = writers[w];
                let spool = dst.join(format!("spool-{writer:?}"));
                run_cmd(Command::new("cp").arg("-r").arg(&src).arg(&spool))?;
                sync_all()?;
                let (cpu0, _) = crate::service::cpu_seconds()?;
                let secs =
                    drain_to_file(&spool, &dst.join(format!("store-{writer:?}")), writer, n)?;
                let (cpu1, _) = crate::service::cpu_seconds()?;
                wall[w].push(secs);
                cpu[w].push(cpu1 - cpu0);
            }
            let cp_dst = dst.join("cp");
            sync_all()?;
            let (_, secs) = timed(|| {
                run_cmd(Command::new("cp").arg("-r").arg(&src).arg(&cp_dst))?;
                sync_all()
            })?;
            check_copied(&cp_dst, n)?;
            base.push(secs);
            std::fs::remove_dir_all(&dst).ok();
        }
        let base = median(base);
        let [own_wall, lfs_wall] = wall.map(median);
        let [own_cpu, lfs_cpu] = cpu.map(median);
        for (writer, secs) in writers.into_iter().zip([own_wall, lfs_wall]) {
            let how = match writer {
                FileWriter::Own => "spool-upload's own file:// path (copy_file_range, renameat2)",
                FileWriter::LocalFileSystem => "object_store's LocalFileSystem, fsync on",
            };
            ctx.record(
                Figure::new(
                    ctx,
                    "upload",
                    format!("drain {n} × {} to file://, {writer:?}", size_label(bytes)),
                    "MiB/s",
                    format!(
                        "the service's pipeline (validate, upload, index into memory://, remove) \
                         through {how}; both durable: each object and its directory fsynced \
                         before it counts, the baseline is `cp -r` then `sync`; same disk, dirty \
                         pages flushed before each; median of {reps}"
                    ),
                )
                .ours(mib / secs)
                .vs("cp -r + sync", mib / base)
                .goal(1.0),
            )?;
        }
        ctx.record(
            Figure::new(
                ctx,
                "upload",
                format!(
                    "drain {n} × {} to file://, own path vs LocalFileSystem",
                    size_label(bytes)
                ),
                "MiB/s",
                format!(
                    "the same drains, wall time: spool-upload's own path against object_store's \
                     LocalFileSystem with fsync; CPU (user + system, this process) {own_cpu:.2} s \
                     vs {lfs_cpu:.2} s; medians of {reps}, alternating which goes first"
                ),
            )
            .ours(mib / own_wall)
            .vs("LocalFileSystem", mib / lfs_wall),
        )?;
        std::fs::remove_dir_all(&src).ok();
    }
    Ok(())
}

fn check_copied(dir: &Path, n: usize) -> Result<()> {
    let got = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .count();
    if got != n {
        bail!("cp -r copied {got} of {n} files into {}", dir.display());
    }
    Ok(())
}
