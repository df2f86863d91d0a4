//! The engine seam holds: outside `src/db/`, no code names an engine's
//! library or internals (SQLite: the library, a pragma, `data_version`,
//! `typeof()`, its own catalogue and JSON tables; PostgreSQL: its driver
//! crates, `pg_catalog` and every `pg_…` catalogue table or function,
//! `information_schema`, `regclass` casts); the engine interfaces stay
//! small, and every file of an engine says which concept it implements.

mod support;

use std::path::{Path, PathBuf};

use support::repo_path;

const SQLITE: &[&str] = &[
    "rusqlite",
    "data_version",
    "typeof(",
    "PRAGMA",
    "pragma_",
    "sqlite_schema",
    "sqlite_master",
    "sqlite_sequence",
    "json_each",
];

/// PostgreSQL's driver crates and the catalogue names that are not `pg_…`
/// (those are caught by [`names_pg_internal`]).
const POSTGRES: &[&str] = &[
    "tokio_postgres",
    "postgres::",
    "postgres_types",
    "postgres_protocol",
    "information_schema",
    "regclass",
    "regproc",
    "regtype",
    "txid_current",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A `pg_` that starts a word (`pg_catalog`, `pg_class`, `pg_locks`,
/// `pg_get_triggerdef(`, `pg_advisory_lock(`): PostgreSQL reserves the
/// prefix for its catalogue and functions. `is_pg_url` is not one.
fn names_pg_internal(line: &str) -> bool {
    line.match_indices("pg_").any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = line[i + 3..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && after.is_some_and(|c| c.is_ascii_lowercase())
    })
}

/// What `line` names of an engine's internals, per `words` (and `pg_…`
/// words when `pg` is set).
fn internals(line: &str, words: &[&str], pg: bool) -> Vec<String> {
    let mut found: Vec<String> = words
        .iter()
        .filter(|w| line.contains(**w))
        .map(|w| w.to_string())
        .collect();
    if pg && names_pg_internal(line) {
        found.push("pg_…".to_string());
    }
    found
}

/// Every line of code (comments left out) in `files` naming one of the
/// internals, as `path:line: word: text`.
fn lines_naming(files: &[PathBuf], words: &[&str], pg: bool) -> Vec<String> {
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).expect("reading a source file");
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for word in internals(line, words, pg) {
                found.push(format!(
                    "{}:{}: {word}: {}",
                    f.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

/// The source files under `src/`, split into those under `src/<under>` and
/// the rest.
fn src_files(under: &str) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let src = repo_path("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .partition(|f| f.starts_with(src.join(under)))
}

#[test]
fn no_code_outside_src_db_names_sqlite_internals() {
    let (engine, outside) = src_files("db");
    let found = lines_naming(&outside, SQLITE, false);
    assert!(
        found.is_empty(),
        "SQLite-specific code outside src/db/:\n{}",
        found.join("\n")
    );
    // The scan itself can fail: it finds what it forbids where it belongs.
    let sqlite: Vec<PathBuf> = engine
        .into_iter()
        .filter(|f| f.to_string_lossy().contains("db/sqlite/"))
        .collect();
    assert!(sqlite.iter().any(|f| f.ends_with("db/sqlite/mod.rs")));
    let inside = lines_naming(&sqlite, SQLITE, false);
    for word in ["rusqlite", "PRAGMA", "sqlite_schema"] {
        assert!(
            inside.iter().any(|l| l.contains(&format!(": {word}: "))),
            "the scan finds no {word} in src/db/sqlite/"
        );
    }
}

#[test]
fn no_code_outside_src_db_names_postgres_internals() {
    let (engine, outside) = src_files("db");
    let found = lines_naming(&outside, POSTGRES, true);
    assert!(
        found.is_empty(),
        "PostgreSQL-specific code outside src/db/:\n{}",
        found.join("\n")
    );
    // The scan itself can fail: it finds what it forbids where it belongs.
    let postgres: Vec<PathBuf> = engine
        .into_iter()
        .filter(|f| f.to_string_lossy().contains("db/postgres/"))
        .collect();
    assert!(postgres.iter().any(|f| f.ends_with("db/postgres/mod.rs")));
    let inside = lines_naming(&postgres, POSTGRES, true);
    for word in ["tokio_postgres", "regclass", "pg_…"] {
        assert!(
            inside.iter().any(|l| l.contains(&format!(": {word}: "))),
            "the scan finds no {word} in src/db/postgres/"
        );
    }
}

#[test]
fn a_pg_word_is_told_from_an_identifier_that_contains_pg() {
    for line in [
        "SELECT relname FROM pg_class",
        "JOIN pg_catalog.pg_namespace n",
        "\"SELECT pg_advisory_lock($1)\"",
        "(pg_get_triggerdef(t.oid))",
    ] {
        assert!(names_pg_internal(line), "{line}");
    }
    for line in ["let is_pg_url = true;", "a.jpg_b", "PG_MAGIC", "pg_ 1"] {
        assert!(!names_pg_internal(line), "{line}");
    }
}

/// `(trait, methods)` for every trait declared in `src/db/interfaces.rs`.
fn interfaces() -> Vec<(String, usize)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/db/interfaces.rs");
    let text = std::fs::read_to_string(path).expect("reading the interfaces");
    let mut out: Vec<(String, usize)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("pub trait ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push((name, 0));
        } else if line.trim_start().starts_with("fn ")
            && let Some(last) = out.last_mut()
        {
            last.1 += 1;
        }
    }
    out
}

#[test]
fn every_engine_interface_is_small() {
    let found = interfaces();
    // The scan can fail: these are the interfaces docs/architecture.md draws.
    for name in [
        "Connection",
        "Catalogue",
        "Rows",
        "Capture",
        "Fence",
        "Database",
    ] {
        assert!(
            found.iter().any(|(n, _)| n == name),
            "no trait {name} in src/db/interfaces.rs: {found:?}"
        );
    }
    let big: Vec<_> = found.iter().filter(|(_, n)| *n > 15).collect();
    assert!(
        big.is_empty(),
        "interfaces of more than 15 methods: {big:?}"
    );
}

#[test]
fn every_engine_file_says_which_concept_it_holds() {
    let db = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/db");
    let mut files = Vec::new();
    rust_files(&db, &mut files);
    for engine in ["sqlite", "postgres"] {
        let n = files
            .iter()
            .filter(|f| f.starts_with(db.join(engine)))
            .count();
        assert!(n > 5, "src/db/{engine} is one file per concept ({n} files)");
    }
    for f in files {
        let text = std::fs::read_to_string(&f).expect("reading an engine file");
        assert!(
            text.starts_with("//! "),
            "{} does not open with a //! line saying what it is for",
            f.display()
        );
    }
}

/// The crate's top-level modules (each command counted as one) and the
/// ones each names (`crate::x`, `crate::commands::x`).
fn module_graph() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for f in files {
        let rel = f.strip_prefix(&src).expect("under src");
        // Each command is a unit of its own: src/commands/<command>(.rs|/).
        let mut parts = rel.components();
        let mut first = parts.next().expect("a component");
        if first.as_os_str() == "commands"
            && let Some(c) = parts.next()
        {
            first = c;
        }
        let unit = Path::new(first.as_os_str())
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .to_string();
        if unit == "lib" || unit == "main" || unit == "mod" {
            continue;
        }
        let text = std::fs::read_to_string(&f).expect("reading a source file");
        let deps = graph.entry(unit.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for part in code.split("crate::").skip(1) {
                let part = part.strip_prefix("commands::").unwrap_or(part);
                // `crate::{a, b}` names several.
                let names: Vec<&str> = match part.strip_prefix('{') {
                    Some(list) => list.split('}').next().unwrap_or("").split(',').collect(),
                    None => vec![part],
                };
                for n in names {
                    let name: String = n
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() && name != unit {
                        deps.insert(name);
                    }
                }
            }
        }
    }
    graph
}

#[test]
fn modules_import_each_other_without_cycles() {
    let graph = module_graph();
    // The scan can fail: the layers of docs/architecture.md are there.
    assert!(graph["gate"].contains("reconcile") && graph["reconcile"].contains("db"));
    assert!(graph["drill"].contains("replay"), "{:?}", graph["drill"]);
    let mut cycles = Vec::new();
    for (from, deps) in &graph {
        for to in deps {
            // Is `from` reachable back from `to`?
            let mut seen = std::collections::BTreeSet::new();
            let mut stack = vec![to.clone()];
            while let Some(m) = stack.pop() {
                if !seen.insert(m.clone()) {
                    continue;
                }
                if let Some(next) = graph.get(&m) {
                    stack.extend(next.iter().cloned());
                }
            }
            if seen.contains(from) {
                cycles.push(format!("{from} -> {to} -> … -> {from}"));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}
