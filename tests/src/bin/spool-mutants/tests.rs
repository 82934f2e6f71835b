//! Unit tests of the bookkeeping: merging, scoring, sampling, renumbering
//! and the regex of one mutant.

use crate::cargo_mutants::exact_re;
use crate::lists::{lines_of, merge};
use crate::renumber::renumber;
use crate::sample::pick_sample;
use crate::score::{score, wilson};

#[test]
fn a_run_moves_each_mutant_it_tested_to_its_new_outcome() {
    let tmp = std::env::temp_dir().join(format!("xtask-mutants-{}", std::process::id()));
    let (run, keep) = (tmp.join("run"), tmp.join("keep"));
    std::fs::create_dir_all(&run).unwrap();
    std::fs::create_dir_all(&keep).unwrap();
    std::fs::write(keep.join("missed.txt"), "a\nb\n").unwrap();
    std::fs::write(keep.join("caught.txt"), "c\n").unwrap();
    std::fs::write(run.join("caught.txt"), "a\n").unwrap();
    std::fs::write(run.join("missed.txt"), "d\n").unwrap();
    merge(&run, &keep, false).unwrap();
    assert_eq!(lines_of(&keep.join("caught.txt")), ["a", "c"]);
    assert_eq!(lines_of(&keep.join("missed.txt")), ["b", "d"]);
    std::fs::write(keep.join("equivalent.txt"), "b # same behaviour\n").unwrap();
    let s = score("x", &keep).unwrap();
    assert!(s.contains("(caught + timeout) / viable: 50.0 %"), "{s}");
    assert!(s.contains("judged equivalent: 66.7 %"), "{s}");
    merge(&run, &keep, true).unwrap();
    assert_eq!(lines_of(&keep.join("caught.txt")), ["a"]);
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn a_seeded_sample_is_reproducible_distinct_and_in_listing_order() {
    let names: Vec<String> = (0..200).map(|i| format!("m{i:03}")).collect();
    let a = pick_sample(&names, 30, 7);
    assert_eq!(a, pick_sample(&names, 30, 7));
    assert_ne!(a, pick_sample(&names, 30, 8));
    assert_eq!(a.len(), 30);
    let mut sorted = a.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, a, "distinct and in the listing's order");
    // Not just the front of the list: the draw spreads over it.
    assert!(a.iter().any(|m| m.as_str() >= "m100"), "{a:?}");
    assert_eq!(pick_sample(&names[..5], 30, 7), names[..5].to_vec());
    let (lo, hi) = wilson(9, 10);
    assert!(
        (lo - 59.6).abs() < 0.1 && (hi - 98.2).abs() < 0.1,
        "{lo} {hi}"
    );
    assert_eq!(wilson(0, 0), (0.0, 100.0));
}

#[test]
fn a_samples_score_is_reported_apart_from_the_exhaustive_part() {
    let keep = std::env::temp_dir().join(format!("xtask-sample-{}", std::process::id()));
    std::fs::create_dir_all(&keep).unwrap();
    std::fs::write(keep.join("caught.txt"), "a\nb\ns1\ns2\ns3\n").unwrap();
    std::fs::write(keep.join("missed.txt"), "c\ns4\n").unwrap();
    std::fs::write(
        keep.join("sample-5.txt"),
        "# seed 5: 5 of 40 mutants\ns1\ns2\ns3\ns4\ns5\n",
    )
    .unwrap();
    let s = score("x", &keep).unwrap();
    assert!(
        s.contains("(every mutant tested)\ncaught: 5\nmissed: 2"),
        "{s}"
    );
    assert!(
        s.contains("(exhaustive part (in no sample))\ncaught: 2\nmissed: 1"),
        "{s}"
    );
    assert!(
        s.contains("sample 5 (seed 5: 5 of 40 mutants): caught 3, missed 1, timeout 0, unviable 0, not tested yet 1; score 75.0 % of 4 viable"),
        "{s}"
    );
    std::fs::remove_dir_all(&keep).unwrap();
}

