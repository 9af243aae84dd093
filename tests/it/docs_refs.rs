//! docs/ARCHITECTURE.md and docs/LIFECYCLE.md point at code: every source file and every
//! `Type::function` they name exists, so the docs cannot drift silently; so do the tests and
//! test files the docs cite.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs" || x == "html") {
            out.push(p);
        }
    }
}

/// The backticked spans of a Markdown text (code blocks included).
fn code_spans(md: &str) -> Vec<String> {
    md.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// `name` is an identifier.
fn ident(name: &str, upper: bool) -> bool {
    let mut c = name.chars();
    c.next().is_some_and(|f| {
        if upper {
            f.is_ascii_uppercase()
        } else {
            f.is_ascii_lowercase() || f == '_'
        }
    }) && name
        .chars()
        .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// Does some `impl … Type` or `trait Type` block define `fn function`? Blocks are read from
/// their line to the next item at column 0.
fn defines(files: &[(PathBuf, String)], ty: &str, function: &str) -> bool {
    let fn_decl = format!("fn {function}");
    files.iter().any(|(_, text)| {
        let lines: Vec<&str> = text.lines().collect();
        lines.iter().enumerate().any(|(i, l)| {
            let opens = (l.starts_with("impl") || l.contains("trait "))
                && l.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                    .any(|w| w == ty);
            opens
                && lines[i + 1..]
                    .iter()
                    .take_while(|l| !l.starts_with('}'))
                    .any(|l| {
                        let l = l.trim_start();
                        // Any visibility: `pub`, `pub(crate)`, `pub(in crate::adapter)`.
                        let l = match l.strip_prefix("pub(") {
                            Some(rest) => rest.split_once(") ").map_or(l, |(_, r)| r),
                            None => l.trim_start_matches("pub "),
                        };
                        l.starts_with(&format!("{fn_decl}(")) || l.contains(&format!("{fn_decl}<"))
                    })
        })
    })
}

#[test]
fn every_file_and_function_the_design_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    sources(&root.join("src"), &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .iter()
        .map(|p| (p.clone(), std::fs::read_to_string(p).unwrap()))
        .collect();
    let rel: Vec<String> = paths
        .iter()
        .map(|p| {
            p.strip_prefix(root.join("src"))
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    let mut missing = Vec::new();
    let mut checked = (0, 0);
    for doc in ["docs/ARCHITECTURE.md", "docs/LIFECYCLE.md"] {
        let md = std::fs::read_to_string(root.join(doc)).unwrap();
        for span in code_spans(&md) {
            for tok in span
                .split([',', ' '])
                .map(|t| t.trim_matches(|c| "(){}".contains(c)))
            {
                // A source path: `src/x.rs`, `server/conn.rs`, `adapter/rules/projection/`, `driver/tests.rs`.
                let path = tok.strip_prefix("src/").unwrap_or(tok);
                let is_path =
                    (path.ends_with(".rs") || path.ends_with(".html") || path.ends_with('/'))
                        && path
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "_/.".contains(c))
                        && path.len() > 3;
                if is_path {
                    checked.0 += 1;
                    // A test file, by its path from the project root.
                    let found = (tok.starts_with("tests/") && root.join(tok).exists())
                        || rel.iter().any(|r| {
                            r == path
                                || r.ends_with(&format!("/{path}"))
                                || (path.ends_with('/')
                                    && (r.starts_with(path) || r.contains(&format!("/{path}"))))
                        });
                    if !found {
                        missing.push(format!("{doc}: file {tok}"));
                    }
                    continue;
                }
                // `Type::function` (a `Type::Variant` or a path of modules is not checked here).
                let parts: Vec<&str> = tok.split("::").collect();
                if parts.len() == 2 && ident(parts[0], true) && ident(parts[1], false) {
                    checked.1 += 1;
                    if !defines(&files, parts[0], parts[1]) {
                        missing.push(format!("{doc}: {tok}"));
                    }
                }
            }
        }
    }
    assert!(
        checked.0 > 40 && checked.1 > 10,
        "too few references found: {checked:?}"
    );
    assert!(
        missing.is_empty(),
        "named in the docs but not in the code:\n{}",
        missing.join("\n")
    );
}

/// The names the lines of `text` declare as `struct`, `enum` or `union` (any visibility,
/// inline modules included).
fn declared_types(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for l in text.lines() {
        let words: Vec<&str> = l.split_whitespace().collect();
        if words.first().is_some_and(|w| w.starts_with("//")) {
            continue;
        }
        for (i, w) in words.iter().enumerate() {
            if ["struct", "enum", "union"].contains(w)
                && let Some(next) = words.get(i + 1)
            {
                let name: String = next
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if ident(&name, true) {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// The type of each inherent `impl` block in `text`, with its line: `impl<H: Handler>
/// Server<H> {` → `Server`. Trait impls (`impl X for Y`) and macro impls are left out.
fn inherent_impls(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        if !(t.starts_with("impl ") || t.starts_with("impl<")) {
            continue;
        }
        // The header runs to its `{` (a `where` clause may take lines).
        let mut header = String::new();
        for l in &lines[i..] {
            header.push_str(l);
            header.push(' ');
            if l.contains('{') || l.trim_end().ends_with(';') {
                break;
            }
        }
        let header = header.split('{').next().unwrap_or("");
        let header = header.split(" where ").next().unwrap_or(header);
        let mut rest = header.trim_start()["impl".len()..].trim_start();
        if rest.starts_with('<') {
            // Skip the generic parameters (`->` inside them is not a closing bracket).
            let mut depth = 0;
            let mut prev = ' ';
            let mut end = rest.len();
            for (j, c) in rest.char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' if prev != '-' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j + 1;
                            break;
                        }
                    }
                    _ => {}
                }
                prev = c;
            }
            rest = rest[end..].trim_start();
        }
        if rest.split_whitespace().any(|w| w == "for") {
            continue;
        }
        let path: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let name = path.rsplit("::").next().unwrap_or("").to_string();
        if ident(&name, true) {
            out.push((name, i + 1));
        }
    }
    out
}

/// The folder (under src/) holding the child modules of the module file `rel`: `a/b.rs` →
/// `a/b/`, `a/mod.rs` → `a/`, `lib.rs` → ``.
fn children_dir(rel: &str) -> String {
    let (dir, file) = rel.rsplit_once('/').unwrap_or(("", rel));
    let dir = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    match file {
        "mod.rs" | "lib.rs" | "main.rs" => dir,
        f => format!("{dir}{}/", f.trim_end_matches(".rs")),
    }
}

/// The rule in place of a file-length bound: a type's `impl` lives with the type.
/// Every inherent `impl Type` block is in the file that declares `Type`, or in a module
/// below that file (`impl<H> Server<H>` in `server/event_loop/replies.rs` goes with
/// `server/event_loop.rs`). Names are matched, not resolved: a name declared in several
/// files may be implemented below any of them.
#[test]
fn a_types_impl_lives_with_the_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    sources(&root, &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| {
            let rel = p.strip_prefix(&root).unwrap().display().to_string();
            (rel.replace('\\', "/"), std::fs::read_to_string(p).unwrap())
        })
        .collect();
    let mut homes: std::collections::HashMap<String, Vec<&str>> = Default::default();
    for (rel, text) in &files {
        for name in declared_types(text) {
            homes.entry(name).or_default().push(rel);
        }
    }
    let mut astray = Vec::new();
    let mut checked = 0;
    for (rel, text) in &files {
        for (name, line) in inherent_impls(text) {
            let Some(decls) = homes.get(&name) else {
                // Not a type of this crate's own (a macro's, or declared by a macro).
                continue;
            };
            checked += 1;
            // A crate root's children are every file: its types may be implemented anywhere.
            let home = decls
                .iter()
                .any(|d| d == rel || rel.starts_with(&children_dir(d)));
            if !home {
                astray.push(format!(
                    "src/{rel}:{line}: impl {name} (declared in {})",
                    decls.join(", ")
                ));
            }
        }
    }
    assert!(checked > 100, "too few impl blocks found: {checked}");
    assert!(
        astray.is_empty(),
        "move these next to their type:\n{}",
        astray.join("\n")
    );
}

#[test]
fn impl_headers_are_read_as_written() {
    let text = "impl<H: Handler> Server<H> {\nimpl fmt::Display for Code {\n    impl<F: Fn() -> u8> super::Hook<F>\nwhere\n    F: Send,\n{\nimpl Emitter<'_> {\nimpl<T> From<T> for X {";
    assert_eq!(
        inherent_impls(text),
        [
            ("Server".to_string(), 1),
            ("Hook".to_string(), 3),
            ("Emitter".to_string(), 7)
        ]
    );
    assert_eq!(children_dir("server/event_loop.rs"), "server/event_loop/");
    assert_eq!(children_dir("kernel/demo/mod.rs"), "kernel/demo/");
    assert_eq!(children_dir("lib.rs"), "");
    assert_eq!(
        declared_types("pub(crate) struct Conn<R> {\n    enum State { A }\n// struct Not"),
        ["Conn", "State"]
    );
}

/// No `Result<_, ()>`, which hides why something failed (issue 37).
#[test]
fn errors_say_why() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let mut unit_errors = Vec::new();
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "rs"))
    {
        let text = std::fs::read_to_string(f).unwrap();
        let name = f.strip_prefix(root).unwrap().display().to_string();
        for (i, l) in text.lines().enumerate() {
            let l: String = l.split_whitespace().collect();
            if l.contains("Result<") && l.contains(",()>") {
                unit_errors.push(format!("{name}:{}", i + 1));
            }
        }
    }
    assert!(files.len() > 50, "too few sources found: {}", files.len());
    assert!(
        unit_errors.is_empty(),
        "Result<_, ()> says nothing about the failure:\n{}",
        unit_errors.join("\n")
    );
}

