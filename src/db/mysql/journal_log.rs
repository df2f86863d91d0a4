//! [`JournalLog`] on MySQL and MariaDB: the journal's entries read back
//! from its image tables ([`super::capture`]) as the values a scan of the
//! table reads — each image column decoded by the engine's own
//! [`types::decode`] for its type (`LONGTEXT` reads as a `VARCHAR` does,
//! `LONGBLOB` as a `BINARY`: the same kinds) — pages of them in seq order,
//! counts and the digest.

use std::collections::VecDeque;

use anyhow::{Context, Result, bail};
use mysql::Value as My;
use mysql::prelude::Queryable;
use sha2::{Digest, Sha256};

use super::types::{self, Kind};
use super::{MySql, quote_ident};
use crate::db::journal_merge::merge_runs;
use crate::db::{
    Extent, JournalCount, JournalEntry, JournalLog, JournalTable, Op, Run, RunShape, SeqRange,
};
use crate::value::{Row, hash_cell};

/// The image table of image `img`.
pub(super) fn image_table(img: i64) -> String {
    format!("_cutover_journal_{img}")
}

/// How many entries the digest reads at a time.
const DIGEST_PAGE: i64 = 10_000;

/// One image table as it is read: how each image column decodes.
struct Image {
    img: i64,
    tbl: String,
    name: String,
    /// The kind of `o1..oN` (the same as `n1..nN`).
    kinds: Vec<Kind>,
    /// `COLUMN_TYPE` (with character set and collation) of every column of
    /// the image table, in order.
    types: Vec<String>,
    /// `SELECT seq, conn, op, o1, …, n1, … FROM image`.
    select: String,
}

/// One row of an image table, both images whole whatever the op.
struct Stored {
    seq: i64,
    conn: u64,
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

/// An integer column of a journal row.
fn integer(v: Option<&My>, what: &str) -> Result<i64> {
    match v {
        Some(My::Int(i)) => Ok(*i),
        Some(My::UInt(u)) => Ok(i64::try_from(*u)?),
        Some(My::Bytes(b)) => Ok(std::str::from_utf8(b)?.parse()?),
        other => bail!(
            "the journal's {what} is {}",
            other.map_or_else(|| "missing".to_string(), |v| v.as_sql(true))
        ),
    }
}

impl MySql {
    /// How image table `t` is read.
    fn image(&self, t: &JournalTable) -> Result<Image> {
        let name = image_table(t.img);
        let cols = self.columns(&name)?;
        let width = t.columns.len();
        let mut kinds = Vec::with_capacity(width);
        for i in 1..=width {
            let Some(c) = cols.iter().find(|c| c.name == format!("o{i}")) else {
                bail!(
                    "journal table {name} of table '{}' has no column o{i}; the journal is damaged",
                    t.tbl
                );
            };
            kinds
                .push(Kind::of(c).with_context(|| format!("journal table {name} of '{}'", t.tbl))?);
        }
        let images = ["o", "n"]
            .iter()
            .flat_map(|p| (1..=width).map(move |i| quote_ident(&format!("{p}{i}"))))
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Image {
            img: t.img,
            tbl: t.tbl.clone(),
            select: format!(
                "SELECT seq, conn, op, {images} FROM {}",
                self.qualified(&name)
            ),
            name,
            kinds,
            types: cols.iter().map(super::capture::image_type).collect(),
        })
    }

    /// The rows of an image table after `WHERE`/`ORDER BY` text `rest`.
    fn read_stored(&self, im: &Image, rest: &str, params: Vec<My>) -> Result<Vec<Stored>> {
        let text = format!("{} {rest}", im.select);
        let rows: Vec<mysql::Row> = self
            .conn()?
            .exec(&text, params)
            .map_err(|e| self.failed(&format!("reading journal table {}", im.name), &e))?;
        let n = im.kinds.len();
        let mut scratch = String::new();
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let mut image = |from: usize| -> Result<Row> {
                let mut row = Vec::with_capacity(n);
                for (i, kind) in im.kinds.iter().enumerate() {
                    let v = r.as_ref(from + i).unwrap_or(&My::NULL);
                    row.push(
                        types::decode(kind, v, &mut scratch, |c| c.to_value()).map_err(|why| {
                            anyhow::anyhow!(
                                "journal table {} of table '{}', column o/n{}: {why}",
                                im.name,
                                im.tbl,
                                i + 1
                            )
                        })?,
                    );
                }
                Ok(row)
            };
            let (old, new) = (image(3)?, image(3 + n)?);
            let op = match r.as_ref(2) {
                Some(My::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
                other => bail!(
                    "journal table {}: op {}",
                    im.name,
                    other.map_or_else(|| "missing".to_string(), |v| v.as_sql(true))
                ),
            };
            out.push(Stored {
                seq: integer(r.as_ref(0), "seq")?,
                conn: integer(r.as_ref(1), "connection")? as u64,
                op,
                old,
                new,
            });
        }
        Ok(out)
    }

