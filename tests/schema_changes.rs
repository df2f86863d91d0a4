//! The target's schema changes after the switch (RUNBOOK B1a): a column
//! renamed, added, dropped, a table rebuilt. Each after `journal install`,
//! then the application's writes, `fence on` and the replay: the source
//! ends equal to an oracle the test computes on its own, from the writes it
//! made, never from what cutover read.

mod support;

use rusqlite::types::Value;
use support::{Column, Dir, Layout, Spec, Table, each_layout};

/// The running example with `cents` renamed to `amount_cents` in the
/// target, the spec naming the column it was.
fn renamed_spec() -> Spec {
    Spec::new().table(
        Table::new("orders")
            .key(["id"])
            .column(
                Column::new("dollars")
                    .target("amount_cents")
                    .was(["cents"])
                    .decimal(2),
            )
            .column(
                Column::new("status")
                    .target("status")
                    .map([("A", "active"), ("C", "closed")]),
            ),
    )
}

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

/// The source's orders as the test expects them: `(id, dollars, status)`.
fn oracle(rows: &[(i64, &str, &str)]) -> Vec<Vec<Value>> {
    rows.iter()
        .map(|(id, d, s)| vec![Value::Integer(*id), text(d), text(s)])
        .collect()
}

/// A column renamed after `journal install`: `status` says how to name it
/// in the spec (`target` the new name, `was` the old); once the journal is
/// installed again under that spec, entries recorded under either name are
/// replayed, and the source ends as the test's oracle, the reconciliation
/// clean (exit 0).
fn a_renamed_column_round_trips(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "renamed-column");
    d.run(&["journal", "install"], 0);
    // Recorded under the name `cents`.
    d.client(
        "target.db",
        "UPDATE orders SET cents = 1400 WHERE id = 101;
         INSERT INTO orders (id, cents, status) VALUES (104, 900, 'active');
         DELETE FROM orders WHERE id = 103;",
    );
    d.client(
        "target.db",
        "ALTER TABLE orders RENAME COLUMN cents TO amount_cents",
    );
    let st = d.run(&["status"], 1);
    assert!(
        st.all()
            .contains("set target = \"amount_cents\" and was = [\"cents\"]"),
        "{layout}: {st}"
    );

    d.spec(&renamed_spec());
    d.run(&["journal", "install"], 0);
    // Recorded under the name `amount_cents`.
    d.client(
        "target.db",
        "UPDATE orders SET amount_cents = 2500 WHERE id = 104;
         INSERT INTO orders (id, amount_cents, status) VALUES (105, 1, 'closed');
         UPDATE orders SET status = 'closed' WHERE id = 101;",
    );
    d.run(&["fence", "on"], 0);
    let rep = d.json(&["replay"], 0);
    assert_eq!(rep["applied"], 6, "{layout}: {rep}");
    assert_eq!(
        d.dump("source.db", "orders"),
        oracle(&[
            (101, "14.00", "C"),
            (102, "7.50", "C"),
            (104, "25.00", "A"),
            (105, "0.01", "C"),
        ]),
        "{layout}"
    );
}
each_layout!(a_renamed_column_round_trips: [sqlite, sqlite_to_pg, pg_to_pg, sqlite_to_my, my_to_my]);

/// Without `was`, entries recorded under the old name are refused before
/// anything is written (exit 2), and the message names the way: the new
/// name as target, the old one in `was`.
fn a_rename_without_was_is_refused_with_the_way(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "rename-without-was");
    d.run(&["journal", "install"], 0);
    d.client("target.db", "UPDATE orders SET cents = 1400 WHERE id = 101");
    d.client(
        "target.db",
        "ALTER TABLE orders RENAME COLUMN cents TO amount_cents",
    );
    d.spec(
        &Spec::new().table(Table::orders().edit_column("dollars", |c| c.target("amount_cents"))),
    );
    d.run(&["journal", "install"], 0);
    d.run(&["fence", "on"], 0);
    let before = d.dump("source.db", "orders");
    let out = d.cutover(&["replay"]).expect(2);
    assert!(
        out.stderr
            .contains("recorded the columns id, cents, status")
            && out.stderr.contains("was = ["),
        "{layout}: {out}"
    );
    assert_eq!(d.dump("source.db", "orders"), before, "{layout}");
}
each_layout!(a_rename_without_was_is_refused_with_the_way: [sqlite, pg_to_pg, my_to_my]);

