//! Unit tests of the ClickHouse catalog: error classification, the
//! batching of index statements, replica URLs.

use super::*;

#[test]
fn bad_responses_are_classified() {
    let s = "clickhouse://h:1/db?table_prefix=p_";
    let bad = |m: &str| {
        error_from_clickhouse(
            s,
            "count packs",
            &["hunter2"],
            clickhouse::error::Error::BadResponse(m.into()),
        )
    };
    let e = bad("Code: 193, e.displayText() = DB::Exception: Wrong password for user default, e.what() = DB::Exception");
    assert!(matches!(e, Error::Auth { .. }) && !e.is_retryable(), "{e}");
    assert!(e.to_string().contains(s) && e.to_string().contains("count packs"));
    let e =
        bad("Code: 516. DB::Exception: default: Authentication failed. (AUTHENTICATION_FAILED)");
    assert!(matches!(e, Error::Auth { .. }), "{e}");
    let e = bad("401 Unauthorized");
    assert!(matches!(e, Error::Auth { .. }), "{e}");
    let e = bad("Code: 115, e.displayText() = DB::Exception: Unknown setting async_insert");
    assert!(
        matches!(e, Error::UnknownSetting { .. }) && !e.is_retryable(),
        "{e}"
    );
    let e = bad("Code: 60, e.displayText() = DB::Exception: Table db.p_packs doesn't exist.");
    assert!(
        matches!(e, Error::SchemaMismatch { .. }) && !e.is_retryable(),
        "{e}"
    );
    let e = bad("Code: 252, e.displayText() = DB::Exception: Too many parts (300)");
    assert!(e.is_retryable(), "{e}");
    let e = bad("Code: 62, e.displayText() = DB::Exception: Syntax error");
    assert!(matches!(e, Error::Server { code: Some(62), .. }) && !e.is_retryable());
    let e = bad("503 Service Unavailable");
    assert!(e.is_retryable(), "{e}");
    let e = bad("<html>bad gateway</html>");
    assert!(e.is_retryable(), "{e}");
    let e = bad("404 Not Found");
    assert!(!e.is_retryable(), "{e}");
    // The server's words: classified on what it said, shown escaped,
    // bounded and without the password.
    let hostile = format!(
        "Code: 193, e.displayText() = DB::Exception: Wrong password hunter2 \x1b[2J\n2026-12-06 INFO forged line{}",
        "x".repeat(1 << 20)
    );
    let e = bad(&hostile);
    assert!(matches!(e, Error::Auth { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        !msg.contains("hunter2") && !msg.contains('\x1b') && !msg.contains('\n'),
        "{msg}"
    );
    assert!(
        msg.contains("\\u{1b}[2J\\n2026-12-06 INFO forged line"),
        "{msg}"
    );
    assert!(msg.len() < 1024, "{}", msg.len());
    assert!(
        msg.contains(&format!("… ({} bytes)", hostile.len())),
        "{msg}"
    );
}

fn row_on_day(day: u64, n: u64) -> PackRow {
    PackRow {
        object_offset: 0,
        pack_id: format!("{n:032x}"),
        object_key: "k".into(),
        store_id: "default".into(),
        sha256: "ab".repeat(32),
        bytes: 1,
        records: 1,
        source_host: "h".into(),
        source_pid: 1,
        rank_dir: "r0-0badcafe".into(),
        ordinal: None,
        created_at_ms: day * DAY_MS + n,
        indexed_at_ms: 0,
        trailer_sha256: "cd".repeat(32),
    }
}

#[test]
fn index_statements_hold_at_most_256_rows_and_64_days() {
    let same_day: Vec<PackRow> = (0..600).map(|n| row_on_day(20_000, n)).collect();
    let sizes: Vec<usize> = statements(&same_day).iter().map(|c| c.len()).collect();
    assert_eq!(sizes, vec![256, 256, 88]);
    // A backlog of 200 days, one pack a day: no statement spans more
    // than 64 days (the server refuses more than 100 partitions a block).
    let days: Vec<PackRow> = (0..200).map(|n| row_on_day(20_000 + n, n)).collect();
    let chunks = statements(&days);
    let sizes: Vec<usize> = chunks.iter().map(|c| c.len()).collect();
    assert_eq!(sizes, vec![64, 64, 64, 8]);
    let rejoined: Vec<&PackRow> = chunks.iter().flat_map(|c| c.iter()).collect();
    assert!(rejoined.iter().zip(&days).all(|(a, b)| *a == b), "in order");
    assert!(statements(&[]).is_empty());
}

#[test]
fn the_lease_log_is_dropped_by_partition_only_from_20_4() {
    use schema::{version_at_least, QUORUM_SAFE_DROP_FROM};
    for (v, ok) in [
        ("18.16.1", false),
        ("20.3.19.4", false),
        ("20.4.2.9", true),
        ("20.10.1", true),
        ("24.8.1.1", true),
        ("", false),
        ("x.y", false),
    ] {
        assert_eq!(version_at_least(v, QUORUM_SAFE_DROP_FROM), ok, "{v}");
    }
}

#[test]
fn a_replicas_repeated_warning_is_shown_once_per_quiet_window() {
    let q = Quiet::default();
    assert_eq!(q.admit(), Some(0));
    assert_eq!(q.admit(), None);
    assert_eq!(q.admit(), None);
    // once the window has passed, the next is shown with the count
    *q.last.lock().unwrap() = Some((std::time::Instant::now() - QUIET_FOR, 2));
    assert_eq!(q.admit(), Some(2));
    assert_eq!(q.admit(), None);
}
