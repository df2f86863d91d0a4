//! Change capture, reading side: the journal's entries, pages of them in
//! seq order, counts and the digest.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use rusqlite::{OptionalExtension, params};

use sha2::Digest;

use super::capture::{PART, journal_parts, prefixed};
use super::large::{self, Slot};
use super::*;
use crate::db::journal_merge::merge_runs;

/// How many bytes the journal's digest gathers before hashing them.
const DIGEST_BUFFER: usize = 64 * 1024;

impl JournalLog for Sqlite {
    /// Each image table counted per op in the range: its rows, so that a
    /// row written there behind the list of entries is counted (a journal
    /// from before the list is counted through its view).
    fn journal_counts(&self, range: SeqRange) -> Result<Vec<JournalCount>> {
        if !self.has_journal()? {
            return Ok(Vec::new());
        }
        let mut counts: BTreeMap<(String, Op), (i64, i64)> = BTreeMap::new();
        let mut add = |tbl: String, op: String, n: i64, last: i64| -> Result<()> {
            let op = Op::parse(&op).with_context(|| {
                format!("the journal of table '{tbl}' holds an entry of op '{op}'; the journal is damaged")
            })?;
            let c = counts.entry((tbl, op)).or_default();
            c.0 += n;
            c.1 = c.1.max(last);
            Ok(())
        };
        let params = params![range.after, range.upto];
        if self.has_entry_list()? {
            for t in self.journal_tables()? {
                let first = &journal_parts(t.img, t.columns.len())[0].0;
                if !self.has_table(first)? {
                    continue;
                }
                let mut st = self.conn.prepare_cached(&format!(
                    "SELECT op, count(*), max(seq) FROM {} WHERE seq > ?1 AND seq <= ?2 GROUP BY op",
                    quote_ident(first)
                ))?;
                let rows = st.query_map(params, |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                for row in rows {
                    let (op, n, last) = row?;
                    add(t.tbl.clone(), op, n, last)?;
                }
            }
        } else {
            let mut st = self.conn.prepare(
                "SELECT t.tbl, j.op, count(*), max(j.seq) FROM _cutover_journal j
                 JOIN _cutover_journal_tables t USING (img)
                 WHERE j.seq > ?1 AND j.seq <= ?2 GROUP BY t.tbl, j.op",
            )?;
            let rows =
                st.query_map(params, |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
            for row in rows {
                let (tbl, op, n, last) = row?;
                add(tbl, op, n, last)?;
            }
        }
        Ok(counts
            .into_iter()
            .map(|((tbl, op), (entries, last))| JournalCount {
                tbl,
                op,
                entries,
                last,
            })
            .collect())
    }

    /// The rows of the journal's image tables, so that a row written there
    /// behind the list of entries is counted.
    fn journal_extent(&self) -> Result<Extent> {
        if !self.has_journal()? {
            return Ok(Extent::default());
        }
        let (entries, last) = if self.has_entry_list()? {
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
            (rows, max)
        } else {
            self.conn.query_row(
                "SELECT count(*), coalesce(max(seq), 0) FROM _cutover_journal",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
        };
        Ok(Extent { entries, last })
    }

    /// A page cut by its images' bytes too, its large values read only
    /// for the entries it keeps, each whole or as its digest.
    fn journal_run(&self, after: i64, upto: i64, shape: &RunShape<'_>) -> Result<Run> {
        let (entries, more) = self.page(after, upto, shape)?;
        Ok(Run { entries, more })
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
}

impl Sqlite {
    /// Every journaled table (and earlier column lists of the same table).
    pub(super) fn journal_tables(&self) -> Result<Vec<JournalTable>> {
        self.journal_tables_where("1", [])
    }
}

/// A journal entry as first read: its large values left in place until
/// the page is cut.
struct Read {
    seq: i64,
    img: i64,
    width: usize,
    op: Op,
    old: Option<Row>,
    new: Option<Row>,
    /// The large values left in place, `(after-image, column, text, bytes)`:
    /// NULL in `old` and `new` until read.
    pending: Vec<(bool, usize, bool, usize)>,
}

impl Read {
    fn size(&self) -> usize {
        let held: usize = [&self.old, &self.new]
            .into_iter()
            .flatten()
            .flatten()
            .map(|v| v.as_cell().size())
            .sum();
        held + self.pending.iter().map(|p| p.3).sum::<usize>()
    }

    /// Appends cells read under [`Sqlite::refusing_large`] to an image,
    /// from its column `first` on, noting the large ones left in place.
    fn take(&mut self, after: bool, first: usize, cells: impl IntoIterator<Item = Slot>) {
        let Read {
            old, new, pending, ..
        } = self;
        let Some(row) = (if after { new } else { old }) else {
            return;
        };
        for (i, c) in cells.into_iter().enumerate() {
            row.push(match c {
                Slot::Ready(v) => v,
                Slot::Large { text, len } => {
                    pending.push((after, first + i, text, len));
                    Value::Null
                }
            });
        }
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

    /// Entries with `after < seq <= upto` in `seq` order, read to `shape`,
    /// and whether more may follow before `upto`.
    ///
    /// Each journal table is read as one range of its primary key (at most
    /// `limit` rows), then the runs are merged by seq: a page costs a scan,
    /// not a look-up per entry. Only the tables that hold an entry of the
    /// page are read: the list of entries says which, whatever the number
    /// of tables. The runs are read refusing large values
    /// ([`Sqlite::refusing_large`]); those of the entries the page keeps
    /// are read last, one at a time.
    fn page(
        &self,
        after: i64,
        upto: i64,
        shape: &RunShape<'_>,
    ) -> Result<(Vec<JournalEntry>, bool)> {
        let limit = shape.limit;
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
        let mut runs: Vec<std::collections::VecDeque<Read>> = Vec::new();
        {
            let _refusing = self.refusing_large()?;
            for t in self.journal_tables_of(&imgs)? {
                let run = self.image_run(&t, after, upto, limit)?;
                if !run.is_empty() {
                    runs.push(run);
                }
            }
        }
        // The page ends with the entry whose images reach the budget.
        let merged = merge_runs(
            &mut runs,
            limit,
            shape.bytes,
            |e| e.seq,
            Read::size,
            |e| self.entry(e, shape),
        )?;
        let (mut out, bytes) = (merged.entries, merged.bytes);
        if bytes >= shape.bytes {
            return Ok((out, true));
        }
        // An entry listed but gone from its journal table (deleted behind
        // the triggers) is a gap, as a missing seq always was; the page is
        // filled from the entries listed after it, so that a short page
        // still means the end of the journal.
        if out.len() < limit
            && list.len() == limit
            && let Some(&(last, _)) = list.last()
        {
            let rest = RunShape {
                limit: limit - out.len(),
                bytes: shape.bytes - bytes,
                digest: shape.digest,
            };
            let (more, cut) = self.page(last, upto, &rest)?;
            out.extend(more);
            return Ok((out, cut));
        }
        let full = out.len() >= limit;
        Ok((out, full))
    }

    /// The entries of one journal table with `after < seq <= upto`, at most
    /// `limit`, in seq order, each large value left in place.
    fn image_run(
        &self,
        t: &JournalTable,
        after: i64,
        upto: i64,
        limit: usize,
    ) -> Result<std::collections::VecDeque<Read>> {
        let width = t.columns.len();
        let parts = journal_parts(t.img, width);
        let first = &parts[0];
        let n = first.1.len();
        let names: Vec<String> = std::iter::once("op".to_string())
            .chain(first.1.clone().map(|i| format!("o{i}")))
            .chain(first.1.clone().map(|i| format!("n{i}")))
            .collect();
        // The limit is written into the statement: bound as a parameter,
        // SQLite prepares the statement again at every page.
        let text = format!(
            "SELECT seq, op, {}, {} FROM {} WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT {limit}",
            prefixed("o", first.1.clone()),
            prefixed("n", first.1.clone()),
            quote_ident(&first.0)
        );
        let mut run = std::collections::VecDeque::new();
        let mut from = after;
        while run.len() < limit {
            let mut st = self.conn.prepare_cached(&text)?;
            let mut rows = st.query(params![from, upto])?;
            let stopped = loop {
                let r = match rows.next() {
                    Ok(Some(r)) => r,
                    Ok(None) => break false,
                    Err(e) if large::too_big(&e) => break true,
                    Err(e) => return Err(e.into()),
                };
                let seq: i64 = r.get(0)?;
                let op: String = r.get(1)?;
                let read = |from: usize| -> rusqlite::Result<Row> {
                    (0..n)
                        .map(|i| r.get_ref(from + i).map(|v| cell(v).to_value()))
                        .collect()
                };
                let (op, old, new) = match Op::parse(&op) {
                    Some(Op::Insert) => (Op::Insert, None, Some(read(2 + n)?)),
                    Some(Op::Delete) => (Op::Delete, Some(read(2)?), None),
                    Some(Op::Update) => (Op::Update, Some(read(2)?), Some(read(2 + n)?)),
                    None => bail!(
                        "journal entry seq {seq} (table '{}') has op '{op}'; the journal is damaged",
                        t.tbl
                    ),
                };
                let e = Read {
                    seq,
                    img: t.img,
                    width,
                    op,
                    old,
                    new,
                    pending: Vec::new(),
                };
                run.push_back(self.rest_of_entry(t, &parts, e)?);
                from = seq;
                if run.len() >= limit {
                    break false;
                }
            };
            drop(rows);
            drop(st);
            if !stopped {
                break;
            }
            // The next row holds a large value: read alone.
            let seq: i64 = self
                .conn
                .query_row(
                    &format!(
                        "SELECT seq FROM {} WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT 1",
                        quote_ident(&first.0)
                    ),
                    params![from, upto],
                    |r| r.get(0),
                )
                .context("a journal row refused as too large is not there")?;
            let mut cells = self
                .slots(&first.0, &names, seq)?
                .context("a journal row refused as too large is not there")?;
            let op = match cells.remove(0) {
                Slot::Ready(Value::Text(op)) => op,
                _ => bail!(
                    "journal entry seq {seq} (table '{}') has an op that is not text; the journal is damaged",
                    t.tbl
                ),
            };
            let (op, has_old, has_new) = match Op::parse(&op) {
                Some(Op::Insert) => (Op::Insert, false, true),
                Some(Op::Delete) => (Op::Delete, true, false),
                Some(Op::Update) => (Op::Update, true, true),
                None => bail!(
                    "journal entry seq {seq} (table '{}') has op '{op}'; the journal is damaged",
                    t.tbl
                ),
            };
            let mut e = Read {
                seq,
                img: t.img,
                width,
                op,
                old: has_old.then(Vec::new),
                new: has_new.then(Vec::new),
                pending: Vec::new(),
            };
            let new_cells = cells.split_off(n);
            e.take(false, 0, cells);
            e.take(true, 0, new_cells);
            run.push_back(self.rest_of_entry(t, &parts, e)?);
            from = seq;
        }
        Ok(run)
    }

    /// The rest of each image of an entry of a table wider than one part,
    /// from the other parts.
    fn rest_of_entry(
        &self,
        t: &JournalTable,
        parts: &[(String, std::ops::Range<usize>)],
        mut e: Read,
    ) -> Result<Read> {
        let seq = e.seq;
        for (part, range) in &parts[1..] {
            let names: Vec<String> = range
                .clone()
                .map(|i| format!("o{i}"))
                .chain(range.clone().map(|i| format!("n{i}")))
                .collect();
            let mut st = self.conn.prepare_cached(&format!(
                "SELECT {}, {} FROM {} WHERE seq = ?1",
                prefixed("o", range.clone()),
                prefixed("n", range.clone()),
                quote_ident(part)
            ))?;
            let read = st.query_row([seq], |m| {
                (0..names.len())
                    .map(|i| Ok(Slot::Ready(cell(m.get_ref(i)?).to_value())))
                    .collect::<rusqlite::Result<Vec<Slot>>>()
            });
            let mut cells = match read.optional() {
                Ok(Some(cells)) => cells,
                Ok(None) => bail!(
                    "journal entry seq {seq} (table '{}') has no row in {part}; the journal is damaged",
                    t.tbl
                ),
                Err(err) if large::too_big(&err) => {
                    drop(st);
                    self.slots(part, &names, seq)?.with_context(|| {
                        format!(
                            "journal entry seq {seq} (table '{}') has no row in {part}; the journal is damaged",
                            t.tbl
                        )
                    })?
                }
                Err(err) => return Err(err.into()),
            };
            let new_cells = cells.split_off(range.len());
            // Image columns are numbered from 1 across the parts.
            e.take(false, range.start - 1, cells);
            e.take(true, range.start - 1, new_cells);
        }
        Ok(e)
    }

    /// An entry of a page with its large values read, each whole or as its
    /// digest as `shape` says.
    fn entry(&self, mut e: Read, shape: &RunShape<'_>) -> Result<JournalEntry> {
        if !e.pending.is_empty() {
            let parts = journal_parts(e.img, e.width);
            for (after, i, text, len) in std::mem::take(&mut e.pending) {
                // Image column i (from 0) is `o{i+1}` or `n{i+1}` of the part
                // whose range holds it.
                let part = &parts[i / PART].0;
                let column = format!("{}{}", if after { "n" } else { "o" }, i + 1);
                let v = self.large_value(
                    part,
                    &column,
                    e.seq,
                    (text, len),
                    (shape.digest)(e.img, i, after),
                )?;
                if let Some(slot) = if after { &mut e.new } else { &mut e.old }
                    .as_mut()
                    .and_then(|row| row.get_mut(i))
                {
                    *slot = v;
                }
            }
        }
        Ok(JournalEntry {
            seq: e.seq,
            img: e.img,
            op: e.op,
            old: e.old,
            new: e.new,
        })
    }

    /// The journal's digest form, in order, a buffer at a time: every
    /// entry's seq, image and op, then each journal table in seq order,
    /// every column (op and both images) with its storage class.
    fn journal_bytes(&self, hash: &mut dyn FnMut(Vec<u8>)) -> Result<()> {
        use crate::value::CellSink;
        let mut buf: Vec<u8> = Vec::with_capacity(2 * DIGEST_BUFFER);
        fn flush(buf: &mut Vec<u8>, hash: &mut dyn FnMut(Vec<u8>)) {
            if buf.len() >= DIGEST_BUFFER {
                hash(std::mem::replace(
                    buf,
                    Vec::with_capacity(2 * DIGEST_BUFFER),
                ));
            }
        }
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
                flush(&mut buf, hash);
            }
            // The list of entries is the view's rows, hashed above. A large
            // value is hashed as it is read from the file, a chunk at a
            // time (a text stored in UTF-16 is read whole, as before).
            let refusing = match self.stores_utf8()? {
                true => Some(self.refusing_large()?),
                false => None,
            };
            for t in self.image_tables()? {
                buf.put(&(t.len() as u64).to_le_bytes());
                buf.put(t.as_bytes());
                let table = quote_ident(&t);
                let mut from: Option<i64> = None;
                loop {
                    let mut st = match from {
                        None => self
                            .conn
                            .prepare(&format!("SELECT rowid, * FROM {table} ORDER BY rowid"))?,
                        Some(_) => self.conn.prepare(&format!(
                            "SELECT rowid, * FROM {table} WHERE rowid > ?1 ORDER BY rowid"
                        ))?,
                    };
                    let names: Vec<String> =
                        st.column_names().skip(1).map(|c| c.to_string()).collect();
                    let width = st.column_count();
                    let mut rows = match from {
                        None => st.query([])?,
                        Some(f) => st.query([f])?,
                    };
                    let stopped = loop {
                        let r = match rows.next() {
                            Ok(Some(r)) => r,
                            Ok(None) => break false,
                            Err(e) if large::too_big(&e) => break true,
                            Err(e) => return Err(e.into()),
                        };
                        for i in 0..width {
                            crate::value::hash_cell(&mut buf, cell(r.get_ref(i)?));
                        }
                        from = Some(r.get(0)?);
                        flush(&mut buf, hash);
                    };
                    drop(rows);
                    drop(st);
                    if !stopped {
                        break;
                    }
                    // The next row holds a large value.
                    let rowid: i64 = self.conn.query_row(
                        &format!(
                            "SELECT rowid FROM {table} WHERE rowid > ?1 ORDER BY rowid LIMIT 1"
                        ),
                        [from.unwrap_or(i64::MIN)],
                        |r| r.get(0),
                    )?;
                    let slots = self
                        .slots(&t, &names, rowid)?
                        .context("a journal row refused as too large is not there")?;
                    crate::value::hash_cell(&mut buf, CellRef::Integer(rowid));
                    for (name, slot) in names.iter().zip(slots) {
                        match slot {
                            Slot::Ready(v) => crate::value::hash_cell(&mut buf, v.as_cell()),
                            Slot::Large { text, len } => {
                                buf.put(&[if text { 3 } else { 4 }]);
                                buf.put(&(len as u64).to_le_bytes());
                                hash(std::mem::take(&mut buf));
                                self.large_chunks(&t, name, rowid, text, &mut |b| {
                                    hash(b.to_vec())
                                })?;
                            }
                        }
                    }
                    from = Some(rowid);
                    flush(&mut buf, hash);
                }
            }
            drop(refusing);
        }
        hash(buf);
        Ok(())
    }
}