/// A column added to the target after `journal install`, and then to the
/// source and the spec while the fence is on: the fence's fingerprint covers
/// the target's rows and definitions, not the spec's column list, so the
/// fence stays intact (`fence status` exit 0) and nothing is called a breach.
fn a_spec_change_is_not_a_breach(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "spec-change");
    d.run(&["journal", "install"], 0);
    d.client("target.db", "ALTER TABLE orders ADD COLUMN note TEXT");
    d.client(
        "target.db",
        "UPDATE orders SET cents = 1400 WHERE id = 101;
         UPDATE orders SET note = 'gift' WHERE id = 102;",
    );
    let on = d.run(&["fence", "on"], 0);
    assert!(on.all().contains("note"), "{layout}: the drift: {on}");
    d.exec("source.db", "ALTER TABLE orders ADD COLUMN note TEXT");
    d.spec(&Spec::new().table(Table::orders().column(Column::new("note"))));
    let st = d.json(&["fence", "status"], 0);
    assert_eq!(st["intact"], true, "{layout}: {st}");
    assert!(st.get("breach").is_none(), "{layout}: {st}");

    // The replay does not reconcile: the note written before the journal
    // knew the column is reported as not journaled, by key, and nothing is
    // written (all or nothing: the source is as loaded).
    let rep = d.json(&["replay"], 1);
    assert!(rep.get("breach").is_none(), "{layout}: {rep}");
    let unjournaled = rep["unjournaled"].to_string();
    assert!(
        unjournaled.contains("'note'") && unjournaled.contains("102"),
        "{layout}: {rep}"
    );
    assert_eq!(
        d.dump("source.db", "orders"),
        vec![
            vec![Value::Integer(101), text("12.50"), text("A"), Value::Null],
            vec![Value::Integer(102), text("7.50"), text("C"), Value::Null],
            vec![Value::Integer(103), text("20.00"), text("A"), Value::Null],
        ],
        "{layout}"
    );
    assert_eq!(d.applied_entries("source.db"), 0, "{layout}");
    // The operator copies the value across; the replay then applies the
    // journal and passes.
    d.exec(
        "source.db",
        "UPDATE orders SET note = 'gift' WHERE id = 102",
    );
    let rep = d.json(&["replay"], 0);
    assert_eq!(
        rep["applied"].as_u64().unwrap_or(0) + rep["already_in_place"].as_u64().unwrap_or(0),
        2,
        "{layout}: {rep}"
    );
    assert_eq!(
        d.dump("source.db", "orders"),
        vec![
            vec![Value::Integer(101), text("14.00"), text("A"), Value::Null],
            vec![Value::Integer(102), text("7.50"), text("C"), text("gift")],
            vec![Value::Integer(103), text("20.00"), text("A"), Value::Null],
        ],
        "{layout}"
    );
}
each_layout!(a_spec_change_is_not_a_breach: [sqlite, pg_to_pg, my_to_my]);

