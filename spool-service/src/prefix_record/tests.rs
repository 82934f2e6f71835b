//! The prefix record on the in-memory store: the first drain records its
//! catalog, every later one reads it, another catalog is refused having
//! written nothing, and the record's grace is the destination's.

use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};
use spool_core::Destination;

use super::*;

/// The identity of a memory catalog tagged `tag` (tests of the drain use
/// it too).
pub(crate) fn identity(tag: &str) -> CatalogIdentity {
    CatalogIdentity::of(&destination(tag, "memory://"), "node-a")
}

fn destination(database: &str, catalog_url: &str) -> Destination {
    Destination {
        catalog_url: catalog_url.into(),
        database: database.into(),
        table_prefix: "spool_".into(),
        store_url: "memory://bucket/p".into(),
        store_id: "default".into(),
    }
}

fn store() -> (Arc<InMemory>, Store) {
    let objects = Arc::new(InMemory::new());
    let store = Store::new(objects.clone(), "p", "memory", true).unwrap();
    (objects, store)
}

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn the_first_drain_records_its_catalog_and_the_next_reads_it() {
    let (objects, store) = store();
    let first = settle(
        &store,
        &identity("a"),
        "default",
        HOUR,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(first.orphan_grace(), HOUR);
    // a second process with another configured grace gets the record's
    let second = settle(
        &store,
        &identity("a"),
        "default",
        Duration::from_secs(7200),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(
        second.orphan_grace(),
        HOUR,
        "the record's grace is the destination's"
    );
    let body = objects
        .get(&Path::from("p/_spool/destination"))
        .await
        .unwrap();
    let text = String::from_utf8(body.bytes().await.unwrap().to_vec()).unwrap();
    assert!(text.contains("\"catalog memory://\""), "{text}");
    assert!(text.contains("\"database a\""), "{text}");
    assert!(check(&store, &identity("a"), Duration::ZERO).await.is_ok());
}

#[tokio::test]
async fn another_catalog_is_refused_and_the_record_stays() {
    let (objects, store) = store();
    settle(&store, &identity("a"), "default", HOUR, Duration::ZERO)
        .await
        .unwrap();
    let before = objects
        .get(&record_key(&store))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    for refused in [
        settle(&store, &identity("typo"), "default", HOUR, Duration::ZERO).await,
        check(&store, &identity("typo"), Duration::ZERO).await,
    ] {
        let e = refused.unwrap_err();
        assert!(matches!(e, Error::PrefixServesAnother { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("database a") && msg.contains("database typo"),
            "{msg}"
        );
    }
    let after = objects
        .get(&record_key(&store))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(before, after);
}

/// Two nodes' embedded catalogs spelled alike are two catalogs.
#[tokio::test]
async fn two_nodes_embedded_catalogs_are_two_catalogs() {
    let (_objects, store) = store();
    let sqlite = destination("main", "sqlite:///var/lib/spool/.catalog.db");
    let a = CatalogIdentity::of(&sqlite, "node-a");
    let b = CatalogIdentity::of(&sqlite, "node-b");
    settle(&store, &a, "default", HOUR, Duration::from_secs(10))
        .await
        .unwrap();
    let e = settle(&store, &b, "default", HOUR, Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::PrefixServesAnother { .. }), "{e}");
    // a ClickHouse catalog is the same one from every node
    let ch = destination("spool", "clickhouse://ch1:8123/spool");
    assert_eq!(
        CatalogIdentity::of(&ch, "node-a"),
        CatalogIdentity::of(&ch, "node-b")
    );
}

#[tokio::test]
async fn a_grace_below_four_catalog_requests_is_refused() {
    let (objects, store) = store();
    let e = settle(
        &store,
        &identity("a"),
        "default",
        Duration::from_secs(119),
        Duration::from_secs(30),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::GraceTooShort { .. }), "{e}");
    assert!(e.to_string().contains("120s"), "{e}");
    assert!(
        objects.head(&record_key(&store)).await.is_err(),
        "nothing written"
    );
    settle(
        &store,
        &identity("a"),
        "default",
        Duration::from_secs(120),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    // a process whose catalog requests may take longer refuses the record's
    let e = check(&store, &identity("a"), Duration::from_secs(31))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::GraceTooShort { .. }), "{e}");
}

#[tokio::test]
async fn something_else_at_the_key_is_refused_never_overwritten() {
    let (objects, store) = store();
    objects
        .put(&record_key(&store), PutPayload::from_static(b"not json"))
        .await
        .unwrap();
    let e = settle(&store, &identity("a"), "default", HOUR, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::PrefixRecord {
                retryable: false,
                ..
            }
        ),
        "{e}"
    );
    let body = objects
        .get(&record_key(&store))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&body[..], b"not json");
    objects
        .put(&record_key(&store), PutPayload::from(vec![b' '; 70_000]))
        .await
        .unwrap();
    let e = read(&store).await.unwrap_err();
    assert!(e.to_string().contains("70000 bytes"), "{e}");
}

#[tokio::test]
async fn a_sweep_needs_a_record_and_a_take_over_writes_one() {
    let (_objects, store) = store();
    let e = check(&store, &identity("a"), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NoPrefixRecord { .. }), "{e}");
    settle(&store, &identity("a"), "default", HOUR, Duration::ZERO)
        .await
        .unwrap();
    let taken = take_over(
        &store,
        &identity("b"),
        "default",
        Duration::from_secs(60),
        Duration::ZERO,
    )
    .await
    .unwrap();
    assert_eq!(
        taken.orphan_grace(),
        HOUR,
        "a take-over keeps the destination's grace"
    );
    assert!(check(&store, &identity("b"), Duration::ZERO).await.is_ok());
    assert!(check(&store, &identity("a"), Duration::ZERO).await.is_err());
}

#[test]
fn records_are_spools_own_keys() {
    let (_objects, store) = store();
    assert!(is_record(&store, &Path::from("p/_spool/destination")));
    assert!(is_record(&store, &Path::from("p/_spool/clock")));
    assert!(!is_record(&store, &Path::from("p/v2/0a/x.bundle")));
    assert!(!is_record(&store, &Path::from("q/_spool/destination")));
}
