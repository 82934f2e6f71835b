//! How a spool is opened with respect to its owner lock, and the options
//! every lock operation takes.
//!
//! Every directory and file the spool creates (missing parents, staging
//! copies, rank and worker directories, lock files, temp files and so
//! packs) gets its mode and group from [`Access`] on its new descriptor,
//! never from the umask: private (0700 / 0600) unless `spool.mode` shares
//! it with the group ([`Sharing`]).

use std::str::FromStr;
use std::time::Duration;

use crate::Error;

/// How a spool (a sink, a service) treats its directory's owner lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockMode {
    /// Take the lock when the spool opens (the default).
    #[default]
    Take,
    /// Take none: the caller already holds the lock in THIS process
    /// (checked with [`crate::verify_held_by_caller`]).
    HeldByCaller,
}

impl LockMode {
    /// The mode's config/flag spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Take => "take",
            LockMode::HeldByCaller => "held_by_caller",
        }
    }
}

impl FromStr for LockMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "take" => Ok(LockMode::Take),
            "held_by_caller" => Ok(LockMode::HeldByCaller),
            other => Err(Error::UnknownMode {
                value: other.to_owned(),
            }),
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Options for every lock operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    /// Admit filesystems where flock does not exclude other nodes (NFS,
    /// Lustre, FUSE, ...). Only for a filesystem that one node uses.
    pub allow_shared_filesystem: bool,
    /// Unheld `.creating` staging copies older than this are stale: adoption
    /// removes them ([`crate::remove_stale_staging`]). Default 60 s.
    pub staging_max_age: Duration,
    /// Who besides the owner may read (or adopt) what a take creates: the
    /// modes of new directories and files, and their group. Default
    /// private (0700 / 0600).
    pub access: Access,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            allow_shared_filesystem: false,
            staging_max_age: Duration::from_secs(60),
            access: Access::default(),
        }
    }
}

/// How far a spool's directories and files are shared (`spool.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sharing {
    /// `0700` directories, `0600` files: only the owner's uid (the default).
    #[default]
    Private,
    /// `0750` / `0640`: the group reads packs and owner records (an
    /// inspecting or verifying user) but cannot adopt (no unlink, no
    /// record write).
    GroupRead,
    /// `0770` / `0660`: the group can also adopt (a daemon of another
    /// user in the same group drains producers' directories).
    GroupWrite,
}

impl Sharing {
    /// The mode of directories this crate and spool-core create.
    pub fn dir_mode(self) -> u32 {
        match self {
            Sharing::Private => 0o700,
            Sharing::GroupRead => 0o750,
            Sharing::GroupWrite => 0o770,
        }
    }

    /// The mode of files (packs, temp files, lock files).
    pub fn file_mode(self) -> u32 {
        self.dir_mode() & 0o666
    }
}

impl FromStr for Sharing {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim() {
            "0700" | "700" | "0o700" | "private" => Ok(Sharing::Private),
            "0750" | "750" | "0o750" => Ok(Sharing::GroupRead),
            "0770" | "770" | "0o770" => Ok(Sharing::GroupWrite),
            other => Err(Error::BadAccess {
                why: format!(
                    "spool.mode {other:?} is not one of \"0700\" (private, the default), \"0750\" \
                     (the group reads) or \"0770\" (the group also adopts); other users never get access"
                ),
            }),
        }
    }
}

impl std::fmt::Display for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04o}", self.dir_mode())
    }
}

/// The modes and group a take and a stage give what they create
///: set explicitly on the new descriptor (`fchmod`, `fchown`),
/// so no umask widens or narrows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    /// How far the group may go.
    pub sharing: Sharing,
    /// The group new directories and files are given (`spool.group`);
    /// `None`: the creating process's (or a setgid parent's) group.
    pub gid: Option<u32>,
}

impl Access {
    /// Private (0700 / 0600), no group change: the default.
    pub const PRIVATE: Access = Access {
        sharing: Sharing::Private,
        gid: None,
    };

