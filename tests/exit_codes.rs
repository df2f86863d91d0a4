//! The exit code of every command in its main outcomes, in one place
//! (diesel's `tests/exit_codes.rs`): 0 done and everything checked holds,
//! 1 the data failed a check, 2 the tool could not do its job.
//!
//! Also: with `--format json`, stdout is exactly one JSON document, for every
//! command and whatever the verdict.

mod support;

use support::{Dir, Layout, Spec, each_layout};

// --- check -----------------------------------------------------------------

#[test]
fn check_exits_0_on_a_clean_source() {
    let d = Dir::orders("check-clean");
    d.run(&["check"], 0);
}

#[test]
fn check_exits_1_on_an_invalid_source_row() {
    let d = Dir::orders("check-invalid");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '12.345' WHERE id = 102",
    );
    d.run(&["check"], 1);
}

#[test]
fn check_exits_2_on_a_bad_spec() {
    let d = Dir::orders("check-bad-spec");
    // A transform the tool does not know.
    d.spec(&Spec::orders().edit_table("orders", |t| {
        t.edit_column("status", |c| c.transform("lookup"))
    }));
    d.run(&["check"], 2);
}

// --- load ------------------------------------------------------------------

#[test]
fn load_exits_0_on_a_fresh_target() {
    let d = Dir::orders("load-fresh");
    d.run(&["load"], 0);
}

#[test]
fn load_exits_1_on_an_invalid_row_and_writes_nothing() {
    let d = Dir::orders("load-invalid");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '12.345' WHERE id = 102",
    );
    let before = d.bytes("target.db");
    d.run(&["load"], 1);
    assert_eq!(d.bytes("target.db"), before, "target.db was written");
}

#[test]
fn load_exits_2_on_a_non_empty_target_without_replace() {
    let d = Dir::orders("load-non-empty");
    d.exec(
        "target.db",
        "INSERT INTO orders (id, cents, status) VALUES (1, 1, 'active')",
    );
    d.run(&["load"], 2);
}

#[test]
fn load_exits_0_on_a_non_empty_target_with_replace() {
    let d = Dir::orders("load-replace");
    d.exec(
        "target.db",
        "INSERT INTO orders (id, cents, status) VALUES (1, 1, 'active')",
    );
    d.run(&["load", "--replace"], 0);
    d.run(&["gate"], 0);
}

// --- gate ------------------------------------------------------------------

#[test]
fn gate_exits_0_when_source_and_target_reconcile() {
    let d = Dir::orders_loaded("gate-clean");
    d.run(&["gate"], 0);
}

/// One changed, missing or extra row, each made by hand on a clean load:
/// exit 1, and that one difference counted as what it is.
fn gate_exits_1_after_a_manual_change_to_the_target(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "gate-changed");
    let cases = [
        (
            "changed",
            "UPDATE orders SET cents = 751 WHERE id = 102",
            3,
            2,
        ),
        ("missing", "DELETE FROM orders WHERE id = 103", 2, 2),
        (
            "extra",
            "INSERT INTO orders (id, cents, status) VALUES (104, 900, 'active')",
            4,
            3,
        ),
    ];
    for (kind, write, target_rows, matched) in cases {
        d.exec("target.db", write);
        let json = d.json(&["gate"], 1);
        let t = &json["tables"][0];
        for (field, n) in [
            ("source_rows", 3),
            ("target_rows", target_rows),
            ("matched", matched),
            ("changed", i64::from(kind == "changed")),
            ("missing", i64::from(kind == "missing")),
            ("extra", i64::from(kind == "extra")),
        ] {
            assert_eq!(t[field], n, "{kind}: {field} in {json:#}");
        }
        d.run(&["load", "--replace"], 0);
        d.run(&["gate"], 0);
    }
}
each_layout!(gate_exits_1_after_a_manual_change_to_the_target);

#[test]
fn gate_exits_1_when_the_rehearsal_catches_every_injected_fault() {
    let d = Dir::orders_loaded("gate-rehearsal");
    let json = d.json(&["gate", "--inject-mismatch"], 1);
    assert_eq!(json["injected"], json["caught"], "{json:#}");
    assert_eq!(json["injected"], 3, "{json:#}");
}

#[test]
fn gate_exits_2_when_a_database_file_is_missing() {
    let d = Dir::orders_loaded("gate-missing-db");
    std::fs::remove_file(d.join("target.db")).unwrap();
    d.run(&["gate"], 2);
    assert!(!d.exists("target.db"), "gate created the missing target.db");
}

