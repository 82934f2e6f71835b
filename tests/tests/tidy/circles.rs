//! The import graph of a crate's source files, and its circles.
//!
//! File A imports file B when A's code names an item of a module B
//! defines: in a `use` (groups, `self`, `as` and globs included, whatever
//! its visibility), or in a path in code (`crate::b::X`, `super::X`,
//! `self::child::X`, `child::X` for a module A declares, or a path through
//! a name A imported, such as `b::X` after `use crate::b;`). A path is
//! followed through the `use` declarations it meets, so `crate::Error`
//! re-exported by `lib.rs` from `error.rs` is an import of `error.rs`
//! (and the re-export is `lib.rs` importing `error.rs`). A parent's
//! `mod child;` alone is no import. Test code is left out: a module
//! declared under `#[cfg(test)]` (its file, such as `foo/tests.rs`, or an
//! inline `mod tests` block), any module named `tests`, and any other item
//! under `#[cfg(test)]`.
//!
//! The parser is a small lexer (comments, strings, raw strings, chars and
//! lifetimes) and a scan of its tokens that tracks inline modules by their
//! braces; it does not expand macros (a path a macro builds is not seen,
//! a path written inside a macro call is) and does not follow a macro's
//! own path (`crate::warn!` is exported at the root from any file).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A token of Rust source, as far as imports are concerned.
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    /// a string literal's contents (for `#[path = "..."]`)
    Str(String),
    Punct(char),
}

/// The tokens of `text`, each with its line number.
fn lex(text: &str) -> Vec<(usize, Tok)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    // the end of a quoted literal starting at `open` (just after the quote)
    let quoted = |mut j: usize, close: char| {
        while j < c.len() && c[j] != close {
            j += if c[j] == '\\' { 2 } else { 1 };
        }
        j.min(c.len())
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == '"' {
            let end = quoted(i + 1, '"');
            let s: String = c[i + 1..end].iter().collect();
            line += s.matches('\n').count();
            out.push((line, Tok::Str(s)));
            i = end + 1;
        } else if ch == '\'' {
            // a char literal ('x', '\n', '\'') or a lifetime ('a)
            if next == Some('\\') {
                i = quoted(i + 1, '\'') + 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                out.push((line, Tok::Punct('\'')));
                i += 1;
            }
        } else if ch == ':' && next == Some(':') {
            out.push((line, Tok::Sep));
            i += 2;
        } else if ident(ch) {
            let start = i;
            while i < c.len() && ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let at = c.get(i).copied();
            if matches!(word.as_str(), "r" | "br" | "cr") && matches!(at, Some('"' | '#')) {
                // a raw string r"..", r#".."#, or a raw identifier r#name
                let mut j = i;
                while c.get(j) == Some(&'#') {
                    j += 1;
                }
                if c.get(j) == Some(&'"') {
                    let hashes = j - i;
                    let mut k = j + 1;
                    while k < c.len()
                        && !(c[k] == '"'
                            && c[k + 1..].iter().take(hashes).all(|h| *h == '#')
                            && c.len() - k > hashes)
                    {
                        line += usize::from(c[k] == '\n');
                        k += 1;
                    }
                    out.push((line, Tok::Str(c[j + 1..k.min(c.len())].iter().collect())));
                    i = k + 1 + hashes;
                } else if j == i + 1 && c.get(j).is_some_and(|h| ident(*h)) {
                    let s = j;
                    i = j;
                    while i < c.len() && ident(c[i]) {
                        i += 1;
                    }
                    out.push((line, Tok::Ident(c[s..i].iter().collect())));
                } else {
                    out.push((line, Tok::Ident(word)));
                }
            } else if matches!(word.as_str(), "b" | "c") && at == Some('"') {
                let end = quoted(i + 1, '"');
                line += c[i..end].iter().filter(|h| **h == '\n').count();
                i = end + 1;
            } else if word == "b" && at == Some('\'') {
                i = quoted(i + 1, '\'') + 1;
            } else {
                out.push((line, Tok::Ident(word)));
            }
        } else {
            out.push((line, Tok::Punct(ch)));
            i += 1;
        }
    }
    out
}

/// One leaf of a `use` tree: the path it names and the name it binds
/// (`None` for a glob).
#[derive(Debug, PartialEq)]
struct UseLeaf {
    path: Vec<String>,
    name: Option<String>,
}

