//! One behavioural suite for every [`Catalog`] implementation:
//! `tests/tests/catalog_fast.rs` runs it on the in-memory fake and SQLite,
//! `tests/src/clickhouse_suite.rs` on the real ClickHouse engines (18.16
//! and the current one).
//!
//! Each case takes a [`Fixture`]: a fresh, empty catalog and a way to open
//! the same storage again as a new catalog object (which re-runs the schema
//! check).

use async_trait::async_trait;
use spool_catalog::{
    Catalog, Error, LeaseClaim, LeaseConfig, LeaseGuard, LeaseHead, LeaseRecord, NewClaim, PackRow,
};
use std::sync::Arc;
use std::time::Duration;

/// Calls the macro named in brackets with `$args` and then the name of
/// every case each catalog runs (all but the contender processes and the
/// lease timing cases, which take more), so the list is written once:
/// `catalog_suite_cases!([m] x,)` expands to `m!(x, index_get_list_count, ...)`.
#[macro_export]
macro_rules! catalog_suite_cases {
    ([$($m:tt)*] $($args:tt)*) => {
        $($m)*!(
            $($args)*
            index_get_list_count,
            hostile_text_round_trips,
            reindex_reads_one_row,
            lease_lifecycle,
            fence_and_reacquire,
            contested_term_has_at_most_one_holder,
            newer_schema_version_refused,
            migration_from_v1_keeps_rows,
        );
    };
}

/// A fresh catalog under test.
pub struct Fixture {
    /// The catalog.
    pub catalog: Arc<dyn Catalog>,
    /// Opens the same storage as a new catalog object.
    pub reopen: Box<dyn Fn() -> Arc<dyn Catalog> + Send + Sync>,
    /// The catalog's URL (for the test seams of `spool_catalog::testing`).
    pub url: String,
}

/// The lease timing the suite uses: ttl 6 s, renew 2 s, margin 2 s.
pub fn short_lease() -> LeaseConfig {
    LeaseConfig {
        ttl: Duration::from_secs(6),
        renew_interval: Duration::from_secs(2),
        fence_margin: Duration::from_secs(2),
    }
}

/// A well-formed row for pack number `n` created at `created_at_ms`.
pub fn row(n: u64, created_at_ms: u64) -> PackRow {
    let pack_id = format!("{:016x}{:016x}", created_at_ms, n);
    PackRow {
        object_key: format!("pre/v1/date=2026-11-29/{pack_id}.pack"),
        // packs sharing objects sit at offsets; the first is at 0
        object_offset: n * 4096,
        pack_id,
        store_id: "default".into(),
        sha256: format!("{:064x}", n + 1),
        bytes: 1000 + n,
        records: 10 + n,
        source_host: "node-a".into(),
        source_pid: 4242,
        rank_dir: "r0-0badcafe".into(),
        // every third row has no ordinal (a sink without one)
        ordinal: (n % 3 != 2).then_some((n % 3) as u32),
        created_at_ms,
        indexed_at_ms: 0,
        trailer_sha256: format!("{:064x}", n + 0xdead_0000),
    }
}

fn held(c: LeaseClaim) -> LeaseGuard {
    match c {
        LeaseClaim::Held(g) => g,
        other => panic!("expected the lease to be held, got {other:?}"),
    }
}

fn same_row(got: &PackRow, want: &PackRow) {
    let mut got = got.clone();
    assert!(got.indexed_at_ms > 0, "indexed_at_ms is stamped: {got:?}");
    got.indexed_at_ms = 0;
    assert_eq!(&got, want);
}

