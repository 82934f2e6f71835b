//! Operator mistakes and hostile input met through the `spool` binary:
//! a closed stdout, SIGHUP, a config that is not a file, `cat --out` at
//! what is not a regular file, a missing path, owner-record text with
//! control characters, the embedded store's and catalog's modes, the lease
//! TTL's one minimum. RELIABILITY.md, "Hostile input", names each test.

use super::*;

/// A pipe whose reading end is already closed: a child writing into it
/// gets EPIPE (Rust ignores SIGPIPE), as under `spool status | head -0`.
fn closed_pipe() -> std::os::fd::OwnedFd {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    write
}

/// Runs `cmd` with its stdout a closed pipe.
fn with_closed_stdout(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(closed_pipe()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not run {what}: {e}"));
    child.wait_with_output().unwrap()
}

#[test]
fn a_closed_stdout_is_exit_1_with_one_line_never_a_panic() {
    let s = Scratch::new();
    let (dir, _) = s.dead_sibling("r1-00000001", 1);
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["config".into(), "show".into()],
        vec!["status".into(), s.root.clone().into()],
        vec!["verify".into(), dir.clone().into()],
        vec!["lock".into(), "owner".into(), dir.clone().into()],
    ];
    for args in cases {
        let out = with_closed_stdout(spool().args(&args));
        let err = stderr(&out);
        assert_eq!(code(&out), 1, "{args:?}: {}", describe(&out));
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains("cannot write to stdout"), "{args:?}: {err}");
        // one error line (verify's progress lines go to stderr too)
        let errors = err.lines().filter(|l| l.starts_with("spool:")).count();
        assert_eq!(errors, 1, "{args:?}: {err}");
    }
    // the daemon's JSON lines: it drains and exits as it would, no panic
    let out = with_closed_stdout(
        spool()
            .args(["run", "--once", "--json", "--timeout", "15", "--spool-root"])
            .arg(&s.root),
    );
    assert!(!stderr(&out).contains("panicked"), "{}", describe(&out));
}

/// Starts `args` and waits (bounded) until its stderr or stdout says
/// `ready`; returns the child.
fn start_until(cmd: &mut Command, ready: &str) -> KillOnDrop {
    use std::io::BufRead;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stream)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(ready) => return KillOnDrop(child),
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                panic!("{cmd:?} never said {ready:?}");
            }
        }
    }
}

