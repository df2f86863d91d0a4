//! PostgreSQL, the engine of servers: one type, [`Postgres`], one
//! connection to a database and a schema in it. This file holds the
//! connection, the session settings every other part relies on, and quoting.
//!
//! One concept per file: [`client`] (the connection behind blocking calls:
//! the crate's one PostgreSQL client, which its tests and benches use too),
//! [`url`] (the spec's URL, completed from the libpq environment and
//! [`pgpass`], the password file), [`tls`] (TLS with libpq's `sslmode`s,
//! through rustls), [`types`] (column types to values and back, with
//! [`numeric`] and [`datetime`]), [`connection`] (transactions, change token,
//! durability), [`catalogue`] (tables, columns, keys, foreign keys, triggers,
//! schema text, sequences), [`table_sql`] (a table's statements and their
//! plan), [`scan`] (key-ordered reads through binary COPY), [`rows`] (keyed
//! reads and writes, counts, row-by-row inserts) and [`load`] (batch writes
//! through binary COPY).
//!
//! Identifiers from a spec go through [`quote_ident`]; values are bound in
//! binary, except the key a scan resumes after, which COPY cannot take as a
//! parameter and which goes through [`quote_literal`].

use std::cell::{RefCell, RefMut};
use std::collections::HashMap;

use anyhow::{Context, Result, bail};
use client::Client;
use tokio_postgres::Statement;

use crate::db::Access;
use crate::spec::Side;

pub mod capture;
pub mod catalogue;
pub mod client;
mod conditional;
pub mod connection;
pub mod control;
pub mod datetime;
pub mod digest;
pub mod fence;
pub mod fixtures;
pub mod journal_log;
pub mod load;
pub mod numeric;
pub mod pgpass;
pub mod rows;
pub mod scan;
pub mod side_effects;
pub mod table_sql;
pub mod tls;
pub mod types;
pub mod url;

pub use connection::constraint_violation;
pub use url::{PgUrl, is_postgres};

/// Quotes an identifier: `a "b"` becomes `"a ""b"""`.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a string literal; every connection runs with
/// `standard_conforming_strings = on`, so a backslash is itself. A NUL
/// cannot be in PostgreSQL text at all.
pub fn quote_literal(text: &str) -> Result<String> {
    if text.contains('\0') {
        bail!("PostgreSQL text cannot hold a NUL character");
    }
    Ok(format!("'{}'", text.replace('\'', "''")))
}

/// The variables that would give `side`'s password.
fn password_variables(side: Side) -> String {
    format!("{} or PGPASSWORD", side.password_variable())
}

/// Why a connection failed, in one line: the server, the TLS mode and
/// what failed, never the password nor the driver's chain of errors.
fn connect_failure(e: &tokio_postgres::Error, u: &PgUrl, side: Side) -> String {
    let head = format!(
        "connecting to {side} database {} at {} with sslmode={}",
        u.shown,
        u.server,
        u.tls.shown()
    );
    if let Some(why) = tls::failure(e, &u.tls) {
        return format!("{head}: TLS failed: {why}");
    }
    let what = match e.as_db_error() {
        Some(db) => {
            let mut m = format!("the server refused: {}", db.message());
            if db.code() == &tokio_postgres::error::SqlState::INVALID_PASSWORD {
                m.push_str(&match &u.password_from {
                    Some(from) => format!(" (the password came from {})", from.shown("password file")),
                    None => format!(" (no password was given: set {}, or add a line to ~/.pgpass; see docs/engines.md, Connecting)", password_variables(side)),
                });
            }
            m
        }
        None => {
            // The driver's own words, without its chain of causes repeated.
            let mut m = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                let t = c.to_string();
                if !m.contains(&t) {
                    m = format!("{m}: {t}");
                }
                cause = c.source();
            }
            if m.contains("password missing") {
                format!(
                    "{m}: the server asks for a password and none was given (set {}, or add a line to ~/.pgpass; see docs/engines.md, Connecting)",
                    password_variables(side)
                )
            } else {
                format!("{m}; is the server running and the URL right?")
            }
        }
    };
    format!("{head}: {what}")
}

