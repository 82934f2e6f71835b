//! The crash oracle, after a run (RELIABILITY.md "Crash torture"): every
//! pack a producer reported durable is in the store exactly once, valid
//! (spool-core's validator) and with that checksum, and in the catalog
//! exactly once with it; no catalog row without its object (same size and
//! checksum); no object the catalog does not list; nothing left under the
//! root but the catalog key's empty directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use spool_catalog::PackRow;

use crate::destination::{Catalog, StoreAt};
use crate::{pack_checksum, read_dir, walk_files};

/// What the oracle found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Each broken rule, in words.
    pub problems: Vec<String>,
    /// Reported packs missing, damaged or unindexed.
    pub lost: u64,
    /// Packs stored or indexed more than once.
    pub duplicates: u64,
    /// Objects no producer reported (made by one killed before it could).
    pub unreported: u64,
}

/// Judges a run's end state: its store, its catalog, what producers
/// reported durable (pack id → (sha256, who: a name for messages)) and
/// what is left under its spool root.
pub fn judge(
    store: &StoreAt,
    catalog: &Catalog,
    durable: &BTreeMap<String, (String, String)>,
    root: &Path,
) -> Result<Verdict> {
    let mut v = Verdict::default();
    // the store: every object, by pack id
    let mut objects: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut contents: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (key, bytes) in store.objects()? {
        let name = key.rsplit('/').next().unwrap_or_default();
        if let Some(id) = name.strip_suffix(".pack") {
            objects.entry(id.to_string()).or_default().push(key.clone());
            contents.entry(id.to_string()).or_insert(bytes);
        }
    }
    // the catalog, as read
    let mut rows: BTreeMap<String, Vec<PackRow>> = BTreeMap::new();
    match catalog.rows() {
        Ok(all) => {
            for row in all {
                rows.entry(row.pack_id.clone()).or_default().push(row);
            }
        }
        Err(e) => v.problems.push(format!("{e:#}")),
    }
    // every object: valid, listed once with its size and checksum
    let mut object_sha = BTreeMap::new();
    for (id, paths) in &objects {
        if paths.len() > 1 {
            v.duplicates += 1;
            v.problems.push(format!(
                "pack {id} is in the store {} times: {paths:?}",
                paths.len()
            ));
        }
        let bytes = contents.get(id).map(Vec::as_slice).unwrap_or_default();
        match pack_checksum(bytes) {
            Some(sha) => {
                object_sha.insert(id.clone(), (sha, bytes.len() as u64));
            }
            None => v.problems.push(format!(
                "object {} does not validate (spool-core's validator refuses it)",
                paths[0]
            )),
        }
        match rows.get(id).map(Vec::len) {
            None => v
                .problems
                .push(format!("object {} is in no catalog row", paths[0])),
            Some(1) => {}
            Some(n) => {
                v.duplicates += 1;
                v.problems
                    .push(format!("pack {id} is indexed {n} times as read"));
            }
        }
    }
    // every row: its object there, same size and checksum
    for (id, rs) in &rows {
        let row = &rs[0];
        match object_sha.get(id) {
            None if !objects.contains_key(id) => v.problems.push(format!(
                "catalog row {id} (object {}) has no object in the store",
                row.object_key
            )),
            None => {}
            Some((sha, len)) if row.sha256 != *sha || row.bytes != *len => {
                v.problems.push(format!(
                    "catalog row {id} says sha256 {} bytes {}, its object has {sha} {len}",
                    row.sha256, row.bytes
                ));
            }
            Some(_) => {}
        }
    }
    // every reported pack: stored and indexed with the reported checksum
    for (id, (sha, by)) in durable {
        let stored = object_sha.get(id).map(|(s, _)| s);
        let indexed = rows.get(id).map(|r| &r[0].sha256);
        if stored != Some(sha) || indexed != Some(sha) {
            v.lost += 1;
            v.problems.push(format!(
                "pack {id} (reported durable by {by} with sha256 {sha}) is lost: stored {stored:?}, indexed {indexed:?}"
            ));
        }
    }
    v.unreported = objects
        .keys()
        .filter(|id| !durable.contains_key(*id))
        .count() as u64;
    // nothing left under the root but the key's directory and its reserve
    for l in left_under(root) {
        v.problems
            .push(format!("left under the spool root: {}", l.display()));
    }
    Ok(v)
}

/// What is under a spool root but catalog keys' empty directories.
fn left_under(root: &Path) -> Vec<PathBuf> {
    let mut left = Vec::new();
    for key in read_dir(root) {
        if !key.is_dir() {
            left.push(key);
            continue;
        }
        for entry in read_dir(&key) {
            if entry.ends_with(spool_lock::RESERVE_NAME) {
                continue; // the key directory's reserve, kept on purpose
            }
            let mut files = Vec::new();
            walk_files(&entry, &mut files);
            if files.is_empty() && entry.is_dir() {
                files.push(entry);
            }
            left.extend(files);
        }
    }
    left
}
