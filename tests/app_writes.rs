//! The rollback is exact for the writes real applications make.
//!
//! Every test builds a source and an empty target, copies the source to
//! `original.db` and `oracle.db` before anything runs, loads the target,
//! installs the journal, and then lets "the application" write to the target
//! through Python's `sqlite3` module (the system's SQLite, not cutover's), with
//! the pragmas an application may set (`recursive_triggers`, `foreign_keys`,
//! `trusted_schema`). The same writes, spelled in source form, are applied by
//! Python to `oracle.db`: that is what the source must hold after the rollback,
//! computed without the tool. Then `fence on` and `replay`, and the source is
//! compared with the oracle table by table, every cell with its storage class
//! and its exact bytes (a REAL by its bit pattern), tables outside the spec
//! with their rowids, and the schema too.
//!
//! The contract: replay exits 0 when the source reconciles with the target; 1
//! on a conflict, a fence breach or a foreign-key integrity failure in the
//! source; 2 on a tool or usage error. The journal's internal layout is not
//! asserted on, only entry counts (`cutover journal status`).

mod support;

use std::collections::BTreeMap;
use std::fmt;

use rusqlite::types::ValueRef;
use support::{
    Dir, ORDERS_APP_WRITES, ORDERS_SOURCE, ORDERS_TARGET, Output, SPEC, Spec, Table, python,
};

// --- exact cells and whole-database comparison ----------------------------------

/// One cell read back exactly: its storage class and its bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Cell {
    Null,
    Int(i64),
    /// The IEEE-754 bit pattern, so `-0.0` is not `0.0`.
    Real(u64),
    /// The raw bytes; SQLite text need not be valid UTF-8.
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

impl fmt::Debug for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cell::Null => write!(f, "NULL"),
            Cell::Int(i) => write!(f, "integer {i}"),
            Cell::Real(b) => write!(f, "real {:?} (bits {b:#018x})", f64::from_bits(*b)),
            Cell::Text(t) => match std::str::from_utf8(t) {
                Ok(s) => write!(f, "text {s:?}"),
                Err(_) => write!(f, "text x'{}' (not UTF-8)", hex(t)),
            },
            Cell::Blob(b) => write!(f, "blob x'{}'", hex(b)),
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A database's contents: the schema (every object but cutover's own), and
/// every row of every table but cutover's control tables, rows sorted.
type Contents = BTreeMap<String, Vec<Vec<Cell>>>;

fn rows(conn: &rusqlite::Connection, sql: &str) -> Vec<Vec<Cell>> {
    let mut st = conn
        .prepare(sql)
        .unwrap_or_else(|e| panic!("preparing {sql}: {e}"));
    let width = st.column_count();
    let mut out = Vec::new();
    let mut q = st.query([]).unwrap_or_else(|e| panic!("{sql}: {e}"));
    while let Some(r) = q.next().unwrap_or_else(|e| panic!("{sql}: {e}")) {
        let mut row = Vec::with_capacity(width);
        for i in 0..width {
            row.push(match r.get_ref(i).expect("a cell") {
                ValueRef::Null => Cell::Null,
                ValueRef::Integer(i) => Cell::Int(i),
                ValueRef::Real(x) => Cell::Real(x.to_bits()),
                ValueRef::Text(t) => Cell::Text(t.to_vec()),
                ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
            });
        }
        out.push(row);
    }
    out.sort();
    out
}

/// `spec_tables` are compared by content; every other table with its rowids,
/// byte for byte.
fn contents(d: &Dir, db: &str, spec_tables: &[&str]) -> Contents {
    let conn = d.conn(db);
    let mut c = Contents::new();
    c.insert(
        "(schema)".into(),
        rows(
            &conn,
            r"SELECT type, name, tbl_name, sql FROM sqlite_schema
              WHERE name NOT LIKE '\_cutover%' ESCAPE '\' AND tbl_name NOT LIKE '\_cutover%' ESCAPE '\'",
        ),
    );
    let tables = rows(
        &conn,
        r"SELECT name FROM sqlite_schema WHERE type = 'table'
          AND name NOT LIKE 'sqlite\_%' ESCAPE '\' AND name NOT LIKE '\_cutover%' ESCAPE '\'",
    );
    for t in tables {
        let Cell::Text(name) = &t[0] else {
            panic!("a table name {t:?}")
        };
        let name = String::from_utf8(name.clone()).expect("a UTF-8 table name");
        let q = name.replace('"', "\"\"");
        let sql = if spec_tables.contains(&name.as_str()) {
            format!("SELECT * FROM \"{q}\"")
        } else {
            format!("SELECT rowid, * FROM \"{q}\"")
        };
        c.insert(name, rows(&conn, &sql));
    }
    c
}

