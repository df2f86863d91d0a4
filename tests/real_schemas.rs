//! Ordinary schemas as they are: money in NUMERIC/REAL columns (stored by
//! SQLite as INTEGER or REAL), CamelCase keys renamed in the target. The
//! application writes through Python's `sqlite3`; the source after the
//! rollback is checked value by value, storage classes included.

mod support;

use rusqlite::types::Value;
use support::{Dir, Spec, Table, int, python, text};

/// `Invoice` (CamelCase, `Total NUMERIC(10,2)`) → `invoices` (snake_case,
/// `total_cents`).
fn store_spec() -> Spec {
    Spec::new().table(
        Table::new("invoices")
            .source_table("Invoice")
            .target_table("invoices")
            .key(["InvoiceId"])
            .rename("InvoiceId", "invoice_id")
            .decimal("Total", "total_cents", 2)
            .rename("Status", "status"),
    )
}

/// The music store's shape: `Total NUMERIC(10,2)`, which SQLite stores as a
/// REAL (`0.99`, `2.5`) or, for a whole amount, an INTEGER (`25`).
fn store(name: &str) -> Dir {
    let d = Dir::new(name);
    d.spec(&store_spec());
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
    d.spec(&Spec::new().table(Table::new("codes").key(["code"]).copy("label")));
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
        &Spec::new()
            .table(Table::new("lines").key(["id"]).copy("invoice"))
            .table(Table::new("invoices").key(["id"]).copy("code")),
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
    d.spec(&store_spec().edit_table("invoices", |t| t.constant("currency", "USD")));
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

/// The music store's shape through the whole runbook, with no edit to the
/// source: money in `NUMERIC(10,2)` holding REALs and INTEGERs, CamelCase keys
/// renamed to snake_case, a constant `currency`, foreign keys parent → child
/// in both schemas with the spec listing the child first, one `COLLATE
/// NOCASE` key; the application writes through Python's `sqlite3`; the
/// source ends equal to an oracle (the same writes in source form), storage
/// classes included.
#[test]
fn a_real_shaped_schema_goes_through_the_whole_runbook_without_editing_the_source() {
    let d = Dir::new("music-store");
    d.spec(
        &Spec::new()
            .table(
                Table::new("invoice_lines")
                    .source_table("InvoiceLine")
                    .key(["InvoiceLineId"])
                    .rename("InvoiceLineId", "invoice_line_id")
                    .rename("InvoiceId", "invoice_id")
                    .decimal("UnitPrice", "unit_price_cents", 2)
                    .rename("Quantity", "quantity"),
            )
            .table(
                Table::new("invoices")
                    .source_table("Invoice")
                    .key(["InvoiceId"])
                    .rename("InvoiceId", "invoice_id")
                    .rename("BillingCountry", "billing_country")
                    .decimal("Total", "total_cents", 2)
                    .constant("currency", "USD"),
            )
            .table(
                Table::new("genres")
                    .source_table("Genre")
                    .key(["Name"])
                    .rename("Name", "name")
                    .rename("GenreId", "genre_id"),
            ),
    );
    let source_ddl = "
        CREATE TABLE Invoice (InvoiceId INTEGER PRIMARY KEY, BillingCountry TEXT, Total NUMERIC(10,2) NOT NULL);
        CREATE TABLE InvoiceLine (InvoiceLineId INTEGER PRIMARY KEY,
            InvoiceId INTEGER NOT NULL REFERENCES Invoice (InvoiceId),
            UnitPrice NUMERIC(10,2) NOT NULL, Quantity INTEGER NOT NULL);
        CREATE TABLE Genre (Name TEXT COLLATE NOCASE PRIMARY KEY, GenreId INTEGER);";
    d.create_db("source.db", source_ddl);
    let seed = r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.executemany("INSERT INTO Invoice VALUES (?, ?, ?)",
              [(1, 'Germany', 1.98), (2, 'Norway', 3.96), (3, 'Brazil', 5.94), (4, 'USA', 13.86), (5, 'USA', 25)])
c.executemany("INSERT INTO InvoiceLine VALUES (?, ?, ?, ?)",
              [(1, 1, 0.99, 2), (2, 2, 0.99, 4), (3, 3, 0.99, 6), (4, 4, 0.99, 14), (5, 5, 1.99, 5), (6, 5, 15.05, 1)])
c.executemany("INSERT INTO Genre VALUES (?, ?)", [('rock', 1), ('Jazz', 2), ('metal', 3), ('Blues', 4)])
c.commit()
"#;
    let (code, out) = python(d.path(), seed, &["source.db"]);
    assert_eq!(code, 0, "{out}");
    d.create_db(
        "target.db",
        "CREATE TABLE invoices (invoice_id INTEGER PRIMARY KEY, billing_country TEXT,
             total_cents INTEGER NOT NULL, currency TEXT NOT NULL);
         CREATE TABLE invoice_lines (invoice_line_id INTEGER PRIMARY KEY,
             invoice_id INTEGER NOT NULL REFERENCES invoices (invoice_id) ON DELETE CASCADE,
             unit_price_cents INTEGER NOT NULL, quantity INTEGER NOT NULL);
         CREATE TABLE genres (name TEXT COLLATE NOCASE PRIMARY KEY, genre_id INTEGER);",
    );
    d.copy_db("source.db", "oracle.db");
    let source_bytes = d.bytes("source.db");

    // `cutover init` drafts this pair's spec; after the one edit its
    // comments ask for (the currency constant), check passes.
    init(&d, Some("draft.toml"), 0);
    let draft = std::fs::read_to_string(d.join("draft.toml")).expect("draft");
    assert_eq!(draft.matches("# DECIDE").count(), 1, "{draft}");
    d.write(
        "draft.toml",
        draft.replace(
            "# [[tables.columns]]\n# target = \"currency\"\n# value = \"…\"",
            "[[tables.columns]]\ntarget = \"currency\"\nvalue = \"USD\"",
        ),
    );
    d.command(&["check", "--spec", "draft.toml"]).expect(0);

    d.run(&["check"], 0);
    assert_eq!(
        d.bytes("source.db"),
        source_bytes,
        "check wrote to the source"
    );
    d.run(&["load"], 0);
    d.run(&["load", "--replace"], 0);
    d.run(&["gate"], 0);
    d.run(&["gate", "--inject-mismatch"], 1);
    assert_eq!(
        d.bytes("source.db"),
        source_bytes,
        "before the switch, the source is untouched"
    );
    d.run(&["journal", "install"], 0);

    // The application on the target, and the same in source form on the oracle.
    let app = r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("PRAGMA foreign_keys = ON")
c.execute("UPDATE invoices SET total_cents = 2475 WHERE invoice_id = 5")
c.execute("UPDATE invoice_lines SET unit_price_cents = 1480 WHERE invoice_line_id = 6")
c.execute("INSERT INTO invoices VALUES (6, 'Canada', 199, 'USD')")
c.execute("INSERT INTO invoice_lines VALUES (7, 6, 199, 1)")
c.execute("DELETE FROM invoices WHERE invoice_id = 2")
c.execute("INSERT OR REPLACE INTO genres VALUES ('jazz', 20)")
c.execute("UPDATE genres SET genre_id = 30 WHERE name = 'METAL'")
c.commit()
"#;
    let (code, out) = python(d.path(), app, &["target.db"]);
    assert_eq!(code, 0, "{out}");
    let oracle = r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE Invoice SET Total = 24.75 WHERE InvoiceId = 5")
c.execute("UPDATE InvoiceLine SET UnitPrice = 14.8 WHERE InvoiceLineId = 6")
c.execute("INSERT INTO Invoice VALUES (6, 'Canada', 1.99)")
c.execute("INSERT INTO InvoiceLine VALUES (7, 6, 1.99, 1)")
c.execute("DELETE FROM InvoiceLine WHERE InvoiceId = 2")
c.execute("DELETE FROM Invoice WHERE InvoiceId = 2")
c.execute("DELETE FROM Genre WHERE Name = 'Jazz'")
c.execute("INSERT INTO Genre VALUES ('jazz', 20)")
c.execute("UPDATE Genre SET GenreId = 30 WHERE Name = 'metal'")
c.commit()
"#;
    let (code, out) = python(d.path(), oracle, &["oracle.db"]);
    assert_eq!(code, 0, "{out}");

    d.run(&["fence", "on"], 0);
    d.run(&["replay", "--dry-run"], 0);
    d.run(&["replay"], 0);
    d.run(&["gate"], 0);
    for (table, cols) in [
        (
            "Invoice",
            "InvoiceId, BillingCountry, typeof(Total), quote(Total)",
        ),
        (
            "InvoiceLine",
            "InvoiceLineId, InvoiceId, typeof(UnitPrice), quote(UnitPrice), Quantity",
        ),
        ("Genre", "Name, typeof(GenreId), GenreId"),
    ] {
        let sql = format!("SELECT {cols} FROM {table} ORDER BY 1 COLLATE BINARY");
        assert_eq!(
            d.query("source.db", &sql),
            d.query("oracle.db", &sql),
            "table {table} after the rollback"
        );
    }
}

