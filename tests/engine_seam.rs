//! The engine seam holds: outside `src/db/`, no code names an engine's
//! library or internals (SQLite: the library, a pragma, `data_version`,
//! `typeof()`, its own catalogue and JSON tables; PostgreSQL: its driver
//! crates, the engine's own modules and client (`db::postgres::…`),
//! `pg_catalog` and every `pg_…` catalogue table or function,
//! `information_schema`, `regclass` casts; MySQL: its driver crate, its
//! session settings, `information_schema`); the engine interfaces stay
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

/// PostgreSQL's driver crates, any path through a `postgres` module (the
/// engine's own, `db::postgres::client::Client` among them: the crate's
/// PostgreSQL client is public for its tests and benches, and still only
/// the engine may use it), and the catalogue names that are not `pg_…`
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

/// MySQL's driver crates and what only a MySQL session speaks of.
const MYSQL: &[&str] = &[
    "mysql::",
    "mysql_common",
    "information_schema",
    "sql_mode",
    "utf8mb4",
    "max_statement_time",
    "max_execution_time",
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
fn no_code_outside_src_db_names_mysql_internals() {
    let (engine, outside) = src_files("db");
    let found = lines_naming(&outside, MYSQL, false);
    assert!(
        found.is_empty(),
        "MySQL-specific code outside src/db/:\n{}",
        found.join("\n")
    );
    // The scan itself can fail: it finds what it forbids where it belongs.
    let mysql: Vec<PathBuf> = engine
        .into_iter()
        .filter(|f| f.to_string_lossy().contains("db/mysql/"))
        .collect();
    assert!(mysql.iter().any(|f| f.ends_with("db/mysql/mod.rs")));
    let inside = lines_naming(&mysql, MYSQL, false);
    for word in ["mysql::", "information_schema", "sql_mode", "utf8mb4"] {
        assert!(
            inside.iter().any(|l| l.contains(&format!(": {word}: "))),
            "the scan finds no {word} in src/db/mysql/"
        );
    }
}

#[test]
fn the_engines_client_and_driver_are_caught_by_any_path_that_names_them() {
    for line in [
        "use crate::db::postgres::client::Client;",
        "let c = db::postgres::client::Client::connect(&config, &tls);",
        "use cutover::db::postgres::Postgres;",
        "fn f(e: &tokio_postgres::Error) {}",
        "use postgres_types::ToSql;",
    ] {
        assert!(!internals(line, POSTGRES, true).is_empty(), "{line}");
    }
    for line in ["let postgres = is_postgres(url);", "Engine::Postgres => {}"] {
        assert!(internals(line, POSTGRES, true).is_empty(), "{line}");
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
    // What a new engine must write, all of it, default methods included
    // (SideEffects::hold_clock, MySQL's session clock, is one no other
    // engine writes).
    let total: usize = found.iter().map(|(_, n)| n).sum();
    assert!(
        total <= 61,
        "the engine interfaces have {total} methods in all, more than 61: {found:?}"
    );
    assert!(
        total > 30,
        "the scan counts the methods ({total}): {found:?}"
    );
}

/// The `Db` handle is no door to the whole engine: it does not dereference
/// to it, and reaches each interface through an accessor of its own.
#[test]
fn the_database_handle_dereferences_to_nothing() {
    let text = std::fs::read_to_string(repo_path("src/db/mod.rs")).expect("reading src/db/mod.rs");
    let code = code_of(&text);
    assert!(
        !code.contains("impl std::ops::Deref for Db") && !code.contains("Deref for Db"),
        "Db dereferences to the engine"
    );
    for accessor in [
        "fn rows(",
        "fn catalogue(",
        "fn fence(",
        "fn journal(",
        "fn capture(",
    ] {
        assert!(code.contains(accessor), "Db has no {accessor}");
    }
}

/// No escape hatch through the seam: the only way to run SQL of one's own
/// on an engine is fixture SQL (`Fixtures::execute_script`), for drills and
/// tests; the control store's statements can only be made by the control
/// store (`Statement`'s fields are private to it).
#[test]
fn no_code_but_drills_runs_sql_of_its_own_through_the_seam() {
    let src = repo_path("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    let mut seen_in_drills = false;
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under src");
        let code = code_of(&std::fs::read_to_string(f).expect("reading a source file"));
        let calls = code.matches("execute_script(").count();
        let in_db = rel.starts_with("db");
        let in_drill = rel.starts_with("commands/drill");
        seen_in_drills |= in_drill && calls > 0;
        if calls > 0 && !in_db && !in_drill {
            found.push(format!("{}: {calls} call(s)", rel.display()));
        }
    }
    assert!(
        found.is_empty(),
        "fixture SQL run outside the drills:\n{}",
        found.join("\n")
    );
    assert!(seen_in_drills, "the scan finds the drills' fixture SQL");
    let control =
        std::fs::read_to_string(repo_path("src/db/control/mod.rs")).expect("the control store");
    let start = control
        .find("pub struct Statement {")
        .expect("the Statement type")
        + "pub struct Statement {".len();
    let body = &control[start..start + control[start..].find('}').expect("its end")];
    assert!(
        !body.contains("pub "),
        "a Statement's fields are public, so any code could make one: {body}"
    );
}

#[test]
fn every_engine_file_says_which_concept_it_holds() {
    let db = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/db");
    let mut files = Vec::new();
    rust_files(&db, &mut files);
    for engine in ["sqlite", "postgres", "mysql"] {
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

/// The crate's top-level modules (each command counted as one, as
/// `commands::x`) and the ones each names (`crate::x`, `crate::commands::x`).
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
        let mut prefix = "";
        if first.as_os_str() == "commands"
            && let Some(c) = parts.next()
        {
            first = c;
            prefix = "commands::";
        }
        let stem = Path::new(first.as_os_str())
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .to_string();
        let unit = format!("{prefix}{stem}");
        if unit == "lib" || unit == "main" || unit == "mod" || unit == "commands::mod" {
            continue;
        }
        let text = std::fs::read_to_string(&f).expect("reading a source file");
        let deps = graph.entry(unit.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for part in code.split("crate::").skip(1) {
                let (prefix, part) = match part.strip_prefix("commands::") {
                    Some(p) => ("commands::", p),
                    None => ("", part),
                };
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
                    let name = format!("{prefix}{name}");
                    if name != prefix && name != unit {
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
    assert!(graph["commands::gate"].contains("reconcile") && graph["reconcile"].contains("db"));
    assert!(
        graph["commands::drill"].contains("commands::replay"),
        "{:?}",
        graph["commands::drill"]
    );
    assert!(graph["commands::replay"].contains("replay") && graph["replay"].contains("journal"));
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

/// `text` as code only: comments, string and character literals blanked
/// (lines kept, so line numbers still hold) and `#[cfg(test)]` modules
/// removed, so that what a scan finds is what the compiler reads.
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: u8| out.push(if c == b'\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                blank(&mut out, b[i]);
                i += 1;
            }
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if text[i..].starts_with("/*") {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if text[i..].starts_with("*/") {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            // r"…", r#"…"#, br"…": no escapes, ended by the quote and hashes.
            let open = rest.find('"').expect("a raw string's quote") + 1;
            let close = format!("\"{}", "#".repeat(hashes));
            let len = rest[open..]
                .find(&close)
                .map_or(rest.len(), |e| open + e + close.len());
            for &c in &b[i..i + len] {
                blank(&mut out, c);
            }
            i += len;
        } else if b[i] == b'"' || (b[i] == b'b' && rest.starts_with("b\"")) {
            let start = i;
            i += if b[i] == b'b' { 2 } else { 1 };
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            for &c in &b[start..i] {
                blank(&mut out, c);
            }
        } else if b[i] == b'\'' && char_literal_len(rest).is_some() {
            let len = char_literal_len(rest).expect("a character literal");
            for &c in &b[i..i + len] {
                blank(&mut out, c);
            }
            i += len;
        } else {
            let c = rest.chars().next().expect("a character");
            out.push(c);
            i += c.len_utf8();
        }
    }
    without_test_modules(&out)
}

/// The number of `#` of a raw string starting `s` (`r"`, `r#"`, `br"`), if
/// one does and the `r` is not the end of an identifier.
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s);
    let after = s.strip_prefix('r')?;
    let hashes = after.chars().take_while(|c| *c == '#').count();
    after[hashes..].starts_with('"').then_some(hashes)
}

/// The length of the character literal starting `s` (`'{'`, `'\''`,
/// `'\u{7b}'`); `None` for a lifetime (`'a`).
fn char_literal_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.get(1) == Some(&b'\\') {
        return s[2..].find('\'').map(|e| e + 3);
    }
    let c = s[1..].chars().next()?;
    let end = 1 + c.len_utf8();
    (s.as_bytes().get(end) == Some(&b'\'')).then_some(end + 1)
}

/// `code` with every module under `#[cfg(test)]` blanked, lines kept.
fn without_test_modules(code: &str) -> String {
    let mut lines: Vec<String> = code.lines().map(str::to_string).collect();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "#[cfg(test)]" {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < lines.len() && lines[j].trim_start().starts_with("#[") {
            j += 1;
        }
        let item = lines.get(j).map_or("", |l| l.trim_start());
        if !(item.starts_with("mod ") || item.starts_with("pub mod ")) {
            i += 1;
            continue;
        }
        let mut depth = 0i64;
        let mut opened = false;
        let mut k = j;
        while k < lines.len() {
            for c in lines[k].chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth == 0 {
                break;
            }
            k += 1;
        }
        let last = k.min(lines.len() - 1);
        for line in &mut lines[i..=last] {
            line.clear();
        }
        i = k + 1;
    }
    lines.join("\n")
}

/// Every function with a body in `code` (as [`code_of`] leaves it): its
/// name, first line (1-based) and length in lines, signature to closing
/// brace.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while let Some(at) = code[i..].find("fn ") {
        let start = i + at;
        i = start + 3;
        if start > 0 && word(b[start - 1]) {
            continue;
        }
        let name: String = code[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body's brace, or the `;` of a declaration, outside the
        // parameters (an array type has a `;` of its own).
        let mut nest = 0i64;
        let mut open = None;
        for (k, &c) in b.iter().enumerate().skip(i) {
            match c {
                b'(' | b'[' => nest += 1,
                b')' | b']' => nest -= 1,
                b';' if nest == 0 => break,
                b'{' if nest == 0 => {
                    open = Some(k);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut depth = 0i64;
        let mut close = open;
        for (k, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                close = k;
                break;
            }
        }
        let line = |at: usize| code[..at].matches('\n').count() + 1;
        out.push((name, line(start), line(close) - line(start) + 1));
    }
    out
}

#[test]
fn the_scans_read_code_only() {
    let code = code_of(
        "fn a() {\n    let s = \"fn b() { {\";\n    let c = '{';\n    // fn d() {\n    x::<'static>();\n}\n#[cfg(test)]\nmod tests {\n    fn e() {}\n}\nfn f(x: [u8; 2]) -> u8 { x[0] }\n",
    );
    let found: Vec<(String, usize, usize)> = functions(&code);
    assert_eq!(
        found,
        vec![("a".to_string(), 1, 6), ("f".to_string(), 11, 1)],
        "{code}"
    );
    assert!(code.contains("'static"), "a lifetime is code: {code}");
    assert_eq!(code.lines().count(), 11);
}

/// The commands, by name: each `src/commands/<name>.rs` or
/// `src/commands/<name>/`.
fn command_names() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(repo_path("src/commands"))
        .expect("reading src/commands")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().expect("a name").to_string_lossy().to_string())
        .filter(|n| n != "mod")
        .collect();
    out.sort();
    out
}

/// Every source file under `src/commands/`, with the command it belongs
/// to and how deep below the command's own module it is (`x.rs` and
/// `x/mod.rs`: 0; `x/y.rs`: 1).
fn command_files() -> Vec<(String, usize, PathBuf)> {
    let root = repo_path("src/commands");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files
        .into_iter()
        .filter(|f| !f.ends_with("src/commands/mod.rs"))
        .map(|f| {
            let rel = f.strip_prefix(&root).expect("under src/commands");
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().to_string())
                .collect();
            let command = parts[0].trim_end_matches(".rs").to_string();
            let depth = match parts.last().map(String::as_str) {
                Some("mod.rs") => parts.len() - 2,
                _ => parts.len() - 1,
            };
            (command, depth, f)
        })
        .collect()
}

/// Where `code` (of a file of command `command`, `depth` modules below it)
/// names another command: `crate::commands::…`, a `super::` that climbs to
/// the commands and names another, or a command `lib.rs` brings into the
/// crate's root (`crate::sync`, where no domain module of that name is).
fn other_commands_named(command: &str, depth: usize, code: &str) -> Vec<String> {
    let names = command_names();
    let domain = |n: &str| {
        repo_path(&format!("src/{n}.rs")).exists() || repo_path(&format!("src/{n}")).is_dir()
    };
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut say = |what: &str| found.push(format!("{}: {what}: {}", n + 1, line.trim()));
        if line.contains("crate::commands") {
            say("crate::commands");
        }
        for part in line.split("crate::").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if names.contains(&name) && !domain(&name) {
                say(&format!("crate::{name}"));
            }
        }
        for (at, _) in line.match_indices("super::") {
            if line[..at].ends_with("super::") {
                continue;
            }
            let mut rest = &line[at..];
            let mut climbs = 0;
            while let Some(r) = rest.strip_prefix("super::") {
                climbs += 1;
                rest = r;
            }
            // `depth + 1` climbs reach the commands' module.
            if climbs <= depth {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if climbs > depth + 1 || name != command {
                say(&format!("{}{name}", "super::".repeat(climbs)));
            }
        }
    }
    found
}