/// Panics, naming every differing row, unless `actual` holds exactly what
/// `expected` holds.
fn assert_same(d: &Dir, actual: &str, expected: &str, spec_tables: &[&str], context: &str) {
    let a = contents(d, actual, spec_tables);
    let e = contents(d, expected, spec_tables);
    if a == e {
        return;
    }
    let mut problems = Vec::new();
    let names: std::collections::BTreeSet<&String> = a.keys().chain(e.keys()).collect();
    for name in names {
        let (ra, re) = match (a.get(name), e.get(name)) {
            (Some(ra), Some(re)) => (ra, re),
            (None, _) => {
                problems.push(format!("table {name} is missing from {actual}"));
                continue;
            }
            (_, None) => {
                problems.push(format!("table {name} is in {actual} but not in {expected}"));
                continue;
            }
        };
        let mut count: BTreeMap<&Vec<Cell>, i64> = BTreeMap::new();
        for r in ra {
            *count.entry(r).or_default() += 1;
        }
        for r in re {
            *count.entry(r).or_default() -= 1;
        }
        for (row, n) in count {
            if n > 0 {
                problems.push(format!("{name}: only in {actual} (x{n}): {row:?}"));
            } else if n < 0 {
                problems.push(format!("{name}: only in {expected} (x{}): {row:?}", -n));
            }
        }
    }
    problems.truncate(40);
    panic!(
        "{context}: {actual} does not hold what {expected} holds\n{}",
        problems.join("\n")
    );
}

// --- the application, the oracle and the rollback --------------------------------

/// Runs `argv[2]` (Python, dedented) with `con` open on `argv[1]` in
/// autocommit mode and `SQL` holding `argv[3]`.
const PY_APP: &str = r#"
import sqlite3, sys, textwrap
con = sqlite3.connect(sys.argv[1], timeout=5, isolation_level=None)
SQL = sys.argv[3]
exec(textwrap.dedent(sys.argv[2]))
print("ok")
"#;

/// Writes made by a Python program: `body` runs with `con` and `SQL`.
#[derive(Clone, Default)]
struct Writes {
    body: String,
    sql: String,
}

/// An SQL script run with `executescript` (each statement autocommits unless
/// the script says `BEGIN`).
fn sql(script: &str) -> Writes {
    Writes {
        body: "con.executescript(SQL)".into(),
        sql: script.into(),
    }
}

/// A Python program.
fn py(body: &str) -> Writes {
    Writes {
        body: body.into(),
        sql: String::new(),
    }
}

impl Writes {
    fn is_empty(&self) -> bool {
        self.body.is_empty()
    }
}

fn run_py(d: &Dir, db: &str, w: &Writes, what: &str) {
    let (code, out) = python(d.path(), PY_APP, &[db, &w.body, &w.sql]);
    assert!(
        code == 0 && out.ends_with("ok\n"),
        "{what} on {db} failed (exit {code}) in {}:\n{out}\n--- program ---\n{}\n--- SQL ---\n{}",
        d.path().display(),
        w.body,
        w.sql
    );
}

fn on_off(on: bool) -> &'static str {
    if on { "ON" } else { "OFF" }
}

/// One rollback scenario.
#[derive(Default)]
struct Case {
    name: &'static str,
    spec: Spec,
    /// Creates and fills the source.
    source: Writes,
    /// Creates the (empty) target.
    target: Writes,
    /// The application's DDL on the target after load, before `journal install`.
    before_install: Writes,
    /// The application's DDL on the target after `journal install`.
    after_install: Writes,
    /// The application's writes to the target.
    app: Writes,
    /// The same writes in source form, applied to a copy of the original source.
    oracle: Writes,
}

struct Rollback {
    d: Dir,
    /// `cutover --format json replay`, whatever it exited with.
    replay: Output,
}

impl Rollback {
    fn code(&self) -> Option<i32> {
        self.replay.code
    }

    /// The replay's JSON report.
    fn json(&self) -> serde_json::Value {
        self.replay.json()
    }

    /// Journal entries in the target, from `cutover journal status`.
    fn entries(&self) -> i64 {
        let j = self.d.json(&["journal", "status"], 0);
        j["entries"]
            .as_i64()
            .unwrap_or_else(|| panic!("entries in {j:#}"))
    }

    /// Replay exited 0 and the source holds exactly what the oracle holds.
    fn assert_exact(&self, spec_tables: &[&str]) {
        assert_ne!(
            contents(&self.d, "oracle.db", spec_tables),
            contents(&self.d, "original.db", spec_tables),
            "the scenario is vacuous: the oracle's writes changed nothing"
        );
        assert_eq!(
            self.code(),
            Some(0),
            "the replay did not reconcile the source with the target\n{}",
            self.replay
        );
        assert_same(
            &self.d,
            "source.db",
            "oracle.db",
            spec_tables,
            "after the replay",
        );
    }
}