/// `cutover init` drafts the music store's spec from the two schemas; after
/// the one edit its comments ask for (the target-only currency), `check`
/// passes. It pairs codes with the words the target already holds under the
/// same keys, and never overwrites a file.
#[test]
fn init_drafts_a_spec_that_passes_check_after_the_edits_its_comments_ask_for() {
    let d = Dir::new("init");
    d.create_db(
        "source.db",
        "CREATE TABLE Invoice (InvoiceId INTEGER PRIMARY KEY, BillingCountry TEXT, Total NUMERIC(10,2) NOT NULL, Status TEXT NOT NULL);
         CREATE TABLE InvoiceLine (InvoiceLineId INTEGER PRIMARY KEY, InvoiceId INTEGER NOT NULL REFERENCES Invoice (InvoiceId),
                                   UnitPrice NUMERIC(10,2) NOT NULL, Quantity INTEGER NOT NULL);
         INSERT INTO Invoice VALUES (1, 'Germany', 1.98, 'P'), (2, 'Norway', 3.96, 'O'), (3, 'Brazil', 5.94, 'P');
         INSERT INTO InvoiceLine VALUES (1, 1, 0.99, 2), (2, 2, 0.99, 4);",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE invoices (invoice_id INTEGER PRIMARY KEY, billing_country TEXT, total_cents INTEGER NOT NULL,
                                status TEXT NOT NULL, currency TEXT NOT NULL);
         CREATE TABLE invoice_lines (invoice_line_id INTEGER PRIMARY KEY, invoice_id INTEGER NOT NULL,
                                     unit_price INTEGER NOT NULL, quantity INTEGER NOT NULL);
         -- A trial migration left rows keyed as the source's.
         INSERT INTO invoices VALUES (1, 'Germany', 198, 'paid', 'USD'), (2, 'Norway', 396, 'open', 'USD');",
    );
    init(&d, Some("spec.toml"), 0);
    let draft = std::fs::read_to_string(d.join("spec.toml")).expect("the draft");
    for part in [
        "source_table = \"InvoiceLine\"",
        "key = [\"InvoiceId\"]",
        "target = \"invoice_id\"",
        "source = \"Total\"\ntarget = \"total_cents\"\ntransform = \"decimal_to_minor\"\nscale = 2",
        "map = { \"O\" = \"open\", \"P\" = \"paid\" }",
        "# target = \"currency\"",
    ] {
        assert!(draft.contains(part), "{part} not in the draft:\n{draft}");
    }
    assert_eq!(draft.matches("# DECIDE").count(), 1, "{draft}");
    // The one edit the draft asks for: the currency constant.
    d.write(
        "spec.toml",
        draft.replace(
            "# [[tables.columns]]\n# target = \"currency\"\n# value = \"…\"",
            "[[tables.columns]]\ntarget = \"currency\"\nvalue = \"USD\"",
        ),
    );
    d.run(&["check"], 0);
    // Never overwrites.
    let edited = d.bytes("spec.toml");
    let out = init(&d, Some("spec.toml"), 2);
    out.assert_mentions(&["spec.toml", "already exists"]);
    assert_eq!(d.bytes("spec.toml"), edited);
}

