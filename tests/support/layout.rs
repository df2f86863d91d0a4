//! The layouts a shared scenario runs on: which side of a migration lives
//! on which engine.
//!
//! A database of a folder is on the target side when its name starts with
//! `target` or is `t.db`, on the source side otherwise (an oracle copy
//! follows the database it copies). [`Layered`] routes each database to its
//! engine: a SQLite file of the folder, a schema of a PostgreSQL database
//! of the test's ([`super::postgres::Postgres`]), or a MySQL database of
//! its own ([`super::mysql::MySql`]). A layout that needs a server skips
//! with one line when none answers, unless its engine is required (`CI`
//! set, or named in `CUTOVER_REQUIRE_ENGINES`), where that is a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::Mutex;

use super::engine::{Engine, Rows, Sqlite};
use super::mysql::MySql;
use super::postgres::Postgres;

/// An engine a side of a layout is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    Sqlite,
    Pg,
    My,
}

/// Where each side of a migration lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Both SQLite files (the folder as every other test has it).
    Sqlite,
    /// A SQLite source, a PostgreSQL target.
    SqliteToPg,
    /// Both PostgreSQL: two schemas of the test's database.
    PgToPg,
    /// A PostgreSQL source, a SQLite target.
    PgToSqlite,
    /// A MySQL source, a PostgreSQL target.
    MyToPg,
    /// A PostgreSQL source, a MySQL target.
    PgToMy,
    /// Both MySQL: two databases of the server.
    MyToMy,
    /// A SQLite source, a MySQL target.
    SqliteToMy,
    /// A MySQL source, a SQLite target.
    MyToSqlite,
}

impl Layout {
    /// The layout a test function is named after (`sqlite_to_pg`).
    pub fn named(name: &str) -> Layout {
        match name {
            "sqlite" => Layout::Sqlite,
            "sqlite_to_pg" => Layout::SqliteToPg,
            "pg_to_pg" => Layout::PgToPg,
            "pg_to_sqlite" => Layout::PgToSqlite,
            "my_to_pg" => Layout::MyToPg,
            "pg_to_my" => Layout::PgToMy,
            "my_to_my" => Layout::MyToMy,
            "sqlite_to_my" => Layout::SqliteToMy,
            "my_to_sqlite" => Layout::MyToSqlite,
            other => panic!("no layout {other}"),
        }
    }

    /// The engines of the source side and of the target side.
    pub fn sides(self) -> (On, On) {
        match self {
            Layout::Sqlite => (On::Sqlite, On::Sqlite),
            Layout::SqliteToPg => (On::Sqlite, On::Pg),
            Layout::PgToPg => (On::Pg, On::Pg),
            Layout::PgToSqlite => (On::Pg, On::Sqlite),
            Layout::MyToPg => (On::My, On::Pg),
            Layout::PgToMy => (On::Pg, On::My),
            Layout::MyToMy => (On::My, On::My),
            Layout::SqliteToMy => (On::Sqlite, On::My),
            Layout::MyToSqlite => (On::My, On::Sqlite),
        }
    }

    /// Whether the source side is on PostgreSQL.
    pub fn source_on_pg(self) -> bool {
        self.sides().0 == On::Pg
    }

    /// Whether the target side is on PostgreSQL.
    pub fn target_on_pg(self) -> bool {
        self.sides().1 == On::Pg
    }

    /// Whether either side is on `on`.
    fn uses(self, on: On) -> bool {
        let (s, t) = self.sides();
        s == on || t == on
    }

    pub fn needs_server(self) -> bool {
        self.uses(On::Pg) || self.uses(On::My)
    }

    /// Runs `scenario` on this layout; when it needs a server and none
    /// answers, says so in one line and passes, unless its engine is required (`no_server`).
    pub fn run(self, test: &str, scenario: fn(Layout)) {
        let missing = [
            (On::Pg, "postgres", super::postgres::server().err()),
            (On::My, "mysql", super::mysql::server().err()),
        ];
        for (on, engine, why) in missing {
            if let (true, Some(e)) = (self.uses(on), why) {
                return super::no_server(test, engine, &e);
            }
        }
        scenario(self)
    }

    /// The engine of a folder in this layout.
    pub fn engine(self, dir: &Path) -> Box<dyn Engine> {
        match self {
            Layout::Sqlite => Box::new(Sqlite::new(dir)),
            _ => Box::new(Layered {
                layout: self,
                sqlite: Sqlite::new(dir),
                pg: self.uses(On::Pg).then(Postgres::new),
                my: self.uses(On::My).then(MySql::new),
                placed: Mutex::default(),
            }),
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Sqlite => "sqlite",
            Layout::SqliteToPg => "sqlite→pg",
            Layout::PgToPg => "pg→pg",
            Layout::PgToSqlite => "pg→sqlite",
            Layout::MyToPg => "my→pg",
            Layout::PgToMy => "pg→my",
            Layout::MyToMy => "my→my",
            Layout::SqliteToMy => "sqlite→my",
            Layout::MyToSqlite => "my→sqlite",
        })
    }
}

