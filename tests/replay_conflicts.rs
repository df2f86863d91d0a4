//! Conflicts during replay and the journal's hard shapes: a source row
//! deleted or re-created after the cutover, a unique constraint in the source
//! that a replayed insert would break, a conflict at the very end of a large
//! batch; and chains on one key (insert, update, key change, delete), keys
//! swapped through a temporary key, deletes of rows the source never had.
//!
//! Whatever stops a batch, the whole batch is rolled back: the source is
//! compared byte for byte. What is replayed ends equal to the target.
//! `tests/bad_input.rs` has the first conflicts (a changed row, an inserted
//! key, a word with no code); this file does not repeat them.

mod support;

use serde_json::json;
use support::{Dir, Spec, Table, int, text};

/// The running example, loaded and journaled, after `writes` on the target,
/// fenced.
fn fenced_after(name: &str, writes: &str) -> Dir {
    journaled_and_fenced(Dir::orders_loaded(name), writes)
}

/// `d`'s target journaled, then `writes` on it, then fenced.
fn journaled_and_fenced(d: Dir, writes: &str) -> Dir {
    d.run(&["journal", "install"], 0);
    d.exec("target.db", writes);
    d.run(&["fence", "on"], 0);
    d
}

// --- the source changed after the cutover ---------------------------------------------

#[test]
fn a_source_row_deleted_after_the_cutover_is_a_conflict_and_its_batch_rolls_back() {
    let d = fenced_after(
        "source-row-deleted",
        "UPDATE orders SET cents = 1400 WHERE id = 101;
         UPDATE orders SET cents = 800 WHERE id = 102;",
    );
    d.exec("source.db", "DELETE FROM orders WHERE id = 102");
    let before = d.snapshot();
    let json = d.json(&["replay"], 1);
    let c = &json["conflict"];
    assert_eq!(c["tag"], 2, "{json:#}");
    assert_eq!(c["key"], json!([102]), "{json:#}");
    assert_eq!(c["found"], json!(null), "{json:#}");
    assert_eq!(
        c["expected"],
        json!({"id": 102, "cents": 750, "status": "closed"}),
        "{json:#}"
    );
    assert!(
        c["reason"].as_str().unwrap_or_default().contains("gone"),
        "{json:#}"
    );
    d.assert_unchanged(&before, "replay that met a deleted source row");
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["CONFLICT at seq 2", "'orders'", "[102]", "(no row)"]);
    d.assert_unchanged(&before, "replay (text report)");
}

/// `notes(id, body, n)`: in the source `body` compares without case and
/// `n` has NUMERIC affinity, so SQLite's own `=` calls values equal that are
/// not; in the target `n` is declared `target_n`. Loaded and journaled, then
/// `writes` on the target, fenced.
fn notes_fenced_after(name: &str, target_n: &str, writes: &str) -> Dir {
    let d = Dir::with(
        name,
        &Spec::new().table(Table::new("notes").key(["id"]).copy("body").copy("n")),
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT COLLATE NOCASE, n NUMERIC);
         INSERT INTO notes VALUES (1, 'Hello', 7), (2, 'World', 8);",
        &format!("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, n {target_n});"),
    );
    d.run(&["load"], 0);
    journaled_and_fenced(d, writes)
}

