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
