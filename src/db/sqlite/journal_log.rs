//! Change capture, reading side: the journal's entries, pages of them in
//! seq order, counts and the digest.

use anyhow::{Result, bail};
use rusqlite::{OptionalExtension, params};

use sha2::Digest;

use super::capture::{journal_parts, prefixed};
use super::*;

/// How many bytes the journal's digest gathers before hashing them.
const DIGEST_BUFFER: usize = 64 * 1024;

impl JournalLog for Sqlite {
    /// Every journaled table (and earlier column lists of the same table).
    fn journal_tables(&self) -> Result<Vec<JournalTable>> {
        self.journal_tables_where("1", [])
    }

    /// `(tbl, op, entries)` of the journal, in table then op order.
    fn journal_counts(&self) -> Result<Vec<(String, String, i64)>> {
        if !self.has_journal()? {
            return Ok(Vec::new());
        }
        let mut st = self.conn.prepare(
            "SELECT t.tbl, j.op, count(*) FROM _cutover_journal j JOIN _cutover_journal_tables t USING (img)
             GROUP BY t.tbl, j.op ORDER BY t.tbl, j.op",
        )?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// `(entries, max seq)` of the journal: the rows of its journal tables,
    /// so that a row written there behind the list of entries is counted.
    fn journal_extent(&self) -> Result<(i64, i64)> {
        if !self.has_journal()? {
            return Ok((0, 0));
        }
        if self.has_entry_list()? {
            let (mut rows, mut max) = (0, 0);
            for t in self.journal_tables()? {
                let first = &journal_parts(t.img, t.columns.len())[0].0;
                let (n, m): (i64, i64) = self.conn.query_row(
                    &format!(
                        "SELECT count(*), coalesce(max(seq), 0) FROM {}",
                        quote_ident(first)
                    ),
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                rows += n;
                max = max.max(m);
            }
            return Ok((rows, max));
        }
        Ok(self.conn.query_row(
            "SELECT count(*), coalesce(max(seq), 0) FROM _cutover_journal",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    }

    /// Entries with `after < seq <= upto`.
    fn journal_count_between(&self, after: i64, upto: i64) -> Result<i64> {
        if !self.has_journal()? {
            return Ok(0);
        }
        if self.has_entry_list()? {
            // The rows of the journal tables, as `journal_extent` counts.
            let mut n = 0;
            for t in self.journal_tables()? {
                let first = &journal_parts(t.img, t.columns.len())[0].0;
                n += self.conn.query_row(
                    &format!(
                        "SELECT count(*) FROM {} WHERE seq > ?1 AND seq <= ?2",
                        quote_ident(first)
                    ),
                    [after, upto],
                    |r| r.get::<_, i64>(0),
                )?;
            }
            return Ok(n);
        }
        Ok(self.conn.query_row(
            "SELECT count(*) FROM _cutover_journal WHERE seq > ?1 AND seq <= ?2",
            [after, upto],
            |r| r.get(0),
        )?)
    }

    /// Entries with `after < seq <= upto`, at most `limit`, in `seq` order,
    /// with their images.
    fn journal_page(&self, after: i64, upto: i64, limit: usize) -> Result<Vec<JournalEntry>> {
        // Each journal table is read as one range of its primary key (at
        // most `limit` rows), then the runs are merged by seq: a page costs
        // a scan, not a look-up per entry.
        // Only the tables that hold an entry of the page are read: the
        // list of entries says which, whatever the number of tables.
        let list: Vec<(i64, i64)> = if self.has_journal()? {
            let mut st = self.conn.prepare_cached(&format!(
                "SELECT seq, img FROM _cutover_journal WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT {limit}"
            ))?;
            st.query_map(params![after, upto], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?
        } else {
            Vec::new()
        };
        let imgs: std::collections::BTreeSet<i64> = list.iter().map(|e| e.1).collect();
        let mut runs: Vec<std::collections::VecDeque<JournalEntry>> = Vec::new();
        for t in self.journal_tables_of(&imgs)? {
            let width = t.columns.len();
            let parts = journal_parts(t.img, width);
            let first = &parts[0];
            // The limit is written into the statement: bound as a parameter,
            // SQLite prepares the statement again at every page.
            let mut st = self.conn.prepare_cached(&format!(
                "SELECT seq, op, {}, {} FROM {} WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT {limit}",
                prefixed("o", first.1.clone()),
                prefixed("n", first.1.clone()),
                quote_ident(&first.0)
            ))?;
            let mut rows = st.query(params![after, upto])?;
            let mut run = std::collections::VecDeque::new();
            while let Some(r) = rows.next()? {
                let seq: i64 = r.get(0)?;
                let op: String = r.get(1)?;
                let n = first.1.len();
                let read = |from: usize| -> rusqlite::Result<Row> {
                    (0..n)
                        .map(|i| r.get_ref(from + i).map(|v| cell(v).to_value()))
                        .collect()
                };
                let (mut old, mut new) = match op.as_str() {
                    "insert" => (None, Some(read(2 + n)?)),
                    "delete" => (Some(read(2)?), None),
                    "update" => (Some(read(2)?), Some(read(2 + n)?)),
                    other => bail!(
                        "journal entry seq {seq} (table '{}') has op {other:?}; the journal is damaged",
                        t.tbl
                    ),
                };
                // A table wider than one part: the rest of each image.
                for (part, range) in &parts[1..] {
                    let mut st = self.conn.prepare_cached(&format!(
                        "SELECT {}, {} FROM {} WHERE seq = ?1",
                        prefixed("o", range.clone()),
                        prefixed("n", range.clone()),
                        quote_ident(part)
                    ))?;
                    let mut more = st.query([seq])?;
                    let Some(m) = more.next()? else {
                        bail!(
                            "journal entry seq {seq} (table '{}') has no row in {part}; the journal is damaged",
                            t.tbl
                        );
                    };
                    let k = range.len();
                    for (image, from) in [(&mut old, 0), (&mut new, k)] {
                        if let Some(row) = image {
                            for i in 0..k {
                                row.push(cell(m.get_ref(from + i)?).to_value());
                            }
                        }
                    }
                }
                run.push_back(JournalEntry {
                    seq,
                    img: t.img,
                    op,
                    old,
                    new,
                });
            }
            if !run.is_empty() {
                runs.push(run);
            }
        }
        let mut out = Vec::with_capacity(limit.min(4096));
        while out.len() < limit {
            let Some(next) = runs
                .iter_mut()
                .filter(|r| !r.is_empty())
                .min_by_key(|r| r.front().map_or(i64::MAX, |e| e.seq))
            else {
                break;
            };
            match next.pop_front() {
                Some(e) => out.push(e),
                None => break,
            }
        }
        // An entry listed but gone from its journal table (deleted behind
        // the triggers) is a gap, as a missing seq always was; the page is
        // filled from the entries listed after it, so that a short page
        // still means the end of the journal.
        if out.len() < limit
            && list.len() == limit
            && let Some(&(last, _)) = list.last()
        {
            let more = self.journal_page(last, upto, limit - out.len())?;
            out.extend(more);
        }
        Ok(out)
    }

    /// Entries with `after < seq <= upto` counted per op.
    fn journal_pending_counts(&self, after: i64, upto: i64) -> Result<Vec<(String, i64)>> {
        let mut st = self.conn.prepare(
            "SELECT op, count(*) FROM _cutover_journal WHERE seq > ?1 AND seq <= ?2 GROUP BY op ORDER BY op",
        )?;
        let rows = st.query_map(params![after, upto], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// SHA-256 over the journal: every entry in `seq` order and every image
    /// row in rowid order, each cell with its storage class.
    fn journal_digest(&self) -> Result<String> {
        let ((), h) = crate::value::hashed_beside(
            |h, buf: Vec<u8>| h.update(&buf),
            |hash| self.journal_bytes(hash),
        )?;
        Ok(hex::encode(h.finalize()))
    }

    /// The seq the journal's own entries come after (0 for a first
    /// identity).
    fn journal_start(&self) -> Result<i64> {
        if !self.has_table("_cutover_journal_id")? {
            return Ok(0);
        }
        Ok(self
            .conn
            .query_row(
                "SELECT after_seq FROM _cutover_journal_id WHERE id = 1",
                [],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0))
    }

    /// The last seq journaled for spec table `name`, under any column list.
    fn last_journaled(&self, name: &str) -> Result<Option<i64>> {
        let mut last = None;
        for t in self.journal_tables_where("tbl = ?1", [name])? {
            let table = &journal_parts(t.img, t.columns.len())[0].0;
            if !self.has_table(table)? {
                continue;
            }
            let m: Option<i64> = self.conn.query_row(
                &format!("SELECT max(seq) FROM {}", quote_ident(table)),
                [],
                |r| r.get(0),
            )?;
            last = last.max(m);
        }
        Ok(last)
    }
}

impl Sqlite {
    /// The rows of the journal's list of tables that `filter` (a condition
    /// on its columns, with `params`) keeps, in image order.
    fn journal_tables_where(
        &self,
        filter: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<JournalTable>> {
        if !self.has_table("_cutover_journal_tables")? {
            return Ok(Vec::new());
        }
        let mut st = self.conn.prepare_cached(&format!(
            "SELECT img, tbl, target_table, columns FROM _cutover_journal_tables WHERE {filter} ORDER BY img"
        ))?;
        let rows = st.query_map(params, |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (img, tbl, target_table, columns) = row?;
            out.push(JournalTable {
                img,
                tbl,
                target_table,
                columns: serde_json::from_str(&columns)?,
            });
        }
        Ok(out)
    }

    /// The journal tables of the images `imgs`, in image order: a look-up
    /// by key each, whatever the number of journaled tables.
    fn journal_tables_of(
        &self,
        imgs: &std::collections::BTreeSet<i64>,
    ) -> Result<Vec<JournalTable>> {
        let mut out = Vec::new();
        for img in imgs {
            out.extend(self.journal_tables_where("img = ?1", [img])?);
        }
        Ok(out)
    }

    /// The journal's digest form, in order, a buffer at a time: every
    /// entry's seq, image and op, then each journal table in seq order,
    /// every column (op and both images) with its storage class.
    fn journal_bytes(&self, hash: &mut dyn FnMut(Vec<u8>)) -> Result<()> {
        use crate::value::CellSink;
        let mut buf: Vec<u8> = Vec::with_capacity(2 * DIGEST_BUFFER);
        let mut flush = |buf: &mut Vec<u8>| {
            if buf.len() >= DIGEST_BUFFER {
                hash(std::mem::replace(
                    buf,
                    Vec::with_capacity(2 * DIGEST_BUFFER),
                ));
            }
        };
        if self.has_journal()? {
            let mut st = self
                .conn
                .prepare("SELECT seq, img, op FROM _cutover_journal ORDER BY seq")?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                buf.put(&r.get::<_, i64>(0)?.to_le_bytes());
                buf.put(&r.get::<_, i64>(1)?.to_le_bytes());
                let op = r.get_ref(2)?.as_bytes().unwrap_or(b"");
                buf.put(&(op.len() as u64).to_le_bytes());
                buf.put(op);
                flush(&mut buf);
            }
            // The list of entries is the view's rows, hashed above.
            for t in self.image_tables()? {
                buf.put(&(t.len() as u64).to_le_bytes());
                buf.put(t.as_bytes());
                let mut st = self.conn.prepare(&format!(
                    "SELECT rowid, * FROM {} ORDER BY rowid",
                    quote_ident(&t)
                ))?;
                let width = st.column_count();
                let mut rows = st.query([])?;
                while let Some(r) = rows.next()? {
                    for i in 0..width {
                        crate::value::hash_cell(&mut buf, cell(r.get_ref(i)?));
                    }
                    flush(&mut buf);
                }
            }
        }
        hash(buf);
        Ok(())
    }
}