#[test]
fn no_command_imports_another() {
    let mut found = Vec::new();
    let mut drill = Vec::new();
    for (command, depth, f) in command_files() {
        let text = std::fs::read_to_string(&f).expect("reading a command file");
        let named = other_commands_named(&command, depth, &code_of(&text));
        if command == "drill" {
            // The drill rehearses the runbook through the commands.
            drill.extend(named);
            continue;
        }
        found.extend(named.into_iter().map(|n| format!("{}:{n}", f.display())));
    }
    // The scan can fail: the drill names the commands it runs.
    assert!(!drill.is_empty(), "the scan finds no command in the drill");
    assert_eq!(
        other_commands_named(
            "replay",
            1,
            "use super::super::fence::on;\nuse super::render;\n"
        ),
        vec!["1: super::super::fence: use super::super::fence::on;".to_string()]
    );
    assert!(
        found.is_empty(),
        "command files naming another command (what they share belongs in a domain module under src/):\n{}",
        found.join("\n")
    );
}

/// The longest a command's file may be.
const COMMAND_FILE_LINES: usize = 400;

#[test]
fn no_command_file_is_long() {
    let files = command_files();
    assert!(files.len() > 10, "the scan finds the command files");
    let long: Vec<String> = files
        .iter()
        .filter_map(|(_, _, f)| {
            let n = std::fs::read_to_string(f).expect("reading").lines().count();
            (n > COMMAND_FILE_LINES).then(|| format!("{}: {n} lines", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "command files over {COMMAND_FILE_LINES} lines (split the command into a folder: commands/<name>/…):\n{}",
        long.join("\n")
    );
}

/// The longest a function may be, signature to closing brace.
const FUNCTION_LINES: usize = 100;

/// Functions kept longer, as `(file under src/, name)`; docs/architecture.md
/// says why. An exception that fits again is taken off this list.
const LONG_FUNCTIONS: &[(&str, &str)] = &[
    ("db/csv.rs", "materialize"),
    ("db/postgres/datetime.rs", "encode"),
    ("db/postgres/digest.rs", "canon"),
    ("db/postgres/table_sql.rs", "build"),
    ("db/postgres/url.rs", "resolve"),
    ("db/sqlite/capture.rs", "journal_trigger_sql"),
    ("db/sqlite/journal_log.rs", "image_run"),
    ("db/sqlite/journal_log.rs", "journal_bytes"),
    ("digest.rs", "digest_table"),
    ("reconcile.rs", "visit"),
    ("schema.rs", "check_schema"),
    ("spec.rs", "resolve_table"),
    ("transform.rs", "forward_into"),
];

#[test]
fn no_function_is_long() {
    let src = repo_path("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut long = Vec::new();
    let mut seen = 0;
    for f in files {
        let rel = f
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(&f).expect("reading a source file");
        for (name, line, lines) in functions(&code_of(&text)) {
            seen += 1;
            if lines > FUNCTION_LINES {
                long.push((rel.clone(), name, line, lines));
            }
        }
    }
    assert!(seen > 500, "the scan finds the functions ({seen})");
    let over: Vec<String> = long
        .iter()
        .filter(|(f, n, ..)| !LONG_FUNCTIONS.contains(&(f.as_str(), n.as_str())))
        .map(|(f, n, line, lines)| format!("src/{f}:{line}: fn {n}: {lines} lines"))
        .collect();
    assert!(
        over.is_empty(),
        "functions over {FUNCTION_LINES} lines (split them into named steps):\n{}",
        over.join("\n")
    );
    let fits: Vec<String> = LONG_FUNCTIONS
        .iter()
        .filter(|(f, n)| !long.iter().any(|(lf, ln, ..)| lf == f && ln == n))
        .map(|(f, n)| format!("src/{f}: fn {n}"))
        .collect();
    assert!(
        fits.is_empty(),
        "take these off LONG_FUNCTIONS (and docs/architecture.md): they fit now, or are gone:\n{}",
        fits.join("\n")
    );
}

/// Every `Result` inside a `Result` in the code under `src/`, as
/// `path:line: text`: an outcome with more than two ends is an enum that
/// names them.
fn results_in_results(files: &[PathBuf]) -> Vec<String> {
    let mut found = Vec::new();
    for f in files {
        let code = code_of(&std::fs::read_to_string(f).expect("reading a source file"));
        for (n, line) in code.lines().enumerate() {
            let squeezed: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            if squeezed.contains("Result<Result<") || squeezed.contains("Result<anyhow::Result<") {
                found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn no_result_is_wrapped_in_another() {
    let src = repo_path("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let found = results_in_results(&files);
    assert!(
        found.is_empty(),
        "a Result inside a Result (name the outcomes in an enum):\n{}",
        found.join("\n")
    );
    // The scan can fail: it finds one where one is written.
    let dir = tempfile::tempdir().expect("a folder");
    let planted = dir.path().join("planted.rs");
    std::fs::write(
        &planted,
        "fn f() -> Result<Result<(), String>> {\n    Ok(Ok(()))\n}\n",
    )
    .expect("writing");
    assert_eq!(results_in_results(&[planted]).len(), 1);
}

/// The rows of the first Markdown table under `heading` (or of the first
/// table of the file when `heading` is empty), each as its cells, the
/// header and the separator left out.
fn doc_table(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(repo_path(doc)).expect("reading the doc");
    let from = if heading.is_empty() {
        0
    } else {
        text.find(heading).expect("the doc has the heading")
    };
    text[from..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn the_engine_table_of_the_docs_is_the_registry() {
    let rows = doc_table("docs/engines.md", "");
    let mut documented: Vec<String> = Vec::new();
    for row in &rows {
        // Every scheme a row names, in backquotes: `sqlite://PATH`, `postgresql://`.
        for (i, part) in row[0].split('`').enumerate() {
            if i % 2 == 1
                && let Some((scheme, _)) = part.split_once("://")
            {
                documented.push(scheme.to_string());
            }
        }
    }
    for engine in cutover::db::engines::all() {
        assert!(
            rows.iter()
                .any(|r| r[0].contains(&format!("`{}`", engine.form))),
            "docs/engines.md's first table has no row for {} ({})",
            engine.name,
            engine.form
        );
        for scheme in engine.schemes {
            assert!(
                documented.iter().any(|d| d == scheme),
                "docs/engines.md's first table does not name {}'s scheme {scheme}://",
                engine.name
            );
        }
    }
    // A CSV snapshot is read into a SQLite database: the one scheme there
    // that is no engine's.
    let unknown: Vec<&String> = documented
        .iter()
        .filter(|d| *d != "csv" && cutover::db::engines::for_url(&format!("{d}://x")).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "docs/engines.md names schemes no engine answers to: {unknown:?}"
    );
}

#[test]
fn the_interface_table_of_the_docs_is_the_seam() {
    let rows = doc_table("docs/architecture.md", "| interface | what it does |");
    let documented: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            r[0].split('`')
                .enumerate()
                .filter(|(i, _)| i % 2 == 1)
                .map(|(_, n)| n.to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let seam = std::fs::read_to_string(repo_path("src/db/interfaces.rs")).expect("the seam");
    let traits: Vec<String> = seam
        .lines()
        .filter_map(|l| l.strip_prefix("pub trait "))
        .map(|l| {
            l.split(|c: char| !c.is_alphanumeric())
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .filter(|t| t != "Database")
        .collect();
    assert!(
        traits.len() > 8,
        "the scan finds the interfaces: {traits:?}"
    );
    let mut missing: Vec<&String> = traits.iter().filter(|t| !documented.contains(t)).collect();
    let mut stale: Vec<&String> = documented.iter().filter(|d| !traits.contains(d)).collect();
    missing.sort();
    stale.sort();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md's interface table: missing {missing:?}, no longer in src/db/interfaces.rs {stale:?}"
    );
}