#[test]
fn a_source_row_equal_only_to_sqlites_own_comparison_is_a_conflict() {
    // The source row changed after the cutover only in letter case, which
    // its column's collation does not see.
    let d = notes_fenced_after(
        "equal-without-case",
        "NUMERIC",
        "UPDATE notes SET body = 'Bye' WHERE id = 1;",
    );
    d.exec("source.db", "UPDATE notes SET body = 'HELLO' WHERE id = 1");
    let before = d.snapshot();
    let json = d.json(&["replay"], 1);
    assert_eq!(json["conflict"]["key"], json!([1]), "{json:#}");
    assert_eq!(json["conflict"]["found"]["body"], "HELLO", "{json:#}");
    d.assert_unchanged(&before, "replay that met a row equal only without case");

    // The target holds the text '8' where the source holds the integer 8:
    // NUMERIC affinity makes them equal to SQLite, not to the journal.
    let d = notes_fenced_after(
        "equal-by-affinity",
        "TEXT",
        "UPDATE notes SET body = 'Planet' WHERE id = 2;",
    );
    assert_eq!(
        d.query("target.db", "SELECT typeof(n) FROM notes WHERE id = 2"),
        vec![vec![text("text")]]
    );
    let before = d.snapshot();
    let json = d.json(&["replay"], 1);
    assert_eq!(json["conflict"]["key"], json!([2]), "{json:#}");
    d.assert_unchanged(&before, "replay that met a row of another storage class");
}

#[test]
fn a_source_row_already_equal_to_the_after_image_counts_as_in_place() {
    // Someone fixed the source by hand to what the target says: not a
    // conflict, and not written twice.
    let d = fenced_after(
        "source-row-already-after",
        "UPDATE orders SET cents = 1400 WHERE id = 101;
         INSERT INTO orders (id, cents, status) VALUES (104, 900, 'active');",
    );
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '14.00' WHERE id = 101;
         INSERT INTO orders (id, dollars, status) VALUES (104, '9.00', 'A');",
    );
    let json = d.json(&["replay"], 0);
    assert_eq!(json["applied"], 0, "{json:#}");
    assert_eq!(json["already_in_place"], 2, "{json:#}");
    assert_eq!(support::applied_seqs(&d), vec![1, 2]);
}

#[test]
fn a_conflict_on_the_last_entry_of_a_large_batch_leaves_none_of_it() {
    let d = Dir::new("conflict-end-of-batch");
    let entries = support::fenced_orders_workload(&d, 200, 400, 0xC0F1);
    assert!(entries >= 300, "{entries}");
    // The key the 300th entry addresses, changed in the source.
    let entry = &support::journal_json(&d, 1)[299];
    let key: i64 = entry.3.as_ref().unwrap_or(&entry.2)[0]
        .as_i64()
        .expect("an id");
    // Make the source row differ from every image the journal could expect
    // (insert it if the source does not have it).
    d.exec(
        "source.db",
        &format!(
            "INSERT INTO orders (id, dollars, status) VALUES ({key}, '0.01', 'C')
             ON CONFLICT (id) DO UPDATE SET dollars = '0.01', status = 'C';"
        ),
    );
    let before = d.snapshot();
    let json = d.json(&["replay", "--batch", "300"], 1);
    let first = json["conflict"]["tag"].as_i64().expect("a conflict");
    assert!(first <= 300, "{json:#}");
    assert_eq!(json["applied"], 0, "{json:#}");
    d.assert_unchanged(&before, "a 300-entry batch with a conflict in it");
}

// --- constraints of the source ----------------------------------------------------------

/// Orders with a `ref` column that is UNIQUE in the source only.
fn with_unique_ref(name: &str) -> Dir {
    let d = Dir::new(name);
    d.spec(&format!(
        "{}\n[[tables.columns]]\nsource = \"ref\"\n",
        support::ORDERS_SPEC
    ));
    d.create_db(
        "source.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL, ref TEXT UNIQUE);
         INSERT INTO orders VALUES (101, '12.50', 'A', 'R1'), (102, '7.50', 'C', 'R2'), (103, '20.00', 'A', 'R3');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL, ref TEXT);",
    );
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    // seq 1 is fine; seq 2 inserts a ref the source already has on 102.
    d.exec(
        "target.db",
        "UPDATE orders SET cents = 1400 WHERE id = 101;
         INSERT INTO orders VALUES (104, 900, 'active', 'R2');",
    );
    d.run(&["fence", "on"], 0);
    d
}

