//! `cutover sync`: incremental copy from CSV snapshots and SQLite tables,
//! with the cursor, late rows, drift and quality checks. Each test drives the
//! binary in a temporary folder and checks the target's rows and cursor.

mod support;

use serde_json::{Value as Json, json};
use support::{
    Column, Dir, Layout, Output, Spec, Table, assert_golden, cutover, each_layout, int, repo_path,
    text,
};

const SPEC: &str = include_str!("../fixtures/customers/spec.toml");
const TARGET: &str = include_str!("../fixtures/customers/target.sql");
const SNAP1: &str = include_str!("../fixtures/customers/snapshot-1.csv");
const SNAP2: &str = include_str!("../fixtures/customers/snapshot-2.csv");

/// The customers fixture: a CSV source (snapshots 1 and 2 in the folder)
/// and an empty target.
fn customers(name: &str) -> Dir {
    let d = Dir::new(name);
    d.spec(SPEC);
    d.create_db("target.db", TARGET);
    d.write("snapshot-1.csv", SNAP1);
    d.write("snapshot-2.csv", SNAP2);
    d
}

/// The customers fixture with its target where `layout` puts it (the
/// source is the CSV snapshot whatever the layout), its spec built as
/// `fixtures/customers/spec.toml` has it.
fn customers_on(layout: Layout, name: &str) -> Dir {
    let d = Dir::on(layout, name);
    d.spec(
        &Spec::new().source_url("csv://snapshot-1.csv").table(
            Table::new("customers")
                .key(["id"])
                .watermark("src_updated")
                .copy("src_updated")
                .copy("name")
                .column(Column::new("country").pattern("^[A-Z]{2}$")),
        ),
    );
    d.create_db("target.db", TARGET);
    d.write("snapshot-1.csv", SNAP1);
    d.write("snapshot-2.csv", SNAP2);
    d
}

/// `cutover --format json sync ARGS --spec spec.toml`, whatever its exit code.
fn sync(d: &Dir, args: &[&str]) -> Output {
    let mut all = vec!["sync"];
    all.extend(args);
    d.cutover_json(&all).output()
}

/// The same, which must exit with `code`.
#[track_caller]
fn synced(d: &Dir, args: &[&str], code: i32) -> Output {
    let out = sync(d, args);
    assert_eq!(out.code, Some(code), "{out}");
    out
}

/// The customers in the target.
fn count(d: &Dir) -> i64 {
    d.count("target.db", "customers")
}

/// One value of a query on the target.
fn value(d: &Dir, sql: &str) -> rusqlite::types::Value {
    d.query("target.db", sql)[0][0].clone()
}

fn table(r: &Output) -> Json {
    r.json()["tables"][0].clone()
}

#[test]
fn first_sync_applies_all_rows_with_exact_values() {
    let d = customers("first-sync");
    let r = synced(&d, &["--snapshot", "snapshot-1.csv"], 0);
    assert_eq!(table(&r)["changed"], 20);
    assert_eq!(count(&d), 20);
    // Quoted fields with a comma, quotes and a newline arrive exactly.
    assert_eq!(
        value(&d, "SELECT name FROM customers WHERE id = 5"),
        text("Liskov, Barbara \"Babs\"")
    );
    assert_eq!(
        value(&d, "SELECT name FROM customers WHERE id = 10"),
        text("Ken\nThompson")
    );
    // The id column is an integer column: the CSV text became an integer.
    assert_eq!(
        value(&d, "SELECT typeof(id) FROM customers WHERE id = 1"),
        text("integer")
    );
}

fn a_second_identical_sync_changes_nothing(layout: Layout) {
    let d = customers_on(layout, "second-sync");
    synced(&d, &["--snapshot", "snapshot-1.csv"], 0);
    let before = d.image("target.db");
    let r = synced(&d, &["--snapshot", "snapshot-1.csv"], 0);
    assert_eq!(table(&r)["changed"], 0);
    d.assert_db_unchanged("target.db", &before, &"target and cursor unchanged");
}
each_layout!(a_second_identical_sync_changes_nothing: [sqlite, sqlite_to_pg, sqlite_to_my]);

