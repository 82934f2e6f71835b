//! Invariants that check themselves (in the manner of rust-analyzer's
//! tidy): a test binary of the tests crate, so the fast tier runs it. Each
//! test reads the tree or asks `cargo tree`; none builds anything.
//!
//! - the dependency edges of ARCHITECTURE.md: each crate's spool
//!   dependencies are those its code map lists, spool-upload and
//!   spool-catalog do not depend on each other, nothing below spool-service
//!   depends on it, and no tokio is in the normal-dependency tree of
//!   spool-lock or spool-core;
//! - a workspace build (`cargo build --release` at the root, the default
//!   members) links no `testing` feature into the `spool` binary, and the
//!   `spool` the tests run carries no test seam;
//! - `#![forbid(unsafe_code)]` in every crate root but spool-lock's library;
//! - no `LOCK_UN` and no `nix::fcntl::Flock` anywhere;
//! - no `anyhow` in a library's manifest, no transparent error variant;
//! - a `//!` doc at the top of every source file, and one convention for
//!   where unit tests live;
//! - no run of spaces inside a one-line string literal (a lost line
//!   continuation);
//! - every test TESTING.md names exists;
//! - no declared dependency unused;
//! - the code cites no document outside the repository;
//! - no circle of files in any crate (`tidy/circles.rs`).
//!
//! Each rule's check is a function over text (a file, a manifest, a
//! `cargo tree` listing, a binary's bytes), which its test runs on the tree
//! and a `*_sees_*` test runs on a realistic violation, to see it red.
#![forbid(unsafe_code)]

#[path = "tidy/circles.rs"]
mod circles;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The library crates (no `anyhow`, typed errors).
const LIBRARIES: &[&str] = &[
    "spool-lock",
    "spool-core",
    "spool-upload",
    "spool-catalog",
    "spool-service",
];

/// The workspace root (this crate lives one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives one level below the workspace root")
        .to_path_buf()
}

/// Every `.rs` file of the workspace (not `target/`), relative to the root.
fn rust_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if p.is_dir() {
                walk(&p, root, out);
            } else if name.ends_with(".rs") {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let root = root();
    let mut out = Vec::new();
    for member in workspace_members() {
        walk(&root.join(member), &root, &mut out);
    }
    out.sort();
    out
}

fn workspace_members() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let start = text.find("members = [").expect("a members list");
    let end = start + text[start..].find(']').unwrap();
    text[start..end]
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn read(rel: &Path) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap()
}

/// `cargo tree` at the workspace root, one package name per line.
fn cargo_tree(args: &[&str]) -> String {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root())
        .args(["tree", "--offline", "--prefix", "none"])
        .args(args)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The packages in `package`'s normal-dependency tree.
