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
//! one line and passes, except when `CI` is set, where that is a failure.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

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
    /// answers outside CI; under CI a missing server is a failure.
    pub fn new(test: &str) -> Option<TestDb> {
        let server = match server() {
            Ok(s) => s,
            Err(why) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "CI is set and no MySQL server answered: {why}"
                );
                println!("skipping {test}: no MySQL server ({why})");
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

/// `bytes` as the client's `HEX()` prints them.
pub fn hex_upper(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// The spec of the MySQL tests' `orders` table from `source` to `target`:
/// `dollars` (DECIMAL) to `cents` by `decimal_to_minor`, the `status` ENUM
/// mapped `A`/`C` to `active`/`closed`, each of `copies` carried as it is,
/// then `more` (further `[[tables]]`) as written.
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

[[tables.columns]]
source = "status"
target = "status"
transform = "map"
map = {{ A = "active", C = "closed" }}
{copies}{more}"#
    )
}