fn rows_sharing_the_last_watermark_all_arrive_even_one_batch_at_a_time(layout: Layout) {
    let d = customers_on(layout, "shared-watermark");
    // Ids 19 and 20 share the last watermark; with batches of one row the
    // cursor stops between them.
    synced(&d, &["--snapshot", "snapshot-1.csv", "--batch", "1"], 0);
    assert_eq!(count(&d), 20);
    // A later snapshot adds a row at that same last watermark, with a higher key.
    let mut snap = SNAP1.to_string();
    snap.push_str("25,2026-01-10T09:00:00Z,Same Mark,US\n");
    d.write("s.csv", snap);
    let r = synced(&d, &["--snapshot", "s.csv"], 0);
    assert_eq!(table(&r)["changed"], 1);
    assert_eq!(count(&d), 21);
}
each_layout!(rows_sharing_the_last_watermark_all_arrive_even_one_batch_at_a_time: [sqlite, sqlite_to_pg, sqlite_to_my]);

#[test]
fn a_late_row_is_reported_then_picked_up_with_lookback() {
    // SQLite only: snapshot 2 adds a column `--evolve` must add to the
    // target, and a CSV column has no declared type, which a PostgreSQL
    // target refuses to guess (exit 2, "a PostgreSQL column needs a type").
    let d = customers("late-row");
    synced(&d, &["--snapshot", "snapshot-1.csv"], 0);
    // Late rows are a finding: exit 1.
    let r = synced(&d, &["--snapshot", "snapshot-2.csv", "--evolve"], 1);
    let t = table(&r);
    assert_eq!(t["late"], 1);
    assert_eq!(t["late_keys"][0], json!([23]));
    assert!(
        d.query("target.db", "SELECT id FROM customers WHERE id = 23")
            .is_empty(),
        "a late row is not applied silently"
    );
    let r = synced(
        &d,
        &["--snapshot", "snapshot-2.csv", "--lookback", "30d"],
        0,
    );
    assert_eq!(table(&r)["changed"], 1);
    assert_eq!(
        value(&d, "SELECT name FROM customers WHERE id = 23"),
        text("Anita Borg")
    );
    // The lookback did not move the cursor back.
    assert_eq!(
        table(&r)["cursor_after"]["watermark"],
        "2026-01-14T12:00:00Z"
    );
}

#[test]
fn drift_stops_the_run_before_any_write_and_prints_the_spec_lines() {
    let d = customers("drift");
    synced(&d, &["--snapshot", "snapshot-1.csv"], 0);
    let before = d.snapshot();
    let r = synced(&d, &["--snapshot", "snapshot-2.csv"], 1);
    assert_eq!(table(&r)["drift"]["new"], json!(["email"]));
    d.assert_unchanged(&before, "the target file is byte-for-byte unchanged");
    let out = d
        .cutover(&["sync", "--snapshot", "snapshot-2.csv"])
        .output();
    assert!(
        out.stdout.contains("[[tables.columns]]") && out.stdout.contains("source = \"email\""),
        "{out}"
    );
}

#[test]
fn a_missing_mapped_column_is_drift_that_evolve_does_not_paper_over() {
    let d = customers("missing-column");
    d.write("s.csv", "id,src_updated,name\n1,2026-01-01T09:00:00Z,Ada\n");
    let r = synced(&d, &["--snapshot", "s.csv", "--evolve"], 1);
    assert_eq!(table(&r)["drift"]["missing"], json!(["country"]));
    assert_eq!(count(&d), 0);
}

#[test]
fn evolve_adds_the_new_column_to_the_target_and_carries_it() {
    let d = customers("evolve");
    synced(&d, &["--snapshot", "snapshot-1.csv"], 0);
    sync(&d, &["--snapshot", "snapshot-2.csv", "--evolve"]);
    let cols = d.query(
        "target.db",
        "SELECT name FROM pragma_table_info('customers') ORDER BY cid",
    );
    assert_eq!(cols.last().expect("columns")[0], text("email"));
    assert_eq!(
        value(&d, "SELECT email FROM customers WHERE id = 21"),
        text("sophie@example.org")
    );
    assert_eq!(value(&d, "SELECT count(*) FROM _cutover_evolved"), int(1));
}

