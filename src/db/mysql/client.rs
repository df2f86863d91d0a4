//! The connection to a MySQL or MariaDB server: one blocking `mysql::Conn`
//! (the `mysql` crate, binary protocol, rustls for TLS), opened as the URL
//! says ([`super::url`]), with the session settings every other part of
//! the engine relies on, its transactions, and errors in one line that name
//! the URL without its password.
//!
//! Every session runs with:
//!
//! - `sql_mode` strict and exact ([`SQL_MODE`]): a value the column cannot
//!   hold is an error, never truncated, rounded to a zero date or coerced;
//!   `0` written to an `AUTO_INCREMENT` column is `0`, not a new id;
//!   backslashes in string literals are themselves;
//! - `time_zone = '+00:00'`, so a `TIMESTAMP` reads and writes in UTC;
//! - `utf8mb4` for everything sent and received (`SET NAMES utf8mb4`);
//! - no statement time limit (`max_statement_time = 0` on MariaDB,
//!   `max_execution_time = 0` on MySQL), no `sql_select_limit`, no
//!   `sql_safe_updates`, `sql_auto_is_null = 0`, `max_sort_length` at its
//!   largest (8 MiB) so that long text keys sort by all their bytes, with a
//!   `sort_buffer_size` of 32 MiB that holds such a key (the server's 2 MiB
//!   refuses to sort a `TEXT` key at that length: "Out of sort memory"), and
//!   `net_write_timeout` / `net_read_timeout` of a day, so that a scan whose
//!   reader waits on the other side of a merge is not cut after 60 s;
//! - transactions `REPEATABLE READ`; a reader's are also `READ ONLY`, and
//!   [`MySql::begin`] starts them `WITH CONSISTENT SNAPSHOT`, so every
//!   statement of a read sees one snapshot taken when it began.
//!
//! Waits for row and metadata locks keep the server's own settings
//! (`innodb_lock_wait_timeout`, `lock_wait_timeout`).

use std::cell::{RefCell, RefMut};

use anyhow::{Context, Result, bail};
use mysql::prelude::Queryable;
use mysql::{Conn, OptsBuilder, SslOpts};

use super::url::{Endpoint, MyUrl, SslMode};
use crate::db::Access;
use crate::spec::Side;

/// The `sql_mode` of every session: strict for every table (transactional
/// or not), no zero or partly zero dates, division by zero an error, no
/// silent change of storage engine, `0` kept in an `AUTO_INCREMENT`
/// column, standard backslashes, and identifiers in double quotes as
/// cutover's control store writes them (`ANSI_QUOTES`: its string
/// literals are single-quoted). Each of these names is known to MariaDB
/// 10.3+ and MySQL 8 alike (MySQL 8 warns that the date ones are
/// deprecated, and keeps them).
pub const SQL_MODE: &str = "ANSI_QUOTES,STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,\
ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO,NO_BACKSLASH_ESCAPES,\
ONLY_FULL_GROUP_BY";

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    MariaDb,
    MySql,
}

/// The server a connection reached.
#[derive(Clone, Debug)]
pub struct ServerInfo {
    pub flavor: Flavor,
    /// `(major, minor, patch)`.
    pub version: (u16, u16, u16),
    /// `VERSION()` as the server says it (`10.11.6-MariaDB-0+deb12u1`).
    pub version_text: String,
}

