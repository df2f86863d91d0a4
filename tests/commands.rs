//! What each command does to the databases, checked on their contents:
//! load copies exactly and resumes after a crash, gate reports every kind of
//! difference, the journal records before- and after-images, replay carries
//! them back and records what it applied, status follows the runbook, and a
//! composite key with commas and quotes goes through all of it.

mod support;

use serde_json::{Value as Json, json};
use support::{Dir, FAULT_EXIT, Layout, ORDERS_SPEC, Rows, Spec, Table, each_layout, int, text};

/// The target of the running example after a clean load.
fn loaded_target() -> Rows {
    vec![
        vec![int(101), int(1250), text("active")],
        vec![int(102), int(750), text("closed")],
        vec![int(103), int(2000), text("active")],
    ]
}

/// The source of the running example after the rollback.
fn rolled_back_source() -> Rows {
    vec![
        vec![int(101), text("14.00"), text("A")],
        vec![int(102), text("7.50"), text("C")],
        vec![int(104), text("9.00"), text("A")],
    ]
}

// --- load ------------------------------------------------------------------

fn load_copies_cents_as_integers_and_codes_as_words(layout: Layout) {
    let d = Dir::orders_on(layout, "load-exact");
    let json = d.json(&["load"], 0);
    assert_eq!(json["tables"][0]["loaded"], 3, "{json:#}");
    assert_eq!(d.dump("target.db", "orders"), loaded_target());
    // The source is only read.
    assert_eq!(
        d.dump("source.db", "orders"),
        vec![
            vec![int(101), text("12.50"), text("A")],
            vec![int(102), text("7.50"), text("C")],
            vec![int(103), text("20.00"), text("A")],
        ]
    );
    d.run(&["gate"], 0);
}
each_layout!(load_copies_cents_as_integers_and_codes_as_words);

#[test]
fn load_in_batches_of_one_gives_the_same_target() {
    let d = Dir::orders("load-batch-1");
    let json = d.json(&["load", "--batch", "1"], 0);
    assert_eq!(json["tables"][0]["loaded"], 3, "{json:#}");
    assert_eq!(d.dump("target.db", "orders"), loaded_target());
    d.run(&["gate"], 0);
}

fn load_with_replace_reloads_over_a_changed_target(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "load-replace-content");
    d.exec(
        "target.db",
        "UPDATE orders SET cents = 1 WHERE id = 101; INSERT INTO orders VALUES (999, 5, 'closed');",
    );
    d.run(&["load", "--replace"], 0);
    assert_eq!(d.dump("target.db", "orders"), loaded_target());
}
each_layout!(load_with_replace_reloads_over_a_changed_target);

fn load_resumes_after_a_crash_mid_batch(layout: Layout) {
    let d = Dir::orders_on(layout, "load-crash-mid-batch");
    d.cutover(&["load"])
        .env("CUTOVER_FAULT", "mid-batch")
        .expect(FAULT_EXIT);
    assert_eq!(
        d.dump("target.db", "orders"),
        Rows::new(),
        "a batch that never committed left rows behind"
    );
    d.run(&["load"], 0);
    assert_eq!(d.dump("target.db", "orders"), loaded_target());
    d.run(&["gate"], 0);
}
each_layout!(load_resumes_after_a_crash_mid_batch);

fn load_resumes_after_a_crash_before_commit(layout: Layout) {
    let d = Dir::orders_on(layout, "load-crash-before-commit");
    d.cutover(&["load", "--batch", "1"])
        .env("CUTOVER_FAULT", "before-commit")
        .expect(FAULT_EXIT);
    assert_eq!(d.dump("target.db", "orders"), Rows::new());
    d.run(&["load", "--batch", "1"], 0);
    assert_eq!(d.dump("target.db", "orders"), loaded_target());
}
each_layout!(load_resumes_after_a_crash_before_commit);

fn load_resumes_after_its_last_committed_batch(layout: Layout) {
    let d = Dir::orders_on(layout, "load-crash-after-commit");
    d.cutover(&["load", "--batch", "1"])
        .env("CUTOVER_FAULT", "after-commit")
        .expect(FAULT_EXIT);
    // The first commit waits for the validation of every source row, which
    // runs beside the writes: it holds the batches written by then, one row
    // or more, in key order.
    let all = loaded_target();
    let committed = d.dump("target.db", "orders");
    assert!(
        !committed.is_empty() && all.starts_with(&committed),
        "the first commit holds a prefix of the load: {committed:?}"
    );
    let json = d.json(&["load", "--batch", "1"], 0);
    let table = &json["tables"][0];
    if committed.len() < all.len() {
        // Keys 101, 102, 103: the last committed is 100 + rows committed.
        let last = 100 + committed.len();
        assert_eq!(table["resumed_after"], json!([last]), "{json:#}");
        assert_eq!(table["loaded"], all.len() - committed.len(), "{json:#}");
    } else {
        assert_eq!(table["loaded"], 0, "{json:#}");
    }
    assert_eq!(d.dump("target.db", "orders"), all);
    d.run(&["gate"], 0);
}
each_layout!(load_resumes_after_its_last_committed_batch);

