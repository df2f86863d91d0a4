//! Key-ordered scans: a table's rows in cutover's key order, streamed from
//! an unbuffered result set of the binary protocol into [`Block`]s, so
//! memory stays at one block whatever the table's size, and resumable after
//! a key. Also the count of a table.
//!
//! Each key column is ordered by [`Kind::order`]: numbers, dates and bytes
//! by the column (an index serves the scan), text by its utf8mb4 bytes with
//! no padding, so that `'b\t'` comes before `'b'` and `'b'` before `'b '`
//! as cutover compares them (MariaDB's `utf8mb4_bin` pads with spaces and
//! would put `'b'` and `'b '` together). A resumed scan compares the same
//! expressions with the key, bound as parameters:
//! `k1 >= ? AND (k1 > ? OR (k1 = ? AND k2 > ?))`, which the server reads as
//! a range of `k1`.
//!
//! A scan stopped early reads the rest of its result set and drops it: the
//! protocol has no way to end one short of closing the connection.

use anyhow::{Context, Result, bail};
use mysql::prelude::Queryable;
use mysql::{Row, Value as My};

use super::catalogue::Column;
use super::types::{self, BadValue, Kind};
use super::{MySql, quote_ident};
use crate::value::{Block, CellRef, Value, display_key};

/// A table's scan: its columns (the key's first), their kinds, and the
/// statements that read it.
#[derive(Clone, Debug)]
pub struct Scan {
    table: String,
    names: Vec<String>,
    kinds: Vec<Kind>,
    collations: Vec<Option<String>>,
    key_len: usize,
    scan: String,
    after: String,
}