/// Schema twice, index, get, list by time, count.
pub async fn index_get_list_count(fx: Fixture) {
    let c = &fx.catalog;
    c.ensure_schema().await.unwrap();
    c.ensure_schema().await.unwrap();
    assert_eq!(c.count().await.unwrap(), 0);
    let rows = vec![row(1, 1_000_000), row(2, 2_000_000), row(3, 3_000_000)];
    c.index(&rows, None).await.unwrap();
    assert_eq!(c.count().await.unwrap(), 3);
    for r in &rows {
        same_row(&c.get(&r.pack_id).await.unwrap().expect("indexed"), r);
    }
    assert!(c.get(&"f".repeat(32)).await.unwrap().is_none());
    let e = c.get("not-a-pack-id").await.unwrap_err();
    assert!(matches!(e, Error::InvalidRow { .. }), "{e}");
    let mid = c.list_range(1_500_000, 3_000_000).await.unwrap();
    assert_eq!(mid.len(), 1);
    same_row(&mid[0], &rows[1]);
    let all = c.list_range(0, u64::MAX / 2).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|r| r.pack_id.as_str()).collect();
    assert_eq!(ids, [&rows[0].pack_id, &rows[1].pack_id, &rows[2].pack_id]);
    // A new object on the same storage reads the same rows.
    let again = (fx.reopen)();
    assert_eq!(again.count().await.unwrap(), 3);
    // Text with quotes and backslashes goes through SQL text intact.
    let mut odd = row(9, 4_000_000);
    odd.object_key = r"pre/it's a \ key/x.pack".into();
    odd.source_host = "host'); DROP TABLE x; --".into();
    c.index(std::slice::from_ref(&odd), None).await.unwrap();
    same_row(&c.get(&odd.pack_id).await.unwrap().unwrap(), &odd);
    // A malformed row is refused before anything is written.
    let mut bad = row(10, 5_000_000);
    bad.sha256 = "xyz".into();
    let e = c.index(&[row(11, 5_000_000), bad], None).await.unwrap_err();
    assert!(matches!(e, Error::InvalidRow { .. }), "{e}");
    let mut bad = row(12, 5_000_000);
    bad.trailer_sha256 = "AB".repeat(32);
    let e = c.index(&[row(11, 5_000_000), bad], None).await.unwrap_err();
    assert!(e.to_string().contains("trailer_sha256"), "{e}");
    assert_eq!(c.count().await.unwrap(), 4);
}

/// Hostile text in every text column goes through each insert shape
/// (unfenced and fenced) byte for byte: quotes, backslashes, escape-like
/// sequences (`\N`, `\'`, `\0` spelled out), SQL and `VALUES` punctuation,
/// the `?` and `??` a client-side binder would eat, and non-ASCII. Control
/// characters (tab, newline, carriage return, NUL) are refused before
/// anything is written.
pub async fn hostile_text_round_trips(fx: Fixture) {
    let c = &fx.catalog;
    let hostile = [
        r"it's a \ path",
        r"\'); DROP TABLE x; --",
        r"\N",
        "NULL",
        r"\0 \t \n \\ \x00",
        "'), ('",
        "a?b ?? ?fields {x:String}",
        "naïve-host-ünïcødé-日本-🦀",
        "`backtick` \"double\" $1 %s",
    ];
    let cfg = short_lease();
    let g = held(c.acquire("hostile", "a", &cfg).await.unwrap());
    let mut n = 100;
    for (i, text) in hostile.iter().enumerate() {
        for fenced in [false, true] {
            n += 1;
            let mut r = row(n, 7_000_000 + n);
            r.object_key = format!("pre/{text}/{}.pack", r.pack_id);
            r.store_id = text.to_string();
            r.source_host = text.to_string();
            r.rank_dir = format!("r{i}-{text}");
            c.index(std::slice::from_ref(&r), fenced.then_some(&g))
                .await
                .unwrap_or_else(|e| panic!("{text:?} (fenced: {fenced}): {e}"));
            same_row(&c.get(&r.pack_id).await.unwrap().expect("indexed"), &r);
        }
    }
    // A batch of them at once, beside ordinary rows.
    let batch: Vec<PackRow> = hostile
        .iter()
        .enumerate()
        .map(|(i, text)| PackRow {
            source_host: text.to_string(),
            rank_dir: text.to_string(),
            ..row(200 + i as u64, 8_000_000 + i as u64)
        })
        .collect();
    c.index(&batch, None).await.unwrap();
    for r in &batch {
        same_row(&c.get(&r.pack_id).await.unwrap().unwrap(), r);
    }
    let before = c.count().await.unwrap();
    assert_eq!(before, 2 * hostile.len() as u64 + batch.len() as u64);
    for ctl in ["tab\there", "new\nline", "cr\rhere", "nul\0here"] {
        for field in ["source_host", "rank_dir"] {
            let mut r = row(300, 9_000_000);
            match field {
                "source_host" => r.source_host = ctl.into(),
                _ => r.rank_dir = ctl.into(),
            }
            let e = c.index(&[row(301, 9_000_001), r], None).await.unwrap_err();
            assert!(matches!(e, Error::InvalidRow { .. }), "{ctl:?}: {e}");
            assert!(e.to_string().contains(field), "{e}");
        }
    }
    assert_eq!(
        c.count().await.unwrap(),
        before,
        "a refused batch writes nothing"
    );
}

