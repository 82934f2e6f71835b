//! The crash oracle, after a run (RELIABILITY.md "Crash torture"): every
//! pack a producer reported durable is in the catalog exactly once with
//! that checksum, and its row's range of its object (a pack alone, or a
//! bundle's) reads back valid (spool-core's validator) with that checksum
//! and size; no catalog row without its bytes; no pack alone in the store
//! that no row names unless its row names a later copy; bundles no row
//! names (a crash between a bundle's PUT and its index) are counted as
//! orphaned bytes, and the sweep must then reclaim exactly them without
//! touching a row's bytes; nothing left under the root but the catalog
//! key's empty directory.

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
    /// Packs indexed more than once as read, or stored alone more than
    /// once.
    pub duplicates: u64,
    /// Objects no producer reported (made by one killed before it could).
    pub unreported: u64,
    /// Bundles no row names, and their bytes (for the sweep).
    pub orphan_bundles: Vec<String>,
    /// Bytes no row points to: orphan bundles, and packs alone whose rows
    /// name a later copy.
    pub orphaned_bytes: u64,
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
    let objects: BTreeMap<String, Vec<u8>> = store.objects()?.into_iter().collect();
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
    // every row: once, its range of its object valid with its checksum
    let mut read_back: BTreeMap<&str, String> = BTreeMap::new();
    for (id, rs) in &rows {
        if rs.len() > 1 {
            v.duplicates += 1;
            v.problems
                .push(format!("pack {id} is indexed {} times as read", rs.len()));
        }
        let row = &rs[0];
        let Some(object) = objects.get(&row.object_key) else {
            v.problems.push(format!(
                "catalog row {id} (object {}) has no object in the store",
                row.object_key
            ));
            continue;
        };
        let (at, end) = (
            row.object_offset as usize,
            (row.object_offset + row.bytes) as usize,
        );
        match object.get(at..end).and_then(pack_checksum) {
            Some(sha) if sha == row.sha256 => {
                read_back.insert(id, sha);
            }
            Some(sha) => v.problems.push(format!(
                "catalog row {id} says sha256 {}, its range {at}..{end} of {} has {sha}",
                row.sha256, row.object_key
            )),
            None => v.problems.push(format!(
                "catalog row {id}: its range {at}..{end} of {} ({} bytes) is not a valid pack",
                row.object_key,
                object.len()
            )),
        }
    }
    // every object: a pack alone once, named by its row (or superseded by
    // a later copy its row names); a bundle named by rows, or orphaned
    let named: std::collections::BTreeSet<&str> =
        rows.values().map(|rs| rs[0].object_key.as_str()).collect();
    let mut alone: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut stored_ids = std::collections::BTreeSet::new();
    for (key, bytes) in &objects {
        let name = key.rsplit('/').next().unwrap_or_default();
        if let Some(id) = name.strip_suffix(".pack") {
            alone.entry(id).or_default().push(key);
            stored_ids.insert(id.to_string());
            if named.contains(key.as_str()) {
                continue;
            }
            if rows.contains_key(id) {
                v.orphaned_bytes += bytes.len() as u64; // its row names a later copy
            } else {
                v.problems
                    .push(format!("object {key} is in no catalog row"));
            }
        } else if name.ends_with(spool_upload::BUNDLE_SUFFIX) {
            if !named.contains(key.as_str()) {
                v.orphan_bundles.push(key.clone());
                v.orphaned_bytes += bytes.len() as u64;
            }
            for r in rows.values().filter(|rs| rs[0].object_key == *key) {
                stored_ids.insert(r[0].pack_id.clone());
            }
        }
    }
    for (id, keys) in &alone {
        if keys.len() > 1 {
            v.duplicates += 1;
            v.problems.push(format!(
                "pack {id} is in the store {} times: {keys:?}",
                keys.len()
            ));
        }
    }
    // every reported pack: indexed and read back with the reported checksum
    for (id, (sha, by)) in durable {
        let stored = read_back.get(id.as_str());
        let indexed = rows.get(id).map(|r| &r[0].sha256);
        if stored != Some(sha) || indexed != Some(sha) {
            v.lost += 1;
            v.problems.push(format!(
                "pack {id} (reported durable by {by} with sha256 {sha}) is lost: read back {stored:?}, indexed {indexed:?}"
            ));
        }
    }
    v.unreported = stored_ids
        .iter()
        .filter(|id| !durable.contains_key(*id))
        .count() as u64;
    // nothing left under the root but the key's directory and its reserve
    for l in left_under(root) {
        v.problems
            .push(format!("left under the spool root: {}", l.display()));
    }
    Ok(v)
}

/// The sweep after a run, every service stopped (once the destination's
/// grace has passed): it must delete every orphan bundle the oracle found
/// but those holding a pack no row names (kept), and every
/// row must still read back (the oracle again, on what is left).
pub fn sweep_and_rejudge(
    store: &StoreAt,
    (catalog, daemons_url): (&Catalog, &str),
    durable: &BTreeMap<String, (String, String)>,
    root: &Path,
    before: &Verdict,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let Some(swept) = store.sweep(catalog, daemons_url)? else {
        return Ok(problems); // a file:// store: no bundles
    };
    // a bundle no row names is deleted once proven spare; one holding a
    // pack no row names (still staged when the run ended) is kept
    if (swept.deleted + swept.unindexed_bundles) as usize != before.orphan_bundles.len()
        || swept.unproven > 0
    {
        problems.push(format!(
            "the sweep deleted {} bundle(s) and kept {} unindexed and {} unproven, the oracle \
             found {} no row names: {:?}; kept: {:?}",
            swept.deleted,
            swept.unindexed_bundles,
            swept.unproven,
            before.orphan_bundles.len(),
            before.orphan_bundles,
            swept.kept_why
        ));
    }
    let after = judge(store, catalog, durable, root)?;
    if !after.orphan_bundles.is_empty() {
        problems.push(format!(
            "bundles no row names left after the sweep: {:?}",
            after.orphan_bundles
        ));
    }
    if after.lost > before.lost || after.problems.len() > before.problems.len() {
        problems.push(format!("the sweep broke a rule: {:?}", after.problems));
    }
    Ok(problems)
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