/// 3,000 more source rows and an invalid one after them, so that a load in
/// batches of 10 writes many batches before the validation running beside
/// it reaches the last row.
fn orders_invalid_at_the_end(layout: Layout, name: &str, last: &str) -> Dir {
    let d = Dir::orders_on(layout, name);
    d.exec(
        "source.db",
        &format!(
            // The form SQLite, PostgreSQL and MySQL all read.
            "INSERT INTO orders (id, dollars, status)
             WITH RECURSIVE n(i) AS (SELECT 1000 UNION ALL SELECT i + 1 FROM n WHERE i < 3999)
             SELECT i, '1.00', 'A' FROM n;
             {last}"
        ),
    );
    d
}

fn load_of_a_source_invalid_at_its_last_row_writes_nothing(layout: Layout) {
    let d = orders_invalid_at_the_end(
        layout,
        "load-invalid-last",
        "INSERT INTO orders (id, dollars, status) VALUES (5000, '1.001', 'A');",
    );
    let before = d.snapshot();
    let json = d.json(&["load", "--batch", "10"], 1);
    assert_eq!(json["invalid"]["key"], json!([5000]), "{json:#}");
    assert_eq!(json["invalid"]["column"], "dollars", "{json:#}");
    d.assert_unchanged(&before, "a load refused for its last row");
}
each_layout!(load_of_a_source_invalid_at_its_last_row_writes_nothing);

// --- gate ------------------------------------------------------------------

/// Whether `json["diffs"]` holds a diff with every field of `want`.
fn has_diff(json: &Json, want: &Json) -> bool {
    json["diffs"].as_array().is_some_and(|ds| {
        ds.iter().any(|d| {
            want.as_object()
                .expect("an object")
                .iter()
                .all(|(k, v)| d.get(k) == Some(v))
        })
    })
}

fn target_with_three_differences(name: &str) -> Dir {
    target_with_three_differences_on(Layout::Sqlite, name)
}

fn target_with_three_differences_on(layout: Layout, name: &str) -> Dir {
    let d = Dir::orders_loaded_on(layout, name);
    d.exec(
        "target.db",
        "UPDATE orders SET cents = 751 WHERE id = 102;
         DELETE FROM orders WHERE id = 103;
         INSERT INTO orders (id, cents, status) VALUES (104, 900, 'active');",
    );
    d
}

fn gate_json_reports_verdict_counts_totals_and_each_difference(layout: Layout) {
    let d = target_with_three_differences_on(layout, "gate-json");
    let json = d.json(&["gate"], 1);
    assert_eq!(json["verdict"], "fail", "{json:#}");
    let t = &json["tables"][0];
    assert_eq!(t["name"], "orders", "{json:#}");
    for (field, n) in [
        ("source_rows", 3),
        ("target_rows", 3),
        ("matched", 1),
        ("changed", 1),
        ("missing", 1),
        ("extra", 1),
        ("invalid", 0),
    ] {
        assert_eq!(t[field], n, "{field} in {json:#}");
    }
    let totals = &t["totals"][0];
    assert_eq!(totals["column"], "cents", "{json:#}");
    assert_eq!(totals["source"], 4000, "{json:#}");
    assert_eq!(totals["target"], 1250 + 751 + 900, "{json:#}");
    for want in [
        json!({"table": "orders", "key": [102], "kind": "changed", "column": "cents", "expected": 750, "actual": 751}),
        json!({"table": "orders", "key": [103], "kind": "missing"}),
        json!({"table": "orders", "key": [104], "kind": "extra"}),
    ] {
        assert!(has_diff(&json, &want), "no diff {want} in {json:#}");
    }
}
each_layout!(gate_json_reports_verdict_counts_totals_and_each_difference);

#[test]
fn gate_text_names_keys_expected_and_actual_and_says_blocked() {
    let d = target_with_three_differences("gate-text");
    let out = d.run(&["gate"], 1);
    out.assert_mentions(&["102", "103", "104", "cents", "750", "751", "blocked"]);
}

