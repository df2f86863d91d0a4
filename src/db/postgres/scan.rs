//! Key-ordered scans streamed through
//! `COPY (SELECT … ORDER BY …) TO STDOUT (FORMAT binary)` into [`Block`]s:
//! memory stays at one block whatever the table's size. Also the binary
//! forms of a field read ([`Raw`]) and of a parameter bound ([`Bound`]).

use std::io::Read;

use anyhow::{Context, Result, bail};
use postgres::types::{FromSql, ToSql, Type};

use super::Postgres;
use super::types;
use crate::db::TableSql;
use crate::value::{Block, CellRef, Value};

/// The 11 bytes every binary COPY starts with.
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// A field as the server sent it, in binary: any type, NULL as `None`.
pub(super) struct Raw<'a>(pub Option<&'a [u8]>);

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

impl Postgres {
    /// Streams a table in key order (optionally only keys after `after`),
    /// handing rows out in blocks of `block_rows` until `f` returns `false`.
    /// Each value is copied once, into its block. A scan stopped early
    /// leaves the rest of the stream to the client, which discards it.
    pub(super) fn copy_out(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        block_rows: usize,
        f: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        let plan = self.plan(sql)?;
        let query = match after {
            None => sql.scan.clone(),
            Some(key) => plan.scan_after(key)?,
        };
        self.copy_query(sql, &plan, &query, block_rows, f)
    }

    /// Streams the rows of `query` (which reads the columns of `sql`'s
    /// `plan`, in key order) as [`Postgres::copy_out`] does.
    pub(super) fn copy_query(
        &self,
        sql: &TableSql,
        plan: &super::table_sql::Plan,
        query: &str,
        block_rows: usize,
        f: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        let block_rows = block_rows.max(1);
        let copy = format!("COPY ({query}) TO STDOUT (FORMAT binary)");
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
            for &kind in &plan.kinds {
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
}
