//! The seeded random sample of the mutants to test (`--sample N --seed S`).

/// `n` of `names` (all of them if fewer), drawn by a partial
/// Fisher-Yates shuffle seeded with `seed` (splitmix64), returned in the
/// listing's order: the same seed over the same listing picks the same
/// mutants.
pub fn pick_sample(names: &[String], n: usize, seed: u64) -> Vec<String> {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut idx: Vec<usize> = (0..names.len()).collect();
    let n = n.min(names.len());
    for i in 0..n {
        let j = i + (next() % (idx.len() - i) as u64) as usize;
        idx.swap(i, j);
    }
    let mut picked = idx[..n].to_vec();
    picked.sort_unstable();
    picked.into_iter().map(|i| names[i].clone()).collect()
}
