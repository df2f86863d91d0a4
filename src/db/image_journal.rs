//! The journal read back from its image tables, written once for the
//! engines that keep one table per journaled column list
//! (`_cutover_journal_<img>`: `seq`, who wrote the entry, `op`, and both
//! images `o1…oN`, `n1…nN` whole whatever the op) and read it with SQL:
//! PostgreSQL and MySQL. Counts and extent go through the control store;
//! pages, the proof's entries and the digest through [`ImageTables`], where
//! an engine says how an image column decodes and runs the one query.
//! SQLite keeps large values apart and cuts pages by bytes: it reads its
//! own (`src/db/sqlite/journal_log.rs`).

use std::collections::{BTreeMap, VecDeque};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use super::control::identity::JournalIdentity;
use super::control::{Control, Kind as ParamKind, P, int, text};
use super::journal_merge::merge_runs;
use super::{
    Extent, JournalCount, JournalEntry, JournalLog, JournalTable, Op, Run, RunShape, SeqRange,
};
use crate::value::{Row, hash_cell};

/// The image table of image `img`.
pub(crate) fn image_table(img: i64) -> String {
    format!("_cutover_journal_{img}")
}

/// How many entries the digest reads at a time.
const DIGEST_PAGE: i64 = 10_000;

/// Who wrote an entry, as the engine's journal trigger records it.
pub(crate) enum Writer {
    /// The transaction's id, as text (PostgreSQL's `xid`).
    Transaction(String),
    /// The connection's id (MySQL's `CONNECTION_ID()`).
    Connection(u64),
}

impl Writer {
    fn hash(&self, h: &mut Sha256) {
        match self {
            Writer::Transaction(t) => hash_text(h, t),
            Writer::Connection(c) => h.update(c.to_le_bytes()),
        }
    }
}

/// One row of an image table, both images whole whatever the op.
pub(crate) struct Stored {
    pub seq: i64,
    pub writer: Writer,
    pub op: String,
    pub old: Row,
    pub new: Row,
}

