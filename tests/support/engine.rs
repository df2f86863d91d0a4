//! The seam between the harness and the database engine under test.
//!
//! Every fixture a test sets up or reads back (creating a database from a
//! script, running SQL, dumping a table in key order, counting rows, the
//! images "nothing changed" compares) goes through [`Engine`], so that the
//! same tests run against another engine by giving `Dir` another
//! implementation. [`Sqlite`] keeps each database as a file of the test's
//! folder, named by the spec as `sqlite://NAME`.
//!
//! The PostgreSQL engine (`postgres.rs`) maps each database name of a folder
//! (`source.db`, `target.db`) to a schema of a database of the test's own,
//! answers `url` with a `postgres://` url, and lists those databases in
//! `external` so that `Dir::snapshot` images them; a `Layout` puts each side
//! of a migration on one engine or the other. SQL text that tests pass to
//! `exec` and `query` is the engine's own dialect; tests that need SQLite itself (a connection held open, triggers
//! switched off, `PRAGMA`s) reach it through [`Engine::as_sqlite`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use rusqlite::types::Value;

/// Rows as a query returns them, each value with its storage class.
pub type Rows = Vec<Vec<Value>>;

/// One engine holding the databases of one test folder.
pub trait Engine: Send + Sync {
    /// A short name for messages: `sqlite`.
    fn name(&self) -> &'static str;

    /// The url a spec in the folder gives for database `db`.
    fn url(&self, db: &str) -> String;

    /// Creates database `db` from a script; it must not exist yet.
    fn create(&self, db: &str, sql: &str);

    /// Creates database `to` as a copy of `db` (an oracle, a second source);
    /// `to` must not exist yet.
    fn copy_db(&self, db: &str, to: &str);

    /// Runs a script on `db`; the engine's error message if it fails.
    fn exec(&self, db: &str, sql: &str) -> Result<(), String>;

    /// Every row of a query on `db`.
    fn query(&self, db: &str, sql: &str) -> Result<Rows, String>;

    /// The tables of `db`, control tables included, by name.
    fn tables(&self, db: &str) -> BTreeSet<String>;

    /// The primary key of a table, its columns in key order (empty when it
    /// has none).
    fn primary_key(&self, db: &str, table: &str) -> Vec<String>;

    /// The number of columns of a table.
    fn width(&self, db: &str, table: &str) -> usize;

    /// A name quoted as an identifier.
    fn quote(&self, name: &str) -> String {
        format!("\"{}\"", name.replace('"', "\"\""))
    }

    /// The catalogue of `db` as `(kind, name, definition)`, in a stable order.
    fn catalogue(&self, db: &str) -> Vec<(String, String, Option<String>)>;

    /// The databases this engine keeps outside the folder, which
    /// `Dir::snapshot` must image; none for SQLite, whose databases are
    /// files of the folder and compared byte for byte with it.
    fn external(&self) -> Vec<String>;

    /// The SQLite engine, for the tests that need SQLite itself.
    fn as_sqlite(&self) -> Option<&Sqlite>;