/// A fence set in format 2 (by the previous version: the rows read as the
/// spec maps them, the tag `cutover-fence-2`) still verifies, byte for byte
/// as docs/journal.md gives it; the replay goes through.
#[test]
fn a_format_2_fence_still_verifies() {
    let d = Dir::orders_fenced("format-2");
    let (code, out) = support::python(
        d.path(),
        r#"
import hashlib, json, sqlite3, struct
con = sqlite3.connect("target.db", isolation_level=None)
boundary, rows, tables, parts, fenced_at = con.execute(
    "SELECT boundary, journal_rows, tables, parts, fenced_at FROM _cutover_fence").fetchone()
parts = json.loads(parts)
assert parts["version"] == 3
parts["version"] = 2
h = hashlib.sha256()
def text(s):
    b = s.encode()
    h.update(struct.pack("<Q", len(b)))
    h.update(b)
text("cutover-fence-2")
for name, sql in sorted(map(tuple, parts["schema"])):
    text(name); text(sql)
for table, digest in parts["content"]:
    text(table); text(digest)
h.update(struct.pack("<q", parts["journal_rows"]))
h.update(struct.pack("<q", parts["max_seq"]))
text(parts["digest"])
h.update(struct.pack("<q", boundary))
h.update(struct.pack("<q", rows))
text(tables)
text(fenced_at)
guards = con.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = '_cutover_fence'").fetchall()
con.execute("BEGIN")
for name, _ in guards:
    con.execute('DROP TRIGGER "%s"' % name.replace('"', '""'))
con.execute("UPDATE _cutover_fence SET parts = ?, fingerprint = ?", (json.dumps(parts), h.hexdigest()))
for _, sql in guards:
    con.execute(sql)
con.execute("COMMIT")
src = sqlite3.connect("source.db", isolation_level=None)
src.execute("DELETE FROM _cutover_fences")
print("ok")
"#,
        &[],
    );
    assert_eq!(code, 0, "{out}");
    let st = d.json(&["fence", "status"], 0);
    assert_eq!(st["intact"], true, "{st}");
    assert_eq!(st["format"], 2, "{st}");
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    assert_eq!(d.applied_entries("source.db"), 3);
}

/// A column added after `journal install`, carried into the source and the
/// spec, and the journal installed again before the fence: entries after
/// the reinstall carry the column and are replayed with it; values written
/// before it are reported as not journaled, by key (exit 1), and the source
/// otherwise equals the oracle. Once copied by hand, the replay passes.
fn an_added_column_is_journaled_after_the_reinstall(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "added-column");
    d.run(&["journal", "install"], 0);
    d.client("target.db", "ALTER TABLE orders ADD COLUMN note TEXT");
    d.client(
        "target.db",
        "UPDATE orders SET cents = 1400 WHERE id = 101;
         UPDATE orders SET note = 'gift' WHERE id = 102;
         INSERT INTO orders (id, cents, status, note) VALUES (104, 900, 'active', 'new');",
    );
    let st = d.run(&["status"], 1);
    assert!(st.all().contains("note"), "{layout}: {st}");
    d.exec("source.db", "ALTER TABLE orders ADD COLUMN note TEXT");
    d.spec(&Spec::new().table(Table::orders().column(Column::new("note"))));
    d.run(&["journal", "install"], 0);
    d.client(
        "target.db",
        "UPDATE orders SET note = 'rush' WHERE id = 101;
         INSERT INTO orders (id, cents, status, note) VALUES (105, 1, 'closed', 'five');
         DELETE FROM orders WHERE id = 103;",
    );
    d.run(&["status"], 0);
    d.run(&["fence", "on"], 0);
    let before = d.dump("source.db", "orders");
    let rep = d.json(&["replay"], 1);
    // All or nothing: every entry was applied, then rolled back with the
    // replay that did not reconcile.
    assert_eq!(
        (rep["applied"].as_u64(), rep["rolled_back"].as_u64()),
        (Some(0), Some(6)),
        "{layout}: {rep}"
    );
    assert_eq!(d.dump("source.db", "orders"), before, "{layout}");
    let unjournaled = rep["unjournaled"].to_string();
    assert!(
        unjournaled.contains("102") && unjournaled.contains("104"),
        "{layout}: {rep}"
    );
    assert!(!unjournaled.contains("105"), "{layout}: {rep}");
    let row = |id: i64, d: &str, s: &str, n: Option<&str>| {
        vec![
            Value::Integer(id),
            text(d),
            text(s),
            n.map_or(Value::Null, text),
        ]
    };
    // The operator copies the values the journal never saw: 102's into the
    // source row, 104's by inserting the row the journal will find already
    // in place (a key the journal inserts, with the value by hand).
    d.exec(
        "source.db",
        "UPDATE orders SET note = 'gift' WHERE id = 102;
         INSERT INTO orders (id, dollars, status, note) VALUES (104, '9.00', 'A', 'new');",
    );
    d.run(&["replay"], 0);
    assert_eq!(
        d.dump("source.db", "orders"),
        vec![
            row(101, "14.00", "A", Some("rush")),
            row(102, "7.50", "C", Some("gift")),
            row(104, "9.00", "A", Some("new")),
            row(105, "0.01", "C", Some("five")),
        ],
        "{layout}"
    );
}
each_layout!(an_added_column_is_journaled_after_the_reinstall: [sqlite, sqlite_to_pg, pg_to_pg, sqlite_to_my, my_to_my]);