fn quality_refusal(layout: Layout, extra_rows: &str, what: &str) {
    let d = customers_on(layout, "quality");
    synced(&d, &["--snapshot", "snapshot-1.csv"], 0);
    let before = d.image("target.db");
    let mut snap = SNAP1.to_string();
    snap.push_str("30,2026-02-01T09:00:00Z,Fine Row,US\n");
    snap.push_str(extra_rows);
    d.write("bad.csv", snap);
    let r = sync(&d, &["--snapshot", "bad.csv"]);
    assert_eq!(r.code, Some(1), "{what}: {r}");
    d.assert_db_unchanged(
        "target.db",
        &before,
        &format!("{what}: target and cursor must be unchanged (the fine row too)"),
    );
}

fn quality_null_key_fails_the_batch_and_changes_nothing(layout: Layout) {
    quality_refusal(layout, ",2026-02-01T09:00:00Z,No Key,US\n", "null key");
}
each_layout!(quality_null_key_fails_the_batch_and_changes_nothing: [sqlite, sqlite_to_pg, sqlite_to_my]);

fn quality_duplicate_key_fails_the_batch_and_changes_nothing(layout: Layout) {
    quality_refusal(
        layout,
        "31,2026-02-01T09:00:00Z,One,US\n31,2026-02-02T09:00:00Z,Two,US\n",
        "duplicate key",
    );
}
each_layout!(quality_duplicate_key_fails_the_batch_and_changes_nothing: [sqlite, sqlite_to_pg, sqlite_to_my]);

fn quality_empty_watermark_fails_the_batch_and_changes_nothing(layout: Layout) {
    quality_refusal(layout, "32,,Empty Mark,US\n", "empty watermark");
}
each_layout!(quality_empty_watermark_fails_the_batch_and_changes_nothing: [sqlite, sqlite_to_pg, sqlite_to_my]);

fn quality_mixed_width_or_non_iso_watermarks_fail_the_batch(layout: Layout) {
    quality_refusal(layout, "33,2026-2-1T09:00:00Z,Short,US\n", "mixed widths");
    quality_refusal(layout, "34,yesterday,Words,US\n", "non-ISO text");
}
each_layout!(quality_mixed_width_or_non_iso_watermarks_fail_the_batch: [sqlite, sqlite_to_pg, sqlite_to_my]);

fn quality_a_row_the_transform_refuses_fails_the_batch(layout: Layout) {
    quality_refusal(
        layout,
        "35,2026-02-01T09:00:00Z,Lower Country,us\n",
        "country fails its pattern",
    );
}
each_layout!(quality_a_row_the_transform_refuses_fails_the_batch: [sqlite, sqlite_to_pg, sqlite_to_my]);

#[test]
fn csv_a_ragged_row_is_refused_naming_the_line() {
    let d = customers("ragged");
    d.write("s.csv", "id,src_updated,name,country\n1,2026-01-01T09:00:00Z,Ada,GB\n2,2026-01-01T09:00:00Z,Grace\n");
    let r = synced(&d, &["--snapshot", "s.csv"], 2);
    assert!(
        r.stderr.contains("line 3") && r.stderr.contains("3 fields"),
        "{r}"
    );
    assert_eq!(count(&d), 0);
}

#[test]
fn csv_a_header_with_a_duplicate_or_empty_name_is_refused() {
    let d = customers("bad-header");
    d.write("dup.csv", "id,src_updated,name,name\n");
    let r = synced(&d, &["--snapshot", "dup.csv"], 2);
    assert!(r.stderr.contains("'name' appears twice"), "{r}");
    d.write("empty.csv", "id,,name,country\n");
    let r = synced(&d, &["--snapshot", "empty.csv"], 2);
    assert!(r.stderr.contains("empty name"), "{r}");
}

#[test]
fn csv_a_byte_order_mark_is_accepted() {
    let d = customers("bom");
    assert!(
        SNAP1.as_bytes().starts_with(b"\xef\xbb\xbf"),
        "the fixture starts with a BOM"
    );
    synced(&d, &["--snapshot", "snapshot-1.csv"], 0);
}