// --- journal ---------------------------------------------------------------

#[test]
fn journal_install_status_and_remove_exit_0() {
    let d = Dir::orders_loaded("journal-cycle");
    d.run(&["journal", "install"], 0);
    d.run(&["journal", "status"], 0);
    d.run(&["journal", "remove"], 0);
    d.run(&["journal", "status"], 0);
}

fn journal_remove_exits_2_while_fenced(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "journal-remove-fenced");
    let before = d.snapshot();
    d.run(&["journal", "remove"], 2);
    d.assert_unchanged(&before, "journal remove while fenced");
}
each_layout!(journal_remove_exits_2_while_fenced);

// --- fence -----------------------------------------------------------------

#[test]
fn fence_on_exits_2_without_a_journal() {
    let d = Dir::orders_loaded("fence-no-journal");
    d.run(&["fence", "on"], 2);
}

fn fence_on_twice_exits_0_and_changes_nothing(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "fence-twice");
    let before = d.snapshot();
    d.run(&["fence", "on"], 0);
    d.assert_unchanged(&before, "second fence on");
}
each_layout!(fence_on_twice_exits_0_and_changes_nothing);

#[test]
fn fence_status_exits_0_on_and_off() {
    let d = Dir::orders_after_writes("fence-status");
    d.run(&["fence", "status"], 0);
    d.run(&["fence", "on"], 0);
    d.run(&["fence", "status"], 0);
}

fn fence_off_exits_2_while_the_replay_is_incomplete(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "fence-off-early");
    let before = d.snapshot();
    d.run(&["fence", "off"], 2);
    d.assert_unchanged(&before, "refused fence off");
}
each_layout!(fence_off_exits_2_while_the_replay_is_incomplete);

#[test]
fn fence_off_force_exits_0_while_the_replay_is_incomplete() {
    let d = Dir::orders_fenced("fence-off-force");
    d.run(&["fence", "off", "--force"], 0);
}

#[test]
fn fence_off_exits_0_after_a_complete_replay() {
    let d = Dir::orders_fenced("fence-off-done");
    d.run(&["replay"], 0);
    d.run(&["fence", "off"], 0);
}

// --- replay ----------------------------------------------------------------

#[test]
fn replay_exits_2_without_a_fence() {
    let d = Dir::orders_after_writes("replay-no-fence");
    d.run(&["replay"], 2);
}

#[test]
fn replay_exits_0_when_the_source_reconciles_after_it() {
    let d = Dir::orders_fenced("replay-clean");
    d.run(&["replay"], 0);
    d.run(&["replay"], 0);
}

fn replay_exits_1_on_a_conflict(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "replay-conflict");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '99.00' WHERE id = 101",
    );
    d.run(&["replay"], 1);
}
each_layout!(replay_exits_1_on_a_conflict);

// --- status and drill ------------------------------------------------------

fn status_exits_0_in_every_phase(layout: Layout) {
    let d = Dir::orders_on(layout, "status-phases");
    d.run(&["status"], 0);
    d.run(&["load"], 0);
    d.run(&["status"], 0);
    d.run(&["journal", "install"], 0);
    d.run(&["status"], 0);
    d.client("target.db", support::ORDERS_APP_WRITES);
    d.run(&["fence", "on"], 0);
    d.run(&["status"], 0);
    d.run(&["replay"], 0);
    d.run(&["status"], 0);
}
each_layout!(status_exits_0_in_every_phase);

#[test]
fn drill_exits_0() {
    let d = Dir::new("drill");
    d.command(&["drill"]).expect(0);
}

#[test]
fn drill_with_inject_mismatch_exits_1() {
    let d = Dir::new("drill-inject");
    d.command(&["drill", "--inject-mismatch"]).expect(1);
}

// --- usage errors ----------------------------------------------------------

#[test]
fn an_unknown_flag_exits_2() {
    let d = Dir::orders("usage-flag");
    let out = d.cutover(&["check", "--no-such-flag"]).expect(2);
    out.assert_mentions(&["--no-such-flag"]);
}

#[test]
fn a_missing_spec_flag_exits_2() {
    let d = Dir::orders("usage-no-spec");
    let out = d.command(&["gate"]).expect(2);
    out.assert_mentions(&["--spec"]);
}

#[test]
fn an_unknown_command_exits_2() {
    let d = Dir::orders("usage-command");
    d.command(&["rollback", "--spec", "spec.toml"]).expect(2);
}

#[test]
fn a_bad_format_exits_2() {
    let d = Dir::orders("usage-format");
    d.cutover(&["--format", "yaml", "status"]).expect(2);
}

