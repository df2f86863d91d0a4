//! Ordinary schemas as they are: money in NUMERIC/REAL columns (stored by
//! SQLite as INTEGER or REAL), CamelCase keys renamed in the target. The
//! application writes through Python's `sqlite3`; the source after the
//! rollback is checked value by value, storage classes included.

mod support;

use rusqlite::types::Value;
use support::{Dir, int, python, text};

const SPEC: &str = r#"
[source]
url = "sqlite://source.db"

[target]
url = "sqlite://target.db"

[[tables]]
name = "invoices"
source_table = "Invoice"
target_table = "invoices"
key = ["InvoiceId"]

[[tables.columns]]
source = "InvoiceId"
target = "invoice_id"

[[tables.columns]]
source = "Total"
target = "total_cents"
transform = "decimal_to_minor"
scale = 2

[[tables.columns]]
source = "Status"
target = "status"
"#;

/// The music store's shape: `Total NUMERIC(10,2)`, which SQLite stores as a
/// REAL (`0.99`, `2.5`) or, for a whole amount, an INTEGER (`25`).
fn store(name: &str) -> Dir {
    let d = Dir::new(name);
    d.spec(SPEC);
    d.create_db(
        "source.db",
        "CREATE TABLE Invoice (InvoiceId INTEGER PRIMARY KEY, Total NUMERIC(10,2) NOT NULL, Status TEXT NOT NULL);",
    );
    let (code, out) = python(
        d.path(),
        r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.executemany("INSERT INTO Invoice VALUES (?, ?, ?)",
              [(1, 0.99, 'paid'), (2, 25, 'open'), (3, 2.5, 'open'), (4, '13.86', 'paid')])
c.commit()
"#,
        &["source.db"],
    );
    assert_eq!(code, 0, "{out}");
    d.create_db(
        "target.db",
        "CREATE TABLE invoices (invoice_id INTEGER PRIMARY KEY, total_cents INTEGER NOT NULL, status TEXT NOT NULL);",
    );
    d
}

fn classes(d: &Dir, db: &str, sql: &str) -> Vec<Vec<Value>> {
    d.query(db, sql)
}

#[test]
fn money_stored_as_real_or_integer_migrates_and_rolls_back_in_its_own_storage_class() {
    let d = store("numeric-money");
    // SQLite's NUMERIC affinity: 0.99 and 2.5 are REALs, 25 and '13.86' are
    // converted (INTEGER 25, REAL 13.86).
    assert_eq!(
        classes(
            &d,
            "source.db",
            "SELECT InvoiceId, typeof(Total) FROM Invoice ORDER BY 1"
        ),
        vec![
            vec![int(1), text("real")],
            vec![int(2), text("integer")],
            vec![int(3), text("real")],
            vec![int(4), text("real")],
        ]
    );
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    assert_eq!(
        d.query(
            "target.db",
            "SELECT invoice_id, total_cents FROM invoices ORDER BY 1"
        ),
        vec![
            vec![int(1), int(99)],
            vec![int(2), int(2500)],
            vec![int(3), int(250)],
            vec![int(4), int(1386)],
        ]
    );
    d.run(&["gate"], 0);
    d.run(&["gate", "--inject-mismatch"], 1);
    d.run(&["journal", "install"], 0);
    let (code, out) = python(
        d.path(),
        r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE invoices SET total_cents = 199 WHERE invoice_id = 1")
c.execute("UPDATE invoices SET total_cents = 3000 WHERE invoice_id = 2")
c.execute("UPDATE invoices SET total_cents = 275 WHERE invoice_id = 3")
c.execute("INSERT INTO invoices VALUES (5, 1000, 'open')")
c.execute("DELETE FROM invoices WHERE invoice_id = 4")
c.commit()
"#,
        &["target.db"],
    );
    assert_eq!(code, 0, "{out}");
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    // Each row keeps the storage class it had: REAL stays REAL, a whole
    // INTEGER amount stays INTEGER; the new row is stored as the column's
    // affinity stores an application's '10.00' (INTEGER 10).
    assert_eq!(
        classes(
            &d,
            "source.db",
            "SELECT InvoiceId, typeof(Total), quote(Total), Status FROM Invoice ORDER BY 1"
        ),
        vec![
            vec![int(1), text("real"), text("1.99"), text("paid")],
            vec![int(2), text("integer"), text("30"), text("open")],
            vec![int(3), text("real"), text("2.75"), text("open")],
            vec![int(5), text("integer"), text("10"), text("open")],
        ]
    );
    d.run(&["gate"], 0);
}

