//! The spool layout: `<root>/<catalog_key>/r<rank>-<inc>/`,
//! the catalog key, rank directory names, claiming a rank directory, and
//! the flat-spool upgrade warning.
//!
//! - The catalog key ([`Destination::catalog_key`]) hashes the destination
//!   as spelled, both URLs through [`strip_credentials`]: a secret never
//!   changes the key (golden tests below).
//! - [`claim_rank_dir`] creates a fresh rank directory already locked
//!   (through spool-lock). On a filesystem with no free inode or byte,
//!   where no directory can be made, it takes a dead sibling's directory
//!   in place instead, the emptiest first, and settles its hand-off: its
//!   packs are then the claim's own to drain. That is how a daemon starts
//!   on a full filesystem and frees it.
//! - [`find_flat_packs`] finds packs staged outside the layout (the
//!   flat-spool upgrade warning).

use std::fmt;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::at::{AtDir, Kind, Name};
use crate::lk::{self, Claim, LockOptions};
use crate::pack::PackId;
pub use crate::rank_dir::RankDirName;
use crate::Error;

/// Where a directory's packs go: everything the catalog key hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The catalog URL (credentials are removed before hashing).
    pub catalog_url: String,
    /// The catalog database.
    pub database: String,
    /// The catalog's table prefix.
    pub table_prefix: String,
    /// The object store URL, including bucket and prefix.
    pub store_url: String,
    /// A name the operator gives the store ([`DEFAULT_STORE_ID`] by default).
    pub store_id: String,
}

/// The store id when the operator gives none.
pub const DEFAULT_STORE_ID: &str = "default";

/// The embedded object store's directory directly under a spool root
/// (`file://ROOT/.store`, the single-machine default of `spool run`). Never
/// part of the layout: every walk of a spool root skips it.
pub const EMBEDDED_STORE_DIR: &str = ".store";

/// The embedded SQLite catalog's file directly under a spool root
/// (`sqlite:///ROOT/.catalog.db`, with its `-wal`/`-shm`/`-journal`
/// companions). Never part of the layout: every walk skips it.
pub const EMBEDDED_CATALOG_FILE: &str = ".catalog.db";

/// Whether `name`, directly under a spool root, is one of the embedded
/// store's or catalog's entries (skipped by every walk of the root).
pub(crate) fn is_embedded_entry(name: &str) -> bool {
    name == EMBEDDED_STORE_DIR || name.starts_with(EMBEDDED_CATALOG_FILE)
}

/// Query parameters of a catalog URL that are credentials (removed before
/// hashing, compared case-insensitively).
const CREDENTIAL_PARAMS: &[&str] = &[
    "user",
    "username",
    "password",
    "pass",
    "token",
    "access_key",
    "secret",
    "secret_key",
    "secret_access_key",
    "session_token",
    "access_token",
    "api_key",
    "client_secret",
    "sig",
    "signature",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
];

/// Removes credentials from a URL as spelled: the `user:password@` part of
/// the authority, credential query parameters (`user`, `password`, `token`,
/// `sig`, …) and the fragment (which addresses nothing spool reads and may
/// carry a secret: `s3://b/x#secret`). Nothing else is normalised (case,
/// ports, trailing slashes stay).
pub fn strip_credentials(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let authority = match authority.rfind('@') {
        Some(i) => &authority[i + 1..],
        None => authority,
    };
    let tail = tail.split_once('#').map_or(tail, |(before, _)| before);
    let (path, query) = match tail.find('?') {
        Some(i) => (&tail[..i], Some(&tail[i + 1..])),
        None => (tail, None),
    };
    let mut out = format!("{scheme}{authority}{path}");
    if let Some(query) = query {
        let kept: Vec<&str> = query
            .split('&')
            .filter(|kv| {
                let key = kv.split('=').next().unwrap_or("");
                !kv.is_empty()
                    && !CREDENTIAL_PARAMS
                        .iter()
                        .any(|c| c.eq_ignore_ascii_case(key))
            })
            .collect();
        if !kept.is_empty() {
            out.push('?');
            out.push_str(&kept.join("&"));
        }
    }
    out
}

