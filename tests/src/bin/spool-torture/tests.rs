//! Unit tests of the torture: its RNG, the pack checksum, addresses, the
//! seed of the day, the `.open` rule, the hand-off checks of live owners.

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
fn a_pack_checksum_is_spool_cores_validation() {
    let id = spool_core::PackId::generate();
    let mut w = spool_core::PackWriter::new(id, id.timestamp_ms());
    w.push_record(b"one");
    w.push_record(b"two");
    let mut pack = w.finish();
    let trailer = spool_core::pack::validate_bytes(&pack, Some(id)).unwrap();
    assert_eq!(pack_checksum(&pack), Some(hex(&trailer.sha256)));
    // a pack whose hash is right but whose framing is not is refused too
    assert_eq!(
        pack_checksum(&spool_core::pack::testing_misframed_pack(id)),
        None
    );
    pack[45] ^= 1;
    assert_eq!(pack_checksum(&pack), None);
}

#[test]
fn ports_are_read_from_addresses_and_urls() {
    assert_eq!(port_of("127.0.0.1:4567").unwrap(), 4567);
    assert_eq!(port_of("http://127.0.0.1:4567/").unwrap(), 4567);
    assert!(port_of("http://127.0.0.1").is_err());
}

#[test]
fn the_seed_of_the_day_is_a_date() {
    let s = seed_of_the_day();
    assert!((20_200_101..21_000_101).contains(&s), "{s}");
}

/// A look at a dead owner's directory: the record's pid, ready and open files.
fn look(pid: u32, ready: &[&str], open: &[&str]) -> Option<opens::Look> {
    Some(opens::Look {
        record_pid: Some(pid),
        blocked: false,
        ready: ready.iter().map(PathBuf::from).collect(),
        open: open.iter().map(PathBuf::from).collect(),
    })
}

#[test]
fn an_open_left_once_the_adopter_removed_a_pack_breaks_the_rule() {
    let mut w = opens::Watch::default();
    // the dead owner's own record, then adopter 20's take (sweep pending)
    assert_eq!(
        w.see(10, look(10, &["a.ready", "b.ready"], &[".c.1.open"])),
        opens::Seen::Nothing
    );
    assert_eq!(
        w.see(10, look(20, &["a.ready", "b.ready"], &[".c.1.open"])),
        opens::Seen::Nothing
    );
    // 20 shipped a pack: its sweep is behind it, the .open must be gone
    assert_eq!(
        w.see(10, look(20, &["b.ready"], &[".c.1.open"])),
        opens::Seen::Outlived {
            pid: 20,
            open: vec![PathBuf::from(".c.1.open")]
        }
    );
    // reported once
    assert_eq!(
        w.see(10, look(20, &[], &[".c.1.open"])),
        opens::Seen::Nothing
    );
}

#[test]
fn an_adoption_past_its_sweep_is_counted_and_a_cut_one_proves_nothing() {
    let mut w = opens::Watch::default();
    // adopter 20 took the directory and died before its sweep (no pack
    // removed); 30 takes it over: the .open is still allowed
    assert_eq!(
        w.see(10, look(20, &["a.ready", "b.ready"], &[".c.1.open"])),
        opens::Seen::Nothing
    );
    assert_eq!(
        w.see(10, look(30, &["a.ready", "b.ready"], &[".c.1.open"])),
        opens::Seen::Nothing
    );
    // 30 swept, then shipped a pack: counted once
    assert_eq!(
        w.see(10, look(30, &["a.ready", "b.ready"], &[])),
        opens::Seen::Nothing
    );
    assert_eq!(
        w.see(10, look(30, &["b.ready"], &[])),
        opens::Seen::Swept { pid: 30 }
    );
    assert_eq!(w.see(10, look(30, &[], &[])), opens::Seen::Nothing);
    // a record mid-rewrite says nothing; the directory's removal ends it
    let torn = opens::Look::default();
    assert_eq!(w.see(10, Some(torn)), opens::Seen::Nothing);
    assert_eq!(w.see(10, None), opens::Seen::Gone);
}

#[test]
fn a_directory_blocked_with_only_an_open_left_breaks_the_rule() {
    // a dead paused holder: one .open, no pack; the adopter went through
    // its recovery and gave up on what it left
    let mut w = opens::Watch::default();
    assert_eq!(
        w.see(10, look(20, &[], &[".c.1.open"])),
        opens::Seen::Nothing
    );
    let mut blocked = look(20, &[], &[".c.1.open"]).unwrap();
    blocked.blocked = true;
    assert_eq!(
        w.see(10, Some(blocked)),
        opens::Seen::Outlived {
            pid: 20,
            open: vec![PathBuf::from(".c.1.open")]
        }
    );
    // blocked with packs left (a doomed upload) says nothing of a sweep
    let mut w = opens::Watch::default();
    let mut doomed = look(20, &["a.ready"], &[".c.1.open"]).unwrap();
    doomed.blocked = true;
    assert_eq!(w.see(10, Some(doomed)), opens::Seen::Nothing);
}