#[test]
fn a_real_that_is_not_the_amount_it_looks_like_is_invalid_and_named() {
    let d = store("inexact-real");
    let (code, out) = python(
        d.path(),
        r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE Invoice SET Total = 0.1 + 0.2 WHERE InvoiceId = 3")
c.commit()
"#,
        &["source.db"],
    );
    assert_eq!(code, 0, "{out}");
    let before = d.snapshot();
    let out = d.run(&["check"], 1);
    out.assert_mentions(&["0.30000000000000004", "Total"]);
    d.run(&["load"], 1);
    d.assert_unchanged(&before, "check and load over an inexact real");
}

/// Keys declared `COLLATE NOCASE` in the source and `RTRIM` in the target
/// sort differently from BINARY; every command reads keys in BINARY order.
#[test]
fn keys_with_a_collation_reconcile_and_roll_back() {
    let d = Dir::new("collated-keys");
    d.spec(
        r#"
[source]
url = "sqlite://source.db"
[target]
url = "sqlite://target.db"
[[tables]]
name = "codes"
key = ["code"]
[[tables.columns]]
source = "label"
"#,
    );
    d.create_db(
        "source.db",
        "CREATE TABLE codes (code TEXT COLLATE NOCASE PRIMARY KEY, label TEXT);
         INSERT INTO codes VALUES ('a', 'x'), ('B', 'y'), ('c', 'z'), ('D ', 'w');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE codes (code TEXT COLLATE RTRIM PRIMARY KEY, label TEXT);",
    );
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    d.run(&["gate", "--inject-mismatch"], 1);
    d.run(&["journal", "install"], 0);
    let (code, out) = python(
        d.path(),
        r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE codes SET label = 'q' WHERE code = 'B'")
c.execute("INSERT INTO codes VALUES ('e', 'v')")
c.execute("DELETE FROM codes WHERE code = 'a'")
c.commit()
"#,
        &["target.db"],
    );
    assert_eq!(code, 0, "{out}");
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    assert_eq!(
        d.query(
            "source.db",
            "SELECT code, label FROM codes ORDER BY code COLLATE BINARY"
        ),
        vec![
            vec![text("B"), text("q")],
            vec![text("D "), text("w")],
            vec![text("c"), text("z")],
            vec![text("e"), text("v")],
        ]
    );
}

