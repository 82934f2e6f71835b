//! The bodies of spool's fuzz targets, shared by the libFuzzer targets in
//! `fuzz_targets/` (run on demand: `cargo xtask fuzz [TARGET] [--minutes M]`)
//! and by the corpus replay in `tests/tests/fuzz_corpus.rs`, which runs every
//! committed input in `fuzz/corpus/<target>/` as an ordinary test in CI.
//!
//! Each body states the properties it checks, beyond "does not panic":
//! a fuzzer only finds what a body asserts.

use std::io::Read;

use spool_core::pack::{validate_bytes, PackReader, PackWriter};
use spool_core::PackId;

/// The names of the targets, as in `fuzz/Cargo.toml` and `fuzz/corpus/`.
pub const TARGETS: &[&str] = &[
    "pack_validate",
    "pack_roundtrip",
    "owner_record",
    "catalog_url",
    "store_url",
    "config",
];

/// Runs the body of target `name` on `data`. Panics on an unknown name.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "pack_validate" => pack_validate(data),
        "pack_roundtrip" => pack_roundtrip(data),
        "owner_record" => owner_record(data),
        "catalog_url" => catalog_url(data),
        "store_url" => store_url(data),
        "config" => config(data),
        other => panic!("unknown fuzz target {other:?} (known: {TARGETS:?})"),
    }
}

/// A read that hands out at most 7 bytes a call, so the reader's buffering
/// meets every boundary a slow file or a socket would give it.
struct Trickle<'a>(&'a [u8]);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.len().min(buf.len()).min(7);
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

/// Arbitrary bytes as a pack: the validator and the record reader must
/// agree. When validation accepts, the reader yields exactly `records`
/// records whose lengths add up inside the pack, and ends with the same
/// summary; when validation refuses, the reader must refuse too (never hand
/// out a "complete" pack the validator rejected).
pub fn pack_validate(data: &[u8]) {
    let validated = validate_bytes(data, None);
    let mut reader = match PackReader::new(Trickle(data)) {
        Ok(r) => r,
        Err(_) => {
            assert!(
                validated.is_err(),
                "the reader refused a header the validator accepted"
            );
            return;
        }
    };
    let mut records = 0u64;
    let mut bytes = 0u64;
    let mut buf = Vec::new();
    let read_all = loop {
        match reader.next_record_into(&mut buf) {
            Ok(true) => {
                records += 1;
                bytes += buf.len() as u64;
                assert!(bytes <= data.len() as u64, "records longer than the pack");
            }
            Ok(false) => break true,
            Err(_) => break false,
        }
    };
    match validated {
        Ok(summary) => {
            assert!(read_all, "the reader refused a pack the validator accepted");
            assert_eq!(summary.records, records);
            assert_eq!(summary.bytes, data.len() as u64);
            let read = reader.summary().expect("a summary after the last record");
            assert_eq!(read.sha256, summary.sha256);
            assert_eq!(read.id, summary.id);
        }
        Err(e) => {
            assert!(
                !read_all,
                "the reader accepted a pack the validator refused: {e}"
            );
        }
    }
}

/// Arbitrary bytes cut into records: a pack written from them validates,
/// reads back record for record, and any single flipped byte is refused.
pub fn pack_roundtrip(data: &[u8]) {
    let (cuts, body) = data.split_at(data.len().min(8));
    let mut records = Vec::new();
    let mut rest = body;
    for &c in cuts {
        let n = (c as usize).min(rest.len());
        let (r, tail) = rest.split_at(n);
        records.push(r);
        rest = tail;
    }
    records.push(rest);
    let id = PackId::with_timestamp(1_700_000_000_000);
    let mut w = PackWriter::new(id, 1_700_000_000_000);
    for r in &records {
        w.push_record(r);
    }
    let pack = w.finish();
    let summary = validate_bytes(&pack, Some(id)).expect("a written pack validates");
    assert_eq!(summary.records, records.len() as u64);
    let back: Vec<Vec<u8>> = PackReader::new(&pack[..])
        .expect("header")
        .collect::<Result<_, _>>()
        .expect("a written pack reads back");
    assert_eq!(back.len(), records.len());
    for (a, b) in back.iter().zip(&records) {
        assert_eq!(a.as_slice(), *b);
    }
    // One flipped bit anywhere is caught (header, records, footer, trailer).
    if !pack.is_empty() {
        let at = data
            .iter()
            .fold(0usize, |a, &b| a.wrapping_mul(31).wrapping_add(b as usize))
            % pack.len();
        let mut bad = pack.clone();
        bad[at] ^= 0x01;
        assert!(
            validate_bytes(&bad, Some(id)).is_err(),
            "a pack with byte {at} flipped validated"
        );
    }
}

/// Arbitrary lock-file contents: parsing never panics; a parsed record
/// renders to at most what a reader reads, and rendering is a fixed point
/// after one pass (what a holder writes reads back exactly as written).
pub fn owner_record(data: &[u8]) {
    let Some(first) = spool_lock::OwnerRecord::parse(data) else {
        return;
    };
    let written = first.render();
    assert!(
        written.len() <= 4096,
        "a record renders to {} bytes",
        written.len()
    );
    let read =
        spool_lock::OwnerRecord::parse(written.as_bytes()).expect("a rendered record parses");
    assert_eq!(
        read.render(),
        written,
        "what was written does not read back as written"
    );
}