/// The same pack indexed twice (and twice in one batch) reads as one row.
pub async fn reindex_reads_one_row(fx: Fixture) {
    let c = &fx.catalog;
    let r = row(1, 1_000_000);
    c.index(std::slice::from_ref(&r), None).await.unwrap();
    c.index(std::slice::from_ref(&r), None).await.unwrap();
    c.index(&[r.clone(), r.clone(), row(2, 1_000_001)], None)
        .await
        .unwrap();
    assert_eq!(c.count().await.unwrap(), 2);
    assert_eq!(c.list_range(0, 2_000_000).await.unwrap().len(), 2);
    same_row(&c.get(&r.pack_id).await.unwrap().unwrap(), &r);
    assert_eq!((fx.reopen)().count().await.unwrap(), 2);
}

/// Acquire, busy for a rival, renew (same lease id, next term), release
/// (tombstone), rival acquires with a new lease id and a higher term.
pub async fn lease_lifecycle(fx: Fixture) {
    let c = &fx.catalog;
    let cfg = short_lease();
    let a = held(c.acquire("key/node", "a", &cfg).await.unwrap());
    assert_eq!((a.term, a.acquired_term), (1, 1));
    match c.acquire("key/node", "b", &cfg).await.unwrap() {
        LeaseClaim::Busy {
            holder,
            term,
            expires_in,
        } => {
            assert_eq!((holder.as_str(), term), ("a", 1));
            assert!(expires_in <= cfg.ttl, "{expires_in:?}");
        }
        other => panic!("rival should be refused, got {other:?}"),
    }
    // The same holder name acquiring again is a rival too (a restarted
    // process waits out its predecessor's lease).
    assert!(matches!(
        c.acquire("key/node", "a", &cfg).await.unwrap(),
        LeaseClaim::Busy { .. }
    ));
    let a2 = held(c.renew(&a).await.unwrap());
    assert_eq!((a2.lease_id, a2.term, a2.acquired_term), (a.lease_id, 2, 1));
    assert!(c.release(&a2).await.unwrap());
    assert!(
        !c.release(&a2).await.unwrap(),
        "a second release finds nothing of ours"
    );
    let b = held(c.acquire("key/node", "b", &cfg).await.unwrap());
    assert_ne!(b.lease_id, a.lease_id);
    assert_eq!(b.term, 4);
    let log = c.lease_log("key/node").await.unwrap();
    let terms: Vec<u64> = log.iter().map(|r| r.term).collect();
    assert_eq!(terms, [1, 2, 3, 4]);
    let tomb = &log[2];
    assert_eq!(tomb.lease_id, a.lease_id);
    assert_eq!(
        tomb.expires_at_ms, tomb.acquired_at_ms,
        "a tombstone expires at once"
    );
    assert_eq!(log[0].expires_at_ms - log[0].acquired_at_ms, 6000);
    // Renewing a superseded holding says so.
    assert!(matches!(
        c.renew(&a2).await.unwrap(),
        LeaseClaim::Busy { .. }
    ));
    // Another name (another node) is independent.
    let other = held(c.acquire("key/other-node", "a", &cfg).await.unwrap());
    assert_eq!(other.term, 1);
}