#[test]
fn a_replayed_insert_that_breaks_a_unique_constraint_of_the_source_writes_nothing() {
    let d = with_unique_ref("unique-in-source");
    let before = d.snapshot();
    let out = d.cutover(&["replay"]).output();
    support::assert_no_panic(&out);
    assert!(matches!(out.code, Some(1 | 2)), "{out}");
    out.assert_mentions(&["104", "orders", "ref", "rolled back"]);
    d.assert_unchanged(&before, "replay that broke a unique constraint");
}

// Regression test. Until 3092b6f: a replayed insert that breaks a UNIQUE constraint of
// the source is reported as an internal error (exit 2, 'tag 2', 'Error code 2067')
// instead of a CONFLICT (exit 1) naming seq 2.
#[test]
fn a_replayed_insert_that_breaks_a_unique_constraint_is_a_conflict_naming_seq_and_column() {
    let d = with_unique_ref("unique-in-source-conflict");
    let before = d.snapshot();
    let out = d.cutover(&["replay"]).output();
    assert_eq!(out.code, Some(1), "{out}");
    out.assert_mentions(&["seq 2", "'orders'", "[104]", "ref"]);
    d.assert_unchanged(&before, "replay that broke a unique constraint");
}

// --- chains and key changes ---------------------------------------------------------------

/// Replays `d` in batches of `batch` on a copy and returns the source rows.
fn replayed_with_batch(d: &Dir, batch: usize) -> support::Rows {
    let c = d.copy(&format!("batch-{batch}"));
    let json = c.json(&["replay", "--batch", &batch.to_string()], 0);
    assert_eq!(json["verdict"], "pass", "batch {batch}: {json:#}");
    c.run(&["gate"], 0);
    let again = c.json(&["replay", "--batch", &batch.to_string()], 0);
    assert_eq!(again["applied"], 0, "{again:#}");
    c.dump("source.db", "orders")
}

/// Every batch size from 1 to the journal's length gives the same source.
fn same_for_every_batch_size(d: &Dir, entries: usize) -> support::Rows {
    let one = replayed_with_batch(d, 1);
    for batch in 2..=entries + 1 {
        assert_eq!(replayed_with_batch(d, batch), one, "batch {batch}");
    }
    one
}

#[test]
fn an_insert_update_key_change_delete_chain_on_one_key_replays_to_nothing() {
    let d = fenced_after(
        "chain-one-key",
        "INSERT INTO orders VALUES (200, 5, 'active');
         UPDATE orders SET cents = 6 WHERE id = 200;
         UPDATE orders SET id = 201, status = 'closed' WHERE id = 200;
         UPDATE orders SET cents = 7 WHERE id = 201;
         DELETE FROM orders WHERE id = 201;
         INSERT INTO orders VALUES (200, 8, 'closed');
         DELETE FROM orders WHERE id = 200;",
    );
    let plan = d.json(&["replay", "--dry-run"], 0);
    assert_eq!(plan["stale_keys"], 2, "{plan:#}");
    let rows = same_for_every_batch_size(&d, 7);
    assert_eq!(rows, Dir::orders("pristine").dump("source.db", "orders"));
}

#[test]
fn two_keys_swapped_through_a_temporary_key_replay_exactly() {
    let d = fenced_after(
        "swap-keys",
        "UPDATE orders SET id = 999 WHERE id = 101;
         UPDATE orders SET id = 101 WHERE id = 102;
         UPDATE orders SET id = 102 WHERE id = 999;",
    );
    let rows = same_for_every_batch_size(&d, 3);
    assert_eq!(
        rows,
        vec![
            vec![int(101), text("7.50"), text("C")],
            vec![int(102), text("12.50"), text("A")],
            vec![int(103), text("20.00"), text("A")],
        ]
    );
}

