//! The statements for one table and one column order ([`TableSql`]),
//! written once per run from the catalogue, and the engine's own record of
//! them ([`Plan`]): how each column is read, ordered, matched and written.
//!
//! Key order is cutover's ([`Kind::order`]): a key column is ordered by
//! itself where its native order is cutover's, else by its bytes. A key is
//! matched exactly, never under the column's collation: `col = ?` (which
//! an index serves) and, for a column not ordered natively, its order
//! expression equal to the value's bytes too, so that under
//! `utf8mb4_general_ci` the key `'a'` does not find the row `'A'`, nor
//! under `PAD SPACE` the row `'a '`.

use std::sync::Arc;

use anyhow::{Result, anyhow, bail};
use mysql::Value as My;

use super::catalogue::Column;
use super::scan::{Shape, after_condition, after_params};
use super::types::{self, Kind};
use super::{MySql, quote_ident};
use crate::db::TableSql;
use crate::db::types::Conditional;
use crate::value::{Value, display_key};

/// What the engine knows of a [`TableSql`] it wrote.
#[derive(Debug)]
pub struct Plan {
    pub table: String,
    pub key_len: usize,
    /// The column names asked for (empty: a column the table does not
    /// have, read as NULL and never written).
    pub names: Vec<String>,
    /// Each column's kind (an absent column's is `Text`: it reads NULL).
    pub kinds: Vec<Kind>,
    pub collations: Vec<Option<String>>,
    /// Whether the key column's order is not its own, so a match also
    /// compares its bytes.
    pub(super) exact: Vec<bool>,
    /// The scan ordered by a column before the key, and that column's
    /// order expression.
    pub(super) first: Option<(usize, String)>,
    pub(super) qualified: String,
    /// The columns a write binds, in order (the table's own, not the
    /// generated ones).
    pub(super) written: Vec<usize>,
    /// The `max_sort_length` a scan runs under when the key has a long
    /// column (`TEXT`, `BLOB`: never a primary key of MySQL's, but a spec's
    /// key or a drill's snapshot may be one): the session's 8 MiB per part
    /// does not fit the sort buffer beside the other parts ("Out of sort
    /// memory"), so the long parts share 2 MiB. Keys equal in that many bytes sort in no set order,
    /// which the merge's order check refuses, naming the key.
    pub(super) sort_length: Option<u64>,
}

/// The session's `max_sort_length` ([`super::client`]).
pub(super) const SORT_LENGTH: u64 = 8 << 20;

/// Whether a column's values can be longer than a sort key holds.
fn long(c: &Column) -> bool {
    matches!(
        c.data_type.as_str(),
        "text" | "mediumtext" | "longtext" | "blob" | "mediumblob" | "longblob" | "json"
    )
}

/// The columns a scan reads: each quoted, or `NULL` for one the table
/// does not have.
fn select_list(columns: &[&str], quoted: &[String]) -> String {
    columns
        .iter()
        .zip(quoted)
        .map(|(c, q)| if c.is_empty() { "NULL" } else { q.as_str() })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The condition matching a key exactly: `col = ?`, and the column's
/// order expression equal to the value's bytes where the column's own
/// comparison is not exact.
fn key_match(quoted: &[String], key_exprs: &[String], exact: &[bool]) -> String {
    key_exprs
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if exact[i] {
                format!("{} = ? AND {e} = ?", quoted[i])
            } else {
                format!("{} = ?", quoted[i])
            }
        })
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The catalogue's facts of the columns a plan reads.
struct Resolved {
    kinds: Vec<Kind>,
    collations: Vec<Option<String>>,
    /// Computed by the table, or absent from it: read, never written.
    generated: Vec<bool>,
    /// How many key columns are long ([`long`]).
    long_parts: u64,
}

