//! Unit tests of the torture: its RNG, the pack checksum, the kill points.

use super::*;

#[test]
fn the_rng_is_seeded() {
    let (mut a, mut b) = (Rng(7), Rng(7));
    let xs: Vec<u64> = (0..5).map(|_| a.next()).collect();
    let ys: Vec<u64> = (0..5).map(|_| b.next()).collect();
    assert_eq!(xs, ys);
    assert_ne!(Rng(8).next(), xs[0]);
}

#[test]
fn a_pack_checksum_is_checked() {
    let mut body = vec![7u8; 100];
    let hash = Sha256::digest(&body);
    body.extend_from_slice(&hash);
    assert_eq!(pack_checksum(&body), Some(hex(&hash)));
    body[3] ^= 1;
    assert_eq!(pack_checksum(&body), None);
}

#[test]
fn the_kill_points_are_spool_cores() {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../spool-core/src/seams.rs"),
    )
    .unwrap();
    let start = src.find("pub const KILL_POINTS").unwrap();
    let list = &src[start..start + src[start..].find("];").unwrap()];
    let theirs: Vec<&str> = list.split('"').skip(1).step_by(2).collect();
    assert_eq!(theirs, KILL_POINTS);
}

#[test]
fn the_seed_of_the_day_is_a_date() {
    let s = seed_of_the_day();
    assert!((20_200_101..21_000_101).contains(&s), "{s}");
}
