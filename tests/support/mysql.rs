//! MySQL and MariaDB in the harness: a database of its own per test
//! ([`TestDb`], `cutover_t_<name>_<pid>_<n>`), dropped when the test ends,
//! panic or not, and an application user with ordinary grants on it
//! ([`AppUser`]), dropped with it.
//!
//! Everything the harness does to the server goes through the `mariadb`
//! command-line client (or `mysql` where that is the one installed), never
//! through the tool's driver: what a test writes as the application, and
//! what it reads back as its oracle, owe nothing to the code under test.
//! Reads come back in the client's batch form; a test that needs a value
//! byte for byte asks for `HEX(col)`.
//!
//! The server is `CUTOVER_TEST_MYSQL` (a URL,
//! `mysql://user[:password]@host[:port]/db` or `mysql://user@/db?socket=PATH`),
//! else `mysql://root@127.0.0.1:3306/test`. Without one, a test says so in
//! one line and passes, except when `CI` is set or `mysql` is named in
//! `CUTOVER_REQUIRE_ENGINES`, where that is a failure.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use rusqlite::types::Value;

use super::engine::Rows;

/// How the harness reaches the server: as the `mariadb` client is told.
#[derive(Clone, Debug)]
pub struct Server {
    user: String,
    password: Option<String>,
    /// `Ok((host, port))` over TCP, `Err(socket)` over a Unix socket.
    at: Result<(String, u16), String>,
    /// The client program (`mariadb` or `mysql`).
    program: &'static str,
}

/// The harness's own reading of a test server URL (independent of the
/// tool's parser).
fn parse(url: &str) -> Result<Server, String> {
    let rest = url
        .strip_prefix("mysql://")
        .ok_or_else(|| format!("{url} is not a mysql:// URL"))?;
    let (before, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, _db) = before.split_once('/').unwrap_or((before, ""));
    let (userinfo, hostport) = authority
        .rsplit_once('@')
        .ok_or_else(|| format!("{url} names no user"))?;
    let (user, password) = match userinfo.split_once(':') {
        Some((u, p)) => (u.to_string(), Some(p.to_string())),
        None => (userinfo.to_string(), None),
    };
    let socket = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("socket="))
        .map(str::to_string);
    let at = match socket {
        Some(s) => Err(s),
        None => {
            let (host, port) = match hostport.rsplit_once(':') {
                Some((h, p)) => (h, p.parse().map_err(|_| format!("{url}: bad port"))?),
                None => (hostport, 3306),
            };
            Ok((host.to_string(), port))
        }
    };
    Ok(Server {
        user,
        password,
        at,
        program: "mariadb",
    })
}

impl Server {
    /// Runs `sql` through the command-line client as `user`, in `db` when
    /// given; its output in batch form, or its error.
    fn run(
        &self,
        user: &str,
        password: Option<&str>,
        db: Option<&str>,
        sql: &str,
    ) -> Result<String, String> {
        let mut child = self
            .client(user, password, db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.program))?;
        child
            .stdin
            .take()
            .expect("the client's stdin")
            .write_all(sql.as_bytes())
            .map_err(|e| format!("writing to {}: {e}", self.program))?;
        let out = child
            .wait_with_output()
            .map_err(|e| format!("running {}: {e}", self.program))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{} exited {:?}: {}",
                self.program,
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// The command-line client as `user`, in `db` when given, in batch
    /// form, its password in the environment: for [`Server::run`], and for
    /// a test that keeps a session open and feeds it statement by
    /// statement (two writers interleaving).
    pub fn client(&self, user: &str, password: Option<&str>, db: Option<&str>) -> Command {
        let mut c = Command::new(self.program);
        c.arg(format!("--user={user}")).args([
            "--batch",
            "--skip-column-names",
            "--default-character-set=utf8mb4",
        ]);
        match &self.at {
            Ok((host, port)) => {
                c.args([
                    "--protocol=TCP",
                    &format!("--host={host}"),
                    &format!("--port={port}"),
                ]);
            }
            Err(socket) => {
                c.args(["--protocol=SOCKET", &format!("--socket={socket}")]);
            }
        }
        if let Some(db) = db {
            c.arg(format!("--database={db}"));
        }
        // Never on the command line, where `ps` shows it.
        match password {
            Some(p) => c.env("MYSQL_PWD", p),
            None => c.env_remove("MYSQL_PWD"),
        };
        c
    }

