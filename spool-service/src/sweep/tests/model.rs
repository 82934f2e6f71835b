//! A model of the store, the catalog and the sweep: random sequences of
//! uploads (bundles of a few packs), index calls (a row naming a bundle
//! that holds the pack), lost rows (a catalog restored from a backup),
//! operators' copies under foreign keys, and sweeps with no grace,
//! checked after every sweep against the model:
//!
//! - every row the catalog holds names an object that exists and whose
//!   bytes at its range are its pack's;
//! - every pack ever uploaded is still in some object (recoverable by
//!   `spool reindex`), however many rows were lost;
//! - nothing but a spool bundle is ever deleted.
//!
//! A late index call (a paused daemon's, past the grace) may name a
//! bundle a sweep already deleted: that row then names nothing, and the
//! model asks only that the pack is still in some object.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

/// One step of a script.
#[derive(Debug, Clone)]
enum Step {
    /// Packs (indexes into the case's packs) go up in a fresh bundle.
    Upload(Vec<usize>),
    /// The pack's row comes to name the n-th bundle that holds it.
    Index(usize, usize),
    /// A late index call: the pack's row comes to name the n-th deleted
    /// bundle that held it.
    Late(usize, usize),
    /// The catalog loses the pack's row.
    Lose(usize),
    /// An operator copies the pack under a key spool never writes.
    Copy(usize),
    /// A sweep with no grace.
    Sweep,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => proptest::collection::vec(0..PACKS, 1..4).prop_map(Step::Upload),
        3 => (0..PACKS, 0..4usize).prop_map(|(p, n)| Step::Index(p, n)),
        1 => (0..PACKS, 0..4usize).prop_map(|(p, n)| Step::Late(p, n)),
        1 => (0..PACKS).prop_map(Step::Lose),
        1 => (0..PACKS).prop_map(Step::Copy),
        2 => Just(Step::Sweep),
    ]
}

const PACKS: usize = 3;

/// The model: what the store holds (bundles by key, each pack's offset in
/// it; copies by key) and the rows (pack → key, offset).
#[derive(Default)]
struct Model {
    bundles: BTreeMap<String, Vec<(usize, u64)>>,
    /// Bundles a sweep deleted.
    gone: BTreeMap<String, Vec<(usize, u64)>>,
    copies: BTreeMap<String, usize>,
    rows: BTreeMap<usize, (String, u64)>,
    uploaded: std::collections::BTreeSet<usize>,
}

async fn play(script: Vec<Step>) -> Result<(), TestCaseError> {
    let fx = Fx::new(Duration::ZERO).await;
    let packs: Vec<Pack> = (0..PACKS).map(|i| pack(i + 1)).collect();
    let mut m = Model::default();
    for (at, s) in script.into_iter().enumerate() {
        match s {
            Step::Upload(ids) => {
                let chosen: Vec<&Pack> = ids.iter().map(|&i| &packs[i]).collect();
                let (key, offsets) = fx.bundle(&chosen).await;
                m.bundles
                    .insert(key, ids.iter().copied().zip(offsets).collect());
                m.uploaded.extend(ids);
            }
            Step::Index(p, n) => {
                let holding: Vec<(&String, u64)> = m
                    .bundles
                    .iter()
                    .filter_map(|(k, v)| v.iter().find(|(q, _)| *q == p).map(|(_, o)| (k, *o)))
                    .collect();
                if let Some((key, offset)) = holding.get(n % holding.len().max(1)) {
                    m.rows.insert(p, ((*key).clone(), *offset));
                }
            }
            Step::Late(p, n) => {
                let held: Vec<(&String, u64)> = m
                    .gone
                    .iter()
                    .filter_map(|(k, v)| v.iter().find(|(q, _)| *q == p).map(|(_, o)| (k, *o)))
                    .collect();
                if let Some((key, offset)) = held.get(n % held.len().max(1)) {
                    m.rows.insert(p, ((*key).clone(), *offset));
                }
            }
            Step::Lose(p) => {
                m.rows.remove(&p);
            }
            Step::Copy(p) => {
                let key = format!("p/backups/{at}.bundle");
                fx.put(&key, packs[p].bytes.clone()).await;
                m.copies.insert(key, p);
            }
            Step::Sweep => {
                // the catalog as the model says: rows lost are not there
                let catalog = MemoryCatalog::new();
                for (&p, (key, offset)) in &m.rows {
                    catalog
                        .index(&[row(&packs[p].summary, key, *offset)], None)
                        .await
                        .unwrap();
                }
                let report = sweep(
                    &catalog,
                    &fx.store,
                    &identity("a"),
                    (1000, false),
                    &AtomicBool::new(false),
                )
                .await
                .unwrap();
                // only a late row (naming a deleted bundle) leaves a
                // bundle unproven
                if !m.rows.values().any(|(k, _)| m.gone.contains_key(k)) {
                    prop_assert_eq!(report.unproven, 0, "{:?}", report);
                }
                let mut kept = BTreeMap::new();
                for (key, v) in std::mem::take(&mut m.bundles) {
                    if fx.exists(&key).await {
                        kept.insert(key, v);
                    } else {
                        m.gone.insert(key, v);
                    }
                }
                m.bundles = kept;
                check(&fx, &m, &packs).await?;
            }
        }
    }
    Ok(())
}

/// The model's rules, on the store as it is.
async fn check(fx: &Fx, m: &Model, packs: &[Pack]) -> Result<(), TestCaseError> {
    for (&p, (key, offset)) in &m.rows {
        if m.gone.contains_key(key) {
            continue; // a late index call's row: it names nothing
        }
        let bytes = fx
            .objects
            .get_range(
                &Path::from(key.as_str()),
                *offset..*offset + packs[p].bytes.len() as u64,
            )
            .await;
        prop_assert!(
            bytes
                .as_deref()
                .is_ok_and(|b| b == packs[p].bytes.as_slice()),
            "pack {}'s row names {} at {}, which does not hold it",
            p,
            key,
            offset
        );
    }
    for &p in &m.uploaded {
        let held = m.bundles.values().any(|v| v.iter().any(|(q, _)| *q == p))
            || m.copies.values().any(|&q| q == p);
        prop_assert!(held, "pack {} is in no object any more", p);
    }
    for key in m.copies.keys() {
        prop_assert!(
            fx.exists(key).await,
            "a copy spool never wrote was deleted: {}",
            key
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_script_of_uploads_index_calls_lost_rows_and_sweeps_loses_a_pack(
        script in proptest::collection::vec(step(), 1..24)
    ) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(play(script))?;
    }
}