/// SIGHUP (the terminal went away) stops `run`, `produce --hold` and `lock
/// hold` the way SIGTERM does: their bounded flush and release run, exit 0,
/// and nothing is left locked.
#[test]
fn sighup_stops_like_sigterm_with_the_release() {
    let s = Scratch::new();
    let held = s.top.join("held");
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (
            vec!["lock".into(), "hold".into(), held.clone().into()],
            "held ",
        ),
        (
            vec![
                "produce".into(),
                "--packs".into(),
                "1".into(),
                "--hold".into(),
                "--spool-root".into(),
                s.root.clone().into(),
            ],
            "holding the lock",
        ),
        (
            vec!["run".into(), "--spool-root".into(), s.root.clone().into()],
            "spool run: claimed",
        ),
    ];
    for (args, ready) in cases {
        let mut child = start_until(spool().env("RUST_LOG", "info").args(&args), ready);
        let pid = nix::unistd::Pid::from_raw(child.0.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
        let t = Instant::now();
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{args:?} still running 20 s after SIGHUP"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "{args:?}: {status:?}");
    }
    // lock hold released and removed its (empty) directory; the produced
    // pack's directory is unlocked: `run --once` adopts it.
    assert!(!held.exists(), "lock hold left {}", held.display());
    let out = s.run_once(&[]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
    assert_eq!(s.indexed().len(), 1, "{}", describe(&out));
}

/// A `--config` that is a FIFO (no writer: an open would wait forever), a
/// device that never ends, a directory or a huge file is refused at once,
/// exit 2, naming the file.
#[test]
fn a_config_that_is_not_a_small_regular_file_is_refused_at_once() {
    let s = Scratch::new();
    let fifo = s.top.join("config.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let huge = s.top.join("huge.toml");
    let mut text = String::from("[spool]\n");
    while text.len() <= 1024 * 1024 {
        text.push_str("# a comment that pads the file past the bound\n");
    }
    std::fs::write(&huge, text).unwrap();
    for (config, needle) in [
        (fifo.clone(), "not a regular file"),
        (PathBuf::from("/dev/zero"), "not a regular file"),
        (s.top.clone(), "not a regular file"),
        (huge.clone(), "more than the 1048576"),
    ] {
        for args in [vec!["config", "show"], vec!["status", "/nonexistent-root"]] {
            let t = Instant::now();
            let out = bounded(
                spool().arg("--config").arg(&config).args(&args),
                Duration::from_secs(10),
            );
            let err = stderr(&out);
            assert!(t.elapsed() < Duration::from_secs(5), "{config:?} {args:?}");
            if args[0] == "config" {
                assert_eq!(code(&out), 2, "{config:?}: {}", describe(&out));
                assert!(
                    err.contains(needle) && err.contains(&config.display().to_string()),
                    "{config:?}: {err}"
                );
            }
        }
    }
}

/// An indexed pack in the embedded destination of `s`: its id.
fn one_indexed_pack(s: &Scratch) -> String {
    let (_, ids) = s.dead_sibling("r1-00000001", 1);
    let out = s.run_once(&[]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
    ids[0].clone()
}

/// `cat --out` never replaces what is not a regular file: a FIFO (and, as
/// root, a character device) is written into and stays what it was; a
/// symlink and a directory are refused (exit 2) and stay as they were, the
/// symlink's target untouched; a regular file is replaced.
#[test]
fn cat_out_writes_into_devices_and_fifos_and_refuses_symlinks() {
    let s = Scratch::new();
    let id = one_indexed_pack(&s);
    let cat = |out: &Path| {
        let mut cmd = spool();
        cmd.args(["cat", &id, "--spool-root"])
            .arg(&s.root)
            .arg("--out")
            .arg(out);
        cmd
    };
    use std::os::unix::fs::FileTypeExt;

    // a FIFO, read by a thread
    let fifo = s.top.join("out.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let out = run(&mut cat(&fifo));
    assert_eq!(code(&out), 0, "{}", describe(&out));
    let got = reader.join().unwrap();
    let stored = std::fs::read(&spool_tests::store_objects(&s.root)[&id]).unwrap();
    assert_eq!(
        hex(&Sha256::digest(&got)),
        hex(&Sha256::digest(&stored)),
        "{} bytes through the FIFO, the pack has {}",
        got.len(),
        stored.len()
    );
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());

    // a character device (root only: mknod), a null device of our own;
    // without root it is a failure under SPOOL_REQUIRE_ALL (CI runs as root)
    if spool_tests::required(spool_tests::is_root(), "root, to mknod a character device") {
        let dev = s.top.join("null");
        nix::sys::stat::mknod(
            &dev,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode();
        let before = mode(&dev);
        let out = run(&mut cat(&dev));
        assert_eq!(code(&out), 0, "{}", describe(&out));
        let meta = std::fs::symlink_metadata(&dev).unwrap();
        assert!(meta.file_type().is_char_device(), "{meta:?}");
        assert_eq!(mode(&dev), before);
    }

    // a symlink (to a file outside) and a directory: refused, unchanged
    let link = s.top.join("link");
    std::os::unix::fs::symlink(s.outside.join("secret"), &link).unwrap();
    let before = tree(&s.top);
    for path in [&link, &s.outside] {
        let out = run(&mut cat(path));
        assert_eq!(code(&out), 2, "{path:?}: {}", describe(&out));
        assert!(
            stderr(&out).contains("nothing was fetched"),
            "{}",
            describe(&out)
        );
    }
    assert_eq!(tree(&s.top), before);

    // a regular file is replaced by the pack
    let file = s.top.join("pack.bin");
    std::fs::write(&file, b"old").unwrap();
    let out = run(&mut cat(&file));
    assert_eq!(code(&out), 0, "{}", describe(&out));
    assert_eq!(std::fs::read(&file).unwrap(), got);
}

#[test]
fn verify_of_a_missing_path_says_it_does_not_exist() {
    let s = Scratch::new();
    let missing = s.top.join("no-such-dir");
    let out = run(spool().arg("verify").arg(&missing));
    assert_eq!(code(&out), 1, "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("does not exist") && !err.contains("vanished"),
        "{err}"
    );
}

/// A dead producer whose host name holds control characters: its owner
/// record is shown escaped by `status` and `lock owner` (no escape sequence
/// reaches the terminal) and it is no poison pill: `run --once` ships its
/// packs (rows carrying the escaped name) and a healthy sibling's.
#[test]
fn owner_record_control_characters_are_shown_escaped_and_never_refuse_a_row() {
    let s = Scratch::new();
    let (evil, mut ids) = s.dead_sibling("r1-00000001", 2);
    std::fs::write(
        evil.join(spool_lock::LOCK_FILE_NAME),
        b"host: ev\x1b[2Jil\x07\npid: 4242\npurpose: cl\x1b]0;x\x07aim\n",
    )
    .unwrap();
    let (_, healthy) = s.dead_sibling("r2-00000002", 2);
    ids.extend(healthy);
    for args in [
        vec![OsStr::new("status"), s.root.as_os_str()],
        vec![OsStr::new("lock"), OsStr::new("owner"), evil.as_os_str()],
    ] {
        let out = run(spool().args(&args));
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            !text.contains('\x1b') && !text.contains('\x07'),
            "{args:?}: {text:?}"
        );
        assert!(text.contains("ev\\u{1b}[2Jil"), "{args:?}: {text}");
    }
    let out = s.run_once(&[]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
    assert!(!stderr(&out).contains('\x1b'), "{}", describe(&out));
    let want: BTreeSet<String> = ids.into_iter().collect();
    assert_eq!(s.indexed(), want, "{}", describe(&out));
    assert!(!evil.exists() || std::fs::read_dir(&evil).unwrap().count() <= 1);
}

/// The embedded store and catalog are as private as the spool: a root made
/// by `mkdir` (0755) gets a 0700 `.store` and a 0600 `.catalog.db`, so no
/// other local user reads a pack or a row.
#[test]
fn the_embedded_store_and_catalog_follow_spool_mode() {
    let s = Scratch::new();
    std::fs::set_permissions(&s.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    one_indexed_pack(&s);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&s.root.join(".store")), 0o700);
    assert_eq!(mode(&s.root.join(".catalog.db")), 0o600);
}

/// One minimum for `lease.ttl`, said by the key itself: 3 and 4 are refused
/// naming 5 s (not a fence margin the operator never set), 5 runs.
#[test]
fn lease_ttl_below_five_seconds_is_refused_by_its_own_minimum() {
    let s = Scratch::new();
    for ttl in ["3", "4"] {
        let out = s.run_once(&["--lease-ttl", ttl]);
        assert_eq!(code(&out), 2, "{}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.contains("at least 5s") && !err.contains("fence"),
            "{err}"
        );
    }
    let out = s.run_once(&["--lease-ttl", "5"]);
    assert_eq!(code(&out), 0, "{}", describe(&out));
}

/// A dead sibling holding one pack far over `max_in_flight_bytes` (a 64 GiB
/// sparse file with a valid header, footer and trailer) is no head-of-line stall: it is set
/// aside by its size from `stat`, before any hashing — the sibling blocked
/// once with the reason, persisted in its owner record so `status` shows
/// it and a second run does not look again — while a healthy sibling's
/// packs ship at once.
#[test]
fn a_pack_over_the_in_flight_bound_is_set_aside_unread_and_stalls_nothing() {
    let s = Scratch::new();
    let (big_dir, big_ids) = s.dead_sibling("r1-00000001", 1);
    let (id, bytes) = pack_bytes(&[b"a header that reads as valid"]);
    let huge = big_dir.join(format!("{id}.ready"));
    // the header, a hole, then the footer and trailer of the real pack at
    // the end: only hashing every byte could tell it apart from a valid one
    let tail = &bytes[bytes.len() - FOOTER_LEN - TRAILER_LEN..];
    let size: u64 = 64 << 30;
    std::fs::write(&huge, &bytes[..HEADER_LEN]).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::options().write(true).open(&huge).unwrap();
        f.set_len(size).unwrap();
        f.write_all_at(tail, size - tail.len() as u64).unwrap();
    }
    let (_, healthy) = s.dead_sibling("r2-00000002", 3);

    let t = Instant::now();
    let out = s.run_once(&["--timeout", "30"]);
    let took = t.elapsed();
    // exit 1: done, with a blocked sibling to report
    assert_eq!(code(&out), 1, "{}", describe(&out));
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}: {}",
        describe(&out)
    );
    let mut want: BTreeSet<String> = healthy.into_iter().collect();
    want.extend(big_ids); // the rest of the blocked sibling's packs ship too
    assert_eq!(s.indexed(), want, "{}", describe(&out));
    assert!(huge.exists(), "the oversized pack stays where it was");
    let record = std::fs::read_to_string(big_dir.join(spool_lock::LOCK_FILE_NAME)).unwrap();
    assert!(
        record.contains("blocked") && record.contains("max_in_flight_bytes"),
        "{record}"
    );
    let out = run(spool().arg("status").arg(&s.root));
    assert!(stdout(&out).contains("blocked"), "{}", describe(&out));
    // a second run skips it without reading it
    let t = Instant::now();
    let out = s.run_once(&["--timeout", "30"]);
    assert!(t.elapsed() < Duration::from_secs(5), "{}", describe(&out));
    assert!(huge.exists());
}

