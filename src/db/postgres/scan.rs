//! Key-ordered scans streamed through
//! `COPY (SELECT … ORDER BY …) TO STDOUT (FORMAT binary)` into [`Block`]s:
//! memory stays at one block whatever the table's size. Also the binary
//! forms of a field read ([`Raw`]) and of a parameter bound ([`Bound`]).

use anyhow::{Context, Result, bail};
use tokio_postgres::types::{FromSql, ToSql, Type};

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
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            None => Ok(tokio_postgres::types::IsNull::Yes),
            Some(b) => {
                out.extend_from_slice(b);
                Ok(tokio_postgres::types::IsNull::No)
            }
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// What [`parse_row`] found at the start of a buffer.
enum Parsed {
    /// A row of this many bytes, its values pushed.
    Row(usize),
    /// The trailer (`-1` fields).
    Trailer,
}

/// Parses the row at the start of `buf` into `block` when all of it is
/// there; `None` (nothing pushed) when it is not. A row of another number
/// of fields than `kinds` is an error.
fn parse_row(
    buf: &[u8],
    kinds: &[types::Kind],
    scratch: &mut String,
    block: &mut Block,
) -> Result<Option<Parsed>> {
    let Some(count) = buf.get(..2) else {
        return Ok(None);
    };
    let fields = i16::from_be_bytes([count[0], count[1]]);
    if fields == -1 {
        return Ok(Some(Parsed::Trailer));
    }
    if fields as usize != kinds.len() {
        bail!("a row of {fields} fields, {} expected", kinds.len());
    }
    // Find every field first, so that a row cut short pushes nothing.
    let mut at = 2;
    for _ in kinds {
        let Some(len) = buf.get(at..at + 4) else {
            return Ok(None);
        };
        let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
        at += 4 + len.max(0) as usize;
        if at > buf.len() {
            return Ok(None);
        }
    }
    let mut at = 2;
    for &kind in kinds {
        let len = i32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        at += 4;
        if len < 0 {
            block.push(CellRef::Null);
            continue;
        }
        let value = &buf[at..at + len as usize];
        at += len as usize;
        types::decode(kind, value, scratch, |c| block.push(c))?;
    }
    Ok(Some(Parsed::Row(at)))
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
        let t = sql.table.as_str();
        let mut stream = Stream {
            kinds: &plan.kinds,
            state: State::Header,
            scratch: String::new(),
            block: Block::new(sql.width, block_rows),
            block_rows,
        };
        // Bytes of a row (or of the header) not all there yet.
        let mut pending: Vec<u8> = Vec::new();
        let mut client = self.client()?;
        client
            .copy_out(&copy, &mut |piece| {
                let go = if pending.is_empty() {
                    let (used, go) = stream.take(piece, f)?;
                    pending.extend_from_slice(&piece[used..]);
                    go
                } else {
                    pending.extend_from_slice(piece);
                    let buf = std::mem::take(&mut pending);
                    let (used, go) = stream.take(&buf, f)?;
                    pending.extend_from_slice(&buf[used..]);
                    go
                };
                Ok(go)
            })
            .with_context(|| format!("reading table '{t}' in {}", self.shown))?;
        drop(client);
        match stream.state {
            State::Stopped => return Ok(()),
            State::Done if pending.is_empty() => {}
            State::Done => bail!("reading table '{t}': data after the COPY trailer"),
            _ => bail!("reading table '{t}': the COPY stream ended early"),
        }
        if !stream.block.is_empty() {
            f(stream.block)?;
        }
        Ok(())
    }
}

/// Where a binary COPY stream is.
#[derive(PartialEq)]
enum State {
    Header,
    Rows,
    /// The trailer was read.
    Done,
    /// The caller wanted no more rows.
    Stopped,
}

/// A binary COPY stream being read into blocks.
struct Stream<'k> {
    kinds: &'k [types::Kind],
    state: State,
    scratch: String,
    block: Block,
    block_rows: usize,
}

impl Stream<'_> {
    /// Reads what `data` holds whole (the header, rows, the trailer),
    /// handing full blocks to `f`; returns the bytes used and whether to go
    /// on.
    fn take(
        &mut self,
        data: &[u8],
        f: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<(usize, bool)> {
        let mut at = 0;
        loop {
            let rest = &data[at..];
            match self.state {
                State::Header => {
                    let Some(head) = rest.get(..19) else {
                        return Ok((at, true));
                    };
                    if &head[..11] != SIGNATURE {
                        bail!("not a binary COPY stream");
                    }
                    let flags = u32::from_be_bytes([head[11], head[12], head[13], head[14]]);
                    if flags & (1 << 16) != 0 {
                        bail!("the COPY stream carries OIDs");
                    }
                    let ext = u32::from_be_bytes([head[15], head[16], head[17], head[18]]) as usize;
                    if rest.len() < 19 + ext {
                        return Ok((at, true));
                    }
                    at += 19 + ext;
                    self.state = State::Rows;
                }
                State::Rows => {
                    match parse_row(rest, self.kinds, &mut self.scratch, &mut self.block)? {
                        Some(Parsed::Row(len)) => {
                            at += len;
                            if self.block.full(self.block_rows) {
                                let width = self.block.width();
                                let full = std::mem::replace(
                                    &mut self.block,
                                    Block::new(width, self.block_rows),
                                );
                                if !f(full)? {
                                    self.state = State::Stopped;
                                    return Ok((at, false));
                                }
                            }
                        }
                        Some(Parsed::Trailer) => {
                            at += 2;
                            self.state = State::Done;
                        }
                        None => return Ok((at, true)),
                    }
                }
                State::Done | State::Stopped => return Ok((at, true)),
            }
        }
    }
}