#[test]
fn a_key_moved_away_and_back_and_a_three_way_rotation_replay_exactly() {
    let d = fenced_after(
        "rotate-keys",
        "UPDATE orders SET id = 300 WHERE id = 103;
         UPDATE orders SET id = 103 WHERE id = 300;
         UPDATE orders SET id = 0 WHERE id = 101;
         UPDATE orders SET id = 101 WHERE id = 102;
         UPDATE orders SET id = 102 WHERE id = 103;
         UPDATE orders SET id = 103, cents = 1 WHERE id = 0;",
    );
    let rows = same_for_every_batch_size(&d, 6);
    assert_eq!(
        rows,
        vec![
            vec![int(101), text("7.50"), text("C")],
            vec![int(102), text("20.00"), text("A")],
            vec![int(103), text("0.01"), text("A")],
        ]
    );
}

#[test]
fn a_key_change_onto_a_key_the_source_gained_after_the_cutover_is_a_conflict() {
    let d = fenced_after(
        "key-change-taken",
        "UPDATE orders SET id = 500 WHERE id = 101;",
    );
    d.exec(
        "source.db",
        "INSERT INTO orders (id, dollars, status) VALUES (500, '1.00', 'C')",
    );
    let before = d.snapshot();
    let json = d.json(&["replay"], 1);
    assert!(
        json["conflict"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("taken"),
        "{json:#}"
    );
    assert_eq!(json["conflict"]["key"], json!([101]), "{json:#}");
    d.assert_unchanged(&before, "replay of a key change onto a taken key");
}

#[test]
fn deletes_of_rows_the_source_never_had_count_as_in_place_and_change_nothing() {
    // Rows that reached the target without the journal (before it was
    // installed), then deleted after: the source never had them.
    let d = Dir::orders_loaded("delete-never-existed");
    d.exec(
        "target.db",
        "INSERT INTO orders VALUES (900, 1, 'active'), (901, 2, 'closed');",
    );
    d.run(&["journal", "install"], 0);
    d.exec("target.db", "DELETE FROM orders WHERE id IN (900, 901);");
    d.run(&["fence", "on"], 0);
    let rows = d.dump("source.db", "orders");
    let json = d.json(&["replay"], 0);
    assert_eq!(json["applied"], 0, "{json:#}");
    assert_eq!(json["already_in_place"], 2, "{json:#}");
    assert_eq!(d.dump("source.db", "orders"), rows);
    assert_eq!(support::applied_seqs(&d), vec![1, 2]);
}

#[test]
fn a_random_workload_replays_the_same_in_every_batch_size() {
    let d = Dir::new("workload-batch-sizes");
    let entries = support::fenced_orders_workload(&d, 30, 60, 0xBA7C4);
    let one = replayed_with_batch(&d, 1);
    for batch in [2, 3, 7, 13, entries as usize - 1, entries as usize, 1000] {
        assert_eq!(replayed_with_batch(&d, batch), one, "batch {batch}");
    }
}

#[test]
fn a_conflict_shows_each_version_in_source_form_ready_to_type_in() {
    let d = Dir::orders_fenced("conflict-source-form");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '13.00' WHERE id = 101",
    );
    let out = d.run(&["replay"], 1);
    for row in [
        r#"{"dollars":"12.50","id":101,"status":"A"}"#,
        r#"{"dollars":"13.00","id":101,"status":"A"}"#,
        r#"{"dollars":"14.00","id":101,"status":"A"}"#,
    ] {
        assert!(
            out.stdout.contains(row),
            "{row} missing from\n{}",
            out.stdout
        );
    }
}

// --- each conflict says what its evidence shows ------------------------------------