/// Arbitrary text as a catalog URL: parsing never panics, and neither the
/// redacted form nor an error message shows a secret: the URL's password
/// or a `password=` parameter (checked where the secret is at least 6
/// characters and occurs only once in the input, so that it cannot also be
/// part of the host or the path). A secret that is also part of the
/// messages' own wording (`ckhous` in "expected clickhouse://...") may show
/// as often as that wording does, no more.
pub fn catalog_url(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let shown = match spool_catalog::CatalogUrl::parse(text) {
        Ok(url) => url.redacted(),
        Err(e) => e.to_string(),
    };
    for secret in secrets(text) {
        if secret.len() >= 6 && text.matches(secret.as_str()).count() == 1 {
            let in_wording = MESSAGE_WORDING.matches(secret.as_str()).count();
            assert!(
                shown.matches(secret.as_str()).count() <= in_wording,
                "{shown:?} shows the secret {secret:?}"
            );
        }
    }
}

/// The fixed wording of the catalog URL messages and redacted forms
/// (spool-catalog's `target.rs` and the url crate's parse errors), one
/// phrase a line.
const MESSAGE_WORDING: &str = "invalid catalog URL
expected clickhouse://HOST:PORT/DATABASE, sqlite:///ABS/PATH.db or memory://
must be ASCII letters, digits and '_' (not starting with a digit, at most 64)
table_prefix
database
async_insert=: expected 1, true, 0 or false
unknown parameter (known: table_prefix, user, password, async_insert)
no host
a SQLite catalog is a local file: sqlite:///ABS/PATH.db (three slashes)
the SQLite path is not UTF-8 once decoded
the SQLite path must be absolute
unknown scheme; expected clickhouse, sqlite or memory
empty host
invalid international domain name
invalid port number
invalid IPv4 address
invalid IPv6 address
invalid domain character
relative URL without a base
relative URL with a cannot-be-a-base base
a cannot-be-a-base URL doesn't have a host to set
URLs more than 4 GB are not supported";

/// The secrets a catalog URL carries: its password and `password=` values,
/// as spelled in the input.
fn secrets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(parsed) = url::Url::parse(text) {
        // As the user spelled it: url hands it out percent-encoded.
        if let Some(pw) = parsed.password() {
            let raw: String = url::form_urlencoded::parse(format!("x={pw}").as_bytes())
                .map(|(_, v)| v.into_owned())
                .collect();
            out.push(raw);
        }
    }
    if let Some((_, query)) = text.split_once('?') {
        for kv in query.split(['&', '#']) {
            if let Some(v) = kv.strip_prefix("password=") {
                out.push(v.to_owned());
            }
        }
    }
    out
}

/// Arbitrary text as a store URL: building a store never panics and never
/// touches the network. `file://` URLs create their directory, so the
/// fuzzer only feeds the other schemes (the file case has its own tests).
pub fn store_url(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.trim_start().to_ascii_lowercase().starts_with("file") {
        return;
    }
    let _ = spool_upload::Store::from_url(text, &spool_upload::ClientConfig::default());
}

/// Arbitrary bytes as a config file (`spool.toml`), read with no
/// environment and no flags: loading never panics; a refusal names the
/// file it read; and every value loaded from the file, shown as
/// `spool config show` shows it, parses back to the same value (so what an
/// operator reads there is what the service runs with, and pasting it into
/// a config means the same). URLs and names are left out of the last check:
/// they are shown with credentials masked, on purpose.
pub fn config(data: &[u8]) {
    use spool_service::config::{parse_value, Config, Source, Value};
    let thread = format!("{:?}", std::thread::current().id());
    let id: String = thread.chars().filter(char::is_ascii_digit).collect();
    let path = std::env::temp_dir().join(format!(
        "spool-fuzz-config-{}-{id}.toml",
        std::process::id()
    ));
    std::fs::write(&path, data).expect("write the scratch config file");
    let no_env = |_: &str| -> Option<String> { None };
    let loaded = Config::load_with(Some(&path), &[], &no_env);
    let _ = std::fs::remove_file(&path);
    let cfg = match loaded {
        Ok(cfg) => cfg,
        Err(e) => {
            assert!(
                e.0.contains(&path.display().to_string()),
                "a refusal of a config file does not name the file: {e}"
            );
            return;
        }
    };
    for entry in cfg.entries() {
        let (Source::File(_), Some(value)) = (&entry.source, &entry.value) else {
            continue;
        };
        if matches!(value, Value::Text(_)) {
            continue;
        }
        let shown = value.to_string();
        match parse_value(entry.key, &shown, &entry.source) {
            Ok(again) => assert_eq!(
                &again, value,
                "{} is shown as {shown:?}, which reads back as another value",
                entry.key.name
            ),
            Err(e) => panic!(
                "{} is shown as {shown:?}, which is refused: {e}",
                entry.key.name
            ),
        }
    }
    let _ = cfg.upload();
    let _ = cfg.lock_options();
    let _ = cfg.access();
    let _ = cfg.destination();
}
