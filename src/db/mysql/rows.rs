//! [`Rows`] on MySQL and MariaDB: key-ordered streaming scans of the binary
//! protocol ([`super::scan`]), keyed reads that match a key exactly
//! ([`super::table_sql`]), one write at a time, and a batch of inserts as
//! multi-row `INSERT` statements.
//!
//! Counts of changed rows are the rows the statement matched, never the
//! server's "changed" count (an `UPDATE` that writes a row's own values
//! changes nothing and still matched it). A key already taken is error
//! 1062, which InnoDB rolls back alone: the transaction goes on, and the
//! caller decides what the collision means. Nothing goes through `INSERT
//! IGNORE`, which would turn every other error into a warning too.

use anyhow::{Context, Result, bail};
use mysql::Value as My;
use mysql::prelude::Queryable;

use super::client::code;
use super::table_sql::Plan;
use super::{MySql, quote_ident};
use crate::db::{BatchInsert, ConditionalWrite, Count, RowWrite, Rows, TableSql, ValueRefused};
use crate::value::{Block, Row, Value, display_key};

/// MySQL's error for a key already taken (`ER_DUP_ENTRY`).
const DUPLICATE: u16 = 1062;

/// The errors of a row the table refuses, each of which InnoDB undoes for
/// the statement alone: a key taken, a NULL in a NOT NULL column, a
/// foreign key (parent missing, or children left), a CHECK constraint
/// (MariaDB's 4025, MySQL's 3819), a trigger's `SIGNAL`, a value too long
/// or out of range, a NOT NULL column without a default that the insert
/// does not fill (1364: one the spec does not carry).
const REFUSED_ROW: &[u16] = &[
    1062, 1048, 1451, 1452, 1216, 1217, 4025, 3819, 1644, 1406, 1264, 1292, 1366, 1364,
];

/// The most rows one multi-row `INSERT` of [`Rows::bulk_insert`] carries,
/// and the most bytes of values (well under the server's
/// `max_allowed_packet`, 16 MiB by default on MariaDB and 64 MiB on
/// MySQL 8).
const BULK_ROWS: usize = 1000;
const BULK_BYTES: usize = 4 << 20;

impl Rows for MySql {
    fn table_sql(
        &self,
        table: &str,
        columns: &[&str],
        key_len: usize,
        first: Option<usize>,
    ) -> TableSql {
        self.write_table_sql(table, columns, key_len, first)
    }

    /// The estimate is `information_schema.TABLES.TABLE_ROWS` (InnoDB's
    /// sampled statistics).
    fn row_count(&self, sql: &TableSql, count: Count) -> Result<i64> {
        let plan = self.plan(sql)?;
        let n: Option<i64> = match count {
            Count::Exact => self.conn()?.query_first(sql.count.as_str()),
            Count::Estimate => self.conn()?.exec_first(
                "SELECT CAST(COALESCE(TABLE_ROWS, 0) AS SIGNED) FROM information_schema.TABLES
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
                (self.database(), plan.table.as_str()),
            ),
        }
        .map_err(|e| self.failed(&format!("counting table '{}'", sql.table), &e))?;
        Ok(n.unwrap_or(0))
    }

    fn scan_into(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        block_rows: usize,
        sink: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        let plan = self.plan(sql)?;
        let (text, params) = match after {
            None => (sql.scan.as_str(), Vec::new()),
            Some(after) => (sql.scan_after.as_str(), plan.after_params(after)?),
        };
        let Some(length) = plan.sort_length else {
            return self.stream(&plan.shape(), text, params, block_rows, sink);
        };
        self.execute(
            &format!("SET SESSION max_sort_length = {length}"),
            Vec::new(),
        )?;
        let r = self.stream(&plan.shape(), text, params, block_rows, sink);
        self.execute(
            &format!(
                "SET SESSION max_sort_length = {}",
                super::table_sql::SORT_LENGTH
            ),
            Vec::new(),
        )?;
        r
    }

