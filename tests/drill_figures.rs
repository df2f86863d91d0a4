//! The orders drill's figures are the commands' own. The drill reads each
//! step's figures from the command's typed report; here the same command is
//! run again by hand, in the folder the drill leaves (`--keep`), and its
//! JSON must say the same under the key the figure is named after. A drill
//! step that read the wrong field (`already_present` for `loaded`, say)
//! fails this test even where the runbook's own checks would still pass.

mod support;

use serde_json::Value as Json;
use support::*;

/// Runs the orders drill up to `stop` (the whole runbook for `None`) in
/// `d/sub`, kept; returns each step's figures by step name.
fn drill(d: &Dir, sub: &str, stop: Option<&str>) -> Vec<(String, Json)> {
    let mut c = d.command(&["drill", "--keep", sub, "--format", "json"]);
    if let Some(s) = stop {
        c.arg("--stop-after").arg(s);
    }
    let transcript = c.expect(0).json();
    assert_eq!(transcript["verdict"], "pass", "{transcript:#}");
    transcript["steps"]
        .as_array()
        .expect("the transcript lists its steps")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().expect("a step has a name").to_string(),
                s["figures"].clone(),
            )
        })
        .collect()
}

/// The figure `key` of the step `name`.
fn figure(steps: &[(String, Json)], name: &str, key: &str) -> Json {
    let (_, f) = steps
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("the drill has no step '{name}': {steps:?}"));
    let v = f[key].clone();
    assert!(!v.is_null(), "step '{name}' has no figure '{key}': {f}");
    v
}

/// `cutover --format json ARGS --spec spec.toml` in `d/sub`.
fn json_in(d: &Dir, sub: &str, args: &[&str], code: i32) -> Json {
    let mut c = d.command(&["--format", "json"]);
    for a in args {
        c.arg(a);
    }
    c.arg("--spec").arg(SPEC).current_dir(&d.join(sub));
    c.expect(code).json()
}

#[test]
fn check_load_gate_and_rehearsal_figures_are_the_commands_own() {
    let d = Dir::new("drill-figures-gate");
    let steps = drill(&d, "gate", Some("gate"));

    let rows = figure(&steps, "check", "rows");
    assert_eq!(rows, 3);
    assert_eq!(
        json_in(&d, "gate", &["check"], 0)["tables"][0]["rows"],
        rows
    );

    // Loaded into an empty target: every row there now was loaded.
    let loaded = figure(&steps, "load", "loaded");
    assert_eq!(loaded, 3);
    assert_eq!(json_in(&d, "gate", &["status"], 0)["target_rows"], loaded);

    let summary = figure(&steps, "gate", "summary");
    assert_eq!(summary, "rows=3, total_cents=4000, differences=0");
    assert_eq!(json_in(&d, "gate", &["gate"], 0)["summary"], summary);

    let rehearsal = json_in(&d, "gate", &["gate", "--inject-mismatch"], 1);
    for key in ["injected", "caught"] {
        let f = figure(&steps, "rehearsal", key);
        assert_eq!(f, 3, "{key}");
        assert_eq!(rehearsal[key], f, "{key}");
    }
}

#[test]
fn journal_and_fence_figures_are_the_commands_own() {
    let d = Dir::new("drill-figures-fence");
    let steps = drill(&d, "fence", Some("fence"));

    let installed = figure(&steps, "cut over", "installed");
    assert_eq!(installed, true);
    let journal = json_in(&d, "fence", &["journal", "status"], 0);
    assert_eq!(journal["installed"], installed);
    let entries = figure(&steps, "application", "journal_entries");
    assert_eq!(entries, 3);
    assert_eq!(journal["entries"], entries);

    let boundary = figure(&steps, "fence", "journal_boundary");
    assert_eq!(boundary, 3);
    assert_eq!(
        json_in(&d, "fence", &["fence", "status"], 0)["boundary"],
        boundary
    );

    // The plan the full drill makes next, from this very state.
    let full = drill(&d, "all", None);
    let stale = figure(&full, "plan", "stale_keys");
    assert_eq!(stale, 3);
    assert_eq!(
        json_in(&d, "fence", &["replay", "--dry-run"], 0)["stale_keys"],
        stale
    );
}

#[test]
fn replay_and_status_figures_are_the_commands_own() {
    let d = Dir::new("drill-figures-replay");
    let steps = drill(&d, "all", None);

    assert_eq!(figure(&steps, "replay", "applied"), 3);
    let again = figure(&steps, "replay again", "applied");
    assert_eq!(again, 0);
    // A third replay is the second one again: nothing to apply, and the
    // same reconciliation as the first.
    let replay = json_in(&d, "all", &["replay"], 0);
    assert_eq!(replay["applied"], again);
    assert_eq!(replay["summary"], figure(&steps, "replay", "summary"));

    let phase = figure(&steps, "status", "phase");
    assert!(
        phase.as_str().is_some_and(|p| p.starts_with("rolled back")),
        "{phase}"
    );
    assert_eq!(json_in(&d, "all", &["status"], 0)["phase"], phase);
}