/// Source and target created, the source copied to `original.db` and
/// `oracle.db`, `load`, the application's DDL, `journal install`, the
/// application's writes on the target and the oracle's on `oracle.db`,
/// `fence on`, `replay`.
fn rollback(c: &Case) -> Rollback {
    let d = Dir::new(c.name);
    d.spec(&c.spec);
    run_py(&d, "source.db", &c.source, "creating the source");
    run_py(&d, "target.db", &c.target, "creating the target");
    for copy in ["original.db", "oracle.db"] {
        d.copy_db("source.db", copy);
    }
    d.run(&["load"], 0);
    if !c.before_install.is_empty() {
        run_py(&d, "target.db", &c.before_install, "the application's DDL");
    }
    d.run(&["journal", "install"], 0);
    if !c.after_install.is_empty() {
        run_py(&d, "target.db", &c.after_install, "the application's DDL");
    }
    run_py(&d, "target.db", &c.app, "the application's writes");
    run_py(&d, "oracle.db", &c.oracle, "the oracle's writes");
    d.run(&["fence", "on"], 0);
    let replay = d
        .command(&["--format", "json", "replay", "--spec", SPEC])
        .output();
    support::assert_no_panic(&replay);
    Rollback { d, replay }
}

// --- specs -------------------------------------------------------------------------

/// A table keyed by `id` whose other columns are all copied as they are.
fn copies(name: &str, columns: impl IntoIterator<Item = impl AsRef<str>>) -> Table {
    columns
        .into_iter()
        .fold(Table::new(name).key(["id"]), |t, c| t.copy(c.as_ref()))
}

/// The running example's source and target, with `app` on the target and
/// `oracle` (source form) on the oracle.
fn orders_case(name: &'static str, app: Writes, oracle: Writes) -> Case {
    Case {
        name,
        spec: Spec::orders(),
        source: sql(ORDERS_SOURCE),
        target: sql(ORDERS_TARGET),
        app,
        oracle,
        ..Case::default()
    }
}

// --- 1. REPLACE over the same key ---------------------------------------------------

fn replace_over_the_same_key(recursive: bool) {
    let app = format!(
        "PRAGMA recursive_triggers = {};
         INSERT OR REPLACE INTO orders (id, cents, status) VALUES (101, 1400, 'closed');
         REPLACE INTO orders (id, cents, status) VALUES (102, 990, 'active');
         BEGIN;
         REPLACE INTO orders (id, cents, status) VALUES (103, 2000, 'active');
         REPLACE INTO orders (id, cents, status) VALUES (101, 1500, 'active');
         COMMIT;
         REPLACE INTO orders (id, cents, status) VALUES (104, 500, 'closed');",
        on_off(recursive)
    );
    let oracle = "
         INSERT OR REPLACE INTO orders (id, dollars, status) VALUES (101, '14.00', 'C');
         REPLACE INTO orders (id, dollars, status) VALUES (102, '9.90', 'A');
         REPLACE INTO orders (id, dollars, status) VALUES (103, '20.00', 'A');
         REPLACE INTO orders (id, dollars, status) VALUES (101, '15.00', 'A');
         REPLACE INTO orders (id, dollars, status) VALUES (104, '5.00', 'C');";
    let r = rollback(&orders_case("replace-same-key", sql(&app), sql(oracle)));
    r.assert_exact(&["orders"]);
}

#[test]
fn replace_over_the_same_key_recursive_triggers_on() {
    replace_over_the_same_key(true);
}

#[test]
fn replace_over_the_same_key_recursive_triggers_off() {
    replace_over_the_same_key(false);
}

// --- 2. REPLACE over another row's UNIQUE value --------------------------------------

const USERS: &str =
    "CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE, name TEXT);";
const USERS_ROWS: &str = "INSERT INTO users (id, email, name) VALUES
    (1, 'a@x', 'Ann'), (2, 'b@x', 'Bob'), (3, 'c@x', 'Cy'), (4, 'd@x', 'Di'), (5, 'e@x', 'Ed');";

/// SQLite deletes the rows holding the unique value; with recursive triggers
/// off it does so without firing their delete triggers.
fn replace_over_another_rows_unique_value(recursive: bool) {
    let writes = "
        REPLACE INTO users (id, email, name) VALUES (10, 'a@x', 'Ann again');
        INSERT OR REPLACE INTO users (id, email, name) VALUES (2, 'c@x', 'Bob at c');
        UPDATE OR REPLACE users SET email = 'd@x' WHERE id = 5;";
    let c = Case {
        name: "replace-unique",
        spec: Spec::new().table(copies("users", ["email", "name"])),
        source: sql(&format!("{USERS}\n{USERS_ROWS}")),
        target: sql(USERS),
        app: sql(&format!(
            "PRAGMA recursive_triggers = {};\n{writes}",
            on_off(recursive)
        )),
        oracle: sql(writes),
        ..Case::default()
    };
    let r = rollback(&c);
    r.assert_exact(&["users"]);
}

#[test]
fn replace_over_another_rows_unique_value_recursive_triggers_on() {
    replace_over_another_rows_unique_value(true);
}