    /// Only a row whose key reads back as exactly these values matches.
    fn get_row(&self, sql: &TableSql, key: &[Value]) -> Result<Option<Row>> {
        let plan = self.plan(sql)?;
        let Some(params) = plan.key_params(key)? else {
            return Ok(None);
        };
        let mut found: Option<Row> = None;
        let mut extra = false;
        self.stream(&plan.shape(), &sql.select_by_key, params, 16, &mut |b| {
            for i in 0..b.rows() {
                let row = b.values(i, b.width());
                if row[..sql.key_len] != *key {
                    continue;
                }
                extra |= found.is_some();
                found = Some(row);
            }
            Ok(true)
        })?;
        if extra {
            bail!(
                "table '{}' in {} holds more than one row with key {}; the spec's key must be unique",
                sql.table,
                self.shown(),
                display_key(key)
            );
        }
        Ok(found)
    }

    fn write_row(&self, sql: &TableSql, write: RowWrite<'_>) -> Result<usize> {
        // Emptying a table reads no column: its statements may name none.
        if let RowWrite::All = write {
            return self.delete_all(&sql.table);
        }
        let plan = self.plan(sql)?;
        match write {
            RowWrite::Insert(row) => {
                let params = plan.bind(row, 0)?;
                self.write(&sql.insert, params, "inserting into", &sql.table)
            }
            RowWrite::Update { key, row } => {
                let Some(at) = plan.key_params(key)? else {
                    return Ok(0);
                };
                let (text, from) = match &sql.update_values {
                    Some(update) if row[..sql.key_len] == *key => (update, sql.key_len),
                    _ => (&sql.update, 0),
                };
                let mut params = plan.bind(row, from)?;
                params.extend(at);
                self.write(text, params, "updating", &sql.table)
            }
            RowWrite::Delete(key) => {
                let Some(at) = plan.key_params(key)? else {
                    return Ok(0);
                };
                self.write(&sql.delete, at, "deleting from", &sql.table)
            }
            RowWrite::All => unreachable!("emptied above"),
        }
    }

    fn inserter<'a>(&'a self, sql: &TableSql) -> Result<Box<dyn BatchInsert + 'a>> {
        Ok(Box::new(Inserter {
            db: self,
            plan: self.plan(sql)?,
            insert: sql.insert.clone(),
        }))
    }

    /// Multi-row `INSERT`s of up to [`BULK_ROWS`] rows inside a savepoint:
    /// a key already there rolls them all back (`None`, the transaction
    /// usable) for the caller to go row by row; any other error rolls them
    /// back and is the error.
    fn bulk_insert(&self, sql: &TableSql, blocks: &[Block]) -> Result<Option<u64>> {
        let plan = self.plan(sql)?;
        self.execute("SAVEPOINT cutover_bulk", Vec::new())?;
        match self.insert_blocks(&plan, blocks) {
            Ok(n) => {
                self.execute("RELEASE SAVEPOINT cutover_bulk", Vec::new())?;
                Ok(Some(n))
            }
            Err(e) => {
                self.execute("ROLLBACK TO SAVEPOINT cutover_bulk", Vec::new())?;
                self.execute("RELEASE SAVEPOINT cutover_bulk", Vec::new())?;
                match e {
                    Bulk::Collided => Ok(None),
                    Bulk::Failed(e) => Err(e),
                }
            }
        }
    }

    /// Whole-row conditional writes: InnoDB's `UPDATE` and `DELETE` act on
    /// the latest committed row, whatever the transaction's snapshot, so
    /// the condition compares every written column of it with the row
    /// expected, not a row read before.
    fn conditional_writer<'a>(&'a self, sql: &TableSql) -> Option<Box<dyn ConditionalWrite + 'a>> {
        sql.conditional.as_ref()?;
        Some(Box::new(ConditionalWriter {
            db: self,
            plan: self.plan(sql).ok()?,
            sql: sql.clone(),
        }))
    }

    /// The gate's digests, computed in the server ([`super::digest`]).
    fn digests(&self) -> Option<&dyn crate::db::Digests> {
        Some(self)
    }

    /// The largest value of an integer column; `None` for a column of
    /// another kind, which holds no integers.
    fn max_integer(&self, table: &str, column: &str) -> Result<Option<i64>> {
        let columns = self.columns(table)?;
        let Some(c) = columns.iter().find(|c| c.name == column) else {
            bail!(
                "table '{table}' of {} has no column '{column}'",
                self.shown()
            );
        };
        if !matches!(
            c.data_type.as_str(),
            "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint"
        ) {
            return Ok(None);
        }
        let text = format!(
            "SELECT MAX({}) FROM {}",
            quote_ident(column),
            self.qualified(table)
        );
        let v: Option<My> = self.conn()?.query_first(&text).map_err(|e| {
            self.failed(&format!("reading the largest '{column}' of '{table}'"), &e)
        })?;
        Ok(match v {
            None | Some(My::NULL) => None,
            Some(My::Int(i)) => Some(i),
            Some(My::UInt(u)) => Some(i64::try_from(u).with_context(|| {
                format!(
                    "table '{table}', column '{column}': {u} is past the largest 64-bit integer"
                )
            })?),
            Some(My::Bytes(b)) => Some(String::from_utf8_lossy(&b).parse()?),
            Some(other) => bail!(
                "the largest '{column}' of '{table}' reads as {}",
                other.as_sql(true)
            ),
        })
    }
}

