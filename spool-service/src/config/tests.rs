//! Unit tests of the configuration: precedence, every key readable from
//! the file, refusals, masking, embedded defaults.

use std::collections::HashMap;
use std::time::Duration;

use spool_catalog::LeaseScope;

use super::keys::{self, KEYS};
use super::*;

fn load(
    file: Option<&str>,
    env: &[(&str, &str)],
    flags: Vec<FlagValue>,
) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.toml");
    if let Some(text) = file {
        std::fs::write(&path, text).unwrap();
    }
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::load_with(file.map(|_| path.as_path()), &flags, &|k: &str| {
        env.get(k).cloned()
    })
}

#[test]
fn precedence_flag_env_file_default() {
    let file = "[lease]\nttl = 10\nscope = \"catalog\"\n[service]\npoll_interval = \"2s\"\nmax_backoff = 7\n";
    let env = [("SPOOL_LEASE_TTL", "20"), ("SPOOL_POLL_INTERVAL", "3s")];
    let flags = vec![FlagValue::new(&keys::LEASE_TTL.key, "40")];
    let c = load(Some(file), &env, flags).unwrap();
    assert_eq!(keys::LEASE_TTL.get(&c), Duration::from_secs(40));
    assert!(matches!(c.source(&keys::LEASE_TTL.key), Some(Source::Flag(f)) if f == "--lease-ttl"));
    assert_eq!(keys::POLL_INTERVAL.get(&c), Duration::from_secs(3));
    assert!(matches!(
        c.source(&keys::POLL_INTERVAL.key),
        Some(Source::Env(_))
    ));
    assert_eq!(keys::MAX_BACKOFF.get(&c), Duration::from_secs(7));
    assert!(matches!(
        c.source(&keys::MAX_BACKOFF.key),
        Some(Source::File(_))
    ));
    assert_eq!(keys::LEASE_SCOPE.get(&c), LeaseScope::Catalog);
    assert_eq!(keys::RECHECK_INTERVAL.get(&c), Duration::from_secs(30));
    assert_eq!(
        c.source(&keys::RECHECK_INTERVAL.key),
        Some(&Source::Default)
    );
}

#[test]
fn a_ttl_without_room_for_the_fence_margin_is_refused() {
    // 5 s is the shortest TTL with room for the (lowered) fence margin
    // since LeaseConfig::new adapts the margin to short TTLs.
    // The key's own minimum says so: no message about a margin the
    // operator never set.
    for ttl in ["3", "4"] {
        let flags = vec![FlagValue::new(&keys::LEASE_TTL.key, ttl)];
        let e = load(None, &[], flags).unwrap_err();
        assert!(
            e.0.contains("lease.ttl") && e.0.contains("at least 5s") && !e.0.contains("fence"),
            "{e}"
        );
    }
    let flags = vec![FlagValue::new(&keys::LEASE_TTL.key, "5")];
    load(None, &[], flags).unwrap();
}

#[test]
fn every_key_has_a_file_field_and_a_unique_env() {
    let mut envs = std::collections::HashSet::new();
    for k in KEYS {
        assert!(envs.insert(k.env), "{} env reused", k.name);
        let (section, field) = k.name.split_once('.').unwrap();
        let text = format!("[{section}]\n{field} = \"x\"\n");
        match load(Some(&text), &[], Vec::new()) {
            Ok(_) => {}
            Err(e) => assert!(
                e.0.starts_with(&format!("bad value for {}", k.name)),
                "{}: {}",
                k.name,
                e.0
            ),
        }
    }
}

#[test]
fn unknown_keys_and_bad_values_are_refused_naming_them() {
    let e = load(Some("[lease]\nttl = 10\nttls = 3\n"), &[], Vec::new()).unwrap_err();
    assert!(e.0.contains("ttls") && e.0.contains("known keys"), "{e}");
    let e = load(Some("[leases]\nttl = 10\n"), &[], Vec::new()).unwrap_err();
    assert!(e.0.contains("leases"), "{e}");
    let e = load(Some("[lease]\nttl = 2\n"), &[], Vec::new()).unwrap_err();
    assert!(
        e.0.contains("lease.ttl") && e.0.contains("\"2\"") && e.0.contains("at least 5s"),
        "{e}"
    );
    let e = load(None, &[("SPOOL_LEASE_SCOPE", "rack")], Vec::new()).unwrap_err();
    assert!(
        e.0.contains("lease.scope") && e.0.contains("rack") && e.0.contains("node or catalog"),
        "{e}"
    );
    let flags = vec![FlagValue::from_set("upload.max_workers=0").unwrap()];
    let e = load(None, &[], flags).unwrap_err();
    assert!(
        e.0.contains("upload.max_workers") && e.0.contains("≥ 1"),
        "{e}"
    );
    let flags = vec![FlagValue::new(&keys::STORE.key, "ftp://x/y")];
    let e = load(None, &[], flags).unwrap_err();
    assert!(
        e.0.contains("destination.store") && e.0.contains("ftp"),
        "{e}"
    );
}