const MEMO_SOURCE: &str = "
CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL, memo TEXT);
INSERT INTO orders (id, dollars, status, memo) VALUES
    (101, '12.50', 'A', 'a'), (102, '7.50', 'C', 'b'), (103, '20.00', 'A', 'c');
";
const MEMO_TARGET: &str = "
CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL, memo TEXT);
";

/// A column the spec maps, dropped by the application after `journal
/// install`. On SQLite the drop fails while the journal's triggers name the
/// column, so the spec changes first (the source column ignored, the target
/// column left to the target) and the journal is installed again; on
/// PostgreSQL the drop goes through, writes fail until the journal is
/// installed again without it. Either way the replay passes and the source
/// equals the oracle: the dropped column keeps the source's values, a row
/// new to the source has none.
fn a_dropped_column_in_the_sequence_that_works(layout: Layout) {
    let spec = Spec::new().table(Table::orders().column(Column::new("memo")));
    let d = Dir::with_on(layout, "dropped-column", &spec, MEMO_SOURCE, MEMO_TARGET);
    d.run(&["load"], 0);
    let install = d.run(&["journal", "install"], 0);
    assert!(install.all().contains("DROP COLUMN"), "{layout}: {install}");
    d.client(
        "target.db",
        "UPDATE orders SET cents = 1400, memo = 'm1' WHERE id = 101;
         INSERT INTO orders (id, cents, status, memo) VALUES (104, 900, 'active', 'm4');",
    );
    let dropped = Spec::new().table(Table::orders().ignore(["memo"]));
    if d.engine_of("target.db") == "sqlite" {
        let refused = d
            .try_client("target.db", "ALTER TABLE orders DROP COLUMN memo")
            .expect_err("SQLite refuses the drop while the triggers name the column");
        assert!(refused.contains("no such column"), "{layout}: {refused}");
        // The spec first: the column no longer carried, then the drop.
        d.spec(
            &Spec::new().table(
                Table::orders()
                    .ignore(["memo"])
                    .column(Column::target_default("memo")),
            ),
        );
        d.run(&["journal", "install"], 0);
        d.client("target.db", "ALTER TABLE orders DROP COLUMN memo");
        d.spec(&dropped);
    } else {
        d.client("target.db", "ALTER TABLE orders DROP COLUMN memo");
        assert!(
            d.try_client("target.db", "UPDATE orders SET cents = 1 WHERE id = 102")
                .is_err(),
            "{layout}: a write after the drop, before the reinstall"
        );
        d.spec(&dropped);
        d.run(&["journal", "install"], 0);
    }
    d.run(&["status"], 0);
    d.client(
        "target.db",
        "UPDATE orders SET cents = 2500 WHERE id = 104;
         DELETE FROM orders WHERE id = 103;
         INSERT INTO orders (id, cents, status) VALUES (105, 1, 'closed');",
    );
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    let row = |id: i64, d: &str, s: &str, m: Option<&str>| {
        vec![
            Value::Integer(id),
            text(d),
            text(s),
            m.map_or(Value::Null, text),
        ]
    };
    assert_eq!(
        d.dump("source.db", "orders"),
        vec![
            row(101, "14.00", "A", Some("a")),
            row(102, "7.50", "C", Some("b")),
            row(104, "25.00", "A", None),
            row(105, "0.01", "C", None),
        ],
        "{layout}"
    );
}
each_layout!(a_dropped_column_in_the_sequence_that_works: [sqlite, sqlite_to_pg, pg_to_pg, sqlite_to_my, my_to_my]);