/// Why a bulk insert stopped.
enum Bulk {
    /// A key was already there.
    Collided,
    Failed(anyhow::Error),
}

impl MySql {
    /// Runs a write with `params`; the rows it matched. A row the table
    /// refuses ([`REFUSED_ROW`]) is a [`ValueRefused`], which the apply
    /// engine reports as a conflict on the row; the transaction goes on.
    fn write(&self, sql: &str, params: Vec<My>, what: &str, table: &str) -> Result<usize> {
        let mut conn = self.conn()?;
        match conn.exec_drop(sql, params) {
            Ok(()) => Ok(matched(&conn) as usize),
            Err(e) if code(&e).is_some_and(|c| REFUSED_ROW.contains(&c)) => {
                Err(anyhow::Error::new(ValueRefused(format!(
                    "{what} table '{table}' in {}: {}",
                    self.shown(),
                    super::client::said(&e)
                ))))
            }
            Err(e) => Err(self.failed(&format!("{what} table '{table}'"), &e)),
        }
    }

    /// Deletes every row (load `--replace`) with foreign keys neither
    /// checked nor acting for the statement: no row of another table
    /// cascades. Row triggers fire, as for any other delete.
    fn delete_all(&self, table: &str) -> Result<usize> {
        let mut conn = self.conn()?;
        let was: Option<i64> = conn
            .query_first("SELECT @@SESSION.foreign_key_checks")
            .map_err(|e| self.failed("reading foreign_key_checks", &e))?;
        conn.query_drop("SET SESSION foreign_key_checks = 0")
            .map_err(|e| self.failed("suspending foreign keys", &e))?;
        let r = conn.query_drop(format!("DELETE FROM {}", self.qualified(table)));
        let n = conn.affected_rows();
        conn.query_drop(format!(
            "SET SESSION foreign_key_checks = {}",
            was.unwrap_or(1)
        ))
        .map_err(|e| self.failed("restoring foreign_key_checks", &e))?;
        r.map_err(|e| self.failed(&format!("emptying table '{table}'"), &e))?;
        Ok(n as usize)
    }