fn gate_counts_an_invalid_source_row(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "gate-invalid");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '7.505' WHERE id = 102",
    );
    let json = d.json(&["gate"], 1);
    assert_eq!(json["tables"][0]["invalid"], 1, "{json:#}");
    assert!(
        has_diff(
            &json,
            &json!({"key": [102], "kind": "invalid", "column": "dollars", "actual": "7.505"})
        ),
        "{json:#}"
    );
}
each_layout!(gate_counts_an_invalid_source_row);

#[test]
fn gate_max_diffs_keeps_one_difference_but_counts_all() {
    let d = target_with_three_differences("gate-max-diffs");
    let json = d.json(&["gate", "--max-diffs", "1"], 1);
    assert_eq!(json["diffs"].as_array().map(Vec::len), Some(1), "{json:#}");
    assert_eq!(json["diffs_found"], 3, "{json:#}");
    let t = &json["tables"][0];
    assert_eq!(
        (&t["changed"], &t["missing"], &t["extra"]),
        (&json!(1), &json!(1), &json!(1)),
        "{json:#}"
    );
}

#[test]
fn gate_reports_cents_stored_as_text_as_changed() {
    // A column without affinity keeps text as text; the gate must not let
    // '1250' pass for 1250.
    let d = Dir::new("gate-storage-class");
    d.spec(ORDERS_SPEC);
    d.create_db("source.db", support::ORDERS_SOURCE);
    d.create_db(
        "target.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents NOT NULL, status TEXT NOT NULL);",
    );
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    d.exec(
        "target.db",
        "UPDATE orders SET cents = CAST(cents AS TEXT) WHERE id = 101",
    );
    assert_eq!(
        d.dump("target.db", "orders")[0],
        vec![int(101), text("1250"), text("active")]
    );
    let json = d.json(&["gate"], 1);
    assert_eq!(json["tables"][0]["changed"], 1, "{json:#}");
    assert!(
        has_diff(
            &json,
            &json!({"key": [101], "kind": "changed", "column": "cents", "expected": 1250, "actual": "1250"})
        ),
        "{json:#}"
    );
}

fn gate_rehearsal_leaves_the_target_byte_for_byte_unchanged(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "gate-rehearsal-bytes");
    let before = d.snapshot();
    let json = d.json(&["gate", "--inject-mismatch"], 1);
    assert_eq!(json["injected"], 3, "{json:#}");
    assert_eq!(json["caught"], 3, "{json:#}");
    let kinds: Vec<&str> = json["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .map(|f| f["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["changed", "missing", "extra"], "{json:#}");
    d.assert_unchanged(&before, "gate --inject-mismatch");
    d.run(&["gate"], 0);
}
each_layout!(gate_rehearsal_leaves_the_target_byte_for_byte_unchanged);

// --- journal ---------------------------------------------------------------

/// `(seq, op, key, old_key, old, new)` of one journal entry.
type Entry = (i64, String, Json, Option<Json>, Option<Json>, Option<Json>);

/// Every journal entry, in `seq` order.
fn journal(d: &Dir) -> Vec<Entry> {
    support::journal_json(d, 1)
}

fn journal_records_insert_update_delete_with_before_and_after_images(layout: Layout) {
    let d = Dir::orders_after_writes_on(layout, "journal-images");
    let j = journal(&d);
    // The writes came from the engine's own client in another process;
    // their numbers only have to follow the order they ran in (PostgreSQL's
    // sequence skips those the install's proof took and rolled back).
    let seqs: Vec<i64> = j.iter().map(|e| e.0).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    if layout == Layout::Sqlite {
        assert_eq!(seqs, [1, 2, 3]);
    }
    let entries: Vec<_> = j
        .into_iter()
        .map(|(_, op, k, ok, o, n)| (op, k, ok, o, n))
        .collect();
    assert_eq!(
        entries,
        vec![
            (
                "update".to_string(),
                json!([101]),
                None,
                Some(json!({"id": 101, "cents": 1250, "status": "active"})),
                Some(json!({"id": 101, "cents": 1400, "status": "active"})),
            ),
            (
                "insert".to_string(),
                json!([104]),
                None,
                None,
                Some(json!({"id": 104, "cents": 900, "status": "active"})),
            ),
            (
                "delete".to_string(),
                json!([103]),
                None,
                Some(json!({"id": 103, "cents": 2000, "status": "active"})),
                None,
            ),
        ]
    );
    // SQLite journals through seven triggers per table, PostgreSQL four,
    // MySQL three (docs/journal.md).
    let triggers = match d.engine_of("target.db") {
        "sqlite" => 7,
        "mysql" => 3,
        _ => 4,
    };
    let status = d.json(&["journal", "status"], 0);
    let t = &status["tables"][0];
    assert_eq!(
        (&t["insert"], &t["update"], &t["delete"], &t["triggers"]),
        (&json!(1), &json!(1), &json!(1), &json!(triggers)),
        "{status:#}"
    );
    // The table says how many of how many.
    let out = d.run(&["journal", "status"], 0);
    out.assert_mentions(&[&format!("{triggers}/{triggers}")]);
}
each_layout!(journal_records_insert_update_delete_with_before_and_after_images);