const REBUILD: &str = "
CREATE TABLE orders_new (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL);
INSERT INTO orders_new (id, cents, status) SELECT id, cents, status FROM orders;
DROP TABLE orders;
ALTER TABLE orders_new RENAME TO orders;
";

/// A table rebuilt as Django and Alembic do it on SQLite (create new, copy,
/// drop, rename) after `journal install`: the journal's triggers go with
/// the old table, `status` raises the alarm (exit 1), `journal install`
/// puts them back, and the entries recorded before the rebuild replay as
/// they are: the source equals the oracle.
fn a_rebuilt_table_is_journaled_again_after_the_install(layout: Layout) {
    let d = Dir::orders_after_writes_on(layout, "rebuilt-table");
    d.client("target.db", REBUILD);
    let st = d.run(&["status"], 1);
    assert!(
        st.all().contains("journal triggers missing"),
        "{layout}: {st}"
    );
    d.run(&["journal", "install"], 0);
    d.run(&["status"], 0);
    d.client(
        "target.db",
        "UPDATE orders SET cents = 2500 WHERE id = 104;
         INSERT INTO orders (id, cents, status) VALUES (105, 1, 'closed');",
    );
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    assert_eq!(
        d.dump("source.db", "orders"),
        oracle(&[
            (101, "14.00", "A"),
            (102, "7.50", "C"),
            (104, "25.00", "A"),
            (105, "0.01", "C"),
        ]),
        "{layout}"
    );
}
// Not on a MySQL target: a rebuilt table has a new InnoDB table id, which
// the journal cannot tell from a TRUNCATE (which fires no trigger), so
// `journal install` refuses there until the journal is removed and the
// table loaded again (tests/mysql_journal.rs).
each_layout!(a_rebuilt_table_is_journaled_again_after_the_install: [sqlite, sqlite_to_pg, pg_to_pg]);

/// The same rebuild under the fence is a breach: replay writes nothing.
#[test]
fn a_rebuild_under_the_fence_is_a_breach() {
    let d = Dir::orders_fenced("rebuild-fenced");
    let before = d.dump("source.db", "orders");
    d.client("target.db", REBUILD);
    let out = d.cutover(&["replay"]).output();
    assert_ne!(out.code, Some(0), "{out}");
    assert!(out.all().contains("fence breached"), "{out}");
    assert_eq!(d.dump("source.db", "orders"), before);
}

/// The writes of [`older_entries_leave_the_added_column_alone`], in order,
/// as the application makes them on the target and, in source form, as the
/// test's oracle makes them on a copy of the original source.
const OLDER_WRITES: [(&str, &str); 3] = [
    (
        "UPDATE orders SET cents = 1400 WHERE id = 101",
        "UPDATE orders SET dollars = '14.00' WHERE id = 101",
    ),
    (
        "INSERT INTO orders (id, cents, status) VALUES (104, 900, 'active')",
        "INSERT INTO orders (id, dollars, status) VALUES (104, '9.00', 'A')",
    ),
    (
        "UPDATE orders SET status = 'closed' WHERE id = 103",
        "UPDATE orders SET status = 'C' WHERE id = 103",
    ),
];
/// The release that adds the column, run on each side: the column with a
/// default, then filled for some rows.
const ADD_NOTE: &str = "ALTER TABLE orders ADD COLUMN note TEXT DEFAULT 'none';
UPDATE orders SET note = 'vip' WHERE id IN (101, 102);";
const NEWER_WRITES: [(&str, &str); 4] = [
    (
        "UPDATE orders SET note = 'rush' WHERE id = 102",
        "UPDATE orders SET note = 'rush' WHERE id = 102",
    ),
    (
        "UPDATE orders SET cents = 2500 WHERE id = 104",
        "UPDATE orders SET dollars = '25.00' WHERE id = 104",
    ),
    (
        "INSERT INTO orders (id, cents, status, note) VALUES (105, 1, 'closed', 'five')",
        "INSERT INTO orders (id, dollars, status, note) VALUES (105, '0.01', 'C', 'five')",
    ),
    (
        "DELETE FROM orders WHERE id = 103",
        "DELETE FROM orders WHERE id = 103",
    ),
];

