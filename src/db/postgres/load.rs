//! Batch writes: rows from [`Block`]s into a table through
//! `COPY … FROM STDIN (FORMAT binary)`, every value encoded exactly or
//! refused ([`super::types::encode`]).
//!
//! One COPY is one statement: it writes every row or none. It runs in the
//! caller's transaction when one is open, so a batch and its bookkeeping
//! commit together. A row whose key is already there fails the whole COPY
//! (and, in PostgreSQL, the transaction around it); rows that may collide
//! go through [`crate::db::Rows::inserter`] instead, which skips them.

use anyhow::{Context, Result, bail};

use super::types::{self, Kind};
use super::{Postgres, quote_ident};
use crate::db::TableSql;
use crate::value::{Block, CellRef};

/// How much encoded data is handed to the connection at a time.
const CHUNK: usize = 256 * 1024;

impl Postgres {
    /// Writes every row of `blocks` into the table of `sql` (its columns;
    /// the absent ones are not written) with one binary COPY; returns the
    /// number of rows written. Nothing is written when a value cannot be
    /// encoded exactly or the server refuses a row.
    pub fn copy_in<'b>(
        &self,
        sql: &TableSql,
        blocks: impl IntoIterator<Item = &'b Block>,
    ) -> Result<u64> {
        let plan = self.plan(sql)?;
        let cols = plan.written();
        if let Some(&i) = cols.iter().find(|&&i| !plan.kinds[i].writable()) {
            bail!(
                "table '{}', column '{}': its type ({}) cannot be written in binary yet (integers, boolean, real, numeric, text, char, enums, bytea, date and timestamps can)",
                sql.table,
                plan.names[i],
                plan.types[i]
            );
        }
        let statement = format!(
            "COPY {} ({}) FROM STDIN (FORMAT binary)",
            plan.qualified,
            cols.iter()
                .map(|&i| quote_ident(&plan.names[i]))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut client = self.client()?;
        let mut w = client
            .copy_in(statement.as_str())
            .with_context(|| format!("loading table '{}' in {}", sql.table, self.shown))?;
        let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + 4096);
        buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
        buf.extend_from_slice(&0u32.to_be_bytes());
        buf.extend_from_slice(&0u32.to_be_bytes());
        let fields = i16::try_from(cols.len()).context("too many columns for one COPY")?;
        let mut row_no: u64 = 0;
        for block in blocks {
            if block.width() != sql.width {
                bail!(
                    "table '{}': a block of {} columns for {} columns",
                    sql.table,
                    block.width(),
                    sql.width
                );
            }
            for r in 0..block.rows() {
                buf.extend_from_slice(&fields.to_be_bytes());
                for &c in &cols {
                    let cell = block.get(r, c);
                    if cell == CellRef::Null {
                        buf.extend_from_slice(&(-1i32).to_be_bytes());
                        continue;
                    }
                    let at = buf.len();
                    buf.extend_from_slice(&[0; 4]);
                    let kind: Kind = plan.kinds[c];
                    types::encode(kind, cell, &mut buf).with_context(|| {
                        format!(
                            "table '{}', row {} of the batch, column '{}'",
                            sql.table,
                            row_no + 1,
                            plan.names[c]
                        )
                    })?;
                    let len =
                        i32::try_from(buf.len() - at - 4).context("a value of more than 2 GiB")?;
                    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
                }
                row_no += 1;
                if buf.len() >= CHUNK {
                    w.write_all(&buf)?;
                    buf.clear();
                }
            }
        }
        buf.extend_from_slice(&(-1i16).to_be_bytes());
        w.write_all(&buf)?;
        let n = w
            .finish()
            .with_context(|| format!("loading table '{}' in {}", sql.table, self.shown))?;
        if n != row_no {
            bail!(
                "loading table '{}': {row_no} rows sent, the server wrote {n}",
                sql.table
            );
        }
        Ok(n)
    }
}
