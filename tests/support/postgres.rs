//! PostgreSQL in the harness, and the layouts a shared scenario runs on.
//!
//! [`Client`] is a connection of the test's own: the crate's public client
//! (`cutover::db::postgres::client`, the one PostgreSQL client stack of the
//! project), in plaintext, with transactions as an application opens them.
//! Its rows are `tokio-postgres`'s, read with `Row::get` or as the server's
//! text through `simple_query`, never through the engine's value decoding.
//!
//! [`Postgres`] is an [`Engine`] whose databases are schemas of one database
//! made for the test (`cutover_t_…`), dropped with the `Dir` that holds it:
//! `source.db` is schema `source`, `target.db` schema `target`, and a spec
//! names them `postgres://USER@HOST:PORT/cutover_t_…?schema=source`. Values
//! come back in the harness's [`Rows`]: integers of every width and booleans
//! as integers, reals, bytea as blobs, NUMERIC and everything else as the
//! server's text. Reads go through the test's own connections, independent
//! of the tool's decoding.
//!
//! [`OrdersOnServer`] is the running example with its target on the
//! server, for the scenarios that drive the binary against a database of
//! their own ([`TestDb`]) rather than a `Dir`.
//!
//! The server is `CUTOVER_TEST_PG` (a URL to an administrative database),
//! else `postgres://root@127.0.0.1:5432/postgres`, else the same as user
//! `postgres`; without one a layout that needs it skips with one line,
//! unless the engine is required (`CI` set, or `postgres` named in
//! `CUTOVER_REQUIRE_ENGINES`), where that is a failure (`no_server`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use std::ops::{Deref, DerefMut};
use std::str::FromStr;

use cutover::db::postgres::client::{self, Connect};
use cutover::db::postgres::tls::{Settings, SslMode};
use rusqlite::types::Value;
use tokio_postgres::types::Type;
pub use tokio_postgres::{Error, Row, SimpleQueryMessage};

use super::engine::{Engine, Rows, Sqlite, binary_cmp};

/// A connection of the test's own, as an application has one: plaintext,
/// whatever the URL's `sslmode` (the tool's TLS is tested through the
/// binary). Every call of the crate's client is there through `Deref`.
pub struct Client(client::Client);

impl Client {
    /// Connects to `url`; an error is the server's or the URL's (the client
    /// failing to start its runtime is a broken machine, and panics).
    pub fn connect(url: &str) -> Result<Client, Error> {
        let mut config = tokio_postgres::Config::from_str(url)?;
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        let plain = Settings {
            mode: SslMode::Disable,
            roots: None,
            client: None,
            sni: true,
        };
        match client::Client::connect(&config, &plain) {
            Ok(c) => Ok(Client(c)),
            Err(Connect::Server(e)) => Err(e),
            Err(Connect::Setup(e)) => panic!("starting a PostgreSQL client: {e:#}"),
        }
    }

    /// Opens a transaction (`BEGIN`), rolled back unless committed.
    pub fn transaction(&mut self) -> Result<Transaction<'_>, Error> {
        self.0.batch_execute("BEGIN")?;
        Ok(Transaction {
            client: self,
            open: true,
        })
    }
}

impl Deref for Client {
    type Target = client::Client;

    fn deref(&self) -> &client::Client {
        &self.0
    }
}

impl DerefMut for Client {
    fn deref_mut(&mut self) -> &mut client::Client {
        &mut self.0
    }
}

/// A transaction on a [`Client`]: its statements are the client's, and it
/// ends with [`Transaction::commit`], [`Transaction::rollback`] or, dropped,
/// with a rollback.
pub struct Transaction<'a> {
    client: &'a mut Client,
    /// Whether `COMMIT` or `ROLLBACK` is still to be sent.
    open: bool,
}

