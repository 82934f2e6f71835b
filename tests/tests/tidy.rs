//! Invariants that check themselves (in the manner of rust-analyzer's
//! tidy): a test binary of the tests crate, so the fast tier runs it. Each
//! test reads the tree or asks `cargo tree`; none builds anything.
//!
//! - the dependency edges of ARCHITECTURE.md: spool-upload and
//!   spool-catalog do not depend on each other, nothing below spool-service
//!   depends on it, and no tokio is in the normal-dependency tree of
//!   spool-lock or spool-core;
//! - a workspace build (`cargo build --release` at the root, the default
//!   members) links no `testing` feature into the `spool` binary;
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

#[test]
fn dependency_edges_of_the_architecture() {
    let mut broken = Vec::new();
    let forbid = |from: &str, to: &[&str], broken: &mut Vec<String>| {
        let deps = normal_deps(from);
        for t in to {
            if deps.contains(*t) {
                broken.push(format!("{from} depends on {t}"));
            }
        }
    };
    forbid("spool-upload", &["spool-catalog"], &mut broken);
    forbid(
        "spool-catalog",
        &["spool-upload", "spool-core"],
        &mut broken,
    );
    for below in ["spool-lock", "spool-core", "spool-upload", "spool-catalog"] {
        forbid(below, &["spool-service", "spool-cli"], &mut broken);
    }
    for sync in ["spool-lock", "spool-core"] {
        forbid(
            sync,
            &["tokio", "tokio-util", "futures-executor"],
            &mut broken,
        );
    }
    assert!(
        broken.is_empty(),
        "ARCHITECTURE.md's dependency rules are broken: {broken:?}"
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
    let seams: Vec<&str> = all
        .lines()
        .filter(|l| l.starts_with("spool-") && l.contains("testing"))
        .collect();
    assert!(
        seams.is_empty(),
        "a root build enables test seams: {seams:?} (spool-cli's tree:\n{tree})"
    );
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
        .filter(|p| !read(p).contains("#![forbid(unsafe_code)]"))
        .collect();
    assert!(
        missing.is_empty(),
        "crate roots without #![forbid(unsafe_code)]: {missing:?}"
    );
}

#[test]
fn no_unlock_and_no_nix_flock() {
    // spelled in pieces, so this file does not find itself
    let needles = [["LOCK", "_UN"].concat(), ["fcntl::", "Flock"].concat()];
    let mut hits = Vec::new();
    for p in rust_files() {
        let text = read(&p);
        let code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
        for (line, n) in code.flat_map(|l| needles.iter().map(move |n| (l, n))) {
            if line.contains(n.as_str()) {
                hits.push(format!("{} uses {n}: {}", p.display(), line.trim()));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "release is a close, never an unlock, and nix's Flock is never used: {hits:?}"
    );
}

#[test]
fn no_anyhow_in_a_library() {
    let with: Vec<_> = LIBRARIES
        .iter()
        .filter(|l| {
            read(&Path::new(l).join("Cargo.toml"))
                .lines()
                .any(|line| line.trim_start().starts_with("anyhow"))
        })
        .collect();
    assert!(
        with.is_empty(),
        "libraries use typed errors (thiserror), anyhow only in binaries: {with:?}"
    );
}

#[test]
fn no_transparent_error_variant() {
    // spelled in pieces, so this file does not find itself
    let needle = ["#[error(", "transparent)]"].concat();
    let hits: Vec<_> = rust_files()
        .into_iter()
        .filter(|p| read(p).contains(needle.as_str()))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        hits.is_empty(),
        "a wrapping error variant shows its inner message and keeps it as its source \
         (#[error(\"{{0}}\")] with #[from] or #[source]), so the chain holds the inner typed \
         error; a transparent one hides it (exit codes would re-match inner variants): {hits:?}"
    );
}

#[test]
fn every_source_file_starts_with_a_module_doc() {
    let missing: Vec<_> = rust_files()
        .into_iter()
        .filter(|p| {
            let text = read(p);
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            !first.starts_with("//!")
        })
        .collect();
    assert!(missing.is_empty(), "files without a //! doc: {missing:?}");
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
        let text = read(&p);
        let Some(start) = text.lines().position(|l| l.starts_with("mod tests {")) else {
            continue;
        };
        let is_dir_module = root().join(p.with_extension("")).is_dir();
        let inline = text.lines().count() - start;
        if is_dir_module {
            wrong.push(format!(
                "{}: a directory module with inline tests (move them to {}/tests.rs)",
                p.display(),
                p.with_extension("").display()
            ));
        } else if inline > MAX_INLINE_TEST_LINES {
            wrong.push(format!("{}: {inline} lines of inline tests (over {MAX_INLINE_TEST_LINES}: make it a directory module with tests.rs)", p.display()));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The contents of the one-line string literals of `text` (not raw, not
/// in comments), with their line numbers.
fn one_line_literals(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        match b[i] {
            b'\n' => line += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
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
                let lit = &text[start..j.min(b.len())];
                if !lit.contains('\n') && !lit.contains("\\n") {
                    out.push((line, lit.to_string()));
                }
                line += lit.matches('\n').count();
                i = j + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[test]
fn no_run_of_spaces_inside_a_string_literal() {
    let mut hits = Vec::new();
    // A run of three or more spaces between words; a run after a one-word
    // label or before a `{}` aligns a printed table and is fine.
    let lost = |lit: &str| {
        let t = lit.trim_start();
        t.match_indices("   ").any(|(i, _)| {
            // `label   value` rows of a printed table are aligned on purpose
            let label = !t[..i].trim().contains(' ');
            !label && !t[i..].trim_start().starts_with('{')
        })
    };
    for p in rust_files() {
        if p == Path::new("tests/tests/tidy.rs") {
            continue; // its own scanner test spells a bad literal
        }
        for (line, lit) in one_line_literals(&read(&p)) {
            if lost(&lit) {
                hits.push(format!("{}:{line}: {lit:?}", p.display()));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "string literals with a run of spaces (a lost line continuation?): {hits:#?}"
    );
}

#[test]
fn the_literal_scanner_sees_what_it_should() {
    let text = "//! x\nlet a = \"it is   lost\"; // \"not  this\"\nlet b = r#\"raw   \"#; let c = '\"';\nlet d = \"ok\";";
    let lits: Vec<_> = one_line_literals(text)
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    assert_eq!(lits, ["it is   lost", "ok"]);
}

/// The test names TESTING.md lists: every `` `path::name` `` in its table
/// (Rust `.rs` files and pytest `.py` files).
fn testing_md_tests() -> Vec<(String, String)> {
    let text = read(Path::new("TESTING.md"));
    let mut out = Vec::new();
    for row in text.lines().filter(|l| l.starts_with('|')) {
        for cell in row.split('`').skip(1).step_by(2) {
            if let Some((file, name)) = cell.rsplit_once("::") {
                if file.ends_with(".rs") || file.ends_with(".py") {
                    out.push((file.to_string(), name.to_string()));
                }
            }
        }
    }
    out
}

#[test]
fn every_test_testing_md_names_exists() {
    let tests = testing_md_tests();
    assert!(
        tests.len() > 20,
        "TESTING.md names only {} tests",
        tests.len()
    );
    let mut missing = Vec::new();
    for (file, name) in tests {
        let path = Path::new(&file);
        // a Rust `fn` or a pytest `def`
        let keyword = if file.ends_with(".py") { "def" } else { "fn" };
        let found =
            root().join(path).is_file() && read(path).contains(&format!("{keyword} {name}("));
        if !found {
            missing.push(format!("{file}::{name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "TESTING.md names tests that do not exist: {missing:?}"
    );
}

/// The dependencies a member's `Cargo.toml` declares in `section`
/// (`dependencies`, `dev-dependencies`): the names before `=` or `.`.
fn declared(manifest: &str, section: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
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
    // included by tests/tests/fuzz_corpus.rs with `#[path]`
    let allowed: &[(&str, &str)] = &[("tests", "url")];
    let root = root();
    let files = rust_files();
    let mut unused = Vec::new();
    for member in workspace_members() {
        let manifest = read(&Path::new(&member).join("Cargo.toml"));
        let text: String = files
            .iter()
            .filter(|f| f.starts_with(&member))
            .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
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
    let spec = ["SP", "EC"].concat();
    let mut found = Vec::new();
    for f in rust_files() {
        for (i, line) in read(&f).lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            let issue = lower
                .match_indices("issue ")
                .any(|(at, _)| lower[at + 6..].starts_with(|c: char| c.is_ascii_digit()));
            let outside = ["../", "shared/"].concat();
            if line.contains(&spec) || line.contains('\u{a7}') || issue || line.contains(&outside) {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "cites outside the repository: {found:#?}");
}

/// The words of path-based file system calls: a file that must reach its
/// directories through `spool_core::at` uses none of them (`AtDir`'s own
/// methods, `remove_file` and the like on a descriptor, are what it uses).
const PATH_BASED_FS: [&str; 13] = [
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

/// Path-based file system calls in `text` (comments left out).
fn path_based_fs_calls(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
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
    let at_calls = ["openat", "unlinkat", "mkdirat", "fstatat", "renameat"];
    let mut outside = Vec::new();
    for p in rust_files() {
        let rel = p.strip_prefix(root()).unwrap_or(&p).to_path_buf();
        if !rel.starts_with("spool-core/src")
            || rel == Path::new("spool-core/src/at.rs")
            || rel.starts_with("spool-core/src/at")
        {
            continue;
        }
        for line in read(&p)
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
        {
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