/// Parent and child tables with foreign keys on both sides, listed child
/// first in the spec: load, load --replace and the rehearsal work, because
/// cutover's own connections never enforce a foreign-key action; a STRICT,
/// WITHOUT ROWID target with a generated column works through the runbook.
#[test]
fn foreign_keys_strict_and_without_rowid_tables_go_through_the_runbook() {
    let d = Dir::new("fk-strict");
    d.spec(
        r#"
[source]
url = "sqlite://source.db"
[target]
url = "sqlite://target.db"
[[tables]]
name = "lines"
key = ["id"]
[[tables.columns]]
source = "invoice"
[[tables]]
name = "invoices"
key = ["id"]
[[tables.columns]]
source = "code"
"#,
    );
    d.create_db(
        "source.db",
        "PRAGMA foreign_keys = ON;
         CREATE TABLE invoices (id INTEGER PRIMARY KEY, code TEXT UNIQUE);
         CREATE TABLE lines (id INTEGER PRIMARY KEY, invoice INTEGER REFERENCES invoices(id));
         INSERT INTO invoices VALUES (1, 'a'), (2, 'b');
         INSERT INTO lines VALUES (10, 1), (11, 2);",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE invoices (id INTEGER NOT NULL PRIMARY KEY, code TEXT UNIQUE,
                                shout TEXT GENERATED ALWAYS AS (upper(code)) VIRTUAL) STRICT, WITHOUT ROWID;
         CREATE TABLE lines (id INTEGER PRIMARY KEY, invoice INTEGER REFERENCES invoices(id) ON DELETE CASCADE) STRICT;",
    );
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["load", "--replace"], 0);
    d.run(&["gate"], 0);
    d.run(&["gate", "--inject-mismatch"], 1);
    d.run(&["journal", "install"], 0);
    let (code, out) = python(
        d.path(),
        r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("PRAGMA foreign_keys = ON")
c.execute("DELETE FROM invoices WHERE id = 1")
c.execute("INSERT INTO invoices (id, code) VALUES (3, 'c')")
c.execute("INSERT INTO lines VALUES (12, 3)")
c.commit()
"#,
        &["target.db"],
    );
    assert_eq!(code, 0, "{out}");
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    assert_eq!(
        d.query("source.db", "SELECT id, invoice FROM lines ORDER BY id"),
        vec![vec![int(11), int(2)], vec![int(12), int(3)]]
    );
    assert_eq!(
        d.query("source.db", "SELECT id, code FROM invoices ORDER BY id"),
        vec![vec![int(2), text("b")], vec![int(3), text("c")]]
    );
}

/// A target column the source does not have, holding one value
/// (`value = "USD"`): loaded and reconciled as that value; the rollback
/// requires the target row to hold it and names the row that does not.
#[test]
fn a_target_only_constant_column_is_loaded_reconciled_and_required_on_the_way_back() {
    let d = store("constant-currency");
    d.spec(&format!(
        "{SPEC}
[[tables.columns]]
target = \"currency\"
value = \"USD\"
"
    ));
    std::fs::remove_file(d.join("target.db")).expect("removing the target");
    d.create_db(
        "target.db",
        "CREATE TABLE invoices (invoice_id INTEGER PRIMARY KEY, total_cents INTEGER NOT NULL, status TEXT NOT NULL, currency TEXT NOT NULL);",
    );
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    assert_eq!(
        d.query("target.db", "SELECT DISTINCT currency FROM invoices"),
        vec![vec![text("USD")]]
    );
    d.run(&["gate"], 0);
    d.exec(
        "target.db",
        "UPDATE invoices SET currency = 'EUR' WHERE invoice_id = 2",
    );
    let json = d.json(&["gate"], 1);
    assert_eq!(json["tables"][0]["changed"], 1, "{json:#}");
    d.exec(
        "target.db",
        "UPDATE invoices SET currency = 'USD' WHERE invoice_id = 2",
    );
    d.run(&["journal", "install"], 0);
    let (code, out) = python(
        d.path(),
        r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("INSERT INTO invoices VALUES (6, 500, 'open', 'USD')")
c.execute("UPDATE invoices SET status = 'void' WHERE invoice_id = 1")
c.commit()
"#,
        &["target.db"],
    );
    assert_eq!(code, 0, "{out}");
    // A row in another currency cannot go back to a source without one.
    d.exec(
        "target.db",
        "INSERT INTO invoices VALUES (7, 100, 'open', 'EUR')",
    );
    d.run(&["fence", "on"], 0);
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["[7]", "currency", "'EUR'", "'USD'"]);
    // The batch with the EUR row rolled back whole.
    let applied = d.query(
        "source.db",
        "SELECT InvoiceId FROM Invoice WHERE InvoiceId IN (6, 7)",
    );
    assert!(
        applied.is_empty() || applied == vec![vec![int(6)]],
        "{applied:?}"
    );
    assert!(!applied.contains(&vec![int(7)]));
}