#[test]
fn init_on_schemas_that_match_cleanly_drafts_a_spec_check_passes_as_it_is() {
    let d = Dir::new("init-clean");
    d.create_db(
        "source.db",
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, kind TEXT); INSERT INTO notes VALUES (1, 'x', 'a');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, kind TEXT);",
    );
    let out = init(&d, None, 0);
    d.write("spec.toml", &out.stdout);
    assert!(!out.stdout.contains("# DECIDE"), "{}", out.stdout);
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
}

/// `cutover init` on the folder's source.db and target.db, writing `out`
/// (or printing), which must exit with `code`.
fn init(d: &Dir, out: Option<&str>, code: i32) -> support::Output {
    let mut args = vec![
        "init",
        "--source",
        "sqlite://source.db",
        "--target",
        "sqlite://target.db",
    ];
    if let Some(out) = out {
        args.extend(["--out", out]);
    }
    d.command(&args).expect(code)
}

/// `items` synced by an integer watermark with a lookback of 5, and
/// `kinds`, a lookup table without one.
fn sync_spec() -> Spec {
    Spec::new()
        .table(
            Table::new("items")
                .key(["id"])
                .watermark("rev")
                .lookback("5")
                .copy("rev")
                .copy("name"),
        )
        .table(Table::new("kinds").key(["code"]).copy("label"))
}

