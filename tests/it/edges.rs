//! Dependencies point one way (issue 58; sozu's rule: a stale table is a broken doc). Every
//! `crate::`, `super::` or `self::` path a source file names is an edge from its module to
//! the module it names. The edges must be exactly those the table in docs/ARCHITECTURE.md
//! ("Dependencies") allows — an edge the table lacks fails, and so does a row the code no
//! longer needs — and the table has no cycle. Files do not name each other in a circle
//! either (a file's own submodules are parts of it, not neighbours). Test code is left
//! out: it may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` → `a::b`; `src/a/mod.rs` → `a`; `src/lib.rs` → the crate root.
fn module_of(rel: &Path) -> Vec<String> {
    let mut m: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if m.last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        m.pop();
    }
    m
}

/// The code without comments, literals and `#[cfg(test)]` items (their paths are no edges).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i + 1 < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"'
            || (b[i] == b'r'
                && b.get(i + 1).is_some_and(|c| *c == b'#' || *c == b'"')
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')))
        {
            // A string, raw or not.
            let mut hashes = 0;
            if b[i] == b'r' {
                i += 1;
                while b[i] == b'#' {
                    hashes += 1;
                    i += 1;
                }
            }
            i += 1;
            loop {
                if i >= b.len() {
                    break;
                }
                if hashes == 0 && b[i] == b'\\' {
                    i += 2;
                    continue;
                }
                if b[i] == b'"'
                    && b[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|c| **c == b'#')
                        .count()
                        == hashes
                {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3;
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            i += 2;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    // `#[cfg(test)] mod tests { … }` and `#[cfg(test)] fn …`: up to the matching brace.
    let mut s = out;
    while let Some(at) = s.find("#[cfg(test)]") {
        let rest = &s[at..];
        let end = match (rest.find('{'), rest.find(';')) {
            (Some(o), Some(semi)) if semi < o => at + semi + 1,
            (None, Some(semi)) => at + semi + 1,
            (Some(o), _) => {
                let mut depth = 0;
                let mut end = s.len();
                for (k, c) in rest[o..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = at + o + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            _ => s.len(),
        };
        s.replace_range(at..end, "");
    }
    s
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Sep,
    Open,
    Close,
    Comma,
    Other,
}

fn tokens(code: &str) -> Vec<Tok> {
    let b = code.as_bytes();
    let mut t = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            t.push(Tok::Ident(code[s..i].to_string()));
            continue;
        }
        if b[i..].starts_with(b"::") {
            t.push(Tok::Sep);
            i += 2;
            continue;
        }
        t.push(match c {
            b'{' => Tok::Open,
            b'}' => Tok::Close,
            b',' => Tok::Comma,
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            _ => Tok::Other,
        });
        i += 1;
    }
    t
}

/// Every path after `crate::`, `super::` or `self::`, braces expanded, resolved against
/// `module` (the file's own).
fn paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let t = tokens(code);
    let mut out = Vec::new();
    // The segments of a path starting at t[i] (after its root), with `{…}` expanded.
    fn walk(t: &[Tok], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
        let mut p = prefix;
        loop {
            match t.get(i) {
                Some(Tok::Ident(s)) => {
                    p.push(s.clone());
                    i += 1;
                    if t.get(i) == Some(&Tok::Sep) {
                        i += 1;
                        continue;
                    }
                    out.push(p);
                    return i;
                }
                Some(Tok::Open) => {
                    i += 1;
                    loop {
                        match t.get(i) {
                            Some(Tok::Close) => return i + 1,
                            Some(Tok::Comma) => i += 1,
                            None => return i,
                            _ => i = walk(t, i, p.clone(), out),
                        }
                    }
                }
                _ => {
                    if !p.is_empty() {
                        out.push(p);
                    }
                    return i;
                }
            }
        }
    }
    // The file's own child modules (`mod z;`): `z::w` is a path through one of them.
    let children: BTreeSet<&str> = t
        .windows(2)
        .filter_map(|w| match w {
            [Tok::Ident(m), Tok::Ident(name)] if m == "mod" => Some(name.as_str()),
            _ => None,
        })
        .collect();
    let mut i = 0;
    while i + 1 < t.len() {
        let root = match &t[i] {
            Tok::Ident(s)
                if t[i + 1] == Tok::Sep
                    && (s == "crate"
                        || s == "super"
                        || s == "self"
                        || children.contains(s.as_str())) =>
            {
                // Not the tail of a longer path (`foo::self`), nor a visibility
                // (`pub(in crate::adapter)`: a limit, not a use).
                if i > 0 && (t[i - 1] == Tok::Sep || t[i - 1] == Tok::Ident("in".into())) {
                    i += 1;
                    continue;
                }
                s.clone()
            }
            _ => {
                i += 1;
                continue;
            }
        };
        let mut base: Vec<String> = match root.as_str() {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            "super" => module[..module.len().saturating_sub(1)].to_vec(),
            child => [module, &[child.to_string()]].concat(),
        };
        let mut j = i + 2;
        // `super::super::…`
        while let (Some(Tok::Ident(s)), Some(Tok::Sep)) = (t.get(j), t.get(j + 1)) {
            if s != "super" {
                break;
            }
            base.pop();
            j += 2;
        }
        let mut found = Vec::new();
        i = walk(&t, j, base, &mut found).max(i + 1);
        out.extend(found);
    }
    out
}

/// The unit a path names: the longest of `units` that is a prefix of it, else its first
/// segment.
fn unit_of(path: &[String], units: &[Vec<String>]) -> Option<String> {
    let best = units
        .iter()
        .filter(|u| path.len() >= u.len() && path[..u.len()] == u[..])
        .max_by_key(|u| u.len());
    match best {
        Some(u) => Some(u.join("::")),
        None => path.first().cloned(),
    }
}

struct Table {
    /// unit → the units it may use.
    allows: BTreeMap<String, BTreeSet<String>>,
}

/// The "Dependencies" table of docs/ARCHITECTURE.md: `| `unit` | `a`, `b`, … |`.
fn table() -> Table {
    let md = std::fs::read_to_string("docs/ARCHITECTURE.md").unwrap();
    let at = md
        .find("| Module | May use |")
        .expect("docs/ARCHITECTURE.md has its Dependencies table");
    let mut allows = BTreeMap::new();
    for line in md[at..].lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let ticks = |s: &str| -> Vec<String> {
            s.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        let from = ticks(cells[1]);
        assert_eq!(from.len(), 1, "one module per row: {line}");
        allows.insert(from[0].clone(), ticks(cells[2]).into_iter().collect());
    }
    Table { allows }
}

struct Code {
    /// (file, its unit) → the units and files it names.
    files: Vec<(String, Vec<String>, String)>,
    edges: BTreeMap<String, BTreeSet<String>>,
    file_edges: BTreeMap<String, BTreeSet<String>>,
}

fn code(units: &[Vec<String>]) -> Code {
    let mut list = Vec::new();
    sources(Path::new("src"), &mut list);
    let mut files = Vec::new();
    for p in &list {
        let rel = p.strip_prefix("src").unwrap().to_path_buf();
        let module = module_of(&rel);
        // Test modules in files of their own.
        if module.iter().any(|m| m == "tests") {
            continue;
        }
        let unit = unit_of(&module, units).unwrap_or_default();
        files.push((p.to_string_lossy().into_owned(), module, unit));
    }
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|(f, m, _)| (m.clone(), f.clone()))
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut file_edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, module, unit) in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for path in paths(&code_only(&text), module) {
            if let Some(to) = unit_of(&path, units)
                && to != *unit
                && !to.is_empty()
            {
                edges.entry(unit.clone()).or_default().insert(to);
            }
            // The file that declares the longest prefix of the path. A file's own
            // submodules are parts of it, not neighbours: using them is no arrow.
            let target = (1..=path.len())
                .rev()
                .find(|&n| modules.contains_key(&path[..n]))
                .filter(|&n| !(n > module.len() && path[..module.len()] == module[..]))
                .and_then(|n| modules.get(&path[..n]))
                .cloned();
            if let Some(t) = target
                && t != *file
            {
                file_edges.entry(file.clone()).or_default().insert(t);
            }
        }
    }
    Code {
        files,
        edges,
        file_edges,
    }
}