#[test]
fn a_zero_batch_exits_2() {
    let d = Dir::orders("usage-batch");
    let before = d.snapshot();
    d.run(&["load", "--batch", "0"], 2);
    d.assert_unchanged(&before, "load --batch 0");
}

// --- --format json ---------------------------------------------------------

/// Runs the whole runbook with `--format json`; each command must print one
/// JSON document and exit with the same code as in table form.
#[test]
fn every_command_prints_exactly_one_json_document() {
    let d = Dir::orders("json-every-command");
    let check = d.json(&["check"], 0);
    assert_eq!(check["verdict"], "pass", "{check:#}");
    let load = d.json(&["load"], 0);
    assert_eq!(load["verdict"], "pass", "{load:#}");
    let gate = d.json(&["gate"], 0);
    assert_eq!(gate["verdict"], "pass", "{gate:#}");
    let rehearsal = d.json(&["gate", "--inject-mismatch"], 1);
    assert_eq!(rehearsal["caught"], 3, "{rehearsal:#}");
    let install = d.json(&["journal", "install"], 0);
    assert_eq!(install["installed"], true, "{install:#}");
    d.exec("target.db", support::ORDERS_APP_WRITES);
    let jstatus = d.json(&["journal", "status"], 0);
    assert_eq!(jstatus["entries"], 3, "{jstatus:#}");
    let fstatus = d.json(&["fence", "status"], 0);
    assert_eq!(fstatus["fenced"], false, "{fstatus:#}");
    let on = d.json(&["fence", "on"], 0);
    assert_eq!(on["fenced"], true, "{on:#}");
    let again = d.json(&["fence", "on"], 0);
    assert_eq!(again["fenced"], true, "{again:#}");
    let fstatus = d.json(&["fence", "status"], 0);
    assert_eq!(fstatus["intact"], true, "{fstatus:#}");
    let plan = d.json(&["replay", "--dry-run"], 0);
    assert_eq!(plan["stale_keys"], 3, "{plan:#}");
    let replay = d.json(&["replay"], 0);
    assert_eq!(replay["verdict"], "pass", "{replay:#}");
    assert_eq!(replay["applied"], 3, "{replay:#}");
    let status = d.json(&["status"], 0);
    assert!(status["phase"].is_string(), "{status:#}");
    let off = d.json(&["fence", "off"], 0);
    assert_eq!(off["fenced"], false, "{off:#}");
    let remove = d.json(&["journal", "remove"], 0);
    assert_eq!(remove["installed"], false, "{remove:#}");
}

#[test]
fn findings_print_exactly_one_json_document() {
    let d = Dir::orders("json-findings");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '12.345' WHERE id = 102",
    );
    let check = d.json(&["check"], 1);
    assert_eq!(check["verdict"], "fail", "{check:#}");
    let load = d.json(&["load"], 1);
    assert_eq!(load["verdict"], "fail", "{load:#}");

    let d = Dir::orders_loaded("json-gate-fail");
    d.exec("target.db", "UPDATE orders SET cents = 751 WHERE id = 102");
    let gate = d.json(&["gate"], 1);
    assert_eq!(gate["verdict"], "fail", "{gate:#}");

    let d = Dir::orders_fenced("json-replay-conflict");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '99.00' WHERE id = 101",
    );
    let replay = d.json(&["replay"], 1);
    assert_eq!(replay["verdict"], "fail", "{replay:#}");
    assert!(replay["conflict"].is_object(), "{replay:#}");
}

#[test]
fn drill_prints_exactly_one_json_document() {
    let d = Dir::new("json-drill");
    let out = d.command(&["--format", "json", "drill"]).expect(0);
    let json = out.json();
    assert_eq!(json["verdict"], "pass", "{json:#}");
    let out = d
        .command(&["--format", "json", "drill", "--inject-mismatch"])
        .expect(1);
    out.json();
}

#[test]
fn an_error_under_format_json_prints_no_partial_document() {
    // Exit 2 reports on stderr; stdout must not carry half a document that a
    // script would then try to parse.
    let d = Dir::orders_after_writes("json-error");
    let mut c = d.command(&["--format", "json", "replay"]);
    c.arg("--spec").arg("spec.toml");
    let out = c.expect(2);
    assert!(
        out.stdout.trim().is_empty()
            || serde_json::from_str::<serde_json::Value>(&out.stdout).is_ok(),
        "{out}"
    );
    assert!(!out.stderr.trim().is_empty(), "{out}");
}