    /// Parses `spool.mode` and `spool.group` (a group name, or a numeric
    /// gid). A group with private mode is refused: it would give nothing.
    pub fn parse(mode: Option<&str>, group: Option<&str>) -> Result<Access, Error> {
        let sharing = match mode {
            Some(m) => m.parse()?,
            None => Sharing::Private,
        };
        let gid = match group.map(str::trim).filter(|g| !g.is_empty()) {
            None => None,
            Some(g) => Some(resolve_group(g)?),
        };
        if gid.is_some() && sharing == Sharing::Private {
            return Err(Error::BadAccess {
                why: format!(
                    "spool.group {:?} is set but spool.mode is 0700 (private): set spool.mode \
                     to \"0750\" or \"0770\" as well, or unset spool.group",
                    group.unwrap_or_default()
                ),
            });
        }
        Ok(Access { sharing, gid })
    }

    /// The mode of new directories.
    pub fn dir_mode(&self) -> u32 {
        self.sharing.dir_mode()
    }

    /// The mode of new files.
    pub fn file_mode(&self) -> u32 {
        self.sharing.file_mode()
    }

    /// Gives a just-created file or directory (by its open descriptor) its
    /// group, then its mode (after the `fchown`, which may clear setgid
    /// bits). `dir` picks the directory mode.
    pub fn apply(&self, fd: std::os::fd::BorrowedFd<'_>, dir: bool) -> std::io::Result<()> {
        if let Some(gid) = self.gid {
            std::os::unix::fs::fchown(fd, None, Some(gid))?;
        }
        let mode = if dir {
            self.dir_mode()
        } else {
            self.file_mode()
        };
        nix::sys::stat::fchmod(fd, nix::sys::stat::Mode::from_bits_truncate(mode))
            .map_err(std::io::Error::from)
    }

    /// Creates one directory with this access (`mkdir` with the mode, then
    /// the group and mode set on its descriptor). `AlreadyExists` and the
    /// other errors of `mkdir` are returned as they are.
    pub fn create_dir(&self, path: &std::path::Path) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .mode(self.dir_mode())
            .create(path)?;
        crate::seams::run_hook(crate::seams::HookPoint::DirectoryMade, path);
        let applied = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .and_then(|d| {
                use std::os::fd::AsFd;
                self.apply(d.as_fd(), true)
            });
        if let Err(e) = applied {
            let _ = std::fs::remove_dir(path);
            return Err(e);
        }
        Ok(())
    }
}