fn units_of(t: &Table) -> Vec<Vec<String>> {
    t.allows
        .keys()
        .map(|u| u.split("::").map(str::to_string).collect())
        .collect()
}

/// The strongly connected parts of `g` with more than one node.
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = g.keys().chain(g.values().flat_map(|s| s.iter())).collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in g.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in &nodes {
        if done.contains(*n) || !reached[n].contains(*n) {
            continue;
        }
        let part: Vec<String> = nodes
            .iter()
            .filter(|m| reached[n].contains(**m) && reached[**m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        done.extend(part.iter().cloned());
        out.push(part);
    }
    out
}

#[test]
fn every_edge_between_modules_is_one_the_table_allows_and_the_table_is_not_stale() {
    let t = table();
    let c = code(&units_of(&t));
    let mut unknown = Vec::new();
    let mut forbidden = Vec::new();
    for (from, tos) in &c.edges {
        let Some(allowed) = t.allows.get(from) else {
            unknown.push(from.clone());
            continue;
        };
        for to in tos {
            if !allowed.contains(to) {
                forbidden.push(format!("{from} -> {to}"));
            }
        }
    }
    let mut stale = Vec::new();
    for (from, tos) in &t.allows {
        for to in tos {
            if !c.edges.get(from).is_some_and(|e| e.contains(to)) {
                stale.push(format!("{from} -> {to}"));
            }
        }
    }
    // The crate root (lib.rs, main.rs) only declares the modules.
    let units: BTreeSet<&String> = c
        .files
        .iter()
        .map(|(_, _, u)| u)
        .filter(|u| !u.is_empty())
        .collect();
    let missing: Vec<&&String> = units
        .iter()
        .filter(|u| !t.allows.contains_key(**u))
        .collect();
    assert!(
        unknown.is_empty() && forbidden.is_empty() && stale.is_empty() && missing.is_empty(),
        "modules without a row: {unknown:?} {missing:?}\nedges the table does not allow: \
         {forbidden:#?}\nrows no code needs: {stale:#?}"
    );
}

#[test]
fn the_allowed_edges_have_no_cycle() {
    let t = table();
    let c = circles(&t.allows);
    assert!(c.is_empty(), "modules that reach themselves: {c:?}");
}

#[test]
fn no_files_name_each_other_in_a_circle() {
    let t = table();
    let c = code(&units_of(&t));
    // A module's files and its root may name each other (the root declares and re-exports
    // them): only circles between files that are not each other's root count.
    let root_of = |f: &str| -> String {
        let p = Path::new(f);
        match p.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs") => p
                .parent()
                .unwrap()
                .with_extension("rs")
                .to_string_lossy()
                .into_owned(),
            _ => f.to_string(),
        }
    };
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in &c.file_edges {
        for to in tos {
            let (a, b) = (root_of(from), root_of(to));
            let parent = |x: &str, y: &str| {
                Path::new(y).with_extension("") == Path::new(x).parent().unwrap()
            };
            if parent(&a, &b) || parent(&b, &a) {
                continue;
            }
            g.entry(from.clone()).or_default().insert(to.clone());
        }
    }
    let c = circles(&g);
    assert!(
        c.is_empty(),
        "files that name each other in a circle: {c:#?}"
    );
}

/// The parser of the test itself: a path in braces, relative roots, literals left out.
#[test]
fn paths_are_read_as_the_compiler_would() {
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let code = code_only(
        "use crate::a::{b::C, d};\npub(in crate::x) fn k() {}\n// crate::not::this\nlet s = \"crate::nor::this\";\nsuper::e::f();\nself::g::h;\nuse super::super::i;\nmod z;\nuse z::w;\n#[cfg(test)]\nmod tests { use crate::j; }\n#[cfg(test)]\nmod more;\nuse crate::k;\n",
    );
    let got = paths(&code, &m("x::y"));
    assert_eq!(
        got,
        vec![
            m("a::b::C"),
            m("a::d"),
            m("x::e::f"),
            m("x::y::g::h"),
            m("i"),
            m("x::y::z::w"),
            m("k")
        ]
    );
}