fn synced(name: &str) -> Dir {
    let d = Dir::new(name);
    d.spec(&sync_spec());
    d.create_db(
        "source.db",
        "CREATE TABLE items (id INTEGER PRIMARY KEY, rev INTEGER NOT NULL, name TEXT);
         INSERT INTO items VALUES (1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c');
         CREATE TABLE kinds (code TEXT PRIMARY KEY, label TEXT);
         INSERT INTO kinds VALUES ('A', 'alpha'), ('B', 'beta');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE items (id INTEGER PRIMARY KEY, rev INTEGER NOT NULL, name TEXT);
         CREATE TABLE kinds (code TEXT PRIMARY KEY, label TEXT);",
    );
    d.run(&["sync"], 0);
    d.run(&["gate"], 0);
    d
}

/// A whole schema syncs: a lookup table without a watermark is compared in
/// full on each run; a table's own `lookback` picks up a late row inside its
/// window, and a row behind it is reported as what it is; `--lookback` that
/// fits no table's watermark is refused naming them.
#[test]
fn sync_carries_tables_without_a_watermark_and_each_table_has_its_lookback() {
    let d = synced("sync-whole-schema");
    d.exec(
        "source.db",
        "UPDATE kinds SET label = 'ALPHA' WHERE code = 'A';
         INSERT INTO kinds VALUES ('C', 'gamma');
         INSERT INTO items VALUES (4, 27, 'late but inside the window'), (5, 40, 'new');",
    );
    let json = d.json(&["sync"], 0);
    assert_eq!(json["tables"][0]["late"], 0, "{json:#}");
    d.run(&["gate"], 0);
    // A row far behind the cursor: not in the target, said so.
    d.exec(
        "source.db",
        "INSERT INTO items VALUES (6, 11, 'far behind')",
    );
    let out = d.run(&["sync"], 1);
    out.assert_mentions(&["items", "1 not in the target", "[6]"]);
    let json = d.json(&["sync"], 1);
    assert_eq!(json["tables"][0]["late_missing"], 1, "{json:#}");
    assert_eq!(json["tables"][0]["late_changed"], 0, "{json:#}");
    // --lookback wider than the table's own picks it up.
    d.run(&["sync", "--lookback", "40"], 0);
    d.run(&["gate"], 0);
    // A duration fits no integer watermark: refused, nothing written.
    let before = d.snapshot();
    let out = d.run(&["sync", "--lookback", "2d"], 2);
    out.assert_mentions(&["--lookback", "items", "kinds"]);
    d.assert_unchanged(&before, "a --lookback that fits no table");
}

/// After `sync --evolve` adds a source column to the target, the rows
/// already there get its values in the same run, and the next run is clean.
#[test]
fn sync_evolve_leaves_the_target_so_that_the_next_run_is_clean() {
    let d = synced("sync-evolve-clean");
    d.exec(
        "source.db",
        "ALTER TABLE items ADD COLUMN note TEXT; UPDATE items SET note = 'n' || id;",
    );
    d.run(&["sync"], 1); // drift without --evolve: nothing written
    d.run(&["sync", "--evolve"], 0);
    assert_eq!(
        d.query("target.db", "SELECT id, note FROM items ORDER BY id"),
        vec![
            vec![int(1), text("n1")],
            vec![int(2), text("n2")],
            vec![int(3), text("n3")],
        ]
    );
    let json = d.json(&["sync"], 0);
    assert_eq!(json["tables"][0]["late"], 0, "{json:#}");
    assert_eq!(json["tables"][0]["changed"], 0, "{json:#}");
}

/// A target-only column left to the target's default (`default = true`) is
/// not written by load, not compared by the gate, and not carried back; a
/// generated target column mapped by mistake is named as generated.
#[test]
fn a_target_default_column_is_left_alone_and_a_generated_one_is_named() {
    let d = Dir::new("target-default");
    let spec = Spec::new().table(
        Table::new("notes")
            .key(["id"])
            .copy("body")
            .target_default("created"),
    );
    d.spec(&spec);
    d.create_db(
        "source.db",
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes VALUES (1, 'x'), (2, 'y');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, created TEXT NOT NULL DEFAULT 'then',
                             shout TEXT GENERATED ALWAYS AS (upper(body)) VIRTUAL);",
    );
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    assert_eq!(
        d.query("target.db", "SELECT id, created FROM notes ORDER BY id"),
        vec![vec![int(1), text("then")], vec![int(2), text("then")]]
    );
    d.exec(
        "target.db",
        "UPDATE notes SET created = 'later' WHERE id = 1",
    );
    d.run(&["gate"], 0);
    d.run(&["journal", "install"], 0);
    d.exec(
        "target.db",
        "UPDATE notes SET body = 'z', created = 'now' WHERE id = 2",
    );
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    assert_eq!(
        d.query("source.db", "SELECT id, body FROM notes ORDER BY id"),
        vec![vec![int(1), text("x")], vec![int(2), text("z")]]
    );
    // Mapping the generated column is named as such.
    d.spec(&spec.edit_table("notes", |t| t.edit_column("body", |c| c.target("shout"))));
    let out = d.run(&["check"], 2);
    out.assert_mentions(&["shout", "generated"]);
}

