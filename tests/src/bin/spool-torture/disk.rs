//! The disk torture (`cargo xtask torture --disk`; RELIABILITY.md "Full
//! disk and read-only spool"): each run's spool root is on a small tmpfs
//! (`--tmpfs-mib N`, 32 MiB by default) mounted in a private mount
//! namespace, so the mount vanishes with the process and nothing leaks on
//! the host. `spool-torture` re-execs itself under `unshare -m --propagation private`
//! for that (root only: anyone else is refused, saying so).
//!
//! On a seeded schedule the scheduler:
//! - fills the tmpfs (a ballast file beside the spool root, written until
//!   ENOSPC, then cut back by 0–256 KiB) for 0.5–4 s, then deletes it, so
//!   stages meet ENOSPC and space comes back as the window ends and as the
//!   daemons upload;
//! - turns the spool read-only for 0.5–3 s, then read-write again (unless
//!   `--no-ro`): `mount -o remount,ro` when the kernel allows it, which it
//!   refuses (EBUSY) while any file on the tmpfs is open for writing, as
//!   owner lock files always are; then a read-only bind mount of the tmpfs
//!   is stacked on its mount point (every path lookup, so every create,
//!   link, rename and unlink, meets EROFS; descriptors opened before keep
//!   writing), and the window ends with `umount -l` of that bind.
//!
//! Producers see ENOSPC and EROFS as their stages fail (the sink retries
//! them); one whose flush or open fails because of them exits 1
//! or 5 naming the error, which the torture accepts and counts. Daemons
//! must not exit, except one (re)started inside a window that cannot claim
//! its own rank directory: it exits 1 saying so, and is restarted. Once the
//! windows are over the daemons must drain every rank directory themselves
//! within 30 s. The oracle is the crash torture's.

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Rng;

/// Set in the environment of the re-exec'd `spool-torture`: it runs in its own
/// private mount namespace.
const IN_NAMESPACE: &str = "SPOOL_TORTURE_MOUNT_NS";

/// The tmpfs size when `--tmpfs-mib` is not given.
pub const DEFAULT_MIB: u64 = 32;

/// What `--disk` asked for.
#[derive(Debug, Clone, Copy)]
pub struct DiskOptions {
    /// The tmpfs size in MiB.
    pub mib: u64,
    /// Open read-only windows too (`--no-ro` turns them off).
    pub read_only: bool,
}

/// Whether the disk torture can run here: root (for `unshare -m` and
/// `mount`); else why not.
pub fn unavailable() -> Option<String> {
    let uid = nix::unistd::geteuid();
    (!uid.is_root()).then(|| {
        format!(
            "the disk torture mounts a tmpfs in a private mount namespace (unshare -m, mount -t tmpfs): \
             it needs root, and this process runs as uid {uid}; run it as root (CI does) or leave --disk out"
        )
    })
}

/// Whether this process is the re-exec'd one, in its own mount namespace.
pub fn in_namespace() -> bool {
    std::env::var_os(IN_NAMESPACE).is_some()
}

/// Runs this very binary again with `args` under `unshare -m --propagation
/// private` and returns its success; fails if not root.
pub fn reexec(args: &[String]) -> Result<()> {
    if let Some(why) = unavailable() {
        bail!("torture --disk: {why}");
    }
    let me = std::env::current_exe().context("finding the spool-torture binary to re-exec")?;
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "--propagation", "private"])
        .arg(&me)
        .args(args)
        .env(IN_NAMESPACE, "1");
    eprintln!("torture: re-exec in a private mount namespace: {cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?} (util-linux's unshare installed?)"))?;
    if !status.success() {
        bail!("torture --disk (in its mount namespace) failed: {status}");
    }
    Ok(())
}

/// How a read-only window was made, to undo it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadOnly {
    /// `mount -o remount,ro` of the tmpfs itself.
    Remount,
    /// A read-only bind mount stacked on the mount point.
    Bind,
}