impl Destination {
    /// The text the key hashes: one field per line, as spelled, the
    /// catalog and store URLs without credentials ([`strip_credentials`]).
    pub fn key_text(&self) -> Result<String, Error> {
        let fields: [(&'static str, &str); 5] = [
            ("catalog_url", &self.catalog_url),
            ("database", &self.database),
            ("table_prefix", &self.table_prefix),
            ("store_url", &self.store_url),
            ("store_id", &self.store_id),
        ];
        for (field, value) in fields {
            if value.trim().is_empty() {
                return Err(Error::BadDestination {
                    field,
                    why: "is required (empty)".into(),
                });
            }
            if value.contains(['\n', '\r']) {
                return Err(Error::BadDestination {
                    field,
                    why: format!("must be one line ({value:?})"),
                });
            }
        }
        Ok(format!(
            "catalog {}\ndatabase {}\ntable_prefix {}\nstore {}\nstore_id {}\n",
            strip_credentials(&self.catalog_url),
            self.database,
            self.table_prefix,
            strip_credentials(&self.store_url),
            self.store_id
        ))
    }

    /// The catalog key: the first 12 hex digits of the SHA-256 of
    /// [`key_text`](Destination::key_text).
    pub fn catalog_key(&self) -> Result<String, Error> {
        let digest = Sha256::digest(self.key_text()?.as_bytes());
        Ok(hex::encode(&digest[..6]))
    }
}

/// Whether `s` has the shape of a catalog key (12 lowercase hex digits).
pub fn is_catalog_key(s: &str) -> bool {
    s.len() == 12 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// The catalog key directories directly under a spool root `root`
/// (directories named by [`is_catalog_key`]; never a link: each entry's
/// kind is read without following it), with their keys, sorted.
pub fn catalog_key_dirs(root: &Path) -> Result<Vec<(String, PathBuf)>, Error> {
    let dir = AtDir::open_layout(root, 0)?
        .ok_or_else(|| Error::io("read directory", root, std::io::ErrorKind::NotFound.into()))?;
    let mut out = Vec::new();
    for name in dir.names()? {
        let Name::Utf8(name) = name else { continue };
        if is_catalog_key(&name) && dir.kind(&name)? == Some(Kind::Dir) {
            out.push((name.clone(), dir.join(&name)));
        }
    }
    Ok(out)
}

/// The rank from the `RANK` environment variable: 0 if unset or not a
/// number (it only labels the directory).
pub fn rank_from_env() -> u64 {
    parse_rank(std::env::var("RANK").ok().as_deref())
}

/// [`rank_from_env`]'s rule on a given value.
pub fn parse_rank(value: Option<&str>) -> u64 {
    value.and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Claims a fresh rank directory `<root>/<key>/r<rank>-<inc>/` for this
/// process: created with its owner lock already held (through
/// `spool_lock::acquire_new_at`, so no walk ever sees it unlocked), with a
/// fresh non-zero incarnation. Creates `<root>/<key>/` if needed. Warns once
/// about ready packs under `root` outside the layout (`find_flat_packs`).
///
/// The root is the operator's path (created if missing, links in it
/// followed); the key directory is opened without following a link
/// ([`AtDir`]) and the rank directory and its lock file are created
/// relative to its descriptor, so a link, a file or a FIFO planted at
/// `<root>/<key>` is [`Error::UnexpectedEntry`] naming it, and nothing is
/// ever created through it outside the root.
pub fn claim_rank_dir(
    root: &Path,
    key: &str,
    rank: u64,
    opts: &LockOptions,
) -> Result<Claim, Error> {
    claim(root, key, rank, opts, Reserve::Keep)
}

/// [`claim_rank_dir`] for a process that ships (the node's daemon, an
/// engine with its own service): on a filesystem with no free inode or
/// byte and no dead sibling to take, it takes the key directory's reserve
/// (`spool_lock::RESERVE_NAME`, which every claim that has room keeps
/// there), so it can start and free the filesystem. A sink-only producer
/// never takes it: it could not stage there anyway, and the daemon would
/// find none.
pub fn claim_rank_dir_to_ship(
    root: &Path,
    key: &str,
    rank: u64,
    opts: &LockOptions,
) -> Result<Claim, Error> {
    claim(root, key, rank, opts, Reserve::Take)
}

/// Whether a claim may take the key directory's reserve.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reserve {
    Keep,
    Take,
}

fn claim(
    root: &Path,
    key: &str,
    rank: u64,
    opts: &LockOptions,
    reserve: Reserve,
) -> Result<Claim, Error> {
    if !is_catalog_key(key) {
        return Err(Error::BadDestination {
            field: "catalog_key",
            why: format!("{key:?} is not 12 lowercase hex digits"),
        });
    }
    // The root (the operator's path) is created with the spool's access
    // (private by default) and fsynced; a refused claim removes what it
    // created, while empty.
    lk::check_node_local(root, opts.allow_shared_filesystem)?;
    let created = lk::create_parents(root, &opts.access)?;
    let claim = match claim_in_root(root, key, rank, opts, reserve) {
        Ok(claim) => claim,
        Err(e) => {
            lk::remove_created(&created);
            return Err(e);
        }
    };
    match find_flat_packs(root, key) {
        Ok(Some(flat)) => tracing::warn!(root = %root.display(), "{flat}"),
        Ok(None) => {}
        Err(e) => tracing::debug!(root = %root.display(), "flat-spool check failed: {e}"),
    }
    Ok(claim)
}

/// [`claim_rank_dir`] in an existing root: the key directory opened (or
/// created) without following a link, the rank directory created locked
/// relative to it; a key directory this call created is removed again on a
/// refusal (while empty).
fn claim_in_root(
    root: &Path,
    key: &str,
    rank: u64,
    opts: &LockOptions,
    reserve: Reserve,
) -> Result<Claim, Error> {
    let root = std::path::absolute(root)
        .and_then(|r| r.canonicalize())
        .map_err(|e| Error::io("resolve", root, e))?;
    let root_dir = AtDir::open_layout(&root, 0)?
        .ok_or_else(|| Error::io("open directory", &root, std::io::ErrorKind::NotFound.into()))?;
    let (key_dir, created_key) = root_dir.ensure_dir(key, &opts.access)?;
    if created_key {
        // `<root>/<key>/` survives a crash once a claim stands in it
        if let Err(e) = root_dir.sync() {
            root_dir.remove_dir(key).ok();
            return Err(e);
        }
    }
    let refused = |e: Error| {
        if created_key {
            root_dir.remove_dir(key).ok();
        }
        Err(e)
    };
    loop {
        let incarnation = loop {
            let i: u32 = rand::random();
            if i != 0 {
                break i;
            }
        };
        let name = RankDirName { rank, incarnation }.to_string();
        match key_dir.kind(&name) {
            Ok(Some(_)) => continue, // an incarnation already used: draw again
            Ok(None) => {}
            Err(e) => return refused(e),
        }
        match lk::acquire_new_at(key_dir.as_fd(), key_dir.path(), name.as_ref(), opts) {
            Ok(Some(claim)) => {
                // the reserve a full filesystem's next daemon takes: kept
                // while there is room (best effort; it is only a spare)
                if let Err(e) = lk::make_reserve_at(key_dir.as_fd(), key_dir.path(), &opts.access) {
                    tracing::debug!(dir = %key_dir.path().display(), "no reserve made: {e}");
                }
                return Ok(claim);
            }
            Ok(None) => continue, // made by someone else meanwhile: draw again
            Err(e) if out_of_space(&e) => {
                if let Some(claim) = take_dead_sibling(&key_dir, opts) {
                    return Ok(claim);
                }
                if reserve == Reserve::Take {
                    match lk::acquire_reserve_at(
                        key_dir.as_fd(),
                        key_dir.path(),
                        name.as_ref(),
                        opts,
                    ) {
                        Ok(Some(claim)) => {
                            tracing::warn!(dir = %claim.dir().display(), "the filesystem has no room for a new rank directory: took the key directory's reserve as {}", claim.dir().display());
                            return Ok(claim);
                        }
                        Ok(None) => {}
                        Err(taken) => {
                            tracing::warn!(dir = %key_dir.path().display(), "cannot take the key directory's reserve: {taken}")
                        }
                    }
                }
                return refused(e.into());
            }
            Err(e) => return refused(e.into()),
        }
    }
}

/// Whether `e` says the filesystem has no free inode or byte (or the
/// user's quota is spent): `ENOSPC`, `EDQUOT`.
fn out_of_space(e: &lk::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

/// A claim on a filesystem with no free inode or byte, where a fresh rank
/// directory cannot be made (it costs two inodes): the lock of a dead
/// sibling under `key_dir` is taken in place instead (no new inode), the
/// emptiest first, and its dead owner's hand-off settled. Its packs are
/// then this claim's to drain: they are under the same catalog key (the
/// same destination), and the lock makes this process their one owner,
/// exactly as an adoption would. This is how a daemon that was not
/// running starts on a full filesystem and frees it. `None` when no dead
/// sibling can be taken.
fn take_dead_sibling(key_dir: &AtDir, opts: &LockOptions) -> Option<Claim> {
    let mut dead: Vec<(u64, PathBuf)> = crate::siblings::rank_dirs_in(key_dir)
        .ok()?
        .into_iter()
        .filter(|d| crate::siblings::classify(d) == crate::siblings::Owner::Dead)
        .map(|d| {
            let held = crate::spool::scan_dir(&d, &std::sync::atomic::AtomicBool::new(false))
                .map_or(u64::MAX, |p| p.iter().map(|p| p.bytes).sum());
            (held, d)
        })
        .collect();
    dead.sort();
    for (_, dir) in dead {
        let Ok(claim) = lk::acquire(&dir, opts) else {
            continue; // taken by someone else meanwhile, or refused
        };
        let config = crate::spool::SpoolConfig {
            lock: opts.clone(),
            ..Default::default()
        };
        let spool = match crate::Spool::open_claimed(claim, &config) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "taking a dead sibling on a full filesystem: {e}");
                continue;
            }
        };
        if let Err(e) = spool.settle_hand_off() {
            tracing::warn!(dir = %dir.display(), "settling a dead owner's hand-off: {e}");
        }
        tracing::warn!(dir = %dir.display(), "the filesystem has no room for a new rank directory: took the dead sibling {} as this process's own (its packs are drained as its own)", dir.display());
        return spool.into_claim();
    }
    None
}