/// The writes as the application makes them, or in source form.
fn script(writes: &[(&str, &str)], source_form: bool) -> String {
    writes
        .iter()
        .map(|(t, s)| format!("{};\n", if source_form { s } else { t }))
        .collect()
}

/// A column added on both sides after `journal install` (the source's rows
/// filled by the operator as the target's were), the journal installed
/// again: entries recorded before carry no value for it. Replay's update of
/// such an entry leaves the source's value of the column alone (101 keeps
/// 'vip'), its insert leaves the column to the source's default (104 gets
/// 'none', which a later entry then expects), and the expected-row check
/// compares only what the entry recorded. The exported feed leaves the
/// column out of those entries' lines, and applying it into a copy of the
/// source gives the same rows. Both sources equal an oracle the test builds
/// from the original source and the same writes in source form.
fn older_entries_leave_the_added_column_alone(layout: Layout) {
    let d = Dir::orders_loaded_on(layout, "added-column-older");
    d.copy_db("source.db", "oracle.db");
    d.run(&["journal", "install"], 0);
    d.client("target.db", &script(&OLDER_WRITES, false));
    d.client("target.db", ADD_NOTE);
    d.exec("source.db", ADD_NOTE);
    d.spec(&Spec::new().table(Table::orders().column(Column::new("note"))));
    d.run(&["journal", "install"], 0);
    d.client("target.db", &script(&NEWER_WRITES, false));
    d.run(&["fence", "on"], 0);

    let oracle = format!(
        "{}{ADD_NOTE}\n{}",
        script(&OLDER_WRITES, true),
        script(&NEWER_WRITES, true)
    );
    d.exec("oracle.db", &oracle);
    let expected = d.dump("oracle.db", "orders");
    let note = |id: i64| {
        expected
            .iter()
            .find(|r| r[0] == Value::Integer(id))
            .map(|r| r[3].clone())
    };
    assert_eq!(
        [101, 102, 104, 105].map(note),
        [
            Some(text("vip")),
            Some(text("rush")),
            Some(text("none")),
            Some(text("five"))
        ],
        "{layout}: the oracle"
    );

    // The feed, exported before the replay, applied into a copy of the
    // source as it stands now.
    d.copy_db("source.db", "source2.db");
    d.spec_file(
        "spec2.toml",
        &Spec::new()
            .source("source2.db")
            .table(Table::orders().column(Column::new("note"))),
    );
    d.cutover(&["journal", "export", "--out", "feed.jsonl"])
        .expect(0);
    let feed = std::fs::read_to_string(d.join("feed.jsonl")).expect("reading the feed");
    let lines: Vec<serde_json::Value> = feed
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    // Three older writes and the two rows the release filled (recorded
    // without the column), then four newer ones.
    assert_eq!(lines.len(), 9, "{layout}: {feed}");
    for (i, l) in lines.iter().enumerate() {
        let images = [&l["row"], &l["before"]];
        let carries = images
            .iter()
            .filter(|v| v.is_object())
            .map(|v| v.get("note").is_some())
            .collect::<Vec<_>>();
        let newer = i >= 5;
        assert!(
            carries.iter().all(|&c| c == newer),
            "{layout}: line {}: {l}",
            i + 1
        );
    }

    let rep = d.json(&["replay"], 0);
    assert_eq!(rep["entries"], 9, "{layout}: {rep}");
    assert_eq!(d.dump("source.db", "orders"), expected, "{layout}");

    let applied = d
        .command(&[
            "--format",
            "json",
            "apply",
            "--spec",
            "spec2.toml",
            "--feed",
            "feed.jsonl",
            "--into",
            "source",
        ])
        .expect(0);
    assert_eq!(applied.json()["verdict"], "pass", "{layout}: {applied}");
    assert_eq!(d.dump("source2.db", "orders"), expected, "{layout}");
}
each_layout!(older_entries_leave_the_added_column_alone: [sqlite, sqlite_to_pg, pg_to_pg, sqlite_to_my, my_to_my]);