fn a_key_change_is_journaled_with_both_keys_and_replay_carries_it_to_the_source(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "journal-key-change");
    d.run(&["journal", "install"], 0);
    d.client("target.db", "UPDATE orders SET id = 200 WHERE id = 101");
    let j = journal(&d);
    assert_eq!(j.len(), 1, "{j:?}");
    let (_, op, key, old_key, old, new) = &j[0];
    assert_eq!(op, "update");
    assert_eq!(key, &json!([200]));
    assert_eq!(old_key, &Some(json!([101])));
    assert_eq!(old.as_ref().map(|o| &o["id"]), Some(&json!(101)));
    assert_eq!(new.as_ref().map(|n| &n["id"]), Some(&json!(200)));

    d.run(&["fence", "on"], 0);
    let plan = d.json(&["replay", "--dry-run"], 0);
    let keys: Vec<&Json> = plan["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| &k["key"])
        .collect();
    assert!(
        keys.contains(&&json!([101])) && keys.contains(&&json!([200])),
        "both keys are stale: {plan:#}"
    );
    d.run(&["replay"], 0);
    assert_eq!(
        d.dump("source.db", "orders"),
        vec![
            vec![int(102), text("7.50"), text("C")],
            vec![int(103), text("20.00"), text("A")],
            vec![int(200), text("12.50"), text("A")],
        ]
    );
}
each_layout!(a_key_change_is_journaled_with_both_keys_and_replay_carries_it_to_the_source);

// --- replay ----------------------------------------------------------------

fn replay_rolls_the_source_back_to_the_target_through_the_reverse_transform(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "replay-content");
    let json = d.json(&["replay"], 0);
    assert_eq!(json["verdict"], "pass", "{json:#}");
    assert_eq!(json["applied"], 3, "{json:#}");
    assert_eq!(
        json["summary"], "rows=3, total_cents=3050, differences=0",
        "{json:#}"
    );
    assert_eq!(d.dump("source.db", "orders"), rolled_back_source());
}
each_layout!(replay_rolls_the_source_back_to_the_target_through_the_reverse_transform);

fn replay_records_each_applied_journal_seq_in_the_source(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "replay-applied");
    d.run(&["replay", "--batch", "2"], 0);
    let seqs = support::journal_seqs(&d, i64::MAX);
    let applied = d.applied_seqs("source.db", "target.db");
    assert_eq!(applied, seqs);
    // Three entries, one per write; on PostgreSQL the numbers the journal's
    // proof took and rolled back are skipped, so only their order is fixed.
    assert_eq!(applied.len(), 3, "{applied:?}");
    if layout == Layout::Sqlite {
        assert_eq!(applied, vec![1, 2, 3]);
    }
    // One run per batch of two: entries 1–2, then 3.
    assert_eq!(
        d.query(
            "source.db",
            "SELECT entries FROM _cutover_applied ORDER BY seq"
        ),
        vec![vec![int(2)], vec![int(1)]]
    );
    assert_eq!(d.applied_entries("source.db"), 3);
}
each_layout!(replay_records_each_applied_journal_seq_in_the_source);

fn a_second_replay_applies_nothing_and_changes_nothing(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "replay-twice");
    d.run(&["replay"], 0);
    let before = d.snapshot();
    let json = d.json(&["replay"], 0);
    assert_eq!(json["applied"], 0, "{json:#}");
    assert_eq!(json["previously_applied"], 3, "{json:#}");
    d.assert_unchanged(&before, "second replay");
    assert_eq!(d.dump("source.db", "orders"), rolled_back_source());
}
each_layout!(a_second_replay_applies_nothing_and_changes_nothing);