/// Ready packs found under a spool root outside the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatPacks {
    /// How many.
    pub count: usize,
    /// One of them.
    pub example: PathBuf,
    /// The directory holding the example.
    pub example_dir: PathBuf,
    /// Where to move them (`<root>/<key>/r0-00000000`, relative paths below
    /// the root kept).
    pub move_to: PathBuf,
}

impl fmt::Display for FlatPacks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ready pack(s) found outside the spool layout (for example {} in {}); they are \
             not uploaded from there. If they are bound for this catalog and store, move them \
             into {} (keeping their paths relative to the spool root) and the storage service \
             adopts them",
            self.count,
            self.example.display(),
            self.example_dir.display(),
            self.move_to.display()
        )
    }
}

/// How deep [`find_flat_packs`] looks below the root.
const FLAT_WALK_DEPTH: usize = 8;

/// Walks `root` by name (never following symlinks, skipping rank
/// directories, `_refs/` and the embedded store and catalog
/// ([`is_embedded_entry`])) for `<id>.ready` files outside the layout;
/// temp files are not counted. `None` when there are none.
pub(crate) fn find_flat_packs(root: &Path, key: &str) -> Result<Option<FlatPacks>, Error> {
    let mut count = 0usize;
    let mut example: Option<PathBuf> = None;
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if dir == root => return Err(Error::io("read directory", &dir, e)),
            Err(_) => continue,
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Ok(ft) = entry.file_type() else { continue };
            if depth == 0 && is_embedded_entry(name) {
                continue; // the embedded store's objects are not spool packs
            }
            if ft.is_dir() {
                if depth < FLAT_WALK_DEPTH
                    && RankDirName::parse(name).is_none()
                    && name != crate::spool::REFS_DIR
                {
                    stack.push((entry.path(), depth + 1));
                }
            } else if ft.is_file() {
                if let Some(id) = name.strip_suffix(".ready") {
                    if PackId::from_hex(id).is_ok() {
                        count += 1;
                        if example.is_none() {
                            example = Some(entry.path());
                        }
                    }
                }
            }
        }
    }
    Ok(example.map(|example| FlatPacks {
        count,
        example_dir: example.parent().unwrap_or(root).to_path_buf(),
        example,
        move_to: root.join(key).join(RankDirName::manual(0).to_string()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest() -> Destination {
        Destination {
            catalog_url: "clickhouse://ch.example:8123/spool?table_prefix=t_&user=u&password=p"
                .into(),
            database: "spool".into(),
            table_prefix: "t_".into(),
            store_url: "s3://bucket/prefix".into(),
            store_id: "default".into(),
        }
    }

    /// Golden: the key of a fixed destination. The text is spelled out so
    /// the expected digest can be checked by hand:
    /// `printf 'catalog clickhouse://ch.example:8123/spool?table_prefix=t_\ndatabase spool\ntable_prefix t_\nstore s3://bucket/prefix\nstore_id default\n' | sha256sum | cut -c1-12`
    #[test]
    fn golden_catalog_key() {
        let d = dest();
        assert_eq!(
            d.key_text().unwrap(),
            "catalog clickhouse://ch.example:8123/spool?table_prefix=t_\n\
             database spool\ntable_prefix t_\nstore s3://bucket/prefix\nstore_id default\n"
        );
        assert_eq!(d.catalog_key().unwrap(), GOLDEN_KEY);
    }
    const GOLDEN_KEY: &str = "0dcd98d6813d";

    #[test]
    fn each_field_changes_the_key_credentials_do_not() {
        let base = dest().catalog_key().unwrap();
        let mut keys = std::collections::HashSet::new();
        keys.insert(base.clone());
        let edits: [fn(&mut Destination); 5] = [
            |d| d.catalog_url = "clickhouse://ch2.example:8123/spool".into(),
            |d| d.database = "spool2".into(),
            |d| d.table_prefix = "u_".into(),
            |d| d.store_url = "s3://bucket/prefix2".into(),
            |d| d.store_id = "other".into(),
        ];
        for edit in edits {
            let mut d = dest();
            edit(&mut d);
            assert!(keys.insert(d.catalog_key().unwrap()), "{d:?} kept the key");
        }
        let mut d = dest();
        d.catalog_url = "clickhouse://admin:secret@ch.example:8123/spool?table_prefix=t_".into();
        assert_eq!(d.catalog_key().unwrap(), base);
        // A secret in a store URL's query or fragment, or in a catalog
        // URL's fragment, never changes the key nor reaches its text.
        for store in [
            "s3://bucket/prefix#secret",
            "s3://bucket/prefix?token=s3cr3t",
            "s3://bucket/prefix?X-Amz-Signature=s3cr3t&sig=s3cr3t#s3cr3t",
            "s3://u:s3cr3t@bucket/prefix",
        ] {
            let mut d = dest();
            d.store_url = store.into();
            assert_eq!(d.catalog_key().unwrap(), base, "{store}");
            assert!(!d.key_text().unwrap().contains("s3cr3t"), "{store}");
        }
        let mut d = dest();
        d.catalog_url = "clickhouse://ch.example:8123/spool?table_prefix=t_#s3cr3t".into();
        assert_eq!(d.catalog_key().unwrap(), base);
        // Spelled differently, keyed differently (documented).
        let mut d = dest();
        d.catalog_url = "clickhouse://CH.example:8123/spool?table_prefix=t_".into();
        assert_ne!(d.catalog_key().unwrap(), base);
        // Every field is required.
        let mut d = dest();
        d.store_id.clear();
        assert!(matches!(
            d.catalog_key(),
            Err(Error::BadDestination {
                field: "store_id",
                ..
            })
        ));
    }

    #[test]
    fn strip_credentials_keeps_everything_else_as_spelled() {
        assert_eq!(
            strip_credentials("clickhouse://u:p@Host:1/db?a=1&password=x&b=2#f"),
            "clickhouse://Host:1/db?a=1&b=2"
        );
        assert_eq!(
            strip_credentials("sqlite:///abs/x.db"),
            "sqlite:///abs/x.db"
        );
        assert_eq!(strip_credentials("memory://"), "memory://");
        assert_eq!(
            strip_credentials("clickhouse://h/db?USER=a&Password=b"),
            "clickhouse://h/db"
        );
    }

    #[test]
    fn rank_dir_names() {
        let n = RankDirName {
            rank: 3,
            incarnation: 0xdeadbeef,
        };
        assert_eq!(n.to_string(), "r3-deadbeef");
        assert_eq!(RankDirName::parse("r3-deadbeef"), Some(n));
        assert_eq!(RankDirName::manual(0).to_string(), "r0-00000000");
        assert!(RankDirName::parse("r0-00000000").unwrap().is_manual());
        for bad in [
            "r-deadbeef",
            "r03-deadbeef",
            "r3-DEADBEEF",
            "r3-deadbee",
            "r3-deadbeef0",
            "x3-deadbeef",
            "r3deadbeef",
            "r3-dead/eef",
        ] {
            assert_eq!(RankDirName::parse(bad), None, "{bad}");
        }
        assert_eq!(parse_rank(None), 0);
        assert_eq!(parse_rank(Some("7")), 7);
        assert_eq!(parse_rank(Some("seven")), 0);
        assert_eq!(parse_rank(Some("-1")), 0);
    }

    #[test]
    fn a_catalog_key_is_exactly_twelve_lowercase_hex_digits() {
        assert!(is_catalog_key("0123456789ab"));
        assert!(is_catalog_key(GOLDEN_KEY));
        for bad in [
            "",
            "abc",
            "0123456789a",
            "0123456789abc",
            "0123456789AB",
            "0123456789ag",
            "zzzzzzzzzzzz",
        ] {
            assert!(!is_catalog_key(bad), "{bad:?}");
        }
    }

    #[test]
    fn rank_dir_names_take_every_u64_rank_and_nothing_signed() {
        // Multi-digit ranks without a leading zero, up to u64::MAX (20
        // digits); a 21-digit or signed rank is no rank directory.
        assert_eq!(
            RankDirName::parse("r12-00000001"),
            Some(RankDirName {
                rank: 12,
                incarnation: 1
            })
        );
        let max = format!("r{}-deadbeef", u64::MAX);
        assert_eq!(RankDirName::parse(&max).unwrap().rank, u64::MAX);
        assert_eq!(RankDirName::parse(&max).unwrap().to_string(), max);
        for bad in [
            "r184467440737095516150-deadbeef",
            "r+3-deadbeef",
            "r3-+eadbeef",
        ] {
            assert_eq!(RankDirName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_rank_comes_from_the_rank_variable() {
        // This test binary's process is its own (nextest): setting RANK
        // here touches no other test.
        std::env::set_var("RANK", " 42 ");
        assert_eq!(rank_from_env(), 42);
        std::env::set_var("RANK", "x");
        assert_eq!(rank_from_env(), 0);
        std::env::remove_var("RANK");
        assert_eq!(rank_from_env(), 0);
    }

    #[test]
    fn flat_walk_fails_on_a_missing_root_and_stops_eight_levels_down() {
        let tmp = tempfile::tempdir().unwrap();
        let key = "0123456789ab";
        let err = find_flat_packs(&tmp.path().join("missing"), key).unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
        // A pack eight directories down is found; nine down is not looked at.
        let root = tmp.path().join("root");
        let mut deep = root.clone();
        for level in 1..=9 {
            deep = deep.join(format!("d{level}"));
            std::fs::create_dir_all(&deep).unwrap();
            if level == 9 {
                std::fs::write(deep.join(format!("{}.ready", PackId::generate())), b"x").unwrap();
            }
        }
        assert_eq!(find_flat_packs(&root, key).unwrap(), None);
        let eighth = deep.parent().unwrap();
        std::fs::write(eighth.join(format!("{}.ready", PackId::generate())), b"x").unwrap();
        let flat = find_flat_packs(&root, key).unwrap().unwrap();
        assert_eq!((flat.count, flat.example_dir.as_path()), (1, eighth));
        // Nor does a `.store` below the root's own level hide its packs.
        let nested = root.join("v1").join(EMBEDDED_STORE_DIR);
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::write(nested.join(format!("{}.ready", PackId::generate())), b"x").unwrap();
        assert_eq!(find_flat_packs(&root, key).unwrap().unwrap().count, 2);
    }

    #[test]
    fn flat_walk_skips_a_subdirectory_it_cannot_read_and_counts_the_rest() {
        // A subdirectory whose path is longer than PATH_MAX: listed by its
        // parent, but its own read_dir fails (ENAMETOOLONG), as one that
        // cannot be read would for a user other than root. The walk goes
        // on without it; only the root itself failing is an error.
        let tmp = tempfile::tempdir().unwrap();
        let key = "0123456789ab";
        let mut root = tmp.path().to_path_buf();
        while root.as_os_str().len() < 3900 {
            root = root.join("d".repeat(200));
        }
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join(format!("{}.ready", PackId::generate())), b"x").unwrap();
        let name = "e".repeat(250);
        let made = std::process::Command::new("mkdir")
            .arg(&name)
            .current_dir(&root)
            .status()
            .unwrap();
        assert!(made.success());
        let err = std::fs::read_dir(root.join(&name)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG), "{err}");
        let flat = find_flat_packs(&root, key).unwrap().unwrap();
        assert_eq!(
            (flat.count, flat.example_dir.as_path()),
            (1, root.as_path())
        );
    }

    #[test]
    fn claim_creates_a_locked_fresh_rank_dir_under_the_key() {
        let root = tempfile::tempdir().unwrap();
        let key = dest().catalog_key().unwrap();
        let opts = LockOptions::default();
        let a = claim_rank_dir(root.path(), &key, 2, &opts).unwrap();
        let b = claim_rank_dir(root.path(), &key, 2, &opts).unwrap();
        assert_ne!(a.dir(), b.dir());
        for c in [&a, &b] {
            let name = RankDirName::parse(c.dir().file_name().unwrap().to_str().unwrap()).unwrap();
            assert_eq!(name.rank, 2);
            assert!(!name.is_manual());
            assert_eq!(c.dir().parent().unwrap().file_name().unwrap(), key.as_str());
            assert!(lk::read_owner(c.dir()).unwrap().held);
        }
        assert!(claim_rank_dir(root.path(), "nope", 0, &opts).is_err());
    }

    #[test]
    fn flat_upgrade_warning() {
        let root = tempfile::tempdir().unwrap();
        let key = "0123456789ab";
        // A pack inside the layout warns of nothing.
        let rank = root.path().join(key).join("r0-12345678");
        std::fs::create_dir_all(&rank).unwrap();
        let id = PackId::generate();
        std::fs::write(rank.join(format!("{id}.ready")), b"x").unwrap();
        assert_eq!(find_flat_packs(root.path(), key).unwrap(), None);
        // Two flat packs (and a temp file, not counted): one warning naming 2.
        let v1 = root.path().join("v1");
        std::fs::create_dir_all(&v1).unwrap();
        for _ in 0..2 {
            std::fs::write(v1.join(format!("{}.ready", PackId::generate())), b"x").unwrap();
        }
        std::fs::write(v1.join(format!(".{id}.0000abcd.open")), b"x").unwrap();
        let flat = find_flat_packs(root.path(), key).unwrap().unwrap();
        assert_eq!(flat.count, 2);
        assert_eq!(flat.example_dir, v1);
        assert_eq!(flat.move_to, root.path().join(key).join("r0-00000000"));
        let msg = flat.to_string();
        assert!(msg.starts_with("2 ready pack(s)"), "{msg}");
        assert!(msg.contains(&v1.display().to_string()), "{msg}");
        assert!(msg.contains("r0-00000000"), "{msg}");
    }

    #[test]
    fn flat_walk_skips_the_embedded_store_and_catalog() {
        let root = tempfile::tempdir().unwrap();
        let key = "0123456789ab";
        // Objects of the embedded store, even one named like a pack, and the
        // SQLite files are not flat packs.
        let store = root
            .path()
            .join(EMBEDDED_STORE_DIR)
            .join("v1/date=2026-01-01");
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join(format!("{}.ready", PackId::generate())), b"x").unwrap();
        std::fs::write(store.join(format!("{}.pack", PackId::generate())), b"x").unwrap();
        for f in [".catalog.db", ".catalog.db-wal", ".catalog.db-shm"] {
            std::fs::write(root.path().join(f), b"x").unwrap();
        }
        assert_eq!(find_flat_packs(root.path(), key).unwrap(), None);
        assert!(is_embedded_entry(".store") && is_embedded_entry(".catalog.db-journal"));
        assert!(!is_embedded_entry("store") && !is_embedded_entry(key));
    }
}