#[test]
fn embedded_defaults_under_the_root() {
    let root = tempfile::tempdir().unwrap();
    let flags = vec![FlagValue::new(
        &keys::ROOT.key,
        root.path().display().to_string(),
    )];
    let c = load(None, &[], flags).unwrap();
    let r = root.path().canonicalize().unwrap();
    assert_eq!(
        c.store_url().unwrap(),
        format!("file://{}/.store", r.display())
    );
    assert_eq!(
        c.catalog_url().unwrap(),
        format!("sqlite://{}/.catalog.db", r.display())
    );
    assert_eq!(c.source(&keys::STORE.key), Some(&Source::Embedded));
    let (key, dir) = c.key_dir().unwrap();
    assert_eq!(dir, r.join(&key));
}

/// A local catalog's `index_linger` defaults to 0 (a lone pack is indexed
/// at once, however soon after the last); a ClickHouse catalog's stays
/// 50 ms; a value someone set is kept either way.
#[test]
fn a_local_catalog_indexes_without_a_linger_unless_one_is_set() {
    let root = tempfile::tempdir().unwrap();
    let linger = |env: &[(&str, &str)]| {
        let flags = vec![FlagValue::new(
            &keys::ROOT.key,
            root.path().display().to_string(),
        )];
        keys::INDEX_LINGER.get(&load(None, env, flags).unwrap())
    };
    assert_eq!(linger(&[]), Duration::ZERO);
    assert_eq!(linger(&[("SPOOL_CATALOG", "memory://")]), Duration::ZERO);
    assert_eq!(
        linger(&[("SPOOL_INDEX_LINGER", "20ms")]),
        Duration::from_millis(20)
    );
    let ch = ("SPOOL_CATALOG", "clickhouse://127.0.0.1:8123/spool");
    assert_eq!(linger(&[ch]), Duration::from_millis(50));
    assert_eq!(
        linger(&[ch, ("SPOOL_INDEX_LINGER", "5s")]),
        Duration::from_secs(5)
    );
}

/// `lease.node_name` (`SPOOL_NODE_NAME`) reaches the service's node name;
/// unset, it is this host's name.
#[test]
fn the_node_name_reaches_the_service_config() {
    let root = tempfile::tempdir().unwrap();
    let flags = || {
        vec![FlagValue::new(
            &keys::ROOT.key,
            root.path().display().to_string(),
        )]
    };
    let sc = |c: &Config| {
        let store = spool_upload::Store::from_url("memory://", &Default::default()).unwrap();
        let catalog = spool_catalog::open("memory://").unwrap();
        c.service_config(store, catalog).unwrap()
    };
    let c = load(None, &[("SPOOL_NODE_NAME", "node-17")], flags()).unwrap();
    assert_eq!(sc(&c).node_name, "node-17");
    let c = load(None, &[], flags()).unwrap();
    assert_eq!(sc(&c).node_name, spool_lock::host_name());
    let e = load(None, &[("SPOOL_NODE_NAME", "a/b")], flags()).unwrap_err();
    assert!(e.0.contains("lease.node_name"), "{e}");
}

/// A spool root whose name holds characters a URL gives a meaning to
/// (`%`, `?`, `#`, `+`, a space) gets embedded URLs that name exactly it:
/// before, `?` cut the catalog path into a query ("unknown parameter"),
/// `+` decoded to a space, and `%20` was a literal directory name of the
/// store (found by the `config` fuzz target).
#[test]
fn embedded_urls_name_a_root_with_url_characters_exactly() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().canonicalize().unwrap().join("a %25?b#c+d e");
    std::fs::create_dir(&root).unwrap();
    let flags = vec![FlagValue::new(&keys::ROOT.key, root.display().to_string())];
    let c = load(None, &[], flags).unwrap();
    let catalog = spool_catalog::CatalogUrl::parse(&c.catalog_url().unwrap()).unwrap();
    assert!(
        matches!(&catalog, spool_catalog::CatalogUrl::Sqlite { path, .. } if *path == root.join(".catalog.db")),
        "{catalog:?}"
    );
    spool_upload::Store::from_url(
        &c.store_url().unwrap(),
        &spool_upload::ClientConfig::default(),
    )
    .unwrap();
    let made: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        made,
        [".store"],
        "the store directory is made inside the root"
    );
    c.destination().unwrap();
}