/// The anchors of a Markdown text: `` [`Name`](../src/file.rs#L12) `` → (name, file, line).
fn anchors(md: &str) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    let mut rest = md;
    while let Some(i) = rest.find("`](../src/") {
        let before = &rest[..i];
        let name = before.rsplit("[`").next().unwrap_or("").to_string();
        let after = &rest[i + "`](../".len()..];
        let end = after.find(')').unwrap_or(after.len());
        let target = &after[..end];
        if let Some((file, line)) = target.split_once("#L")
            && let Ok(n) = line.parse::<usize>()
        {
            out.push((name, file.to_string(), n));
        }
        rest = &after[end..];
    }
    out
}

/// Whether `line` declares the last segment of `name` (`Type::function`, `Type`, `function`).
fn declares(line: &str, name: &str) -> bool {
    let item = name.rsplit("::").next().unwrap_or(name);
    let l = line.trim_start();
    [
        "fn ",
        "struct ",
        "enum ",
        "trait ",
        "const ",
        "static ",
        "type ",
        "mod ",
        "macro_rules! ",
    ]
    .iter()
    .any(|kw| {
        l.split(kw).skip(1).any(|tail| {
            tail.starts_with(item)
                && tail[item.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_')
        })
    })
}

/// sozu's rule for design docs: an anchor is `file:line`, and a stale anchor is a broken doc.
/// Every `` [`Name`](../src/file.rs#L12) `` in docs/ points at the line that declares `Name`;
/// the failure says where it is now.
#[test]
fn every_anchor_in_the_docs_points_at_what_it_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in std::fs::read_dir(root.join("docs")).unwrap() {
        let doc = doc.unwrap().path();
        if doc.extension().is_none_or(|x| x != "md") {
            continue;
        }
        let md = std::fs::read_to_string(&doc).unwrap();
        let name = doc.file_name().unwrap().to_string_lossy().into_owned();
        for (item, file, line) in anchors(&md) {
            checked += 1;
            let Ok(text) = std::fs::read_to_string(root.join(&file)) else {
                broken.push(format!("{name}: `{item}` → {file}: no such file"));
                continue;
            };
            let lines: Vec<&str> = text.lines().collect();
            if lines
                .get(line.wrapping_sub(1))
                .is_some_and(|l| declares(l, &item))
            {
                continue;
            }
            let now: Vec<String> = lines
                .iter()
                .enumerate()
                .filter(|(_, l)| declares(l, &item))
                .map(|(i, _)| format!("#L{}", i + 1))
                .collect();
            broken.push(format!(
                "{name}: `{item}` → {file}#L{line} does not declare it (declared at: {})",
                if now.is_empty() {
                    "nowhere".to_string()
                } else {
                    now.join(", ")
                }
            ));
        }
    }
    assert!(checked >= 20, "too few anchors in docs/: {checked}");
    assert!(broken.is_empty(), "stale anchors:\n{}", broken.join("\n"));
}

