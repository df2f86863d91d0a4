//! Change capture, reading side: the journal's entries read back from its
//! image tables as the values a scan of the table reads (the engine's own
//! decoding of each column type), pages of them in seq order, counts and
//! the digest.

use std::collections::VecDeque;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use tokio_postgres::types::ToSql;

use super::scan::Raw;
use super::types::{self, Kind};
use super::{Postgres, quote_ident};
use crate::db::journal_merge::merge_runs;
use crate::db::{
    Extent, JournalCount, JournalEntry, JournalLog, JournalTable, Op, Run, RunShape, SeqRange,
};
use crate::value::{Row, Value, hash_cell};

/// The journal table of image `img`.
pub(super) fn image_table(img: i64) -> String {
    format!("_cutover_journal_{img}")
}

/// How many entries the digest reads at a time.
const DIGEST_PAGE: i64 = 10_000;

/// One journal table as it is read: how each image column decodes.
struct Image {
    img: i64,
    tbl: String,
    name: String,
    /// The kind of `o1..oN` (the same as `n1..nN`).
    kinds: Vec<Kind>,
    /// `format_type` of every column of the journal table, in order.
    types: Vec<String>,
    /// `seq, xid::text, op, o1, …, n1, …` as the engine reads each.
    select: String,
}

/// One row of a journal table, both images whole whatever the op.
struct Stored {
    seq: i64,
    xid: String,
    op: String,
    old: Row,
    new: Row,
}

impl Stored {
    /// The entry, with the images its op has.
    fn entry(self, im: &Image) -> Result<JournalEntry> {
        let (op, old, new) = match Op::parse(&self.op) {
            Some(Op::Insert) => (Op::Insert, None, Some(self.new)),
            Some(Op::Delete) => (Op::Delete, Some(self.old), None),
            Some(Op::Update) => (Op::Update, Some(self.old), Some(self.new)),
            None => bail!(
                "journal entry seq {} (table '{}') has op '{}'; the journal is damaged",
                self.seq,
                im.tbl,
                self.op
            ),
        };
        Ok(JournalEntry {
            seq: self.seq,
            img: im.img,
            op,
            old,
            new,
        })
    }
}

impl Postgres {
    /// How journal table `t` is read.
    fn image(&self, t: &JournalTable) -> Result<Image> {
        let name = image_table(t.img);
        let cols = self.columns_of(&name)?;
        let width = t.columns.len();
        let mut kinds = Vec::with_capacity(width);
        for i in 1..=width {
            let Some(c) = cols.iter().find(|c| c.name == format!("o{i}")) else {
                bail!(
                    "journal table {name} of table '{}' has no column o{i}; the journal is damaged",
                    t.tbl
                );
            };
            kinds.push(c.kind);
        }
        let images = ["o", "n"]
            .iter()
            .flat_map(|p| {
                kinds
                    .iter()
                    .enumerate()
                    .map(move |(i, k)| k.select(&quote_ident(&format!("{p}{}", i + 1))))
            })
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Image {
            img: t.img,
            tbl: t.tbl.clone(),
            select: format!(
                "SELECT seq, xid::text, op, {images} FROM {}",
                self.qualified(&name)
            ),
            name,
            kinds,
            types: cols.into_iter().map(|c| c.type_name).collect(),
        })
    }

    /// Every journal table, in image order.
    fn images(&self) -> Result<Vec<Image>> {
        self.journal_tables()?
            .iter()
            .map(|t| self.image(t))
            .collect()
    }

    /// The rows of a journal table after `WHERE`/`ORDER BY` text `rest`.
    fn read_stored(
        &self,
        im: &Image,
        rest: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Stored>> {
        let text = format!("{} {rest}", im.select);
        let rows = {
            let mut client = self.client()?;
            let st = self.prepare(&mut client, &text)?;
            client
                .query(&st, params)
                .with_context(|| format!("reading journal table {} in {}", im.name, self.shown))?
        };
        let n = im.kinds.len();
        let mut scratch = String::new();
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let mut image = |from: usize| -> Result<Row> {
                let mut row = Vec::with_capacity(n);
                for (i, &kind) in im.kinds.iter().enumerate() {
                    let Raw(raw) = r.try_get(from + i)?;
                    row.push(match raw {
                        None => Value::Null,
                        Some(b) => types::decode(kind, b, &mut scratch, |c| c.to_value())
                            .with_context(|| format!("journal table {}", im.name))?,
                    });
                }
                Ok(row)
            };
            let (old, new) = (image(3)?, image(3 + n)?);
            out.push(Stored {
                seq: r.try_get(0)?,
                xid: r.try_get(1)?,
                op: r.try_get(2)?,
                old,
                new,
            });
        }
        Ok(out)
    }

    /// The entries of image `img` this transaction journaled after seq
    /// `after`, in seq order (the journal's proof).
    pub(super) fn entries_of_this_transaction(
        &self,
        img: i64,
        after: i64,
    ) -> Result<Vec<JournalEntry>> {
        let Some(t) = self.journal_tables()?.into_iter().find(|t| t.img == img) else {
            bail!("journal image {img} is not recorded");
        };
        let im = self.image(&t)?;
        self.read_stored(
            &im,
            "WHERE seq > $1 AND xid = pg_current_xact_id() ORDER BY seq",
            &[&after],
        )?
        .into_iter()
        .map(|s| s.entry(&im))
        .collect()
    }
}

