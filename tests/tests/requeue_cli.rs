//! `spool requeue DIR`: the real binary on a directory staged by a real
//! producer process, a real lock holder (`spool lock hold`) for the refusal.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use spool_tests::{describe, output, spool, KillOnDrop};

fn names(dir: &Path, ext: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(ext).map(str::to_string))
        .collect();
    v.sort();
    v
}

/// Rejected packs go back to ready; quarantined ones only with
/// `--quarantined` and only if they validate; a held directory is refused
/// with exit 3 and left untouched; `spool status` points to the command.
#[test]
fn requeue_turns_rejected_and_valid_quarantined_packs_back_into_ready_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r0-0000abcd");
    let out = output(
        spool()
            .args(["produce", "--packs", "4", "--pack-bytes", "2048", "--dir"])
            .arg(&dir),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let ids = names(&dir, ".ready");
    assert_eq!(ids.len(), 4);
    let set_aside = |id: &str, ext: &str| {
        std::fs::rename(
            dir.join(format!("{id}.ready")),
            dir.join(format!("{id}.{ext}")),
        )
        .unwrap()
    };
    set_aside(&ids[0], "rejected");
    set_aside(&ids[1], "rejected");
    set_aside(&ids[2], "quarantined");
    // a quarantined pack that really is corrupt
    let bad = "0".repeat(31) + "1";
    std::fs::write(dir.join(format!("{bad}.quarantined")), b"not a pack").unwrap();

    let st = output(spool().arg("status").arg(&dir));
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(text.contains("spool requeue"), "{text}");

    // held by someone: exit 3, nothing changed
    let mut holder = KillOnDrop(
        spool()
            .args(["lock", "hold"])
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(holder.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let out = output(spool().arg("requeue").arg(&dir));
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let holder_pid = format!("pid {}", holder.0.id());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&holder_pid),
        "not naming {holder_pid}: {}",
        describe(&out)
    );
    assert_eq!(names(&dir, ".rejected").len(), 2);
    drop(holder);
    std::thread::sleep(std::time::Duration::from_millis(200));

    let out = output(spool().arg("requeue").arg(&dir));
    assert!(out.status.success(), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("2 pack(s) requeued as ready"), "{said}");
    assert!(names(&dir, ".rejected").is_empty());
    assert_eq!(
        names(&dir, ".quarantined").len(),
        2,
        "untouched without --quarantined"
    );

    let out = output(spool().args(["requeue", "--quarantined"]).arg(&dir));
    assert!(out.status.success(), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        said.contains("1 pack(s) requeued as ready, 1 kept")
            && said.contains("still does not validate"),
        "{said}"
    );
    assert_eq!(names(&dir, ".quarantined"), vec![bad]);
    let mut ready = names(&dir, ".ready");
    ready.sort();
    assert_eq!(ready, ids[..4].to_vec());
    let v = output(spool().arg("verify").arg(&dir));
    assert!(v.status.success(), "{}", describe(&v));
}