#[test]
fn anchors_and_declarations_are_read_as_written() {
    let md = "see [`Registry::admit`](../src/adapter/state/threads.rs#L312) and [`x`](https://e/)";
    assert_eq!(
        anchors(md),
        [(
            "Registry::admit".to_string(),
            "src/adapter/state/threads.rs".to_string(),
            312
        )]
    );
    assert!(declares("    pub(crate) fn admit<R>(", "Registry::admit"));
    assert!(declares("pub struct RunCell {", "RunCell"));
    assert!(!declares("    pub(crate) fn admitted(", "Registry::admit"));
    assert!(!declares("    // admit here", "admit"));
}

/// `a2a-sdk[…]==1.2.0` in `text` after `key` → `[1, 2, 0]`.
fn version_after(text: &str, key: &str) -> Vec<u32> {
    let at = text.find(key).unwrap_or_else(|| panic!("{key} is gone")) + key.len();
    let v: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    v.split('.').map(|n| n.parse().unwrap()).collect()
}

#[test]
fn the_a2a_sdk_range_iac_code_starts_with_is_told_the_same_everywhere() {
    // Issue 46.17: the README said both that a2a-sdk 1.2 works (the `[kernel]` pin) and that
    // it fails (its Tests section). The wheel's pin is the truth; the docs and the interop
    // suite's pins agree with it.
    let read =
        |p: &str| std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(p)).unwrap();
    let (wheel, readme, ops, interop) = (
        read("packaging/wheel.py"),
        read("README.md"),
        read("docs/operations.md"),
        read("tests/interop/run.sh"),
    );
    let pin = &wheel[wheel.find("a2a-sdk[http-server,signing]>=").unwrap()..];
    let (low, high) = (
        version_after(pin, "a2a-sdk[http-server,signing]>="),
        version_after(pin, ",<"),
    );
    let range = format!(
        ">={},<{}",
        low.iter().map(u32::to_string).collect::<Vec<_>>().join("."),
        high.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(".")
    );
    assert!(wheel.contains(&range));
    for (name, doc) in [("README.md", &readme), ("docs/operations.md", &ops)] {
        assert!(
            doc.contains(&range),
            "{name} does not give the range {range}"
        );
    }
    let within = |v: &Vec<u32>| *v >= low && *v < high;
    let pinned = version_after(&interop, "a2a-sdk[http-server,signing]==");
    let newest = version_after(&interop, "SDK_NEWEST=\"a2a-sdk[http-server,signing]==");
    let bad = version_after(&interop, "SDK_BAD=\"a2a-sdk[http-server,signing]==");
    assert!(within(&pinned) && within(&newest) && !within(&bad));
    // The newest that starts and the first that does not are named where the pins are told.
    let dotted = |v: &Vec<u32>| v.iter().map(u32::to_string).collect::<Vec<_>>().join(".");
    for (name, doc) in [("README.md", &readme), ("docs/operations.md", &ops)] {
        for v in [dotted(&newest), dotted(&high)] {
            assert!(doc.contains(&v), "{name} does not name a2a-sdk {v}");
        }
    }
}

