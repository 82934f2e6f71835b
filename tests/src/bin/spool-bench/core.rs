//! spool-core: staging against a plain durable write loop,
//! validation against `openssl dgst -sha256` and `sha256sum`, and the peak
//! RSS of validating a large sparse backlog (measured in child processes).

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use spool_core::pack::{PackId, PackWriter, HEADER_LEN, TRAILER_LEN};
use spool_core::spool::SpoolConfig;
use spool_core::Spool;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::{median, run_cmd, size_label, timed, Ctx, Figure};

const MIB: f64 = (1 << 20) as f64;

fn fig(ctx: &Ctx, name: &str, unit: &str, detail: String) -> Figure {
    Figure::new(ctx, "core", name, unit, detail)
}

/// A valid pack of about `bytes` bytes (records of up to 64 KiB).
pub fn make_pack(bytes: usize, seed: u64) -> (PackId, Vec<u8>) {
    let id = PackId::generate();
    let mut w = PackWriter::new(id, id.timestamp_ms());
    let record: Vec<u8> = (0..64 << 10)
        .map(|i: u64| (i.wrapping_mul(31).wrapping_add(seed) >> 3) as u8)
        .collect();
    while w.finished_len() + 4 < bytes {
        let room = bytes - w.finished_len() - 4;
        w.push_record(&record[..room.min(record.len())]);
    }
    if w.record_count() == 0 {
        w.push_record(b"x");
    }
    (id, w.finish())
}

/// Writes `count` packs of about `bytes` into `dir` as `<id>.ready` (no
/// fsync: a backlog to read, not a stage to measure).
pub fn write_backlog(dir: &Path, count: usize, bytes: usize) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for i in 0..count {
        let (id, body) = make_pack(bytes, i as u64);
        let p = dir.join(format!("{id}.ready"));
        std::fs::write(&p, &body).with_context(|| format!("writing {}", p.display()))?;
        out.push(p);
    }
    Ok(out)
}