/// The settings every connection runs with: the text of dates is
/// [`datetime`]'s, `money`'s text is the C locale's on every server (the
/// server's `lc_monetary` would change its symbol and separators), string
/// literals are standard, text is UTF-8, the
/// session only searches the spec's schema (after `pg_catalog`), and no
/// `statement_timeout` or `idle_in_transaction_session_timeout` set on the
/// role or the database cuts a scan of a whole table (the fingerprint's),
/// or a transaction that waits for its reader, short. Waits for a lock keep
/// the role's `lock_timeout`; the fence and the journal set their own.
fn session_sql(schema: &str, access: Access) -> String {
    let mut sql = format!(
        "SET DateStyle = 'ISO, YMD'; SET TimeZone = 'UTC'; SET IntervalStyle = 'postgres';
         SET extra_float_digits = 3; SET standard_conforming_strings = on;
         SET client_encoding = 'UTF8'; SET search_path = {};
         SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0;
         SET lc_monetary = 'C';",
        quote_ident(schema)
    );
    if access == Access::Read {
        sql.push_str(" SET default_transaction_read_only = on;");
    }
    sql
}

impl crate::db::Database for Postgres {}

/// One open PostgreSQL database, limited to one schema.
pub struct Postgres {
    client: RefCell<Client>,
    schema: String,
    /// The URL as messages show it (no password).
    shown: String,
    /// The first host and port, as messages name the server.
    server: String,
    /// How the connection uses TLS.
    tls: tls::Settings,
    /// Where the password came from (never the password).
    password_from: Option<url::PasswordFrom>,
    /// Statements prepared on this connection, by their text.
    prepared: RefCell<HashMap<String, Statement>>,
    /// Replay's hold on the source's side effects: what every write
    /// transaction runs first, and what it runs before it commits
    /// ([`side_effects`]).
    hold: RefCell<Option<(String, String)>>,
}

impl Postgres {
    /// Connects to the database of `url` and checks that its schema exists.
    /// A reader's transactions are read-only (`default_transaction_read_only`).
    pub fn open(url: &str, access: Access, side: Side) -> Result<Postgres> {
        let u = PgUrl::parse(url, side).with_context(|| format!("{side} database"))?;
        for w in &u.warnings {
            crate::db::credentials::warn_once(w);
        }
        let mut client = match Client::connect(&u.config, &u.tls) {
            Ok(c) => c,
            Err(client::Connect::Setup(e)) => {
                return Err(e.context(format!(
                    "{side} database {} (sslmode={})",
                    u.shown,
                    u.tls.shown()
                )));
            }
            Err(client::Connect::Server(e)) => bail!("{}", connect_failure(&e, &u, side)),
        };
        client
            .batch_execute(&session_sql(&u.schema, access))
            .with_context(|| format!("setting up the session on {side} database {}", u.shown))?;
        let found = client.query_opt(
            "SELECT 1 FROM pg_namespace WHERE nspname = $1",
            &[&u.schema],
        )?;
        if found.is_none() {
            let names: Vec<String> = client
                .query(
                    "SELECT nspname FROM pg_namespace WHERE nspname !~ '^pg_' AND nspname <> 'information_schema' ORDER BY 1",
                    &[],
                )?
                .iter()
                .map(|r| r.get(0))
                .collect();
            bail!(
                "{side} database {}: schema '{}' does not exist (it has: {})",
                u.shown,
                u.schema,
                names.join(", ")
            );
        }
        Ok(Postgres {
            client: RefCell::new(client),
            schema: u.schema,
            shown: u.shown,
            server: u.server,
            tls: u.tls,
            password_from: u.password_from,
            prepared: RefCell::default(),
            hold: RefCell::default(),
        })
    }

    /// The schema the spec's tables are in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The URL as messages name it (no password).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// A table of the schema, quoted and qualified.
    pub fn qualified(&self, table: &str) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(table))
    }

    /// The connection. Only one statement runs on it at a time: a scan's
    /// callback cannot use the same database.
    fn client(&self) -> Result<RefMut<'_, Client>> {
        self.client.try_borrow_mut().map_err(|_| {
            anyhow::anyhow!(
                "{}: the connection is busy with a scan; another statement cannot run on it until the scan ends",
                self.shown
            )
        })
    }

    /// A statement prepared once per connection.
    fn prepare(&self, client: &mut Client, text: &str) -> Result<Statement> {
        if let Some(st) = self.prepared.borrow().get(text) {
            return Ok(st.clone());
        }
        let st = client
            .prepare(text)
            .with_context(|| format!("preparing a statement on {}", self.shown))?;
        self.prepared
            .borrow_mut()
            .insert(text.to_string(), st.clone());
        Ok(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_hostile_names() -> Result<()> {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's \\")?, "'it''s \\'");
        assert!(quote_literal("a\0").is_err());
        Ok(())
    }
}
