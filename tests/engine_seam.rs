//! The engine seam holds: outside `src/db/`, no code names the SQLite
//! library, a pragma, `data_version`, `typeof()` or SQLite's own catalogue
//! and JSON tables. Comments may explain what an engine does; code may not
//! depend on it.

mod support;

use std::path::{Path, PathBuf};

use support::repo_path;

const FORBIDDEN: &[&str] = &[
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

#[test]
fn no_code_outside_src_db_names_sqlite_internals() {
    let src = repo_path("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(src.join("db"))) {
        let text = std::fs::read_to_string(f).expect("reading a source file");
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for word in FORBIDDEN {
                if line.contains(word) {
                    found.push(format!(
                        "{}:{}: {word}: {}",
                        f.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "engine-specific code outside src/db/:\n{}",
        found.join("\n")
    );
    // The scan itself can fail: it reads the seam it guards.
    assert!(files.iter().any(|f| f.ends_with("db/sqlite/mod.rs")));
}