impl Transaction<'_> {
    pub fn commit(mut self) -> Result<(), Error> {
        self.open = false;
        self.client.batch_execute("COMMIT")
    }

    pub fn rollback(mut self) -> Result<(), Error> {
        self.open = false;
        self.client.batch_execute("ROLLBACK")
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if self.open {
            // A connection already gone has nothing to roll back.
            let _ = self.client.batch_execute("ROLLBACK");
        }
    }
}

impl Deref for Transaction<'_> {
    type Target = client::Client;

    fn deref(&self) -> &client::Client {
        self.client
    }
}

impl DerefMut for Transaction<'_> {
    fn deref_mut(&mut self) -> &mut client::Client {
        self.client
    }
}

/// The server the tests use: an administrative URL that answered.
pub struct Server {
    admin: String,
}

fn candidates() -> Vec<String> {
    match std::env::var("CUTOVER_TEST_PG") {
        Ok(u) => vec![u],
        Err(_) => vec![
            "postgres://root@127.0.0.1:5432/postgres".into(),
            "postgres://postgres@127.0.0.1:5432/postgres".into(),
        ],
    }
}

impl Server {
    /// The administrative URL that answered.
    pub fn admin_url(&self) -> &str {
        &self.admin
    }
}

/// The server, found once per test binary, or why there is none.
pub fn server() -> Result<&'static Server, String> {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let mut errors = Vec::new();
            for admin in candidates() {
                match Client::connect(&admin) {
                    Ok(_) => return Ok(Server { admin }),
                    Err(e) => errors.push(format!("{admin}: {e}")),
                }
            }
            Err(errors.join("; "))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A PostgreSQL error's own message (the client's `Display` says only "db
/// error"), with its detail.
pub fn message(e: &Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(d) => format!("{}: {} ({d})", db.severity(), db.message()),
            None => format!("{}: {}", db.severity(), db.message()),
        },
        None => e.to_string(),
    }
}

/// The schema a database name of the folder maps to: `source.db` → `source`.
pub fn schema_of(db: &str) -> String {
    let base = db.strip_suffix(".db").unwrap_or(db);
    base.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// A database of its own for one test, each of the folder's databases a
/// schema of it; dropped when the engine is.
pub struct Postgres {
    admin: String,
    /// The test database's URL, without a schema.
    url: String,
    database: String,
    /// The folder's databases made so far, in order.
    made: Mutex<Vec<String>>,
}

impl Postgres {
    /// A fresh database on the server; panics when none answers (a layout
    /// checks [`server`] first).
    pub fn new() -> Postgres {
        static N: AtomicU32 = AtomicU32::new(0);
        let server = server().unwrap_or_else(|e| panic!("no PostgreSQL server: {e}"));
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let database = format!(
            "cutover_t_{}_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            nanos
        );
        let mut c = Client::connect(&server.admin).expect("connecting to the server");
        c.batch_execute(&format!("CREATE DATABASE {database}"))
            .unwrap_or_else(|e| panic!("creating {database}: {}", message(&e)));
        let (base, _) = server
            .admin
            .rsplit_once('/')
            .expect("the admin URL names a database");
        Postgres {
            admin: server.admin.clone(),
            url: format!("{base}/{database}"),
            database,
            made: Mutex::default(),
        }
    }

    /// A connection of the test's own whose `search_path` is `db`'s schema.
    pub fn connect(&self, db: &str) -> Result<Client, String> {
        let mut c = Client::connect(&self.url).map_err(|e| message(&e))?;
        c.batch_execute(&format!(
            "SET search_path = {}; SET TimeZone = 'UTC'",
            self.quote(&schema_of(db))
        ))
        .map_err(|e| message(&e))?;
        Ok(c)
    }

    /// One text column of a catalogue query with the schema as `$1` and an
    /// optional table as `$2`.
    fn strings(&self, db: &str, sql: &str, table: Option<&str>) -> Vec<String> {
        let mut c = self
            .connect(db)
            .unwrap_or_else(|e| panic!("connecting to {db}: {e}"));
        let schema = schema_of(db);
        let rows = match table {
            Some(t) => c.query(sql, &[&schema, &t]),
            None => c.query(sql, &[&schema]),
        };
        rows.unwrap_or_else(|e| panic!("reading the catalogue of {db}: {}", message(&e)))
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect()
    }

    fn made(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.made.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for Postgres {
    fn default() -> Postgres {
        Postgres::new()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.admin) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.database
            ));
        }
    }
}