#[test]
fn replace_over_another_rows_unique_value_recursive_triggers_off() {
    replace_over_another_rows_unique_value(false);
}

// --- 3. UPSERT -----------------------------------------------------------------------

#[test]
fn upsert_update_branch() {
    let app = "
        INSERT INTO orders (id, cents, status) VALUES (101, 1400, 'closed')
            ON CONFLICT (id) DO UPDATE SET cents = excluded.cents, status = excluded.status;
        INSERT INTO orders (id, cents, status) VALUES (102, 1, 'active')
            ON CONFLICT (id) DO UPDATE SET cents = orders.cents + 100;
        INSERT INTO orders (id, cents, status) VALUES (103, 1, 'closed')
            ON CONFLICT (id) DO UPDATE SET cents = excluded.cents WHERE orders.status = 'closed';";
    let oracle = "
        INSERT INTO orders (id, dollars, status) VALUES (101, '14.00', 'C')
            ON CONFLICT (id) DO UPDATE SET dollars = excluded.dollars, status = excluded.status;
        UPDATE orders SET dollars = '8.50' WHERE id = 102;";
    let r = rollback(&orders_case("upsert-update", sql(app), sql(oracle)));
    r.assert_exact(&["orders"]);
    assert_eq!(r.entries(), 2, "two upserts updated a row, one did nothing");
}

#[test]
fn upsert_insert_branch() {
    let app = "
        INSERT INTO orders (id, cents, status) VALUES (104, 900, 'active')
            ON CONFLICT (id) DO UPDATE SET cents = excluded.cents;
        INSERT INTO orders (id, cents, status) VALUES (105, 1, 'closed'), (101, 7, 'closed')
            ON CONFLICT (id) DO NOTHING;";
    let oracle = "
        INSERT INTO orders (id, dollars, status) VALUES (104, '9.00', 'A'), (105, '0.01', 'C');";
    let r = rollback(&orders_case("upsert-insert", sql(app), sql(oracle)));
    r.assert_exact(&["orders"]);
    assert_eq!(r.entries(), 2, "two rows inserted, one upsert did nothing");
}

// --- 4. writes that do not happen journal nothing ------------------------------------

#[test]
fn insert_or_ignore_that_ignores_journals_nothing() {
    let app = "
        INSERT OR IGNORE INTO orders (id, cents, status) VALUES (101, 9999, 'closed');
        INSERT INTO orders (id, cents, status) VALUES (102, 9999, 'active') ON CONFLICT DO NOTHING;
        INSERT OR IGNORE INTO orders (id, cents, status) VALUES (104, NULL, 'active');
        UPDATE OR IGNORE orders SET cents = NULL WHERE id = 103;
        UPDATE orders SET cents = 800 WHERE id = 102;";
    let oracle = "UPDATE orders SET dollars = '8.00' WHERE id = 102;";
    let r = rollback(&orders_case("or-ignore", sql(app), sql(oracle)));
    assert_eq!(r.entries(), 1, "only the last update changed a row");
    r.assert_exact(&["orders"]);
    assert_eq!(r.json()["applied"], 1, "{}", r.replay);
}

#[test]
fn a_failed_statement_rolled_back_by_the_app_journals_nothing() {
    let app = r#"
        con.execute("BEGIN")
        con.execute("UPDATE orders SET cents = 1400 WHERE id = 101")
        con.execute("DELETE FROM orders WHERE id = 103")
        try:
            con.execute("INSERT INTO orders (id, cents, status) VALUES (102, 1, 'active')")
            raise SystemExit("a duplicate key was accepted")
        except sqlite3.IntegrityError:
            con.execute("ROLLBACK")
        con.execute("BEGIN")
        con.execute("UPDATE orders SET cents = 800 WHERE id = 102")
        for bad in [
            "INSERT INTO orders (id, cents, status) VALUES (104, 1, 'active'), (101, 2, 'active')",
            "UPDATE orders SET cents = CASE id WHEN 103 THEN NULL ELSE cents + 1 END",
        ]:
            try:
                con.execute(bad)
                raise SystemExit("accepted: " + bad)
            except sqlite3.IntegrityError:
                pass
        con.execute("COMMIT")
    "#;
    let oracle = "UPDATE orders SET dollars = '8.00' WHERE id = 102;";
    let r = rollback(&orders_case("failed-statement", py(app), sql(oracle)));
    assert_eq!(
        r.entries(),
        1,
        "only the committed update of 102 happened; the rolled-back transaction and the two failed statements did not"
    );
    r.assert_exact(&["orders"]);
    assert_eq!(r.json()["applied"], 1, "{}", r.replay);
}

// --- 5. foreign-key actions in the target ----------------------------------------------