/// A renamed key travels through a feed too: the journal exported as a feed
/// names the key by its target name, `apply --into source` carries it back
/// to `InvoiceId`, and the replay after it finds nothing left to apply.
#[test]
fn a_renamed_key_travels_through_an_exported_feed_back_to_the_source() {
    let d = store("renamed-key-feed");
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    d.exec(
        "target.db",
        "UPDATE invoices SET total_cents = 120 WHERE invoice_id = 1;
         INSERT INTO invoices VALUES (9, 900, 'open');",
    );
    d.run(&["fence", "on"], 0);
    d.run(&["journal", "export", "--out", "feed.jsonl"], 0);
    let feed = std::fs::read_to_string(d.join("feed.jsonl")).expect("feed");
    assert!(feed.contains("\"key\":{\"invoice_id\":1}"), "{feed}");
    d.run(&["apply", "--feed", "feed.jsonl", "--into", "source"], 0);
    assert_eq!(
        d.query(
            "source.db",
            "SELECT InvoiceId, typeof(Total), quote(Total) FROM Invoice WHERE InvoiceId IN (1, 9) ORDER BY 1"
        ),
        vec![
            vec![int(1), text("real"), text("1.2")],
            vec![int(9), text("integer"), text("9")],
        ]
    );
    let json = d.json(&["replay"], 0);
    assert_eq!(json["applied"], 0, "{json:#}");
}

/// A replay that leaves a source row without its parent says so (exit 1),
/// naming table, key and parent; a row that already had no parent before
/// the replay (a legacy source that never enforced its keys) is not blamed
/// on it. The replay's `--report` carries the verdict and the databases.
#[test]
fn a_replay_that_leaves_a_row_without_its_parent_names_it() {
    let d = Dir::new("fk-report");
    d.spec(
        &Spec::new()
            .table(Table::new("parents").key(["id"]))
            .table(Table::new("children").key(["id"]).copy("parent")),
    );
    let ddl = "CREATE TABLE parents (id INTEGER PRIMARY KEY);
               CREATE TABLE children (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parents(id));";
    d.create_db(
        "source.db",
        &format!(
            "PRAGMA foreign_keys = OFF; {ddl} INSERT INTO parents VALUES (1), (2);
             INSERT INTO children VALUES (10, 1), (11, 2), (99, 404);"
        ),
    );
    d.create_db("target.db", ddl);
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    // The application, not enforcing its keys, deletes a parent and leaves
    // its child.
    d.exec(
        "target.db",
        "PRAGMA foreign_keys = OFF; DELETE FROM parents WHERE id = 1;",
    );
    d.run(&["fence", "on"], 0);
    let json = d.json(&["replay", "--report", "replay.json"], 1);
    let found = json["foreign_keys"].as_array().expect("foreign_keys");
    // The row that had no parent before the replay (99 → 404) is not blamed.
    assert_eq!(found.len(), 1, "{json:#}");
    let text = found[0].as_str().expect("text");
    for part in ["'children'", "10", "'parents'"] {
        assert!(text.contains(part), "{part} not in {text}");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("replay.json")).expect("report"))
            .expect("JSON");
    assert_eq!(report["verdict"], "fail", "{report:#}");
    assert_eq!(report["command"], "replay", "{report:#}");
    assert_eq!(report["databases"].as_array().map(Vec::len), Some(2));
}