/// The baseline of a stage: create a temp file, write, fsync, rename into
/// place, and (with `dir_fsync`) fsync the directory.
fn plain_write(dir: &Path, name: &str, bytes: &[u8], dir_fsync: bool) -> Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = File::create_new(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    if dir_fsync {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Runs the whole group.
pub fn run(ctx: &Ctx) -> Result<()> {
    let large = ctx.size.pick(64 << 20, 8 << 20, 1 << 20);
    stage(
        ctx,
        "stage 64 MiB packs",
        ctx.size.pick(16, 4, 2),
        large,
        0.9,
    )?;
    stage(
        ctx,
        "stage 4 KiB packs",
        ctx.size.pick(2000, 300, 20),
        4 << 10,
        0.8,
    )?;
    validate(ctx)?;
    rss(ctx)
}

/// `Spool::stage` (temp with O_EXCL|O_NOFOLLOW, write, fsync, link, unlink,
/// directory fsync) against the plain loop, alternating which goes first.
fn stage(ctx: &Ctx, name: &str, n: usize, bytes: usize, goal: f64) -> Result<()> {
    let ours_dir = ctx.dir("stage-ours")?;
    let base_dir = ctx.dir("stage-base")?;
    let plain_dir = ctx.dir("stage-plain")?;
    let spool = Spool::open(&ours_dir.join("spool"), &SpoolConfig::default())?;
    let small = bytes < (1 << 20);
    // Small packs are built up front; large ones one at a time (memory).
    let prebuilt: Vec<(PackId, Vec<u8>)> = if small {
        (0..n).map(|i| make_pack(bytes, i as u64)).collect()
    } else {
        Vec::new()
    };
    let mut prebuilt = prebuilt.into_iter();
    let (mut t_ours, mut t_base, mut t_plain) = (0.0, 0.0, 0.0);
    let mut total = 0u64;
    for i in 0..n {
        let (id, body) = if small {
            prebuilt.next().expect("built above")
        } else {
            make_pack(bytes, i as u64)
        };
        total += body.len() as u64;
        let name = format!("{id}.pack");
        let mut ours = || -> Result<()> {
            t_ours += timed(|| Ok(spool.stage(None, id, &body)?))?.1;
            Ok(())
        };
        let mut base = || -> Result<()> {
            t_base += timed(|| plain_write(&base_dir, &name, &body, true))?.1;
            Ok(())
        };
        if i % 2 == 0 {
            ours()?;
            base()?;
        } else {
            base()?;
            ours()?;
        }
        if small {
            t_plain += timed(|| plain_write(&plain_dir, &name, &body, false))?.1;
        }
    }
    let mib = total as f64 / MIB;
    let detail = format!(
        "{n} packs of {} on the scratch disk; ours: `Spool::stage`; baseline: create temp, write, fsync, rename, fsync dir",
        size_label(bytes)
    );
    let (unit, ours, base, plain) = if small {
        (
            "packs/s",
            n as f64 / t_ours,
            n as f64 / t_base,
            n as f64 / t_plain,
        )
    } else {
        ("MiB/s", mib / t_ours, mib / t_base, 0.0)
    };
    ctx.record(Figure {
        ours,
        baseline: Some(base),
        baseline_name: "write+fsync+rename+fsync(dir) loop".into(),
        goal: Some(goal),
        ..fig(ctx, name, unit, detail)
    })?;
    if small {
        ctx.record(Figure {
            ours,
            baseline: Some(plain),
            baseline_name: "write+fsync+rename loop (no dir fsync)".into(),
            ..fig(
                ctx,
                "stage 4 KiB packs vs a loop without the directory fsync",
                unit,
                format!("{n} packs of 4 KiB; the baseline's renames are not durable until a later fsync"),
            )
        })?;
    }
    drop(spool);
    for d in [ours_dir, base_dir, plain_dir] {
        std::fs::remove_dir_all(d).ok();
    }
    Ok(())
}

/// `spool_core::spool::verify_dir` (what `spool verify` runs) against
/// `openssl dgst -sha256` and `sha256sum` over the same files, warm cache.
fn validate(ctx: &Ctx) -> Result<()> {
    let (n, bytes) = ctx.size.pick((64, 16 << 20), (8, 16 << 20), (2, 1 << 20));
    let dir = ctx.dir("validate")?;
    let files = write_backlog(&dir, n, bytes)?;
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let mib = total as f64 / MIB;
    let reps = ctx.size.pick(3, 1, 1);
    let (mut ours, mut ossl, mut sum) = (Vec::new(), Vec::new(), Vec::new());
    let tool = |prog: &str, args: &[&str]| -> Result<f64> {
        let mut c = Command::new(prog);
        c.args(args)
            .args(&files)
            .stdout(std::process::Stdio::null());
        Ok(timed(|| run_cmd(&mut c))?.1)
    };
    tool("cat", &[])?; // warm the page cache
    for _ in 0..reps {
        let never = AtomicBool::new(false);
        let (rep, t) = timed(|| Ok(spool_core::spool::verify_dir(&dir, &never)?))?;
        if rep.valid.len() != n || !rep.corrupt.is_empty() {
            bail!(
                "verify_dir found {} valid, {:?} corrupt of {n}",
                rep.valid.len(),
                rep.corrupt
            );
        }
        ours.push(mib / t);
        ossl.push(mib / tool("openssl", &["dgst", "-sha256"])?);
        sum.push(mib / tool("sha256sum", &[])?);
    }
    let detail = format!(
        "{n} packs of {} MiB, page cache warm, median of {reps}; ours: `verify_dir` (`spool verify`), one thread",
        bytes >> 20
    );
    ctx.record(Figure {
        ours: median(&ours),
        baseline: Some(median(&ossl)),
        baseline_name: "openssl dgst -sha256".into(),
        goal: Some(1.0),
        ..fig(ctx, "validate a backlog", "MiB/s", detail.clone())
    })?;
    ctx.record(Figure {
        ours: median(&ours),
        baseline: Some(median(&sum)),
        baseline_name: "sha256sum".into(),
        ..fig(ctx, "validate a backlog (vs sha256sum)", "MiB/s", detail)
    })?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// Writes a valid pack of `records` records of `record_len` zero bytes as a
/// sparse file: only the header, the length prefixes, the footer and the
/// trailer are written; the SHA-256 is computed over the zeros.
pub(crate) fn write_sparse_pack(
    path: &Path,
    id: PackId,
    records: u64,
    record_len: u32,
) -> Result<u64> {
    let mut w = PackWriter::new(id, id.timestamp_ms());
    w.push_record(b"");
    let header = w.finish()[..HEADER_LEN].to_vec();
    let f = File::create_new(path).with_context(|| format!("creating {}", path.display()))?;
    let mut h = Sha256::new();
    let zeros = vec![0u8; 1 << 20];
    f.write_all_at(&header, 0)?;
    h.update(&header);
    let mut at = HEADER_LEN as u64;
    for _ in 0..records {
        let len = record_len.to_le_bytes();
        f.write_all_at(&len, at)?;
        h.update(len);
        let mut left = record_len as usize;
        while left > 0 {
            let k = left.min(zeros.len());
            h.update(&zeros[..k]);
            left -= k;
        }
        at += 4 + record_len as u64;
    }
    let footer_at = at;
    let mut tail = Vec::new();
    tail.extend_from_slice(&u32::MAX.to_le_bytes());
    tail.extend_from_slice(&records.to_le_bytes());
    tail.extend_from_slice(&(records * record_len as u64).to_le_bytes());
    let total = footer_at + tail.len() as u64 + TRAILER_LEN as u64;
    tail.extend_from_slice(b"SPOOLEND");
    tail.extend_from_slice(&id.0);
    tail.extend_from_slice(&total.to_le_bytes());
    tail.extend_from_slice(&footer_at.to_le_bytes());
    h.update(&tail);
    tail.extend_from_slice(&h.finalize());
    f.write_all_at(&tail, footer_at)?;
    Ok(total)
}

#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct ChildReport {
    pub(crate) vm_hwm_kib: u64,
    pub(crate) secs: f64,
    pub(crate) valid: usize,
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `rss-child MODE DIR`: validates DIR in this (fresh) process and prints
/// its peak RSS. Modes: `idle` (nothing), `verify` (`verify_dir`, as
/// `spool verify`), `recover` (open with the lock, `begin_recovery`, every
/// `continue_recovery` step, as `spool recover` does), `drain DIR DB` (a
/// storage service drains DIR into a store that keeps nothing), `exec CMD...` (runs a
/// command and reports its peak RSS from `getrusage(RUSAGE_CHILDREN)`).
pub fn rss_child(args: &[String]) -> Result<()> {
    let never = AtomicBool::new(false);
    let t = Instant::now();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let dir = args.get(1).map(PathBuf::from).unwrap_or_default();
    let (valid, hwm) = match mode {
        "idle" => (0, vm_hwm_kib()),
        "verify" => {
            let r = spool_core::spool::verify_dir(&dir, &never)?;
            if !r.corrupt.is_empty() {
                bail!("corrupt packs in the sparse backlog: {:?}", r.corrupt);
            }
            (r.valid.len(), vm_hwm_kib())
        }
        "recover" => {
            let spool = Spool::open(&dir, &SpoolConfig::default())?;
            let mut rec = spool.begin_recovery()?;
            let mut valid = 0;
            while let Some(step) = spool.continue_recovery(&mut rec, &never)? {
                match step {
                    spool_core::spool::RecoveryStep::Valid(..) => valid += 1,
                    spool_core::spool::RecoveryStep::Quarantined(a) => {
                        bail!("quarantined {}: {}", a.path.display(), a.reason)
                    }
                }
            }
            (valid, vm_hwm_kib())
        }
        "drain" => {
            let db = args.get(2).map(PathBuf::from).unwrap_or_default();
            let indexed = crate::service::drain_child(&dir, &db)?;
            (indexed, vm_hwm_kib())
        }
        "exec" => {
            run_cmd(
                Command::new(&args[1])
                    .args(&args[2..])
                    .stdout(std::process::Stdio::null()),
            )?;
            let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?;
            (0, u.max_rss() as u64)
        }
        other => bail!("unknown rss-child mode {other:?}"),
    };
    let rep = ChildReport {
        vm_hwm_kib: hwm,
        secs: t.elapsed().as_secs_f64(),
        valid,
    };
    println!("{}", serde_json::to_string(&rep)?);
    Ok(())
}

pub(crate) fn child(args: &[&str]) -> Result<ChildReport> {
    let out = Command::new(std::env::current_exe()?)
        .arg("rss-child")
        .args(args)
        .output()?;
    if !out.status.success() {
        bail!(
            "rss-child {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Peak RSS of validating a sparse backlog (10 GiB in a full run), each way
/// in a fresh process, beside `openssl dgst -sha256` over the same files.
fn rss(ctx: &Ctx) -> Result<()> {
    let (packs, records, record_len): (usize, u64, u32) =
        ctx.size
            .pick((40, 4, 64 << 20), (4, 4, 64 << 20), (1, 1, 16 << 20));
    let dir = ctx.dir("rss")?;
    let spool_dir = dir.join("spool");
    std::fs::create_dir(&spool_dir)?;
    let mut total = 0;
    let mut files = Vec::new();
    for _ in 0..packs {
        let id = PackId::generate();
        let p = spool_dir.join(format!("{id}.ready"));
        total += write_sparse_pack(&p, id, records, record_len)?;
        files.push(p.display().to_string());
    }
    let gib = total as f64 / (1u64 << 30) as f64;
    let idle = child(&["idle"])?;
    let sd = spool_dir.display().to_string();
    let verify = child(&["verify", &sd])?;
    let recover = child(&["recover", &sd])?;
    for r in [&verify, &recover] {
        if r.valid != packs {
            bail!("the sparse backlog validated {} of {packs} packs", r.valid);
        }
    }
    let mut ossl_args = vec!["exec", "openssl", "dgst", "-sha256"];
    ossl_args.extend(files.iter().map(String::as_str));
    let ossl = child(&ossl_args)?;
    let kib = |k: u64| k as f64 / 1024.0;
    let detail = |how: &str, r: &ChildReport| {
        format!(
            "{packs} sparse packs, {gib:.1} GiB in all, {how}, in a fresh process ({:.1} s); an idle spool-bench process peaks at {:.1} MiB",
            r.secs,
            kib(idle.vm_hwm_kib)
        )
    };
    for (name, how, r) in [
        (
            "peak RSS validating a sparse backlog (verify)",
            "`verify_dir` as `spool verify`",
            &verify,
        ),
        (
            "peak RSS validating a sparse backlog (recovery)",
            "`begin_recovery` + every `continue_recovery` step, as `spool recover`",
            &recover,
        ),
    ] {
        ctx.record(Figure {
            ours: kib(r.vm_hwm_kib),
            baseline: Some(kib(ossl.vm_hwm_kib)),
            baseline_name: "openssl dgst -sha256".into(),
            higher_is_better: false,
            ..fig(ctx, name, "MiB", detail(how, r))
        })?;
    }
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