#[test]
fn a_refused_catalog_url_is_shown_masked() {
    let e = load(
        None,
        &[("SPOOL_CATALOG", "clickhouse://u:hunter2@h:8123/d?bogus=1")],
        Vec::new(),
    )
    .unwrap_err();
    assert!(!e.0.contains("hunter2"), "{e}");
}

#[test]
fn sizes_and_durations() {
    assert_eq!(parse_bytes("64MiB"), Some(64 << 20));
    assert_eq!(parse_bytes("1GB"), Some(1_000_000_000));
    assert_eq!(parse_bytes("12"), Some(12));
    assert_eq!(parse_bytes("12 parsecs"), None);
    assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
    assert_eq!(parse_duration("1.5"), Some(Duration::from_millis(1500)));
    assert_eq!(parse_duration("-1"), None);
    assert_eq!(parse_duration("soon"), None);
    assert_eq!(parse_duration(".5"), Some(Duration::from_millis(500)));
    assert_eq!(parse_duration("5."), Some(Duration::from_secs(5)));
    assert_eq!(parse_duration("."), None);
    assert_eq!(parse_duration("1.2.3"), None);
    assert_eq!(
        parse_duration("1000000000"),
        Some(Duration::from_secs(1_000_000_000))
    );
    assert_eq!(parse_duration("1000000000.000000001"), None);
    assert_eq!(parse_duration("0.1"), Some(Duration::from_millis(100)));
    assert_eq!(
        parse_duration("0.0000000019"),
        Some(Duration::from_nanos(1))
    );
}

#[test]
fn every_setting_reads_its_default() {
    let c = load(None, &[], Vec::new()).unwrap();
    // one read per handle: a handle whose type does not match its kind panics
    let _ = (
        keys::ROOT.get(&c),
        keys::RANK.get(&c),
        keys::MAX_BYTES.get(&c),
        keys::ALLOW_SHARED_FILESYSTEM.get(&c),
        keys::CATALOG.get(&c),
        keys::STORE.get(&c),
        keys::STORE_ID.get(&c),
        keys::LEASE_SCOPE.get(&c),
        keys::LEASE_TTL.get(&c),
        keys::POLL_INTERVAL.get(&c),
        keys::RECHECK_INTERVAL.get(&c),
        keys::MAX_BACKOFF.get(&c),
        keys::STAGING_MAX_AGE.get(&c),
        keys::ADOPTION_SLICE.get(&c),
        keys::INDEX_BATCH.get(&c),
        keys::STOP_FLUSH_TIMEOUT.get(&c),
    );
    let _ = (
        keys::UNHEALTHY_AFTER.get(&c),
        keys::CATALOG_CLUSTER.get(&c),
        keys::METRICS_ADDR.get(&c),
        keys::METRICS_LINGER.get(&c),
    );
    assert!(c.upload().is_ok());
    let _ = c.client();
    assert_eq!(KEYS.len(), c.entries().count());
}

#[test]
fn the_file_schema_is_the_key_table() {
    assert_eq!(
        keys::sections(),
        [
            "spool",
            "destination",
            "catalog",
            "lease",
            "service",
            "upload",
            "client",
            "metrics"
        ]
    );
    let e = load(Some("ttl = 3\n"), &[], Vec::new()).unwrap_err();
    assert!(e.0.contains("ttl") && e.0.contains("known keys"), "{e}");
}

#[test]
fn every_key_has_a_unique_argument_name_that_finds_it() {
    let mut seen = std::collections::HashSet::new();
    for k in KEYS {
        let name = k.argument_name();
        assert!(seen.insert(name.clone()), "argument name {name} twice");
        assert!(
            name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{name} is not a Python identifier"
        );
        assert_eq!(keys::key_for_argument(&name).map(|f| f.name), Some(k.name));
    }
    assert_eq!(keys::ROOT.key.argument_name(), "root");
    assert_eq!(keys::LEASE_TTL.key.argument_name(), "lease_ttl");
    assert_eq!(keys::POLL_INTERVAL.key.argument_name(), "poll_interval");
}