/// The fence: the holder's insert lands, a deposed holder's inserts
/// nothing, and re-acquiring mints a new lease id whose fence is the only
/// one that passes.
pub async fn fence_and_reacquire(fx: Fixture) {
    let c = &fx.catalog;
    let cfg = short_lease();
    let g1 = held(c.acquire("k", "a", &cfg).await.unwrap());
    c.index(&[row(1, 1_000)], Some(&g1)).await.unwrap();
    assert!(c.release(&g1).await.unwrap());
    let e = c.index(&[row(2, 2_000)], Some(&g1)).await.unwrap_err();
    assert!(
        matches!(e, Error::Fenced { .. }) && !e.is_retryable(),
        "{e}"
    );
    assert!(e.to_string().contains("nothing was indexed"), "{e}");
    assert!(c.get(&row(2, 2_000).pack_id).await.unwrap().is_none());
    let rival = held(c.acquire("k", "b", &cfg).await.unwrap());
    let e = c.index(&[row(3, 3_000)], Some(&g1)).await.unwrap_err();
    assert!(matches!(e, Error::Fenced { .. }), "{e}");
    c.index(&[row(4, 4_000)], Some(&rival)).await.unwrap();
    assert!(c.release(&rival).await.unwrap());
    // A re-acquires: new lease id, new term; the old fence never passes.
    let g2 = held(c.acquire("k", "a", &cfg).await.unwrap());
    assert_ne!(g2.lease_id, g1.lease_id);
    assert!(g2.term > rival.term && g2.acquired_term == g2.term);
    let e = c.index(&[row(5, 5_000)], Some(&g1)).await.unwrap_err();
    assert!(matches!(e, Error::Fenced { .. }), "{e}");
    c.index(&[row(6, 6_000), row(7, 7_000)], Some(&g2))
        .await
        .unwrap();
    let ids: Vec<String> = c
        .list_range(0, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.pack_id)
        .collect();
    let want: Vec<String> = [1, 4, 6, 7]
        .iter()
        .map(|n| row(*n, *n * 1000).pack_id)
        .collect();
    assert_eq!(ids, want);
    // A fence on another name does not open this one.
    let other = held(c.acquire("k2", "a", &cfg).await.unwrap());
    let mut forged = other.clone();
    forged.name = "k".into();
    assert!(matches!(
        c.index(&[row(8, 8_000)], Some(&forged)).await.unwrap_err(),
        Error::Fenced { .. }
    ));
}

/// A catalog whose `append_claim` waits until `n` claimants are there, so
/// contenders that read the same head append the same term at once.
struct Lockstep {
    inner: Arc<dyn Catalog>,
    barrier: tokio::sync::Barrier,
}

