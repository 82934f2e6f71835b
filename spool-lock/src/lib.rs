//! spool-lock: one owner per spool directory.
//!
//! # What it guarantees
//!
//! * **At most one process owns a spool directory at a time**.
//!   Ownership is an `flock(LOCK_EX)` held by the owner for its whole life;
//!   the kernel drops it with the process, SIGKILL included, so a dead
//!   owner's directory is free at once.
//! * **A refusal names the holder** — `spool directory X is owned by pid N
//!   on host H (it holds X/.owner.lock)` — or says plainly that the holder is
//!   this very process ([`Error::HeldByThisProcess`]), and leaves nothing
//!   behind: a directory the take created is removed while still empty, a
//!   lock file it added is unlinked.
//! * **A new directory appears locked**: nobody listing the parent ever
//!   sees it unheld, so an adopter never takes a brand-new claim for dead.
//! * **Overlapping trees never have two live owners**: a take inside, or
//!   containing, a directory whose lock is held is refused, and two racing
//!   takes (outer and inner) cannot both win.
//! * **Network filesystems are refused** unless the operator overrides it
//!   (flock there does not exclude other nodes).
//! * **A fork child never keeps its parent's lock**, so a dead parent's
//!   directory never looks live because of a forked worker.
//! * **Probes never block and never make a legitimate take fail.**
//! * **A claim is never unlocked by a plain drop**: only
//!   [`Claim::release`] / [`Claim::release_and_remove_if_empty`] or the
//!   process's exit let go of it.
//!
//! # How
//!
//! ## Two locks per directory
//! A take flocks `<dir>/.owner.lock` (`LOCK_EX|LOCK_NB`, `O_CLOEXEC`), then
//! the directory itself (`O_RDONLY|O_DIRECTORY|O_CLOEXEC`), and holds both.
//! A lock file removed behind the owner's back (a tmp cleaner, a person)
//! then lets nobody in: the next take creates a new file, locks it, meets
//! the directory's lock and is refused with [`Error::LockFileReplaced`]
//! (and unlinks the file it added). [`read_owner`] reports such a directory
//! as held with `lock_file_replaced`; [`held_by_this_process`] accepts this
//! process's lock on either inode, so the owner keeps working.
//!
//! Locks are taken with `libc::flock` on descriptors this crate owns —
//! never `nix::fcntl::Flock`, whose drop unlocks: `LOCK_UN` on a description
//! a forked child shares would drop the parent's lock.
//!
//! ## Re-check after lock
//! After flocking the lock file a take checks that its descriptor is still
//! the file at the path (same dev/inode, link count > 0). A remover that
//! unlinked it between the open and the flock would otherwise leave the
//! take holding an invisible lock; the take opens and locks again (at most
//! 16 times, then [`Error::LockFileUnstable`]). A take of an existing
//! directory opens the directory first without following a link at its
//! own name (a rank directory swapped for one after a walk listed it is
//! refused, `ELOOP`), opens, creates and removes the lock file relative to
//! that descriptor, and flocks the directory only if its path still names
//! that very directory (device and inode).
//!
//! ## Create-locked
//! [`acquire`] of a missing directory builds a staging copy
//! `<parent>/.<name>.<8 hex>.creating`, takes both locks inside it, writes
//! the record, fsyncs it, renames it into place with
//! `renameat2(RENAME_NOREPLACE)` and fsyncs the parent. It never falls back
//! to a plain `rename` (which could replace an empty directory someone else
//! just created): a filesystem without `RENAME_NOREPLACE` gets
//! [`Error::NoReplaceUnsupported`]. If the name appeared meanwhile the copy
//! is removed and the take locks the existing directory in place.
//! The copy is made, locked, renamed and cleaned up relative to the
//! parent's descriptor and its own (`mkdirat`, `openat(O_NOFOLLOW)`,
//! `renameat2`, `unlinkat`); [`acquire_new_at`] takes that descriptor from
//! the caller (spool-core's claim opens the catalog key directory without
//! following a link), so a link planted at the parent's path never
//! redirects what is created, and a name already there is left to the
//! caller.
//! A claim killed between the staging mkdir and the rename leaves a copy
//! behind; [`remove_stale_staging`] (run by adoption) removes unheld copies
//! older than [`LockOptions::staging_max_age`] (60 s) and leaves younger or
//! held ones alone.
//!
//! ## The reserve, for a full filesystem
//! A new directory costs two inodes and a page (its lock file's record),
//! which a full filesystem does not have. [`make_reserve_at`] keeps one
//! made ahead in a parent: [`RESERVE_NAME`], a directory with its lock
//! file and a record in it, built under a staging name and renamed into
//! place (never replacing one), unlocked and hidden (no walk takes a
//! hidden name for a spool directory). [`acquire_reserve_at`] then creates
//! a directory as [`acquire_new_at`] does, but its staging copy is the
//! reserve renamed (`renameat2(RENAME_NOREPLACE)`, so two takers never get
//! one reserve) and its lock file the one inside, opened without following
//! a link and checked to be a regular file: no new inode, and the record
//! rewritten in the page it already has. Which parents keep one and who may
//! take it is spool-core's layout's call.
//!
//! ## Nesting, after the lock
//! A take first publishes its lock (flock in place, or the rename), then
//! walks its ancestors and (for [`acquire`]) its descendants: a spool
//! directory there whose lock is held refuses it, naming the holder
//! ([`Error::NestedUnderHeld`], [`Error::ContainsHeld`]). Because each side
//! publishes before it looks, of two racing takes at least one sees the
//! other. Unheld lock files and unheld staging copies never refuse (stale
//! files from crashed runs must not block forever); a held staging copy (a
//! claim in progress) refuses like any held directory. [`try_adopt`] checks
//! ancestors only: a held descendant is left alone by the walks, which skip
//! every subdirectory with a lock file of its own ([`is_nested_spool`]).
//!
//! ## held_by_caller
//! A process running a sink and a service on one directory holds one lock
//! (flock binds to an open file description, so two takes in one process
//! refuse each other) and opens both [`LockMode::HeldByCaller`].
//! [`verify_held_by_caller`] admits that only when THIS process holds the
//! lock: one of its descriptors on the lock file or the directory shows an
//! exclusive `FLOCK` in `/proc/self/fdinfo/<fd>` (the kernel's answer, not
//! the record, whose pid means nothing across pid namespaces). Whether
//! fdinfo lists flocks at all is probed once per process with a flock on a
//! temporary file; where it does not (gVisor, WSL1) the owner record
//! decides (this host, this pid, and the lock held). Beside another
//! process's lock it is refused naming that holder; with nothing holding
//! the lock it gets the distinct [`Error::NotHeld`]. It runs the node-local
//! check too.
//!
//! ## Probes
//! [`read_owner`] opens fresh descriptors on the lock file
//! (`O_NONBLOCK|O_NOFOLLOW`) and on the directory and tries a *shared*
//! `flock(LOCK_SH|LOCK_NB)` on each: refused means an exclusive holder;
//! granted means none, and the close drops it at once. It never blocks and
//! never takes the lock. A take refused with `EWOULDBLOCK` reads
//! `/proc/locks` for its inode: only shared locks (probes) → it retries for
//! up to 1 s; an exclusive one → refused at once; nothing listed → a few
//! 1 ms retries. So a probe never makes a legitimate take fail. A shared
//! lock that outlasts that second (a reader in group mode that stays) fails
//! the take with [`Error::HeldShared`] naming the readers' pids, never with
//! the dead owner's record; [`OwnerStatus::shared_by`] lets `spool status`
//! say who holds it shared.
//!
//! ## Fork safety
//! Every descriptor on a lock file or a locked/probed directory is a
//! registered descriptor (`sys::RegFd`): added by the open that makes it
//! and removed by the close that ends it, under one `pthread_mutex_t` that a
//! `pthread_atfork` prepare handler holds across the fork. The child
//! handler `close()`s every registered descriptor (never `LOCK_UN`) and
//! bumps a fork generation; a child's copies of lock objects (and its
//! [`Claim`]s, see [`Claim::is_held`]) then read as not held and never
//! close a descriptor number the child reused. `posix_spawn`/`vfork` run no
//! handler but exec, and every descriptor is `O_CLOEXEC`.
//!
//! ## Release
//! [`Claim::release`] closes the directory's descriptor, then the lock
//! file's (so a probe in between never reads "replaced"); the lock file and
//! its record stay. [`Claim::release_and_remove_if_empty`] removes the
//! directory, with the lock still held, when only its lock file and empty
//! subdirectories remain; otherwise it stays, unowned, for adoption. A
//! claim is in the process-wide registry ([`held_claims`]) until released;
//! dropping it without release moves its descriptors to a keep-until-exit
//! list and logs a warning naming the directory.
//!
//! # On disk
//!
//! ```text
//! <dir>/.owner.lock                    the lock file; its text is the owner record
//! <parent>/.<name>.<8 hex>.creating/   a directory being created (staging copy)
//! ```
//!
//! The owner record ([`OwnerRecord`]), rewritten by every take:
//!
//! ```text
//! host: node17
//! pid: 4242
//! purpose: claim        | adopting | blocked: <why>
//! ```
//!
//! `blocked: <why>` is written by [`Claim::mark_blocked`] before an adopter
//! lets go; it stays after the release, and other services skip the
//! directory until an operator clears it (any take rewrites the record).
//! [`try_adopt`] itself does not read the mark: adopters read it with
//! [`read_owner`] first. [`clear_blocked`] (`spool unblock DIR`) is how an
//! operator clears it: it takes the lock (refused, naming the holder, if
//! anyone holds it), reads the record under the lock, rewrites it only if
//! it says `blocked`, and lets go. Records are parsed defensively: garbage reads as
//! no record or [`Purpose::Unknown`], never a crash.
//!
//! # Node-local only
//! [`check_node_local`] reads statfs `f_type` and refuses NFS, Lustre,
//! BeeGFS, CIFS, SMB2, FUSE (its message says the override exists for local
//! FUSE filesystems), GPFS, 9p, AFS (both magics) and OrangeFS by name
//! ([`SHARED_FILESYSTEMS`]); `allow_shared_filesystem` admits them with a
//! warning. ext4, xfs, btrfs, zfs, tmpfs, overlayfs and CephFS pass. Every
//! take, [`try_adopt`] and [`verify_held_by_caller`] run it.
//!
//! # Test seams
//! Compiled only with `cfg(test)` or the `testing` feature (module `testing`):
//! a statfs type per path prefix, fdinfo without lock lines, and hooks
//! between a lock file's open and its flock and inside a release. The
//! always-present [`set_filesystem_type_for_testing`] serves a hidden CLI
//! option and returns [`Error::NoTestSeams`] in a build without them. The
//! `spool-lock-helper` binary (same feature) is the child process the
//! cross-process tests exec.
//!
//! # Where it is tested
//! * `tests/cross_process.rs` — real child processes: a second process
//!   refused naming pid and host, free after SIGKILL; 200 outer/inner
//!   races, never both winning; a watcher that never sees a new directory
//!   unheld; a lock file removed behind a live owner; the re-check after an
//!   unlink at the open→flock seam; stale vs held lock files and staging
//!   copies above and below; fork children (plain, from another thread
//!   inside a take, inside a release) never keeping the lock.
//! * `tests/in_process.rs` — double takes, `held_by_caller` (own lock,
//!   nothing held, fdinfo seam, statfs seam), every filesystem magic,
//!   release and removal, drop without release, stale staging copies,
//!   `clear_blocked` (clears a mark once, refuses a held directory, leaves
//!   any other record byte for byte),
//!   probes hammering a directory while it is taken and released.
//! * unit tests — record parsing, modes, fdinfo lines, the registry.
//! * `spool-tests` `lock_cli.rs` — `spool lock hold` / `spool lock owner`
//!   as black boxes, exit codes 3 and 4.
//!
//! # Features
//!
//! - `testing`: the test seams (statfs type, fdinfo without lock lines, lock
//!   hooks) and the `spool-lock-helper` binary of the cross-process tests.