impl Scan {
    /// The scan of `columns` of `table` (the first `key_len` its key, in
    /// order), as `db`'s catalogue describes them.
    pub fn new(db: &MySql, table: &str, columns: &[&str], key_len: usize) -> Result<Scan> {
        let all = db.columns(table)?;
        let picked = columns
            .iter()
            .map(|name| {
                all.iter()
                    .find(|c| c.name == *name)
                    .cloned()
                    .with_context(|| {
                        format!(
                            "table '{table}' of {} has no column '{name}' (it has: {})",
                            db.shown(),
                            all.iter()
                                .map(|c| c.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
            })
            .collect::<Result<Vec<Column>>>()?;
        Scan::of(db, table, &picked, key_len)
    }

    /// The scan of the catalogue's `columns` of `table`, in that order.
    pub fn of(db: &MySql, table: &str, columns: &[Column], key_len: usize) -> Result<Scan> {
        if key_len == 0 || key_len > columns.len() {
            bail!(
                "table '{table}': a key of {key_len} columns among {} read",
                columns.len()
            );
        }
        let kinds = columns
            .iter()
            .map(Kind::of)
            .collect::<Result<Vec<_>>>()
            .with_context(|| format!("table '{table}' of {}", db.shown()))?;
        let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
        let collations: Vec<Option<String>> = columns.iter().map(|c| c.collation.clone()).collect();
        let exprs = (0..key_len)
            .map(|i| kinds[i].order(&quote_ident(&names[i]), collations[i].as_deref()))
            .collect::<Result<Vec<_>>>()
            .with_context(|| format!("the key of table '{table}'"))?;
        let list = names
            .iter()
            .map(|n| quote_ident(n))
            .collect::<Vec<_>>()
            .join(", ");
        let order = exprs.join(", ");
        let from = db.qualified(table);
        Ok(Scan {
            scan: format!("SELECT {list} FROM {from} ORDER BY {order}"),
            after: format!(
                "SELECT {list} FROM {from} WHERE {} ORDER BY {order}",
                after_condition(&exprs)
            ),
            table: table.to_string(),
            names,
            kinds,
            collations,
            key_len,
        })
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    pub fn kinds(&self) -> &[Kind] {
        &self.kinds
    }

    /// The statement of a whole scan (for tests and messages).
    pub fn sql(&self) -> &str {
        &self.scan
    }

    /// The parameters of the resumed scan's condition for the key `after`,
    /// in the order [`after_condition`] uses them.
    fn after_params(&self, after: &[Value]) -> Result<Vec<My>> {
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
}

/// The row's key for a message about one of its values: each key value
/// as read, or as the server would print it when it cannot be.
fn key_shown(kinds: &[Kind], key_len: usize, row: &Row) -> String {
    let mut scratch = String::new();
    let parts: Vec<String> = (0..key_len)
        .map(|i| {
            let v = row.as_ref(i).unwrap_or(&My::NULL);
            types::decode(&kinds[i], v, &mut scratch, |c| c.to_value().to_string())
                .unwrap_or_else(|_| types::raw(v))
        })
        .collect();
    if parts.len() == 1 {
        parts.into_iter().next().unwrap_or_default()
    } else {
        format!("({})", parts.join(", "))
    }
}

/// The parameters of a resumed scan's condition ([`after_condition`]) for
/// the key `after`, each bound as its column's order expression compares.
pub(super) fn after_params(
    table: &str,
    names: &[String],
    kinds: &[Kind],
    collations: &[Option<String>],
    after: &[Value],
) -> Result<Vec<My>> {
    let params = after
        .iter()
        .enumerate()
        .map(|(i, v)| {
            kinds[i]
                .order_param(v.as_cell(), collations[i].as_deref())
                .with_context(|| {
                    format!(
                        "table '{table}': resuming after key {}, column '{}'",
                        display_key(after),
                        names[i]
                    )
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut out = Vec::new();
    if params.len() > 1 {
        out.push(params[0].clone());
    }
    for (i, p) in params.iter().enumerate() {
        out.push(p.clone());
        if i + 1 < params.len() {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// What a streamed read decodes: the table, the columns read (the key's
/// first) and their kinds.
pub(super) struct Shape<'a> {
    pub table: &'a str,
    pub names: &'a [String],
    pub kinds: &'a [Kind],
    pub key_len: usize,
}

/// `e1 > ?` for one key column; for more,
/// `e1 >= ? AND (e1 > ? OR (e1 = ? AND (e2 > ? OR (e2 = ? AND e3 > ?))))`.
pub(super) fn after_condition(exprs: &[String]) -> String {
    fn tail(exprs: &[String]) -> String {
        match exprs {
            [] => String::new(),
            [last] => format!("{last} > ?"),
            [first, rest @ ..] => format!("{first} > ? OR ({first} = ? AND ({}))", tail(rest)),
        }
    }
    match exprs {
        [one] => format!("{one} > ?"),
        _ => format!("{} >= ? AND ({})", exprs[0], tail(exprs)),
    }
}

impl MySql {
    /// Streams `scan`'s table in key order (only keys after `after` when
    /// given), handing rows out in blocks of `block_rows` until `f` returns
    /// `false`. A value that cannot be read exactly stops the scan with a
    /// [`BadValue`] naming table, key, column and value.
    pub fn scan(
        &self,
        scan: &Scan,
        after: Option<&[Value]>,
        block_rows: usize,
        f: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        let (sql, params) = match after {
            None => (scan.scan.as_str(), Vec::new()),
            Some(key) => (scan.after.as_str(), scan.after_params(key)?),
        };
        let shape = Shape {
            table: &scan.table,
            names: &scan.names,
            kinds: &scan.kinds,
            key_len: scan.key_len,
        };
        self.stream(&shape, sql, params, block_rows, f)
    }

    /// Streams the rows of the query `sql` (with `params`), which reads the
    /// columns of `shape`, into blocks of `block_rows` until `f` returns
    /// `false`, as [`MySql::scan`] does.
    pub(super) fn stream(
        &self,
        shape: &Shape<'_>,
        sql: &str,
        params: Vec<My>,
        block_rows: usize,
        f: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        let block_rows = block_rows.max(1);
        let what = format!("reading table '{}'", shape.table);
        let mut conn = self.conn()?;
        let rows = conn
            .exec_iter(sql, params)
            .map_err(|e| self.failed(&what, &e))?;
        let width = shape.names.len();
        let mut block = Block::new(width, block_rows);
        let mut scratch = String::new();
        for row in rows {
            let row = row.map_err(|e| self.failed(&what, &e))?;
            if row.len() != width {
                bail!(
                    "{what} in {}: a row of {} columns, {width} expected",
                    self.shown(),
                    row.len()
                );
            }
            for (i, kind) in shape.kinds.iter().enumerate() {
                let v = row.as_ref(i).unwrap_or(&My::NULL);
                let pushed = types::decode(kind, v, &mut scratch, |c: CellRef<'_>| block.push(c));
                if let Err(why) = pushed {
                    return Err(anyhow::Error::new(BadValue {
                        table: shape.table.to_string(),
                        key: key_shown(shape.kinds, shape.key_len, &row),
                        column: shape.names[i].clone(),
                        value: types::raw(v),
                        why,
                    })
                    .context(format!("{what} in {}", self.shown())));
                }
            }
            if block.full(block_rows) {
                let full = std::mem::replace(&mut block, Block::new(width, block_rows));
                if !f(full)? {
                    return Ok(());
                }
            }
        }
        if !block.is_empty() {
            f(block)?;
        }
        Ok(())
    }

    /// The number of rows of `table`.
    pub fn count(&self, table: &str) -> Result<u64> {
        let sql = format!("SELECT COUNT(*) FROM {}", self.qualified(table));
        let n: Option<u64> = self
            .conn()?
            .query_first(&sql)
            .map_err(|e| self.failed(&format!("counting table '{table}'"), &e))?;
        Ok(n.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_scan_compares_the_key_as_a_range_of_its_first_column() {
        let e = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(after_condition(&e(&["a"])), "a > ?");
        assert_eq!(
            after_condition(&e(&["a", "b"])),
            "a >= ? AND (a > ? OR (a = ? AND (b > ?)))"
        );
        assert_eq!(
            after_condition(&e(&["a", "b", "c"])),
            "a >= ? AND (a > ? OR (a = ? AND (b > ? OR (b = ? AND (c > ?)))))"
        );
    }
}