const FK_SCHEMA: &str = "
    CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
    CREATE TABLE orders (
        id INTEGER PRIMARY KEY,
        customer_id INTEGER REFERENCES customers (id) ON DELETE CASCADE ON UPDATE CASCADE,
        item TEXT
    );
    CREATE TABLE shipments (
        id INTEGER PRIMARY KEY,
        order_id INTEGER REFERENCES orders (id) ON DELETE SET NULL,
        carrier TEXT
    );
    CREATE TABLE invoices (
        id INTEGER PRIMARY KEY,
        customer_id INTEGER NOT NULL REFERENCES customers (id) DEFERRABLE INITIALLY DEFERRED,
        amount INTEGER
    );";

const FK_ROWS: &str = "
    INSERT INTO customers VALUES (1, 'Ann'), (2, 'Bob'), (3, 'Cy');
    INSERT INTO orders VALUES (10, 1, 'pen'), (11, 1, 'ink'), (20, 2, 'pad'), (30, 3, 'cap');
    INSERT INTO shipments VALUES (100, 10, 'post'), (101, 11, 'dhl'), (200, 20, 'ups'), (300, 30, 'post');
    INSERT INTO invoices VALUES (1000, 1, 5), (2000, 2, 7);";

const FK_TABLES: &[&str] = &["customers", "orders", "shipments", "invoices"];

/// Parent and child tables in the spec, the same foreign keys on both sides;
/// the application and the oracle both run with `foreign_keys = ON`, so the
/// oracle's own cascades say what the source must hold.
fn foreign_key_action(name: &'static str, writes: &str) {
    let writes = format!("PRAGMA foreign_keys = ON;\n{writes}");
    let c = Case {
        name,
        spec: Spec::new()
            .table(copies("customers", ["name"]))
            .table(copies("orders", ["customer_id", "item"]))
            .table(copies("shipments", ["order_id", "carrier"]))
            .table(copies("invoices", ["customer_id", "amount"])),
        source: sql(&format!("{FK_SCHEMA}\n{FK_ROWS}")),
        target: sql(FK_SCHEMA),
        app: sql(&writes),
        oracle: sql(&writes),
        ..Case::default()
    };
    let r = rollback(&c);
    r.assert_exact(FK_TABLES);
    let (code, out) = python(
        r.d.path(),
        "import sqlite3; print(sqlite3.connect('source.db').execute('PRAGMA foreign_key_check').fetchall())",
        &[],
    );
    assert_eq!((code, out.trim()), (0, "[]"), "the source's foreign keys");
}

#[test]
fn foreign_key_on_delete_cascade_then_set_null() {
    // Customer 3's order 30 is deleted by the cascade, and its shipment 300
    // loses its order by SET NULL.
    foreign_key_action("fk-cascade", "DELETE FROM customers WHERE id = 3;");
}

#[test]
fn foreign_key_on_delete_set_null() {
    foreign_key_action("fk-set-null", "DELETE FROM orders WHERE id = 11;");
}

#[test]
fn foreign_key_on_update_cascade() {
    // SQLite updates the child (order 30) before the parent's AFTER trigger.
    foreign_key_action(
        "fk-update-cascade",
        "UPDATE customers SET id = 4 WHERE id = 3;",
    );
}

#[test]
fn foreign_key_deferred_child_inserted_before_its_parent() {
    foreign_key_action(
        "fk-deferred",
        "BEGIN;
         INSERT INTO invoices VALUES (4000, 4, 9);
         INSERT INTO customers VALUES (4, 'Di');
         COMMIT;",
    );
}

// --- 6. a cascading foreign key outside the spec ---------------------------------------