#[test]
fn csv_invalid_utf8_is_refused_naming_the_line() {
    let d = customers("bad-utf8");
    d.write(
        "s.csv",
        b"id,src_updated,name,country\n1,2026-01-01T09:00:00Z,Ad\xff,GB\n",
    );
    let r = synced(&d, &["--snapshot", "s.csv"], 2);
    assert!(
        r.stderr.contains("line 2") && r.stderr.contains("UTF-8"),
        "{r}"
    );
    assert_eq!(count(&d), 0);
}

#[test]
fn csv_an_empty_file_is_refused() {
    let d = customers("empty-csv");
    d.write("s.csv", "");
    let r = synced(&d, &["--snapshot", "s.csv"], 2);
    assert!(r.stderr.contains("empty"), "{r}");
}

fn a_missing_snapshot_writes_nothing_and_keeps_the_cursor(layout: Layout) {
    let d = customers_on(layout, "missing-snapshot");
    synced(&d, &["--snapshot", "snapshot-1.csv"], 0);
    let before = d.snapshot();
    let r = synced(&d, &["--snapshot", "nope.csv"], 2);
    assert!(r.stderr.contains("nope.csv"), "{r}");
    d.assert_unchanged(&before, "a sync of a missing snapshot");
}
each_layout!(a_missing_snapshot_writes_nothing_and_keeps_the_cursor: [sqlite, sqlite_to_pg, sqlite_to_my]);

/// A spec for `items(id, v, price)` in `s.db` → `items(id, v, cents)` in
/// `t.db`, watermark `v`.
fn items_spec() -> Spec {
    Spec::new().source("s.db").target("t.db").table(
        Table::new("items")
            .key(["id"])
            .watermark("v")
            .copy("v")
            .decimal("price", "cents", 2),
    )
}

/// A folder with `items_spec`, the source built by `source_sql` and the
/// empty target.
fn items(name: &str, source_sql: &str) -> Dir {
    let d = Dir::new(name);
    d.spec(&items_spec());
    d.create_db("s.db", source_sql);
    d.create_db(
        "t.db",
        "CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, cents INTEGER);",
    );
    d
}

/// A table source (SQLite or PostgreSQL) with an integer watermark: the
/// first sync copies every row, a later one only the rows past the cursor
/// (a newer version of one, a new one), a third nothing; the target equals
/// the source's rows carried by hand after each.
fn a_table_source_with_an_integer_watermark_syncs_incrementally(layout: Layout) {
    let d = Dir::on(layout, "table-source");
    d.spec(&items_spec());
    d.create_db(
        "s.db",
        "CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, price TEXT); INSERT INTO items VALUES (1, 10, '1.00'), (2, 11, '2.50');",
    );
    d.create_db(
        "t.db",
        "CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, cents INTEGER);",
    );
    let j = d.json(&["sync"], 0);
    assert_eq!(j["tables"][0]["changed"], 2, "{j:#}");
    assert_eq!(
        d.dump("t.db", "items"),
        vec![
            vec![int(1), int(10), int(100)],
            vec![int(2), int(11), int(250)],
        ]
    );
    // A newer version of item 1, and a new item.
    d.exec("s.db", "UPDATE items SET v = 12, price = '1.25' WHERE id = 1; INSERT INTO items VALUES (3, 13, '3.00');");
    let j = d.json(&["sync"], 0);
    assert_eq!(j["tables"][0]["changed"], 2, "{j:#}");
    let synced = vec![
        vec![int(1), int(12), int(125)],
        vec![int(2), int(11), int(250)],
        vec![int(3), int(13), int(300)],
    ];
    assert_eq!(d.dump("t.db", "items"), synced);
    // Nothing past the cursor: nothing changes.
    let before = d.image("t.db");
    let j = d.json(&["sync"], 0);
    assert_eq!(j["tables"][0]["changed"], 0, "{j:#}");
    d.assert_db_unchanged("t.db", &before, &"a sync with nothing past the cursor");
    // A row changed without moving its watermark is behind the cursor: a
    // late row, reported (exit 1) and not applied.
    d.exec("s.db", "UPDATE items SET price = '9.99' WHERE id = 2");
    let j = d.json(&["sync"], 1);
    assert_eq!(j["tables"][0]["late"], 1, "{j:#}");
    assert_eq!(j["tables"][0]["late_keys"], json!([[2]]), "{j:#}");
    d.assert_db_unchanged("t.db", &before, &"a sync that found a late row");
}
each_layout!(a_table_source_with_an_integer_watermark_syncs_incrementally);