/// Whether a database of the folder is on the target side.
pub fn is_target(db: &str) -> bool {
    db.starts_with("target") || db == "t.db"
}

/// A folder whose databases are SQLite files, PostgreSQL schemas or MySQL
/// databases, per its [`Layout`].
pub struct Layered {
    layout: Layout,
    sqlite: Sqlite,
    pg: Option<Postgres>,
    my: Option<MySql>,
    /// Each database made, and the engine it is on.
    placed: Mutex<BTreeMap<String, On>>,
}

impl Layered {
    fn on(&self, db: &str) -> On {
        let placed = self.placed.lock().unwrap_or_else(|e| e.into_inner());
        let (source, target) = self.layout.sides();
        placed
            .get(db)
            .copied()
            .unwrap_or(if is_target(db) { target } else { source })
    }

    fn of(&self, db: &str) -> &dyn Engine {
        match self.on(db) {
            On::Sqlite => &self.sqlite,
            On::Pg => self.pg.as_ref().expect("the layout has a PostgreSQL side"),
            On::My => self.my.as_ref().expect("the layout has a MySQL side"),
        }
    }

    fn place(&self, db: &str, on: On) {
        self.placed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(db.to_string(), on);
    }
}

impl Engine for Layered {
    fn name(&self) -> &'static str {
        match self.layout {
            Layout::Sqlite => "sqlite",
            Layout::SqliteToPg => "sqlite→pg",
            Layout::PgToPg => "pg→pg",
            Layout::PgToSqlite => "pg→sqlite",
            Layout::MyToPg => "my→pg",
            Layout::PgToMy => "pg→my",
            Layout::MyToMy => "my→my",
            Layout::SqliteToMy => "sqlite→my",
            Layout::MyToSqlite => "my→sqlite",
        }
    }

    fn engine_of(&self, db: &str) -> &'static str {
        self.of(db).name()
    }

    fn url(&self, db: &str) -> String {
        self.of(db).url(db)
    }

    fn create(&self, db: &str, sql: &str) {
        let on = self.on(db);
        // Each side's types as a migration engineer would pair them, so
        // that the target holds nothing the source cannot (no hazard for
        // `journal install` to refuse): a PostgreSQL target of MySQL text
        // at the source's width, a PostgreSQL source's integers as wide as
        // SQLite's.
        let sql = match (self.layout, on) {
            (Layout::MyToPg, On::Pg) => super::retyped(sql, "text", "varchar(191)"),
            (Layout::PgToSqlite, On::Pg) => super::retyped(sql, "integer", "bigint"),
            _ => sql.to_string(),
        };
        self.of(db).create(db, &sql);
        self.place(db, on);
    }

    fn copy_db(&self, db: &str, to: &str) {
        let on = self.on(db);
        self.of(db).copy_db(db, to);
        self.place(to, on);
    }

    fn exec(&self, db: &str, sql: &str) -> Result<(), String> {
        self.of(db).exec(db, sql)
    }

    fn query(&self, db: &str, sql: &str) -> Result<Rows, String> {
        self.of(db).query(db, sql)
    }

    fn tables(&self, db: &str) -> BTreeSet<String> {
        self.of(db).tables(db)
    }

    fn primary_key(&self, db: &str, table: &str) -> Vec<String> {
        self.of(db).primary_key(db, table)
    }

    fn width(&self, db: &str, table: &str) -> usize {
        self.of(db).width(db, table)
    }

    fn quote(&self, name: &str) -> String {
        // Both sides' dialects read a double-quoted name as a name: the
        // MySQL sessions of the harness run with ANSI_QUOTES.
        format!("\"{}\"", name.replace('"', "\"\""))
    }

    fn catalogue(&self, db: &str) -> Vec<(String, String, Option<String>)> {
        self.of(db).catalogue(db)
    }

    fn external(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(pg) = &self.pg {
            out.extend(pg.external());
        }
        if let Some(my) = &self.my {
            out.extend(my.external());
        }
        out
    }

    fn as_sqlite(&self) -> Option<&Sqlite> {
        None
    }

    fn dump(&self, db: &str, table: &str) -> Rows {
        self.of(db).dump(db, table)
    }

    fn count(&self, db: &str, table: &str) -> i64 {
        self.of(db).count(db, table)
    }

    fn image(&self, db: &str) -> super::engine::Image {
        self.of(db).image(db)
    }

    fn client(&self, dir: &Path, db: &str, sql: &str) -> Result<(), String> {
        self.of(db).client(dir, db, sql)
    }
}
