//! The SQLite journal on schemas of real size, and a journal installed by
//! the previous version (whose triggers took the next seq over every
//! journal table, and whose view `_cutover_journal` was a UNION ALL of them).
//!
//! Every spec here copies its columns as they are, so after the replay the
//! source must hold exactly what the target holds.

mod support;

use rusqlite::Connection;
use support::{Dir, Spec, Table};

/// A spec of tables `names`, each `(id INTEGER PRIMARY KEY, v TEXT)`, copied.
fn spec(names: &[String]) -> Spec {
    names.iter().fold(Spec::new(), |s, n| {
        s.table(Table::new(n).key(["id"]).copy("v"))
    })
}

/// The same tables in the source and the target, rows 1..=3 in each.
fn tables_sql(names: &[String]) -> String {
    names
        .iter()
        .map(|n| {
            format!(
                "CREATE TABLE {n} (id INTEGER PRIMARY KEY, v TEXT);
                 INSERT INTO {n} VALUES (1, 'a'), (2, 'b'), (3, 'c');\n"
            )
        })
        .collect()
}

fn folder(name: &str, names: &[String]) -> Dir {
    let sql = tables_sql(names);
    Dir::with(name, &spec(names), &sql, &sql)
}

/// `(seq, table, op)` of every journal entry, in seq order.
fn entries(d: &Dir) -> Vec<(i64, String, String)> {
    let c = d.conn("target.db");
    let mut st = c
        .prepare(
            "SELECT j.seq, t.target_table, j.op FROM _cutover_journal j
             JOIN _cutover_journal_tables t USING (img) ORDER BY j.seq",
        )
        .expect("reading the journal");
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("reading the journal")
        .collect::<rusqlite::Result<_>>()
        .expect("reading the journal")
}

fn rows(c: &Connection, table: &str) -> Vec<(i64, Option<String>)> {
    let mut st = c
        .prepare(&format!("SELECT id, v FROM {table} ORDER BY id"))
        .expect("reading a table");
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("reading a table")
        .collect::<rusqlite::Result<_>>()
        .expect("reading a table")
}

/// Fence, replay (exit 0) and every table of the source equal to the
/// target's.
fn replay_exactly(d: &Dir, names: &[String]) {
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    let (s, t) = (d.conn("source.db"), d.conn("target.db"));
    for n in names {
        assert_eq!(rows(&s, n), rows(&t, n), "table {n} after the replay");
    }
}

/// Puts the journal back as the previous version installed it: no list of
/// entries; each trigger takes one more than the largest seq of every
/// journal table, through a UNION ALL of them; the view is a UNION ALL of
/// every journal table. The triggers are otherwise the same statements, in
/// the same order.
fn as_previous_version(d: &Dir) {
    let c = d.conn("target.db");
    let images: Vec<i64> = c
        .prepare("SELECT img FROM _cutover_journal_tables ORDER BY img")
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .expect("the images");
    let arms = |f: &dyn Fn(i64) -> String| images.iter().map(|i| f(*i)).collect::<Vec<_>>();
    let next = format!(
        "coalesce((SELECT max(m) FROM ({})), 0) + 1",
        arms(&|i| format!("SELECT max(seq) AS m FROM \"_cutover_journal_{i}\""))
            .join(" UNION ALL ")
    );
    let view = arms(&|i| format!("SELECT seq, {i} AS img, op FROM \"_cutover_journal_{i}\""))
        .join(" UNION ALL ");
    let triggers: Vec<(String, String)> = c
        .prepare(
            "SELECT name, sql FROM sqlite_schema WHERE type = 'trigger'
             AND name LIKE '\\_cutover\\_journal\\_%' ESCAPE '\\' ORDER BY rowid",
        )
        .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .expect("the journal's triggers");
    assert!(!triggers.is_empty());
    let mut script = String::from("BEGIN;\n");
    for (name, _) in &triggers {
        script += &format!("DROP TRIGGER \"{name}\";\n");
    }
    for (_, sql) in &triggers {
        let old: Vec<String> = sql
            .lines()
            .filter(|l| !l.contains("_cutover_journal_entries"))
            .map(|l| l.replace("last_insert_rowid()", &next))
            .collect();
        script += &old.join("\n");
        script += ";\n";
    }
    script += &format!(
        "DROP VIEW _cutover_journal; CREATE VIEW _cutover_journal AS {view};
         DROP TABLE _cutover_journal_entries;
         COMMIT;"
    );
    c.execute_batch(&script)
        .unwrap_or_else(|e| panic!("{e}\n{script}"));
}

