//! The harness of the change-feed tests (`apply_contract`, `feed_validation`,
//! `drill_feed`): a temporary folder with a spec and real SQLite files, the
//! built `cutover` binary run inside it, feed lines built as JSON, and every
//! table of a database read back row by row so a test can say "nothing
//! changed" exactly.
//!
//! Self-contained on purpose: `tests/support/` belongs to the other suites.
//! A command that exits with a code the test did not expect panics with the
//! command, its folder and everything it printed (ripgrep `tests/util.rs`).

#![allow(
    dead_code,
    reason = "each test binary uses a different part of this harness"
)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rusqlite::Connection;
use rusqlite::types::Value;
use serde_json::{Value as Json, json};

pub const INVOICES_SPEC: &str = include_str!("../../fixtures/invoices/spec.toml");
pub const INVOICES_SOURCE: &str = include_str!("../../fixtures/invoices/source.sql");
pub const INVOICES_TARGET: &str = include_str!("../../fixtures/invoices/target.sql");
pub const ORDERS_SPEC: &str = include_str!("../../fixtures/orders/spec.toml");
pub const ORDERS_SOURCE: &str = include_str!("../../fixtures/orders/source.sql");
pub const ORDERS_TARGET: &str = include_str!("../../fixtures/orders/target.sql");
pub const ORDERS_APP_WRITES: &str = include_str!("../../fixtures/orders/app_writes.sql");

/// The exit code of a `CUTOVER_FAULT` crash point.
pub const FAULT_EXIT: i32 = 73;

/// The feed name of the invoice helpers.
pub const BILLING: &str = "billing";

/// The simple (id, status) table of the batch tests: no revision column,
/// `id` checked `min = 1`, `status` one of "new", "done".
pub fn items_spec(on_change: Option<&str>) -> String {
    let policy = on_change
        .map(|p| format!("on_change = \"{p}\"\n"))
        .unwrap_or_default();
    format!(
        r#"[source]
url = "sqlite://source.db"

[target]
url = "sqlite://target.db"

[[tables]]
name = "items"
key = ["id"]
{policy}
[[tables.columns]]
source = "id"
min = 1

[[tables.columns]]
source = "status"
values = ["new", "done"]
"#
    )
}

pub const ITEMS_SQL: &str = "CREATE TABLE items (id INTEGER PRIMARY KEY, status TEXT NOT NULL);";

/// The invoices spec with a second table, `credits`, of the very same shape:
/// the same key in another table must be another record.
pub fn two_tables_spec() -> String {
    let credits = INVOICES_SPEC
        .split("[[tables]]")
        .nth(1)
        .expect("the invoices spec has a [[tables]] section")
        .replace("name = \"invoices\"", "name = \"credits\"");
    format!("{INVOICES_SPEC}\n[[tables]]{credits}")
}

pub fn two_tables_sql(fixture: &str) -> String {
    format!(
        "{fixture}\n{}",
        fixture.replace("CREATE TABLE invoices", "CREATE TABLE credits")
    )
}

/// What one run of the binary did.
pub struct Run {
    pub cmd: String,
    pub dir: PathBuf,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "\n--- command: {}\n--- cwd: {}\n--- exit: {}\n--- stdout:\n{}\n--- stderr:\n{}\n",
            self.cmd,
            self.dir.display(),
            self.code,
            self.stdout,
            self.stderr
        )
    }
}

impl Run {
    /// Panics, showing everything, unless the exit code is `code`.
    #[track_caller]
    pub fn code(self, code: i32) -> Run {
        assert_eq!(self.code, code, "unexpected exit code{self}");
        self
    }