#[test]
fn names_whose_lines_moved_are_renumbered_in_every_list() {
    let keep = std::env::temp_dir().join(format!("xtask-renumber-{}", std::process::id()));
    std::fs::create_dir_all(&keep).unwrap();
    std::fs::write(
        keep.join("caught.txt"),
        "a.rs:10:5: replace | with & in f\na.rs:3:1: replace g -> bool with true\n",
    )
    .unwrap();
    std::fs::write(
        keep.join("missed.txt"),
        "a.rs:20:9: replace | with & in f\n",
    )
    .unwrap();
    std::fs::write(
        keep.join("sample-1.txt"),
        "# seed 1: 1 of 9 mutants\na.rs:20:9: replace | with & in f\n",
    )
    .unwrap();
    std::fs::write(
        keep.join("equivalent.txt"),
        "# header\na.rs:20:9: replace | with & in f # same bits\n",
    )
    .unwrap();
    // Two lines added above line 10; g did not move; h is new.
    let listed: Vec<String> = [
        "a.rs:3:1: replace g -> bool with true",
        "a.rs:12:5: replace | with & in f",
        "a.rs:22:9: replace | with & in f",
        "a.rs:30:1: replace h -> bool with true",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(renumber(&keep, &listed).unwrap(), 2);
    assert_eq!(
        lines_of(&keep.join("caught.txt")),
        [
            "a.rs:12:5: replace | with & in f",
            "a.rs:3:1: replace g -> bool with true"
        ]
    );
    assert_eq!(
        lines_of(&keep.join("missed.txt")),
        ["a.rs:22:9: replace | with & in f"]
    );
    assert_eq!(
        lines_of(&keep.join("sample-1.txt"))[1],
        "a.rs:22:9: replace | with & in f"
    );
    assert_eq!(
        lines_of(&keep.join("equivalent.txt")),
        ["# header", "a.rs:22:9: replace | with & in f # same bits"]
    );
    assert_eq!(renumber(&keep, &listed).unwrap(), 0, "nothing moved since");
    std::fs::remove_dir_all(&keep).unwrap();
}

#[test]
fn unequal_groups_pair_by_the_nearest_shift_and_tested_twins_drop_stale_names() {
    let keep = std::env::temp_dir().join(format!("xtask-renumber-shift-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&keep);
    std::fs::create_dir_all(&keep).unwrap();
    // Every `|` → `^` of f moved one line down (a line added at 15):
    // 20, 40 and 50 are stale; 40's new name 41 was tested afresh
    // already (a duplicate); 30 is new code; nothing is within reach
    // of 90, whose code is gone.
    std::fs::write(
        keep.join("caught.txt"),
        "a.rs:20:9: replace | with ^ in f\na.rs:40:9: replace | with ^ in f\na.rs:41:9: replace | with ^ in f\na.rs:90:9: replace | with ^ in f\n",
    )
    .unwrap();
    std::fs::write(
        keep.join("missed.txt"),
        "a.rs:50:9: replace | with ^ in f\n",
    )
    .unwrap();
    std::fs::write(
        keep.join("sample-2.txt"),
        "# seed 2: 2 of 9 mutants\na.rs:40:9: replace | with ^ in f\na.rs:50:9: replace | with ^ in f\n",
    )
    .unwrap();
    let listed: Vec<String> = [
        "a.rs:21:9: replace | with ^ in f",
        "a.rs:30:9: replace | with ^ in f",
        "a.rs:41:9: replace | with ^ in f",
        "a.rs:51:9: replace | with ^ in f",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(renumber(&keep, &listed).unwrap(), 3);
    assert_eq!(
        lines_of(&keep.join("caught.txt")),
        [
            "a.rs:21:9: replace | with ^ in f",
            "a.rs:41:9: replace | with ^ in f",
            "a.rs:90:9: replace | with ^ in f"
        ]
    );
    assert_eq!(
        lines_of(&keep.join("missed.txt")),
        ["a.rs:51:9: replace | with ^ in f"]
    );
    assert_eq!(
        lines_of(&keep.join("sample-2.txt"))[1..],
        [
            "a.rs:41:9: replace | with ^ in f",
            "a.rs:51:9: replace | with ^ in f"
        ]
    );
    std::fs::remove_dir_all(&keep).unwrap();
}

#[test]
fn a_chunk_names_each_mutant_by_an_exact_regex() {
    let name = "spool-lock/src/record.rs:174:67: replace > with >= in OwnerRecord::parse";
    assert_eq!(
        exact_re(name),
        "^spool\\-lock/src/record\\.rs:174:67: replace > with >= in OwnerRecord::parse$"
    );
    assert_eq!(
        exact_re("a.rs:1:2: replace f -> Option<(bool, Fd)> with Ok(vec![0])"),
        "^a\\.rs:1:2: replace f \\-> Option<\\(bool, Fd\\)> with Ok\\(vec!\\[0\\]\\)$"
    );
}