#[test]
fn packs_gone_before_any_adopter_took_the_directory_prove_nothing() {
    // an engine's own service removed its packs, then it died mid-stage:
    // what vanished under its own record is not an adopter's work
    let mut w = opens::Watch::default();
    assert_eq!(
        w.see(10, look(10, &["a.ready", "b.ready"], &[".c.1.open"])),
        opens::Seen::Nothing
    );
    assert_eq!(
        w.see(10, look(10, &["b.ready"], &[".c.1.open"])),
        opens::Seen::Nothing
    );
    assert_eq!(
        w.see(10, look(20, &[], &[".c.1.open"])),
        opens::Seen::Nothing
    );
}

#[test]
fn a_look_reads_the_record_pid_and_the_stages_in_subdirectories() {
    let dir = std::env::temp_dir().join(format!("torture-opens-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("w1")).unwrap();
    std::fs::write(
        dir.join(".owner.lock"),
        "host: h\npid: 4242\npurpose: blocked: why\n",
    )
    .unwrap();
    std::fs::write(dir.join("a.ready"), b"x").unwrap();
    std::fs::write(dir.join("w1/.b.0000abcd.open"), b"x").unwrap();
    let l = opens::look(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(l.record_pid, Some(4242));
    assert!(l.blocked);
    assert_eq!(l.ready, [PathBuf::from("a.ready")].into_iter().collect());
    assert_eq!(l.open, vec![PathBuf::from("w1/.b.0000abcd.open")]);
    assert_eq!(opens::look(&dir), None);
}

#[test]
fn a_live_owners_directory_holds_only_files_of_its_own_kinds() {
    let id = spool_core::PackId::generate();
    for own in [
        ".owner.lock".to_string(),
        format!("{id}.ready"),
        format!("w3/{id}.ready"),
        format!(".{id}.0123abcd.open"),
        format!("_refs/{id}.ref"),
        format!("_refs/w3.{id}.ref"),
    ] {
        assert!(monitor::owners_kind(Path::new(&own)), "{own}");
    }
    for other in [
        format!("_shipped/{id}.ref"),
        format!("{id}.ref"),
        format!("_refs/{id}.ready"),
        format!("{id}.ready.tmp"),
        format!("{id}.quarantined"),
        format!("x/{id}.ready"),
    ] {
        assert!(!monitor::owners_kind(Path::new(&other)), "{other}");
    }
}

#[test]
fn a_pack_gone_with_its_ref_there_and_no_confirmation_was_released_early() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r0-00000001");
    let id = spool_core::PackId::generate();
    let name = format!("w2/{id}.ready");
    let r = spool_core::handoff::ref_name(Some(2), id);
    std::fs::create_dir_all(dir.join("_refs")).unwrap();
    std::fs::write(dir.join("_refs").join(&r), b"").unwrap();
    let long_ago = std::time::SystemTime::UNIX_EPOCH;
    let now = std::time::SystemTime::now() + Duration::from_secs(1);
    // consented, not confirmed, gone: removed before its confirmation
    let early = monitor::unconfirmed_release(&dir, Path::new(&name), now);
    assert!(early.is_some_and(|e| e.contains("ref is still there")));
    // confirmed before it was seen gone: its owner may remove it
    let confirmations = spool_core::handoff::confirmations_dir(&dir);
    std::fs::create_dir_all(&confirmations).unwrap();
    std::fs::write(confirmations.join(&r), b"").unwrap();
    assert_eq!(
        monitor::unconfirmed_release(&dir, Path::new(&name), now),
        None
    );
    // confirmed only after it was seen gone: removed before
    let early = monitor::unconfirmed_release(&dir, Path::new(&name), long_ago);
    assert!(early.is_some_and(|e| e.contains("after the pack was seen gone")));
    // its ref gone too, no confirmation: released whole, nothing to say
    std::fs::remove_file(confirmations.join(&r)).unwrap();
    std::fs::remove_file(dir.join("_refs").join(&r)).unwrap();
    assert_eq!(
        monitor::unconfirmed_release(&dir, Path::new(&name), now),
        None
    );
}

#[test]
fn a_paused_owner_s_temp_file_goes_only_when_its_own_log_says_it_gave_that_stage_up() {
    let dir = Path::new("/s/k/r0-9dc7a0e7");
    let open = dir.join(".01a24b4535707e6a121c3d17bf545c58.3970daaf.open");
    let log = format!(
        "2026-12-06T12:12:37.003647Z  WARN spool_core::sink: staging pack 01a24b4535707e6a121c3d17bf545c58 into {d} failed (will retry): write {p}: No space left on device (os error 28) dir={d}\n",
        d = dir.display(),
        p = open.display()
    );
    assert!(crash::gave_up_stage(&log, &open));
    // another stage's failure, or no failure, is no excuse
    let other = dir.join(".01a24b4535707e6a121c3d17bf545c58.eea93340.open");
    assert!(!crash::gave_up_stage(&log, &other));
    assert!(!crash::gave_up_stage(
        "spool: rank directory /s/k/r0-9dc7a0e7\n",
        &open
    ));
    let prefix = dir.join(".01a24b4535707e6a121c3d17bf545c58.3970daa");
    assert!(!crash::gave_up_stage(&log, &prefix));
}