/// The JS client package (clients/js, packed by `make dist`) has the crate's version, an ES
/// module with its types, and no dependency besides its peer `@ag-ui/client` 1.0.
#[test]
fn the_js_client_package_has_the_crate_version_and_only_its_peer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/js");
    let text = std::fs::read_to_string(root.join("package.json")).unwrap();
    let p: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        p["version"],
        env!("CARGO_PKG_VERSION"),
        "clients/js/package.json"
    );
    assert_eq!(p["type"], "module");
    assert_eq!(
        p["peerDependencies"],
        serde_json::json!({"@ag-ui/client": "^1.0.0"})
    );
    assert!(p.get("dependencies").is_none(), "{text}");
    for f in p["files"].as_array().unwrap() {
        assert!(root.join(f.as_str().unwrap()).is_file(), "{f} is missing");
    }
}

/// The paths under `tests/` a text names (`tests/it/stops.rs`, `tests/interop/`), as written.
fn test_paths(text: &str) -> Vec<String> {
    text.match_indices("tests/")
        .filter(|(i, _)| {
            // Not the tail of a longer path (`src/adapter/run/driver/tests.rs` has no slash).
            text[..*i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || "_/.-".contains(c)))
        })
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "_/.-".contains(*c))
                .collect::<String>()
                .trim_end_matches('.')
                .to_string()
        })
        .collect()
}