#[test]
fn an_argument_wins_over_the_file_and_is_named_in_refusals() {
    let file = "[lease]\nttl = 10\n";
    let flags = vec![FlagValue::argument(&keys::LEASE_TTL.key, "20")];
    let c = load(Some(file), &[("SPOOL_LEASE_TTL", "15")], flags).unwrap();
    assert_eq!(keys::LEASE_TTL.get(&c), Duration::from_secs(20));
    assert_eq!(
        c.source(&keys::LEASE_TTL.key),
        Some(&Source::Argument("lease_ttl".into()))
    );
    let flags = vec![FlagValue::argument(&keys::UPLOAD_MAX_WORKERS.key, "0")];
    let e = load(None, &[], flags).unwrap_err();
    assert!(
        e.0.contains("upload.max_workers (argument upload_max_workers)")
            && e.0.contains("allowed: a whole number"),
        "{e}"
    );
}

/// `spool config show` shows each duration as it reads back: a value finer
/// than a millisecond is no longer shown rounded down (found by the
/// `config` fuzz target: `index_linger = "1.5ms"` was shown as `1ms`).
#[test]
fn a_duration_is_shown_as_it_reads_back() {
    let k = &keys::INDEX_LINGER.key;
    let source = Source::Default;
    for raw in [
        "1.5ms",
        "0.0015005",
        "2.5",
        "30s",
        "1500ms",
        "0.1",
        "1h",
        "0.000000001",
    ] {
        let value = parse_value(k, raw, &source).expect(raw);
        let shown = value.to_string();
        assert_eq!(
            parse_value(k, &shown, &source).expect(&shown),
            value,
            "{raw:?} is shown as {shown:?}"
        );
    }
    assert_eq!(
        parse_value(k, "1.5ms", &source).unwrap().to_string(),
        "0.0015s"
    );
    assert_eq!(parse_value(k, "90s", &source).unwrap().to_string(), "90s");
}

#[test]
fn the_catalog_cluster_comes_from_set_the_file_or_the_environment_and_joins_the_opened_url() {
    let url = "clickhouse://h1:8123,h2:8123,h3:8123/spool";
    let base = [("SPOOL_CATALOG", url), ("SPOOL_STORE", "s3://b/p")];
    // Unset: the URL opens as given.
    let c = load(None, &base, Vec::new()).unwrap();
    assert_eq!(keys::CATALOG_CLUSTER.get(&c), None);
    assert_eq!(c.catalog_open_url().unwrap(), url);
    // The file, the environment over it, --set over both.
    let file = "[catalog]\ncluster = \"from_file\"\n";
    let c = load(Some(file), &base, Vec::new()).unwrap();
    assert_eq!(
        c.catalog_open_url().unwrap(),
        format!("{url}?cluster=from_file")
    );
    assert!(matches!(
        c.source(&keys::CATALOG_CLUSTER.key),
        Some(Source::File(_))
    ));
    let env = [
        ("SPOOL_CATALOG", url),
        ("SPOOL_STORE", "s3://b/p"),
        ("SPOOL_CATALOG_CLUSTER", "from_env"),
    ];
    let c = load(Some(file), &env, Vec::new()).unwrap();
    assert_eq!(keys::CATALOG_CLUSTER.get(&c).as_deref(), Some("from_env"));
    let set = FlagValue::from_set("catalog.cluster=from_set").unwrap();
    let c = load(Some(file), &env, vec![set]).unwrap();
    assert_eq!(
        c.catalog_open_url().unwrap(),
        format!("{url}?cluster=from_set")
    );
    // The catalog key hashes the URL as given, with or without a cluster.
    let plain = load(None, &base, Vec::new()).unwrap();
    assert_eq!(
        c.destination().unwrap().catalog_key().unwrap(),
        plain.destination().unwrap().catalog_key().unwrap()
    );
    // A cluster for a catalog that cannot have one, or a second name.
    let e = load(
        None,
        &[
            ("SPOOL_CATALOG", "sqlite:///x.db"),
            ("SPOOL_CATALOG_CLUSTER", "c"),
        ],
        Vec::new(),
    )
    .unwrap()
    .catalog_open_url()
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("catalog.cluster") && e.contains("clickhouse://"),
        "{e}"
    );
    let e = load(
        None,
        &[
            ("SPOOL_CATALOG", "clickhouse://h/db?cluster=a"),
            ("SPOOL_CATALOG_CLUSTER", "b"),
        ],
        Vec::new(),
    )
    .unwrap()
    .catalog_open_url()
    .unwrap_err()
    .to_string();
    assert!(e.contains("name one"), "{e}");
}

