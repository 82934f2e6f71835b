//! spool-core: packs, the crash-safe spool directory, the sink and the
//! per-process publication registry. No async runtime: a producer
//! that links spool-lock and spool-core gets threads, never tokio.
//!
//! # Pack format (version 1.0)
//!
//! A pack is one immutable file of records. All integers are little-endian
//! except the time prefix of the pack id, which is big-endian so that ids
//! sort by time. Offsets are from the start of the pack; `N` is its total
//! length.
//!
//! ## Header (40 bytes, at offset 0)
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 8  | magic `53 50 4F 4F 4C 50 4B 01` (`"SPOOLPK\x01"`) |
//! | 8  | 2  | version major, u16 (1) |
//! | 10 | 2  | version minor, u16 (0) |
//! | 12 | 16 | pack id (see below) |
//! | 28 | 8  | creation time, u64 milliseconds since the Unix epoch |
//! | 36 | 4  | flags, u32, zero in 1.0 (readers of 1.x ignore them) |
//!
//! ## Records (from offset 40)
//!
//! Each record is a u32 length `L` (`L <= 0xFFFF_FFFE`) followed by `L`
//! bytes. Records follow each other with no padding. A length of
//! `0xFFFF_FFFF` is not a record: it is the footer's marker.
//!
//! ## Footer (20 bytes, at offset `F`)
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | F      | 4 | marker `FF FF FF FF` |
//! | F + 4  | 8 | record count, u64 |
//! | F + 12 | 8 | total record payload bytes (sum of every `L`), u64 |
//!
//! ## Trailer (72 bytes, at offset `N - 72`, [`pack::TRAILER_LEN`])
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | N − 72 | 8  | magic `"SPOOLEND"` |
//! | N − 64 | 16 | pack id (equal to the header's) |
//! | N − 48 | 8  | total length `N`, u64 |
//! | N − 40 | 8  | footer offset `F`, u64 |
//! | N − 32 | 32 | SHA-256 of bytes `0 .. N − 32` (everything before this field) |
//!
//! The trailer follows the footer directly (`F + 20 = N − 72`) and nothing
//! follows the trailer. Because it sits at a fixed offset from the end, one
//! ranged read of an object's last 72 bytes gives its id, its length and its
//! checksum ([`pack::Trailer::parse`]); the uploader uses that to tell "the
//! same pack is already there" from "a different object is at the key".
//!
//! ## Pack id
//!
//! 16 bytes: the first 6 are the creation time in milliseconds since the
//! epoch (48 bits, big-endian), the last 10 random. Written as 32 lowercase
//! hex digits ([`pack::PackId::to_hex`]), which is also the file name. Ids
//! of packs made in different milliseconds sort by time.
//!
//! ## Which hash is which
//!
//! A pack has two SHA-256 values, computed in one pass over its bytes (the
//! state that hashed everything before the trailer's hash field is fed
//! those 32 bytes to give the second):
//!
//! | name | what it hashes | where it lives | who checks it |
//! |---|---|---|---|
//! | `trailer_sha256` ([`pack::Trailer::sha256`], [`pack::PackSummary::trailer_sha256`]) | every byte before the trailer's hash field (the pack's last 32 bytes) | in the pack itself, and the row's `trailer_sha256` column | [`pack::validate`] on every read (recovery, the pipeline, the uploader before it sends, `spool cat`, Python's `fetch`); the uploader's existing-object check (one ranged read of the trailer) |
//! | `sha256` ([`pack::PackSummary::sha256`]) | the whole pack, trailer included | the row's `sha256` column; `spool produce --print-sha256` | any standard tool: `sha256sum` of the object, `rclone cat KEY \| sha256sum`, `spool cat` and `fetch` against the row |
//!
//! What each protects: the trailer's checksum makes a pack self-checking (a
//! torn or bit-flipped file fails validation wherever it is read); the
//! uploader's hash of the bytes it sends (checked against the trailer
//! before a PUT is sent or a multipart upload completed) keeps what reaches
//! the store equal to what was validated; the request's SHA-256 of the
//! body (spool-upload's crate docs) lets S3 refuse a body damaged in
//! transit; the row's `sha256` lets a reader check
//! an object with no spool code at all. Rows written before catalog schema
//! version 4 carry the trailer's checksum in both columns (spool-catalog's
//! `PackRow::whole_sha256` is `false`); readers check those by the trailer.
//!
//! ## Versions
//!
//! Readers reject a major version they do not know
//! ([`Corruption::UnknownVersion`]) and accept any minor version of a known
//! major: a minor version may only define flag bits or values old readers
//! can ignore, never move a field.
//!
//! ## Validation
//!
//! [`pack::validate`] streams a pack through a 1 MiB buffer whatever its
//! size, hashing as it goes (sha2 0.10, which uses the CPU's SHA extensions
//! where it has them), and checks, in order: the magic, the major version,
//! the header id against the expected one (the file name), every record
//! length against the data present, the footer's counts, the trailer's
//! magic, id, total length and footer offset, the SHA-256, and that nothing
//! follows the trailer. It checks a cancellation flag before it starts and
//! at least every 8 MiB ([`pack::CANCEL_CHECK_BYTES`]). Every failure is a
//! [`Error::CorruptPack`] naming a [`Corruption`] kind, except read errors
//! ([`Error::PackRead`]) and [`Error::Cancelled`], which say nothing about
//! the pack. Tests (`pack::tests`): every single-bit flip at every offset,
//! every truncation, an extra byte, wrong magic, an unknown major version,
//! trailers and footers that lie under a recomputed checksum, a cancel
//! noticed within 8 MiB, round trips and garbage input (proptest).
//!
//! # The spool directory ([`spool`])
//!
//! Files: `<id>.ready` (sealed), `.<id>.<8 hex>.open` (a stage in flight, or
//! torn by a crash), `<id>.quarantined` / `<id>.rejected` (set aside, kept,
//! counted), `.owner.lock`; a sink with worker ordinal `k` stages under
//! `w<k>/`. Names are ids: anything else is never counted, swept, listed
//! or removed; symlinks are never followed (a symlinked `.ready` is
//! quarantined) and `remove`/`quarantine` rebuild the path from id and
//! ordinal, so no name can escape the directory.
//!
//! Stage: reserve bytes → `.open` with `O_CREAT|O_EXCL|O_NOFOLLOW` →
//! write → fsync → `link()` to `<id>.ready` (never replaces; an existing
//! identical pack is success, different bytes [`Error::Conflict`]) →
//! unlink the temp → fsync the directory, every step relative to the
//! directory's descriptor. The spool directory is opened by its path and
//! must be the very directory the spool opened (device and inode), and is
//! checked again at its path right before the publish: a link or another
//! directory put at its path is never staged into, and a vanished or
//! replaced directory is [`Error::DirectoryVanished`] with nothing
//! published (`w<k>/` is made with `mkdirat`, never its parent). A crash
//! at any point leaves either
//! no file, a `.open` (swept by the next owner's recovery), or a whole
//! `.ready` (tests/tests/spool_processes.rs kills 520 stagers at random
//! points).
//!
//! Accounting: committed (walk of open, ready, quarantined, rejected
//! bytes) + reserved (stages in flight) + charged dead siblings ≤
//! `max_bytes`. A reconcile re-walks under the account mutex and leaves
//! both the reservations and the files of this spool's stages in flight to
//! those stages, so it never overwrites or double-counts them. Refreshed at
//! open and before a stage refuses. `charge_dead_siblings` (see
//! [`spool::SiblingCharge`]): charged are unheld, unblocked siblings this
//! process could take and empty, and siblings this process adopts; not
//! charged are another process's, a claim this process keeps, blocked
//! ones and another user's. Several live ranks on one node each have their
//! own budget (a known limit).
//!
//! Walks (accounting, scan, recovery, charge) enter only `w<k>/`
//! subdirectories, skip `_refs/`, non-pack files and any subdirectory with
//! its own `.owner.lock` (a nested spool, live or dead).
//!
//! Lock-free readers for operators: [`spool::inspect`] (counts and bytes
//! per kind, `spool status`) and [`spool::verify_dir`] /
//! [`spool::verify_dir_with_progress`] (validate every ready pack, with a
//! callback after the listing and after each pack, `spool verify`) never
//! take the lock and change nothing.
//!
//! # Layout ([`layout`])
//!
//! `<root>/<catalog_key>/r<rank>-<8 hex>/`; the key is the first 12 hex
//! digits of SHA-256 over `catalog <url without credentials>\ndatabase
//! <db>\ntable_prefix <p>\nstore <store url>\nstore_id <id>\n`, hashed as
//! spelled (two spellings of one server give two keys: packs delayed, never
//! misdirected). `r<rank>-00000000` is reserved for packs moved in by hand.
//!
//! A claim ([`layout::claim_rank_dir`]) opens the key directory without
//! following a link and creates its rank directory relative to it. On a
//! filesystem with no free inode or byte it takes a dead sibling's
//! directory in place; failing that, a claim that ships
//! ([`layout::claim_rank_dir_to_ship`]: the daemon, an engine with its own
//! service) takes the key directory's reserve (`spool_lock::RESERVE_NAME`,
//! renamed into place), which every claim that had room left there
//! (`spool_lock::make_reserve_at`). A sink-only producer never takes the
//! reserve: it could not stage on that filesystem anyway, and the daemon
//! that frees it would find none.
//!
//! # The sink ([`sink`])
//!
//! The producer side: [`sink::Sink::write`] appends a record to
//! the open pack in memory; packs are sealed by size, record count or age
//! and staged — through [`Spool::stage`], so with every guarantee above —
//! on the sink's own thread, in seal order. Admission is bounded by
//! `buffer_bytes` (refuse, or block until a deadline, the producer's
//! choice; never a silent drop), `flush(timeout)` returns by its deadline,
//! and `release()` stops admission and flushes within
//! `release_flush_timeout`; `sealed_on_release()` turns true only when that
//! flush went through, and only then may the claim on the directory be let
//! go. Worker ordinals stage under `w<k>/`. The module docs give the details
//! and where each rule is tested.
//!
//! # The registry ([`registry`])
//!
//! The per-process publication registry through which a service
//! learns, without polling, that a sink of the same process staged a pack:
//! concrete publication points per `(rank directory, ordinal)` that reader
//! and publisher converge on (`get_or_create`), one publisher entry point
//! (`publish`), a dirty-id inbox per reader with a coalescing flag, woken by
//! thread `unpark` or an [`registry::AtomicWaker`] — after the `.ready` link
//! and the directory fsync, never before. The lost-wakeup contract (re-check
//! after `take_dirty`) is stated and tested in the module.
//!
//! # Repeated warnings ([`throttle`])
//!
//! A warning that can come back on every step (a planted entry a scan
//! skips, a stage retried on a full filesystem, a hand-off directory that
//! cannot be read, a replica that does not answer) goes through
//! [`warn_throttled!`]: shown once per cause per minute at `warn`, each
//! occurrence at `debug`, the next `warn` line counting what it did not show.
//!
//! # What is tested where
//!
//! Unit tests beside each module (`pack`, `layout`, `spool_tests.rs`,
//! `sink`, `registry`), including a proptest model of the capacity
//! accounting; the crash tests with real SIGKILLed writers (520 kills, no
//! pack lost, torn writes only as `.open`) and the cross-process capacity
//! and nesting cases are in `tests/tests/spool_processes.rs` and
//! `tests/tests/produce.rs`, driving `spool produce` and the
//! `spool-core-helper` binary.
//!
//! # Features
//!
//! - `testing`: the pause-before-publish seam, the kill points of
//!   [`seams`] and the sink's in-memory stage target (`sink::fake`).
//!   Never in the `spool` binary of a root build.
#![forbid(unsafe_code)]

#[cfg(not(target_os = "linux"))]
compile_error!("spool-core supports Linux only (see spool-lock)");

pub mod at;
pub mod backlog;
pub mod error;
pub mod handoff;
pub mod layout;
pub mod pack;
mod rank_dir;
pub mod registry;
pub mod seams;
pub mod siblings;
pub mod sink;
pub mod spool;
pub mod throttle;
mod version;

/// The owner-lock API.
pub(crate) use spool_lock as lk;

pub use error::{Corruption, Error};
pub use layout::{claim_rank_dir, rank_from_env, Destination, RankDirName};
pub use pack::{validate, PackId, PackReader, PackSummary, PackWriter, Trailer, TRAILER_LEN};
pub use spool::{ReadyPack, Spool, SpoolConfig, StagedPack};
