//! `cutover drill` against its golden transcripts, and the figures of the
//! running example (README.md) that the drill must print whatever the layout.
//!
//! The golden files are `fixtures/orders/drill.golden` (exit 0) and
//! `fixtures/orders/drill-inject.golden` (`--inject-mismatch`, exit 1). After
//! an intended change to the drill's output, regenerate them with
//! `UPDATE_GOLDEN=1 cargo test --test drill_golden` and review the diff.

mod support;

use support::{Dir, assert_golden, cutover, repo_path};

/// Runs `cutover ARGS`, insists on the exit code, returns stdout.
fn run(args: &[&str], code: i32) -> String {
    let out = cutover(args).expect(code);
    assert!(!out.stdout.contains('\u{FFFD}'), "stdout is UTF-8\n{out}");
    out.stdout
}

/// Compares `actual` with a golden file, or rewrites it under UPDATE_GOLDEN=1.
fn check_golden(name: &str, actual: &str) {
    let path = repo_path("fixtures/orders").join(name);
    assert_golden(&path, actual, "drill_golden");
}

fn assert_contains(text: &str, wants: &[&str], what: &str) {
    for want in wants {
        assert!(
            text.contains(want),
            "{what} does not contain {want:?}:\n{text}"
        );
    }
}

#[test]
fn drill_matches_its_golden_transcript() {
    check_golden("drill.golden", &run(&["drill"], 0));
}

#[test]
fn drill_with_injected_mismatch_matches_its_golden_transcript() {
    check_golden(
        "drill-inject.golden",
        &run(&["drill", "--inject-mismatch"], 1),
    );
}

/// The running example's figures, as README.md states them.
#[test]
fn drill_prints_the_figures_the_contract_requires() {
    let out = run(&["drill"], 0);
    assert_contains(
        &out,
        &[
            // load and gate
            "rows=3, total_cents=4000",
            "caught 3 of 3",
            // the fence refuses another connection's write
            "refused: \"cutover fence",
            "journal_boundary=3",
            // the stale keys
            "updated 101",
            "deleted 103",
            "new 104",
            // replay, reconciled, and idempotent
            "applied 3 entries",
            "rows=3, total_cents=3050",
            "applied 0 entries",
            "drill: PASS",
        ],
        "`cutover drill`",
    );
    let fence_line = out
        .lines()
        .find(|l| l.contains("refused"))
        .expect("a line reporting the refused write");
    assert!(fence_line.contains("cutover fence"), "{fence_line}");

    let blocked = run(&["drill", "--inject-mismatch"], 1);
    assert_contains(
        &blocked,
        &[
            "caught 3 of 3",
            "changed 102: cents 750 → 751",
            "missing 103",
            "extra 104",
            "cutover is BLOCKED",
        ],
        "`cutover drill --inject-mismatch`",
    );
    // The rehearsal stops the story at the gate.
    assert!(!blocked.contains("journal install"), "{blocked}");
}

#[test]
fn drill_json_is_one_document_with_a_verdict() {
    let out = run(&["drill", "--format", "json"], 0);
    let doc: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("`cutover drill --format json` is not JSON ({e}):\n{out}"));
    assert_eq!(doc["verdict"], "pass", "{out}");
    let steps = doc["steps"].as_array().expect("a list of steps");
    assert!(
        steps.iter().all(|s| s["ok"] == true),
        "every step holds: {out}"
    );

    let out = run(&["drill", "--inject-mismatch", "--format", "json"], 1);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(doc["verdict"], "blocked", "{out}");
}

#[test]
fn drill_keep_leaves_the_folder_and_refuses_to_overwrite_it() {
    let tmp = Dir::new("drill-keep");
    let dir = tmp.join("kept");
    let dir_s = dir.to_str().expect("a UTF-8 temporary path");
    let out = run(&["drill", "--keep", dir_s], 0);
    assert!(out.contains("drill: PASS"), "{out}");
    for f in ["spec.toml", "source.db", "target.db"] {
        assert!(dir.join(f).is_file(), "{f} is not in {}", dir.display());
    }
    // The kept folder is usable by hand: the rollback is complete there.
    let status = cutover(&["status", "--spec", "spec.toml"])
        .current_dir(&dir)
        .expect(0);
    assert!(status.stdout.contains("replayed 3 of 3"), "{status}");

    let before = std::fs::read(dir.join("source.db")).expect("source.db");
    let again = cutover(&["drill", "--keep", dir_s]).expect(2);
    assert!(again.stderr.contains("already holds"), "{again}");
    assert_eq!(
        std::fs::read(dir.join("source.db")).expect("source.db"),
        before,
        "a refused --keep must not touch the folder"
    );
}