impl JournalLog for Postgres {
    /// Each journal table counted per op in the range.
    fn journal_counts(&self, range: SeqRange) -> Result<Vec<JournalCount>> {
        if !self.has_journal_view()? {
            return Ok(Vec::new());
        }
        let mut counts: std::collections::BTreeMap<(String, Op), (i64, i64)> = Default::default();
        for t in self.journal_tables()? {
            let table = image_table(t.img);
            if !self.has_table(&table)? {
                continue;
            }
            let rows = self.client()?.query(
                format!(
                    "SELECT op, count(*), max(seq) FROM {} WHERE seq > $1 AND seq <= $2 GROUP BY op",
                    self.qualified(&table)
                )
                .as_str(),
                &[&range.after, &range.upto],
            )?;
            for r in &rows {
                let text: String = r.get(0);
                let op = Op::parse(&text).with_context(|| {
                    format!(
                        "journal table {table} of table '{}' holds an entry of op '{text}'; the journal is damaged",
                        t.tbl
                    )
                })?;
                let c = counts.entry((t.tbl.clone(), op)).or_default();
                c.0 += r.get::<_, i64>(1);
                c.1 = c.1.max(r.get::<_, i64>(2));
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

    fn journal_extent(&self) -> Result<Extent> {
        if !self.has_journal_view()? {
            return Ok(Extent::default());
        }
        let r = self.client()?.query_one(
            "SELECT count(*), coalesce(max(seq), 0) FROM _cutover_journal",
            &[],
        )?;
        Ok(Extent {
            entries: r.get(0),
            last: r.get(1),
        })
    }

    /// Each journal table read as one range of its primary key (at most
    /// `shape.limit` rows), the runs merged by seq. Large values are read
    /// whole: the page is cut by entries only.
    fn journal_run(&self, after: i64, upto: i64, shape: &RunShape<'_>) -> Result<Run> {
        let limit = shape.limit;
        let limit_n = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut runs: Vec<VecDeque<JournalEntry>> = Vec::new();
        for im in self.images()? {
            let run = self
                .read_stored(
                    &im,
                    "WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3",
                    &[&after, &upto, &limit_n],
                )?
                .into_iter()
                .map(|s| s.entry(&im))
                .collect::<Result<VecDeque<_>>>()?;
            if !run.is_empty() {
                runs.push(run);
            }
        }
        let entries = merge_runs(&mut runs, limit, usize::MAX, |e| e.seq, |_| 0, Ok)?.entries;
        let more = entries.len() >= limit;
        Ok(Run { entries, more })
    }

    /// SHA-256 over the journal: each journal table in image order (its
    /// name and column types), then every row of it in seq order — seq,
    /// transaction id, op and both images whatever the op, each value with
    /// its kind as a scan reads it.
    fn journal_digest(&self) -> Result<String> {
        let mut h = Sha256::new();
        let text = |h: &mut Sha256, s: &str| {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        };
        for im in self.images()? {
            h.update(im.img.to_le_bytes());
            text(&mut h, &im.name);
            for t in &im.types {
                text(&mut h, t);
            }
            let mut after = i64::MIN;
            loop {
                let page = self.read_stored(
                    &im,
                    "WHERE seq > $1 ORDER BY seq LIMIT $2",
                    &[&after, &DIGEST_PAGE],
                )?;
                for s in &page {
                    h.update(s.seq.to_le_bytes());
                    text(&mut h, &s.xid);
                    text(&mut h, &s.op);
                    for v in s.old.iter().chain(&s.new) {
                        hash_cell(&mut h, v.as_cell());
                    }
                }
                match page.last() {
                    Some(s) if page.len() as i64 == DIGEST_PAGE => after = s.seq,
                    _ => break,
                }
            }
        }
        Ok(hex::encode(h.finalize()))
    }
}

impl Postgres {
    /// Every journaled table (and earlier column lists of the same table).
    pub(super) fn journal_tables(&self) -> Result<Vec<JournalTable>> {
        if !self.has_table("_cutover_journal_tables")? {
            return Ok(Vec::new());
        }
        let rows = self.client()?.query(
            "SELECT img, tbl, target_table, columns FROM _cutover_journal_tables ORDER BY img",
            &[],
        )?;
        rows.iter()
            .map(|r| {
                Ok(JournalTable {
                    img: r.try_get(0)?,
                    tbl: r.try_get(1)?,
                    target_table: r.try_get(2)?,
                    columns: serde_json::from_str(r.try_get::<_, &str>(3)?)?,
                })
            })
            .collect()
    }

    /// Whether the view over every journal table exists.
    fn has_journal_view(&self) -> Result<bool> {
        self.has_table("_cutover_journal")
    }
}