/// Writes to two tables interleaved, one transaction rolled back.
const WRITES: &str = "
    BEGIN;
    UPDATE b SET v = 'b2' WHERE id = 2;
    INSERT INTO a VALUES (4, 'a4');
    COMMIT;
    BEGIN;
    DELETE FROM a WHERE id = 1;
    ROLLBACK;
    DELETE FROM b WHERE id = 3;
    INSERT OR REPLACE INTO a VALUES (2, 'a2');
    UPDATE a SET v = 'a1' WHERE id = 1;";

/// What WRITES journals, in order.
fn journaled(from: i64) -> Vec<(i64, String, String)> {
    [
        ("b", "update"),
        ("a", "insert"),
        ("b", "delete"),
        ("a", "delete"),
        ("a", "insert"),
        ("a", "update"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (t, op))| (from + i as i64, t.to_string(), op.to_string()))
    .collect()
}

fn ab() -> Vec<String> {
    vec!["a".to_string(), "b".to_string()]
}

#[test]
fn seqs_follow_the_writes_across_tables_and_a_rollback_leaves_none() {
    let names = ab();
    let d = folder("seq-order", &names);
    d.run(&["journal", "install"], 0);
    d.client("target.db", WRITES);
    assert_eq!(entries(&d), journaled(1));
    replay_exactly(&d, &names);
}

#[test]
fn more_tables_than_a_compound_select_may_name_are_journaled_and_replayed() {
    // SQLite allows 500 terms in a compound SELECT: the previous version
    // failed to install here.
    let names: Vec<String> = (1..=600).map(|i| format!("t{i}")).collect();
    let d = folder("600-tables", &names);
    d.run(&["journal", "install"], 0);
    d.client(
        "target.db",
        "BEGIN;
         UPDATE t600 SET v = 'x' WHERE id = 1;
         INSERT INTO t1 VALUES (4, 'y');
         COMMIT;
         BEGIN; DELETE FROM t2 WHERE id = 1; ROLLBACK;
         DELETE FROM t300 WHERE id = 3;
         UPDATE t1 SET v = 'z' WHERE id = 4;",
    );
    let want: Vec<(i64, String, String)> = [
        ("t600", "update"),
        ("t1", "insert"),
        ("t300", "delete"),
        ("t1", "update"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (t, op))| (i as i64 + 1, t.to_string(), op.to_string()))
    .collect();
    assert_eq!(entries(&d), want);
    replay_exactly(&d, &names);
}

#[test]
fn a_journal_installed_by_the_previous_version_is_replayed_as_it_is() {
    let names = ab();
    let d = folder("previous-replayed", &names);
    d.run(&["journal", "install"], 0);
    as_previous_version(&d);
    d.client("target.db", WRITES);
    assert_eq!(entries(&d), journaled(1));
    assert!(!d.has_table("target.db", "_cutover_journal_entries"));
    replay_exactly(&d, &names);
}

#[test]
fn journal_install_upgrades_a_previous_versions_journal_in_place() {
    let names = ab();
    let d = folder("previous-upgraded", &names);
    d.run(&["journal", "install"], 0);
    as_previous_version(&d);
    d.client("target.db", WRITES);
    let identity = d.json(&["journal", "status"], 0)["journal"].clone();
    d.run(&["journal", "install"], 0);
    assert!(d.has_table("target.db", "_cutover_journal_entries"));
    let status = d.json(&["journal", "status"], 0);
    assert_eq!(status["journal"], identity, "the same journal, upgraded");
    assert_eq!(status["installed"], true, "{status:#}");
    // The entries of the previous version kept their seqs; the new
    // triggers carry on after them.
    d.client(
        "target.db",
        "UPDATE b SET v = 'b1' WHERE id = 1; DELETE FROM a WHERE id = 4;",
    );
    let mut want = journaled(1);
    want.push((7, "b".into(), "update".into()));
    want.push((8, "a".into(), "delete".into()));
    assert_eq!(entries(&d), want);
    replay_exactly(&d, &names);
}