/// A secret in a store URL's query or fragment is never printed: `run`,
/// `produce` (sink-only and `--serve`) and `config show` show it masked
/// by the one redactor, and the URL is refused.
#[test]
fn a_secret_in_a_store_url_is_never_printed() {
    let s = Scratch::new();
    for url in [
        "s3://b/p?secret_access_key=SEKRIT1",
        "gs://b/p#token=SEKRIT1",
        "s3://b/p?x=1&session_token=SEKRIT1",
        "s3://b/x#SEKRIT1",
    ] {
        let mut cmds: Vec<Command> = Vec::new();
        let mut c = spool();
        c.args([
            "run",
            "--once",
            "--timeout",
            "5",
            "--store",
            url,
            "--spool-root",
        ])
        .arg(&s.root);
        cmds.push(c);
        for serve in [false, true] {
            let mut c = spool();
            c.args(["produce", "--packs", "1", "--store", url, "--spool-root"])
                .arg(&s.root);
            if serve {
                c.arg("--serve");
            }
            cmds.push(c);
        }
        let mut c = spool();
        c.args(["config", "show", "--store", url]);
        cmds.push(c);
        for mut cmd in cmds {
            let out = run(&mut cmd);
            let text = format!("{}{}", stdout(&out), stderr(&out));
            assert!(!text.contains("SEKRIT1"), "{cmd:?}: {text}");
            assert!(text.contains("****"), "{cmd:?}: {text}");
        }
    }
    assert!(s.indexed().is_empty());
}