    /// Stdout as the one JSON document `--format json` promises.
    #[track_caller]
    pub fn json(&self) -> Json {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}){self}"))
    }

    /// The `deliveries[i]` entry of an apply report.
    #[track_caller]
    pub fn delivery(&self, i: usize) -> Json {
        let j = self.json();
        j["deliveries"]
            .get(i)
            .cloned()
            .unwrap_or_else(|| panic!("no deliveries[{i}] in the report{self}"))
    }

    /// The `rejected_lines` of an apply report (empty when absent).
    #[track_caller]
    pub fn rejected(&self) -> Vec<Json> {
        self.json()["rejected_lines"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// Every table of a database, schema and rows, rows in a stable order.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub schema: Vec<(String, String, Option<String>)>,
    pub tables: BTreeMap<String, Vec<Vec<Value>>>,
}

impl Snapshot {
    /// Names what differs from `other`, table by table.
    pub fn differences(&self, other: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        if self.schema != other.schema {
            out.push(format!(
                "schema: {:?}\n  became {:?}",
                self.schema, other.schema
            ));
        }
        let names: std::collections::BTreeSet<&String> =
            self.tables.keys().chain(other.tables.keys()).collect();
        for n in names {
            let (a, b) = (self.tables.get(n), other.tables.get(n));
            if a != b {
                out.push(format!("table {n}: {a:?}\n  became {b:?}"));
            }
        }
        out
    }

    pub fn rows(&self, table: &str) -> usize {
        self.tables.get(table).map_or(0, Vec::len)
    }
}

/// Panics naming each table that differs.
#[track_caller]
pub fn assert_unchanged(before: &Snapshot, after: &Snapshot, what: &dyn fmt::Display) {
    let d = before.differences(after);
    assert!(
        d.is_empty(),
        "the database changed ({what}):\n{}",
        d.join("\n")
    );
}

/// A temporary folder holding one migration: spec, source and target.
pub struct Sandbox {
    tmp: tempfile::TempDir,
}

impl Sandbox {
    pub fn new(name: &str, spec: &str, source_sql: &str, target_sql: &str) -> Sandbox {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("cutover-feed-{name}-"))
            .tempdir()
            .expect("creating a temporary folder");
        let s = Sandbox { tmp };
        s.write("spec.toml", spec);
        s.create_db("source.db", source_sql);
        s.create_db("target.db", target_sql);
        s
    }

    /// The invoices fixture: composite key, revision, money, currency.
    pub fn invoices(name: &str) -> Sandbox {
        Sandbox::new(name, INVOICES_SPEC, INVOICES_SOURCE, INVOICES_TARGET)
    }

    /// The (id, status) table, optionally with an `on_change` policy.
    pub fn items(name: &str, on_change: Option<&str>) -> Sandbox {
        Sandbox::new(name, &items_spec(on_change), ITEMS_SQL, ITEMS_SQL)
    }

    /// The running example, fenced at boundary 3 after the application's
    /// writes (101 → 1400, 104 inserted, 103 deleted); `gap` pushes the
    /// journal's AUTOINCREMENT counter on before each write, so the journal's
    /// `seq` has gaps.
    pub fn orders_fenced(name: &str, gap: i64) -> Sandbox {
        let s = Sandbox::new(name, ORDERS_SPEC, ORDERS_SOURCE, ORDERS_TARGET);
        s.cutover(&["load", "--spec", "spec.toml"]).code(0);
        s.cutover(&["journal", "install", "--spec", "spec.toml"])
            .code(0);
        for stmt in ORDERS_APP_WRITES
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--"))
        {
            if gap > 0 {
                // A gap in seq, as entries deleted from the journal (or a
                // PostgreSQL sequence) leave: a placeholder entry `gap` past
                // the last, removed after the next write took the seq after it.
                s.exec(
                    "target.db",
                    &format!(
                        "INSERT INTO _cutover_journal_1 (seq, op) SELECT coalesce(max(seq), 0) + {gap}, 'gap' FROM _cutover_journal;"
                    ),
                );
            }
            s.exec("target.db", stmt);
            if gap > 0 {
                s.exec(
                    "target.db",
                    "DELETE FROM _cutover_journal_1 WHERE op = 'gap';",
                );
            }
        }
        s.cutover(&["fence", "on", "--spec", "spec.toml"]).code(0);
        s
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path().join(name)
    }

    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.join(name);
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
        p
    }

    /// Writes a feed file, one JSON line per change.
    pub fn feed(&self, name: &str, lines: &[Json]) -> PathBuf {
        self.write(name, feed_text(lines))
    }

    pub fn create_db(&self, name: &str, sql: &str) {
        let p = self.join(name);
        assert!(!p.exists(), "{} already exists", p.display());
        let c = Connection::open(&p).unwrap_or_else(|e| panic!("creating {name}: {e}"));
        c.execute_batch(sql)
            .unwrap_or_else(|e| panic!("running SQL on new {name}: {e}\n{sql}"));
    }

    pub fn conn(&self, db: &str) -> Connection {
        let p = self.join(db);
        assert!(p.exists(), "{} does not exist", p.display());
        let c = Connection::open(&p).unwrap_or_else(|e| panic!("opening {db}: {e}"));
        c.busy_timeout(std::time::Duration::from_secs(5))
            .expect("setting a busy timeout");
        c
    }

    pub fn exec(&self, db: &str, sql: &str) {
        self.conn(db)
            .execute_batch(sql)
            .unwrap_or_else(|e| panic!("running SQL on {db}: {e}\n{sql}"));
    }

    /// Rows of a query, each value with its storage class.
    pub fn query(&self, db: &str, sql: &str) -> Vec<Vec<Value>> {
        let c = self.conn(db);
        let mut st = c
            .prepare(sql)
            .unwrap_or_else(|e| panic!("preparing on {db}: {e}\n{sql}"));
        let n = st.column_count();
        st.query_map([], |r| (0..n).map(|i| r.get::<_, Value>(i)).collect())
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<Vec<Value>>>>())
            .unwrap_or_else(|e| panic!("querying {db}: {e}\n{sql}"))
    }

    /// One integer from a query.
    pub fn scalar(&self, db: &str, sql: &str) -> i64 {
        self.conn(db)
            .query_row(sql, [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("querying {db}: {e}\n{sql}"))
    }

    pub fn has_table(&self, db: &str, table: &str) -> bool {
        self.conn(db)
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get::<_, i64>(0),
            )
            .expect("reading the catalogue")
            == 1
    }

    /// Rows of a table, 0 when the table does not exist.
    pub fn count(&self, db: &str, table: &str) -> i64 {
        if !self.has_table(db, table) {
            return 0;
        }
        self.scalar(db, &format!("SELECT count(*) FROM \"{table}\""))
    }

    /// The checkpoint of a feed as the database holds it (0 before any).
    pub fn checkpoint(&self, db: &str, feed: &str) -> i64 {
        if !self.has_table(db, "_cutover_deliveries") {
            return 0;
        }
        self.conn(db)
            .query_row(
                "SELECT coalesce(max(last_position), 0) FROM _cutover_deliveries WHERE feed = ?1",
                [feed],
                |r| r.get(0),
            )
            .expect("reading the checkpoint")
    }

    /// Every table of a database, schema included.
    pub fn snapshot(&self, db: &str) -> Snapshot {
        let c = self.conn(db);
        let mut st = c
            .prepare("SELECT type, name, sql FROM sqlite_schema ORDER BY type, name")
            .expect("reading the catalogue");
        let schema: Vec<(String, String, Option<String>)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect())
            .expect("reading the catalogue");
        let mut tables = BTreeMap::new();
        for (kind, name, _) in &schema {
            if kind != "table" {
                continue;
            }
            let mut rows = self.query(db, &format!("SELECT * FROM \"{name}\""));
            rows.sort_by_key(|r| format!("{r:?}"));
            tables.insert(name.clone(), rows);
        }
        Snapshot { schema, tables }
    }

    /// Runs `cutover ARGS --format json` in the folder, without a crash point.
    pub fn cutover(&self, args: &[&str]) -> Run {
        self.cutover_env(args, None)
    }

    /// Runs `cutover ARGS --format json` with `CUTOVER_FAULT` set (or unset).
    pub fn cutover_env(&self, args: &[&str], fault: Option<&str>) -> Run {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--format", "json"]);
        run_in(self.path(), &all, fault)
    }

    /// `cutover apply --spec spec.toml --feed FEED --into SIDE --format json`.
    pub fn apply(&self, feed: &str, into: &str) -> Run {
        self.cutover(&[
            "apply",
            "--spec",
            "spec.toml",
            "--feed",
            feed,
            "--into",
            into,
        ])
    }

    /// Writes `lines` to `name` and applies them into the target.
    pub fn apply_lines(&self, name: &str, lines: &[Json]) -> Run {
        self.feed(name, lines);
        self.apply(name, "target")
    }

    /// The invoices of a table as (source, record_key, rev, amount_minor,
    /// currency), ordered by key.
    pub fn invoices_in(&self, table: &str) -> Vec<(String, String, i64, i64, String)> {
        let c = self.conn("target.db");
        let sql = format!(
            "SELECT source, record_key, rev, amount_minor, currency FROM \"{table}\"
             ORDER BY source, account, entity, record_key"
        );
        let mut st = c.prepare(&sql).expect("preparing");
        st.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .and_then(|rows| rows.collect())
        .expect("reading invoices")
    }

    /// The evidence rows: (tbl, key, revision, kind, row).
    pub fn evidence(&self) -> Vec<(String, String, i64, String, Option<String>)> {
        if !self.has_table("target.db", "_cutover_revisions") {
            return Vec::new();
        }
        let c = self.conn("target.db");
        let mut st = c
            .prepare(
                "SELECT tbl, key, revision, kind, row FROM _cutover_revisions
                 ORDER BY tbl, key, revision, kind",
            )
            .expect("preparing");
        st.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .and_then(|rows| rows.collect())
        .expect("reading evidence")
    }

    /// The items table as (id, status).
    pub fn items_rows(&self, db: &str) -> Vec<(i64, String)> {
        let c = self.conn(db);
        let mut st = c
            .prepare("SELECT id, status FROM items ORDER BY id")
            .expect("preparing");
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect())
            .expect("reading items")
    }
}