#[test]
fn drill_customers_runs_every_step_and_its_output_is_pinned() {
    let out = cutover(&["drill", "--scenario", "customers"]).expect(0);
    assert_golden(
        &repo_path("fixtures/customers/drill.golden"),
        &out.stdout,
        "sync",
    );
}

#[test]
fn a_column_whose_declared_type_changed_is_drift_before_any_write() {
    let d = items(
        "retyped",
        "CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, price TEXT); INSERT INTO items VALUES (1, 10, '1.00');",
    );
    d.cutover_json(&["sync"]).expect(0);
    // The source is rebuilt with price as REAL: the next sync must stop.
    d.exec(
        "s.db",
        "DROP TABLE items; CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, price REAL); INSERT INTO items VALUES (1, 10, 1.0), (2, 11, 2.5);",
    );
    let before = d.snapshot();
    let j = d.json(&["sync"], 1);
    assert_eq!(
        j["tables"][0]["drift"]["retyped"],
        json!(["price: TEXT → REAL"]),
        "{j:#}"
    );
    d.assert_unchanged(&before, "nothing written");
}

#[test]
fn quality_watermarks_in_two_zones_of_one_length_fail_the_batch() {
    // "+02:00" and "-05:00" have one length but sort as text in another order
    // than as times: one zone per table.
    let d = customers("zones");
    d.write(
        "zones.csv",
        "id,src_updated,name,country\n1,2026-01-01T09:00:00+02:00,Ada,GB\n2,2026-01-01T08:00:00-05:00,Grace,US\n",
    );
    let r = synced(&d, &["--snapshot", "zones.csv"], 1);
    assert_eq!(table(&r)["quality"]["bad_watermarks"], 1);
    assert_eq!(count(&d), 0);
}

#[test]
fn quality_a_duplicate_key_across_a_block_boundary_is_found() {
    // No primary key in the source: id 1024 ends the first block of 1,024
    // rows read and starts the second.
    let d = items(
        "block-boundary",
        "CREATE TABLE items (id INTEGER, v INTEGER, price TEXT);
         WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1500)
         INSERT INTO items SELECT i, i, '1.00' FROM c;
         INSERT INTO items VALUES (1024, 5000, '2.00');",
    );
    let j = d.json(&["sync"], 1);
    assert_eq!(j["tables"][0]["quality"]["duplicate_keys"], 1, "{j:#}");
    assert_eq!(j["tables"][0]["quality"]["rows"], 1501);
}

/// Sync of many rows past the cursor, more than several reads of a
/// PostgreSQL source's stream and several of sync's batches, with the
/// source's rows written by its own client: every row arrives exactly, and
/// the gate passes. (Reading a PostgreSQL source used to hand the rows out
/// inside the client's runtime, so writing a batch from there stopped sync.)
fn sync_carries_many_rows_past_the_cursor(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "sync-many");
    // Thirty thousand ids from five digits, in SQL every engine takes.
    let digit = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                 UNION ALL SELECT 8 UNION ALL SELECT 9)";
    d.client(
        "source.db",
        &format!(
            "INSERT INTO orders (id, dollars, status) \
             SELECT 1000 + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d, '1.25', 'A' \
             FROM {digit} a, {digit} b, {digit} c, {digit} e, {digit} f WHERE f.d < 3;"
        ),
    );
    d.run(&["sync", "--batch", "5000"], 0);
    assert_eq!(d.dump("target.db", "orders").len(), 30_003);
    d.run(&["gate"], 0);
}
each_layout!(sync_carries_many_rows_past_the_cursor: [sqlite, pg_to_pg, pg_to_sqlite, pg_to_my, my_to_pg]);
