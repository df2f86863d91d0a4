//! The statements for one table and one column order ([`TableSql`]),
//! written once per run from the catalogue, and the engine's own record of
//! them ([`Plan`]): how each column is read, ordered and written.
//!
//! The key order is cutover's (SQLite's BINARY): NULL first, numbers by
//! value, text by bytes (`COLLATE "C"`), bytes by bytes ([`Kind::order`]).
//! A key column that can never be NULL is ordered without `NULLS FIRST`,
//! so that its index can serve the scan. A key is matched exactly: the
//! NUMERIC key `12.50` is not found by `12.5`, nor `char(3)` `'a  '` by `'a'`.

use std::sync::Arc;

use anyhow::{Result, bail};

use super::types::Kind;
use super::{Postgres, quote_ident, quote_literal};
use crate::db::TableSql;
use crate::value::{CellRef, Value};

/// What the engine knows of a [`TableSql`] it wrote.
#[derive(Debug)]
pub struct Plan {
    pub table: String,
    pub key_len: usize,
    /// The column names asked for (empty: a column the table does not have).
    pub names: Vec<String>,
    pub kinds: Vec<Kind>,
    /// PostgreSQL's name of each column's type (`format_type`).
    pub types: Vec<String>,
    /// Per column, whether it is declared NOT NULL (or its domain is).
    pub not_null: Vec<bool>,
    /// The table, qualified by its schema and quoted.
    pub qualified: String,
    /// `col, col::text, …`: the select list.
    pub(super) list: String,
    /// The key columns' order expressions.
    pub(super) key_exprs: Vec<String>,
    /// The key order (`ORDER BY` list).
    pub(super) key_order: String,
    /// The column scans are ordered by before the key, if any, and that
    /// order (`ORDER BY` list).
    pub(super) first: Option<usize>,
    pub(super) scan_order: String,
    /// The columns a write binds, in order: the table's own, but for the
    /// generated ones, which the table computes.
    pub(super) written: Vec<usize>,
    /// For a single integer key: moves the row stored under key `$2` to
    /// key `$1`, only when no row holds `$1` and each written column after
    /// the key equals its value (`$3`, … in [`Plan::written`] order). An
    /// insert a rule routed into a child under another key (`VALUES
    /// (DEFAULT, new.…)`) is put back under its own key with it.
    pub(super) rekey: Option<String>,
}

/// A column of the catalogue as [`TableSql`] needs it.
pub struct Column {
    pub name: String,
    pub kind: Kind,
    pub not_null: bool,
    pub type_name: String,
    /// Computed by the table (`GENERATED ALWAYS AS … STORED`): read, never
    /// written.
    pub generated: bool,
}

/// `col = $n`, exactly: a NUMERIC or `char(n)` key also matches its text.
pub(super) fn key_match(kind: Kind, col: &str, n: usize) -> String {
    match kind {
        Kind::Numeric(_) => format!("{col} = ${n} AND {col}::text = ${n}::text"),
        Kind::Bpchar => format!("{col} = ${n} AND concat({col}) = concat(${n})"),
        Kind::Other => format!("{col}::text = ${n}::text"),
        _ => format!("{col} = ${n}"),
    }
}

/// The `n`th parameter as a value of column type `type_name`.
fn param(kind: Kind, type_name: &str, n: usize) -> String {
    match kind {
        // Written as text and cast by the type's own input function.
        Kind::Other => format!("CAST(${n}::text AS {type_name})"),
        _ => format!("${n}"),
    }
}

