//! The storage service against the real servers `cargo xtask test` starts:
//! ClickHouse as the catalog and moto as the store, each behind the
//! fault-injecting proxy, so one server's traffic can cut the other (cut the
//! catalog at the first upload). Each test works in its own
//! ClickHouse database and its own store prefix, and drops both afterwards.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spool_catalog::CatalogUrl;
use spool_core::Destination;
use spool_service::{Error, StorageService};
use spool_tests::proxy::{EventKind, Proxy};
use spool_tests::servers::{proxied_servers, s3_object_store};
use spool_tests::service::{files, is_adopting, is_held, wait_for, Fixture};
use spool_tests::upload_suite::prefix;

/// Two dead siblings; the catalog is cut the moment the first adopted pack
/// is PUT. The first sibling's round is uploaded and owed (its files kept,
/// its lock held), the second is not touched (nothing is adopted while
/// anything is owed), adoption is owed and a flush times out saying what
/// is owed. With the catalog back both are adopted and every pack reads
/// back byte-equal from ClickHouse + moto.
#[test]
fn a_catalog_cut_at_the_first_upload_owes_one_sibling_and_keeps_the_other_whole() {
    let Some(sv) = proxied_servers() else { return };
    let (url, m) = (sv.url.clone(), &sv.moto);
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&url).unwrap() else {
        unreachable!()
    };
    let p = prefix("service-catalog-cut");
    let dest = Destination {
        catalog_url: url.clone(),
        database: t.database.clone(),
        table_prefix: t.table_prefix.clone(),
        store_url: format!("s3://{}/{p}", m.bucket),
        store_id: "default".into(),
    };
    let fx = Fixture::with_backends(
        dest,
        s3_object_store(&sv.s3_proxy.url(), &m.bucket),
        &p,
        spool_catalog::open(&url).unwrap(),
    );
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        case(&fx, &sv.proxied_url, &sv.ch_proxy, &sv.s3_proxy)
    }));
    sv.rt
        .block_on(async {
            fx.clear_store().await;
            sv.admin.testing_drop_database().await
        })
        .unwrap_or_else(|e| panic!("could not drop the test database of {url}: {e}"));
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

fn case(fx: &Fixture, proxied_catalog: &str, ch_proxy: &Arc<Proxy>, s3_proxy: &Proxy) {
    let own = fx.claim(0);
    let (a, packs_a) = fx.dead_sibling(1, 3);
    let (b, packs_b) = fx.dead_sibling(2, 3);
    let fired = Arc::new(AtomicBool::new(false));
    {
        let (ch, fired) = (ch_proxy.clone(), fired.clone());
        s3_proxy.on_event(move |e| {
            if e.kind == EventKind::Received
                && e.method == "PUT"
                && !fired.swap(true, Ordering::SeqCst)
            {
                ch.set_refusing(true);
            }
        });
    }
    let mut c = fx.config(own.dir());
    c.catalog = spool_catalog::open(proxied_catalog).unwrap();
    c.upload.max_workers = 4;
    c.recheck_interval = Duration::from_secs(1);
    let mut svc = StorageService::new(c).unwrap();
    svc.start().unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || svc.snapshot().pending_index
            == 3),
        "the first sibling's round is not owed: {:?}",
        svc.snapshot()
    );
    assert!(fired.load(Ordering::SeqCst));
    // Give the loop time to (wrongly) go on to the second sibling.
    std::thread::sleep(Duration::from_secs(2));
    let (first, second) = if is_adopting(&a) { (&a, &b) } else { (&b, &a) };
    assert!(is_adopting(first), "the owed sibling stays held");
    assert!(
        !is_held(second),
        "the second sibling is not taken while anything is owed"
    );
    assert_eq!(files(first, "ready"), 3, "owed packs keep their files");
    assert_eq!(files(second, "ready"), 3, "the second sibling is whole");
    let snap = svc.snapshot();
    assert_eq!((snap.pending_index, snap.indexed), (3, 0), "{snap:?}");
    assert!(snap.adoption_owed, "{snap:?}");
    let t = Instant::now();
    let err = svc.flush(Duration::from_secs(2)).unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "flush took {:?}",
        t.elapsed()
    );
    assert!(matches!(err, Error::FlushTimeout { owed: 3, .. }), "{err}");
    assert!(
        err.to_string()
            .contains("3 pack(s) uploaded but not indexed"),
        "{err}"
    );

    ch_proxy.set_refusing(false);
    assert!(
        wait_for(Duration::from_secs(60), || !a.exists() && !b.exists()),
        "not adopted once the catalog came back: {:?}",
        svc.snapshot()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        fx.read_back(&packs_a).await;
        fx.read_back(&packs_b).await;
        assert_eq!(fx.catalog.count().await.unwrap(), 6);
    });
    let snap = svc.snapshot();
    assert_eq!(
        (snap.adopted_spools, snap.adopted_packs),
        (2, 6),
        "{snap:?}"
    );
    svc.stop().unwrap();
    assert!(own.release_and_remove_if_empty().unwrap());
}