/// The cause a conflict is reported with follows from its three versions:
/// a source row changed, gone, or already there after the cutover; a target
/// value the spec cannot carry back (a word not in the map, a real where
/// integer minor units belong).
#[test]
fn a_conflict_names_the_cause_its_evidence_shows() {
    let cases: &[(&str, &str, &str, &[&str])] = &[
        (
            "cause-changed",
            "UPDATE orders SET cents = 1400 WHERE id = 101;",
            "UPDATE orders SET dollars = '1.00' WHERE id = 101;",
            &["changed in the source after the cutover"],
        ),
        (
            "cause-gone",
            "UPDATE orders SET cents = 1400 WHERE id = 101;",
            "DELETE FROM orders WHERE id = 101;",
            &[
                "no longer has the row",
                "deleted in the source after the cutover",
            ],
        ),
        (
            "cause-already-there",
            "INSERT INTO orders (id, cents, status) VALUES (104, 900, 'active');",
            "INSERT INTO orders (id, dollars, status) VALUES (104, '1.00', 'A');",
            &["already has a row under it"],
        ),
        (
            "cause-map-word",
            "UPDATE orders SET status = 'archived' WHERE id = 101;",
            "",
            &[
                "cannot be written back",
                "add the value to the column's map",
            ],
        ),
        (
            "cause-real-cents",
            "UPDATE orders SET cents = 12.5 WHERE id = 101;",
            "",
            &["cannot be written back", "another kind"],
        ),
    ];
    for (name, target_writes, source_writes, words) in cases {
        // The target's cents column is declared INTEGER: 12.5 stays a REAL.
        let d = fenced_after(name, target_writes);
        if !source_writes.is_empty() {
            d.exec("source.db", source_writes);
        }
        let before = d.snapshot();
        let out = d.run(&["replay"], 1);
        out.assert_mentions(words);
        d.assert_unchanged(&before, name);
        // The dry run says the same before anything is tried.
        let out = d.run(&["replay", "--dry-run"], 1);
        out.assert_mentions(words);
        d.assert_unchanged(&before, name);
    }
}

// --- foreign keys from tables outside the spec ---------------------------------------

/// A table outside the spec refers to `orders` with ON DELETE CASCADE. The
/// application deletes order 102 on the target for good: replay deletes it
/// in the source and nothing else (no cascade), and reports the note left
/// without its order, by table, key and parent (exit 1).
#[test]
fn a_row_outside_the_spec_left_without_its_parent_is_reported_not_cascaded() {
    let d = Dir::orders_loaded("fk-outside-orphan");
    d.exec(
        "source.db",
        "CREATE TABLE order_notes (
             id INTEGER PRIMARY KEY,
             order_id INTEGER REFERENCES orders (id) ON DELETE CASCADE,
             body TEXT);
         INSERT INTO order_notes VALUES (1, 101, 'call first'), (3, 102, 'gift');",
    );
    let d = journaled_and_fenced(d, "DELETE FROM orders WHERE id = 102;");
    let notes = d.dump("source.db", "order_notes");
    let json = d.json(&["replay"], 1);
    let fks = json["foreign_keys"].to_string();
    assert!(
        fks.contains("order_notes") && fks.contains("key 3") && fks.contains("'orders'"),
        "{json:#}"
    );
    assert_eq!(d.dump("source.db", "order_notes"), notes, "a cascade ran");
    // The replay would not hold: rolled back whole, the order still there.
    assert_eq!(
        d.int("source.db", "SELECT count(*) FROM orders WHERE id = 102"),
        1
    );
    assert_eq!(d.applied_entries("source.db"), 0);
    // Failed stays failed: a rerun with nothing fixed fails again.
    d.json(&["replay"], 1);
    d.run(&["status"], 1);
    d.run(&["fence", "off"], 2);
    // Accepted, it commits with the note left as it is, and says so.
    let json = d.json(&["replay", "--accept-findings"], 0);
    assert!(
        json["accepted"].to_string().contains("order_notes"),
        "{json:#}"
    );
    assert_eq!(d.dump("source.db", "order_notes"), notes, "a cascade ran");
    assert_eq!(
        d.int("source.db", "SELECT count(*) FROM orders WHERE id = 102"),
        0
    );
    let status = d.run(&["status"], 0);
    status.assert_mentions(&["passed with accepted findings"]);
}