impl Stored {
    /// The entry, with the images its op has.
    fn entry<K>(self, im: &Image<K>) -> Result<JournalEntry> {
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

/// One column of an image table as the engine's catalogue reads it.
pub(crate) struct ImageColumn<K> {
    pub name: String,
    /// How the engine decodes it (an error: a type it cannot read).
    pub kind: Result<K>,
    /// Its type as the digest covers it.
    pub type_name: String,
}

/// One image table as it is read.
pub(crate) struct Image<K> {
    pub img: i64,
    /// The spec's name of the journaled table.
    pub tbl: String,
    /// The image table.
    pub name: String,
    /// How `o1…oN` decode (as `n1…nN` do).
    pub kinds: Vec<K>,
    /// The type of every column of the image table, in order.
    pub types: Vec<String>,
}

/// Which rows of an image table a read takes, always in seq order.
#[derive(Clone, Copy)]
enum Which {
    /// `after < seq <= upto`, at most `limit`.
    Range { after: i64, upto: i64, limit: i64 },
    /// `after < seq`, at most `limit`.
    From { after: i64, limit: i64 },
    /// `after < seq`, written by this transaction (or connection).
    Mine { after: i64 },
}

/// What an engine supplies to have its image tables read.
pub(crate) trait ImageTables {
    /// How an image column decodes.
    type Kind;
    /// The control store on this connection.
    fn image_control(&self) -> Control<'_>;
    /// Every column of image table `name`, in order.
    fn image_columns(&self, name: &str) -> Result<Vec<ImageColumn<Self::Kind>>>;
    /// The condition that holds for an entry this transaction (or
    /// connection) wrote.
    fn written_here(&self) -> &'static str;
    /// Runs `SELECT seq, <writer>, op, o1…, n1… FROM <image> <rest>`, `rest`
    /// written with the control store's placeholders for `params`, and
    /// decodes each row.
    fn read_image(&self, im: &Image<Self::Kind>, rest: &str, params: &[i64])
    -> Result<Vec<Stored>>;
}

fn hash_text(h: &mut Sha256, s: &str) {
    h.update((s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

/// The images the journal records whose tables are there, in image order.
fn present<D: ImageTables + ?Sized>(db: &D) -> Result<Vec<JournalTable>> {
    let control = db.image_control();
    let mut out = Vec::new();
    for t in JournalIdentity(control).images()? {
        if control.has(&image_table(t.img))? {
            out.push(t);
        }
    }
    Ok(out)
}

/// How image `t`'s table is read.
fn image<D: ImageTables + ?Sized>(db: &D, t: &JournalTable) -> Result<Image<D::Kind>> {
    let name = image_table(t.img);
    let mut cols = db.image_columns(&name)?;
    let types = cols.iter().map(|c| c.type_name.clone()).collect();
    let mut kinds = Vec::with_capacity(t.columns.len());
    for i in 1..=t.columns.len() {
        let want = format!("o{i}");
        let Some(at) = cols.iter().position(|c| c.name == want) else {
            bail!(
                "journal table {name} of table '{}' has no column o{i}; the journal is damaged",
                t.tbl
            );
        };
        let kind = std::mem::replace(&mut cols[at].kind, Err(anyhow::anyhow!("taken")));
        kinds.push(kind.with_context(|| format!("journal table {name} of '{}'", t.tbl))?);
    }
    Ok(Image {
        img: t.img,
        tbl: t.tbl.clone(),
        name,
        kinds,
        types,
    })
}

/// The rows of `im` that `which` takes.
fn read<D: ImageTables + ?Sized>(db: &D, im: &Image<D::Kind>, which: Which) -> Result<Vec<Stored>> {
    let param = db.image_control().dialect().param;
    let p = |n| param(n, ParamKind::Integer);
    let (rest, params) = match which {
        Which::Range { after, upto, limit } => (
            format!(
                "WHERE seq > {} AND seq <= {} ORDER BY seq LIMIT {}",
                p(1),
                p(2),
                p(3)
            ),
            vec![after, upto, limit],
        ),
        Which::From { after, limit } => (
            format!("WHERE seq > {} ORDER BY seq LIMIT {}", p(1), p(2)),
            vec![after, limit],
        ),
        Which::Mine { after } => (
            format!(
                "WHERE seq > {} AND {} ORDER BY seq",
                p(1),
                db.written_here()
            ),
            vec![after],
        ),
    };
    db.read_image(im, &rest, &params)
        .with_context(|| format!("reading journal table {}", im.name))
}

/// Each image table counted per op in the range: its rows, so that a row
/// written there behind the journal's back is counted.
pub(crate) fn counts<D: ImageTables + ?Sized>(
    db: &D,
    range: SeqRange,
) -> Result<Vec<JournalCount>> {
    let control = db.image_control();
    let mut counts: BTreeMap<(String, Op), (i64, i64)> = BTreeMap::new();
    for t in present(db)? {
        let table = image_table(t.img);
        let rows = control.query(
            &format!(
                "SELECT op, count(*), max(seq) FROM {{{{schema}}}}.{table} WHERE seq > :after AND seq <= :upto GROUP BY op"
            ),
            &[("after", P::Int(range.after)), ("upto", P::Int(range.upto))],
        )?;
        for r in &rows {
            let op_text = text(r, 0)?;
            let op = Op::parse(&op_text).with_context(|| {
                format!(
                    "journal table {table} of table '{}' holds an entry of op '{op_text}'; the journal is damaged",
                    t.tbl
                )
            })?;
            let c = counts.entry((t.tbl.clone(), op)).or_default();
            c.0 += int(r, 1)?;
            c.1 = c.1.max(int(r, 2)?);
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
pub(crate) fn extent<D: ImageTables + ?Sized>(db: &D) -> Result<Extent> {
    let control = db.image_control();
    let mut extent = Extent::default();
    for t in present(db)? {
        let row = control.one(
            &format!(
                "SELECT count(*), coalesce(max(seq), 0) FROM {{{{schema}}}}.{}",
                image_table(t.img)
            ),
            &[],
        )?;
        if let Some(r) = row {
            extent.entries += int(&r, 0)?;
            extent.last = extent.last.max(int(&r, 1)?);
        }
    }
    Ok(extent)
}

/// Each image table read as one range of its primary key (at most
/// `shape.limit` rows), the runs merged by seq. Large values are read
/// whole: the page is cut by entries only.
pub(crate) fn run<D: ImageTables + ?Sized>(
    db: &D,
    after: i64,
    upto: i64,
    shape: &RunShape<'_>,
) -> Result<Run> {
    let limit = shape.limit;
    let limit_n = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut runs: Vec<VecDeque<JournalEntry>> = Vec::new();
    for t in present(db)? {
        let im = image(db, &t)?;
        let which = Which::Range {
            after,
            upto,
            limit: limit_n,
        };
        let run = read(db, &im, which)?
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

/// The entries of image `img` this transaction (or connection) journaled
/// after seq `after`, in seq order: the journal's proof.
pub(crate) fn written_here<D: ImageTables + ?Sized>(
    db: &D,
    img: i64,
    after: i64,
) -> Result<Vec<JournalEntry>> {
    let images = JournalIdentity(db.image_control()).images()?;
    let Some(t) = images.into_iter().find(|t| t.img == img) else {
        bail!("journal image {img} is not recorded");
    };
    let im = image(db, &t)?;
    read(db, &im, Which::Mine { after })?
        .into_iter()
        .map(|s| s.entry(&im))
        .collect()
}

/// SHA-256 over the journal: each image table in image order (its name and
/// column types), then every row of it in seq order — seq, who wrote it,
/// op and both images whatever the op, each value with its kind as a scan
/// reads it.
pub(crate) fn digest<D: ImageTables + ?Sized>(db: &D) -> Result<String> {
    let mut h = Sha256::new();
    for t in present(db)? {
        let im = image(db, &t)?;
        h.update(im.img.to_le_bytes());
        hash_text(&mut h, &im.name);
        for t in &im.types {
            hash_text(&mut h, t);
        }
        let mut after = i64::MIN;
        loop {
            let which = Which::From {
                after,
                limit: DIGEST_PAGE,
            };
            let page = read(db, &im, which)?;
            for s in &page {
                h.update(s.seq.to_le_bytes());
                s.writer.hash(&mut h);
                hash_text(&mut h, &s.op);
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

/// An engine that keeps its journal in image tables reads it back here:
/// it writes no [`JournalLog`] of its own.
impl<D: ImageTables> JournalLog for D {
    fn journal_counts(&self, range: SeqRange) -> Result<Vec<JournalCount>> {
        counts(self, range)
    }

    fn journal_extent(&self) -> Result<Extent> {
        extent(self)
    }

    fn journal_run(&self, after: i64, upto: i64, shape: &RunShape<'_>) -> Result<Run> {
        run(self, after, upto, shape)
    }

    fn journal_digest(&self) -> Result<String> {
        digest(self)
    }
}