#[async_trait]
impl Catalog for Lockstep {
    fn server(&self) -> String {
        self.inner.server()
    }
    async fn ensure_schema(&self) -> spool_catalog::Result<()> {
        self.inner.ensure_schema().await
    }
    async fn index(
        &self,
        rows: &[PackRow],
        fence: Option<&LeaseGuard>,
    ) -> spool_catalog::Result<()> {
        self.inner.index(rows, fence).await
    }
    async fn get(&self, id: &str) -> spool_catalog::Result<Option<PackRow>> {
        self.inner.get(id).await
    }
    async fn list_range(&self, a: u64, b: u64) -> spool_catalog::Result<Vec<PackRow>> {
        self.inner.list_range(a, b).await
    }
    async fn count(&self) -> spool_catalog::Result<u64> {
        self.inner.count().await
    }
    async fn read_lease_head(&self, name: &str) -> spool_catalog::Result<LeaseHead> {
        self.inner.read_lease_head(name).await
    }
    async fn append_claim(&self, claim: &NewClaim) -> spool_catalog::Result<()> {
        self.barrier.wait().await;
        self.inner.append_claim(claim).await
    }
    async fn read_claims(&self, name: &str, term: u64) -> spool_catalog::Result<Vec<LeaseRecord>> {
        self.inner.read_claims(name, term).await
    }
    async fn lease_log(&self, name: &str) -> spool_catalog::Result<Vec<LeaseRecord>> {
        self.inner.lease_log(name).await
    }
}

/// Two claimants that read the same head and append the same term: at most
/// one holds it (the read-back), and a contested head does not block the
/// next claimant.
pub async fn contested_term_has_at_most_one_holder(fx: Fixture) {
    let cfg = short_lease();
    fx.catalog.ensure_schema().await.unwrap();
    for round in 0..3 {
        let name = format!("contested-{round}");
        let lock = Arc::new(Lockstep {
            inner: fx.catalog.clone(),
            barrier: tokio::sync::Barrier::new(2),
        });
        let (l1, l2) = (lock.clone(), lock.clone());
        let (n1, n2) = (name.clone(), name.clone());
        let a = tokio::spawn(async move { l1.acquire(&n1, "a", &cfg).await.unwrap() });
        let b = tokio::spawn(async move { l2.acquire(&n2, "b", &cfg).await.unwrap() });
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        let holders = [&a, &b]
            .iter()
            .filter(|c| matches!(c, LeaseClaim::Held(_)))
            .count();
        assert!(holders <= 1, "two holders of term 1: {a:?} {b:?}");
        let log = fx.catalog.lease_log(&name).await.unwrap();
        let winner = match (&a, &b) {
            (LeaseClaim::Held(g), _) | (_, LeaseClaim::Held(g)) if log.len() == 1 => g.clone(),
            _ => {
                // Both claims landed at term 1: contested. Whoever read back
                // first may believe it holds, but its fence stays shut, and
                // the next claimant gets term 2.
                assert_eq!(log.len(), 2, "{log:?}");
                for c in [&a, &b] {
                    if let LeaseClaim::Held(g) = c {
                        let e = fx.catalog.index(&[row(100 + round, 1)], Some(g)).await;
                        assert!(matches!(e, Err(Error::Fenced { .. })), "{e:?}");
                    }
                }
                let g = held(fx.catalog.acquire(&name, "c", &cfg).await.unwrap());
                assert_eq!(g.term, 2);
                g
            }
        };
        fx.catalog
            .index(&[row(round, 1_000 + round)], Some(&winner))
            .await
            .unwrap();
    }
}

/// A newer schema version is refused with a clear message, before any read
/// or write.
pub async fn newer_schema_version_refused(fx: Fixture) {
    fx.catalog.index(&[row(1, 1_000)], None).await.unwrap();
    let newer = spool_catalog::SCHEMA_VERSION + 1;
    spool_catalog::testing::set_schema_version(&fx.url, newer)
        .await
        .unwrap();
    let fresh = (fx.reopen)();
    let e = fresh.ensure_schema().await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::SchemaVersion { found, expected, .. }
                if found == newer && expected == spool_catalog::SCHEMA_VERSION
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("schema version {newer}")) && msg.contains("upgrade"),
        "{msg}"
    );
    assert!(msg.contains(&fresh.server()), "{msg}");
    assert!(!e.is_retryable());
    for e in [
        fresh.count().await.unwrap_err(),
        fresh.index(&[row(2, 2_000)], None).await.unwrap_err(),
    ] {
        assert!(matches!(e, Error::SchemaVersion { .. }), "{e}");
    }
}

