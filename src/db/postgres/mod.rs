//! PostgreSQL: one connection to a database and a schema in it, with the
//! session settings every other part relies on, and write transactions.
//!
//! One concept per file: [`url`] (the spec's URL), [`types`] (column types
//! to values and back, with [`numeric`] and [`datetime`]), [`catalogue`]
//! (tables, columns, keys, foreign keys, triggers), [`table_sql`] (a table's
//! statements), [`scan`] (key-ordered reads through binary COPY, keyed
//! reads, counts) and [`load`] (batch writes through binary COPY).
//!
//! Identifiers from a spec go through [`quote_ident`]; values are bound in
//! binary, except the key a scan resumes after, which COPY cannot take as a
//! parameter and which goes through [`quote_literal`].

use std::cell::{RefCell, RefMut};

use anyhow::{Context, Result, bail};
use postgres::{Client, NoTls};

use crate::db::Access;

pub mod catalogue;
pub mod datetime;
pub mod load;
pub mod numeric;
pub mod scan;
pub mod table_sql;
pub mod types;
pub mod url;

pub use table_sql::TableSql;
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

/// The settings every connection runs with: the text of dates is
/// [`datetime`]'s, string literals are standard, text is UTF-8, and the
/// session only searches the spec's schema (after `pg_catalog`).
fn session_sql(schema: &str, access: Access) -> String {
    let mut sql = format!(
        "SET DateStyle = 'ISO, YMD'; SET TimeZone = 'UTC'; SET IntervalStyle = 'postgres';
         SET extra_float_digits = 3; SET standard_conforming_strings = on;
         SET client_encoding = 'UTF8'; SET search_path = {};",
        quote_ident(schema)
    );
    if access == Access::Read {
        sql.push_str(" SET default_transaction_read_only = on;");
    }
    sql
}

/// One open PostgreSQL database, limited to one schema.
pub struct Db {
    client: RefCell<Client>,
    schema: String,
    /// The URL as messages show it (no password).
    shown: String,
}

impl Db {
    /// Connects to the database of `url` and checks that its schema exists.
    /// A reader's transactions are read-only (`default_transaction_read_only`).
    pub fn open(url: &str, access: Access, role: &str) -> Result<Db> {
        let u = PgUrl::parse(url).with_context(|| format!("{role} database"))?;
        let mut client = u.config.connect(NoTls).with_context(|| {
            format!(
                "connecting to {role} database {}; is the server running and the URL right? (TLS is not built in: use sslmode=disable or prefer)",
                u.shown
            )
        })?;
        client
            .batch_execute(&session_sql(&u.schema, access))
            .with_context(|| format!("setting up the session on {role} database {}", u.shown))?;
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
                "{role} database {}: schema '{}' does not exist (it has: {})",
                u.shown,
                u.schema,
                names.join(", ")
            );
        }
        Ok(Db {
            client: RefCell::new(client),
            schema: u.schema,
            shown: u.shown,
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

    /// Runs SQL text as it is (fixtures, tests): several statements, no
    /// parameters.
    pub fn execute_script(&self, sql: &str) -> Result<()> {
        self.client()?
            .batch_execute(sql)
            .with_context(|| format!("running SQL on {}", self.shown))
    }

    // --- transactions -----------------------------------------------------

    /// Runs `f` inside one transaction: committed when it returns `Ok`,
    /// rolled back when it fails, so the database is either changed whole or
    /// exactly as before.
    pub fn write<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.begin_immediate()?;
        let r = f().and_then(|v| self.commit().map(|()| v));
        if r.is_err() {
            self.rollback();
        }
        r
    }

    /// Opens a transaction. PostgreSQL takes row locks as rows are written;
    /// unlike SQLite's `BEGIN IMMEDIATE` this takes no lock up front.
    pub fn begin_immediate(&self) -> Result<()> {
        self.client()?
            .batch_execute("BEGIN")
            .with_context(|| format!("starting a transaction on {}", self.shown))
    }

    pub fn commit(&self) -> Result<()> {
        self.client()?
            .batch_execute("COMMIT")
            .with_context(|| format!("committing to {}", self.shown))
    }

    /// Rolls back if a transaction is open; safe to call at any time.
    pub fn rollback(&self) {
        if let Ok(mut c) = self.client() {
            let _ = c.batch_execute("ROLLBACK");
        }
    }

    /// Opens a nested transaction inside the open one (a dry run's batch).
    pub fn savepoint(&self) -> Result<()> {
        Ok(self.client()?.batch_execute("SAVEPOINT cutover_batch")?)
    }

    /// Keeps the nested transaction's work in the open one.
    pub fn release(&self) -> Result<()> {
        Ok(self.client()?.batch_execute("RELEASE cutover_batch")?)
    }

    /// Undoes the nested transaction's work and closes it.
    pub fn rollback_savepoint(&self) {
        if let Ok(mut c) = self.client() {
            let _ = c.batch_execute("ROLLBACK TO cutover_batch; RELEASE cutover_batch");
        }
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