/// A small table's names, e-mail addresses, phones and timestamps each have
/// a value per row: they are data, not codes, and the draft proposes no map
/// for them; the status column's one-letter codes get one. A source column
/// without a target column is left for the operator to decide, commented.
#[test]
fn init_proposes_maps_only_for_columns_that_hold_codes() {
    let d = Dir::new("init-codes");
    d.create_db(
        "source.db",
        "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, email TEXT, phone TEXT, created TEXT, status TEXT, legacy TEXT);
         INSERT INTO people VALUES
           (1, 'Ann', 'ann@example.org', '+1 555 0100', '2024-01-02 10:00:00', 'A', 'x'),
           (2, 'Bob', 'bob@example.org', '+1 555 0101', '2024-01-03 11:00:00', 'C', 'y'),
           (3, 'Cy', 'cy@example.org', '+1 555 0102', '2024-01-04 12:00:00', 'A', 'z');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, email TEXT, phone TEXT, created TEXT, status TEXT);
         INSERT INTO people VALUES
           (1, 'ANN', 'ANN@EXAMPLE.ORG', '5550100', '2024-01-02T10:00:00Z', 'active'),
           (2, 'BOB', 'BOB@EXAMPLE.ORG', '5550101', '2024-01-03T11:00:00Z', 'closed');",
    );
    init(&d, Some("spec.toml"), 0);
    let draft = std::fs::read_to_string(d.join("spec.toml")).expect("the draft");
    assert_eq!(draft.matches("transform = \"map\"").count(), 1, "{draft}");
    assert!(
        draft.contains("map = { \"A\" = \"active\", \"C\" = \"closed\" }"),
        "{draft}"
    );
    assert!(draft.contains("# ignore = [\"legacy\"]"), "{draft}");
    assert!(!draft.lines().any(|l| l.starts_with("ignore")), "{draft}");
}

/// A SQLite source's generated column needs no mapping; mapped to a plain
/// target column it is read, carried, compared, and on replay left to the
/// source to compute (never written). As a key it is refused, named as
/// generated.
#[test]
fn a_sqlite_source_generated_column_is_carried_and_left_to_the_source_on_replay() {
    let d = Dir::new("sqlite-generated");
    d.create_db(
        "source.db",
        "CREATE TABLE t (id INTEGER PRIMARY KEY, first TEXT, label TEXT GENERATED ALWAYS AS ('#' || first) VIRTUAL);
         INSERT INTO t (id, first) VALUES (1, 'a'), (2, 'b');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE t (id INTEGER PRIMARY KEY, first TEXT, label TEXT);",
    );
    let spec = "[source]\nurl = \"sqlite://source.db\"\n[target]\nurl = \"sqlite://target.db\"\n[[tables]]\nname = \"t\"\nkey = [\"id\"]\nsource_limit = { label = \"watch\" }\n[[tables.columns]]\nsource = \"first\"\n[[tables.columns]]\nsource = \"label\"\n";
    d.write("spec.toml", spec);
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    assert_eq!(
        d.query("target.db", "SELECT label FROM t ORDER BY id"),
        vec![vec![text("#a")], vec![text("#b")]]
    );
    d.run(&["gate"], 0);
    d.run(&["journal", "install"], 0);
    let app = r#"
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE t SET first = 'z', label = '#z' WHERE id = 1")
c.execute("INSERT INTO t VALUES (3, 'c', '#c')")
c.execute("DELETE FROM t WHERE id = 2")
c.commit()
"#;
    let (code, out) = python(d.path(), app, &["target.db"]);
    assert_eq!(code, 0, "{out}");
    d.run(&["fence", "on"], 0);
    d.run(&["replay", "--dry-run"], 0);
    d.run(&["replay"], 0);
    assert_eq!(
        d.query("source.db", "SELECT id, first, label FROM t ORDER BY id"),
        vec![
            vec![int(1), text("z"), text("#z")],
            vec![int(3), text("c"), text("#c")]
        ]
    );
    d.write(
        "spec.toml",
        spec.replace("key = [\"id\"]", "key = [\"label\"]")
            .replace("source = \"label\"", "source = \"id\""),
    );
    let out = d.command(&["check", "--spec", "spec.toml"]).expect(2);
    out.assert_mentions(&["'label'", "is generated"]);
}