    /// Inserts the rows of `blocks` in multi-row statements.
    fn insert_blocks(&self, plan: &Plan, blocks: &[Block]) -> Result<u64, Bulk> {
        let cols = plan.written.clone();
        let one = format!("({})", vec!["?"; cols.len()].join(", "));
        let head = {
            let insert = format!(
                "INSERT INTO {} ({}) VALUES ",
                plan.qualified,
                cols.iter()
                    .map(|&i| quote_ident(&plan.names[i]))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            insert
        };
        let mut total = 0u64;
        let mut params: Vec<My> = Vec::new();
        let mut rows = 0usize;
        let mut bytes = 0usize;
        let mut flush = |params: &mut Vec<My>, rows: &mut usize| -> Result<(), Bulk> {
            if *rows == 0 {
                return Ok(());
            }
            let text = format!("{head}{}", vec![one.as_str(); *rows].join(", "));
            let mut conn = self.conn().map_err(Bulk::Failed)?;
            match conn.exec_drop(&text, std::mem::take(params)) {
                Ok(()) => total += conn.affected_rows(),
                Err(e) if code(&e) == Some(DUPLICATE) => return Err(Bulk::Collided),
                Err(e) => {
                    return Err(Bulk::Failed(
                        self.failed(&format!("inserting into table '{}'", plan.table), &e),
                    ));
                }
            }
            *rows = 0;
            Ok(())
        };
        for b in blocks {
            for r in 0..b.rows() {
                for &c in &cols {
                    let cell = b.get(r, c);
                    let v = super::types::encode(&plan.kinds[c], cell).map_err(|why| {
                        Bulk::Failed(anyhow::anyhow!(
                            "table '{}', key {}, column '{}': {why}",
                            plan.table,
                            display_key(&b.values(r, plan.key_len)),
                            plan.names[c]
                        ))
                    })?;
                    bytes += match &v {
                        My::Bytes(b) => b.len(),
                        _ => 8,
                    };
                    params.push(v);
                }
                rows += 1;
                if rows >= BULK_ROWS || bytes >= BULK_BYTES {
                    flush(&mut params, &mut rows)?;
                    bytes = 0;
                }
            }
        }
        flush(&mut params, &mut rows)?;
        Ok(total)
    }
}

/// The rows the last statement matched: for an `UPDATE`, the server's
/// `Rows matched` (its affected count is only the rows it changed).
pub(super) fn matched(conn: &mysql::Conn) -> u64 {
    let info = conn.info_str();
    info.split("Rows matched:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| conn.affected_rows())
}

/// A prepared insert of one row at a time ([`BatchInsert`]).
struct Inserter<'a> {
    db: &'a MySql,
    plan: std::sync::Arc<Plan>,
    insert: String,
}

impl BatchInsert for Inserter<'_> {
    fn insert(&mut self, block: &Block, row: usize) -> Result<bool> {
        let params = self
            .plan
            .written
            .iter()
            .map(|&c| {
                super::types::encode(&self.plan.kinds[c], block.get(row, c)).map_err(|why| {
                    anyhow::anyhow!(
                        "table '{}', key {}, column '{}': {why}",
                        self.plan.table,
                        display_key(&block.values(row, self.plan.key_len)),
                        self.plan.names[c]
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut conn = self.db.conn()?;
        match conn.exec_drop(&self.insert, params) {
            Ok(()) => Ok(conn.affected_rows() > 0),
            Err(e) if code(&e) == Some(DUPLICATE) => Ok(false),
            Err(e) => Err(self
                .db
                .failed(&format!("inserting into table '{}'", self.plan.table), &e)),
        }
    }
}

/// A table's conditional writes ([`ConditionalWrite`]).
struct ConditionalWriter<'a> {
    db: &'a MySql,
    plan: std::sync::Arc<Plan>,
    sql: TableSql,
}

impl ConditionalWrite for ConditionalWriter<'_> {
    fn write_if(&mut self, before: Option<&[Value]>, after: Option<&[Value]>) -> Result<bool> {
        let Some(w) = &self.sql.conditional else {
            return Ok(false);
        };
        let (plan, k) = (&self.plan, self.sql.key_len);
        // A value no column of its kind holds is not the row stored, nor
        // one this write can write: the long way says which.
        let (text, params) = match (before, after) {
            (None, Some(a)) => match plan.bind(a, 0) {
                Ok(p) => (&w.insert, p),
                Err(_) => return Ok(false),
            },
            (Some(b), Some(a)) if a[..k] == b[..k] => {
                let (Ok(mut p), Some(at), Some(same)) = (
                    plan.bind(a, k),
                    plan.key_params(&b[..k])?,
                    plan.same_params(b),
                ) else {
                    return Ok(false);
                };
                p.extend(at);
                p.extend(same);
                (&w.update, p)
            }
            (Some(b), None) => {
                let (Some(mut p), Some(same)) = (plan.key_params(&b[..k])?, plan.same_params(b))
                else {
                    return Ok(false);
                };
                p.extend(same);
                (&w.delete, p)
            }
            _ => return Ok(false),
        };
        let mut conn = self.db.conn()?;
        match conn.exec_drop(text, params) {
            Ok(()) => Ok(matched(&conn) == 1),
            // Only this statement is undone: the caller's write, made the
            // long way, meets the same refusal and says what it is.
            Err(e) if code(&e).is_some_and(|c| REFUSED_ROW.contains(&c)) => Ok(false),
            Err(e) => Err(self
                .db
                .failed(&format!("writing table '{}'", self.sql.table), &e)),
        }
    }
}