/// A catalog of schema version 1 (made with version 1's own
/// DDL, `ordinal` NOT NULL, and rows written as version 1 wrote them) is
/// migrated when this build first opens it: the old rows read back as
/// they were, a new row with no ordinal (and a producer's host and pid)
/// reads back with `None` — distinct from an old row's `Some(0)` — old
/// rows read their `sha256` (then the trailer's checksum) as their
/// `trailer_sha256` too, the version row says 4, and opening it again
/// changes nothing.
pub async fn migration_from_v1_keeps_rows(fx: Fixture) {
    let old: Vec<PackRow> = (0..3)
        .map(|n| PackRow {
            ordinal: Some(n as u32),
            indexed_at_ms: 5_000 + n,
            ..row(n, 1_000 + n)
        })
        .collect();
    spool_catalog::testing::create_v1(&fx.url, &old)
        .await
        .unwrap();
    assert_eq!(
        spool_catalog::testing::schema_version(&fx.url)
            .await
            .unwrap(),
        1
    );
    // Opening it runs the migration (once per catalog object).
    fx.catalog.ensure_schema().await.unwrap();
    assert_eq!(
        spool_catalog::testing::schema_version(&fx.url)
            .await
            .unwrap(),
        spool_catalog::SCHEMA_VERSION
    );
    for r in &old {
        let got = fx.catalog.get(&r.pack_id).await.unwrap().unwrap();
        assert_eq!(
            (
                &got.source_host,
                got.source_pid,
                got.ordinal,
                got.bytes,
                &got.sha256
            ),
            (&r.source_host, r.source_pid, r.ordinal, r.bytes, &r.sha256),
            "an old row reads back as written"
        );
        // before version 5 every pack was its whole object: offset 0
        assert_eq!(got.object_offset, 0, "{got:?}");
        // before version 4 a row's sha256 was its trailer's checksum: it
        // reads back in trailer_sha256 too, and the row says so
        assert_eq!(got.trailer_sha256, r.sha256, "{got:?}");
        assert!(!got.whole_sha256(), "{got:?}");
    }
    let new = PackRow {
        source_host: "node-producer".into(),
        source_pid: 31337,
        ordinal: None,
        ..row(10, 2_000)
    };
    fx.catalog
        .index(std::slice::from_ref(&new), None)
        .await
        .unwrap();
    let fresh = (fx.reopen)();
    fresh.ensure_schema().await.unwrap();
    let got = fresh.get(&new.pack_id).await.unwrap().unwrap();
    assert_eq!(got.ordinal, None, "no ordinal reads back as none, not 0");
    assert_eq!(
        (&got.sha256, &got.trailer_sha256),
        (&new.sha256, &new.trailer_sha256),
        "a new row keeps both hashes apart"
    );
    assert!(got.whole_sha256());
    assert!(
        got.indexed_at_ms > 1_600_000_000_000,
        "a row indexed after the migration is stamped by the catalog clock: {got:?}"
    );
    assert_eq!(
        (got.source_host.as_str(), got.source_pid),
        ("node-producer", 31337)
    );
    let listed = fresh.list_range(0, u64::MAX).await.unwrap();
    let ordinals: Vec<Option<u32>> = listed.iter().map(|r| r.ordinal).collect();
    assert_eq!(ordinals, vec![Some(0), Some(1), Some(2), None]);
    assert_eq!(fresh.count().await.unwrap(), 4);
    assert_eq!(
        spool_catalog::testing::schema_version(&fx.url)
            .await
            .unwrap(),
        spool_catalog::SCHEMA_VERSION
    );
}