/// Figures of the disk torture, summed over runs.
#[derive(Debug, Default, Clone)]
pub struct DiskFigures {
    /// Read-only windows opened.
    pub ro_windows: u64,
    /// Of them, made by `mount -o remount,ro` (the rest: a stacked
    /// read-only bind, the remount being refused as busy).
    pub ro_remounts: u64,
    /// Windows skipped: the read-only bind stayed busy for a second.
    pub ro_busy: u64,
    /// Full-disk windows (the ballast filled the tmpfs).
    pub full_windows: u64,
    /// Lines producers logged with ENOSPC (`os error 28`): stages refused.
    pub enospc: u64,
    /// Lines producers logged with EROFS (`os error 30`).
    pub erofs: u64,
    /// Lines daemons logged with ENOSPC or EROFS.
    pub daemon_errors: u64,
    /// Producers that exited 1 or 5 on such an error (accepted).
    pub refused_exits: u64,
    /// Daemons that could not start (claim their rank directory) inside a
    /// window and exited 1 saying so (accepted, restarted).
    pub refused_starts: u64,
}

impl DiskFigures {
    /// Adds another run's figures.
    pub fn add(&mut self, o: &DiskFigures) {
        self.ro_windows += o.ro_windows;
        self.ro_remounts += o.ro_remounts;
        self.ro_busy += o.ro_busy;
        self.full_windows += o.full_windows;
        self.enospc += o.enospc;
        self.erofs += o.erofs;
        self.daemon_errors += o.daemon_errors;
        self.refused_exits += o.refused_exits;
        self.refused_starts += o.refused_starts;
    }

    /// The summary's part.
    pub fn line(&self) -> String {
        format!(
            "enospc {} erofs {} (producer log lines; refused exits {}) ro_windows {} (remount {}, ro bind {}, skipped busy {}) full_windows {} daemon_disk_errors {} (daemons refused at start {})",
            self.enospc,
            self.erofs,
            self.refused_exits,
            self.ro_windows,
            self.ro_remounts,
            self.ro_windows - self.ro_remounts,
            self.ro_busy,
            self.full_windows,
            self.daemon_errors,
            self.refused_starts
        )
    }

    /// Counts the disk errors in a process's stderr.
    pub fn count(&mut self, stderr: &str, daemon: bool) {
        let lines = |a: &str, b: &str| {
            stderr
                .lines()
                .filter(|l| l.contains(a) || l.contains(b))
                .count() as u64
        };
        let nospc = lines("os error 28", "No space left on device");
        let rofs = lines("os error 30", "Read-only file system");
        if daemon {
            self.daemon_errors += nospc + rofs;
        } else {
            self.enospc += nospc;
            self.erofs += rofs;
        }
    }
}

/// Whether a producer's stderr says it stopped on a full or read-only
/// spool (ENOSPC, EROFS, or the budget's refusal).
pub fn refused(stderr: &str) -> bool {
    ["os error 28", "os error 30", "spool is full"]
        .iter()
        .any(|s| stderr.contains(s))
}

/// One run's tmpfs and its windows.
pub struct Disk {
    /// The mount point (`<run>/disk`); the spool root is `spool/` in it.
    pub mount: PathBuf,
    ballast: PathBuf,
    read_only_enabled: bool,
    read_only: Option<(ReadOnly, Instant)>,
    full_until: Option<Instant>,
    /// This run's figures.
    pub figures: DiskFigures,
}

fn sh(cmd: &mut Command) -> Result<bool> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start {cmd:?}"))?;
    Ok(out.status.success())
}