/// Reads the use tree starting at `t[*i]` (after `use` or inside a group)
/// below `prefix`, up to its `,`, `}` or `;`.
fn use_tree(t: &[(usize, Tok)], i: &mut usize, prefix: &[String], out: &mut Vec<UseLeaf>) {
    let mut path = prefix.to_vec();
    let mut alias = None;
    while let Some((_, tok)) = t.get(*i) {
        match tok {
            Tok::Sep => *i += 1,
            Tok::Ident(s) if s == "as" => {
                if let Some((_, Tok::Ident(a))) = t.get(*i + 1) {
                    alias = Some(a.clone());
                }
                *i += 2;
            }
            Tok::Ident(s) => {
                path.push(s.clone());
                *i += 1;
            }
            Tok::Punct('*') => {
                *i += 1;
                out.push(UseLeaf { path, name: None });
                return;
            }
            Tok::Punct('{') => {
                *i += 1;
                while let Some((_, tok)) = t.get(*i) {
                    match tok {
                        Tok::Punct('}') => {
                            *i += 1;
                            break;
                        }
                        Tok::Punct(',') => *i += 1,
                        _ => use_tree(t, i, &path, out),
                    }
                }
                return;
            }
            _ => break,
        }
    }
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    if path.is_empty() {
        return;
    }
    let name = alias.or_else(|| path.last().cloned());
    out.push(UseLeaf { path, name });
}

/// What the scan of one file found in one of its modules (the file's own
/// or an inline `mod name { .. }`).
#[derive(Default, Debug)]
struct ModuleScan {
    /// `mod name;` declarations: the name, whether under `#[cfg(test)]`,
    /// and a `#[path]`.
    files: Vec<(String, bool, Option<String>)>,
    /// inline `mod name { .. }` modules (not under `#[cfg(test)]`)
    inline: Vec<String>,
    /// `use` leaves: the name each binds and its path, with its line
    uses: Vec<(usize, UseLeaf)>,
    /// every path in code with a `::`, with its line
    paths: Vec<(usize, Vec<String>)>,
}