    /// Runs `sql` as the server's administrative user.
    pub fn admin(&self, db: Option<&str>, sql: &str) -> Result<String, String> {
        self.run(&self.user, self.password.as_deref(), db, sql)
    }

    /// The URL of database `db` for user `user` (password `password`), in
    /// the form the tool reads.
    pub fn url_for(&self, user: &str, password: Option<&str>, db: &str) -> String {
        let auth = match password {
            Some(p) => format!("{user}:{p}"),
            None => user.to_string(),
        };
        match &self.at {
            Ok((host, port)) => format!("mysql://{auth}@{host}:{port}/{db}"),
            Err(socket) => format!("mysql://{auth}@/{db}?socket={socket}"),
        }
    }
}

/// The server, found once per test binary, or why there is none.
pub fn server() -> Result<&'static Server, String> {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let url = std::env::var("CUTOVER_TEST_MYSQL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
            let mut s = parse(&url)?;
            let mut errors = Vec::new();
            for program in ["mariadb", "mysql"] {
                s.program = program;
                match s.admin(None, "SELECT 1") {
                    Ok(_) => return Ok(s),
                    Err(e) => errors.push(format!("{url} through {program}: {e}")),
                }
            }
            Err(errors.join("; "))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A database of its own for one test, dropped when the test ends.
pub struct TestDb {
    pub name: String,
    /// The tool's URL of the database, as the administrative user.
    pub url: String,
    server: &'static Server,
}

/// A name unique to this process and call, `<prefix>_<name>_<pid>_<n>`,
/// within MySQL's 64 characters.
fn unique(prefix: &str, name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(24)
        .collect();
    format!(
        "{prefix}_{clean}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl TestDb {
    /// A fresh database, or `None` (with a line saying why) when no server
    /// answers and the engine is not required; a required engine without a server is a failure (`no_server`).
    pub fn new(test: &str) -> Option<TestDb> {
        let server = match server() {
            Ok(s) => s,
            Err(why) => {
                super::no_server(test, "mysql", &why);
                return None;
            }
        };
        let name = unique("cutover_t", test);
        server
            .admin(
                None,
                &format!(
                    "CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
                ),
            )
            .unwrap_or_else(|e| panic!("creating test database {name}: {e}"));
        Some(TestDb {
            url: server.url_for(&server.user, server.password.as_deref(), &name),
            name,
            server,
        })
    }

    pub fn server(&self) -> &'static Server {
        self.server
    }

    /// Runs `sql` in the database as the administrative user.
    pub fn try_exec(&self, sql: &str) -> Result<String, String> {
        self.server.admin(Some(&self.name), sql)
    }

    /// [`TestDb::try_exec`], which must succeed.
    #[track_caller]
    pub fn exec(&self, sql: &str) -> String {
        self.try_exec(sql)
            .unwrap_or_else(|e| panic!("on {}: {e}\n{sql}", self.name))
    }

    /// The rows of `sql`, each a list of the client's batch fields.
    #[track_caller]
    pub fn rows(&self, sql: &str) -> Vec<Vec<String>> {
        self.exec(sql)
            .lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect()
    }

    /// The one value of `sql`.
    #[track_caller]
    pub fn value(&self, sql: &str) -> String {
        let rows = self.rows(sql);
        assert_eq!(rows.len(), 1, "{sql} gave {rows:?}");
        rows[0][0].clone()
    }

    /// A user of its own with the grants an application has on this
    /// database (`SELECT, INSERT, UPDATE, DELETE`), dropped with it.
    pub fn app_user(&self) -> AppUser<'_> {
        self.app_user_with(&format!("pw-{}", std::process::id()))
    }

    /// [`TestDb::app_user`] with this password.
    pub fn app_user_with(&self, password: &str) -> AppUser<'_> {
        let name = unique("app", "").chars().take(32).collect::<String>();
        let password = password.to_string();
        self.server
            .admin(
                None,
                &format!(
                    "CREATE USER '{name}'@'%' IDENTIFIED BY '{password}';
                     CREATE USER '{name}'@'localhost' IDENTIFIED BY '{password}';
                     GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.* TO '{name}'@'%';
                     GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.* TO '{name}'@'localhost';",
                    db = self.name
                ),
            )
            .unwrap_or_else(|e| panic!("creating the application user {name}: {e}"));
        AppUser {
            db: self,
            name,
            password,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = self
            .server
            .admin(None, &format!("DROP DATABASE IF EXISTS `{}`", self.name));
    }
}