impl ServerInfo {
    fn of(version_text: String) -> Result<ServerInfo> {
        let flavor = if version_text.contains("MariaDB") {
            Flavor::MariaDb
        } else {
            Flavor::MySql
        };
        // MariaDB behind a replication-era prefix says `5.5.5-10.11.6-MariaDB`.
        let numbers = version_text
            .strip_prefix("5.5.5-")
            .filter(|_| flavor == Flavor::MariaDb)
            .unwrap_or(&version_text);
        let mut parts = numbers
            .split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse::<u16>().unwrap_or(0));
        let version = (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        );
        let oldest = match flavor {
            Flavor::MariaDb => (10, 3, 0),
            Flavor::MySql => (8, 0, 0),
        };
        if version < oldest {
            bail!(
                "the server is {version_text}; cutover needs MariaDB 10.3 or later, or MySQL 8.0 or later"
            );
        }
        Ok(ServerInfo {
            flavor,
            version,
            version_text,
        })
    }

    /// The binary collation of utf8mb4 that does not pad (`'b'` is not
    /// `'b '`): byte order, the order cutover compares text keys in.
    pub fn nopad_bin(&self) -> &'static str {
        match self.flavor {
            Flavor::MariaDb => "utf8mb4_nopad_bin",
            Flavor::MySql => "utf8mb4_0900_bin",
        }
    }
}

/// The statements that set a session up (see the module's documentation).
pub fn session_sql(flavor: Flavor, access: Access) -> Vec<String> {
    let timeout = match flavor {
        Flavor::MariaDb => "max_statement_time = 0",
        Flavor::MySql => "max_execution_time = 0, information_schema_stats_expiry = 0",
    };
    let mode = match access {
        Access::Read => "REPEATABLE READ, READ ONLY",
        Access::Write => "REPEATABLE READ, READ WRITE",
    };
    vec![
        "SET NAMES utf8mb4".to_string(),
        format!(
            "SET SESSION sql_mode = '{SQL_MODE}', time_zone = '+00:00', {timeout}, \
             sql_select_limit = 18446744073709551615, sql_safe_updates = 0, sql_auto_is_null = 0, \
             max_sort_length = 8388608, sort_buffer_size = 33554432, net_write_timeout = 86400, net_read_timeout = 86400, \
             autocommit = 1"
        ),
        format!("SET SESSION TRANSACTION ISOLATION LEVEL {mode}"),
    ]
}

/// The server's own words for an error, in one line, without the driver's
/// framing: `Access denied for user 'app'@'10.0.0.5' (error 1045)`. The
/// driver's `Display` wraps each kind of error in its Rust name and braces
/// (`DriverError { … }`); each is said here in a sentence instead.
pub fn said(e: &mysql::Error) -> String {
    let text = match e {
        mysql::Error::MySqlError(m) => format!("{} (error {})", m.message, m.code),
        mysql::Error::IoError(io) => io.to_string(),
        mysql::Error::CodecError(c) => match std::error::Error::source(c) {
            Some(io) => io.to_string(),
            None => c.to_string(),
        },
        mysql::Error::DriverError(mysql::DriverError::CouldNotConnect(Some((addr, why, _)))) => {
            format!("could not connect to {addr}: {why}")
        }
        mysql::Error::DriverError(d) => d.to_string(),
        mysql::Error::TlsError(t) => format!("TLS failed: {t}"),
        mysql::Error::UrlError(u) => u.to_string(),
        mysql::Error::FromRowError(_) | mysql::Error::FromValueError(_) => {
            "the server sent a value of a type not expected here".to_string()
        }
    };
    text.replace('\n', " ")
}

/// The server's error code, when the server refused.
pub fn code(e: &mysql::Error) -> Option<u16> {
    match e {
        mysql::Error::MySqlError(m) => Some(m.code),
        _ => None,
    }
}

/// What to do after a connection failed, from what failed.
fn advice(e: &mysql::Error, u: &MyUrl) -> String {
    match code(e) {
        Some(1045) => match &u.password_from {
            Some(from) => format!(
                "check the user and the password (it came from {})",
                from.shown("option file")
            ),
            None => "no password was given: give it in ~/.my.cnf ([client] password=…), CUTOVER_SOURCE_PASSWORD / CUTOVER_TARGET_PASSWORD or MYSQL_PWD (docs/engines.md, MySQL), or check the user".to_string(),
        },
        Some(1044 | 1049) => "check the database name and that the user may use it".to_string(),
        Some(_) => "see the server's message".to_string(),
        None => match e {
            mysql::Error::DriverError(mysql::DriverError::TlsNotSupported) => format!(
                "the server does not offer TLS; enable it on the server, or use ssl-mode=PREFERRED or DISABLED (ssl-mode is {})",
                u.ssl_mode.shown()
            ),
            mysql::Error::TlsError(_) => {
                "check ssl-ca and the server's certificate (docs/engines.md, MySQL)".to_string()
            }
            _ => "is the server running and the URL right?".to_string(),
        },
    }
}

