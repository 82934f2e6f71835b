//! The node-local check: flock on a network filesystem does not keep out a
//! process on another node, so a spool there is refused.

use std::path::Path;

use crate::{seams, Error};

/// statfs `f_type` magics of filesystems whose flock does not exclude
/// other nodes, with their names.
pub const SHARED_FILESYSTEMS: &[(u32, &str)] = &[
    (0x6969, "NFS"),
    (0x0BD0_0BD0, "Lustre"),
    (0x1983_0326, "BeeGFS"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x6573_5546, "FUSE"),
    (0x4750_4653, "GPFS"),
    (0x0102_1997, "9p"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "kAFS"),
    (0x2003_0528, "OrangeFS"),
];

/// FUSE's magic: its refusal says the override exists for local FUSE
/// filesystems.
const FUSE_MAGIC: u32 = 0x6573_5546;

/// The name of a refused filesystem, or `None` when `magic` is node-local
/// as far as spool-lock knows (ext4, xfs, btrfs, zfs, tmpfs, overlayfs,
/// CephFS, ...).
pub fn shared_filesystem_name(magic: u32) -> Option<&'static str> {
    SHARED_FILESYSTEMS
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

fn statfs_type(path: &Path) -> Result<u32, Error> {
    if let Some(magic) = seams::filesystem_type(path) {
        return Ok(magic);
    }
    let st = nix::sys::statfs::statfs(path)
        .map_err(|e| Error::io("statfs", path, std::io::Error::from(e)))?;
    // f_type is a signed word; the magics are 32-bit patterns.
    Ok(st.filesystem_type().0 as u64 as u32)
}

/// Refuses `path` (which must exist) when it is on a filesystem where flock
/// does not exclude other nodes, unless `allow_shared_filesystem`; with the
/// override it logs a warning naming the path and the filesystem.
pub fn check_node_local(path: &Path, allow_shared_filesystem: bool) -> Result<(), Error> {
    let magic = statfs_type(path)?;
    let Some(fs_name) = shared_filesystem_name(magic) else {
        return Ok(());
    };
    if allow_shared_filesystem {
        tracing::warn!(
            path = %path.display(),
            filesystem = fs_name,
            "spool directory {} is on {fs_name}, where flock does not exclude other nodes; \
             admitted because allow_shared_filesystem is set",
            path.display()
        );
        return Ok(());
    }
    let hint = if magic == FUSE_MAGIC {
        " (for a FUSE filesystem that is local to this node, the override below exists)"
    } else {
        ""
    };
    Err(Error::SharedFilesystem {
        path: path.to_path_buf(),
        fs_name,
        magic,
        hint,
    })
}