    /// The engine holding database `db` (`sqlite`, `postgres`), for a
    /// scenario that needs SQL of one dialect.
    fn engine_of(&self, _db: &str) -> &'static str {
        self.name()
    }

    /// Runs a script on `db` through the engine's own client in another OS
    /// process (Python's `sqlite3`, `psql`), as an application would: the
    /// client's error message if it fails. `dir` is the folder.
    fn client(&self, dir: &Path, db: &str, sql: &str) -> Result<(), String>;

    /// A table's whole content ordered by its primary key (by every column
    /// when it has none).
    fn dump(&self, db: &str, table: &str) -> Rows {
        let key = self.primary_key(db, table);
        let order = if key.is_empty() {
            (1..=self.width(db, table).max(1))
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
        } else {
            key.iter().map(|c| self.quote(c)).collect()
        };
        let sql = format!(
            "SELECT * FROM {} ORDER BY {}",
            self.quote(table),
            order.join(", ")
        );
        self.query(db, &sql)
            .unwrap_or_else(|e| panic!("dumping {table} of {db}: {e}\n{sql}"))
    }

    /// The rows of a table; 0 when the table does not exist.
    fn count(&self, db: &str, table: &str) -> i64 {
        if !self.tables(db).contains(table) {
            return 0;
        }
        let sql = format!("SELECT count(*) FROM {}", self.quote(table));
        match self.query(db, &sql).as_deref() {
            Ok([row]) => match row.as_slice() {
                [Value::Integer(n)] => *n,
                other => panic!("count(*) of {table} in {db} gave {other:?}"),
            },
            other => panic!("counting {table} of {db}: {other:?}"),
        }
    }

    /// Every table of `db`, catalogue and rows, to say exactly what changed.
    fn image(&self, db: &str) -> Image {
        let schema = self.catalogue(db);
        let mut tables = BTreeMap::new();
        for name in self.tables(db) {
            let sql = format!("SELECT * FROM {}", self.quote(&name));
            let mut rows = self
                .query(db, &sql)
                .unwrap_or_else(|e| panic!("reading {name} of {db}: {e}"));
            rows.sort_by_key(|r| format!("{r:?}"));
            tables.insert(name, rows);
        }
        Image { schema, tables }
    }
}

/// The source's table of replay verdicts, which "nothing changed" allows.
pub const VERDICTS: &str = "_cutover_replays";

/// One database, catalogue and rows, rows in a stable order: what a test
/// compares to say "this database did not change" table by table.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    pub schema: Vec<(String, String, Option<String>)>,
    pub tables: BTreeMap<String, Rows>,
}

impl Image {
    /// Names what differs from `other`, table by table. The rows of
    /// `_cutover_replays` are left out: every replay that runs to its end
    /// records its verdict there, even one that changed nothing else
    /// (docs/journal.md, "The replay's verdict"); a test of the verdict
    /// reads the table itself.
    pub fn differences(&self, other: &Image) -> Vec<String> {
        let mut out = Vec::new();
        if self.schema != other.schema {
            out.push(format!(
                "schema: {:?}\n  became {:?}",
                self.schema, other.schema
            ));
        }
        let names: BTreeSet<&String> = self.tables.keys().chain(other.tables.keys()).collect();
        for n in names.into_iter().filter(|n| *n != VERDICTS) {
            let (a, b) = (self.tables.get(n), other.tables.get(n));
            if a != b {
                out.push(format!("table {n}: {a:?}\n  became {b:?}"));
            }
        }
        out
    }

    /// The rows of a table (0 when it does not exist).
    pub fn rows(&self, table: &str) -> usize {
        self.tables.get(table).map_or(0, Vec::len)
    }

    /// Panics naming each table that differs from `after`.
    #[track_caller]
    pub fn assert_same(&self, after: &Image, what: &dyn fmt::Display) {
        let d = self.differences(after);
        assert!(
            d.is_empty(),
            "the database changed ({what}):\n{}",
            d.join("\n")
        );
    }
}

/// SQLite: each database is a file of the folder.
pub struct Sqlite {
    dir: PathBuf,
}

impl Sqlite {
    pub fn new(dir: &Path) -> Sqlite {
        Sqlite {
            dir: dir.to_path_buf(),
        }
    }

    /// A connection of the test's own, as any other writer would have.
    pub fn connect(&self, db: &str) -> Connection {
        let p = self.dir.join(db);
        assert!(p.exists(), "{} does not exist", p.display());
        let conn = Connection::open(&p).unwrap_or_else(|e| panic!("opening {db}: {e}"));
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .expect("setting a busy timeout");
        conn
    }

    fn strings(&self, db: &str, sql: &str, param: &str) -> Vec<String> {
        let conn = self.connect(db);
        let mut st = conn
            .prepare(sql)
            .unwrap_or_else(|e| panic!("reading the catalogue of {db}: {e}"));
        st.query_map([param], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect())
            .unwrap_or_else(|e| panic!("reading the catalogue of {db}: {e}"))
    }
}

