//! Reading rows: key-ordered scans streamed through
//! `COPY (SELECT … ORDER BY …) TO STDOUT (FORMAT binary)` into [`Block`]s
//! (memory stays at one block whatever the table's size), keyed reads of
//! one row, and counts.

use std::io::Read;

use anyhow::{Context, Result, bail};
use postgres::types::{FromSql, ToSql, Type};

use super::types::{self, Kind};
use super::{Db, TableSql};
use crate::value::{Block, CellRef, Row, Value};

/// The 11 bytes every binary COPY starts with.
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// A field as the server sent it, in binary: any type, NULL as `None`.
struct Raw<'a>(Option<&'a [u8]>);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Some(raw)))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A parameter already in binary (see [`types::encode`]).
#[derive(Debug)]
pub(super) struct Bound(pub Option<Vec<u8>>);

impl ToSql for Bound {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            None => Ok(postgres::types::IsNull::Yes),
            Some(b) => {
                out.extend_from_slice(b);
                Ok(postgres::types::IsNull::No)
            }
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

fn read_exact(r: &mut impl Read, buf: &mut [u8], table: &str) -> Result<()> {
    r.read_exact(buf)
        .with_context(|| format!("reading table '{table}': the COPY stream ended early"))
}

impl Db {
    pub fn row_count(&self, sql: &TableSql) -> Result<i64> {
        Ok(self.client()?.query_one(sql.count.as_str(), &[])?.get(0))
    }

    /// Streams a table in key order (optionally only keys after `after`),
    /// handing rows out in blocks of `block_rows` until `f` returns `false`.
    /// Each value is copied once, into its block.
    pub fn scan_blocks(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        block_rows: usize,
        mut f: impl FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        let block_rows = block_rows.max(1);
        let copy = format!(
            "COPY ({}) TO STDOUT (FORMAT binary)",
            sql.scan_query(after)?
        );
        let mut client = self.client()?;
        let mut r = client
            .copy_out(copy.as_str())
            .with_context(|| format!("reading table '{}' in {}", sql.table, self.shown))?;
        let t = sql.table.as_str();
        let mut head = [0u8; 19];
        read_exact(&mut r, &mut head, t)?;
        if &head[..11] != SIGNATURE {
            bail!("reading table '{t}': not a binary COPY stream");
        }
        let flags = u32::from_be_bytes([head[11], head[12], head[13], head[14]]);
        if flags & (1 << 16) != 0 {
            bail!("reading table '{t}': the COPY stream carries OIDs");
        }
        let ext = u32::from_be_bytes([head[15], head[16], head[17], head[18]]) as usize;
        let mut field = vec![0u8; ext];
        read_exact(&mut r, &mut field, t)?;
        let mut scratch = String::new();
        let mut block = Block::new(sql.width, block_rows);
        let mut n = 0;
        loop {
            let mut count = [0u8; 2];
            read_exact(&mut r, &mut count, t)?;
            let fields = i16::from_be_bytes(count);
            if fields == -1 {
                break;
            }
            if fields as usize != sql.width {
                bail!(
                    "reading table '{t}': a row of {fields} fields, {} expected",
                    sql.width
                );
            }
            for &kind in &sql.kinds {
                let mut len = [0u8; 4];
                read_exact(&mut r, &mut len, t)?;
                let len = i32::from_be_bytes(len);
                if len < 0 {
                    block.push(CellRef::Null);
                    continue;
                }
                field.resize(len as usize, 0);
                read_exact(&mut r, &mut field, t)?;
                types::decode(kind, &field, &mut scratch, |c| block.push(c))
                    .with_context(|| format!("reading table '{t}'"))?;
            }
            n += 1;
            if n == block_rows {
                n = 0;
                let full = std::mem::replace(&mut block, Block::new(sql.width, block_rows));
                if !f(full)? {
                    // Dropping the reader mid-stream leaves the rest unread;
                    // the client discards it before the next statement.
                    return Ok(());
                }
            }
        }
        // The trailer is the end of the data: drain the stream so the
        // statement completes.
        let mut rest = Vec::new();
        r.read_to_end(&mut rest)?;
        if !rest.is_empty() {
            bail!("reading table '{t}': data after the COPY trailer");
        }
        drop(r);
        drop(client);
        if !block.is_empty() {
            f(block)?;
        }
        Ok(())
    }

    /// Streams a table in key order as owned rows (paths that are not hot).
    pub fn scan(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        mut f: impl FnMut(Row) -> Result<bool>,
    ) -> Result<()> {
        self.scan_blocks(sql, after, 256, |b| {
            for i in 0..b.rows() {
                if !f(b.values(i, b.width()))? {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    /// The row stored under `key`, if any. Only a row whose key reads back
    /// as exactly these values matches: `'12.5'` does not find the NUMERIC
    /// key `12.50`, as the integer `1` does not find the text `'1'`.
    pub fn get_row(&self, sql: &TableSql, key: &[Value]) -> Result<Option<Row>> {
        if key.len() != sql.key_len {
            bail!(
                "table '{}': a key of {} values for a key of {} columns",
                sql.table,
                key.len(),
                sql.key_len
            );
        }
        let mut params = Vec::with_capacity(key.len());
        for (i, v) in key.iter().enumerate() {
            if *v == Value::Null {
                return Ok(None);
            }
            // A key the column's type cannot hold is in no row. The scale
            // is not checked: `12.505` is simply not a key of numeric(10,2).
            let kind = match sql.kinds[i] {
                Kind::Numeric(_) => Kind::Numeric(None),
                k => k,
            };
            let mut raw = Vec::new();
            if types::encode(kind, v.as_cell(), &mut raw).is_err() {
                return Ok(None);
            }
            params.push(Bound(Some(raw)));
        }
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let rows = self
            .client()?
            .query(sql.select_by_key.as_str(), &refs)
            .with_context(|| format!("reading a row of '{}' in {}", sql.table, self.shown))?;
        let mut found: Option<Row> = None;
        let mut scratch = String::new();
        for r in &rows {
            let mut row = Vec::with_capacity(sql.width);
            for (i, &kind) in sql.kinds.iter().enumerate() {
                let Raw(raw) = r.try_get(i)?;
                row.push(match raw {
                    None => Value::Null,
                    Some(b) => types::decode(kind, b, &mut scratch, |c| c.to_value())?,
                });
            }
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
}