#[cfg(not(target_os = "linux"))]
compile_error!(
    "spool-lock supports Linux only: it relies on flock semantics, /proc/self/fdinfo, \
     statfs filesystem magics and renameat2(RENAME_NOREPLACE)"
);

mod error;
mod fdinfo;
#[cfg(any(test, feature = "testing"))]
mod fork_testing;
mod holders;
mod lock;
mod mode;
mod names;
mod node_local;
mod probe;
mod record;
mod seams;
mod sys;
mod watch;

pub use error::{io_verdict, Error, Holder, IoVerdict};
pub use fdinfo::held_by_this_process;
pub use lock::{
    acquire, acquire_new_at, acquire_reserve_at, clear_blocked, create_parents, held_claims,
    is_staging_name, make_reserve_at, remove_created, remove_stale_staging, try_adopt,
    verify_held_by_caller, Claim, Unblocked,
};
pub use mode::{Access, LockMode, LockOptions, Sharing};
pub use names::{host_name, LOCK_FILE_NAME, RESERVE_NAME};
pub use node_local::{check_node_local, shared_filesystem_name, SHARED_FILESYSTEMS};
pub use probe::{is_nested_spool, lock_path, read_owner, OwnerStatus};
pub use record::{OwnerRecord, Producer, Purpose};
pub use seams::set_filesystem_type_for_testing;
#[cfg(any(test, feature = "testing"))]
pub use seams::HookPoint;
pub use watch::{Changes, DirWatch, WatchWaker};

#[cfg(any(test, feature = "testing"))]
pub mod testing {
    //! Test seams (only with `cfg(test)` or the `testing` feature): the
    //! seams of `seams.rs` and the forks of `fork_testing.rs`.
    pub use crate::fork_testing::{fork_paused_child, fork_single_threaded, ChildProbe, Forked};
    pub use crate::seams::testing::*;
}
