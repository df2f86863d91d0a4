//! The statements for one table and one column order, built once per run
//! from the catalogue: what to select (each column read as its [`Kind`]
//! says), the key order, a keyed look-up, a count and the COPY that loads.
//!
//! The key order is cutover's (SQLite's BINARY): NULL first, numbers by
//! value, text by bytes (`COLLATE "C"`), bytes by bytes. A key column that
//! can never be NULL is ordered without `NULLS FIRST`, so that its index
//! can serve the scan.

use anyhow::{Result, bail};

use super::types::Kind;
use super::{Db, quote_ident, quote_literal};
use crate::value::{CellRef, Value};

/// The statements of a table read as `columns`, the first `key_len` the key.
#[derive(Clone, Debug)]
pub struct TableSql {
    pub table: String,
    pub key_len: usize,
    pub(super) width: usize,
    /// How each column is read and written.
    pub(super) kinds: Vec<Kind>,
    pub(super) names: Vec<String>,
    /// The table, qualified by its schema and quoted.
    pub(super) qualified: String,
    /// `col, col::text, …`: the select list.
    list: String,
    /// The key columns' order expressions.
    key_exprs: Vec<String>,
    /// `ORDER BY` list.
    order: String,
    pub(super) select_by_key: String,
    pub(super) count: String,
}

impl Db {
    /// The statements of `table` reading `columns` in this order, the first
    /// `key_len` the key. An empty name is a column the table does not have
    /// (a target-only constant, seen from the source): it reads as NULL and
    /// is never written. A name the table does not have is an error.
    pub fn table_sql(&self, table: &str, columns: &[&str], key_len: usize) -> Result<TableSql> {
        let known = self.column_kinds(table)?;
        if known.is_empty() {
            bail!(
                "{}: schema '{}' has no table '{table}' (it has: {})",
                self.shown,
                self.schema,
                self.user_tables()?.join(", ")
            );
        }
        if key_len == 0 || key_len > columns.len() {
            bail!(
                "table '{table}': a key of {key_len} columns out of {}",
                columns.len()
            );
        }
        let mut kinds = Vec::with_capacity(columns.len());
        let mut not_null = Vec::with_capacity(columns.len());
        for &c in columns {
            if c.is_empty() {
                kinds.push(Kind::Absent);
                not_null.push(false);
                continue;
            }
            match known.iter().find(|k| k.name == c) {
                Some(k) => {
                    kinds.push(k.kind);
                    not_null.push(k.not_null);
                }
                None => bail!(
                    "table '{table}' in {} has no column '{c}' (it has: {})",
                    self.shown,
                    known
                        .iter()
                        .map(|k| k.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        let quoted: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
        let qualified = self.qualified(table);
        let list = quoted
            .iter()
            .zip(&kinds)
            .map(|(c, k)| k.select(c))
            .collect::<Vec<_>>()
            .join(", ");
        let key_exprs: Vec<String> = (0..key_len).map(|i| kinds[i].order(&quoted[i])).collect();
        let order = key_exprs
            .iter()
            .zip(&not_null)
            .map(|(e, nn)| {
                if *nn {
                    e.clone()
                } else {
                    format!("{e} NULLS FIRST")
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let matches = (0..key_len)
            .map(|i| {
                let n = i + 1;
                match kinds[i] {
                    Kind::Other => format!("{}::text = ${n}::text", quoted[i]),
                    _ => format!("{} = ${n}", quoted[i]),
                }
            })
            .collect::<Vec<_>>()
            .join(" AND ");
        Ok(TableSql {
            table: table.to_string(),
            key_len,
            width: columns.len(),
            names: columns.iter().map(|c| c.to_string()).collect(),
            select_by_key: format!("SELECT {list} FROM {qualified} WHERE {matches}"),
            count: format!("SELECT count(*) FROM {qualified}"),
            kinds,
            qualified,
            list,
            key_exprs,
            order,
        })
    }
}

/// A key value as a literal compared with a key column's order expression.
fn literal(kind: Kind, v: &Value) -> Result<String> {
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

impl TableSql {
    /// The number of columns read.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The key-ordered read of the table, after `after` when given, as the
    /// query a COPY runs.
    pub(super) fn scan_query(&self, after: Option<&[Value]>) -> Result<String> {
        let filter = match after {
            None => String::new(),
            Some(key) => {
                if key.len() != self.key_len {
                    bail!(
                        "table '{}': a key of {} values for a key of {} columns",
                        self.table,
                        key.len(),
                        self.key_len
                    );
                }
                let values = (0..self.key_len)
                    .map(|i| literal(self.kinds[i], &key[i]))
                    .collect::<Result<Vec<_>>>()?;
                format!(
                    " WHERE ({}) > ({})",
                    self.key_exprs.join(", "),
                    values.join(", ")
                )
            }
        };
        Ok(format!(
            "SELECT {} FROM {}{filter} ORDER BY {}",
            self.list, self.qualified, self.order
        ))
    }

    /// The columns the table has (not the absent ones), as block indexes.
    pub(super) fn written(&self) -> Vec<usize> {
        (0..self.width)
            .filter(|&i| self.kinds[i] != Kind::Absent)
            .collect()
    }
}
