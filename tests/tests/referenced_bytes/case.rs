//! The behavioural case of `Catalog::referenced_bytes`, written once and
//! run on every backend: `tests/tests/catalog_referenced_bytes.rs` on the
//! in-memory fake and SQLite, `tests/tests/real_referenced_bytes.rs` on
//! ClickHouse 18.16, the current engine and the replicated catalog.
//!
//! What it pins: a key's answer is the bytes of the packs whose current
//! row (the latest per pack id, as `get` reads it) names it; a pack
//! re-indexed under another object counts only there; a key no current
//! row names is absent; keys with quotes and backslashes are literals,
//! never SQL; long lists are split without changing the answer.

use spool_catalog::{Catalog, PackRow};
use spool_tests::catalog_suite::row;
use std::collections::HashMap;

/// Object keys: `MOVED_TO` sorts before `SHARED`, and fillers sort
/// between them, so that in a long list the two land in different
/// statements and the one asking about `SHARED` (which also hears about
/// the pack that moved to `MOVED_TO`, and only about that one) is sent
/// after the one asking about `MOVED_TO`.
const MOVED_TO: &str = "pre/a-moved-to.pack";
const SHARED: &str = "pre/z-shared.pack";
const ALONE: &str = "pre/b-alone.pack";
const LATER: &str = "pre/c-later.pack";
const UNKNOWN: &str = "pre/never-indexed.pack";
/// A key a literal could break on: a quote and a backslash.
const ODD: &str = r"pre/it's a \ key.pack";

fn pack(n: u64, object_key: &str, object_offset: u64) -> PackRow {
    PackRow {
        object_key: object_key.into(),
        object_offset,
        ..row(n, 1_795_000_000_000 + n)
    }
}

fn keys(list: &[&str]) -> Vec<String> {
    list.iter().map(|k| k.to_string()).collect()
}

fn map(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The case, on a fresh catalog.
pub async fn referenced_bytes_follows_the_current_row(c: &dyn Catalog) {
    assert_eq!(c.referenced_bytes(&[]).await.unwrap(), HashMap::new());
    // two packs in one object (offsets 0 and 100), one alone, one already
    // in the object the second will move to, one under an odd key
    let first = pack(1, SHARED, 0);
    let second = pack(2, SHARED, 100);
    let alone = pack(3, ALONE, 0);
    let there = pack(4, MOVED_TO, 0);
    let odd = pack(5, ODD, 0);
    c.index(
        &[
            first.clone(),
            second.clone(),
            alone.clone(),
            there.clone(),
            odd.clone(),
        ],
        None,
    )
    .await
    .unwrap();
    let all = keys(&[SHARED, ALONE, MOVED_TO, UNKNOWN, ODD]);
    assert_eq!(
        c.referenced_bytes(&all).await.unwrap(),
        map(&[
            (SHARED, first.bytes + second.bytes),
            (ALONE, alone.bytes),
            (MOVED_TO, there.bytes),
            (ODD, odd.bytes),
        ])
    );

    // the second pack is indexed again, now naming another object
    let moved = PackRow {
        object_key: MOVED_TO.into(),
        object_offset: 4096,
        ..second.clone()
    };
    c.index(std::slice::from_ref(&moved), None).await.unwrap();
    let read = c.get(&second.pack_id).await.unwrap().expect("indexed");
    assert_eq!(
        read.object_key, MOVED_TO,
        "reads see the re-indexed row: {read:?}"
    );
    let want = map(&[
        (SHARED, first.bytes),
        (ALONE, alone.bytes),
        (MOVED_TO, there.bytes + moved.bytes),
        (ODD, odd.bytes),
    ]);
    assert_eq!(c.referenced_bytes(&all).await.unwrap(), want);
    // each key asked alone: the replaced row is no answer of the key it
    // named, with or without the key its replacement names in the list
    for (key, bytes) in &want {
        assert_eq!(
            c.referenced_bytes(&keys(&[key])).await.unwrap(),
            map(&[(key, *bytes)]),
            "{key} asked alone"
        );
    }
    assert_eq!(
        c.referenced_bytes(&keys(&[UNKNOWN])).await.unwrap(),
        HashMap::new()
    );
    // repeated keys are answered once
    assert_eq!(
        c.referenced_bytes(&keys(&[SHARED, SHARED, UNKNOWN, SHARED]))
            .await
            .unwrap(),
        map(&[(SHARED, first.bytes)])
    );

    // keys are literals: spelled otherwise, escaped, or made to end the
    // literal, they name nothing (and break nothing)
    let hostile = [
        r"pre/it\'s a \\ key.pack",
        r"pre/it''s a \ key.pack",
        "pre/it's a  key.pack",
        "'",
        r"\",
        r"\'",
        "') OR 1=1 OR object_key IN ('",
        r"x\') OR 1=1 --",
        "pre/%",
    ];
    assert_eq!(
        c.referenced_bytes(&keys(&hostile)).await.unwrap(),
        HashMap::new()
    );
    let mut with_odd = keys(&hostile);
    with_odd.push(ODD.into());
    assert_eq!(
        c.referenced_bytes(&with_odd).await.unwrap(),
        map(&[(ODD, odd.bytes)])
    );

    // a list longer than one statement takes: the same answer
    let mut long: Vec<String> = (0..1200)
        .map(|i| format!("pre/m-filler-{i:04}.pack"))
        .collect();
    long.extend(all.iter().cloned());
    long.reverse();
    assert!(long.len() > 2 * spool_catalog::MAX_KEYS_PER_STATEMENT);
    assert_eq!(c.referenced_bytes(&long).await.unwrap(), want);

    // the first pack moves too: its old object is named by nobody now
    let later = PackRow {
        object_key: LATER.into(),
        ..first.clone()
    };
    c.index(std::slice::from_ref(&later), None).await.unwrap();
    let mut all_later = all.clone();
    all_later.push(LATER.into());
    assert_eq!(
        c.referenced_bytes(&all_later).await.unwrap(),
        map(&[
            (LATER, first.bytes),
            (ALONE, alone.bytes),
            (MOVED_TO, there.bytes + moved.bytes),
            (ODD, odd.bytes),
        ])
    );
    assert_eq!(
        c.referenced_bytes(&keys(&[SHARED])).await.unwrap(),
        HashMap::new(),
        "no current row names {SHARED}"
    );
}