/// The modules of one file by their path relative to the file's module
/// (`[]` for the file's own, `["a", "b"]` for `mod a { mod b { .. } }`).
fn scan(text: &str) -> BTreeMap<Vec<String>, ModuleScan> {
    let t = lex(text);
    let mut out: BTreeMap<Vec<String>, ModuleScan> = BTreeMap::new();
    out.insert(Vec::new(), ModuleScan::default());
    // inline modules open: (brace depth inside them, name)
    let mut scopes: Vec<(usize, String)> = Vec::new();
    let mut depth = 0usize;
    let (mut test_attr, mut path_attr) = (false, None);
    let ident = |i: usize| match t.get(i) {
        Some((_, Tok::Ident(s))) => Some(s.as_str()),
        _ => None,
    };
    let punct = |i: usize, p: char| matches!(t.get(i), Some((_, Tok::Punct(q))) if *q == p);
    let mut i = 0;
    while i < t.len() {
        let here: Vec<String> = scopes.iter().map(|(_, n)| n.clone()).collect();
        let (line, tok) = &t[i];
        // an attribute: #[..] or #![..]
        if *tok == Tok::Punct('#') && (punct(i + 1, '[') || punct(i + 1, '!') && punct(i + 2, '['))
        {
            let open = if punct(i + 1, '[') { i + 1 } else { i + 2 };
            let close = matching(&t, open);
            let body: Vec<&Tok> = t[open + 1..close].iter().map(|(_, t)| t).collect();
            let cfg_test = [
                Tok::Ident("cfg".into()),
                Tok::Punct('('),
                Tok::Ident("test".into()),
                Tok::Punct(')'),
            ];
            if body.len() == 4 && body.iter().zip(&cfg_test).all(|(a, b)| *a == b) {
                if open == i + 2 && scopes.is_empty() && depth == 0 {
                    // #![cfg(test)]: the whole file is test code
                    return BTreeMap::new();
                }
                test_attr = true;
            }
            if let [Tok::Ident(p), Tok::Punct('='), Tok::Str(s)] = body.as_slice() {
                if p == "path" {
                    path_attr = Some(s.clone());
                }
            }
            i = close + 1;
            continue;
        }
        // a visibility: pub, pub(crate), pub(in crate::a)
        if ident(i) == Some("pub") {
            i += if punct(i + 1, '(') {
                matching(&t, i + 1) + 1 - i
            } else {
                1
            };
            continue;
        }
        let module = out.entry(here.clone()).or_default();
        if ident(i) == Some("mod") {
            if let Some(name) = ident(i + 1) {
                if punct(i + 2, ';') {
                    module
                        .files
                        .push((name.to_owned(), test_attr, path_attr.take()));
                    test_attr = false;
                    i += 3;
                    continue;
                }
                if punct(i + 2, '{') && (test_attr || name == "tests") {
                    // test code: skip the whole block
                    test_attr = false;
                    i = matching(&t, i + 2) + 1;
                    continue;
                }
                if punct(i + 2, '{') {
                    module.inline.push(name.to_owned());
                    depth += 1;
                    scopes.push((depth, name.to_owned()));
                    i += 3;
                    continue;
                }
            }
        }
        if test_attr {
            // skip the item, field or statement: through its `;`, `,` or
            // `{ .. }`, or up to the `}` that closes what holds it
            test_attr = false;
            let end = |i: usize| [';', '{', ',', '}'].iter().any(|p| punct(i, *p));
            while i < t.len() && !end(i) {
                i = if punct(i, '(') || punct(i, '[') {
                    matching(&t, i)
                } else {
                    i
                } + 1;
            }
            if punct(i, '{') {
                i = matching(&t, i) + 1;
            } else if !punct(i, '}') {
                i += 1;
            }
            continue;
        }
        path_attr = None;
        match tok {
            Tok::Ident(u) if u == "use" => {
                let mut leaves = Vec::new();
                i += 1;
                if t.get(i).map(|(_, t)| t) != Some(&Tok::Sep) {
                    use_tree(&t, &mut i, &[], &mut leaves);
                }
                module.uses.extend(leaves.into_iter().map(|l| (*line, l)));
                while i < t.len() && !punct(i, ';') {
                    i += 1;
                }
            }
            Tok::Ident(first) if matches!(t.get(i + 1), Some((_, Tok::Sep))) => {
                let after_dot_or_sep = i > 0 && matches!(t[i - 1].1, Tok::Sep | Tok::Punct('.'));
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while let (Some((_, Tok::Sep)), Some(s)) = (t.get(j), ident(j + 1)) {
                    path.push(s.to_owned());
                    j += 2;
                }
                // a macro's path (`crate::warn!`) names the crate root
                // whatever file defines it: not followed
                if !after_dot_or_sep && !punct(j, '!') {
                    module.paths.push((*line, path));
                }
                i = j;
                continue;
            }
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if scopes.last().is_some_and(|(d, _)| *d == depth) {
                    scopes.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The index of the bracket closing the one at `t[open]` (or the last
/// token if it never closes).
fn matching(t: &[(usize, Tok)], open: usize) -> usize {
    let mut depth = 0i32;
    for (k, (_, tok)) in t.iter().enumerate().skip(open) {
        match tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    t.len().saturating_sub(1)
}

/// A module of the crate: the file that holds it and what it has.
struct Module {
    file: String,
    children: BTreeSet<String>,
    /// the name each `use` binds, and its path (as written)
    uses: BTreeMap<String, Vec<String>>,
    /// paths this module names (its uses' paths, then those in its code)
    names: Vec<(usize, Vec<String>)>,
}

/// A crate's modules by their path from the crate root, reached from its
/// root file through `mod` declarations (test modules left out).
fn modules(root: &str, files: &BTreeMap<String, String>) -> BTreeMap<Vec<String>, Module> {
    let mut out = BTreeMap::new();
    // (file, its module path, whether it is mod.rs-like: children beside it)
    let mut todo = vec![(root.to_owned(), Vec::<String>::new(), true)];
    while let Some((file, at, beside)) = todo.pop() {
        let Some(text) = files.get(&file) else {
            continue;
        };
        let dir = match file.rsplit_once('/') {
            Some((d, name)) if beside => (d.to_owned(), name),
            Some((d, name)) => (format!("{d}/{}", name.trim_end_matches(".rs")), name),
            None => (String::new(), file.as_str()),
        }
        .0;
        for (inner, found) in scan(text) {
            let path: Vec<String> = at.iter().chain(&inner).cloned().collect();
            let mut m = Module {
                file: file.clone(),
                children: found.inline.iter().cloned().collect(),
                uses: BTreeMap::new(),
                names: Vec::new(),
            };
            for (line, leaf) in found.uses {
                if let Some(name) = &leaf.name {
                    m.uses.insert(name.clone(), leaf.path.clone());
                }
                m.names.push((line, leaf.path));
            }
            m.names.extend(found.paths);
            let sub: String = inner.iter().map(|s| format!("/{s}")).collect();
            for (name, test, path_attr) in found.files {
                if test || name == "tests" {
                    continue;
                }
                m.children.insert(name.clone());
                let child: Vec<String> = path.iter().chain([&name]).cloned().collect();
                if let Some(p) = path_attr {
                    todo.push((format!("{dir}{sub}/{p}"), child, true));
                    continue;
                }
                let flat = format!("{dir}{sub}/{name}.rs");
                if files.contains_key(&flat) {
                    todo.push((flat, child, false));
                } else {
                    todo.push((format!("{dir}{sub}/{name}/mod.rs"), child, true));
                }
            }
            out.insert(path, m);
        }
    }
    out
}

/// Where a path named in module `at` points, from the crate root (`None`
/// for another crate's item or a local one).
fn absolute(
    mods: &BTreeMap<Vec<String>, Module>,
    at: &[String],
    path: &[String],
    hops: usize,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let m = mods.get(at)?;
    let (mut base, rest) = match first.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (at.to_vec(), &path[1..]),
        "super" => {
            let mut base = at.to_vec();
            let supers = path.iter().take_while(|s| *s == "super").count();
            for _ in 0..supers {
                base.pop()?;
            }
            (base, &path[supers..])
        }
        _ if m.children.contains(first) => (at.to_vec(), path),
        _ if hops > 0 => {
            let via = m.uses.get(first)?;
            let mut abs = absolute(mods, at, via, hops - 1)?;
            abs.extend(path[1..].iter().cloned());
            return Some(abs);
        }
        _ => return None,
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The file that defines what the absolute `path` names: its modules as
/// far as they go, then through the `use` that brought the next name into
/// the last one (a re-export), if any.
fn defining_file<'a>(
    mods: &'a BTreeMap<Vec<String>, Module>,
    path: &[String],
    hops: usize,
) -> Option<&'a str> {
    let mut at: Vec<String> = Vec::new();
    for (k, seg) in path.iter().enumerate() {
        let mut deeper = at.clone();
        deeper.push(seg.clone());
        if mods.contains_key(&deeper) {
            at = deeper;
            continue;
        }
        let m = mods.get(&at)?;
        return match m.uses.get(seg) {
            Some(via) if hops > 0 => {
                let mut abs = absolute(mods, &at, via, hops - 1)?;
                abs.extend(path[k + 1..].iter().cloned());
                defining_file(mods, &abs, hops - 1)
            }
            Some(_) => None,
            None => Some(&m.file),
        };
    }
    mods.get(&at).map(|m| m.file.as_str())
}

/// The import graph of the crate rooted at `root`: for each file, the
/// files it imports, each with the first line and path that does.
pub fn imports(root: &str, files: &BTreeMap<String, String>) -> Graph {
    const HOPS: usize = 8;
    let mods = modules(root, files);
    let mut graph = Graph::new();
    for (at, m) in &mods {
        graph.entry(m.file.clone()).or_default();
        for (line, path) in &m.names {
            let Some(abs) = absolute(&mods, at, path, HOPS) else {
                continue;
            };
            let Some(to) = defining_file(&mods, &abs, HOPS) else {
                continue;
            };
            if to != m.file {
                graph
                    .entry(m.file.clone())
                    .or_default()
                    .entry(to.to_owned())
                    .or_insert_with(|| (*line, path.join("::")));
            }
        }
    }
    graph
}

/// A crate's import graph: for each file, the files it imports, each with
/// the first line and path that does.
pub type Graph = BTreeMap<String, BTreeMap<String, (usize, String)>>;

/// The circles of an import `graph`: for each group of files that import
/// each other (directly or through others), one circle through it, each
/// step with the line and path of the import, as
/// `a.rs:12 (crate::b::X) -> b.rs:40 (super::a::Y) -> a.rs`.
pub fn circles(graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for group in strongly_connected(graph) {
        if group.len() < 2 {
            continue;
        }
        // the shortest circle through the group's first file
        let start = group.iter().next().unwrap();
        let mut from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = VecDeque::from([start.as_str()]);
        'search: while let Some(f) = queue.pop_front() {
            for to in graph[f].keys().filter(|t| group.contains(*t)) {
                if to == start {
                    from.insert(start, f);
                    break 'search;
                }
                if !from.contains_key(to.as_str()) {
                    from.insert(to, f);
                    queue.push_back(to);
                }
            }
        }
        let mut ring = vec![start.as_str()];
        let mut f = from[start.as_str()];
        while f != start {
            ring.push(f);
            f = from[f];
        }
        ring.reverse();
        ring.insert(0, start);
        let mut text = String::new();
        for pair in ring.windows(2) {
            let (line, path) = &graph[pair[0]][pair[1]];
            text.push_str(&format!("{}:{line} ({path}) -> ", pair[0]));
        }
        text.push_str(start);
        if group.len() > ring.len() - 1 {
            let all: Vec<&String> = group.iter().collect();
            text.push_str(&format!(" (one circle of the group {all:?})"));
        }
        out.push(text);
    }
    out
}

/// The strongly connected components of `graph` (Tarjan's algorithm):
/// the groups of files that import each other (a file in no circle is a
/// group of its own).
pub fn strongly_connected<T>(
    graph: &BTreeMap<String, BTreeMap<String, T>>,
) -> Vec<BTreeSet<String>> {
    struct State<'g> {
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'g, T>(g: &'g BTreeMap<String, BTreeMap<String, T>>, v: &'g str, s: &mut State<'g>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in g.get(v).into_iter().flat_map(|e| e.keys()) {
            if !s.index.contains_key(w.as_str()) {
                visit(g, w, s);
                let lw = s.low[w.as_str()];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.insert(w.to_owned());
                if w == v {
                    break;
                }
            }
            s.out.push(group);
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(graph, v, &mut s);
        }
    }
    s.out
}