/// A multi-host catalog URL whose credentials sit on a later host
/// (`h1:p,u:pw@h2:p`) cannot be read as written: `run`, `produce` and
/// `ls` refuse it as a usage error (exit 2) naming the fix, never
/// shorten it to one host, and never print the password.
#[test]
fn a_host_list_that_cannot_be_parsed_as_written_is_refused() {
    let s = Scratch::new();
    let url = "clickhouse://127.0.0.1:1,u:SEKRIT2@127.0.0.1:2/db";
    let mut cmds: Vec<Command> = Vec::new();
    let mut c = spool();
    c.args([
        "run",
        "--once",
        "--timeout",
        "5",
        "--catalog",
        url,
        "--spool-root",
    ])
    .arg(&s.root);
    cmds.push(c);
    let mut c = spool();
    c.args(["produce", "--packs", "1", "--catalog", url, "--spool-root"])
        .arg(&s.root);
    cmds.push(c);
    let mut c = spool();
    c.args(["ls", "--catalog", url]);
    cmds.push(c);
    for mut cmd in cmds {
        let out = run(&mut cmd);
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {text}");
        assert!(!text.contains("SEKRIT2"), "{cmd:?}: {text}");
        assert!(
            text.contains("credentials") && text.contains("first host"),
            "{cmd:?}: {text}"
        );
    }
    assert!(s.indexed().is_empty());
}

/// `GET path` on `addr`, answered within `within`: the status line.
fn http_get(addr: &str, path: &str, within: Duration) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(within)).ok()?;
    s.set_write_timeout(Some(within)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines().next().map(str::to_string)
}

