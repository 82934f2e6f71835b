//! The shipped examples stay true: `examples/spool.toml` loads with the
//! real `spool config show` and mentions every key it knows, and
//! `examples/spool.service` keeps the settings its comments explain.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use serde_json::Value;
use spool_tests::{describe, output, spool};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

#[test]
fn example_config_loads_and_mentions_every_key() {
    let path = example("spool.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let out = output(
        spool()
            .args(["config", "show", "--json", "--config"])
            .arg(&path)
            .env_remove("SPOOL_ROOT")
            .env_remove("SPOOL_CONFIG"),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys = v["keys"].as_array().expect("a key list");
    assert!(keys.len() > 20, "{v}");
    for k in keys {
        let name = k["key"].as_str().unwrap();
        let (section, leaf) = name.split_once('.').unwrap();
        let at = text
            .find(&format!("\n[{section}]\n"))
            .unwrap_or_else(|| panic!("section [{section}] missing from {}", path.display()));
        let rest = &text[at + 1..];
        let end = rest[1..].find("\n[").map_or(rest.len(), |e| e + 1);
        let body = &rest[..end];
        assert!(
            body.lines().any(|l| {
                let l = l.trim_start_matches('#').trim_start();
                l.starts_with(&format!("{leaf} = "))
            }),
            "{name} is not in [{section}] of {} (set or commented)",
            path.display()
        );
    }
    // What the file sets is read from it.
    let root = keys.iter().find(|k| k["key"] == "spool.root").unwrap();
    assert_eq!(root["value"], "/var/lib/spool");
    assert!(
        root["source"].as_str().unwrap().starts_with("file "),
        "{root}"
    );
}

#[test]
fn example_unit_restarts_on_failure_stops_with_sigterm_after_the_flush_and_keeps_state_off_tmp() {
    let text = std::fs::read_to_string(example("spool.service")).unwrap();
    let setting = |key: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key}= missing"))
            .to_string()
    };
    assert_eq!(setting("Restart"), "on-failure");
    assert_eq!(setting("KillSignal"), "SIGTERM");
    assert_eq!(setting("StateDirectory"), "spool");
    assert!(setting("ExecStart").contains("spool run --config /etc/spool/spool.toml"));
    // Above the default stop flush timeout (10 s) with room for the stop.
    let stop: u64 = setting("TimeoutStopSec").parse().unwrap();
    assert!(stop >= 20, "TimeoutStopSec={stop}");
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(!l.contains("/tmp"), "state under /tmp: {l}");
    }
}
