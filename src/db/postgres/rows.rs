//! Rows: the [`Rows`] interface over a table's statements — key-ordered
//! scans ([`super::scan`]), keyed reads and writes with every value bound
//! in binary, counts, and row-by-row inserts that skip a colliding key.
//!
//! A value is written exactly or refused ([`types::encode`]). A key the
//! column's type cannot hold is in no row: a read finds nothing, a write
//! changes nothing.

use anyhow::{Context, Result, bail};
use tokio_postgres::Statement;
use tokio_postgres::types::ToSql;

use super::scan::{Bound, Raw};
use super::table_sql::Plan;
use super::types::{self, Kind};
use super::{Postgres, quote_ident};
use crate::db::{BatchInsert, Count, RowWrite, Rows, TableSql};
use crate::value::{Block, CellRef, Row, Value};

/// A value of a column of `kind` in binary, for a `SET` or `VALUES`.
fn bind(kind: Kind, cell: CellRef<'_>) -> Result<Bound> {
    if cell == CellRef::Null {
        return Ok(Bound(None));
    }
    let mut raw = Vec::new();
    types::encode(kind, cell, &mut raw)?;
    Ok(Bound(Some(raw)))
}

/// A key in binary for a `WHERE`; `None` when a value cannot be a key of
/// its column (NULL, or a value the type cannot hold), so no row has it.
fn bind_key(kinds: &[Kind], key: &[Value]) -> Option<Vec<Bound>> {
    kinds
        .iter()
        .zip(key)
        .map(|(&kind, v)| {
            // The scale is not checked: `12.505` is simply not a key of
            // numeric(10,2).
            let kind = match kind {
                Kind::Numeric(_) => Kind::Numeric(None),
                k => k,
            };
            match bind(kind, v.as_cell()) {
                Ok(Bound(None)) | Err(_) => None,
                Ok(b) => Some(b),
            }
        })
        .collect()
}

/// The sequences feeding column `$2` of table `$1` or of a table
/// inheriting from it: owned by the column (serial), its identity, or
/// called by its default (`DEFAULT nextval('…')`, found through the
/// default's dependency on the sequence).
const ROUTED_SEQUENCES: &str = "WITH RECURSIVE tree(rel) AS (
       SELECT to_regclass($1)::oid
       UNION SELECT i.inhrelid FROM pg_inherits i JOIN tree ON i.inhparent = tree.rel
     ), col(rel, attnum) AS (
       SELECT a.attrelid, a.attnum FROM pg_attribute a JOIN tree ON a.attrelid = tree.rel
       WHERE a.attname = $2 AND NOT a.attisdropped
     ), fed(seq) AS (
       SELECT d.objid FROM pg_depend d JOIN col ON d.refobjid = col.rel AND d.refobjsubid = col.attnum
       WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
         AND d.deptype IN ('a', 'i')
       UNION
       SELECT d.refobjid FROM pg_attrdef ad JOIN col ON ad.adrelid = col.rel AND ad.adnum = col.attnum
       JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid
                       AND d.refclassid = 'pg_class'::regclass
     )
     SELECT format('%I.%I', n.nspname, s.relname) FROM fed
     JOIN pg_class s ON s.oid = fed.seq AND s.relkind = 'S'
     JOIN pg_namespace n ON n.oid = s.relnamespace
     ORDER BY 1";

fn refs(binds: &[Bound]) -> Vec<&(dyn ToSql + Sync)> {
    binds.iter().map(|b| b as &(dyn ToSql + Sync)).collect()
}

/// Decodes the first `kinds.len()` fields of a result row.
fn read_row(r: &tokio_postgres::Row, kinds: &[Kind], scratch: &mut String) -> Result<Row> {
    let mut row = Vec::with_capacity(kinds.len());
    for (i, &kind) in kinds.iter().enumerate() {
        let Raw(raw) = r.try_get(i)?;
        row.push(match raw {
            None => Value::Null,
            Some(b) => types::decode(kind, b, scratch, |c| c.to_value())?,
        });
    }
    Ok(row)
}