/// `file::test` in a backticked span, where `tests/it/file.rs` is a suite of the integration
/// binary: (file, test).
fn test_citations(md: &str, suites: &[String]) -> Vec<(String, String)> {
    code_spans(md)
        .iter()
        .flat_map(|span| {
            span.split([',', ' '])
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter_map(|tok| {
            let tok = tok.trim_matches(|c| "(){}".contains(c));
            let (file, test) = tok.split_once("::")?;
            (suites.iter().any(|s| s == file) && ident(test, false))
                .then(|| (file.to_string(), test.to_string()))
        })
        .collect()
}

/// The docs cite an integration test as `file::test`, its path in the one test binary
/// (`cargo test --test it file::test`), and test files by their path: each exists, so a test
/// renamed or moved cannot leave a doc pointing at nothing.
#[test]
fn every_test_and_test_file_the_docs_cite_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let suites: Vec<String> = std::fs::read_dir(root.join("tests/it"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".rs")
                .filter(|n| *n != "main")
                .map(str::to_string)
        })
        .collect();
    let mut src = Vec::new();
    sources(&root.join("src"), &mut src);
    let mut docs = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    let mut missing = Vec::new();
    let mut checked = (0, 0);
    for doc in &docs {
        let md = std::fs::read_to_string(doc).unwrap();
        let name = doc.strip_prefix(root).unwrap().display().to_string();
        for path in test_paths(&md) {
            checked.0 += 1;
            if !root.join(&path).exists() {
                missing.push(format!("{name}: {path}: no such file"));
            }
        }
        for (file, test) in test_citations(&md, &suites) {
            checked.1 += 1;
            let declared = |p: &Path| {
                std::fs::read_to_string(p).is_ok_and(|t| t.lines().any(|l| declares(l, &test)))
            };
            // A suite's name may also be a module of src/ (`cli`, `threads`): `cli::serve_with`.
            let in_src = src.iter().any(|p| {
                (p.file_stem().is_some_and(|s| *s == *file)
                    || p.parent().is_some_and(|d| d.ends_with(&file)))
                    && declared(p)
            });
            if !declared(&root.join(format!("tests/it/{file}.rs"))) && !in_src {
                missing.push(format!("{name}: `{file}::{test}`: no such test"));
            }
        }
    }
    assert!(
        checked.0 >= 20 && checked.1 >= 20,
        "too few test citations read: {checked:?}"
    );
    assert!(
        missing.is_empty(),
        "the docs cite what is not there:\n{}",
        missing.join("\n")
    );
}

#[test]
fn test_paths_and_citations_are_read_as_written() {
    assert_eq!(
        test_paths("(`tests/it/stops.rs`), tests/interop/. and src/x/tests.rs"),
        ["tests/it/stops.rs", "tests/interop/"]
    );
    let suites = ["stops".to_string()];
    assert_eq!(
        test_citations("`stops::a_b`, `job::tests::c` and `stops::A`", &suites),
        [("stops".to_string(), "a_b".to_string())]
    );
}