fn normal_deps(package: &str) -> BTreeSet<String> {
    cargo_tree(&["-p", package, "-e", "normal", "--format", "{p}"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The spool crates `package` depends on directly (normal dependencies).
fn direct_spool_deps(package: &str) -> BTreeSet<String> {
    cargo_tree(&[
        "-p", package, "-e", "normal", "--depth", "1", "--format", "{p}",
    ])
    .lines()
    .skip(1)
    .filter_map(|l| l.split_whitespace().next())
    .filter(|p| p.starts_with("spool-"))
    .map(str::to_owned)
    .collect()
}

/// The edges of ARCHITECTURE.md's code map: its `crate → a, b` lines
/// (`(no spool crate)`: none).
fn code_map(architecture: &str) -> Vec<(String, BTreeSet<String>)> {
    architecture
        .lines()
        .filter_map(|l| l.split_once(" → "))
        .filter(|(from, _)| {
            let from = from.trim();
            (from.starts_with("spool-") || from == "xtask")
                && from.chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
        .map(|(from, to)| {
            let to = to
                .split(',')
                .map(str::trim)
                .filter(|t| t.starts_with("spool-"))
                .map(str::to_owned)
                .collect();
            (from.trim().to_owned(), to)
        })
        .collect()
}

/// Where the crates' direct spool dependencies (`deps`) differ from the
/// code map of `architecture`, and the transitive edges the invariants
/// forbid (`tree`: a crate's whole normal-dependency tree).
fn broken_edges(
    architecture: &str,
    deps: impl Fn(&str) -> BTreeSet<String>,
    tree: impl Fn(&str) -> BTreeSet<String>,
) -> Vec<String> {
    let mut broken = Vec::new();
    let map = code_map(architecture);
    if map.len() < 5 {
        broken.push(format!("ARCHITECTURE.md's code map lists only {map:?}"));
    }
    for (from, listed) in &map {
        let actual = deps(from);
        for extra in actual.difference(listed) {
            broken.push(format!(
                "{from} depends on {extra}, which the code map does not list"
            ));
        }
        for missing in listed.difference(&actual) {
            broken.push(format!(
                "the code map says {from} → {missing}, which it does not use"
            ));
        }
    }
    let mut forbid = |from: &str, to: &[&str]| {
        let deps = tree(from);
        for t in to {
            if deps.contains(*t) {
                broken.push(format!("{from} depends on {t}"));
            }
        }
    };
    forbid("spool-upload", &["spool-catalog"]);
    forbid(
        "spool-catalog",
        &["spool-upload", "spool-core", "spool-lock"],
    );
    for below in ["spool-lock", "spool-core", "spool-upload", "spool-catalog"] {
        forbid(below, &["spool-service", "spool-cli"]);
    }
    for sync in ["spool-lock", "spool-core"] {
        forbid(sync, &["tokio", "tokio-util", "futures-executor"]);
    }
    broken
}

#[test]
fn dependency_edges_of_the_architecture() {
    let broken = broken_edges(
        &read(Path::new("ARCHITECTURE.md")),
        direct_spool_deps,
        normal_deps,
    );
    assert!(
        broken.is_empty(),
        "ARCHITECTURE.md's dependency rules are broken: {broken:#?}"
    );
}

#[test]
fn the_dependency_check_sees_an_edge_the_code_map_does_not_list() {
    let architecture = "```\n\
        spool-core     → spool-lock\n\
        spool-upload   → spool-core\n\
        spool-catalog  → (no spool crate)\n\
        spool-service  → spool-lock, spool-core, spool-upload, spool-catalog\n\
        spool-cli      → spool-lock, spool-core, spool-upload, spool-catalog, spool-service\n\
        ```";
    let map = code_map(architecture);
    assert_eq!(map.len(), 5, "{map:?}");
    let good = |c: &str| {
        map.iter()
            .find(|(f, _)| f == c)
            .map(|(_, d)| d.clone())
            .unwrap_or_default()
    };
    let none = |_: &str| BTreeSet::new();
    assert_eq!(broken_edges(architecture, good, none), Vec::<String>::new());
    // spool-catalog → spool-lock: a direct edge the map does not list
    let with_lock = |c: &str| {
        let mut deps = good(c);
        if c == "spool-catalog" {
            deps.insert("spool-lock".into());
        }
        deps
    };
    assert_eq!(
        broken_edges(architecture, with_lock, none),
        ["spool-catalog depends on spool-lock, which the code map does not list"]
    );
    // the same edge through another crate: the invariants forbid it
    assert_eq!(
        broken_edges(architecture, good, with_lock),
        ["spool-catalog depends on spool-lock"]
    );
    // an edge the map lists and the crate dropped
    let without_core = |c: &str| {
        let mut deps = good(c);
        deps.remove("spool-core");
        deps
    };
    assert!(broken_edges(architecture, without_core, none)
        .contains(&"the code map says spool-upload → spool-core, which it does not use".into()));
    // tokio in spool-core's tree (through some other crate)
    let tokio = |c: &str| BTreeSet::from([format!("{c}-dep"), "tokio".to_string()]);
    let broken = broken_edges(architecture, good, tokio);
    assert!(
        broken.contains(&"spool-core depends on tokio".to_string()),
        "{broken:?}"
    );
}

#[test]
fn a_workspace_build_links_no_test_seam_into_spool() {
    // `cargo tree` at the root resolves features for the default members,
    // as `cargo build --release` at the root does.
    let tree = cargo_tree(&[
        "-e",
        "normal,features",
        "-i",
        "spool-cli",
        "--format",
        "{p} {f}",
    ]);
    let all = cargo_tree(&["-e", "normal,features", "--format", "{p} {f}"]);
    let seams = seams_in_tree(&all);
    assert!(
        seams.is_empty(),
        "a root build enables test seams: {seams:?} (spool-cli's tree:\n{tree})"
    );
}

/// The spool crates of a `cargo tree --format "{p} {f}"` listing built
/// with their `testing` feature.
fn seams_in_tree(tree: &str) -> Vec<&str> {
    tree.lines()
        .filter(|l| l.starts_with("spool-"))
        .filter(|l| l.split([' ', ',']).any(|w| w == "testing"))
        .collect()
}

#[test]
fn the_tree_check_sees_a_testing_feature() {
    let tree = "spool-cli v0.1.0 (/w/spool-cli) \n\
                spool-core v0.1.0 (/w/spool-core) default,testing\n\
                tokio v1.0.0 rt,testing";
    assert_eq!(
        seams_in_tree(tree),
        ["spool-core v0.1.0 (/w/spool-core) default,testing"]
    );
    assert!(seams_in_tree("spool-core v0.1.0 (/w/spool-core) default").is_empty());
}

/// What a test seam leaves in a binary (its debug symbols and texts), one
/// per crate whose `testing` feature the `spool` command could link: the
/// seams of spool-lock (`seams::testing`), spool-core's kill points (their
/// message, `seams::armed`), spool-catalog's (`testing`, the `memory://`
/// catalog).
const SEAM_MARKS: &[&str] = &[
    "10spool_lock5seams7testing",
    "10spool_core5seams5armed",
    "SIGKILL (test seam)",
    "13spool_catalog7testing",
    "13spool_catalog6memory13MemoryCatalog",
];

/// The marks of [`SEAM_MARKS`] found in `binary`.
fn seams_in_binary(binary: &[u8]) -> Vec<&'static str> {
    SEAM_MARKS
        .iter()
        .copied()
        .filter(|m| binary.windows(m.len()).any(|w| w == m.as_bytes()))
        .collect()
}

#[test]
fn the_spool_the_tests_run_carries_no_test_seam() {
    // The tests run `spool_tests::spool_bin()`: `$SPOOL_BIN`, which cargo
    // xtask test builds as README's install does; the workspace build's
    // own `spool` links the seams spool-tests turns on.
    let set = std::env::var_os(spool_tests::SPOOL_BIN).is_some();
    let needs =
        "SPOOL_BIN naming a spool built as README's install does (cargo xtask test sets it)";
    if !spool_tests::required(set, needs) {
        return;
    }
    let bin = spool_tests::spool_bin();
    let seams = seams_in_binary(&std::fs::read(&bin).unwrap());
    assert!(
        seams.is_empty(),
        "{} carries test seams: {seams:?}",
        bin.display()
    );
}

#[test]
fn the_seam_check_sees_the_seams_of_spool_with_seams() {
    // the same command with every seam linked: each mark must be there, or
    // the marks no longer say what a seam leaves
    let bin = std::fs::read(env!("CARGO_BIN_EXE_spool-with-seams")).unwrap();
    assert_eq!(seams_in_binary(&bin), SEAM_MARKS);
}

/// Crate roots: `lib.rs`, `main.rs`, `src/bin/*.rs`, `src/bin/*/main.rs`,
/// and integration tests (`tests/*.rs` of a package).
fn crate_roots() -> Vec<PathBuf> {
    rust_files()
        .into_iter()
        .filter(|p| {
            let s = p.to_string_lossy();
            let parts: Vec<&str> = s.split('/').collect();
            let file = *parts.last().unwrap();
            file == "lib.rs" && parts.len() == 3
                || file == "main.rs" && (parts.len() == 3 || s.contains("/src/bin/"))
                || parts.len() == 4 && parts[1] == "src" && parts[2] == "bin"
                || parts.len() == 3 && parts[1] == "tests"
        })
        .collect()
}

#[test]
fn unsafe_is_forbidden_in_every_crate_but_spool_locks_library() {
    let roots = crate_roots();
    assert!(roots.len() > 20, "found only {roots:?}");
    // spool-lock's FFI (its test helpers fork through spool_lock::testing).
    let allowed = [Path::new("spool-lock/src/lib.rs")];
    let missing: Vec<_> = roots
        .iter()
        .filter(|p| !allowed.contains(&p.as_path()))
        .filter(|p| !forbids_unsafe(&read(p)))
        .collect();
    assert!(
        missing.is_empty(),
        "crate roots without #![forbid(unsafe_code)]: {missing:?}"
    );
}

/// Whether a crate root's `text` has the attribute itself on a line of its
/// own (not in a comment, a doc or a string).
fn forbids_unsafe(text: &str) -> bool {
    text.lines().any(|l| l.trim() == "#![forbid(unsafe_code)]")
}

#[test]
fn the_unsafe_check_sees_a_root_without_the_attribute() {
    assert!(forbids_unsafe(
        "//! doc\n#![forbid(unsafe_code)]\nfn main() {}"
    ));
    assert!(!forbids_unsafe("//! doc\nfn main() {}"));
    assert!(!forbids_unsafe(
        "//! every crate has #![forbid(unsafe_code)]\nfn main() {}"
    ));
    assert!(!forbids_unsafe("// #![forbid(unsafe_code)]\nfn main() {}"));
    assert!(!forbids_unsafe("#![deny(unsafe_code)]\nfn main() {}"));
}

/// The lines of `text`'s code (comments and string literals left out)
/// that unlock or use nix's flock API: `LOCK_UN`, `Flock`, `FlockArg`,
/// `fcntl::flock`, each as a whole name.
fn unlocks(text: &str) -> Vec<String> {
    // spelled in pieces, so this file does not find itself
    let names = [
        ["LOCK", "_UN"].concat(),
        ["Fl", "ock"].concat(),
        ["Fl", "ockArg"].concat(),
    ];
    let nix_flock = ["fcntl::", "flock"].concat();
    code_only(text)
        .lines()
        .filter(|l| names.iter().any(|n| uses_word(l, n)) || uses_word(l, &nix_flock))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn no_unlock_and_no_nix_flock() {
    let mut hits = Vec::new();
    for p in rust_files() {
        for line in unlocks(&read(&p)) {
            hits.push(format!("{}: {line}", p.display()));
        }
    }
    assert!(
        hits.is_empty(),
        "release is a close, never an unlock, and nix's Flock is never used: {hits:?}"
    );
}

#[test]
fn the_unlock_check_sees_an_unlock_and_nix_flock() {
    let flock = ["Fl", "ock"].concat();
    let un = ["LOCK", "_UN"].concat();
    for bad in [
        format!("use nix::fcntl::{{{flock}, {flock}Arg}};"),
        format!("use nix::fcntl::{{\n    {flock},\n}};"),
        format!("let r = unsafe {{ libc::flock(fd, libc::{un}) }};"),
        format!("nix::fcntl::{}(fd, {flock}Arg::Unlock)?;", "flock"),
    ] {
        assert!(!unlocks(&bad).is_empty(), "{bad}");
    }
    for good in [
        format!("// never {un} here\nlet fs = std::os::unix::fs::MetadataExt::mode(&m);"),
        format!("let why = \"not {un}\"; let r = libc::flock(fd, libc::LOCK_EX);"),
        "let flocked = 1;".to_string(),
    ] {
        assert!(unlocks(&good).is_empty(), "{good}");
    }
}

#[test]
fn no_anyhow_in_a_library() {
    let with: Vec<_> = LIBRARIES
        .iter()
        .filter(|l| declares_anyhow(&read(&Path::new(l).join("Cargo.toml"))))
        .collect();
    assert!(
        with.is_empty(),
        "libraries use typed errors (thiserror), anyhow only in binaries: {with:?}"
    );
}

/// Whether a manifest declares anyhow, in any dependency section, by
/// name (`anyhow = ...`, `anyhow.workspace`), as a table
/// (`[dependencies.anyhow]`) or renamed (`package = "anyhow"`).
fn declares_anyhow(manifest: &str) -> bool {
    manifest.lines().map(str::trim).any(|l| {
        let named = l
            .strip_prefix("anyhow")
            .is_some_and(|rest| rest.trim_start().starts_with(['=', '.']));
        let table = l.starts_with('[') && l.trim_end_matches(']').ends_with(".anyhow");
        let renamed = l.replace(' ', "").contains("package=\"anyhow\"");
        named || table || renamed
    })
}

#[test]
fn the_anyhow_check_sees_every_spelling() {
    for bad in [
        "[dependencies]\nanyhow = \"1\"",
        "[dependencies]\nanyhow.workspace = true",
        "[dev-dependencies]\n  anyhow = { workspace = true }",
        "[dependencies.anyhow]\nversion = \"1\"",
        "[target.'cfg(unix)'.dependencies.anyhow]\nversion = \"1\"",
        "[dependencies]\nah = { package = \"anyhow\", version = \"1\" }",
    ] {
        assert!(declares_anyhow(bad), "{bad}");
    }
    assert!(!declares_anyhow(
        "[dependencies]\nthiserror = \"2\"\n# not anyhow"
    ));
}

/// Whether `text` has an `#[error(transparent)]` attribute, however spaced
/// or broken across lines.
fn has_transparent_variant(text: &str) -> bool {
    // spelled in pieces, so this file does not find itself
    let needle = ["#[error(", "transparent)]"].concat();
    let squeezed: String = code_only(text)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    squeezed.contains(&needle)
}

#[test]
fn the_transparent_check_sees_it_however_spaced() {
    let t = ["trans", "parent"].concat();
    for bad in [
        format!("#[error({t})]\nIo(#[from] std::io::Error),"),
        format!("#[error( {t} )]\nIo(#[from] std::io::Error),"),
        format!("#[error(\n    {t}\n)]\nIo(#[from] std::io::Error),"),
    ] {
        assert!(has_transparent_variant(&bad), "{bad}");
    }
    assert!(!has_transparent_variant(&format!(
        "#[error(\"{{0}}\")]\nIo(#[from] std::io::Error), // not #[error({t})]"
    )));
}

#[test]
fn no_transparent_error_variant() {
    let hits: Vec<_> = rust_files()
        .into_iter()
        .filter(|p| has_transparent_variant(&read(p)))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        hits.is_empty(),
        "a wrapping error variant shows its inner message and keeps it as its source \
         (#[error(\"{{0}}\")] with #[from] or #[source]), so the chain holds the inner typed \
         error; a transparent one hides it (exit codes would re-match inner variants): {hits:?}"
    );
}

/// Whether `text` opens with a `//!` doc that says something.
fn starts_with_a_module_doc(text: &str) -> bool {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    first
        .strip_prefix("//!")
        .is_some_and(|doc| !doc.trim().is_empty())
}

#[test]
fn every_source_file_starts_with_a_module_doc() {
    let missing: Vec<_> = rust_files()
        .into_iter()
        .filter(|p| !starts_with_a_module_doc(&read(p)))
        .collect();
    assert!(missing.is_empty(), "files without a //! doc: {missing:?}");
}

#[test]
fn the_module_doc_check_sees_a_file_without_one() {
    assert!(starts_with_a_module_doc("\n//! What this is.\nuse x;"));
    for bad in [
        "use x;\n//! late",
        "// a plain comment\n//! then a doc",
        "//!\n//! an empty first line",
        "#![allow(dead_code)]\n//! after an attribute",
        "",
    ] {
        assert!(!starts_with_a_module_doc(bad), "{bad:?}");
    }
}

/// Inline unit-test modules longer than this move to `<module>/tests.rs`.
const MAX_INLINE_TEST_LINES: usize = 400;

#[test]
fn unit_tests_follow_one_convention() {
    // A module that is a directory (`foo.rs` beside `foo/`) keeps its unit
    // tests in `foo/tests.rs`; any other file keeps them inline at its end,
    // and an inline module that grows past the limit moves out.
    let mut wrong = Vec::new();
    for p in rust_files() {
        if !p.components().any(|c| c.as_os_str() == "src") {
            continue;
        }
        let is_dir_module = root().join(p.with_extension("")).is_dir();
        if let Some(why) = misplaced_unit_tests(&read(&p), is_dir_module) {
            wrong.push(format!("{}: {why}", p.display()));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Why the inline unit tests of a file (`text`; `is_dir_module`: a
/// directory beside it) break the convention, if they do. An inline test
/// module is a `mod tests {` or `mod test {` line, whatever its
/// indentation, visibility or a `#[cfg(test)]` before it on the line.
fn misplaced_unit_tests(text: &str, is_dir_module: bool) -> Option<String> {
    let code = code_only(text);
    let start = code.lines().position(opens_inline_tests)?;
    let inline = code.lines().count() - start;
    if is_dir_module {
        Some("a directory module with inline tests (move them to its tests.rs)".into())
    } else if inline > MAX_INLINE_TEST_LINES {
        Some(format!("{inline} lines of inline tests (over {MAX_INLINE_TEST_LINES}: make it a directory module with tests.rs)"))
    } else {
        None
    }
}

/// Whether `l` opens an inline test module: a `mod tests {` or `mod test {`
/// line, whatever its indentation, visibility or a `#[cfg(test)]` before
/// it on the line.
fn opens_inline_tests(l: &str) -> bool {
    let mut l = l.trim_start();
    l = l.strip_prefix("#[cfg(test)]").unwrap_or(l).trim_start();
    for vis in ["pub(crate) ", "pub(super) ", "pub "] {
        l = l.strip_prefix(vis).unwrap_or(l).trim_start();
    }
    ["mod tests", "mod test"].iter().any(|m| {
        l.strip_prefix(m)
            .is_some_and(|rest| rest.trim_start().starts_with('{'))
    })
}

#[test]
fn the_unit_test_check_sees_misplaced_tests() {
    let long = |head: &str| {
        format!(
            "//! m\nfn f() {{}}\n{head}\n{}}}\n",
            "    #[test] fn t() {}\n".repeat(450)
        )
    };
    for head in [
        "#[cfg(test)]\nmod tests {",
        "#[cfg(test)] mod tests {",
        "pub(crate) mod tests {",
        "    mod test{",
    ] {
        assert!(misplaced_unit_tests(&long(head), false).is_some(), "{head}");
    }
    let short = "//! m\n#[cfg(test)]\nmod tests {\n    #[test] fn t() {}\n}\n";
    assert_eq!(misplaced_unit_tests(short, false), None);
    assert!(misplaced_unit_tests(short, true).is_some());
    assert_eq!(
        misplaced_unit_tests("//! m\nmod tests;\n// mod tests {\n", true),
        None
    );
}

/// A piece of Rust source the checks must tell from code.
#[derive(Debug, PartialEq)]
enum Piece {
    /// A comment (`//` to the end of the line, `/* */`): its byte range.
    Comment(std::ops::Range<usize>),
    /// A string literal's contents (between its quotes), its byte range and
    /// first line; `raw` for `r"..."` / `r#"..."#`.
    Str {
        at: std::ops::Range<usize>,
        line: usize,
        raw: bool,
    },
}

/// The comments and string literals of `text`, in order.
fn pieces(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        match b[i] {
            b'\n' => line += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = text[i..].find('\n').map_or(b.len(), |e| i + e);
                out.push(Piece::Comment(i..end));
                i = end;
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                line += text[i..end].matches('\n').count();
                out.push(Piece::Comment(i..end));
                i = end;
                continue;
            }
            b'\'' => {
                // a char literal ('"', '\'', '\\') or a lifetime
                if b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'') {
                    i += 4;
                    continue;
                }
                if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                    continue;
                }
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) == Some(&b'"') {
                    let close = format!("\"{}", "#".repeat(hashes));
                    let end = text[j + 1..].find(&close).map_or(b.len(), |e| j + 1 + e);
                    out.push(Piece::Str {
                        at: j + 1..end,
                        line,
                        raw: true,
                    });
                    line += text[i..end].matches('\n').count();
                    i = end + close.len();
                    continue;
                }
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = j.min(b.len());
                out.push(Piece::Str {
                    at: start..end,
                    line,
                    raw: false,
                });
                line += text[start..end].matches('\n').count();
                i = j + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// `text` with its comments and the contents of its string literals
/// blanked (line breaks kept): the code alone, for checks of names.
fn code_only(text: &str) -> String {
    let mut out = text.as_bytes().to_vec();
    for p in pieces(text) {
        let (Piece::Comment(r) | Piece::Str { at: r, .. }) = p;
        for c in &mut out[r] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    }
    // only ASCII was replaced, by ASCII; a multi-byte character became
    // spaces whole
    String::from_utf8_lossy(&out).into_owned()
}

/// The string literals of `text` that look like a lost line continuation,
/// with their first lines: a line break inside the literal without the `\`
/// that would drop the next line's indentation (the break and three or more
/// spaces are then in the text), or, in a literal that prints as one line
/// (its `\`-continuations joined, no `\n`), a run of three or more spaces
/// between words. A run after a one-word label or before a `{}` aligns a
/// printed table and is fine; a literal with `\n` is such a table.
fn lost_continuations(text: &str) -> Vec<(usize, String)> {
    let lost_run = |lit: &str| {
        let t = lit.trim_start();
        t.match_indices("   ").any(|(i, _)| {
            // `label   value` rows of a printed table are aligned on purpose
            let label = !t[..i].trim().contains(' ');
            !label && !t[i..].trim_start().starts_with('{')
        })
    };
    let mut out = Vec::new();
    for p in pieces(text) {
        let Piece::Str {
            at,
            line,
            raw: false,
        } = p
        else {
            continue;
        };
        let lit = &text[at];
        // a raw line break (not `\` + break) followed by indentation
        let broken = lit
            .match_indices('\n')
            .any(|(i, _)| !lit[..i].ends_with('\\') && lit[i + 1..].starts_with("   "));
        // what it prints, `\`-continuations joined
        let mut printed = String::new();
        let mut rest = lit;
        while let Some(at) = rest.find("\\\n") {
            printed.push_str(&rest[..at]);
            rest = rest[at + 2..].trim_start();
        }
        printed.push_str(rest);
        let one_line = !printed.contains('\n') && !printed.contains("\\n");
        if broken || one_line && lost_run(&printed) {
            out.push((line, lit.to_string()));
        }
    }
    out
}

#[test]
fn no_run_of_spaces_inside_a_string_literal() {
    let mut hits = Vec::new();
    for p in rust_files() {
        if p == Path::new("tests/tests/tidy.rs") {
            continue; // its own scanner test spells bad literals
        }
        for (line, lit) in lost_continuations(&read(&p)) {
            hits.push(format!("{}:{line}: {lit:?}", p.display()));
        }
    }
    assert!(
        hits.is_empty(),
        "string literals with a run of spaces (a lost line continuation?): {hits:#?}"
    );
}

#[test]
fn the_literal_scanner_sees_what_it_should() {
    let text = "//! x\nlet a = \"it is   lost\"; // \"not   this\"\n/* \"nor   this\" */\nlet b = r#\"raw   \"#; let c = '\"';\nlet d = \"ok\";";
    let strs: Vec<_> = pieces(text)
        .into_iter()
        .filter_map(|p| match p {
            Piece::Str { at, raw: false, .. } => Some(&text[at]),
            _ => None,
        })
        .collect();
    assert_eq!(strs, ["it is   lost", "ok"]);
    let lost = |t: &str| {
        lost_continuations(t)
            .into_iter()
            .map(|(_, l)| l)
            .collect::<Vec<_>>()
    };
    assert_eq!(lost(text), ["it is   lost"]);
    // a literal over lines, its `\` lost: the break and the indentation
    // are in the message
    let broken = "bail!(\"the store is down\n           and nothing ships\");";
    assert_eq!(lost(broken).len(), 1, "{broken}");
    // over lines with `\`: examined as the one line it prints
    let joined = "bail!(\"the store is down, \\\n       and   nothing ships\");";
    assert_eq!(lost(joined).len(), 1, "{joined}");
    let fine = "bail!(\"the store is down, \\\n       and nothing ships\");";
    assert!(lost(fine).is_empty(), "{fine}");
    // a table: `\n` rows aligned on purpose; a label and its value
    let table = "eprintln!(\"usage:\\n  \\\n  test [--fast]   fmt, clippy\\n\");\nlet r = \"label   value\";";
    assert!(lost(table).is_empty(), "{table}");
    assert_eq!(
        code_only("a /* b */ \"c\" // d\ne"),
        "a         \" \"     \ne"
    );
}

/// The tests TESTING.md names: every `` `FILE::name` `` and
/// `` `FILE::module::name` `` (a Rust `.rs` file or a pytest `.py` file),
/// in its tables and its text: the file, the modules, the name.
fn testing_md_tests(md: &str) -> Vec<(String, Vec<String>, String)> {
    let mut out = Vec::new();
    for cell in md.split('`').skip(1).step_by(2) {
        let Some(at) = [".rs::", ".py::"].iter().filter_map(|e| cell.find(e)).min() else {
            continue;
        };
        let (file, path) = (&cell[..at + 3], &cell[at + 5..]);
        let mut parts: Vec<String> = path.split("::").map(str::to_owned).collect();
        let name = parts.pop().unwrap_or_default();
        out.push((file.to_owned(), parts, name));
    }
    out
}

/// The tests of [`testing_md_tests`] that do not exist: the file missing
/// (`source` gives a file's text), a module it names not declared in it
/// (`mod m`), or no `fn name(` (Rust) / `def name(` (pytest) in it.
fn testing_md_missing(md: &str, source: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut missing = Vec::new();
    for (file, modules, name) in testing_md_tests(md) {
        let keyword = if file.ends_with(".py") { "def" } else { "fn" };
        let found = source(&file).is_some_and(|text| {
            // Rust's comments left out (pytest's are not Rust)
            let code = if keyword == "fn" {
                code_only(&text)
            } else {
                text
            };
            modules.iter().all(|m| {
                code.contains(&format!("mod {m} {{")) || code.contains(&format!("mod {m};"))
            }) && code.contains(&format!("{keyword} {name}("))
        });
        if !found {
            let path: Vec<&str> = modules
                .iter()
                .map(String::as_str)
                .chain([name.as_str()])
                .collect();
            missing.push(format!("{file}::{}", path.join("::")));
        }
    }
    missing
}

#[test]
fn every_test_testing_md_names_exists() {
    let md = read(Path::new("TESTING.md"));
    let tests = testing_md_tests(&md);
    assert!(
        tests.len() > 20,
        "TESTING.md names only {} tests",
        tests.len()
    );
    let missing = testing_md_missing(&md, |f| std::fs::read_to_string(root().join(f)).ok());
    assert!(
        missing.is_empty(),
        "TESTING.md names tests that do not exist: {missing:?}"
    );
}

#[test]
fn the_testing_md_check_sees_a_test_that_is_not_there() {
    let source = |f: &str| {
        (f == "tests/tests/a.rs").then(|| {
            "//! a\nmod serial {\n    #[test]\n    fn there() {}\n}\n// fn gone() {}\n".to_string()
        })
    };
    let md = "| rule | `tests/tests/a.rs::serial::there` |\n\
              | other | `tests/tests/a.rs::serial::gone`, `tests/tests/a.rs::other::there` |\n\
              In the text: `tests/tests/b.rs::there`, and `a.py::x` names a pytest.\n";
    assert_eq!(
        testing_md_missing(md, source),
        [
            "tests/tests/a.rs::serial::gone",
            "tests/tests/a.rs::other::there",
            "tests/tests/b.rs::there",
            "a.py::x",
        ]
    );
}

/// The dependencies a member's `Cargo.toml` declares in `section`
/// (`dependencies`, `dev-dependencies`): the names before `=` or `.`.
/// A `[target.'cfg(..)'.dependencies]` section counts as `dependencies`,
/// and a `[dependencies.NAME]` table declares NAME.
fn declared(manifest: &str, section: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']');
            // `target.'cfg(unix)'.dependencies` → `dependencies`
            let header = match header.strip_prefix("target.") {
                Some(rest) => rest.rsplit_once("'.").map_or(rest, |(_, s)| s),
                None => header,
            };
            inside = header == section;
            if let Some(name) = header.strip_prefix(&format!("{section}.")) {
                out.push(name.to_owned());
            }
            continue;
        }
        if !inside || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name = line
            .split(['=', '.', ' '])
            .next()
            .unwrap_or_default()
            .trim();
        if !name.is_empty() {
            out.push(name.to_owned());
        }
    }
    out
}

/// No declared dependency goes unused: each normal dependency is named
/// (`name::`, `use name`, `name!`) in the member's sources, each
/// dev-dependency in its sources or tests. (A check of our own: cargo-machete
/// would need a download CI does not make.)
#[test]
fn no_declared_dependency_is_unused() {
    // used through something the search cannot see: fuzz/src/lib.rs,
    // included by tests/tests/fuzz_corpus.rs with `#[path]`; a feature
    // only (spool-upload's Cargo.toml says why)
    let allowed: &[(&str, &str)] = &[("tests", "url"), ("spool-upload", "num-traits")];
    let root = root();
    let files = rust_files();
    let mut unused = Vec::new();
    for member in workspace_members() {
        let manifest = read(&Path::new(&member).join("Cargo.toml"));
        // the code alone: a crate a comment names is not used
        let text: String = files
            .iter()
            .filter(|f| f.starts_with(&member))
            .map(|f| code_only(&std::fs::read_to_string(root.join(f)).unwrap()))
            .collect::<Vec<_>>()
            .join("\n");
        for section in ["dependencies", "dev-dependencies"] {
            for dep in declared(&manifest, section) {
                let used = uses_crate(&text, &dep.replace('-', "_"));
                if !used && !allowed.contains(&(member.as_str(), dep.as_str())) {
                    unused.push(format!("{member}: [{section}] {dep}"));
                }
            }
        }
    }
    assert!(unused.is_empty(), "declared and never used: {unused:#?}");
}

/// Whether `text` uses the crate `id` as a path (`id::`), a macro
/// (`id!`), or in `use id` / `extern crate id`: the name whole, so
/// `serde_json::` is no use of `serde`, nor `my_serde::` of it.
fn uses_crate(text: &str, id: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(id).any(|(at, _)| {
        let before = &text[..at];
        let after = &text[at + id.len()..];
        if before.chars().next_back().is_some_and(ident) {
            return false;
        }
        after.starts_with("::")
            || after.starts_with('!')
            || ((before.ends_with("use ") || before.ends_with("extern crate "))
                && !after.chars().next().is_some_and(ident))
    })
}

#[test]
fn the_unused_dependency_check_sees_every_declaration_and_only_code() {
    let manifest = "[package]\nname = \"x\"\n\
                    [dependencies]\nserde = { workspace = true }\nthiserror.workspace = true\n\
                    [dependencies.tokio]\nversion = \"1\"\n\
                    [target.'cfg(unix)'.dependencies]\nnix = \"0.30\"\n\
                    [dev-dependencies]\ntempfile = \"3\"\n";
    assert_eq!(
        declared(manifest, "dependencies"),
        ["serde", "thiserror", "tokio", "nix"]
    );
    assert_eq!(declared(manifest, "dev-dependencies"), ["tempfile"]);
    // named only in a doc comment and a string: unused
    let code =
        code_only("//! Built on [`serde::Serialize`].\nfn f() { let s = \"tokio::spawn\"; }");
    assert!(!uses_crate(&code, "serde"));
    assert!(!uses_crate(&code, "tokio"));
    assert!(uses_crate(
        &code_only("use serde::Serialize; // and tokio"),
        "serde"
    ));
}

#[test]
fn a_crate_is_used_only_by_its_whole_name() {
    assert!(uses_crate("use serde::Serialize;", "serde"));
    assert!(uses_crate("x = serde_json::to_string(&v)?;", "serde_json"));
    assert!(!uses_crate("use serde_json;", "serde"));
    assert!(!uses_crate("x = serde_json::to_string(&v)?;", "serde"));
    assert!(!uses_crate("my_serde::f()", "serde"));
    assert!(uses_crate("use nix;", "nix"));
    assert!(!uses_crate("std::os::unix::fs", "nix"));
    assert!(uses_crate("anyhow!(\"x\")", "anyhow"));
}

/// The code cites the repository's own documents (ARCHITECTURE.md, the
/// crates' module docs, RELIABILITY.md, TESTING.md), never the product
/// spec outside the repository (its section signs) nor an issue number.
#[test]
fn code_cites_no_document_outside_the_repository() {
    let mut found = Vec::new();
    for f in rust_files() {
        for (i, line) in read(&f).lines().enumerate() {
            if cites_outside(line) {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "cites outside the repository: {found:#?}");
}

/// Whether `line` cites the product spec (its name, its section signs),
/// an issue by its number (the word, then a number: after a space, a `#`,
/// a `/` or a colon) or a file outside the repository.
fn cites_outside(line: &str) -> bool {
    // spelled in pieces, so this file does not find itself
    let spec = ["SP", "EC"].concat();
    let outside = ["../", "shared/"].concat();
    let lower = line.to_ascii_lowercase();
    let issue = lower.match_indices("issue").any(|(at, _)| {
        let rest = lower[at + 5..]
            .strip_prefix('s')
            .unwrap_or(&lower[at + 5..]);
        let rest = rest.trim_start_matches([' ', ':', '#', '/']);
        let whole = !lower[..at].ends_with(|c: char| c.is_ascii_alphanumeric());
        whole && rest.starts_with(|c: char| c.is_ascii_digit())
    });
    line.contains(&spec) || line.contains('\u{a7}') || issue || line.contains(&outside)
}

#[test]
fn the_citation_check_sees_every_spelling() {
    let issue = ["iss", "ue"].concat();
    for bad in [
        format!("// fixed for {issue} 43"),
        format!("// see {issue} #43"),
        format!("// {} #43: the lease", issue.to_uppercase()),
        format!("// https://example.org/repo/{issue}s/43"),
        format!("// {issue}: 43"),
        format!("// as {}{} 3.2 says", "SP", "EC"),
        format!("// see {}shared/notes.md", "../"),
    ] {
        assert!(cites_outside(&bad), "{bad}");
    }
    for good in [
        format!("// an {issue} with the store"),
        "// tissue 4".to_string(),
        "// RELIABILITY.md says so".to_string(),
    ] {
        assert!(!cites_outside(&good), "{good}");
    }
}

/// The words of path-based file system calls: a file that must reach its
/// directories through `spool_core::at` uses none of them (`AtDir`'s own
/// methods, `remove_file` and the like on a descriptor, are what it uses).
const PATH_BASED_FS: &[&str] = &[
    // std::fs and its types: every call by path
    "fs",
    "File",
    "OpenOptions",
    "DirBuilder",
    // Path's own file system calls (they follow links on the way)
    "symlink_metadata",
    "metadata",
    "read_dir",
    "exists",
    "try_exists",
    "is_dir",
    "is_file",
    "canonicalize",
    "read_link",
    // the system calls by path, through nix or libc
    "open",
    "unlink",
    "rename",
    "mkdir",
    "rmdir",
    "lstat",
    "symlink",
    "readlink",
    "chmod",
    "chown",
    "truncate",
];

/// Whether `line` uses `word` as a whole identifier (not `unix::fs` for
/// `fs` inside another name, not `remove_files` for `remove_file`).
fn uses_word(line: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    line.match_indices(word).any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// Path-based file system calls in `text` (comments and strings left
/// out).
fn path_based_fs_calls(text: &str) -> Vec<String> {
    code_only(text)
        .lines()
        .filter(|l| PATH_BASED_FS.iter().any(|w| uses_word(l, w)))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn the_path_based_fs_check_sees_what_it_should() {
    assert!(!path_based_fs_calls("let x = std::fs::remove_file(p);").is_empty());
    assert!(!path_based_fs_calls("use std::fs::File;").is_empty());
    assert!(!path_based_fs_calls("std::fs::rename(a, b)?;").is_empty());
    assert!(!path_based_fs_calls("if refs.join(&name).exists() {").is_empty());
    assert!(!path_based_fs_calls("let m = path.symlink_metadata()?;").is_empty());
    assert!(path_based_fs_calls("use std::os::unix::ffi::OsStrExt; let files = 1;").is_empty());
    assert!(path_based_fs_calls("// std::fs::remove_file in a comment").is_empty());
    assert!(path_based_fs_calls("dir.remove_file(&name)?; let refs_dir = 2;").is_empty());
    // through nix or libc, by path
    assert!(!path_based_fs_calls("nix::unistd::unlink(&path)?;").is_empty());
    assert!(!path_based_fs_calls("let fd = nix::fcntl::open(&p, flags, mode)?;").is_empty());
    assert!(!path_based_fs_calls("libc::rename(a.as_ptr(), b.as_ptr())").is_empty());
    assert!(path_based_fs_calls("let why = \"the .open file is gone\";").is_empty());
    assert!(path_based_fs_calls("/* std::fs::remove_file */ let x = 1;").is_empty());
}

/// Architecture invariant (ARCHITECTURE.md, spool-core): the hand-off
/// reaches every directory and file it works in through `spool_core::at`
/// (relative to a directory descriptor, never through a link), so nothing
/// planted in a spool root makes it touch anything outside; and in
/// spool-core, only `at.rs` makes the `*at` calls.
#[test]
fn the_hand_off_works_only_through_at_and_only_at_makes_at_calls() {
    let hand_off = [
        "spool-core/src/handoff.rs",
        "spool-core/src/sink/confirmations.rs",
        "spool-service/src/handoff.rs",
        "spool-service/src/handoff/watch.rs",
    ];
    let mut hits = Vec::new();
    for f in hand_off {
        for line in path_based_fs_calls(&read(Path::new(f))) {
            hits.push(format!("{f}: {line}"));
        }
    }
    assert!(
        hits.is_empty(),
        "the hand-off makes path-based file system calls (use spool_core::at): {hits:?}"
    );
    let at_calls = [
        "openat",
        "openat2",
        "unlinkat",
        "mkdirat",
        "fstatat",
        "renameat",
        "renameat2",
        "linkat",
        "symlinkat",
        "readlinkat",
        "fchmodat",
        "fchownat",
        "faccessat",
        "utimensat",
        "mknodat",
        "mkfifoat",
        "statx",
    ];
    let mut outside = Vec::new();
    for p in rust_files() {
        let rel = p.strip_prefix(root()).unwrap_or(&p).to_path_buf();
        if !rel.starts_with("spool-core/src")
            || rel == Path::new("spool-core/src/at.rs")
            || rel.starts_with("spool-core/src/at")
        {
            continue;
        }
        for line in code_only(&read(&p)).lines() {
            if at_calls.iter().any(|w| uses_word(line, w)) {
                outside.push(format!("{}: {}", rel.display(), line.trim()));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "spool-core's *at calls belong in at.rs: {outside:?}"
    );
}

/// The path-based file system calls (`PATH_BASED_FS`) that stay in
/// spool-core and in spool-service's adoption outside `at.rs`: (file, a
/// piece of the line, why it may stay). Everything else there reaches the
/// spool's directories through `spool_core::at` (relative to a directory
/// descriptor, never through a link). An entry that matches nothing is
/// stale and fails the rule too.
const PATH_BASED_ALLOWED: &[(&str, &str, &str)] = &[
    // The operator's root: resolved once, links followed (crate::at, "The
    // rule"); below it the claim works relative to descriptors.
    (
        "spool-core/src/layout.rs",
        "r.canonicalize()",
        "the claim resolves the operator's root (links in the operator's path followed)",
    ),
    // Read-only walks and probes: they create, write, rename and remove
    // nothing, and none follows a link below what it was given.
    (
        "spool-core/src/layout.rs",
        "std::fs::read_dir(&dir)",
        "the flat-spool warning's read-only walk (entry kinds from the listing, never followed)",
    ),
    (
        "spool-core/src/siblings.rs",
        "std::fs::symlink_metadata(&lock)",
        "the budget's read-only probe whether a dead sibling's lock file exists",
    ),
    (
        "spool-core/src/siblings.rs",
        "unistd::{access",
        "the budget's read-only access(2) probe of a dead sibling",
    ),
    (
        "spool-core/src/sink.rs",
        "std::fs::canonicalize(&dir)",
        "the sink registry's name for a directory (read-only)",
    ),
    (
        "spool-core/src/spool.rs",
        "dir.exists()",
        "Spool::open's node-local check (statfs) of the operator's directory, before spool-lock takes it",
    ),
    (
        "spool-core/src/spool/walk.rs",
        "std::fs::read_dir(&d)",
        "the walk lists by path (read-only); every write on what it met goes through EntryDirs",
    ),
    (
        "spool-core/src/spool/walk.rs",
        "std::fs::symlink_metadata(entry.path())",
        "the walk's entry kind, never following it (read-only)",
    ),
    (
        "spool-core/src/spool/walk.rs",
        "use std::fs::{File, OpenOptions}",
        "open_nofollow below",
    ),
    (
        "spool-core/src/spool/walk.rs",
        "OpenOptions::new()",
        "open_nofollow: a pack read for validation, O_NOFOLLOW | O_NONBLOCK (read-only)",
    ),
    (
        "spool-service/src/adoption/real_env.rs",
        "if !dir.exists() {",
        "adoption's read-only check whether a sibling vanished",
    ),
    (
        "spool-service/src/adoption/real_env.rs",
        "Err(e) if !dir.exists() =>",
        "adoption's read-only check whether a sibling vanished",
    ),
    // A test seam: a path a test gives, outside any spool.
    (
        "spool-core/src/spool/pause.rs",
        "release.exists()",
        "the pause-before-publish test seam's release file",
    ),
];

/// The shapes of a path-based file system call the spool-directory rule
/// looks for (in code, comments and strings left out). Narrower than
/// `PATH_BASED_FS`, which the hand-off files are held to word by word:
/// spool-core says `open` and `metadata` of many things that are no path
/// (a sink's open pack, a file's own `metadata()`). Not seen: `is_dir()`,
/// `is_file()` and `metadata()` on a path, which read alike on a file
/// type, a descriptor's metadata or a directory entry.
const SPOOL_DIR_PATH_CALLS: &[&str] = &[
    // std::fs by path, its handles opened by path, grouped imports
    "std::fs::read_dir",
    "std::fs::remove_",
    "std::fs::rename",
    "std::fs::hard_link",
    "std::fs::symlink_metadata",
    "std::fs::metadata",
    "std::fs::canonicalize",
    "std::fs::create_dir",
    "std::fs::write",
    "std::fs::read(",
    "std::fs::read_to_string",
    "std::fs::copy",
    "std::fs::set_permissions",
    "std::fs::read_link",
    "std::fs::File::",
    "std::fs::OpenOptions",
    "std::fs::DirBuilder",
    "std::fs::{",
    "File::open",
    "File::create",
    "OpenOptions::new",
    "DirBuilder::new",
    "fs::symlink(",
    // a Path's own calls (they follow links on the way)
    ".exists()",
    ".try_exists()",
    ".canonicalize()",
    ".read_dir()",
    ".read_link()",
    ".symlink_metadata()",
    // spool-lock's directory creation by path
    "access.create_dir(",
    // the system calls by path, through nix or libc
    "fcntl::open(",
    "unistd::unlink(",
    "unistd::access",
    "unistd::{access",
    "unistd::mkdir",
    "stat::lstat(",
    "stat::stat(",
    "libc::open(",
    "libc::unlink(",
    "libc::rename(",
    "libc::mkdir(",
    "libc::rmdir(",
    "libc::lstat(",
    "libc::stat(",
];

/// Whether `rel` is in the scope of the spool-directory rule: spool-core's
/// and spool-service's adoption sources, not `at.rs` (the one place of the
/// primitives) and not test files.
fn in_spool_dir_scope(rel: &Path) -> bool {
    let in_crate = rel.starts_with("spool-core/src")
        || rel.starts_with("spool-service/src/adoption")
        || rel == Path::new("spool-service/src/adoption.rs");
    let is_at = rel == Path::new("spool-core/src/at.rs") || rel.starts_with("spool-core/src/at");
    let is_test = rel.file_name().is_some_and(|n| n == "tests.rs")
        || rel.components().any(|c| c.as_os_str() == "tests");
    in_crate && !is_at && !is_test
}

/// The path-based file system calls of `text` (the file `rel`) before its
/// inline test module that the allow-list does not admit, and the
/// allow-list entries (by index) that admitted one.
fn path_based_outside_at(rel: &Path, text: &str) -> (Vec<String>, Vec<usize>) {
    let code = code_only(text);
    let mut refused = Vec::new();
    let mut used = Vec::new();
    for line in code.lines().take_while(|l| !opens_inline_tests(l)) {
        if !SPOOL_DIR_PATH_CALLS.iter().any(|c| line.contains(c)) {
            continue;
        }
        let line = line.trim();
        let allowed = PATH_BASED_ALLOWED
            .iter()
            .position(|(f, piece, _)| rel == Path::new(f) && line.contains(piece));
        match allowed {
            Some(i) => used.push(i),
            None => refused.push(format!("{}: {line}", rel.display())),
        }
    }
    (refused, used)
}

/// Architecture invariant (ARCHITECTURE.md, spool-core): spool-core and
/// spool-service's adoption work in spool directories through
/// `spool_core::at` only; a path-based `std::fs` (or nix/libc) call there
/// is refused unless `PATH_BASED_ALLOWED` names it with why it stays.
#[test]
fn spool_directories_are_worked_only_through_at_outside_the_allow_list() {
    let mut refused = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    for p in rust_files() {
        let rel = p.strip_prefix(root()).unwrap_or(&p).to_path_buf();
        if !in_spool_dir_scope(&rel) {
            continue;
        }
        let (r, u) = path_based_outside_at(&rel, &read(&p));
        refused.extend(r);
        used.extend(u);
    }
    let stale: Vec<_> = PATH_BASED_ALLOWED
        .iter()
        .enumerate()
        .filter(|(i, _)| !used.contains(i))
        .map(|(_, (f, piece, _))| format!("{f}: {piece}"))
        .collect();
    assert!(
        refused.is_empty(),
        "path-based file system calls on spool directories outside spool_core::at (use an \
         AtDir, or add the call to PATH_BASED_ALLOWED with why it must stay): {refused:#?}"
    );
    assert!(
        stale.is_empty(),
        "PATH_BASED_ALLOWED entries that match nothing (remove them): {stale:#?}"
    );
}

#[test]
fn the_spool_directory_rule_refuses_a_call_the_allow_list_does_not_name() {
    let stage = Path::new("spool-core/src/spool/stage.rs");
    let refused = |rel: &Path, text: &str| path_based_outside_at(rel, text).0;
    // a call not on the list, in a file of the scope
    assert_eq!(
        refused(stage, "fn f(p: &Path) { std::fs::rename(p, p).unwrap(); }").len(),
        1
    );
    assert_eq!(
        refused(
            Path::new("spool-core/src/spool/recovery.rs"),
            "let _ = std::fs::remove_file(&e.path);\nif to.exists() {}"
        )
        .len(),
        2
    );
    // the same call an entry names is admitted only in that entry's file
    let allowed = "if !dir.exists() {}";
    assert!(refused(Path::new("spool-service/src/adoption/real_env.rs"), allowed).is_empty());
    assert_eq!(refused(stage, allowed).len(), 1);
    // test modules, comments, strings, AtDir calls and a sink's open pack
    // are no path-based calls on spool directories
    for text in [
        "#[cfg(test)]\nmod tests {\n    std::fs::write(p, b\"x\").unwrap();\n}",
        "// std::fs::remove_file(&p)",
        "let why = \"std::fs::remove_file(p)\";",
        "dir.remove_file(&name)?; at.rename_noreplace(a, b)?;",
        "let open = state.open.take(); let m = f.metadata()?;",
    ] {
        assert!(refused(stage, text).is_empty(), "{text}");
    }
    // the scope: spool-core and adoption, not at.rs nor test files
    assert!(in_spool_dir_scope(stage));
    assert!(in_spool_dir_scope(Path::new(
        "spool-service/src/adoption/real_env.rs"
    )));
    for out in [
        "spool-core/src/at.rs",
        "spool-core/src/spool/tests.rs",
        "spool-service/src/handoff.rs",
        "spool-cli/src/cmd/status.rs",
    ] {
        assert!(!in_spool_dir_scope(Path::new(out)), "{out}");
    }
}

/// Names retired for the glossary's one name (ARCHITECTURE.md
/// "Glossary"): the retired spelling, the name to use.
const RETIRED_NAMES: &[(&str, &str)] = &[("adopter lease", "node lease")];

/// The retired names `text` uses (any case), with the name to use.
fn retired_names_in(text: &str) -> Vec<(&'static str, &'static str)> {
    let lower = text.to_lowercase();
    RETIRED_NAMES
        .iter()
        .filter(|(old, _)| lower.contains(old))
        .copied()
        .collect()
}

#[test]
fn no_retired_name_is_used() {
    let mut files = rust_files();
    for doc in [
        "README.md",
        "ARCHITECTURE.md",
        "TESTING.md",
        "RELIABILITY.md",
        "BENCHMARKS.md",
    ] {
        files.push(PathBuf::from(doc));
    }
    files.retain(|p| !p.ends_with("tests/tidy.rs"));
    let mut wrong = Vec::new();
    for p in files {
        for (old, new) in retired_names_in(&read(&p)) {
            wrong.push(format!(
                "{}: says {old:?}; the glossary's name is {new:?}",
                p.display()
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_retired_name_check_sees_every_case() {
    assert_eq!(
        retired_names_in("/// the node's Adopter Lease is held by"),
        [("adopter lease", "node lease")]
    );
    assert!(retired_names_in("the node lease is held by").is_empty());
}

/// Imports not counted yet, `(from, to)` (`*`: from any file): each
/// closes a circle that is still to be broken (a file that defines what
/// the files it names use). The list only shrinks: an entry that leaves
/// out no import on a circle any more must leave it.
const IMPORTS_STILL_IN_A_CIRCLE: &[(&str, &str)] = &[
    // the test and development tools' roots keep the helpers their
    // modules share
    ("*", "tests/src/bin/spool-bench/main.rs"),
    ("*", "tests/src/bin/spool-torture/main.rs"),
    ("*", "xtask/src/main.rs"),
    // spool-bench's core and upload probes use the service probe's drain
    // child and CPU clock
    (
        "tests/src/bin/spool-bench/core.rs",
        "tests/src/bin/spool-bench/service.rs",
    ),
    (
        "tests/src/bin/spool-bench/upload.rs",
        "tests/src/bin/spool-bench/service.rs",
    ),
];

/// Architecture invariant (ARCHITECTURE.md): no circle of files in any
/// crate. A file that imports, directly or through others, a file that
/// imports it is a knot: neither reads alone. A type both need moves to a
/// leaf module of its own.
#[test]
fn no_circle_of_files_in_any_crate() {
    let files: BTreeMap<String, String> = rust_files()
        .into_iter()
        .map(|p| (p.to_string_lossy().into_owned(), read(&p)))
        .collect();
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    for root in crate_roots() {
        let mut graph = circles::imports(&root.to_string_lossy(), &files);
        // an entry still counts while an import it leaves out is on a circle
        let groups = circles::strongly_connected(&graph);
        let one_group = |a: &str, b: &str| groups.iter().any(|g| g.contains(a) && g.contains(b));
        for (from, tos) in graph.iter_mut() {
            for allowed @ (f, t) in IMPORTS_STILL_IN_A_CIRCLE {
                if (*f == "*" || f == from) && tos.remove(*t).is_some() && one_group(from, t) {
                    seen.insert(*allowed);
                }
            }
        }
        found.extend(circles::circles(&graph));
    }
    assert!(
        found.is_empty(),
        "circles of files (each file imports the next; move what they share to a leaf module): {found:#?}"
    );
    let stale: Vec<_> = IMPORTS_STILL_IN_A_CIRCLE
        .iter()
        .filter(|i| !seen.contains(*i))
        .collect();
    assert!(
        stale.is_empty(),
        "these entries close no circle any more: take them off IMPORTS_STILL_IN_A_CIRCLE: {stale:?}"
    );
}

/// A small crate's files, by path.
fn synthetic(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(p, t)| (format!("k/src/{p}"), format!("//! {p}\n{t}")))
        .collect()
}

#[test]
fn the_circle_rule_sees_a_circle() {
    let files = synthetic(&[
        (
            "lib.rs",
            "pub mod error;\npub mod pack;\nmod adoption;\nmod drain;\n\
             pub use error::{Error, Result};\n#[cfg(test)]\nmod tests;\n",
        ),
        // error <-> pack, through the root's re-export of Result
        (
            "error.rs",
            "use crate::{error as _, pack::Corruption};\n\
             pub enum Error { Corrupt(Corruption) }\n\
             pub type Result<T> = std::result::Result<T, Error>;\n",
        ),
        (
            "pack.rs",
            "/// see crate::error::Error\npub enum Corruption { Magic }\n\
             pub fn validate() -> crate::Result<()> { let s = \"crate::drain::x\"; Ok(()) }\n\
             #[cfg(test)]\nmod tests {\n    use crate::adoption::Cause;\n}\n",
        ),
        // adoption -> drain -> drain/job -> adoption
        (
            "adoption.rs",
            "pub(crate) enum Cause { Dead }\n\
             pub(crate) fn adopt() { crate::drain::run(); }\n",
        ),
        (
            "drain.rs",
            "mod job;\npub(crate) fn run() { job::Job::start(); }\n",
        ),
        (
            "drain/job.rs",
            "pub(crate) use super::super::adoption::Cause as Why;\n\
             pub(crate) struct Job;\nimpl Job { pub(crate) fn start() {} }\n",
        ),
        // a test file importing everything makes no circle
        ("tests.rs", "use super::*;\nuse crate::pack::validate;\n"),
    ]);
    let found = circles::circles(&circles::imports("k/src/lib.rs", &files));
    assert_eq!(
        found,
        [
            "k/src/adoption.rs:3 (crate::drain::run) -> k/src/drain.rs:3 (job::Job::start) \
             -> k/src/drain/job.rs:2 (super::super::adoption::Cause) -> k/src/adoption.rs",
            "k/src/error.rs:2 (crate::pack::Corruption) -> k/src/pack.rs:4 (crate::Result) \
             -> k/src/error.rs",
        ],
        "{found:#?}"
    );
    // the sort does not matter, only that each group is named; and the
    // imports are what the files say
    let graph = circles::imports("k/src/lib.rs", &files);
    let to = |f: &str| {
        graph[&format!("k/src/{f}")]
            .keys()
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(to("lib.rs"), ["k/src/error.rs"]);
    assert_eq!(to("pack.rs"), ["k/src/error.rs"]);
    assert!(!graph.contains_key("k/src/tests.rs"));
}

#[test]
fn the_circle_rule_passes_a_parent_and_a_child_without_a_way_back() {
    let files = synthetic(&[
        ("lib.rs", "mod drain;\nmod error;\npub use drain::Drain;\n"),
        ("error.rs", "pub(crate) enum Error { Gone }\n"),
        (
            "drain.rs",
            "mod job;\nmod counters {\n    pub(crate) struct Counters;\n}\n\
             pub(crate) use self::job::Job;\npub struct Drain(Job, counters::Counters);\n\
             #[cfg(test)]\nmod tests;\n",
        ),
        (
            "drain/job.rs",
            "use crate::error::Error;\npub(crate) struct Job(Option<Error>);\n",
        ),
        // a child's tests use the parent: no circle
        ("drain/tests.rs", "use super::*;\nuse super::job::Job;\n"),
    ]);
    let graph = circles::imports("k/src/lib.rs", &files);
    assert_eq!(circles::circles(&graph), Vec::<String>::new());
    assert_eq!(
        graph["k/src/drain.rs"].keys().collect::<Vec<_>>(),
        ["k/src/drain/job.rs"]
    );
}

/// ARCHITECTURE.md is a map, not a manual: at most 440 lines (the map,
/// the invariants, the glossary and the one cross-cutting section on what
/// may delete what).
#[test]
fn architecture_md_is_at_most_440_lines() {
    let lines = read(Path::new("ARCHITECTURE.md")).lines().count();
    assert!(lines <= 440, "ARCHITECTURE.md has {lines} lines (at most 440: move mechanism details to the module docs)");
}

/// Store deletions in `text` (comments and strings left out): object
/// store calls that remove an object.
fn store_deletions(text: &str) -> Vec<String> {
    code_only(text)
        .lines()
        .filter(|l| {
            [".delete(", ".delete_stream(", ".delete_opts("]
                .iter()
                .any(|w| l.contains(w))
        })
        .map(|l| l.trim().to_string())
        .collect()
}

/// Architecture invariant (ARCHITECTURE.md, spool-service): only
/// `sweep.rs` deletes from a store (and only what `sweep/proof.rs`
/// proved spare). Tests and test seams may delete.
#[test]
fn only_the_sweep_deletes_from_a_store() {
    let mut found = Vec::new();
    for rel in rust_files() {
        let s = rel.to_string_lossy();
        let product = s.starts_with("spool-")
            && !s.ends_with("/tests.rs")
            && !s.contains("/tests/")
            && !s.ends_with("/testing.rs");
        if !product || s == "spool-service/src/sweep.rs" {
            continue;
        }
        for call in store_deletions(&read(&rel)) {
            found.push(format!("{s}: {call}"));
        }
    }
    assert!(
        found.is_empty(),
        "a store deletion outside the sweep: {found:?}"
    );
}

#[test]
fn the_store_deletion_check_sees_every_spelling() {
    assert_eq!(
        store_deletions("let _ = store.object_store().delete(&key).await;").len(),
        1
    );
    assert_eq!(store_deletions("os.delete_stream(keys)").len(), 1);
    assert!(store_deletions("// store.delete(&key)\nlet s = \"x.delete(y)\";").is_empty());
}