fn replay_dry_run_writes_nothing_and_lists_the_stale_keys(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "replay-dry-run");
    let before = d.snapshot();
    let json = d.json(&["replay", "--dry-run"], 0);
    d.assert_unchanged(&before, "replay --dry-run");
    assert_eq!(json["stale_keys"], 3, "{json:#}");
    assert_eq!(
        (&json["insert"], &json["update"], &json["delete"]),
        (&json!(1), &json!(1), &json!(1)),
        "{json:#}"
    );
    let keys: Vec<(Json, Json)> = json["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| (k["key"].clone(), k["effect"].clone()))
        .collect();
    assert_eq!(
        keys,
        vec![
            (json!([101]), json!("updated")),
            (json!([104]), json!("new")),
            (json!([103]), json!("deleted")),
        ],
        "{json:#}"
    );
    let out = d.run(&["replay", "--dry-run"], 0);
    out.assert_mentions(&["101", "103", "104", "nothing was written"]);
    assert!(!d.has_table("source.db", "_cutover_applied"));
}
each_layout!(replay_dry_run_writes_nothing_and_lists_the_stale_keys);

/// A PostgreSQL source in its own types (NUMERIC money, bigint keys,
/// varchar codes) goes through the runbook to either target: NUMERIC read
/// exactly, and written back at its scale (`14.00`, not `14`). Where the
/// target's integers hold more cents than `numeric(12,2)` (SQLite's 64
/// bits), the spec accepts that hazard.
fn a_numeric_postgres_source_rolls_back_at_its_scale(layout: Layout) {
    let d = Dir::on(layout, "numeric-source");
    d.spec(&Spec::orders().edit_table("orders", |t| t.watch(["dollars"])));
    d.create_db(
        "source.db",
        "CREATE TABLE orders (id bigint PRIMARY KEY, dollars numeric(12,2) NOT NULL, status varchar(1) NOT NULL);
         INSERT INTO orders VALUES (101, 12.50, 'A'), (102, 7.5, 'C'), (103, 20, 'A');",
    );
    d.create_db("target.db", support::ORDERS_TARGET);
    d.run(&["load"], 0);
    assert_eq!(d.dump("target.db", "orders"), loaded_target());
    d.run(&["gate"], 0);
    d.run(&["journal", "install"], 0);
    d.client("target.db", support::ORDERS_APP_WRITES);
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    assert_eq!(d.dump("source.db", "orders"), rolled_back_source());
    let again = d.json(&["replay"], 0);
    assert_eq!(again["applied"], 0, "{again:#}");
}
each_layout!(a_numeric_postgres_source_rolls_back_at_its_scale: [pg_to_pg, pg_to_sqlite, my_to_my]);

// --- status ----------------------------------------------------------------

fn phase(d: &Dir) -> String {
    let json = d.json(&["status"], 0);
    json["phase"].as_str().expect("phase").to_string()
}

fn status_phase_follows_the_runbook(layout: Layout) {
    let d = Dir::orders_on(layout, "status-phase");
    let seen = |want: &str, phase: String| {
        assert!(phase.starts_with(want), "phase {phase:?}, want {want:?}");
    };
    seen("not loaded", phase(&d));
    d.run(&["load"], 0);
    seen("loaded", phase(&d));
    d.run(&["journal", "install"], 0);
    seen("journaling", phase(&d));
    d.client("target.db", support::ORDERS_APP_WRITES);
    let p = phase(&d);
    seen("journaling", p.clone());
    assert!(p.contains('3'), "three entries: {p:?}");
    d.run(&["fence", "on"], 0);
    let p = phase(&d);
    seen("fenced at boundary", p.clone());
    assert!(p.contains("replayed 0 of 3"), "{p:?}");
    d.run(&["replay"], 0);
    seen("rolled back", phase(&d));
}
each_layout!(status_phase_follows_the_runbook);

// --- composite keys --------------------------------------------------------

/// `lines`, keyed by (region, code), amount ↔ cents.
fn lines_spec() -> Spec {
    Spec::new().table(
        Table::new("lines")
            .key(["region", "code"])
            .decimal("amount", "cents", 2),
    )
}

// ('eu', 'a,b') and ('eu,a', 'b') are one key if the parts are joined with a
// comma; the journal must keep them apart. The name is quoted: `lines` is a
// reserved word of MySQL.
const LINES_SOURCE: &str = r#"
CREATE TABLE "lines" (
    region TEXT NOT NULL,
    code   TEXT NOT NULL,
    amount TEXT NOT NULL,
    PRIMARY KEY (region, code)
);
INSERT INTO "lines" VALUES
    ('eu', 'a', '2.00'),
    ('eu', 'a,b', '1.00'),
    ('eu,a', 'b', '3.00'),
    ('o''brien', 'say "hi"', '4.00'),
    ('us', '["x",1]', '5.00');
"#;

const LINES_TARGET: &str = r#"
CREATE TABLE "lines" (
    region TEXT NOT NULL,
    code   TEXT NOT NULL,
    cents  INTEGER NOT NULL,
    PRIMARY KEY (region, code)
);
"#;