impl Plan {
    /// The plan and the statements of `table` reading `columns`, the first
    /// `key_len` the key, scans ordered by column `first` then the key when
    /// given. `known` is the catalogue's columns of the table.
    pub fn build(
        schema: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
        first: Option<usize>,
        known: &[Column],
    ) -> Result<(Plan, TableSql)> {
        if known.is_empty() {
            bail!("schema '{schema}' has no table '{table}'");
        }
        if key_len == 0 || key_len > columns.len() || first.is_some_and(|f| f >= columns.len()) {
            bail!(
                "table '{table}': a key of {key_len} columns out of {}",
                columns.len()
            );
        }
        let mut kinds = Vec::with_capacity(columns.len());
        let mut not_null = Vec::with_capacity(columns.len());
        let mut types = Vec::with_capacity(columns.len());
        let mut generated = Vec::with_capacity(columns.len());
        for &c in columns {
            if c.is_empty() {
                kinds.push(Kind::Absent);
                not_null.push(false);
                types.push("text".to_string());
                generated.push(false);
                continue;
            }
            let Some(k) = known.iter().find(|k| k.name == c) else {
                bail!(
                    "table '{table}' has no column '{c}' (it has: {})",
                    known
                        .iter()
                        .map(|k| k.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            };
            kinds.push(k.kind);
            not_null.push(k.not_null);
            types.push(k.type_name.clone());
            generated.push(k.generated);
        }
        if let Some(i) = (0..key_len).find(|&i| generated[i]) {
            bail!(
                "table '{table}': key column '{}' is generated: the table computes it, so a row cannot be written under its key",
                columns[i]
            );
        }
        let quoted: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
        let qualified = format!("{}.{}", quote_ident(schema), quote_ident(table));
        let list = quoted
            .iter()
            .zip(&kinds)
            .map(|(c, k)| k.select(c))
            .collect::<Vec<_>>()
            .join(", ");
        let ordered = |i: usize| {
            let e = if first == Some(i) {
                watermark_order(kinds[i], &quoted[i])
            } else {
                kinds[i].order(&quoted[i])
            };
            if not_null[i] {
                e
            } else {
                format!("{e} NULLS FIRST")
            }
        };
        let key_exprs: Vec<String> = (0..key_len).map(|i| kinds[i].order(&quoted[i])).collect();
        let key_order = (0..key_len).map(ordered).collect::<Vec<_>>().join(", ");
        let scan_order = match first {
            Some(f) => format!("{}, {key_order}", ordered(f)),
            None => key_order.clone(),
        };
        let real: Vec<usize> = (0..columns.len())
            .filter(|&i| kinds[i] != Kind::Absent && !generated[i])
            .collect();
        let rest: Vec<usize> = real.iter().copied().filter(|&i| i >= key_len).collect();
        let set = |cols: &[usize]| {
            cols.iter()
                .enumerate()
                .map(|(p, &i)| format!("{} = {}", quoted[i], param(kinds[i], &types[i], p + 1)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let keys_from = |first: usize| {
            (0..key_len)
                .map(|i| key_match(kinds[i], &quoted[i], first + i))
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        // Through the table, never `ONLY`: the row may sit in a child.
        let rekey = (key_len == 1
            && matches!(kinds[0], Kind::Int2 | Kind::Int4 | Kind::Int8))
        .then(|| {
            let k = &quoted[0];
            let same = rest
                .iter()
                .enumerate()
                .map(|(p, &i)| {
                    let v = param(kinds[i], &types[i], p + 3);
                    match kinds[i] {
                        Kind::Other => {
                            format!("{}::text IS NOT DISTINCT FROM ({v})::text", quoted[i])
                        }
                        _ => format!("{} IS NOT DISTINCT FROM {v}", quoted[i]),
                    }
                })
                .map(|c| format!(" AND {c}"))
                .collect::<String>();
            format!(
                "UPDATE {qualified} SET {k} = $1 WHERE {k} = $2 AND NOT EXISTS (SELECT 1 FROM {qualified} WHERE {k} = $1){same}"
            )
        });
        let sql = TableSql {
            table: table.to_string(),
            key_len,
            width: columns.len(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            scan: format!("SELECT {list} FROM {qualified} ORDER BY {scan_order}"),
            scan_after: format!(
                "SELECT {list} FROM {qualified} WHERE ({}) > ({}) ORDER BY {key_order}",
                key_exprs.join(", "),
                (1..=key_len)
                    .map(|n| format!("${n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            select_by_key: format!("SELECT {list} FROM {qualified} WHERE {}", keys_from(1)),
            // cutover writes the ids rows had: an identity column defined
            // GENERATED ALWAYS takes them too (a no-op on other tables).
            insert: format!(
                "INSERT INTO {qualified} ({}) OVERRIDING SYSTEM VALUE VALUES ({})",
                real.iter()
                    .map(|&i| quoted[i].clone())
                    .collect::<Vec<_>>()
                    .join(", "),
                real.iter()
                    .enumerate()
                    .map(|(p, &i)| param(kinds[i], &types[i], p + 1))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            update: format!(
                "UPDATE {qualified} SET {} WHERE {}",
                set(&real),
                keys_from(real.len() + 1)
            ),
            update_values: (!rest.is_empty()).then(|| {
                format!(
                    "UPDATE {qualified} SET {} WHERE {}",
                    set(&rest),
                    keys_from(rest.len() + 1)
                )
            }),
            real: (real.len() < columns.len()).then(|| real.clone()),
            delete: format!("DELETE FROM {qualified} WHERE {}", keys_from(1)),
            count: format!("SELECT count(*) FROM {qualified}"),
            // A failed statement spoils a PostgreSQL transaction: every
            // write reads its row first.
            conditional: None,
            digested: Vec::new(),
            plan: None,
        };
        let plan = Plan {
            table: table.to_string(),
            key_len,
            names: columns.iter().map(|c| c.to_string()).collect(),
            kinds,
            types,
            not_null,
            qualified,
            list,
            key_exprs,
            key_order,
            first,
            scan_order,
            written: real,
            rekey,
        };
        Ok((plan, sql))
    }

    /// The statements of a table the catalogue could not describe: plain
    /// columns, so that running them reports what is wrong; the plan itself
    /// is the error.
    pub fn unknown(schema: &str, table: &str, columns: &[&str], key_len: usize) -> TableSql {
        let q = format!("{}.{}", quote_ident(schema), quote_ident(table));
        let list = columns
            .iter()
            .map(|c| quote_ident(c))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!("SELECT {list} FROM {q} /* not described */");
        TableSql {
            table: table.to_string(),
            key_len,
            width: columns.len(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            scan: text.clone(),
            scan_after: text.clone(),
            select_by_key: text.clone(),
            insert: text.clone(),
            update: text.clone(),
            update_values: None,
            real: None,
            delete: text,
            count: format!("SELECT count(*) FROM {q}"),
            conditional: None,
            digested: Vec::new(),
            plan: None,
        }
    }

    /// The key-ordered read of the table after `after`, with the key as
    /// literals (a COPY takes no parameters); for a scan ordered by a column
    /// first, the read of the rows whose column is at or past `after`'s one
    /// value.
    pub fn scan_after(&self, after: &[Value]) -> Result<String> {
        if let Some(f) = self.first {
            let [from] = after else {
                bail!(
                    "table '{}': {} values where the scan from column '{}' takes one",
                    self.table,
                    after.len(),
                    self.names[f]
                );
            };
            return Ok(format!(
                "SELECT {} FROM {} WHERE {} >= {} ORDER BY {}",
                self.list,
                self.qualified,
                watermark_order(self.kinds[f], &quote_ident(&self.names[f])),
                watermark_literal(self.kinds[f], from)?,
                self.scan_order
            ));
        }
        if after.len() != self.key_len {
            bail!(
                "table '{}': a key of {} values for a key of {} columns",
                self.table,
                after.len(),
                self.key_len
            );
        }
        let values = (0..self.key_len)
            .map(|i| literal(self.kinds[i], &after[i]))
            .collect::<Result<Vec<_>>>()?;
        Ok(format!(
            "SELECT {} FROM {} WHERE ({}) > ({}) ORDER BY {}",
            self.list,
            self.qualified,
            self.key_exprs.join(", "),
            values.join(", "),
            self.key_order
        ))
    }

    /// The block columns a write binds, in order (the table's own).
    pub fn written(&self) -> Vec<usize> {
        self.written.clone()
    }
}

/// A key value as a literal compared with a key column's order expression.
/// The expression sync's watermark column is ordered by: a date or time as
/// its type (its instant, for a `timestamptz`), as cutover compares
/// watermarks (`crate::watermark`), and as an index on it serves; anything
/// else as a key of its kind.
fn watermark_order(kind: Kind, col: &str) -> String {
    match kind {
        Kind::Date | Kind::Timestamp | Kind::Timestamptz => col.to_string(),
        _ => kind.order(col),
    }
}

/// The literal a scan by watermark starts from: a date or time as a value
/// of its type, read from the text the engine gave (every connection's
/// `TimeZone` is UTC); anything else as a key of its kind.
fn watermark_literal(kind: Kind, v: &Value) -> Result<String> {
    match (kind, v) {
        (Kind::Date | Kind::Timestamp | Kind::Timestamptz, Value::Text(t)) => Ok(format!(
            "{}::{}",
            quote_literal(t)?,
            super::types::name(kind)
        )),
        _ => literal(kind, v),
    }
}

pub(super) fn literal(kind: Kind, v: &Value) -> Result<String> {
    Ok(match (kind.ordered_as_text(), kind, v.as_cell()) {
        (_, _, CellRef::Null) => "NULL".to_string(),
        (false, Kind::Bytea, CellRef::Blob(b)) => format!("'\\x{}'::bytea", hex::encode(b)),
        (false, Kind::Bytea, _) => bail!("{v} is not a value of a bytea key"),
        (false, _, CellRef::Integer(i)) => i.to_string(),
        (false, _, CellRef::Real(r)) => {
            let text = if r.is_nan() {
                "NaN".to_string()
            } else if r.is_infinite() {
                if r > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
            } else {
                format!("{r:?}")
            };
            format!("'{text}'::float8")
        }
        (true, _, CellRef::Text(_)) => match v {
            Value::Text(t) => format!("{} COLLATE \"C\"", quote_literal(t)?),
            _ => bail!("{v} is not UTF-8 text; PostgreSQL text cannot hold it"),
        },
        _ => bail!("{v} is not a value of a {} key", super::types::name(kind)),
    })
}

impl Postgres {
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
            .columns_of(table)
            .and_then(|known| Plan::build(&self.schema, table, columns, key_len, first, &known));
        TableSql::planned(built, || {
            Plan::unknown(&self.schema, table, columns, key_len)
        })
    }

    /// The plan of statements this engine wrote.
    pub(super) fn plan(&self, sql: &TableSql) -> Result<Arc<Plan>> {
        sql.plan_of("PostgreSQL", &self.shown)
    }
}