fn options(u: &MyUrl, tls: bool) -> OptsBuilder {
    let mut o = OptsBuilder::new()
        .user(Some(&u.user))
        .pass(u.password())
        .db_name(Some(&u.database))
        // Only what the URL says: never a socket the server names instead.
        .prefer_socket(false)
        .tcp_connect_timeout(u.connect_timeout)
        .tcp_nodelay(true);
    o = match &u.endpoint {
        Endpoint::Tcp { host, port } => o.ip_or_hostname(Some(host)).tcp_port(*port),
        Endpoint::Socket(path) => o.socket(Some(path.to_string_lossy().into_owned())),
    };
    if !tls || u.ssl_mode == SslMode::Disabled || matches!(u.endpoint, Endpoint::Socket(_)) {
        return o;
    }
    let verify_chain = matches!(u.ssl_mode, SslMode::VerifyCa | SslMode::VerifyIdentity);
    let mut ssl = SslOpts::default()
        .with_danger_accept_invalid_certs(!verify_chain)
        .with_danger_skip_domain_validation(u.ssl_mode != SslMode::VerifyIdentity);
    if let Some(ca) = &u.ssl_ca {
        ssl = ssl.with_root_cert_path(Some(ca.clone()));
    }
    if let (Some(cert), Some(key)) = (&u.ssl_cert, &u.ssl_key) {
        ssl = ssl.with_client_identity(Some(mysql::ClientIdentity::new(cert.clone(), key.clone())));
    }
    o.ssl_opts(Some(ssl))
}

/// Connects as `u` says. Under `PREFERRED`, a server that offers no TLS, or
/// a handshake that fails, is tried again in plaintext, as the `mysql`
/// client does.
fn connect(u: &MyUrl, side: Side) -> Result<Conn> {
    let first = Conn::new(options(u, true));
    let conn = match first {
        Err(e) if u.ssl_mode == SslMode::Preferred && code(&e).is_none() => {
            Conn::new(options(u, false))
        }
        r => r,
    };
    conn.map_err(|e| {
        anyhow::anyhow!(
            "connecting to {side} database {} at {} with ssl-mode={}: {}; {}",
            u.shown,
            u.endpoint,
            u.ssl_mode.shown(),
            said(&e),
            advice(&e, u)
        )
    })
}

/// One open MySQL or MariaDB database.
pub struct MySql {
    conn: RefCell<Conn>,
    database: String,
    /// The URL as messages show it (no password).
    shown: String,
    endpoint: Endpoint,
    ssl_mode: SslMode,
    server: ServerInfo,
    access: Access,
    warnings: Vec<String>,
    /// Where the password came from (never the password).
    password_from: Option<super::url::PasswordFrom>,
}

impl MySql {
    /// Connects to the database of `url` and sets the session up; `role`
    /// (`source`, `target`) is how messages name it.
    pub fn open(url: &str, access: Access, side: Side) -> Result<MySql> {
        let u = MyUrl::parse(url, side).with_context(|| format!("{side} database"))?;
        MySql::open_url(&u, access, side)
    }