/// The legacy application never enabled foreign keys, so the source's
/// `order_notes` survived every delete of an order; a replay must not let
/// SQLite's cascade delete them now.
#[test]
fn a_cascading_foreign_key_outside_the_spec_is_left_alone() {
    let notes = "
        CREATE TABLE order_notes (
            id INTEGER PRIMARY KEY,
            order_id INTEGER REFERENCES orders (id) ON DELETE CASCADE,
            body TEXT
        );
        INSERT INTO order_notes VALUES (1, 101, 'call first'), (2, 101, 'fragile'), (3, 102, 'gift');";
    let c = Case {
        source: sql(&format!("{ORDERS_SOURCE}\n{notes}")),
        ..orders_case(
            "fk-outside",
            sql("DELETE FROM orders WHERE id = 101;
                 INSERT INTO orders (id, cents, status) VALUES (101, 1300, 'closed');
                 BEGIN;
                 DELETE FROM orders WHERE id = 102;
                 INSERT INTO orders (id, cents, status) VALUES (102, 800, 'closed');
                 COMMIT;"),
            sql("DELETE FROM orders WHERE id = 101;
                 INSERT INTO orders (id, dollars, status) VALUES (101, '13.00', 'C');
                 DELETE FROM orders WHERE id = 102;
                 INSERT INTO orders (id, dollars, status) VALUES (102, '8.00', 'C');"),
        )
    };
    let r = rollback(&c);
    r.assert_exact(&["orders"]);
    assert_eq!(
        contents(&r.d, "source.db", &[])["order_notes"],
        contents(&r.d, "original.db", &[])["order_notes"],
        "order_notes must be byte for byte as before, rowids included"
    );
}

// --- 7. a column the spec ignores -----------------------------------------------------

/// `legacy_note` is not carried to the target. An ORM's replace (delete and
/// insert of the same key in one transaction) and `REPLACE INTO` leave the
/// key in place, so the column keeps its value there.
fn ignored_column_survives_a_replace(recursive: bool) {
    let source = "
        CREATE TABLE orders (
            id          INTEGER PRIMARY KEY,
            dollars     TEXT NOT NULL,
            status      TEXT NOT NULL,
            legacy_note TEXT DEFAULT 'none'
        );
        INSERT INTO orders VALUES
            (101, '12.50', 'A', 'vip'), (102, '7.50', 'C', 'late payer'), (103, '20.00', 'A', 'n/a');";
    let app = format!(
        "PRAGMA recursive_triggers = {};
         BEGIN;
         DELETE FROM orders WHERE id = 101;
         INSERT INTO orders (id, cents, status) VALUES (101, 1400, 'closed');
         COMMIT;
         REPLACE INTO orders (id, cents, status) VALUES (102, 990, 'active');",
        on_off(recursive)
    );
    let oracle = "
        UPDATE orders SET dollars = '14.00', status = 'C' WHERE id = 101;
        UPDATE orders SET dollars = '9.90', status = 'A' WHERE id = 102;";
    let c = Case {
        spec: Spec::orders().edit_table("orders", |t| t.ignore(["legacy_note"])),
        source: sql(source),
        ..orders_case("ignored-column", sql(&app), sql(oracle))
    };
    let r = rollback(&c);
    r.assert_exact(&["orders"]);
}

#[test]
fn ignored_column_survives_an_orm_replace_and_replace_into_recursive_triggers_on() {
    ignored_column_survives_a_replace(true);
}

#[test]
fn ignored_column_survives_an_orm_replace_and_replace_into_recursive_triggers_off() {
    ignored_column_survives_a_replace(false);
}

// --- 8. the application's own triggers ------------------------------------------------

const TOUCH: &str = "
    CREATE TRIGGER app_touch AFTER UPDATE ON orders FOR EACH ROW
    WHEN NEW.updated_at IS OLD.updated_at
    BEGIN
        UPDATE orders SET updated_at = OLD.updated_at + 1 WHERE id = NEW.id;
    END;";

/// A "touch updated_at" trigger that updates the row it fires on, created
/// before or after `journal install` (SQLite fires the newest trigger first).
fn touch_trigger(name: &'static str, after_install: bool, recursive: bool) {
    let source = "
        CREATE TABLE orders (
            id         INTEGER PRIMARY KEY,
            dollars    TEXT NOT NULL,
            status     TEXT NOT NULL,
            updated_at INTEGER NOT NULL DEFAULT 0
        );
        INSERT INTO orders VALUES (101, '12.50', 'A', 1), (102, '7.50', 'C', 1), (103, '20.00', 'A', 1);";
    let target = "
        CREATE TABLE orders (
            id         INTEGER PRIMARY KEY,
            cents      INTEGER NOT NULL,
            status     TEXT NOT NULL,
            updated_at INTEGER NOT NULL DEFAULT 0
        );";
    let app = format!(
        "PRAGMA recursive_triggers = {};
         UPDATE orders SET cents = 1400 WHERE id = 101;
         UPDATE orders SET status = 'closed' WHERE id IN (102, 103);
         INSERT INTO orders (id, cents, status, updated_at) VALUES (104, 900, 'active', 5);
         UPDATE orders SET cents = 950 WHERE id = 104;
         UPDATE orders SET cents = 1450, updated_at = 10 WHERE id = 101;",
        on_off(recursive)
    );
    let oracle = "
        UPDATE orders SET dollars = '14.00', updated_at = 2 WHERE id = 101;
        UPDATE orders SET status = 'C', updated_at = 2 WHERE id IN (102, 103);
        INSERT INTO orders VALUES (104, '9.00', 'A', 5);
        UPDATE orders SET dollars = '9.50', updated_at = 6 WHERE id = 104;
        UPDATE orders SET dollars = '14.50', updated_at = 10 WHERE id = 101;";
    let mut c = Case {
        spec: Spec::new().table(Table::orders().copy("updated_at")),
        source: sql(source),
        target: sql(target),
        ..orders_case(name, sql(&app), sql(oracle))
    };
    if after_install {
        c.after_install = sql(TOUCH);
    } else {
        c.before_install = sql(TOUCH);
    }
    let r = rollback(&c);
    r.assert_exact(&["orders"]);
}

#[test]
fn touch_trigger_created_before_journal_install_recursive_triggers_off() {
    touch_trigger("touch-before-off", false, false);
}

#[test]
fn touch_trigger_created_before_journal_install_recursive_triggers_on() {
    touch_trigger("touch-before-on", false, true);
}

#[test]
fn touch_trigger_created_after_journal_install_recursive_triggers_off() {
    touch_trigger("touch-after-off", true, false);
}

#[test]
fn touch_trigger_created_after_journal_install_recursive_triggers_on() {
    touch_trigger("touch-after-on", true, true);
}

// --- 9. a source trigger that swallows a replayed write --------------------------------

/// A legacy `BEFORE op` trigger on the source does `RAISE(IGNORE)`: the
/// replayed write changes no row. That is a conflict (exit 1), never
/// "applied", and the refused batch leaves the source's data as it was.
fn source_trigger_swallows(name: &'static str, op: &str) {
    let trigger = format!(
        "CREATE TRIGGER legacy_freeze BEFORE {op} ON orders BEGIN SELECT RAISE(IGNORE); END;"
    );
    // The running example's writes: 101 updated, 104 inserted, 103 deleted,
    // all in one batch.
    let c = Case {
        source: sql(&format!("{ORDERS_SOURCE}\n{trigger}")),
        ..orders_case(name, sql(ORDERS_APP_WRITES), sql(""))
    };
    let r = rollback(&c);
    assert_eq!(
        r.code(),
        Some(1),
        "a replayed {op} that changed no row must be a conflict\n{}",
        r.replay
    );
    assert_same(
        &r.d,
        "source.db",
        "original.db",
        &["orders"],
        "the refused batch must leave the source's data as it was",
    );
    assert_eq!(
        support::applied_seqs(&r.d).len(),
        0,
        "no journal entry may be recorded as applied"
    );
}

#[test]
fn source_trigger_swallowing_an_update_is_a_conflict() {
    source_trigger_swallows("swallow-update", "UPDATE");
}

#[test]
fn source_trigger_swallowing_an_insert_is_a_conflict() {
    source_trigger_swallows("swallow-insert", "INSERT");
}

#[test]
fn source_trigger_swallowing_a_delete_is_a_conflict() {
    source_trigger_swallows("swallow-delete", "DELETE");
}

// --- 10. values bit for bit ----------------------------------------------------------

/// `V` is a Python list of values bound as parameters, `E` a list of SQL
/// expressions (for text that is not UTF-8, which Python cannot bind). The
/// source holds rows with these values in both copy columns; the application
/// updates every row's `a` to its neighbour's value, sets `b` of the `E` rows
/// to another expression, inserts rows holding every value, and deletes two
/// rows. Neighbours may compare equal in SQL yet differ in bits or storage
/// class (-0.0 and 0.0, 1 and 1.0, 1 and '1'): such an update must be carried
/// too, and a before-image must match only the exact value.
fn values_round_trip(name: &'static str, v: &str, e: &str) -> Rollback {
    let lists = format!("import sys\nV = {v}\nE = {e}\nn, m = len(V), len(E)\n");
    let schema = "CREATE TABLE vals (id INTEGER PRIMARY KEY, a, b);";
    let seed = format!(
        r#"{lists}
con.executescript(SQL)
for i, v in enumerate(V):
    con.execute("INSERT INTO vals (id, a, b) VALUES (?, ?, ?)", (i + 1, v, V[(i + 3) % n]))
for j, e in enumerate(E):
    con.execute(f"INSERT INTO vals (id, a, b) VALUES (?, {{e}}, {{E[(j + 1) % m]}})", (50 + j,))
"#
    );
    let writes = format!(
        r#"{lists}
con.execute("BEGIN")
for i in range(n):
    con.execute("UPDATE vals SET a = ? WHERE id = ?", (V[(i + 1) % n], i + 1))
for i, v in enumerate(V):
    con.execute("INSERT INTO vals (id, a, b) VALUES (?, ?, ?)", (100 + i, v, V[(i + 5) % n]))
for j in range(m):
    con.execute(f"UPDATE vals SET b = {{E[(j + 2) % m]}} WHERE id = ?", (50 + j,))
for j, e in enumerate(E):
    con.execute(f"INSERT INTO vals (id, a, b) VALUES (?, {{e}}, ?)", (150 + j, V[j % n]))
con.execute("DELETE FROM vals WHERE id IN (2, 51)")
con.execute("COMMIT")
"#
    );
    let c = Case {
        name,
        spec: Spec::new().table(copies("vals", ["a", "b"])),
        source: Writes {
            body: seed,
            sql: schema.into(),
        },
        target: sql(schema),
        app: py(&writes),
        oracle: py(&writes),
        ..Case::default()
    };
    let r = rollback(&c);
    r.assert_exact(&["vals"]);
    r
}

#[test]
fn reals_round_trip_bit_for_bit() {
    let r = values_round_trip(
        "reals",
        "[0.1 + 0.2, -0.0, 0.0, float('inf'), float('-inf'), sys.float_info.max, 5e-324, \
         -5e-324, sys.float_info.min, 1, 1.0, 1e16, float(2**53), -1.5e-300, None]",
        "[]",
    );
    // The oracle is what it claims: row 1 holds -0.0, sign bit and all
    // (SQL's `=` cannot tell it from 0.0).
    let oracle = contents(&r.d, "oracle.db", &["vals"]);
    assert_eq!(
        oracle["vals"][0][..2],
        [Cell::Int(1), Cell::Real((-0.0f64).to_bits())],
        "the oracle's row 1"
    );
}

#[test]
fn integers_round_trip_exactly() {
    values_round_trip(
        "integers",
        "[2**53 + 1, -2**63, 2**63 - 1, 0, -1, 2**53, 2**63 - 2, -2**63 + 1, None]",
        "[]",
    );
}

#[test]
fn text_with_arbitrary_bytes_round_trips() {
    values_round_trip(
        "text",
        r#"['', 'a\x00b', 'ünïcødé ☃', '1', 1, '{"blob":"00ff"}', "it's \"quoted\"", '\\u0000']"#,
        "[\"CAST(x'ff00fe' AS TEXT)\", \"CAST(x'c0af' AS TEXT)\", \"CAST(x'00' AS TEXT)\", \
         \"CAST(x'' AS TEXT)\", \"CAST(x'f4908080' AS TEXT)\", \"CAST(x'61ed9fbf' AS TEXT)\"]",
    );
}

#[test]
fn blobs_round_trip() {
    values_round_trip(
        "blobs",
        r#"[b'', b'\x00\xff\x80', bytes(range(256)), '00ff80', b'{"blob":"00"}', '{"blob":"00ff80"}', None]"#,
        "[\"x''\", \"zeroblob(4)\", \"x'7b22626c6f62223a22414243227d'\", \"CAST('text' AS BLOB)\"]",
    );
}

// --- 11. wide tables -----------------------------------------------------------------

/// A table `w` of `width` columns (key included) and a narrow `small`, both in
/// the spec. After `journal install` the application must still read another
/// table and write the wide one.
fn wide_table(name: &'static str, width: usize) {
    let names: Vec<String> = (1..width).map(|j| format!("c{j}")).collect();
    let schema = format!(
        "CREATE TABLE w (id INTEGER PRIMARY KEY, {});
         CREATE TABLE small (id INTEGER PRIMARY KEY, x TEXT);",
        names.join(", ")
    );
    let common = format!(
        r#"
N = {width}
COLS = ", ".join(f"c{{j}}" for j in range(1, N))
MARKS = ", ".join("?" * N)
def row(r):
    return [r] + [r * 100000 + j if j % 3 else f"t{{r}}.{{j}}" for j in range(1, N)]
"#
    );
    let seed = format!(
        r#"{common}
con.executescript(SQL)
con.execute("INSERT INTO small VALUES (1, 'a'), (2, 'b')")
for r in (1, 2, 3):
    con.execute(f"INSERT INTO w (id, {{COLS}}) VALUES ({{MARKS}})", row(r))
"#
    );
    let writes = format!(
        r#"{common}
assert con.execute("SELECT count(*) FROM small").fetchone()[0] == 2
con.execute(f"UPDATE w SET c1 = 'one', c{{N - 1}} = 2.5 WHERE id = 1")
con.execute(f"INSERT INTO w (id, {{COLS}}) VALUES ({{MARKS}})", row(4))
con.execute("DELETE FROM w WHERE id = 2")
con.execute("UPDATE small SET x = 'B' WHERE id = 2")
"#
    );
    let c = Case {
        name,
        spec: Spec::new()
            .table(copies("w", &names))
            .table(copies("small", ["x"])),
        source: Writes {
            body: seed,
            sql: schema.clone(),
        },
        target: sql(&schema),
        app: py(&writes),
        oracle: py(&writes),
        ..Case::default()
    };
    let r = rollback(&c);
    r.assert_exact(&["w", "small"]);
}

#[test]
fn a_64_column_table() {
    wide_table("wide-64", 64);
}

#[test]
fn a_2000_column_table() {
    wide_table("wide-2000", 2000);
}

// --- 12. trusted_schema = OFF ---------------------------------------------------------

#[test]
fn writes_with_trusted_schema_off() {
    let app = "
        PRAGMA trusted_schema = OFF;
        INSERT INTO orders (id, cents, status) VALUES (104, 900, 'active');
        UPDATE orders SET cents = 1400 WHERE id = 101;
        DELETE FROM orders WHERE id = 103;";
    let oracle = "
        INSERT INTO orders (id, dollars, status) VALUES (104, '9.00', 'A');
        UPDATE orders SET dollars = '14.00' WHERE id = 101;
        DELETE FROM orders WHERE id = 103;";
    let r = rollback(&orders_case("trusted-schema-off", sql(app), sql(oracle)));
    r.assert_exact(&["orders"]);
}