/// The defaults are written once, in the key table: what a library user
/// gets from the constructors (`ServiceConfig::new`, spool-upload's
/// `UploadConfig`/`ClientConfig` defaults, spool-catalog's request
/// timeout) is what the configuration resolves to with nothing set,
/// the local catalog's zero linger included.
#[test]
fn the_library_constructors_default_to_the_key_table() {
    let root = tempfile::tempdir().unwrap();
    for catalog in ["memory://", "clickhouse://127.0.0.1:8123/spool"] {
        let cfg = load(
            None,
            &[("SPOOL_CATALOG", catalog), ("SPOOL_STORE", "memory://")],
            vec![FlagValue::new(
                &keys::ROOT.key,
                root.path().display().to_string(),
            )],
        )
        .unwrap();
        let store = spool_upload::Store::from_url("memory://", &cfg.client()).unwrap();
        let memory = spool_catalog::open("memory://").unwrap();
        let resolved = cfg.service_config(store.clone(), memory.clone()).unwrap();
        let library = ServiceConfig::new(root.path(), cfg.destination().unwrap(), store, memory);
        assert_eq!(resolved.lease_scope, library.lease_scope);
        for (a, b, what) in [
            (resolved.poll_interval, library.poll_interval, "poll"),
            (resolved.lease_ttl, library.lease_ttl, "lease_ttl"),
            (
                resolved.recheck_interval,
                library.recheck_interval,
                "recheck",
            ),
            (resolved.max_backoff, library.max_backoff, "max_backoff"),
            (resolved.staging_max_age, library.staging_max_age, "staging"),
            (resolved.adoption_slice, library.adoption_slice, "slice"),
            (resolved.index_linger, library.index_linger, "linger"),
        ] {
            assert_eq!(a, b, "{what} with {catalog}");
        }
        assert_eq!(resolved.index_batch, library.index_batch);
        assert_eq!(resolved.pipeline_depth, library.pipeline_depth);
        assert_eq!(resolved.upload, library.upload, "upload.*");
        assert_eq!(
            cfg.client(),
            spool_upload::ClientConfig::default(),
            "client.*"
        );
        assert_eq!(
            keys::CATALOG_REQUEST_TIMEOUT.get(&cfg),
            spool_catalog::DEFAULT_REQUEST_TIMEOUT
        );
    }
    assert_eq!(
        keys::INDEX_BATCH.default_value() as usize,
        spool_catalog::MAX_ROWS_PER_STATEMENT
    );
}

/// A value that would only burn a core, or that no network answer can
/// meet, is refused by the table's floor, naming it.
#[test]
fn values_under_a_keys_floor_are_refused() {
    for (var, value) in [
        ("SPOOL_POLL_INTERVAL", "1ms"),
        ("SPOOL_ADOPTION_SLICE", "1ms"),
        ("SPOOL_CLIENT_CONNECT_TIMEOUT", "1ms"),
        ("SPOOL_CATALOG_REQUEST_TIMEOUT", "50ms"),
    ] {
        let err = load(None, &[(var, value)], Vec::new()).unwrap_err();
        assert!(
            err.0.contains(var) && err.0.contains("at least"),
            "{var}: {err}"
        );
    }
    load(None, &[("SPOOL_POLL_INTERVAL", "10ms")], Vec::new()).unwrap();
}

/// A spool root that does not exist yet, under a symlink, resolves to the
/// same embedded destination as once it is created: a command that
/// creates the root loads its configuration once.
#[test]
fn a_missing_root_is_spelled_as_it_will_be_once_created() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("real")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("real"), tmp.path().join("link")).unwrap();
    let root = tmp.path().join("link/a/spool");
    let urls = || {
        let cfg = load(
            None,
            &[],
            vec![FlagValue::new(&keys::ROOT.key, root.display().to_string())],
        )
        .unwrap();
        (cfg.store_url().unwrap(), cfg.catalog_url().unwrap())
    };
    let before = urls();
    assert!(before.1.contains("/real/a/spool/"), "{before:?}");
    std::fs::create_dir_all(&root).unwrap();
    assert_eq!(urls(), before);
}