impl Postgres {
    /// Runs a statement of `sql` that writes, with `binds`.
    fn execute_bound(&self, text: &str, binds: &[Bound], what: &str, table: &str) -> Result<u64> {
        let mut client = self.client()?;
        let st = self.prepare(&mut client, text)?;
        client
            .execute(&st, &refs(binds))
            .with_context(|| format!("{what} a row of '{table}' in {}", self.shown))
    }

    /// The values of `row` that the table has, from column `from` on, bound.
    fn bind_written(&self, plan: &Plan, row: &[Value], from: usize) -> Result<Vec<Bound>> {
        plan.written()
            .into_iter()
            .filter(|&i| i >= from)
            .map(|i| {
                // A value the column cannot hold is the row's conflict, as
                // a constraint the server checks would be.
                bind(plan.kinds[i], row[i].as_cell()).map_err(|e| {
                    anyhow::Error::new(crate::db::ValueRefused(format!(
                        "column '{}' of table '{}' cannot hold it: {e:#}",
                        plan.names[i], plan.table
                    )))
                })
            })
            .collect()
    }

    /// How the named columns of a table are read and matched, or an error
    /// naming a column it does not have.
    fn kinds_of(&self, table: &str, names: &[&str]) -> Result<Vec<Kind>> {
        let known = self.columns_of(table)?;
        names
            .iter()
            .map(|n| match known.iter().find(|c| c.name == *n) {
                Some(c) => Ok(c.kind),
                None => bail!("table '{table}' in {} has no column '{n}'", self.shown),
            })
            .collect()
    }
}

/// Inserts rows one by one from blocks; a row whose primary or unique key
/// is already there is skipped (`ON CONFLICT DO NOTHING`) and reported.
struct Inserter<'a> {
    db: &'a Postgres,
    plan: std::sync::Arc<Plan>,
    st: Statement,
    cols: Vec<usize>,
}