/// (Timing; run in a `serial` module.) A holder that stops renewing loses
/// the lease after its TTL; the rival takes it with a higher term and a new
/// lease id; the deposed keeper latches once the rival's lease has outlived
/// 2 × TTL, and not before.
pub async fn ttl_expiry_takeover_and_latch(fx: Fixture) {
    use spool_catalog::LeaseKeeper;
    use tokio::time::{sleep, Instant};
    let cfg = short_lease();
    fx.catalog.ensure_schema().await.unwrap();
    let mut a = LeaseKeeper::new(
        fx.catalog.clone(),
        "node-lease",
        spool_catalog::LeaseHolder::parse("a"),
        cfg,
    )
    .unwrap();
    let mut b = LeaseKeeper::new(
        fx.catalog.clone(),
        "node-lease",
        spool_catalog::LeaseHolder::parse("b"),
        cfg,
    )
    .unwrap();
    let sa = a.tick().await;
    assert!(sa.held(), "{sa:?}");
    let ga = sa.guard.clone().unwrap();
    // a stops renewing; b polls.
    let start = Instant::now();
    let gb = loop {
        let sb = b.tick().await;
        if let Some(g) = sb.guard.clone() {
            break g;
        }
        assert!(!sb.latched, "b never held, so it does not latch: {sb:?}");
        assert_eq!(sb.foreign_holder.as_ref().map(|h| h.as_str()), Some("a"));
        assert!(
            start.elapsed() < cfg.ttl + Duration::from_secs(3),
            "b waited too long"
        );
        sleep(Duration::from_millis(200)).await;
    };
    let waited = start.elapsed();
    assert!(
        waited >= cfg.ttl - Duration::from_secs(2),
        "b took the lease after {waited:?}, before a's ttl {:?} ran out",
        cfg.ttl
    );
    assert!(
        gb.term > ga.term && gb.lease_id != ga.lease_id,
        "{ga:?} {gb:?}"
    );
    // a's stale fence is shut.
    let e = fx.catalog.index(&[row(1, 1)], Some(&ga)).await.unwrap_err();
    assert!(matches!(e, Error::Fenced { .. }), "{e}");
    // a wakes up: lost; b keeps renewing; a latches only after 2 x TTL.
    // 2 x TTL, spelled out here rather than read from the config.
    let two_ttl = cfg.ttl * 2;
    let lost_at = Instant::now();
    let mut latched_after = None;
    while lost_at.elapsed() < two_ttl + Duration::from_secs(4) {
        let sb = b.tick().await;
        assert!(sb.held(), "b keeps its lease while renewing: {sb:?}");
        let sa = a.tick().await;
        assert!(!sa.held());
        if sa.latched {
            latched_after = Some(lost_at.elapsed());
            break;
        }
        sleep(Duration::from_millis(250)).await;
    }
    let latched_after = latched_after.expect("a latched within 2 x TTL + 4 s");
    assert!(
        latched_after >= two_ttl - Duration::from_millis(500),
        "a latched after {latched_after:?}, before 2 x TTL"
    );
    let st = a.state();
    assert_eq!((st.acquisitions, st.losses), (1, 1), "{st:?}");
    // A latched keeper never claims again, even once the lease is free.
    b.release().await.unwrap();
    let st = a.tick().await;
    assert!(st.latched && !st.held());
    assert_eq!(a.state().acquisitions, 1);
}

/// (Timing; run in a `serial` module.) The fence shuts once the lease has
/// less than the fence margin to live, before it expires.
pub async fn fence_shuts_inside_the_margin(fx: Fixture) {
    let cfg = short_lease();
    let g = held(fx.catalog.acquire("margin", "a", &cfg).await.unwrap());
    fx.catalog.index(&[row(1, 1)], Some(&g)).await.unwrap();
    // ttl 6 s, margin 2 s: after ~4.5 s the lease still lives but has less
    // than the margin left.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let head = fx.catalog.read_lease_head("margin").await.unwrap();
    assert!(
        head.live_holder().is_some_and(|h| h.lease_id == g.lease_id),
        "still ours and live: {head:?}"
    );
    let e = fx.catalog.index(&[row(2, 2)], Some(&g)).await.unwrap_err();
    assert!(matches!(e, Error::Fenced { .. }), "{e}");
    assert!(fx.catalog.get(&row(2, 2).pack_id).await.unwrap().is_none());
}