const LINES_WRITES: &str = r#"
UPDATE "lines" SET cents = 150 WHERE region = 'eu' AND code = 'a,b';
DELETE FROM "lines" WHERE region = 'eu,a' AND code = 'b';
UPDATE "lines" SET cents = 444 WHERE region = 'o''brien';
INSERT INTO "lines" VALUES ('it''s', 'a "quoted", key', 990);
"#;

fn a_composite_key_with_commas_and_quotes_goes_through_the_whole_runbook(layout: Layout) {
    let d = Dir::on(layout, "composite-key");
    d.spec(&lines_spec());
    d.create_db("source.db", LINES_SOURCE);
    d.create_db("target.db", LINES_TARGET);
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    d.run(&["gate", "--inject-mismatch"], 1);
    d.run(&["journal", "install"], 0);
    d.client("target.db", LINES_WRITES);
    let keys: Vec<String> = support::journal_json(&d, 2)
        .into_iter()
        .map(|e| e.2.to_string())
        .collect();
    assert_eq!(
        keys,
        vec![
            r#"["eu","a,b"]"#,
            r#"["eu,a","b"]"#,
            r#"["o'brien","say \"hi\""]"#,
            r#"["it's","a \"quoted\", key"]"#,
        ]
    );
    d.run(&["fence", "on"], 0);
    let plan = d.json(&["replay", "--dry-run"], 0);
    assert_eq!(plan["stale_keys"], 4, "{plan:#}");
    let json = d.json(&["replay"], 0);
    assert_eq!(json["applied"], 4, "{json:#}");
    assert_eq!(
        d.dump("source.db", "lines"),
        vec![
            vec![text("eu"), text("a"), text("2.00")],
            vec![text("eu"), text("a,b"), text("1.50")],
            vec![text("it's"), text("a \"quoted\", key"), text("9.90")],
            vec![text("o'brien"), text("say \"hi\""), text("4.44")],
            vec![text("us"), text("[\"x\",1]"), text("5.00")],
        ]
    );
    d.run(&["gate"], 0);
}
each_layout!(a_composite_key_with_commas_and_quotes_goes_through_the_whole_runbook);

// --- ignored and unmapped columns ------------------------------------------

const ORDERS_WITH_NOTE: &str = r#"
CREATE TABLE orders (
    id      INTEGER PRIMARY KEY,
    dollars TEXT NOT NULL,
    status  TEXT NOT NULL,
    note    TEXT
);
INSERT INTO orders VALUES (101, '12.50', 'A', 'rush'), (102, '7.50', 'C', NULL);
"#;

#[test]
fn an_ignored_column_is_reported_by_check_as_irreversible() {
    let d = Dir::new("ignore-note");
    d.spec(&Spec::orders().edit_table("orders", |t| t.ignore(["note"])));
    d.create_db("source.db", ORDERS_WITH_NOTE);
    d.create_db("target.db", support::ORDERS_TARGET);
    let json = d.json(&["check"], 0);
    assert_eq!(
        json["tables"][0]["ignored_columns"],
        json!(["note"]),
        "{json:#}"
    );
    let out = d.run(&["check"], 0);
    out.assert_mentions(&["note", "irreversible"]);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
}

#[test]
fn an_unmapped_source_column_is_a_spec_error_naming_it() {
    let d = Dir::new("unmapped-note");
    d.spec(ORDERS_SPEC);
    d.create_db("source.db", ORDERS_WITH_NOTE);
    d.create_db("target.db", support::ORDERS_TARGET);
    let before = d.snapshot();
    let out = d.run(&["check"], 2);
    out.assert_mentions(&["'note'", "orders", "ignore"]);
    d.run(&["load"], 2);
    d.assert_unchanged(&before, "load with an unmapped column");
}

// --- other ------------------------------------------------------------------

#[test]
fn spec_paths_resolve_against_the_spec_file_not_the_working_directory() {
    let d = Dir::orders("spec-relative");
    let elsewhere = Dir::new("elsewhere");
    let spec = d.join("spec.toml");
    d.command(&["load".as_ref(), "--spec".as_ref(), spec.as_os_str()])
        .current_dir(elsewhere.path())
        .expect(0);
    assert_eq!(d.dump("target.db", "orders"), loaded_target());
    assert!(
        std::fs::read_dir(elsewhere.path())
            .unwrap()
            .next()
            .is_none(),
        "files were created in the working directory"
    );
}