impl BatchInsert for Inserter<'_> {
    fn insert(&mut self, block: &Block, row: usize) -> Result<bool> {
        let binds = self
            .cols
            .iter()
            .map(|&c| {
                bind(self.plan.kinds[c], block.get(row, c)).with_context(|| {
                    format!(
                        "table '{}', column '{}'",
                        self.plan.table, self.plan.names[c]
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let n = self
            .db
            .client()?
            .execute(&self.st, &refs(&binds))
            .with_context(|| {
                format!(
                    "inserting a row of '{}' in {}",
                    self.plan.table, self.db.shown
                )
            })?;
        Ok(n == 1)
    }
}

impl Rows for Postgres {
    fn table_sql(
        &self,
        table: &str,
        columns: &[&str],
        key_len: usize,
        first: Option<usize>,
    ) -> TableSql {
        self.write_table_sql(table, columns, key_len, first)
    }

    fn row_count(&self, sql: &TableSql, count: Count) -> Result<i64> {
        if count == Count::Estimate {
            return self.estimate_rows(sql);
        }
        self.plan(sql)?;
        Ok(self.client()?.query_one(sql.count.as_str(), &[])?.get(0))
    }

    fn scan_into(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        block_rows: usize,
        sink: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        self.copy_out(sql, after, block_rows, sink)
    }

    fn digests(&self) -> Option<&dyn crate::db::Digests> {
        Some(self)
    }

    /// Replay's write in one statement, on a table with no trigger or rule
    /// of its own ([`super::conditional`]); a table the catalogue cannot
    /// describe has none.
    fn conditional_writer<'a>(
        &'a self,
        sql: &TableSql,
    ) -> Option<Box<dyn crate::db::ConditionalWrite + 'a>> {
        let writer = self.conditional_writer_of(sql).ok()??;
        Some(Box::new(writer))
    }

    /// Only a row whose key reads back as exactly these values matches.
    fn get_row(&self, sql: &TableSql, key: &[Value]) -> Result<Option<Row>> {
        let plan = self.plan(sql)?;
        if key.len() != sql.key_len {
            bail!(
                "table '{}': a key of {} values for a key of {} columns",
                sql.table,
                key.len(),
                sql.key_len
            );
        }
        let Some(binds) = bind_key(&plan.kinds[..sql.key_len], key) else {
            return Ok(None);
        };
        let rows = {
            let mut client = self.client()?;
            let st = self.prepare(&mut client, &sql.select_by_key)?;
            client
                .query(&st, &refs(&binds))
                .with_context(|| format!("reading a row of '{}' in {}", sql.table, self.shown))?
        };
        let mut scratch = String::new();
        let mut found: Option<Row> = None;
        for r in &rows {
            let row = read_row(r, &plan.kinds, &mut scratch)?;
            if row[..sql.key_len] != *key {
                continue;
            }
            if found.is_some() {
                bail!(
                    "table '{}' in {} holds more than one row with key {}; the spec's key must be unique",
                    sql.table,
                    self.shown,
                    crate::value::display_key(key)
                );
            }
            found = Some(row);
        }
        Ok(found)
    }

    fn write_row(&self, sql: &TableSql, write: RowWrite<'_>) -> Result<usize> {
        match write {
            RowWrite::Insert(row) => {
                let plan = self.plan(sql)?;
                let binds = self.bind_written(&plan, row, 0)?;
                let n = self.execute_bound(&sql.insert, &binds, "inserting", &sql.table)?;
                if n == 0 && self.rekey_routed(sql, &plan, row)? {
                    return Ok(1);
                }
                Ok(n as usize)
            }
            RowWrite::Update { key, row } => self.update_row(sql, key, row),
            RowWrite::Delete(key) => {
                let plan = self.plan(sql)?;
                let Some(binds) = bind_key(&plan.kinds[..sql.key_len], key) else {
                    return Ok(0);
                };
                Ok(self.execute_bound(&sql.delete, &binds, "deleting", &sql.table)? as usize)
            }
            // Not `TRUNCATE`: row triggers fire, as they would for any
            // other write.
            RowWrite::All => self.delete_all(&sql.table),
        }
    }

    fn inserter<'a>(&'a self, sql: &TableSql) -> Result<Box<dyn BatchInsert + 'a>> {
        let plan = self.plan(sql)?;
        let st = {
            let mut client = self.client()?;
            self.prepare(
                &mut client,
                &format!("{} ON CONFLICT DO NOTHING", sql.insert),
            )?
        };
        Ok(Box::new(Inserter {
            db: self,
            cols: plan.written(),
            plan,
            st,
        }))
    }

    /// One binary COPY inside a savepoint: a key already there rolls the
    /// COPY back (`None`, the transaction usable) for the caller to go row
    /// by row; any other error rolls it back and is the error.
    fn bulk_insert(&self, sql: &TableSql, blocks: &[Block]) -> Result<Option<u64>> {
        // A column of a type binary COPY cannot write (an array, json, a
        // uuid, …) goes in row by row, each value cast from its text form.
        let plan = self.plan(sql)?;
        if plan.written().iter().any(|&i| !plan.kinds[i].writable()) {
            return Ok(None);
        }
        self.client()?.batch_execute("SAVEPOINT cutover_bulk")?;
        match self.copy_in(sql, blocks) {
            Ok(n) => {
                self.client()?.batch_execute("RELEASE cutover_bulk")?;
                Ok(Some(n))
            }
            Err(e) => {
                self.client()?
                    .batch_execute("ROLLBACK TO cutover_bulk; RELEASE cutover_bulk")?;
                let collided = e.chain().any(|c| {
                    c.downcast_ref::<tokio_postgres::Error>()
                        .and_then(|p| p.code())
                        .is_some_and(|code| {
                            *code == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
                        })
                });
                if collided { Ok(None) } else { Err(e) }
            }
        }
    }

    /// The largest value of an integer column; `None` for a column of
    /// another type, which holds no integers.
    fn max_integer(&self, table: &str, column: &str) -> Result<Option<i64>> {
        let [kind] = self.kinds_of(table, &[column])?[..] else {
            bail!("table '{table}': one column asked for");
        };
        if !matches!(kind, Kind::Int2 | Kind::Int4 | Kind::Int8) {
            return Ok(None);
        }
        let text = format!(
            "SELECT max({})::int8 FROM {}",
            quote_ident(column),
            self.qualified(table)
        );
        Ok(self.client()?.query_one(text.as_str(), &[])?.get(0))
    }
}

