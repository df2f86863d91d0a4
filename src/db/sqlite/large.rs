//! Large values ([`crate::value::LARGE`] bytes on) read without SQLite
//! loading them whole. A statement that returns a text or blob holds all of
//! it (and SQLite keeps the last one a cursor loaded until the statement is
//! reset): reading a journal entry whose before- and after-image both hold
//! a large value costs twice its size before a byte is copied. Under
//! [`Sqlite::refusing_large`] a statement meeting one fails with
//! `SQLITE_TOOBIG` instead, before reading it; the reader takes that row's
//! small values alone and each large one by incremental blob I/O, a chunk
//! at a time, whole into the one buffer that keeps it or straight into a
//! hash.

use std::io::Read;

use anyhow::{Context, Result};
use rusqlite::OptionalExtension;
use rusqlite::limits::Limit;

use super::*;
use crate::value::{Digested, LARGE};

/// How much of a large value one blob read takes.
const CHUNK: usize = 64 * 1024;

/// While it lives, its connection refuses to load a text or blob of
/// [`LARGE`] bytes or more: a statement meeting one fails with
/// `SQLITE_TOOBIG` ([`too_big`]). Bound values are checked too, so only
/// reads run under it.
pub(super) struct Refusing<'c> {
    conn: &'c rusqlite::Connection,
    before: i32,
}

impl Drop for Refusing<'_> {
    fn drop(&mut self) {
        let _ = self.conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, self.before);
    }
}

/// Whether `e` is a statement refusing a value over the connection's
/// length limit: under [`Refusing`], a large value in the row it was
/// about to return.
pub(super) fn too_big(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::TooBig)
}

/// A cell read under [`Refusing`]: its value, or a large text or blob
/// left where it is, to be read whole or hashed once its reader decides.
#[derive(Debug)]
pub(super) enum Slot {
    Ready(Value),
    Large { text: bool, len: usize },
}