impl Access {
    /// [`Access::create_dir`] relative to the directory `parent`: `mkdirat`
    /// of the one component `name`, then the group and mode set on its
    /// descriptor (opened `O_NOFOLLOW`); `path` names it for the seams.
    pub(crate) fn create_dir_at(
        &self,
        parent: std::os::fd::BorrowedFd<'_>,
        name: &std::ffi::OsStr,
        path: &std::path::Path,
    ) -> std::io::Result<()> {
        use nix::fcntl::{openat, OFlag};
        use nix::sys::stat::{mkdirat, Mode};
        use std::os::fd::AsFd;
        mkdirat(parent, name, Mode::from_bits_truncate(self.dir_mode()))?;
        crate::seams::run_hook(crate::seams::HookPoint::DirectoryMade, path);
        let applied = openat(
            parent,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(std::io::Error::from)
        .and_then(|d| self.apply(d.as_fd(), true));
        if let Err(e) = applied {
            let _ = nix::unistd::unlinkat(parent, name, nix::unistd::UnlinkatFlags::RemoveDir);
            return Err(e);
        }
        Ok(())
    }
}

/// A group name or number to a gid.
fn resolve_group(group: &str) -> Result<u32, Error> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(group) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(Error::BadAccess {
            why: format!(
                "spool.group {group:?} is not a group on this host (see /etc/group); \
                 create it, or give a numeric gid"
            ),
        }),
        Err(e) => Err(Error::BadAccess {
            why: format!("cannot look up spool.group {group:?}: {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_unknown_is_refused_by_name() {
        assert_eq!("take".parse::<LockMode>().unwrap(), LockMode::Take);
        assert_eq!(
            "held_by_caller".parse::<LockMode>().unwrap(),
            LockMode::HeldByCaller
        );
        assert_eq!(LockMode::default(), LockMode::Take);
        let err = "Take".parse::<LockMode>().unwrap_err().to_string();
        assert!(err.contains("\"Take\""), "{err}");
        assert!(
            err.contains("\"take\"") && err.contains("\"held_by_caller\""),
            "{err}"
        );
        assert_eq!(
            LockOptions::default().staging_max_age,
            Duration::from_secs(60)
        );
    }

    #[test]
    fn modes_and_sharings_display_as_a_config_spells_them() {
        assert_eq!(LockMode::Take.to_string(), "take");
        assert_eq!(LockMode::HeldByCaller.to_string(), "held_by_caller");
        assert_eq!(Sharing::Private.to_string(), "0700");
        assert_eq!(Sharing::GroupRead.to_string(), "0750");
        assert_eq!(Sharing::GroupWrite.to_string(), "0770");
        for s in [Sharing::Private, Sharing::GroupRead, Sharing::GroupWrite] {
            assert_eq!(s.to_string().parse::<Sharing>().unwrap(), s);
        }
    }

    #[test]
    fn create_dir_makes_a_directory_of_the_access_mode_and_refuses_an_existing_one() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        for (a, mode) in [
            (Access::PRIVATE, 0o700),
            (Access::parse(Some("0750"), None).unwrap(), 0o750),
        ] {
            let d = t.path().join(format!("d{mode:o}"));
            a.create_dir(&d).unwrap();
            let m = std::fs::metadata(&d).unwrap();
            assert!(m.is_dir());
            assert_eq!(m.permissions().mode() & 0o7777, mode);
            let again = a.create_dir(&d).unwrap_err();
            assert_eq!(again.kind(), std::io::ErrorKind::AlreadyExists);
            assert!(d.is_dir(), "a refused create_dir removed what was there");
        }
    }

    #[test]
    fn a_new_directory_swapped_for_a_link_before_its_mode_is_set_leaves_the_victim_as_it_was() {
        // Between the mkdirat and the open that sets its mode and group,
        // the new directory is replaced by a link to a victim: the open
        // never follows it, so the victim keeps its mode.
        use std::os::fd::AsFd;
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o755)).unwrap();
        let new = t.path().join("new");
        let v = victim.clone();
        crate::testing::set_lock_hook(
            t.path(),
            std::sync::Arc::new(move |point, path: &std::path::Path| {
                if point == crate::HookPoint::DirectoryMade {
                    std::fs::remove_dir(path).unwrap();
                    std::os::unix::fs::symlink(&v, path).unwrap();
                }
            }),
        );
        let parent = std::fs::File::open(t.path()).unwrap();
        let made = Access::PRIVATE.create_dir_at(parent.as_fd(), std::ffi::OsStr::new("new"), &new);
        crate::testing::clear_lock_hook(t.path());
        assert!(made.is_err(), "set the mode through a link");
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755, "the victim's mode was changed");
    }

    #[test]
    fn access_modes_parse_and_refuse_what_gives_others_access() {
        assert_eq!(Access::default(), Access::PRIVATE);
        assert_eq!(Access::default().dir_mode(), 0o700);
        assert_eq!(Access::default().file_mode(), 0o600);
        let a = Access::parse(Some("0750"), Some("0")).unwrap();
        assert_eq!(
            (a.dir_mode(), a.file_mode(), a.gid),
            (0o750, 0o640, Some(0))
        );
        let a = Access::parse(Some("770"), Some("root")).unwrap();
        assert_eq!(
            (a.dir_mode(), a.file_mode(), a.gid),
            (0o770, 0o660, Some(0))
        );
        for bad in ["0755", "0777", "0644", "group"] {
            let err = Access::parse(Some(bad), None).unwrap_err().to_string();
            assert!(err.contains(bad) && err.contains("0750"), "{err}");
        }
        let err = Access::parse(None, Some("root")).unwrap_err().to_string();
        assert!(err.contains("spool.mode"), "{err}");
        let err = Access::parse(Some("0750"), Some("no-such-group-xyz"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no-such-group-xyz"), "{err}");
    }
}