impl Engine for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn url(&self, db: &str) -> String {
        format!("sqlite://{db}")
    }

    fn create(&self, db: &str, sql: &str) {
        let p = self.dir.join(db);
        assert!(!p.exists(), "{} already exists", p.display());
        let conn = Connection::open(&p).unwrap_or_else(|e| panic!("creating {db}: {e}"));
        conn.execute_batch(sql)
            .unwrap_or_else(|e| panic!("running SQL on new {db}: {e}\n{sql}"));
    }

    fn copy_db(&self, db: &str, to: &str) {
        let (from, to) = (self.dir.join(db), self.dir.join(to));
        assert!(!to.exists(), "{} already exists", to.display());
        std::fs::copy(&from, &to)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), to.display()));
    }

    fn exec(&self, db: &str, sql: &str) -> Result<(), String> {
        self.connect(db)
            .execute_batch(sql)
            .map_err(|e| e.to_string())
    }

    fn query(&self, db: &str, sql: &str) -> Result<Rows, String> {
        let conn = self.connect(db);
        let mut st = conn.prepare(sql).map_err(|e| e.to_string())?;
        let width = st.column_count();
        let rows = st
            .query_map([], |r| {
                (0..width)
                    .map(|i| r.get::<_, Value>(i))
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| e.to_string())?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| e.to_string())
    }

    fn tables(&self, db: &str) -> BTreeSet<String> {
        self.strings(
            db,
            "SELECT name FROM sqlite_schema WHERE type = ?1",
            "table",
        )
        .into_iter()
        .collect()
    }

    fn primary_key(&self, db: &str, table: &str) -> Vec<String> {
        self.strings(
            db,
            "SELECT name FROM pragma_table_info(?1) WHERE pk > 0 ORDER BY pk",
            table,
        )
    }

    fn width(&self, db: &str, table: &str) -> usize {
        self.strings(db, "SELECT name FROM pragma_table_info(?1)", table)
            .len()
    }

    fn catalogue(&self, db: &str) -> Vec<(String, String, Option<String>)> {
        let conn = self.connect(db);
        let mut st = conn
            .prepare("SELECT type, name, sql FROM sqlite_schema ORDER BY type, name")
            .expect("reading the catalogue");
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect())
            .expect("reading the catalogue")
    }

    fn external(&self) -> Vec<String> {
        Vec::new()
    }

    fn as_sqlite(&self) -> Option<&Sqlite> {
        Some(self)
    }

    fn client(&self, dir: &Path, db: &str, sql: &str) -> Result<(), String> {
        let (code, out) = super::run::python(dir, PY_SCRIPT, &[db, sql]);
        if code == 0 { Ok(()) } else { Err(out) }
    }
}

/// A Python program that runs a script on a SQLite database in its own
/// process; it prints the error and exits 3 if the script fails.
const PY_SCRIPT: &str = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=2)
try:
    con.executescript(sys.argv[2])
except sqlite3.Error as e:
    print("error:", e)
    sys.exit(3)
"#;

/// SQLite's BINARY order of two values: NULL, numbers by value, text by
/// bytes, blobs by bytes, as cutover orders keys on every engine.
pub fn binary_cmp(a: &Value, b: &Value) -> std::cmp::Ordering {
    use std::cmp::Ordering::Equal;
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Integer(_) | Value::Real(_) => 1,
            Value::Text(_) => 2,
            Value::Blob(_) => 3,
        }
    }
    let num = |v: &Value| match v {
        Value::Integer(i) => *i as f64,
        Value::Real(r) => *r,
        _ => 0.0,
    };
    match (a, b) {
        (Value::Integer(x), Value::Integer(y)) => x.cmp(y),
        (Value::Text(x), Value::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Blob(x), Value::Blob(y)) => x.cmp(y),
        _ if rank(a) == rank(b) && rank(a) == 1 => num(a).partial_cmp(&num(b)).unwrap_or(Equal),
        _ => rank(a).cmp(&rank(b)),
    }
}