/// A storm of idle connections on the metrics port of a daemon with 64
/// descriptors: the server keeps a bounded number open (no descriptor
/// exhaustion, no panic), `/healthz` answers during the storm (once a slot
/// frees) and at once after it, and the daemon still adopts a dead sibling
/// staged after the storm.
#[test]
fn a_connection_storm_on_the_metrics_port_exhausts_nothing() {
    let s = Scratch::new();
    let mut daemon = start_until(
        Command::new("prlimit")
            .arg("--nofile=64:64")
            .arg(spool_tests::spool_bin())
            .env("RUST_LOG", "info")
            .args([
                "run",
                "--poll-interval",
                "0.2",
                "--recheck-interval",
                "0.5",
                "--metrics-addr",
                "127.0.0.1:0",
                "--spool-root",
            ])
            .arg(&s.root),
        "metrics on http://",
    );
    // `prlimit` execs spool: the child's pid is the daemon's
    let addr = listening_addr(daemon.0.id());
    assert_eq!(
        http_get(&addr, "/healthz", Duration::from_secs(3)).as_deref(),
        Some("HTTP/1.1 200 OK")
    );
    let storm: Vec<_> = (0..300)
        .filter_map(|_| std::net::TcpStream::connect(&addr).ok())
        .collect();
    assert!(storm.len() > 100, "only {} connections made", storm.len());
    let t = Instant::now();
    let during = loop {
        if let Some(line) = http_get(&addr, "/healthz", Duration::from_secs(1)) {
            break line;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "/healthz never answered during the storm"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(during, "HTTP/1.1 200 OK");
    assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon died");
    drop(storm);
    let t = Instant::now();
    assert_eq!(
        http_get(&addr, "/healthz", Duration::from_secs(3)).as_deref(),
        Some("HTTP/1.1 200 OK")
    );
    assert!(t.elapsed() < Duration::from_secs(3));
    // still shipping
    let (_, ids) = s.dead_sibling("r1-00000001", 2);
    let want: BTreeSet<String> = ids.into_iter().collect();
    let t = Instant::now();
    while s.indexed() != want {
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", s.indexed());
        std::thread::sleep(Duration::from_millis(200));
    }
    let pid = nix::unistd::Pid::from_raw(daemon.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = daemon.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// The `ip:port` of the one listening TCP socket of process `pid` (or of its
/// child, for a `prlimit` wrapper that execs): from `/proc/net/tcp` and the
/// process's socket inodes.
fn listening_addr(pid: u32) -> String {
    let inodes: BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_string)
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // local_address, state 0A = LISTEN, inode
        if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
            let (ip, port) = f[1].split_once(':').unwrap();
            let ip = u32::from_str_radix(ip, 16).unwrap();
            let port = u16::from_str_radix(port, 16).unwrap();
            return format!("{}:{port}", std::net::Ipv4Addr::from(ip.swap_bytes()));
        }
    }
    panic!("process {pid} has no listening TCP socket");
}

/// A corrupt pack in a dead sibling is quarantined and the sibling blocked
/// with words that say so: no log line claims the store refuses the
/// destination or that uploads back off (nothing does), and the blocked
/// reason does not call a directory with a pack left in it "drained".
#[test]
fn a_corrupt_pack_is_reported_as_corrupt_not_as_a_refused_destination() {
    let s = Scratch::new();
    let (dir, ids) = s.dead_sibling("r1-00000001", 2);
    let (id, mut bytes) = pack_bytes(&[b"a record whose byte is flipped"]);
    bytes[HEADER_LEN + 6] ^= 0xff;
    std::fs::write(dir.join(format!("{id}.ready")), bytes).unwrap();
    let out = run(spool()
        .env("RUST_LOG", "info")
        .args(["run", "--once", "--timeout", "15", "--spool-root"])
        .arg(&s.root));
    assert_eq!(code(&out), 1, "blocked: {}", describe(&out));
    let err = stderr(&out);
    assert!(!err.contains("refuses this destination"), "{err}");
    assert!(!err.contains("back off"), "{err}");
    assert!(err.contains("quarantined"), "{err}");
    let want: BTreeSet<String> = ids.into_iter().collect();
    assert_eq!(s.indexed(), want);
    let record = std::fs::read_to_string(dir.join(spool_lock::LOCK_FILE_NAME)).unwrap();
    assert!(
        record.contains("blocked") && !record.contains("drained"),
        "{record}"
    );
    assert!(dir.join(format!("{id}.quarantined")).exists());
}

/// Out of descriptors from the start (`prlimit --nofile=N`, N from 3 to
/// 16): `run --once` and `produce --serve` fail or succeed with a message,
/// never a panic (tokio's signal driver, which panicked on EMFILE, is not
/// built: signals are taken by `sigwait`).
#[test]
fn too_few_descriptors_is_an_error_never_a_panic() {
    let s = Scratch::new();
    for n in 3..=16 {
        for args in [
            vec!["run", "--once", "--timeout", "2", "--spool-root"],
            vec![
                "produce",
                "--packs",
                "1",
                "--serve",
                "--timeout",
                "2",
                "--spool-root",
            ],
        ] {
            let out = run(Command::new("prlimit")
                .arg(format!("--nofile={n}"))
                .arg(spool_tests::spool_bin())
                .args(&args)
                .arg(&s.root));
            let err = stderr(&out);
            assert!(
                code(&out) != 101 && !err.contains("panicked"),
                "nofile={n} {args:?}: {}",
                describe(&out)
            );
        }
    }
}