    /// The entries of image `img` this connection journaled after seq
    /// `after`, in seq order (the journal's proof, inside its transaction).
    pub(super) fn entries_of_this_connection(
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
            "WHERE seq > ? AND conn = CONNECTION_ID() ORDER BY seq",
            vec![after.into()],
        )?
        .into_iter()
        .map(|s| s.entry(&im))
        .collect()
    }

    /// Every journaled table (and earlier column lists of the same table).
    pub(super) fn journal_tables(&self) -> Result<Vec<JournalTable>> {
        if !self.has_table("_cutover_journal_tables")? {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, String, String, String)> = self
            .conn()?
            .query(format!(
                "SELECT img, tbl, target_table, columns FROM {} ORDER BY img",
                self.qualified("_cutover_journal_tables")
            ))
            .map_err(|e| self.failed("reading the journal's images", &e))?;
        rows.into_iter()
            .map(|(img, tbl, target_table, columns)| {
                Ok(JournalTable {
                    img,
                    tbl,
                    target_table,
                    columns: serde_json::from_str(&columns)?,
                })
            })
            .collect()
    }

    /// The image tables that exist, with their journaled tables.
    fn present_images(&self) -> Result<Vec<JournalTable>> {
        let mut out = Vec::new();
        for t in self.journal_tables()? {
            if self.has_table(&image_table(t.img))? {
                out.push(t);
            }
        }
        Ok(out)
    }
}

impl JournalLog for MySql {
    /// Each image table counted per op in the range.
    fn journal_counts(&self, range: SeqRange) -> Result<Vec<JournalCount>> {
        let mut counts: std::collections::BTreeMap<(String, Op), (i64, i64)> = Default::default();
        for t in self.present_images()? {
            let table = image_table(t.img);
            let rows: Vec<(Vec<u8>, i64, i64)> = self
                .conn()?
                .exec(
                    format!(
                        "SELECT op, COUNT(*), MAX(seq) FROM {} WHERE seq > ? AND seq <= ? GROUP BY op",
                        self.qualified(&table)
                    ),
                    (range.after, range.upto),
                )
                .map_err(|e| self.failed(&format!("counting journal table {table}"), &e))?;
            for (op, n, last) in rows {
                let text = String::from_utf8_lossy(&op).into_owned();
                let op = Op::parse(&text).with_context(|| {
                    format!(
                        "journal table {table} of table '{}' holds an entry of op '{text}'; the journal is damaged",
                        t.tbl
                    )
                })?;
                let c = counts.entry((t.tbl.clone(), op)).or_default();
                c.0 += n;
                c.1 = c.1.max(last);
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

    /// Every image table counted, and the largest seq among them.
    fn journal_extent(&self) -> Result<Extent> {
        let mut extent = Extent::default();
        for t in self.present_images()? {
            let table = image_table(t.img);
            let row: Option<(i64, i64)> = self
                .conn()?
                .query_first(format!(
                    "SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM {}",
                    self.qualified(&table)
                ))
                .map_err(|e| self.failed(&format!("counting journal table {table}"), &e))?;
            let (n, last) = row.unwrap_or((0, 0));
            extent.entries += n;
            extent.last = extent.last.max(last);
        }
        Ok(extent)
    }

    /// Each image table read as one range of its primary key (at most
    /// `shape.limit` rows), the runs merged by seq. Large values are read
    /// whole: the page is cut by entries only.
    fn journal_run(&self, after: i64, upto: i64, shape: &RunShape<'_>) -> Result<Run> {
        let limit = shape.limit;
        let limit_n = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut runs: Vec<VecDeque<JournalEntry>> = Vec::new();
        for t in self.present_images()? {
            let im = self.image(&t)?;
            let run = self
                .read_stored(
                    &im,
                    "WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
                    vec![after.into(), upto.into(), limit_n.into()],
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

    /// SHA-256 over the journal: each image table in image order (its name
    /// and column types), then every row of it in seq order — seq, the
    /// connection that wrote it, op and both images whatever the op, each
    /// value with its kind as a scan reads it.
    fn journal_digest(&self) -> Result<String> {
        let mut h = Sha256::new();
        let text = |h: &mut Sha256, s: &str| {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        };
        for t in self.present_images()? {
            let im = self.image(&t)?;
            h.update(im.img.to_le_bytes());
            text(&mut h, &im.name);
            for t in &im.types {
                text(&mut h, t);
            }
            let mut after = i64::MIN;
            loop {
                let page = self.read_stored(
                    &im,
                    "WHERE seq > ? ORDER BY seq LIMIT ?",
                    vec![after.into(), DIGEST_PAGE.into()],
                )?;
                for s in &page {
                    h.update(s.seq.to_le_bytes());
                    h.update(s.conn.to_le_bytes());
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