#[test]
fn non_canonical_text_passes_check_and_fails_it_under_strict() {
    let d = Dir::orders("non-canonical");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '12.5' WHERE id = 101",
    );
    let json = d.json(&["check"], 0);
    assert_eq!(json["tables"][0]["non_canonical"], 1, "{json:#}");
    let out = d.run(&["check", "--strict"], 1);
    out.assert_mentions(&["101", "dollars", "12.5"]);
    // Value-equal: the gate lets it through.
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
}

// --- awkward names and values ------------------------------------------------

/// Names that need quoting in TOML and in SQL: quotes, spaces, a dollar.
fn odd_spec() -> Spec {
    Spec::new().table(
        Table::new("it's \"odd\"")
            .source_table("order items")
            .target_table("we\"ird 'tbl'")
            .key(["the id"])
            .decimal("amount $", "cents\"x", 2)
            .copy("note"),
    )
}

fn quoted_names_nulls_and_the_largest_cents_survive_the_runbook(layout: Layout) {
    let d = Dir::on(layout, "odd-names");
    d.spec(&odd_spec());
    d.create_db(
        "source.db",
        r#"CREATE TABLE "order items" ("the id" INTEGER PRIMARY KEY, "amount $" TEXT, note TEXT);
           INSERT INTO "order items" VALUES
               (1, '1.00', 'a''b'), (2, NULL, NULL), (3, '92233720368547758.07', 'x');"#,
    );
    d.create_db(
        "target.db",
        r#"CREATE TABLE "we""ird 'tbl'" ("the id" INTEGER PRIMARY KEY, "cents""x" BIGINT, note TEXT);"#,
    );
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    d.run(&["gate", "--inject-mismatch"], 1);
    d.run(&["journal", "install"], 0);
    d.client(
        "target.db",
        r#"UPDATE "we""ird 'tbl'" SET "cents""x" = 9223372036854775806, note = NULL WHERE "the id" = 3;
           UPDATE "we""ird 'tbl'" SET "cents""x" = 5 WHERE "the id" = 2;
           INSERT INTO "we""ird 'tbl'" VALUES (4, NULL, 'new');"#,
    );
    d.run(&["fence", "on"], 0);
    let err = d
        .try_exec("target.db", r#"DELETE FROM "we""ird 'tbl'""#)
        .expect_err("the fence holds on a quoted name");
    assert!(err.contains("cutover fence"), "{err}");
    let json = d.json(&["replay"], 0);
    assert_eq!(json["applied"], 3, "{json:#}");
    assert_eq!(
        d.dump("source.db", "order items"),
        vec![
            vec![int(1), text("1.00"), text("a'b")],
            vec![int(2), text("0.05"), rusqlite::types::Value::Null],
            vec![
                int(3),
                text("92233720368547758.06"),
                rusqlite::types::Value::Null
            ],
            vec![int(4), rusqlite::types::Value::Null, text("new")],
        ]
    );
}
each_layout!(quoted_names_nulls_and_the_largest_cents_survive_the_runbook);

// --- more than one rollback, gaps, WAL ----------------------------------------

#[test]
fn a_gap_in_the_journal_is_counted_and_the_lost_write_is_caught() {
    let d = Dir::orders_after_writes("journal-gap");
    // Entry 2 (the insert of 104) is lost before the fence.
    d.exec("target.db", "DELETE FROM _cutover_journal_1 WHERE seq = 2");
    d.run(&["fence", "on"], 0);
    // The dry run already sees the replay end without reconciling.
    let plan = d.json(&["replay", "--dry-run"], 1);
    assert_eq!(plan["gaps"], 1, "{plan:#}");
    assert_eq!(plan["verdict"], "fail", "{plan:#}");
    assert!(
        has_diff(
            &plan["reconciliation"],
            &json!({"key": [104], "kind": "extra"})
        ),
        "{plan:#}"
    );
    let json = d.json(&["replay"], 1);
    assert_eq!(json["gaps"], 1, "{json:#}");
    // Both entries left were applied, then rolled back with the replay.
    assert_eq!(json["applied"], 0, "{json:#}");
    assert_eq!(json["rolled_back"], 2, "{json:#}");
    assert!(
        has_diff(
            &json["reconciliation"],
            &json!({"key": [104], "kind": "extra"})
        ),
        "{json:#}"
    );
}

fn a_second_rollback_applies_only_the_new_entries(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "second-rollback");
    d.run(&["replay"], 0);
    d.run(&["fence", "off"], 0);
    d.client("target.db", "UPDATE orders SET cents = 800 WHERE id = 102");
    let on = d.json(&["fence", "on"], 0);
    // The boundary is the new entry's seq (4 on SQLite; PostgreSQL's
    // sequence skips the numbers rolled-back proofs took).
    let last = d.int("target.db", "SELECT max(seq) FROM _cutover_journal");
    assert_eq!(on["boundary"], last, "{on:#}");
    if layout == Layout::Sqlite {
        assert_eq!(last, 4);
    }
    let json = d.json(&["replay"], 0);
    assert_eq!(json["previously_applied"], 3, "{json:#}");
    assert_eq!(json["applied"], 1, "{json:#}");
    assert_eq!(
        d.query("source.db", "SELECT * FROM orders WHERE id = 102"),
        vec![vec![int(102), text("8.00"), text("C")]]
    );
}
each_layout!(a_second_rollback_applies_only_the_new_entries);