/// Two contender processes on one lease name and a third on another name
/// (`lease-contender`, the binary at `contender`): never two holders of one
/// term; every stale (deposed) fenced insert inserts nothing; every live one
/// lands; the other name's contender holds every round undisturbed.
pub async fn contenders_across_processes(fx: Fixture, url: &str, contender: &str) {
    use std::collections::{HashMap, HashSet};
    use std::process::{Command, Stdio};
    fx.catalog.ensure_schema().await.unwrap();
    let spawn = |name: &str, holder: &str, rounds: &str, stall_every: &str| {
        Command::new(contender)
            .args([url, name, holder, rounds, stall_every])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {contender}: {e}"))
    };
    let a = spawn("shared", "a", "8", "4");
    let b = spawn("shared", "b", "8", "4");
    let c = spawn("other-node", "c", "6", "0");
    let parse = |child: std::process::Child, who: &str| -> Vec<serde_json::Value> {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "contender {who} failed: {}",
            out.status
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (ea, eb, ec) = (parse(a, "a"), parse(b, "b"), parse(c, "c"));
    let evs = |e: &[serde_json::Value], ev: &str| -> Vec<serde_json::Value> {
        e.iter().filter(|v| v["ev"] == ev).cloned().collect()
    };
    // Never two holders of one term.
    let mut holder_of: HashMap<u64, &str> = HashMap::new();
    for (who, e) in [("a", &ea), ("b", &eb)] {
        let helds = evs(e, "held");
        assert_eq!(helds.len(), 8, "{who} held every round: {e:?}");
        for h in helds {
            let term = h["term"].as_u64().unwrap();
            if let Some(other) = holder_of.insert(term, who) {
                panic!("term {term} held by both {other} and {who}");
            }
        }
    }
    // Deposed writers inserted nothing; every live insert landed.
    let mut stale = 0;
    for e in [&ea, &eb] {
        for s in evs(e, "stale") {
            stale += 1;
            assert_eq!(
                s["result"], "fenced",
                "a deposed writer's insert landed: {s}"
            );
            let id = s["pack"].as_str().unwrap();
            assert!(
                fx.catalog.get(id).await.unwrap().is_none(),
                "{id} is in the catalog"
            );
        }
        for s in evs(e, "fenced_live") {
            // Only a contested term (a rival's claim landing after our
            // read-back) may shut a fresh holder's fence.
            let term = s["term"].as_u64().unwrap();
            let log = fx.catalog.lease_log("shared").await.unwrap();
            let at = log.iter().filter(|r| r.term == term).count();
            assert!(
                at >= 2,
                "a fresh holder's fence was shut at uncontested term {term}: {s}"
            );
        }
        for s in evs(e, "indexed") {
            let id = s["pack"].as_str().unwrap();
            assert!(fx.catalog.get(id).await.unwrap().is_some(), "{id} missing");
        }
    }
    assert_eq!(stale, 4);
    // The other name: six rounds, terms 1..=12 (claim + tombstone each),
    // all indexed.
    let terms: HashSet<u64> = evs(&ec, "held")
        .iter()
        .map(|h| h["term"].as_u64().unwrap())
        .collect();
    assert_eq!(terms, (0..6).map(|i| 1 + 2 * i).collect::<HashSet<u64>>());
    assert_eq!(evs(&ec, "indexed").len(), 6);
    let indexed = evs(&ea, "indexed").len() + evs(&eb, "indexed").len();
    assert!(indexed >= 14, "most live inserts land: {indexed}");
    assert_eq!(fx.catalog.count().await.unwrap(), indexed as u64 + 6);
}
