//! The invoices drill and the crash matrix as a contract: `--verify` passes
//! on the stored transcript and fails, naming the path, when any single
//! number in it is changed; the crash matrix passes every cell; the totals
//! per currency stay separate.

mod support;

use std::path::PathBuf;

use serde_json::Value as Json;
use support::{Dir, FAULT_EXIT, Output};

fn expected_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/invoices/expected.json")
}

fn expected() -> Json {
    let text = std::fs::read_to_string(expected_path()).expect("reading expected.json");
    serde_json::from_str(&text).expect("expected.json is JSON")
}

/// Runs `cutover ARGS` (table output) in a fresh folder; it must exit with
/// `code`.
fn drill(args: &[&str], code: i32) -> Output {
    Dir::new("drill").command(args).expect(code)
}

/// Runs `cutover ARGS --format json` in a fresh folder; it must exit with
/// `code`.
fn drill_json(args: &[&str], code: i32) -> Output {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    drill(&all, code)
}

#[test]
fn invoices_drill_verifies_against_the_stored_transcript() {
    let p = expected_path();
    let p = p.to_str().expect("a UTF-8 path");
    let r = drill(&["drill", "--scenario", "invoices", "--verify", p], 0);
    assert!(r.stdout.contains("matches the expected contract"), "{r}");
}

/// Changes the number at `path` (JSON pointer) in a copy of the expected
/// transcript and checks that verify fails naming `shown`.
fn changed_number_fails(pointer: &str, shown: &str) {
    let mut exp = expected();
    let slot = exp
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("expected.json has no {pointer}"));
    let was = slot
        .as_i64()
        .unwrap_or_else(|| panic!("{pointer} is not an integer: {slot}"));
    let now = was + 1;
    *slot = Json::from(now);
    let dir = Dir::new("verify");
    dir.write(
        "expected.json",
        serde_json::to_string_pretty(&exp).expect("JSON"),
    );
    let r = dir
        .command(&[
            "drill",
            "--scenario",
            "invoices",
            "--verify",
            "expected.json",
        ])
        .expect(1);
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains(shown))
        .unwrap_or_else(|| panic!("the differing path {shown} is not printed{r}"));
    assert!(
        line.contains(&now.to_string()) && line.contains(&was.to_string()),
        "the difference must show expected {now} and found {was}: {line}"
    );
    let named = r
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(".stages"))
        .count();
    assert_eq!(named, 1, "one number changed, one difference{r}");
}

#[test]
fn verify_fails_naming_a_changed_checkpoint() {
    changed_number_fails("/stages/3/checkpoint", ".stages[3].checkpoint");
}

#[test]
fn verify_fails_naming_a_changed_total() {
    changed_number_fails("/stages/10/totals/EUR", ".stages[10].totals.EUR");
}

#[test]
fn verify_fails_naming_a_changed_applied_count() {
    changed_number_fails(
        "/stages/0/deliveries/0/applied",
        ".stages[0].deliveries[0].applied",
    );
}

#[test]
fn verify_fails_naming_a_changed_stale_count() {
    changed_number_fails(
        "/stages/4/deliveries/0/stale",
        ".stages[4].deliveries[0].stale",
    );
}

#[test]
fn verify_fails_naming_a_changed_exit_code() {
    changed_number_fails("/stages/5/exit", ".stages[5].exit");
}

#[test]
fn crash_matrix_passes_all_nine_cells() {
    let r = drill_json(&["drill", "--crash-matrix"], 0);
    let j = r.json();
    assert_eq!(j["verdict"], "pass", "{r}");
    let cells = j["cells"].as_array().cloned().unwrap_or_default();
    assert_eq!(cells.len(), 9, "{r}");
    let mut seen = std::collections::BTreeSet::new();
    for c in &cells {
        assert_eq!(c["pass"], true, "cell {c} failed{r}");
        assert_eq!(c["exit"], FAULT_EXIT, "{c}");
        assert_eq!(c["rerun_exit"], 0, "{c}");
        seen.insert((c["operation"].to_string(), c["point"].to_string()));
    }
    assert_eq!(seen.len(), 9, "every operation at every point: {seen:?}");
}

#[test]
fn invoices_drill_keeps_currencies_apart_at_the_last_stage() {
    let r = drill_json(&["drill", "--scenario", "invoices"], 0);
    let j = r.json();
    let last = j["stages"]
        .as_array()
        .and_then(|s| s.last())
        .cloned()
        .unwrap_or_else(|| panic!("no stages{r}"));
    assert_eq!(last["totals"]["EUR"], 2650, "{r}");
    assert_eq!(last["totals"]["USD"], 5000, "{r}");
    assert_eq!(last["totals"].as_object().map(|t| t.len()), Some(2), "{r}");
}
