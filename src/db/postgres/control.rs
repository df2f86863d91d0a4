//! What the control tables share: they live in the spec's schema, their
//! templates name it `{{schema}}`, their times are text in UTC to the
//! millisecond (as SQLite's are), and their statements are prepared once
//! per connection.

use anyhow::{Context, Result};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::{Postgres, quote_ident};

/// The time a control table records, as SQL: the statement's time in UTC,
/// `2024-03-15T13:45:00.123Z`, the same text [`crate::db::Connection::now`]
/// gives.
pub(super) const NOW: &str =
    "to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";

pub(super) type Params<'a> = [&'a (dyn ToSql + Sync)];

impl Postgres {
    /// `text` with `{{schema}}` made the spec's schema, quoted.
    pub(super) fn in_schema(&self, text: &str) -> String {
        text.replace("{{schema}}", &quote_ident(&self.schema))
    }

    /// Creates what a DDL template (several statements) makes in the spec's
    /// schema, inside whatever transaction is open, unless every relation
    /// in `names` is already there. Skipping matters beyond the round trip:
    /// `CREATE INDEX IF NOT EXISTS` takes a SHARE lock on its table before
    /// it finds the index, and two runs holding it would deadlock on their
    /// first insert.
    pub(super) fn ensure_tables(&self, template: &str, names: &[&str], what: &str) -> Result<()> {
        let qualified: Vec<String> = names.iter().map(|n| self.qualified(n)).collect();
        let present: bool = self
            .client()?
            .query_one(
                "SELECT bool_and(to_regclass(n) IS NOT NULL) FROM unnest($1::text[]) AS n",
                &[&qualified],
            )?
            .get(0);
        if present {
            return Ok(());
        }
        self.client()?
            .batch_execute(&self.in_schema(template))
            .with_context(|| format!("creating {what} in {}", self.shown))
    }

    /// Runs a statement on the control tables (`{{schema}}` in its text),
    /// prepared once per connection; returns the rows it changed.
    pub(super) fn ctl_execute(&self, text: &str, params: &Params<'_>) -> Result<u64> {
        let text = self.in_schema(text);
        let mut client = self.client()?;
        let st = self.prepare(&mut client, &text)?;
        client
            .execute(&st, params)
            .with_context(|| format!("writing cutover's control tables in {}", self.shown))
    }

    /// Runs a query on the control tables, as [`Postgres::ctl_execute`].
    pub(super) fn ctl_query(&self, text: &str, params: &Params<'_>) -> Result<Vec<Row>> {
        let text = self.in_schema(text);
        let mut client = self.client()?;
        let st = self.prepare(&mut client, &text)?;
        client
            .query(&st, params)
            .with_context(|| format!("reading cutover's control tables in {}", self.shown))
    }

    /// The one row a query on the control tables returns, if any.
    pub(super) fn ctl_opt(&self, text: &str, params: &Params<'_>) -> Result<Option<Row>> {
        Ok(self.ctl_query(text, params)?.into_iter().next())
    }
}