/// Each column of `columns` as the catalogue's `known` columns describe
/// it; an empty name is a column the table does not have.
fn resolve(
    db: &MySql,
    table: &str,
    columns: &[&str],
    key_len: usize,
    known: &[Column],
) -> Result<Resolved> {
    let mut kinds = Vec::with_capacity(columns.len());
    let mut collations = Vec::with_capacity(columns.len());
    let mut generated = Vec::with_capacity(columns.len());
    let mut long_parts = 0u64;
    for (i, &c) in columns.iter().enumerate() {
        if c.is_empty() {
            kinds.push(Kind::Text);
            collations.push(None);
            generated.push(true);
            continue;
        }
        let Some(k) = known.iter().find(|k| k.name == c) else {
            bail!(
                "table '{table}' of {} has no column '{c}' (it has: {})",
                db.shown(),
                known
                    .iter()
                    .map(|k| k.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        };
        kinds.push(Kind::of(k).map_err(|e| anyhow!("table '{table}': {e}"))?);
        if i < key_len && long(k) {
            long_parts += 1;
        }
        collations.push(k.collation.clone());
        generated.push(k.generated.is_some());
    }
    Ok(Resolved {
        kinds,
        collations,
        generated,
        long_parts,
    })
}

/// `INSERT` of the written columns.
fn insert_of(qualified: &str, quoted: &[String], written: &[usize]) -> String {
    let cols: Vec<&str> = written.iter().map(|&i| quoted[i].as_str()).collect();
    format!(
        "INSERT INTO {qualified} ({}) VALUES ({})",
        cols.join(", "),
        vec!["?"; cols.len()].join(", ")
    )
}

/// What ends a keyed read: on a write connection a locking read (`FOR
/// UPDATE`), since InnoDB's `UPDATE` acts on the latest committed row
/// whatever the snapshot: the read a write is decided on reads that row
/// too, and holds it until the transaction ends.
fn locking(db: &MySql) -> &'static str {
    match db.access() {
        crate::db::Access::Write => " FOR UPDATE",
        crate::db::Access::Read => "",
    }
}

/// The whole-row conditional writes of a table whose key is written and
/// which has other written columns: the key matched exactly (`matches`),
/// each other written column `<=>` its value (NULL-safe), compared as
/// [`Kind::order`] compares it (its bytes, where the column's own
/// comparison folds case or pads), so that only the row expected matches.
fn conditional(
    (kinds, collations, generated): (&[Kind], &[Option<String>], &[bool]),
    quoted: &[String],
    key_len: usize,
    (qualified, matches, insert): (&str, &str, &str),
) -> Option<Conditional> {
    let rest: Vec<usize> = (key_len..quoted.len()).filter(|&i| !generated[i]).collect();
    if rest.is_empty() || generated[..key_len].iter().any(|g| *g) {
        return None;
    }
    let same = |i: usize| match &kinds[i] {
        Kind::Json => format!("CAST({} AS BINARY)", quoted[i]),
        k => k
            .order(&quoted[i], collations[i].as_deref())
            .unwrap_or_else(|_| format!("CAST({} AS BINARY)", quoted[i])),
    };
    let exactly = rest
        .iter()
        .map(|&i| format!("{} <=> ?", same(i)))
        .collect::<Vec<_>>()
        .join(" AND ");
    let set = rest
        .iter()
        .map(|&i| format!("{} = ?", quoted[i]))
        .collect::<Vec<_>>()
        .join(", ");
    Some(Conditional {
        insert: insert.to_string(),
        update: format!("UPDATE {qualified} SET {set} WHERE {matches} AND {exactly}"),
        delete: format!("DELETE FROM {qualified} WHERE {matches} AND {exactly}"),
        // MySQL has no `UPDATE OF` trigger: the whole row is set.
        partial: None,
    })
}

impl Plan {
    /// The plan and statements of `table` of `db` reading `columns` (the
    /// first `key_len` the key), scans ordered by column `first` then the
    /// key when given; `known` is the catalogue's columns of the table.
    pub fn build(
        db: &MySql,
        table: &str,
        columns: &[&str],
        key_len: usize,
        first: Option<usize>,
        known: &[Column],
    ) -> Result<(Plan, TableSql)> {
        if key_len == 0 || key_len > columns.len() || first.is_some_and(|f| f >= columns.len()) {
            bail!(
                "table '{table}': a key of {key_len} columns out of {}",
                columns.len()
            );
        }
        let Resolved {
            kinds,
            collations,
            generated,
            long_parts,
        } = resolve(db, table, columns, key_len, known)?;
        if let Some(i) = (0..key_len).find(|&i| generated[i]) {
            bail!(
                "table '{table}': key column '{}' is generated (or absent): the table computes it, so a row cannot be written under its key",
                columns[i]
            );
        }
        let quoted: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
        let order_of = |i: usize| {
            kinds[i]
                .order(&quoted[i], collations[i].as_deref())
                .map_err(|e| anyhow!("table '{table}', column '{}': {e}", columns[i]))
        };
        let key_exprs = (0..key_len).map(order_of).collect::<Result<Vec<_>>>()?;
        let exact: Vec<bool> = (0..key_len).map(|i| key_exprs[i] != quoted[i]).collect();
        let first = first.map(|f| order_of(f).map(|e| (f, e))).transpose()?;
        let list = select_list(columns, &quoted);
        let qualified = db.qualified(table);
        let key_order = key_exprs.join(", ");
        let order = match &first {
            Some((_, e)) => format!("{e}, {key_order}"),
            None => key_order.clone(),
        };
        let written: Vec<usize> = (0..columns.len()).filter(|&i| !generated[i]).collect();
        let rest: Vec<usize> = written.iter().copied().filter(|&i| i >= key_len).collect();
        let matches = key_match(&quoted, &key_exprs, &exact);
        let set = |cols: &[usize]| {
            cols.iter()
                .map(|&i| format!("{} = ?", quoted[i]))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let insert = insert_of(&qualified, &quoted, &written);
        let sql = TableSql {
            table: table.to_string(),
            key_len,
            width: columns.len(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            scan: format!("SELECT {list} FROM {qualified} ORDER BY {order}"),
            scan_after: format!(
                "SELECT {list} FROM {qualified} WHERE {} ORDER BY {order}",
                match &first {
                    Some((_, e)) => format!("{e} >= ?"),
                    None => after_condition(&key_exprs),
                }
            ),
            select_by_key: format!(
                "SELECT {list} FROM {qualified} WHERE {matches}{}",
                locking(db)
            ),
            insert: insert.clone(),
            update: format!("UPDATE {qualified} SET {} WHERE {matches}", set(&written)),
            update_values: (!rest.is_empty())
                .then(|| format!("UPDATE {qualified} SET {} WHERE {matches}", set(&rest))),
            real: (written.len() < columns.len()).then(|| written.clone()),
            delete: format!("DELETE FROM {qualified} WHERE {matches}"),
            count: format!("SELECT COUNT(*) FROM {qualified}"),
            conditional: conditional(
                (&kinds, &collations, &generated),
                &quoted,
                key_len,
                (&qualified, &matches, &insert),
            ),
            digested: Vec::new(),
            plan: None,
        };
        let plan = Plan {
            table: table.to_string(),
            key_len,
            names: columns.iter().map(|c| c.to_string()).collect(),
            kinds,
            collations,
            exact,
            first,
            qualified,
            written,
            sort_length: (long_parts > 0).then(|| (2 << 20) / long_parts),
        };
        Ok((plan, sql))
    }

    /// The statements of a table the catalogue could not describe: each
    /// reports, when used, what is wrong (the plan is the error).
    fn unknown(db: &MySql, table: &str, columns: &[&str], key_len: usize) -> TableSql {
        let q = db.qualified(table);
        let text = format!("SELECT * FROM {q} /* not described */");
        TableSql {
            table: table.to_string(),
            key_len,
            width: columns.len(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            scan: format!("{text} /* {} */", columns.join(", ")),
            scan_after: text.clone(),
            select_by_key: text.clone(),
            insert: text.clone(),
            update: text.clone(),
            update_values: None,
            real: None,
            delete: text,
            count: format!("SELECT COUNT(*) FROM {q}"),
            conditional: None,
            digested: Vec::new(),
            plan: None,
        }
    }

    /// What a streamed read of this plan decodes.
    pub(super) fn shape(&self) -> Shape<'_> {
        Shape {
            table: &self.table,
            names: &self.names,
            kinds: &self.kinds,
            key_len: self.key_len,
        }
    }

    /// The parameters of the resumed scan after `after`: a key, or the one
    /// value of the column the scan is ordered by first.
    pub(super) fn after_params(&self, after: &[Value]) -> Result<Vec<My>> {
        if let Some((f, _)) = &self.first {
            let [from] = after else {
                bail!(
                    "table '{}': {} values where the scan from column '{}' takes one",
                    self.table,
                    after.len(),
                    self.names[*f]
                );
            };
            return Ok(vec![
                self.kinds[*f].order_param(from.as_cell(), self.collations[*f].as_deref())?,
            ]);
        }
        if after.len() != self.key_len {
            bail!(
                "table '{}': a key of {} values for a key of {} columns",
                self.table,
                after.len(),
                self.key_len
            );
        }
        after_params(
            &self.table,
            &self.names,
            &self.kinds,
            &self.collations,
            after,
        )
    }

    /// The parameters matching the key `key` exactly; `None` when a value
    /// is not one the column can hold, so no row holds it.
    pub(super) fn key_params(&self, key: &[Value]) -> Result<Option<Vec<My>>> {
        if key.len() != self.key_len {
            bail!(
                "table '{}': a key of {} values for a key of {} columns",
                self.table,
                key.len(),
                self.key_len
            );
        }
        let mut out = Vec::with_capacity(2 * key.len());
        for (i, v) in key.iter().enumerate() {
            if matches!(v, Value::Null) {
                return Ok(None);
            }
            match types::encode(&self.kinds[i], v.as_cell()) {
                Ok(p) => out.push(p),
                Err(_) => return Ok(None),
            }
            if self.exact[i] {
                match self.kinds[i].order_param(v.as_cell(), self.collations[i].as_deref()) {
                    Ok(p) => out.push(p),
                    Err(_) => return Ok(None),
                }
            }
        }
        Ok(Some(out))
    }

    /// The values a conditional write compares the stored row's other
    /// written columns with, each as [`Kind::order`] compares it; `None` when a value is
    /// not one its column can hold, so no row holds it.
    pub(super) fn same_params(&self, row: &[Value]) -> Option<Vec<My>> {
        self.written
            .iter()
            .filter(|&&i| i >= self.key_len)
            .map(|&i| match row[i].as_cell() {
                crate::value::CellRef::Null => Some(My::NULL),
                cell => match &self.kinds[i] {
                    Kind::Json => match cell {
                        crate::value::CellRef::Text(t) => Some(My::Bytes(t.to_vec())),
                        _ => None,
                    },
                    k => k.order_param(cell, self.collations[i].as_deref()).ok(),
                },
            })
            .collect()
    }

    /// The values of `row` from column `from` on that a write binds, each
    /// as its column takes it; a value the column cannot hold exactly is
    /// an error naming the table, key, column and value.
    pub(super) fn bind(&self, row: &[Value], from: usize) -> Result<Vec<My>> {
        self.written
            .iter()
            .filter(|&&i| i >= from)
            .map(|&i| {
                types::encode(&self.kinds[i], row[i].as_cell()).map_err(|why| {
                    anyhow!(
                        "table '{}', key {}, column '{}': {why}",
                        self.table,
                        display_key(&row[..self.key_len.min(row.len())]),
                        self.names[i]
                    )
                })
            })
            .collect()
    }
}

impl MySql {
    /// Writes the statements of a table with their plan; when the
    /// catalogue cannot describe the table, the plan is the reason, which
    /// every use of the statements reports.
    pub(super) fn write_table_sql(
        &self,
        table: &str,
        columns: &[&str],
        key_len: usize,
        first: Option<usize>,
    ) -> TableSql {
        let built = self
            .columns(table)
            .and_then(|known| Plan::build(self, table, columns, key_len, first, &known));
        TableSql::planned(built, || Plan::unknown(self, table, columns, key_len))
    }

    /// The plan of statements this engine wrote.
    pub(super) fn plan(&self, sql: &TableSql) -> Result<Arc<Plan>> {
        sql.plan_of("MySQL", self.shown())
    }
}