/// A user playing the application: ordinary grants, no administration.
pub struct AppUser<'a> {
    db: &'a TestDb,
    pub name: String,
    pub password: String,
}

impl AppUser<'_> {
    /// Runs `sql` in the test database as this user, through the client.
    pub fn exec(&self, sql: &str) -> Result<String, String> {
        self.db
            .server
            .run(&self.name, Some(&self.password), Some(&self.db.name), sql)
    }

    /// The tool's URL of the test database as this user.
    pub fn url(&self) -> String {
        self.db
            .server
            .url_for(&self.name, Some(&self.password), &self.db.name)
    }
}

impl Drop for AppUser<'_> {
    fn drop(&mut self) {
        let _ = self.db.server.admin(
            None,
            &format!(
                "DROP USER IF EXISTS '{0}'@'%'; DROP USER IF EXISTS '{0}'@'localhost';",
                self.name
            ),
        );
    }
}

/// A two-decimal amount (`12.50`, `-5.25`) as cents, by its digits: the
/// oracles' arithmetic, independent of the tool's.
pub fn cents(dollars: &str) -> i64 {
    let (neg, d) = match dollars.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, dollars),
    };
    let (whole, frac) = d.split_once('.').expect("two decimals");
    let c = whole.parse::<i64>().unwrap() * 100 + frac.parse::<i64>().unwrap();
    if neg { -c } else { c }
}