impl Disk {
    /// Mounts a tmpfs of `o.mib` MiB at `<dir>/disk` (only in the private
    /// namespace: never on the host's) and makes `spool/` in it.
    pub fn mount(dir: &Path, o: &DiskOptions) -> Result<Disk> {
        if !in_namespace() {
            bail!("the disk torture mounts only in its private mount namespace (re-exec under unshare -m)");
        }
        let mount = dir.join("disk");
        std::fs::create_dir_all(&mount).with_context(|| format!("creating {}", mount.display()))?;
        let size = format!("size={}m,mode=0755", o.mib);
        if !sh(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &size, "tmpfs"])
            .arg(&mount))?
        {
            bail!(
                "mount -t tmpfs -o {size} tmpfs {} failed (root, in a mount namespace?)",
                mount.display()
            );
        }
        std::fs::create_dir(mount.join("spool"))
            .with_context(|| format!("creating {}/spool", mount.display()))?;
        Ok(Disk {
            ballast: mount.join("ballast"),
            mount,
            read_only_enabled: o.read_only,
            read_only: None,
            full_until: None,
            figures: DiskFigures::default(),
        })
    }

    /// Ends the windows that are due (all of them with `end_all`) and, by
    /// chance, opens new ones.
    pub fn tick(&mut self, rng: &mut Rng, end_all: bool) -> Result<()> {
        let now = Instant::now();
        if let Some((how, until)) = self.read_only {
            if end_all || now >= until {
                self.writable(how)?;
                self.read_only = None;
            }
        }
        if let Some(until) = self.full_until {
            // the ballast goes by path: not inside a read-only window
            if (end_all || now >= until) && self.read_only.is_none() {
                std::fs::remove_file(&self.ballast)
                    .with_context(|| format!("removing {}", self.ballast.display()))?;
                self.full_until = None;
            }
        }
        if end_all {
            return Ok(());
        }
        if self.full_until.is_none() && self.read_only.is_none() && rng.chance(0.04) {
            self.fill(rng.below(256 * 1024))?;
            self.figures.full_windows += 1;
            self.full_until = Some(now + Duration::from_secs_f64(rng.between(0.5, 4.0)));
        }
        if self.read_only_enabled && self.read_only.is_none() && rng.chance(0.025) {
            match self.read_only_now()? {
                Some(how) => {
                    self.figures.ro_windows += 1;
                    if how == ReadOnly::Remount {
                        self.figures.ro_remounts += 1;
                    }
                    let until = now + Duration::from_secs_f64(rng.between(0.5, 3.0));
                    self.read_only = Some((how, until));
                }
                None => self.figures.ro_busy += 1,
            }
        }
        Ok(())
    }

    /// Writes the ballast until the tmpfs is full, then gives `slack`
    /// bytes back.
    fn fill(&self, slack: u64) -> Result<()> {
        let mut f = std::fs::File::create(&self.ballast)
            .with_context(|| format!("creating {}", self.ballast.display()))?;
        let chunk = vec![0x5a_u8; 64 * 1024];
        let mut len = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => len += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => {
                    return Err(e).with_context(|| format!("filling {}", self.ballast.display()))
                }
            }
        }
        f.set_len(len.saturating_sub(slack))
            .with_context(|| format!("cutting {} back", self.ballast.display()))
    }

    /// Makes the spool read-only: a remount if the kernel allows it, else
    /// a read-only bind stacked on the mount point. `None` when neither
    /// could be had (the window is skipped and counted).
    fn read_only_now(&self) -> Result<Option<ReadOnly>> {
        if sh(Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.mount))?
        {
            return Ok(Some(ReadOnly::Remount));
        }
        // The bind in two steps, so a refused second step leaves no
        // read-write bind behind: making a mount read-only is refused
        // (EBUSY) while a file is open for writing through it, which a
        // stage opening a file through the fresh bind in between does for
        // milliseconds; a few tries find a gap.
        if !sh(Command::new("mount")
            .arg("--bind")
            .arg(&self.mount)
            .arg(&self.mount))?
        {
            bail!("mount --bind {0} {0} failed", self.mount.display());
        }
        for _ in 0..20 {
            if sh(Command::new("mount")
                .args(["-o", "remount,bind,ro"])
                .arg(&self.mount))?
            {
                return Ok(Some(ReadOnly::Bind));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !sh(Command::new("umount").arg("-l").arg(&self.mount))? {
            bail!(
                "cannot make {} read-only and cannot undo its bind (umount -l failed)",
                self.mount.display()
            );
        }
        Ok(None)
    }

    /// Ends a read-only window made `how`.
    fn writable(&self, how: ReadOnly) -> Result<()> {
        let ok = match how {
            ReadOnly::Remount => sh(Command::new("mount")
                .args(["-o", "remount,rw"])
                .arg(&self.mount))?,
            ReadOnly::Bind => sh(Command::new("umount").arg("-l").arg(&self.mount))?,
        };
        if !ok {
            bail!(
                "cannot make {} writable again ({how:?})",
                self.mount.display()
            );
        }
        Ok(())
    }

    /// Copies what is left under the spool root to `to` (a failed run's
    /// evidence, before the tmpfs goes).
    pub fn keep(&self, to: &Path) {
        let _ = Command::new("cp")
            .arg("-a")
            .arg(self.mount.join("spool"))
            .arg(to)
            .status();
    }

    /// Ends the windows and unmounts the tmpfs.
    pub fn unmount(mut self, rng: &mut Rng) -> Result<()> {
        self.tick(rng, true)?;
        if !sh(Command::new("umount").arg("-l").arg(&self.mount))? {
            bail!("umount -l {} failed", self.mount.display());
        }
        Ok(())
    }
}