impl Sqlite {
    /// Makes this connection refuse large values until the guard goes.
    pub(super) fn refusing_large(&self) -> Result<Refusing<'_>> {
        let before = self
            .conn
            .set_limit(Limit::SQLITE_LIMIT_LENGTH, (LARGE - 1) as i32)?;
        Ok(Refusing {
            conn: &self.conn,
            before,
        })
    }

    /// Columns `columns` of the row `rowid` of `table` (a rowid table), the
    /// small values read and the large ones left as [`Slot::Large`]: the
    /// row a statement under [`Refusing`] stopped at. `None`: no such row.
    pub(super) fn slots(
        &self,
        table: &str,
        columns: &[String],
        rowid: i64,
    ) -> Result<Option<Vec<Slot>>> {
        let t = quote_ident(table);
        // One result column per column probed (a row may have 2,000): the
        // length of a text, minus one minus the length of a blob, NULL for
        // anything else. Neither loads the value.
        let probe = columns
            .iter()
            .map(|c| {
                let c = quote_ident(c);
                format!(
                    "CASE typeof({c}) WHEN 'text' THEN octet_length({c}) WHEN 'blob' THEN -1 - octet_length({c}) END"
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let kinds: Option<Vec<Option<i64>>> = self
            .conn
            .query_row(
                &format!("SELECT {probe} FROM {t} WHERE rowid = ?1"),
                [rowid],
                |r| (0..columns.len()).map(|i| r.get(i)).collect(),
            )
            .optional()?;
        let Some(kinds) = kinds else {
            return Ok(None);
        };
        // (text, bytes) of a large value.
        let large = |k: &Option<i64>| match *k {
            Some(n) if n >= 0 && n as usize >= LARGE => Some((true, n as usize)),
            Some(n) if n < 0 && (-1 - n) as usize >= LARGE => Some((false, (-1 - n) as usize)),
            _ => None,
        };
        let small: Vec<usize> = (0..columns.len())
            .filter(|&i| large(&kinds[i]).is_none())
            .collect();
        let mut values: Vec<Value> = Vec::new();
        if !small.is_empty() {
            let list = small
                .iter()
                .map(|&i| quote_ident(&columns[i]))
                .collect::<Vec<_>>()
                .join(", ");
            values = self.conn.query_row(
                &format!("SELECT {list} FROM {t} WHERE rowid = ?1"),
                [rowid],
                |r| read_row(r, small.len()),
            )?;
        }
        let mut values = values.into_iter();
        Ok(Some(
            kinds
                .iter()
                .map(|k| match large(k) {
                    Some((text, len)) => Slot::Large { text, len },
                    None => Slot::Ready(values.next().unwrap_or(Value::Null)),
                })
                .collect(),
        ))
    }

    /// The value of a [`Slot::Large`], read whole into the one buffer that
    /// keeps it, or as its digest when `digest`.
    pub(super) fn large_value(
        &self,
        table: &str,
        column: &str,
        rowid: i64,
        (text, len): (bool, usize),
        digest: bool,
    ) -> Result<Value> {
        if digest {
            let mut h = <sha2::Sha256 as sha2::Digest>::new();
            let mut n = 0u64;
            self.large_chunks(table, column, rowid, text, &mut |b| {
                n += b.len() as u64;
                sha2::Digest::update(&mut h, b);
            })?;
            return Ok(Value::Digested(Box::new(Digested {
                text,
                len: n,
                sha256: sha2::Digest::finalize(h).into(),
            })));
        }
        let mut bytes = Vec::with_capacity(len);
        self.large_chunks(table, column, rowid, text, &mut |b| {
            bytes.extend_from_slice(b)
        })?;
        Ok(Value::from_bytes(text, bytes))
    }

    /// Hands the bytes of a large text or blob to `f`, a chunk at a time,
    /// in order: the bytes a statement would return for it.
    pub(super) fn large_chunks(
        &self,
        table: &str,
        column: &str,
        rowid: i64,
        text: bool,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<()> {
        let read = || {
            format!(
                "reading column {column} of row {rowid} of {table} in {}",
                self.location
            )
        };
        // Blob I/O hands over the bytes as stored: a text stored in UTF-16
        // is read through a statement, which gives it as UTF-8.
        if text && !self.stores_utf8()? {
            let before = self.conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, i32::MAX)?;
            let r = self.conn.query_row(
                &format!(
                    "SELECT {} FROM {} WHERE rowid = ?1",
                    quote_ident(column),
                    quote_ident(table)
                ),
                [rowid],
                |r| {
                    f(r.get_ref(0)?.as_bytes_or_null()?.unwrap_or(b""));
                    Ok(())
                },
            );
            self.conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, before)?;
            return r.with_context(read);
        }
        let mut blob = self
            .conn
            .blob_open(rusqlite::MAIN_DB, table, column, rowid, true)
            .with_context(read)?;
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = blob.read(&mut buf).with_context(read)?;
            if n == 0 {
                return Ok(());
            }
            f(&buf[..n]);
        }
    }

    /// Whether the database stores text as UTF-8 (as blob I/O reads it).
    pub(super) fn stores_utf8(&self) -> Result<bool> {
        let e: String = self.conn.query_row("PRAGMA encoding", [], |r| r.get(0))?;
        Ok(e == "UTF-8")
    }
}

impl Sqlite {
    /// Each value hashed where SQLite holds it, into buffers the hashing
    /// thread takes: a large one in chunks, never copied whole, where
    /// copying the rows into blocks held every value twice.
    pub(super) fn digest_in_place(&self, sql: &TableSql) -> Result<Option<String>> {
        use crate::value::{CellSink, LARGE, hash_cell};
        const BUFFER: usize = 64 * 1024;
        let ((), h) = crate::value::hashed_beside(
            |h, piece: Vec<u8>| sha2::Digest::update(h, &piece),
            |hash| {
                let mut st = self.conn.prepare(&sql.scan).with_context(|| {
                    format!("reading table '{}' in {}", sql.table, self.location)
                })?;
                let mut rows = st.query([])?;
                let mut buf: Vec<u8> = Vec::with_capacity(2 * BUFFER);
                while let Some(r) = rows.next()? {
                    for i in 0..sql.width {
                        match cell(r.get_ref(i)?) {
                            c @ (CellRef::Text(b) | CellRef::Blob(b)) if b.len() >= LARGE => {
                                buf.put(&[if matches!(c, CellRef::Text(_)) { 3 } else { 4 }]);
                                buf.put(&(b.len() as u64).to_le_bytes());
                                hash(std::mem::take(&mut buf));
                                for chunk in b.chunks(BUFFER) {
                                    hash(chunk.to_vec());
                                }
                            }
                            c => hash_cell(&mut buf, c),
                        }
                    }
                    if buf.len() >= BUFFER {
                        hash(std::mem::replace(&mut buf, Vec::with_capacity(2 * BUFFER)));
                    }
                }
                hash(buf);
                Ok(())
            },
        )?;
        Ok(Some(hex::encode(sha2::Digest::finalize(h))))
    }
}