#[test]
fn the_runbook_works_on_databases_in_wal_mode() {
    let d = Dir::orders("wal");
    for db in ["source.db", "target.db"] {
        let mode: String = d
            .conn(db)
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    d.run(&["gate", "--inject-mismatch"], 1);
    d.run(&["gate"], 0);
    d.run(&["journal", "install"], 0);
    d.exec("target.db", support::ORDERS_APP_WRITES);
    d.run(&["fence", "on"], 0);
    let (code, out) = support::python(
        d.path(),
        support::PY_WRITE,
        &["target.db", "DELETE FROM orders WHERE id = 102"],
    );
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("cutover fence"), "{out}");
    d.run(&["replay"], 0);
    assert_eq!(d.dump("source.db", "orders"), rolled_back_source());
}

// --- reports for the change record, --table ----------------------------------------

#[test]
fn gate_report_is_the_json_document_with_its_provenance() {
    use sha2::{Digest, Sha256};
    let d = Dir::orders_loaded("report-json");
    let printed = d.json(&["gate"], 0);
    assert_eq!(printed["cutover_version"], env!("CARGO_PKG_VERSION"));
    assert!(
        printed["generated_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{printed:#}"
    );
    d.run(&["gate", "--report", "gate-report.json"], 0);
    let report: Json =
        serde_json::from_str(&std::fs::read_to_string(d.join("gate-report.json")).expect("report"))
            .expect("the report is JSON");
    // The same document the JSON output gives …
    for field in ["verdict", "tables", "diffs", "summary"] {
        assert_eq!(report[field], printed[field], "{field}: {report:#}");
    }
    // … plus where it came from.
    assert_eq!(report["tool"]["version"], env!("CARGO_PKG_VERSION"));
    let spec_digest = hex::encode(Sha256::digest(d.bytes("spec.toml")));
    assert_eq!(report["spec"]["sha256"], spec_digest, "{report:#}");
    let dbs = report["databases"].as_array().expect("databases");
    assert_eq!(dbs.len(), 2, "{report:#}");
    for db in dbs {
        let name = if db["role"] == "source" {
            "source.db"
        } else {
            "target.db"
        };
        let bytes = d.bytes(name);
        assert_eq!(db["size"], bytes.len() as u64, "{report:#}");
        assert_eq!(
            db["sha256"],
            hex::encode(Sha256::digest(&bytes)),
            "{report:#}"
        );
    }
    assert!(report["started_at"].as_str().is_some() && report["finished_at"].as_str().is_some());
    // A failing gate's report says so, in Markdown for any other name.
    d.exec("target.db", "UPDATE orders SET cents = 1 WHERE id = 101");
    d.run(&["gate", "--report", "gate-report.md"], 1);
    let md = std::fs::read_to_string(d.join("gate-report.md")).expect("report");
    for part in ["# cutover report", "| verdict", "fail", "sha256", "[101]"] {
        assert!(md.contains(part), "{part} missing from:\n{md}");
    }
}

#[test]
fn table_limits_a_run_to_the_tables_it_names() {
    let d = Dir::orders_loaded("table-filter");
    d.spec(&Spec::orders().table(Table::new("notes").key(["id"]).copy("body")));
    d.exec("source.db", "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes VALUES (1, 'x');");
    d.exec(
        "target.db",
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);",
    );
    // Only orders: notes, not loaded, is not looked at.
    let json = d.json(&["gate", "--table", "orders"], 0);
    assert_eq!(json["tables"].as_array().map(Vec::len), Some(1), "{json:#}");
    d.run(&["gate"], 1);
    d.run(&["load", "--table", "notes"], 0);
    d.run(&["gate"], 0);
    d.run(&["check", "--table", "notes", "--table", "orders"], 0);
    let before = d.snapshot();
    let out = d.run(&["load", "--table", "nope"], 2);
    out.assert_mentions(&["nope", "orders", "notes"]);
    d.assert_unchanged(&before, "--table naming no table of the spec");
}