/// Runs the built binary in `dir`; a crash point only when `fault` says so.
pub fn run_in(dir: &Path, args: &[&str], fault: Option<&str>) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cutover"));
    cmd.current_dir(dir).args(args).env_remove("CUTOVER_FAULT");
    if let Some(f) = fault {
        cmd.env("CUTOVER_FAULT", f);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running cutover {args:?}: {e}"));
    Run {
        cmd: format!(
            "{}cutover {}",
            fault
                .map(|f| format!("CUTOVER_FAULT={f} "))
                .unwrap_or_default(),
            args.join(" ")
        ),
        dir: dir.to_path_buf(),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Feed lines as JSON Lines text.
pub fn feed_text(lines: &[Json]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

// --- feed lines ---------------------------------------------------------

/// The key object of an invoice in scope `source` (account A-100, entity E1).
pub fn inv_key(source: &str, record_key: &str) -> Json {
    json!({"source": source, "account": "A-100", "entity": "E1", "record_key": record_key})
}

/// A whole invoice row in target form.
pub fn inv_row(source: &str, record_key: &str, rev: i64, amount: i64, currency: &str) -> Json {
    json!({
        "source": source, "account": "A-100", "entity": "E1", "record_key": record_key,
        "rev": rev, "amount_minor": amount, "currency": currency,
    })
}

/// An upsert line of any feed and table.
pub fn upsert(
    feed: &str,
    delivery: &str,
    position: i64,
    table: &str,
    key: Json,
    revision: Option<i64>,
    row: Json,
) -> Json {
    let mut l = json!({
        "feed": feed, "delivery": delivery, "position": position, "table": table,
        "op": "upsert", "key": key, "row": row,
    });
    if let Some(r) = revision {
        l["revision"] = json!(r);
    }
    l
}

/// A delete line of any feed and table.
pub fn delete(
    feed: &str,
    delivery: &str,
    position: i64,
    table: &str,
    key: Json,
    revision: Option<i64>,
) -> Json {
    let mut l = json!({
        "feed": feed, "delivery": delivery, "position": position, "table": table,
        "op": "delete", "key": key,
    });
    if let Some(r) = revision {
        l["revision"] = json!(r);
    }
    l
}

/// An EUR invoice of scope "erp" in feed "billing", table "invoices".
pub fn inv(delivery: &str, position: i64, record_key: &str, rev: i64, amount: i64) -> Json {
    inv_at(
        "invoices", "erp", delivery, position, record_key, rev, amount,
    )
}

/// An EUR invoice in any table and scope, feed "billing".
pub fn inv_at(
    table: &str,
    source: &str,
    delivery: &str,
    position: i64,
    record_key: &str,
    rev: i64,
    amount: i64,
) -> Json {
    upsert(
        BILLING,
        delivery,
        position,
        table,
        inv_key(source, record_key),
        Some(rev),
        inv_row(source, record_key, rev, amount, "EUR"),
    )
}

/// A delete of an "erp" invoice at a revision, feed "billing".
pub fn inv_delete(delivery: &str, position: i64, record_key: &str, rev: i64) -> Json {
    delete(
        BILLING,
        delivery,
        position,
        "invoices",
        inv_key("erp", record_key),
        Some(rev),
    )
}

/// An upsert of the items table, feed "items".
pub fn item(delivery: &str, position: i64, id: i64, status: &str) -> Json {
    upsert(
        "items",
        delivery,
        position,
        "items",
        json!({"id": id}),
        None,
        json!({"id": id, "status": status}),
    )
}
