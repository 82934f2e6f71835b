//! The TOML file: which one is read (`--config`, else `$SPOOL_CONFIG`, else
//! `./spool.toml` if present) and its schema, which is the key table's: a
//! section per [`sections`] name, a field per key in it. Anything else —
//! an unknown section or field, a value that is not a string, number or
//! boolean — is refused naming it, the file and the known keys. Values are
//! kept raw and parsed by [`parse_value`](super::parse::parse_value) like
//! every other source's.

use std::path::{Path, PathBuf};

use super::keys::{key_named, sections, KEYS};
use super::ConfigError;

fn toml_raw(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Which file to read: `flag` (`--config`), else `config_env`
/// (`$SPOOL_CONFIG`), else `./spool.toml` if present.
pub(crate) fn config_path(flag: Option<&Path>, config_env: Option<String>) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_path_buf());
    }
    if let Some(p) = config_env.filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let local = PathBuf::from("spool.toml");
    local.is_file().then_some(local)
}

fn known_keys() -> String {
    KEYS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
}

/// 1-based line and column of byte `at` of `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The largest config file read: a real one is a few KiB; anything bigger
/// is a mistake (`--config /dev/zero`), refused before it fills memory.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The text of a config file that is a regular file of at most
/// [`MAX_CONFIG_BYTES`]. Its type is checked before it is opened, so a
/// FIFO (or a device) is refused instead of hanging the command on an open
/// that waits for a writer; read through a bound, so a file that grows while it
/// is read cannot exceed it either.
fn read_bounded(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read as _;
    let cannot = |what: String| {
        ConfigError(format!(
            "cannot read the config file {}: {what}; fix it, or point --config / SPOOL_CONFIG elsewhere",
            path.display()
        ))
    };
    let not_regular = || {
        cannot(
            "it is not a regular file (a FIFO, a device, a directory or a socket); \
             give a TOML file"
                .into(),
        )
    };
    // The type first, by stat (no open: opening a FIFO waits for a
    // writer), then again on the descriptor (a swap in between).
    let meta = std::fs::metadata(path).map_err(|e| cannot(e.to_string()))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let file = std::fs::File::open(path).map_err(|e| cannot(e.to_string()))?;
    let meta = file.metadata().map_err(|e| cannot(e.to_string()))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(cannot(format!(
            "it holds {} bytes, more than the {MAX_CONFIG_BYTES} a config file may",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| cannot(e.to_string()))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(cannot(format!(
            "it grew past the {MAX_CONFIG_BYTES} bytes a config file may while it was read"
        )));
    }
    String::from_utf8(bytes).map_err(|_| cannot("it is not UTF-8 text".into()))
}

/// Reads `path` into (key name, raw value) pairs, in file order by section.
pub(crate) fn read_file(path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let text = read_bounded(path)?;
    let refused = |what: String| {
        ConfigError(format!(
            "config file {} is refused: {what}; known keys: {}",
            path.display(),
            known_keys()
        ))
    };
    let table: toml::Table = toml::from_str(&text).map_err(|e| {
        let at = e.span().map(|span| line_col(&text, span.start));
        refused(match at {
            Some((line, col)) => format!("{} (line {line}, column {col})", e.message().trim()),
            None => e.message().trim().into(),
        })
    })?;
    let known = sections();
    let mut out = Vec::new();
    for (section, fields) in &table {
        if !known.contains(&section.as_str()) {
            return Err(refused(format!(
                "unknown section `{section}`, expected one of {}",
                known.join(", ")
            )));
        }
        let Some(fields) = fields.as_table() else {
            return Err(refused(format!("`{section}` is not a [section]")));
        };
        for (field, v) in fields {
            let name = format!("{section}.{field}");
            let Some(key) = key_named(&name) else {
                let here: Vec<&str> = KEYS
                    .iter()
                    .filter(|k| k.section() == section)
                    .map(|k| k.field())
                    .collect();
                return Err(refused(format!(
                    "unknown field `{field}` in [{section}], expected one of {}",
                    here.join(", ")
                )));
            };
            let raw = toml_raw(v).ok_or_else(|| {
                ConfigError(format!(
                    "bad value for {name} (file {}): {} is not allowed; allowed: {}",
                    path.display(),
                    match v.type_str() {
                        "array" => "an array",
                        "table" => "a table",
                        "datetime" => "a datetime",
                        other => other,
                    },
                    key.kind.allowed()
                ))
            })?;
            out.push((name, raw));
        }
    }
    Ok(out)
}