/// A value as the server prints it, in the storage class of its type.
fn value(text: Option<&str>, ty: &Type) -> Result<Value, String> {
    let Some(t) = text else {
        return Ok(Value::Null);
    };
    let bad = |e: &dyn fmt::Display| format!("{ty} value {t:?}: {e}");
    Ok(match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 | Type::OID => {
            Value::Integer(t.parse().map_err(|e| bad(&e))?)
        }
        Type::FLOAT4 | Type::FLOAT8 => Value::Real(t.parse().map_err(|e| bad(&e))?),
        Type::BOOL => Value::Integer(i64::from(t == "t")),
        Type::BYTEA => {
            let hex = t.strip_prefix("\\x").ok_or_else(|| bad(&"not hex"))?;
            Value::Blob(
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
                    .collect::<Result<_, _>>()
                    .map_err(|e| bad(&e))?,
            )
        }
        _ => Value::Text(t.to_string()),
    })
}

impl Engine for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn url(&self, db: &str) -> String {
        format!("{}?schema={}", self.url, schema_of(db))
    }

    fn create(&self, db: &str, sql: &str) {
        let schema = schema_of(db);
        let mut made = self.made();
        assert!(
            !made.iter().any(|m| schema_of(m) == schema),
            "{db} already exists"
        );
        let mut c = Client::connect(&self.url)
            .unwrap_or_else(|e| panic!("connecting to {}: {}", self.url, message(&e)));
        c.batch_execute(&format!("CREATE SCHEMA {}", self.quote(&schema)))
            .unwrap_or_else(|e| panic!("creating schema {schema}: {}", message(&e)));
        made.push(db.to_string());
        drop(made);
        self.exec(db, sql)
            .unwrap_or_else(|e| panic!("running SQL on new {db}: {e}\n{sql}"));
    }

    fn copy_db(&self, db: &str, to: &str) {
        self.create(to, "");
        let (from, into) = (self.quote(&schema_of(db)), self.quote(&schema_of(to)));
        let mut sql = String::new();
        for t in self.tables(db) {
            let t = self.quote(&t);
            sql.push_str(&format!(
                "CREATE TABLE {into}.{t} (LIKE {from}.{t} INCLUDING ALL);
                 INSERT INTO {into}.{t} OVERRIDING SYSTEM VALUE SELECT * FROM {from}.{t};\n"
            ));
        }
        self.exec(to, &sql)
            .unwrap_or_else(|e| panic!("copying {db} to {to}: {e}\n{sql}"));
    }

    fn exec(&self, db: &str, sql: &str) -> Result<(), String> {
        self.connect(db)?
            .batch_execute(sql)
            .map_err(|e| message(&e))
    }

    fn query(&self, db: &str, sql: &str) -> Result<Rows, String> {
        let mut c = self.connect(db)?;
        // The statement's column types, then its rows as the server's text:
        // nothing of the tool's decoding is involved.
        let st = c.prepare(sql).map_err(|e| message(&e))?;
        let types: Vec<Type> = st.columns().iter().map(|c| c.type_().clone()).collect();
        let mut rows = Vec::new();
        for m in c.simple_query(sql).map_err(|e| message(&e))? {
            if let SimpleQueryMessage::Row(r) = m {
                rows.push(
                    (0..r.len())
                        .map(|i| value(r.get(i), &types[i]))
                        .collect::<Result<Vec<_>, _>>()?,
                );
            }
        }
        Ok(rows)
    }

    fn tables(&self, db: &str) -> BTreeSet<String> {
        self.strings(
            db,
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')",
            None,
        )
        .into_iter()
        .collect()
    }

    fn primary_key(&self, db: &str, table: &str) -> Vec<String> {
        self.strings(
            db,
            "SELECT a.attname::text
             FROM pg_index i
             JOIN pg_class c ON c.oid = i.indrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
             WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary
             ORDER BY k.ord",
            Some(table),
        )
    }

    fn width(&self, db: &str, table: &str) -> usize {
        self.strings(
            db,
            "SELECT a.attname::text FROM pg_attribute a
             JOIN pg_class c ON c.oid = a.attrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped",
            Some(table),
        )
        .len()
    }

    fn catalogue(&self, db: &str) -> Vec<(String, String, Option<String>)> {
        // Tables with their columns, indexes, triggers with their enabled
        // state, functions with their body, views and sequences: what a
        // command could change behind a test's back.
        let sql = "
            SELECT 'table', c.relname::text,
                   (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                                      || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
                                      || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), ''),
                                      ', ' ORDER BY a.attnum)
                    FROM pg_attribute a
                    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
            UNION ALL
            SELECT 'index', indexname::text, indexdef FROM pg_indexes WHERE schemaname = $1
            UNION ALL
            SELECT 'trigger', c.relname || '.' || t.tgname,
                   pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = $1 AND NOT t.tgisinternal
            UNION ALL
            SELECT 'function', p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
                   p.prosrc
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
            UNION ALL
            SELECT 'view', viewname::text, definition FROM pg_views WHERE schemaname = $1
            UNION ALL
            SELECT 'sequence', sequencename::text, NULL FROM pg_sequences WHERE schemaname = $1
            ORDER BY 1, 2";
        let mut c = self
            .connect(db)
            .unwrap_or_else(|e| panic!("connecting to {db}: {e}"));
        c.query(sql, &[&schema_of(db)])
            .unwrap_or_else(|e| panic!("reading the catalogue of {db}: {}", message(&e)))
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    fn external(&self) -> Vec<String> {
        self.made().clone()
    }

    fn as_sqlite(&self) -> Option<&Sqlite> {
        None
    }

    fn dump(&self, db: &str, table: &str) -> Rows {
        // The server's collation is not byte order: sort as SQLite would,
        // so a dump compares with the same rows read from SQLite.
        let key = self.primary_key(db, table);
        let width = self.width(db, table);
        let sql = format!("SELECT * FROM {}", self.quote(table));
        let mut rows = self
            .query(db, &sql)
            .unwrap_or_else(|e| panic!("dumping {table} of {db}: {e}\n{sql}"));
        let columns: Vec<String> = self.strings(
            db,
            "SELECT a.attname::text FROM pg_attribute a
             JOIN pg_class c ON c.oid = a.attrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum",
            Some(table),
        );
        let order: Vec<usize> = if key.is_empty() {
            (0..width).collect()
        } else {
            key.iter()
                .map(|k| columns.iter().position(|c| c == k).expect("a key column"))
                .collect()
        };
        rows.sort_by(|a, b| {
            order
                .iter()
                .map(|&i| binary_cmp(&a[i], &b[i]))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        rows
    }

    fn client(&self, _dir: &Path, db: &str, sql: &str) -> Result<(), String> {
        let mut child = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &self.url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting psql: {e}"))?;
        let script = format!("SET search_path = {};\n{sql}\n", self.quote(&schema_of(db)));
        child
            .stdin
            .take()
            .expect("psql's stdin")
            .write_all(script.as_bytes())
            .map_err(|e| format!("writing to psql: {e}"))?;
        let out = child
            .wait_with_output()
            .map_err(|e| format!("running psql: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "psql exited {:?}: {}{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}

/// A database of its own on the server for one test of the engine itself
/// (outside any `Dir`), dropped when the test ends.
pub struct TestDb {
    pub admin: String,
    pub name: String,
    /// The URL of the new database (no schema parameter).
    pub url: String,
}

impl TestDb {
    /// A fresh database, or `None` (with a line saying why) when no server
    /// answers and the engine is not required; a required engine without a server is a failure (`no_server`).
    pub fn new(test: &str) -> Option<TestDb> {
        static N: AtomicU32 = AtomicU32::new(0);
        let server = match server() {
            Ok(s) => s,
            Err(why) => {
                super::no_server(test, "postgres", &why);
                return None;
            }
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "cutover_t_{}_{}_{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        Client::connect(&server.admin)
            .and_then(|mut c| c.batch_execute(&format!("CREATE DATABASE {name}")))
            .unwrap_or_else(|e| panic!("creating test database {name}: {}", message(&e)));
        let (base, _) = server
            .admin
            .rsplit_once('/')
            .expect("admin URL has a database");
        let url = format!("{base}/{name}");
        Some(TestDb {
            admin: server.admin.clone(),
            name,
            url,
        })
    }

    /// Runs `sql` through `psql` as login role `role` of this database,
    /// as the application writes; panics with the client's message.
    #[track_caller]
    pub fn psql_as(&self, role: &str, sql: &str) {
        let (scheme, rest) = self.url.split_once("://").expect("a URL");
        let (_, host) = rest.split_once('@').expect("a URL with a user");
        let url = format!("{scheme}://{role}@{host}");
        let out = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &url, "-c", sql])
            .stdin(Stdio::null())
            .output()
            .expect("running psql");
        assert!(
            out.status.success(),
            "psql as {role}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A plain client of the test database, as an application has.
    pub fn client(&self) -> Client {
        Client::connect(&self.url).expect("connecting to the test database")
    }

    /// The engine on the test database's `public` schema.
    pub fn engine(
        &self,
        access: cutover::db::Access,
        side: cutover::spec::Side,
    ) -> cutover::db::postgres::Postgres {
        cutover::db::postgres::Postgres::open(&self.url, access, side)
            .expect("opening the test database")
    }

    /// The test database's `public` schema opened as the tool opens a
    /// database, with the control store above its engine.
    pub fn db(&self, access: cutover::db::Access, side: cutover::spec::Side) -> cutover::db::Db {
        as_db(self.engine(access, side))
    }

    /// The engine on one schema of the test database.
    pub fn engine_in(
        &self,
        schema: &str,
        access: cutover::db::Access,
    ) -> anyhow::Result<cutover::db::postgres::Postgres> {
        cutover::db::postgres::Postgres::open(
            &format!("{}?schema={schema}", self.url),
            access,
            cutover::spec::Side::Target,
        )
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.admin) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// The source table of [`OrdersOnServer`] (SQLite).
pub const SERVER_ORDERS_SOURCE: &str =
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL);";
/// The target table of [`OrdersOnServer`] (PostgreSQL).
pub const SERVER_ORDERS_TARGET: &str =
    "CREATE TABLE orders (id bigint PRIMARY KEY, cents bigint NOT NULL, status text NOT NULL)";

/// The running example's orders moving from a SQLite file in a folder of
/// the test's into a database of its own on the server (`public` schema,
/// [`TestDb`]): `cutover` runs in the folder through the harness's
/// [`Cmd`], and the rows of either side are read by the test's own
/// connections.
pub struct OrdersOnServer {
    dir: tempfile::TempDir,
    pub db: TestDb,
}

impl OrdersOnServer {
    /// `rows` orders in the source (ids 1..=rows), an empty target table;
    /// `None` when no server answers (see [`TestDb::new`]).
    pub fn new(test: &str, rows: i64) -> Option<OrdersOnServer> {
        let db = TestDb::new(test)?;
        db.client()
            .batch_execute(SERVER_ORDERS_TARGET)
            .expect("creating the target table");
        let dir = tempfile::tempdir().expect("a temporary folder");
        let source = rusqlite::Connection::open(dir.path().join("source.db")).expect("source");
        source
            .execute_batch(SERVER_ORDERS_SOURCE)
            .expect("source table");
        source.execute_batch("BEGIN").expect("begin");
        for id in 1..=rows {
            source
                .execute(
                    "INSERT INTO orders VALUES (?1, ?2, ?3)",
                    rusqlite::params![
                        id,
                        format!("{}.{:02}", id * 3 % 1000, id % 100),
                        if id % 3 == 0 { "C" } else { "A" }
                    ],
                )
                .expect("a source row");
        }
        source.execute_batch("COMMIT").expect("commit");
        let spec = format!(
            "[source]\nurl = \"sqlite://source.db\"\n[target]\nurl = \"{}\"\n\n[[tables]]\nname = \"orders\"\nkey = [\"id\"]\n\n[[tables.columns]]\nsource = \"dollars\"\ntarget = \"cents\"\ntransform = \"decimal_to_minor\"\nscale = 2\n\n[[tables.columns]]\nsource = \"status\"\ntarget = \"status\"\ntransform = \"map\"\nmap = {{ A = \"active\", C = \"closed\" }}\n",
            db.url
        );
        std::fs::write(dir.path().join("spec.toml"), spec).expect("writing the spec");
        Some(OrdersOnServer { dir, db })
    }

    /// The folder: the spec and the source.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `cutover ARGS --spec spec.toml` in the folder, not started yet.
    pub fn command(&self, args: &[&str]) -> super::Cmd {
        let mut c = super::cutover_in(self.path(), args);
        c.env("CUTOVER_BUSY_TIMEOUT_MS", "5000")
            // Correctness, not timing, is under test: a loaded machine must
            // not make the fence give up on its locks.
            .env("CUTOVER_LOCK_TIMEOUT_MS", "10000");
        c
    }

    /// `cutover ARGS`, which must exit with `code`.
    #[track_caller]
    pub fn run(&self, args: &[&str], code: i32) -> super::Output {
        self.command(args).expect(code)
    }

    /// `cutover --format json ARGS`, which must exit 0 with one JSON document.
    #[track_caller]
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--format", "json"];
        all.extend_from_slice(args);
        self.run(&all, 0).json()
    }

    /// The source's orders: id → (dollars, status).
    pub fn source_rows(&self) -> BTreeMap<i64, (String, String)> {
        let c = rusqlite::Connection::open(self.path().join("source.db")).expect("source");
        let mut st = c
            .prepare("SELECT id, dollars, status FROM orders")
            .expect("query");
        st.query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
            .expect("rows")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
    }

    /// The oracle: the target's orders turned back into source form by
    /// arithmetic done here, not by the tool.
    pub fn target_as_source(&self) -> BTreeMap<i64, (String, String)> {
        let mut c = self.db.client();
        c.query("SELECT id, cents, status FROM orders", &[])
            .expect("reading the target")
            .iter()
            .map(|r| {
                let cents: i64 = r.get(1);
                let status: String = r.get(2);
                let code = match status.as_str() {
                    "active" => "A",
                    "closed" => "C",
                    other => panic!("a status the map does not know: {other}"),
                };
                (
                    r.get::<_, i64>(0),
                    (
                        format!("{}.{:02}", cents / 100, cents % 100),
                        code.to_string(),
                    ),
                )
            })
            .collect()
    }

    /// The journal entries the source records as applied.
    pub fn applied_entries(&self) -> i64 {
        rusqlite::Connection::open(self.path().join("source.db"))
            .expect("source")
            .query_row("SELECT sum(entries) FROM _cutover_applied", [], |r| {
                r.get(0)
            })
            .expect("applied set")
    }
}

/// A PostgreSQL engine opened by a test, as the tool holds a database.
pub fn as_db(engine: cutover::db::postgres::Postgres) -> cutover::db::Db {
    let at = engine.location().to_string();
    cutover::db::Db::new(engine, &cutover::db::engines::POSTGRES, at)
}