impl Postgres {
    /// After an insert that reported no row: whether a rule (or trigger)
    /// routed the row into a child of the table under a key of its own
    /// drawing (the sample's `INSERT INTO payment_p2007_01 (payment_id, …)
    /// VALUES (DEFAULT, new.customer_id, …)`), and it is now back under the
    /// key written. The key it drew is the session's `currval` of a
    /// sequence feeding the key column of the table or of a child; the row
    /// there moves back only when it holds exactly the other values
    /// written and nothing holds the key written (a row routed with its own
    /// key, `VALUES (NEW.*)`, is read back by the caller).
    fn rekey_routed(&self, sql: &TableSql, plan: &Plan, row: &[Value]) -> Result<bool> {
        let Some(rekey) = &plan.rekey else {
            return Ok(false);
        };
        let Some(mut binds) = bind_key(&plan.kinds[..1], &row[..1]) else {
            return Ok(false);
        };
        let Value::Integer(key) = row[0] else {
            return Ok(false);
        };
        let sequences: Vec<String> = self
            .client()?
            .query(ROUTED_SEQUENCES, &[&plan.qualified, &plan.names[0]])
            .with_context(|| {
                format!(
                    "finding the sequences of '{}' and its children in {}",
                    sql.table, self.shown
                )
            })?
            .iter()
            .map(|r| r.get(0))
            .collect();
        for seq in sequences {
            // `currval` fails when this session never drew from the
            // sequence; the savepoint keeps the transaction usable.
            let drawn: Option<i64> = {
                let mut c = self.client()?;
                c.batch_execute("SAVEPOINT cutover_routed")?;
                match c.query_one("SELECT currval(to_regclass($1))::int8", &[&seq]) {
                    Ok(r) => {
                        c.batch_execute("RELEASE cutover_routed")?;
                        Some(r.get(0))
                    }
                    Err(_) => {
                        c.batch_execute("ROLLBACK TO cutover_routed; RELEASE cutover_routed")?;
                        None
                    }
                }
            };
            let Some(drawn) = drawn.filter(|&d| d != key) else {
                continue;
            };
            let Some(from) = bind_key(&plan.kinds[..1], &[Value::Integer(drawn)]) else {
                continue;
            };
            binds.truncate(1);
            binds.extend(from);
            binds.extend(self.bind_written(plan, row, 1)?);
            if self.execute_bound(rekey, &binds, "routing back", &sql.table)? == 1 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Rewrites the row stored under `old_key` (which differs from the
    /// row's own key when the key changed).
    fn update_row(&self, sql: &TableSql, old_key: &[Value], row: &[Value]) -> Result<usize> {
        let plan = self.plan(sql)?;
        let k = sql.key_len;
        let Some(key) = bind_key(&plan.kinds[..k], old_key) else {
            return Ok(0);
        };
        let (text, from) = match &sql.update_values {
            Some(update) if row[..k] == *old_key => (update, k),
            _ => (&sql.update, 0),
        };
        let mut binds = self.bind_written(&plan, row, from)?;
        binds.extend(key);
        Ok(self.execute_bound(text, &binds, "updating", &sql.table)? as usize)
    }
}