/// `bytes` as the client's `HEX()` prints them.
pub fn hex_upper(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// The spec of the MySQL tests' `orders` table from `source` to `target`:
/// `dollars` (DECIMAL) to `cents` by `decimal_to_minor`, the `status` ENUM
/// mapped `A`/`C` to `active`/`closed`, each of `copies` carried as it is,
/// then `more` (further `[[tables]]`) as written. The cents a `BIGINT`
/// holds past the DECIMAL's digits are accepted (`source_limit`).
pub fn orders_spec(source: &str, target: &str, copies: &[&str], more: &str) -> String {
    let copies: String = copies
        .iter()
        .map(|c| format!("\n[[tables.columns]]\nsource = \"{c}\"\ntarget = \"{c}\"\n"))
        .collect();
    format!(
        r#"[source]
url = "{source}"

[target]
url = "{target}"

[[tables]]
name = "orders"
key = ["id"]

[[tables.columns]]
source = "dollars"
target = "cents"
transform = "decimal_to_minor"
scale = 2
source_limit = "watch"

[[tables.columns]]
source = "status"
target = "status"
transform = "map"
map = {{ A = "active", C = "closed" }}
{copies}{more}"#
    )
}

/// The folder's databases on the MySQL server, as a layout places them:
/// each a database of its own (`cutover_l_<pid>_<n>_source` for
/// `source.db`), dropped with the engine, and an application user with
/// the grants of [`APP_GRANTS`] on each, through whom [`Engine::client`]
/// writes as the application.
///
/// The harness's reads and fixture scripts go over a connection of the
/// test's own (the `mysql` crate's text protocol, never the tool's
/// decoding), with `ANSI_QUOTES` so that a scenario's double-quoted names
/// read as names on every engine, and the session in UTC. Values come back
/// as the harness's [`Rows`]: integers as integers, `FLOAT`/`DOUBLE` as
/// reals, blobs as blobs, `VARBINARY` that is UTF-8 as text (what
/// cutover's control tables keep so), everything else (`DECIMAL`, dates,
/// times) as the server's text.
pub struct MySql {
    server: &'static Server,
    base: String,
    user: String,
    password: String,
    made: std::sync::Mutex<Vec<String>>,
}

/// What the layouts' application user may do in each database: write rows,
/// and change the schema as an application that runs its own migrations
/// does; never `TRIGGER`, `SUPER` or `PROCESS` (cutover's triggers run as
/// their definer, so the application needs no grant on the journal).
const APP_GRANTS: &str = "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, INDEX";

/// The session every harness connection and client script starts with.
const SESSION: &str = "SET NAMES utf8mb4; SET time_zone = '+00:00';
    SET sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')";

impl MySql {
    /// Panics when no server answers (a layout checks [`server`] first).
    pub fn new() -> MySql {
        let server = server().unwrap_or_else(|e| panic!("no MySQL server: {e}"));
        let base = unique("cutover_l", "");
        let user: String = unique("lapp", "").chars().take(32).collect();
        let password = format!("pw-{}", std::process::id());
        server
            .admin(
                None,
                &format!(
                    "CREATE USER '{user}'@'%' IDENTIFIED BY '{password}';
                     CREATE USER '{user}'@'localhost' IDENTIFIED BY '{password}';"
                ),
            )
            .unwrap_or_else(|e| panic!("creating the application user {user}: {e}"));
        MySql {
            server,
            base,
            user,
            password,
            made: std::sync::Mutex::default(),
        }
    }

    /// The server's database for the folder's database `db`.
    pub fn database(&self, db: &str) -> String {
        format!("{}_{}", self.base, super::postgres::schema_of(db))
    }

    fn connect(&self, db: &str) -> Result<mysql::Conn, String> {
        let url = self.server.url_for(
            &self.server.user,
            self.server.password.as_deref(),
            &self.database(db),
        );
        let opts = mysql::Opts::from_url(&url).map_err(|e| format!("{url}: {e}"))?;
        let mut c = mysql::Conn::new(opts).map_err(|e| format!("connecting to {url}: {e}"))?;
        run_all(&mut c, SESSION)?;
        // Scenarios count up to thousands of rows with a recursive CTE;
        // MariaDB and MySQL stop one at 1,000 by default, each under its
        // own variable (the other's is an error, and ignored).
        for deeper in [
            "SET SESSION max_recursive_iterations = 1000000",
            "SET SESSION cte_max_recursion_depth = 1000000",
        ] {
            let _ = run_all(&mut c, deeper);
        }
        Ok(c)
    }

    fn made(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.made.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One text column of a catalogue query, `?` bound to the database.
    fn strings(&self, db: &str, sql: &str, table: Option<&str>) -> Vec<String> {
        let schema = self.database(db);
        let rows = match table {
            Some(t) => self.bound(db, sql, vec![schema.into(), t.into()]),
            None => self.bound(db, sql, vec![schema.into()]),
        };
        rows.into_iter()
            .map(|r| match r.into_iter().next() {
                Some(Value::Text(t)) => t,
                other => panic!("a catalogue name read as {other:?}"),
            })
            .collect()
    }

    /// The rows of a catalogue query with its parameters, read as text.
    fn bound(&self, db: &str, sql: &str, params: Vec<mysql::Value>) -> Rows {
        use mysql::prelude::Queryable as _;
        let mut c = self
            .connect(db)
            .unwrap_or_else(|e| panic!("connecting to {db}: {e}"));
        let rows: Vec<mysql::Row> = c
            .exec(sql, params)
            .unwrap_or_else(|e| panic!("reading the catalogue of {db}: {e}\n{sql}"));
        rows.into_iter()
            .map(|r| {
                r.unwrap()
                    .into_iter()
                    .map(|v| match v {
                        mysql::Value::NULL => Value::Null,
                        mysql::Value::Bytes(b) => Value::Text(String::from_utf8_lossy(&b).into()),
                        mysql::Value::Int(i) => Value::Integer(i),
                        mysql::Value::UInt(u) => Value::Integer(u as i64),
                        other => Value::Text(format!("{other:?}")),
                    })
                    .collect()
            })
            .collect()
    }
}

impl Default for MySql {
    fn default() -> MySql {
        MySql::new()
    }
}

impl Drop for MySql {
    fn drop(&mut self) {
        let mut sql = String::new();
        for db in self.made().iter() {
            sql.push_str(&format!("DROP DATABASE IF EXISTS `{}`;", self.database(db)));
        }
        sql.push_str(&format!(
            "DROP USER IF EXISTS '{0}'@'%'; DROP USER IF EXISTS '{0}'@'localhost';",
            self.user
        ));
        let _ = self.server.admin(None, &sql);
    }
}

/// Runs every statement of a script over `c`, reading every result, so
/// that an error in any statement is the script's error.
fn run_all(c: &mut mysql::Conn, sql: &str) -> Result<(), String> {
    use mysql::prelude::Queryable as _;
    let mut r = c.query_iter(sql).map_err(|e| e.to_string())?;
    while let Some(set) = r.iter() {
        for row in set {
            row.map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// A scenario's schema script as MySQL takes it: its `TEXT` columns as
/// `VARCHAR(191)` (as many utf8mb4 characters as an index of four of them
/// holds), since MySQL keys and indexes no `TEXT` without a prefix length
/// and the scenarios key on text. Quoted literals are left as written.
pub fn keyable(sql: &str) -> String {
    super::retyped(sql, "text", "VARCHAR(191)")
}

/// A value of the text protocol in the storage class of its column.
fn value(v: mysql::Value, col: &mysql::Column) -> Result<Value, String> {
    use mysql::consts::ColumnType as T;
    let bytes = match v {
        mysql::Value::NULL => return Ok(Value::Null),
        mysql::Value::Bytes(b) => b,
        other => return Err(format!("a text-protocol value read as {other:?}")),
    };
    let text = || String::from_utf8(bytes.clone()).map_err(|e| e.to_string());
    Ok(match col.column_type() {
        T::MYSQL_TYPE_TINY
        | T::MYSQL_TYPE_SHORT
        | T::MYSQL_TYPE_LONG
        | T::MYSQL_TYPE_INT24
        | T::MYSQL_TYPE_LONGLONG
        | T::MYSQL_TYPE_YEAR => {
            let t = text()?;
            match t.parse::<i64>() {
                Ok(i) => Value::Integer(i),
                Err(_) => Value::Text(t),
            }
        }
        T::MYSQL_TYPE_FLOAT | T::MYSQL_TYPE_DOUBLE => {
            Value::Real(text()?.parse().map_err(|e| format!("{e}"))?)
        }
        T::MYSQL_TYPE_BIT => {
            Value::Integer(bytes.iter().fold(0i64, |a, &b| (a << 8) | i64::from(b)))
        }
        // cutover's control tables keep names and keys as VARBINARY (byte
        // order, no case folding) and read them as text; a scenario's
        // bytes are BLOBs.
        T::MYSQL_TYPE_STRING | T::MYSQL_TYPE_VAR_STRING | T::MYSQL_TYPE_VARCHAR
            if col.character_set() == 63 =>
        {
            match String::from_utf8(bytes) {
                Ok(t) => Value::Text(t),
                Err(e) => Value::Blob(e.into_bytes()),
            }
        }
        T::MYSQL_TYPE_BLOB
        | T::MYSQL_TYPE_TINY_BLOB
        | T::MYSQL_TYPE_MEDIUM_BLOB
        | T::MYSQL_TYPE_LONG_BLOB
            if col.character_set() == 63 =>
        {
            Value::Blob(bytes)
        }
        _ => Value::Text(text()?),
    })
}

impl super::engine::Engine for MySql {
    fn name(&self) -> &'static str {
        "mysql"
    }

    fn url(&self, db: &str) -> String {
        self.server.url_for(
            &self.server.user,
            self.server.password.as_deref(),
            &self.database(db),
        )
    }

    fn create(&self, db: &str, sql: &str) {
        let name = self.database(db);
        let mut made = self.made();
        assert!(!made.iter().any(|m| m == db), "{db} already exists");
        self.server
            .admin(
                None,
                &format!(
                    "CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;
                     GRANT {APP_GRANTS} ON `{name}`.* TO '{0}'@'%';
                     GRANT {APP_GRANTS} ON `{name}`.* TO '{0}'@'localhost';",
                    self.user
                ),
            )
            .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
        made.push(db.to_string());
        drop(made);
        if !sql.trim().is_empty() {
            let sql = keyable(sql);
            self.exec(db, &sql)
                .unwrap_or_else(|e| panic!("running SQL on new {db}: {e}\n{sql}"));
        }
    }

    fn copy_db(&self, db: &str, to: &str) {
        self.create(to, "");
        let (from, into) = (self.database(db), self.database(to));
        let mut sql = String::new();
        for t in self.tables(db) {
            sql.push_str(&format!(
                "CREATE TABLE `{into}`.`{t}` LIKE `{from}`.`{t}`;
                 INSERT INTO `{into}`.`{t}` SELECT * FROM `{from}`.`{t}`;\n"
            ));
        }
        self.exec(to, &sql)
            .unwrap_or_else(|e| panic!("copying {db} to {to}: {e}\n{sql}"));
    }

    fn exec(&self, db: &str, sql: &str) -> Result<(), String> {
        run_all(&mut self.connect(db)?, sql)
    }

    fn query(&self, db: &str, sql: &str) -> Result<super::engine::Rows, String> {
        use mysql::prelude::Queryable as _;
        let mut c = self.connect(db)?;
        let mut r = c.query_iter(sql).map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        while let Some(set) = r.iter() {
            let columns: Vec<mysql::Column> = set.columns().as_ref().to_vec();
            for row in set {
                let row = row.map_err(|e| e.to_string())?;
                rows.push(
                    row.unwrap()
                        .into_iter()
                        .zip(&columns)
                        .map(|(v, c)| value(v, c))
                        .collect::<Result<Vec<_>, _>>()?,
                );
            }
        }
        Ok(rows)
    }

    fn tables(&self, db: &str) -> std::collections::BTreeSet<String> {
        self.strings(
            db,
            "SELECT TABLE_NAME FROM information_schema.TABLES
             WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE'",
            None,
        )
        .into_iter()
        .collect()
    }

    fn primary_key(&self, db: &str, table: &str) -> Vec<String> {
        self.strings(
            db,
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY'
             ORDER BY ORDINAL_POSITION",
            Some(table),
        )
    }

    fn width(&self, db: &str, table: &str) -> usize {
        self.columns(db, table).len()
    }

    fn quote(&self, name: &str) -> String {
        format!("`{}`", name.replace('`', "``"))
    }

    fn catalogue(&self, db: &str) -> Vec<(String, String, Option<String>)> {
        // Tables with their columns, indexes, triggers with their order,
        // views and routines: what a command could change behind a test's
        // back (AUTO_INCREMENT counters are left out: InnoDB never undoes
        // them, as PostgreSQL never undoes a sequence).
        let sql = "
            SELECT 'column', CONCAT(TABLE_NAME, '.', COLUMN_NAME),
                   CONCAT(ORDINAL_POSITION, ' ', COLUMN_TYPE, ' ', IS_NULLABLE, ' ',
                          IFNULL(COLUMN_DEFAULT, '-'), ' ', EXTRA, ' ', IFNULL(COLLATION_NAME, '-'))
            FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ?
            UNION ALL
            SELECT 'index', CONCAT(TABLE_NAME, '.', INDEX_NAME, '.', SEQ_IN_INDEX),
                   CONCAT(COLUMN_NAME, ' unique=', 1 - NON_UNIQUE)
            FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ?
            UNION ALL
            SELECT 'trigger', CONCAT(EVENT_OBJECT_TABLE, '.', TRIGGER_NAME),
                   CONCAT(ACTION_TIMING, ' ', EVENT_MANIPULATION, ' order=', ACTION_ORDER, ': ',
                          ACTION_STATEMENT)
            FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?
            UNION ALL
            SELECT 'view', TABLE_NAME, VIEW_DEFINITION
            FROM information_schema.VIEWS WHERE TABLE_SCHEMA = ?
            UNION ALL
            SELECT 'routine', ROUTINE_NAME, ROUTINE_DEFINITION
            FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ?
            ORDER BY 1, 2";
        let schema: mysql::Value = self.database(db).into();
        self.bound(db, sql, vec![schema; 5])
            .into_iter()
            .map(|r| {
                let text = |v: &Value| match v {
                    Value::Text(t) => Some(t.clone()),
                    _ => None,
                };
                (
                    text(&r[0]).unwrap_or_default(),
                    text(&r[1]).unwrap_or_default(),
                    text(&r[2]),
                )
            })
            .collect()
    }

    fn external(&self) -> Vec<String> {
        self.made().clone()
    }

    fn as_sqlite(&self) -> Option<&super::engine::Sqlite> {
        None
    }

    fn dump(&self, db: &str, table: &str) -> super::engine::Rows {
        // A collation is not byte order: sort as SQLite would, so a dump
        // compares with the same rows read from another engine.
        let key = self.primary_key(db, table);
        let columns = self.columns(db, table);
        let sql = format!("SELECT * FROM {}", self.quote(table));
        let mut rows = self
            .query(db, &sql)
            .unwrap_or_else(|e| panic!("dumping {table} of {db}: {e}\n{sql}"));
        let order: Vec<usize> = if key.is_empty() {
            (0..columns.len()).collect()
        } else {
            key.iter()
                .map(|k| columns.iter().position(|c| c == k).expect("a key column"))
                .collect()
        };
        rows.sort_by(|a, b| {
            order
                .iter()
                .map(|&i| super::engine::binary_cmp(&a[i], &b[i]))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        rows
    }

    fn client(&self, _dir: &std::path::Path, db: &str, sql: &str) -> Result<(), String> {
        self.server
            .run(
                &self.user,
                Some(&self.password),
                Some(&self.database(db)),
                &format!("{SESSION};\n{sql}\n"),
            )
            .map(drop)
    }
}

impl MySql {
    /// The columns of a table, in order.
    fn columns(&self, db: &str, table: &str) -> Vec<String> {
        self.strings(
            db,
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            Some(table),
        )
    }
}