    /// [`MySql::open`] with a URL already parsed.
    pub fn open_url(u: &MyUrl, access: Access, side: Side) -> Result<MySql> {
        // An option file not read is said now: the connection may fail for
        // want of its password.
        for w in &u.warnings {
            crate::db::credentials::warn_once(w);
        }
        let mut conn = connect(u, side)?;
        let fail = |e: mysql::Error| {
            anyhow::anyhow!(
                "setting up the session on {side} database {}: {}",
                u.shown,
                said(&e)
            )
        };
        let version: Option<String> = conn.query_first("SELECT VERSION()").map_err(fail)?;
        let server = ServerInfo::of(version.unwrap_or_default())
            .with_context(|| format!("{side} database {}", u.shown))?;
        for sql in session_sql(server.flavor, access) {
            conn.query_drop(&sql).map_err(fail)?;
        }
        Ok(MySql {
            conn: RefCell::new(conn),
            database: u.database.clone(),
            shown: u.shown.clone(),
            endpoint: u.endpoint.clone(),
            ssl_mode: u.ssl_mode,
            server,
            access,
            warnings: u
                .warnings
                .iter()
                .cloned()
                .chain(u.password_warning())
                .collect(),
            password_from: u.password_from.clone(),
        })
    }

    /// The database (MySQL's schema) the spec's tables are in.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The URL as messages name it (no password).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    pub fn server(&self) -> &ServerInfo {
        &self.server
    }

    pub fn access(&self) -> Access {
        self.access
    }

    /// What the operator should fix (a password in the URL).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// A table of the database, quoted and qualified.
    pub fn qualified(&self, table: &str) -> String {
        format!(
            "{}.{}",
            super::quote_ident(&self.database),
            super::quote_ident(table)
        )
    }

    /// The connection. One statement runs on it at a time: a scan's
    /// callback cannot use the same database.
    pub(super) fn conn(&self) -> Result<RefMut<'_, Conn>> {
        self.conn.try_borrow_mut().map_err(|_| {
            anyhow::anyhow!(
                "{}: the connection is busy with a scan; another statement cannot run on it until the scan ends",
                self.shown
            )
        })
    }

    /// An error of `what` (`reading table 'orders'`) on this database, in
    /// one line with the server's message.
    pub(super) fn failed(&self, what: &str, e: &mysql::Error) -> anyhow::Error {
        let next = match code(e) {
            Some(1044 | 1142 | 1143 | 1227) => {
                "; the user lacks a privilege: grant it, or use a user that has it"
            }
            Some(1146) => "; the table is not in this database: check the spec's names",
            Some(1205 | 1213) => {
                "; another session holds the rows' locks: find it in SHOW PROCESSLIST, then run again"
            }
            Some(1317 | 1927 | 1969 | 3024) => {
                "; the statement was stopped on the server (KILL, or a time limit): run again"
            }
            Some(1792) => "; the session is read-only: this database was opened for reading",
            Some(_) => "",
            None => "; the connection failed: is the server still running?",
        };
        anyhow::anyhow!("{what} in {}: {}{next}", self.shown, said(e))
    }

    /// Runs one statement that returns no rows, with `params` bound.
    pub fn execute(&self, sql: &str, params: Vec<mysql::Value>) -> Result<u64> {
        let mut conn = self.conn()?;
        let r = if params.is_empty() {
            conn.query_drop(sql)
        } else {
            conn.exec_drop(sql, params)
        };
        r.map_err(|e| self.failed("running a statement", &e))?;
        Ok(conn.affected_rows())
    }

    /// The rows of a query (not a table's scan: its values are read into
    /// memory), each value as the server's text, NULL as `None`.
    pub fn query_text(
        &self,
        sql: &str,
        params: Vec<mysql::Value>,
    ) -> Result<Vec<Vec<Option<String>>>> {
        let rows: Vec<mysql::Row> = self
            .conn()?
            .exec(sql, params)
            .map_err(|e| self.failed("running a query", &e))?;
        Ok(rows
            .into_iter()
            .map(|r| {
                r.unwrap_raw()
                    .into_iter()
                    .map(|v| match v {
                        None | Some(mysql::Value::NULL) => None,
                        Some(mysql::Value::Bytes(b)) => {
                            Some(String::from_utf8_lossy(&b).into_owned())
                        }
                        Some(v) => Some(super::types::raw(&v)),
                    })
                    .collect()
            })
            .collect())
    }

    /// Starts a transaction: a reader's sees one consistent snapshot from
    /// its start (`WITH CONSISTENT SNAPSHOT, READ ONLY`); a writer's is
    /// `READ WRITE`.
    pub fn begin(&self) -> Result<()> {
        let sql = match self.access {
            Access::Read => "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
            Access::Write => "START TRANSACTION READ WRITE",
        };
        self.conn()?
            .query_drop(sql)
            .map_err(|e| self.failed("starting a transaction", &e))
    }

    pub fn commit(&self) -> Result<()> {
        self.conn()?
            .query_drop("COMMIT")
            .map_err(|e| self.failed("committing", &e))
    }

    /// Rolls back; a connection that is gone has nothing left to undo.
    pub fn rollback(&self) {
        if let Ok(mut c) = self.conn() {
            let _ = c.query_drop("ROLLBACK");
        }
    }

    /// How the connection is protected, as the server sees it: the TLS
    /// version and cipher, or plaintext (and why).
    pub fn transport(&self) -> Result<String> {
        let mut conn = self.conn()?;
        let status: Vec<(String, String)> = conn
            .query("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
            .map_err(|e| self.failed("reading the session's TLS status", &e))?;
        let get = |n: &str| {
            status
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        let password = match &self.password_from {
            Some(from) => format!("; password from {}", from.shown("option file")),
            None => String::new(),
        };
        let transport = match (get("Ssl_version"), get("Ssl_cipher")) {
            (Some(v), Some(c)) => format!(
                "{} encrypted ({v}, {c}), ssl-mode={}, {}",
                self.endpoint,
                self.ssl_mode.shown(),
                match self.ssl_mode {
                    SslMode::VerifyIdentity => "the certificate's chain and host name verified",
                    SslMode::VerifyCa => "the certificate's chain verified",
                    _ => "the certificate not verified",
                }
            ),
            _ => format!(
                "{} not encrypted, ssl-mode={}{}",
                self.endpoint,
                self.ssl_mode.shown(),
                match (&self.endpoint, self.ssl_mode) {
                    (Endpoint::Socket(_), _) => " (a Unix socket)",
                    (_, SslMode::Disabled) => "",
                    _ => " (the server does not offer TLS)",
                }
            ),
        };
        Ok(format!("{transport}{password}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_told_apart_and_old_servers_refused() -> Result<()> {
        let m = ServerInfo::of("10.11.6-MariaDB-0+deb12u1".into())?;
        assert_eq!((m.flavor, m.version), (Flavor::MariaDb, (10, 11, 6)));
        assert_eq!(m.nopad_bin(), "utf8mb4_nopad_bin");
        let m = ServerInfo::of("5.5.5-10.6.12-MariaDB".into())?;
        assert_eq!(m.version, (10, 6, 12));
        let y = ServerInfo::of("8.0.36".into())?;
        assert_eq!((y.flavor, y.version), (Flavor::MySql, (8, 0, 36)));
        assert_eq!(y.nopad_bin(), "utf8mb4_0900_bin");
        for old in ["5.7.44", "10.2.44-MariaDB", "5.5.5-10.1.48-MariaDB"] {
            let e = ServerInfo::of(old.into()).expect_err(old).to_string();
            assert!(e.contains("needs MariaDB 10.3"), "{e}");
        }
        Ok(())
    }

    #[test]
    fn every_session_is_strict_in_utc_and_untimed() {
        let m = session_sql(Flavor::MariaDb, Access::Read).join(";");
        for part in [
            "STRICT_ALL_TABLES",
            "NO_ZERO_DATE",
            "NO_ZERO_IN_DATE",
            "NO_AUTO_VALUE_ON_ZERO",
            "time_zone = '+00:00'",
            "max_statement_time = 0",
            "SET NAMES utf8mb4",
            "READ ONLY",
        ] {
            assert!(m.contains(part), "{part}: {m}");
        }
        let y = session_sql(Flavor::MySql, Access::Write).join(";");
        assert!(y.contains("max_execution_time = 0") && !y.contains("max_statement_time"));
        assert!(y.contains("READ WRITE"));
    }
}
