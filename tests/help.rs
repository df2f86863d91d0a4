//! Snapshots of `cutover --help` and of every subcommand's `--help`, kept in
//! `fixtures/help/<name>.txt` (diesel_cli's `help_snapshots`).
//!
//! The help text is the first documentation an operator reads, and README.md
//! and RUNBOOK.md quote its flags; a flag renamed or a default changed must
//! show up here as a reviewed diff, not slip by. After an intended change,
//! regenerate with `UPDATE_GOLDEN=1 cargo test --test help` and review the diff.

mod support;

use std::collections::VecDeque;
use std::path::PathBuf;

use support::golden::updating;
use support::{cutover, first_difference, repo_path};

/// Pages that must exist whatever else is added; the walk below finds the rest.
const CORE_PAGES: &[&str] = &[
    "cutover",
    "check",
    "load",
    "gate",
    "journal",
    "journal-install",
    "journal-remove",
    "journal-status",
    "fence",
    "fence-on",
    "fence-off",
    "fence-status",
    "replay",
    "status",
    "drill",
];

/// One help page: its snapshot name, the arguments that print it, its text.
struct Page {
    name: String,
    args: Vec<String>,
    text: String,
}

fn help_dir() -> PathBuf {
    repo_path("fixtures/help")
}

/// Runs `cutover ARGS` and returns its stdout, insisting on exit 0 and a
/// quiet stderr.
fn help_text(args: &[String]) -> String {
    let out = cutover(args).expect(0);
    assert!(out.stderr.is_empty(), "{out}");
    out.stdout
}

/// The commands a help text lists under `Commands:`, `help` excluded.
fn listed_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// Every help page, found by walking the `Commands:` lists from the top, so
/// that a new subcommand gets a snapshot (and a review) without anyone
/// remembering to list it. A subcommand of a subcommand is named
/// `parent-child`.
fn pages() -> Vec<Page> {
    let mut pages = Vec::new();
    let mut queue: VecDeque<Vec<String>> = VecDeque::from([Vec::new()]);
    while let Some(path) = queue.pop_front() {
        let mut args = path.clone();
        args.push("--help".into());
        let text = help_text(&args);
        for cmd in listed_commands(&text) {
            let mut sub = path.clone();
            sub.push(cmd);
            queue.push_back(sub);
        }
        let name = if path.is_empty() {
            "cutover".to_string()
        } else {
            path.join("-")
        };
        pages.push(Page { name, args, text });
    }
    pages
}

#[test]
fn help_matches_snapshots() {
    let dir = help_dir();
    let pages = pages();
    let mut failures = Vec::new();
    if updating() {
        std::fs::create_dir_all(&dir).expect("creating fixtures/help");
    }
    for page in &pages {
        let path = dir.join(format!("{}.txt", page.name));
        if updating() {
            std::fs::write(&path, &page.text).expect("writing a help snapshot");
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(expected) if expected == page.text => {}
            Ok(expected) => failures.push(format!(
                "`cutover {}` differs from {}: {}",
                page.args.join(" "),
                path.display(),
                first_difference(&expected, &page.text)
            )),
            Err(e) => failures.push(format!(
                "`cutover {}` has no snapshot ({}: {e})",
                page.args.join(" "),
                path.display()
            )),
        }
    }
    // A snapshot of a command that no longer exists documents nothing.
    for entry in std::fs::read_dir(&dir).expect("reading fixtures/help") {
        let path = entry.expect("a directory entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "txt") && !pages.iter().any(|p| p.name == stem) {
            if updating() {
                std::fs::remove_file(&path).expect("removing a stale snapshot");
            } else {
                failures.push(format!("{} is the snapshot of no command", path.display()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nif the change is intended, run `UPDATE_GOLDEN=1 cargo test --test help` and review the diff",
        failures.join("\n\n")
    );
}

#[test]
fn the_walk_finds_every_core_page() {
    let names: Vec<String> = pages().into_iter().map(|p| p.name).collect();
    for core in CORE_PAGES {
        assert!(
            names.iter().any(|n| n == core),
            "no help page `{core}` among {names:?}"
        );
    }
}

#[test]
fn top_level_help_states_the_exit_codes() {
    let help = help_text(&["--help".to_string()]);
    for want in [
        "0 everything checked holds",
        "1 the data failed a check",
        "2 the tool could not do its job",
    ] {
        assert!(
            help.contains(want),
            "`cutover --help` lost {want:?}:\n{help}"
        );
    }
}

/// Wherever a page speaks of databases, it names every engine: an operator
/// reading one page must not conclude that only one is supported.
#[test]
fn every_page_that_speaks_of_databases_names_every_engine() {
    let mut failures = Vec::new();
    for page in pages() {
        if !page.text.to_lowercase().contains("database") {
            continue;
        }
        let missing: Vec<&str> = ["SQLite", "PostgreSQL", "MySQL/MariaDB"]
            .into_iter()
            .filter(|e| !page.text.contains(e))
            .collect();
        if !missing.is_empty() {
            failures.push(format!(
                "`cutover {}` does not name {}",
                page.args.join(" "),
                missing.join(", ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
