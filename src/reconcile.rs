//! Reconcile: a streaming, key-ordered merge of the source's canonical view
//! (its rows forward-transformed) with the target's (its rows as stored).
//!
//! Each side is read on its own thread and handed over in chunks through a
//! bounded channel; the merge keeps counters, control totals and the first
//! `max_diffs` differences, so memory does not grow with the table.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, sync_channel};

use anyhow::{Result, anyhow, bail};
use serde::Serialize;
use serde_json::Value as Json;

use crate::db::{Db, Rows, RowsExt, TableSql};
use crate::progress::{self, Bar};
use crate::spec::{Spec, Table};
use crate::value::{Block, CellRef, Row, Value, key_json};

use crate::canonical::{Forwarded, Note, forward_row};

/// Rows per block handed from a reader thread to the merge (fewer when
/// rows are wide: a block is also cut at [`BLOCK_BYTES`]).
pub const BLOCK_ROWS: usize = 4096;
/// Blocks in flight per side, so memory is bounded whatever the table size.
/// Blocks this large, and this many of them, let a reader that shares a core
/// with the merge run on instead of waiting to be woken: with 4 blocks of
/// 1,024 rows a gate of 1M rows on two cores ran 20% slower.
pub const CHANNEL_BLOCKS: usize = 8;

/// What kind of difference a [`Diff`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffKind {
    /// Both sides hold the key; a column differs.
    Changed,
    /// The source holds the key; the target does not.
    Missing,
    /// The target holds a key the source does not.
    Extra,
    /// The source row cannot be carried across (bad value, failed check,
    /// duplicate key).
    Invalid,
    /// Accepted, value-equal, but not the text reverse would write back.
    NonCanonical,
}

/// One kept difference.
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub table: String,
    pub key: Json,
    pub kind: DiffKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Display forms, storage class visible (`'1250'` vs `1250`).
    #[serde(skip)]
    pub shown: (String, String),
}

impl Diff {
    pub fn new(
        table: &Table,
        kind: DiffKind,
        key: &[Value],
        column: Option<&str>,
        expected: Option<Value>,
        actual: Option<Value>,
        reason: Option<String>,
    ) -> Diff {
        Diff {
            table: table.name.clone(),
            key: key_json(key),
            kind,
            column: column.map(str::to_string),
            expected: expected.as_ref().map(Value::to_json),
            actual: actual.as_ref().map(Value::to_json),
            reason,
            shown: (
                expected.as_ref().map_or_else(String::new, Value::to_string),
                actual.as_ref().map_or_else(String::new, Value::to_string),
            ),
        }
    }

    /// The difference a [`Note`] on a source row stands for.
    pub fn from_note(table: &Table, key: &[Value], note: &Note) -> Diff {
        match note {
            Note::Invalid(column, value, reason) => Diff::new(
                table,
                DiffKind::Invalid,
                key,
                Some(column),
                None,
                Some(value.clone()),
                Some(reason.clone()),
            ),
            Note::NonCanonical(c, value, canonical) => Diff::new(
                table,
                DiffKind::NonCanonical,
                key,
                Some(&table.columns[*c].source),
                Some(canonical.clone()),
                Some(value.clone()),
                Some("value-equal but not canonical; replay would write the canonical text".into()),
            ),
        }
    }
}

/// The sum of one money column, per currency when the table names one.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Total {
    pub column: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    #[serde(serialize_with = "ser_i128")]
    pub source: i128,
    #[serde(serialize_with = "ser_i128")]
    pub target: i128,
}

fn ser_i128<S: serde::Serializer>(v: &i128, s: S) -> Result<S::Ok, S::Error> {
    // A JSON number where it fits, exact text where it does not.
    match i64::try_from(*v) {
        Ok(i) => s.serialize_i64(i),
        Err(_) => s.serialize_str(&v.to_string()),
    }
}

/// Per-table counts.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TableReport {
    pub name: String,
    pub source_rows: u64,
    pub target_rows: u64,
    pub matched: u64,
    pub changed: u64,
    pub missing: u64,
    pub extra: u64,
    pub invalid: u64,
    pub non_canonical: u64,
    pub totals: Vec<Total>,
}

impl TableReport {
    pub fn clean(&self) -> bool {
        self.changed == 0 && self.missing == 0 && self.extra == 0 && self.invalid == 0
    }
}

/// The result of reconciling every table of a spec.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Reconciliation {
    pub tables: Vec<TableReport>,
    pub diffs: Vec<Diff>,
    /// Differences found in all, of which `diffs` keeps the first few.
    pub diffs_found: u64,
    pub diffs_kept_max: usize,
    /// With [`reconcile_digesting`]: each target table's rows digest, as
    /// `Db::digest_rows` computes it (the fence compares them).
    #[serde(skip)]
    pub target_digests: Vec<(String, String)>,
    /// With the gate's digest mode: how each table was compared.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub modes: Vec<TableMode>,
}

/// How the gate's digest mode compared one table.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct TableMode {
    pub table: String,
    /// `digest`: by segment digests computed inside both databases;
    /// `stream`: every row streamed and merged.
    pub mode: String,
    /// Why a table was streamed instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Key ranges whose digests were compared, and those that differed and
    /// were streamed.
    pub segments: u64,
    pub segments_streamed: u64,
    /// Rows read from both databases into the merge.
    pub rows_streamed: u64,
}

impl Reconciliation {
    pub fn clean(&self) -> bool {
        self.tables.iter().all(TableReport::clean)
    }

    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.target_rows).sum()
    }

    /// Differences that fail the gate (non-canonical texts do not).
    pub fn diffs_found_blocking(&self) -> u64 {
        self.tables
            .iter()
            .map(|t| t.changed + t.missing + t.extra + t.invalid)
            .sum()
    }

    /// Counts a difference; builds it (keys, JSON, display text) only when
    /// it is one of the first few kept, so a table with millions of
    /// differences costs a counter per difference, not an allocation.
    pub(crate) fn keep(&mut self, d: impl FnOnce() -> Diff) {
        self.diffs_found += 1;
        if self.diffs.len() < self.diffs_kept_max {
            self.diffs.push(d());
        }
    }
}

/// The one-line summary the runbook and drill quote: `rows=3, total_cents=4000`.
pub fn summary(spec: &Spec, rec: &Reconciliation) -> String {
    let mut parts = vec![format!("rows={}", rec.rows())];
    for (t, r) in spec.tables.iter().zip(&rec.tables) {
        for tot in &r.totals {
            // `cents` reads as total_cents; a column already named
            // `total_cents` is not doubled.
            let base = if tot.column.starts_with("total") {
                tot.column.clone()
            } else {
                format!("total_{}", tot.column)
            };
            let name = match &tot.currency {
                Some(c) => format!("{base}[{c}]"),
                None => base,
            };
            let name = if spec.tables.len() > 1 {
                format!("{}.{name}", t.name)
            } else {
                name
            };
            parts.push(format!("{name}={}", tot.target));
        }
    }
    parts.push(format!("differences={}", rec.diffs_found_blocking()));
    parts.join(", ")
}

/// Reconciles every table of the spec. Both connections are used from a
/// reader thread each; a transaction open on either (the rehearsal's) is the
/// view that is read.
pub fn reconcile(
    spec: &Spec,
    source: &mut Db,
    target: &mut Db,
    max_diffs: usize,
) -> Result<Reconciliation> {
    reconcile_inner(spec, source, target, max_diffs, false)
}

/// A reconcile that also digests every target row as it reads it, so a
/// replay can check its fence at the end without reading the tables twice.
pub fn reconcile_digesting(
    spec: &Spec,
    source: &mut Db,
    target: &mut Db,
    max_diffs: usize,
) -> Result<Reconciliation> {
    reconcile_inner(spec, source, target, max_diffs, true)
}

fn reconcile_inner(
    spec: &Spec,
    source: &mut Db,
    target: &mut Db,
    max_diffs: usize,
    digest: bool,
) -> Result<Reconciliation> {
    let mut rec = Reconciliation {
        diffs_kept_max: max_diffs,
        ..Default::default()
    };
    for table in &spec.tables {
        let (report, d) = reconcile_table(
            table,
            source.engine_mut(),
            target.engine_mut(),
            &mut rec,
            digest,
        )?;
        rec.tables.push(report);
        if let Some(d) = d {
            rec.target_digests.push((table.target_table.clone(), d));
        }
    }
    Ok(rec)
}

/// Starts a thread that scans a table into blocks, maps each, and sends
/// them through a bounded channel.
pub(crate) fn reader<'scope, 'env, T: Send + 'scope>(
    db: &'scope mut Db,
    sql: TableSql,
    map: impl Fn(Block) -> T + Send + 'scope,
    scope: &'scope std::thread::Scope<'scope, 'env>,
) -> (
    Receiver<T>,
    std::thread::ScopedJoinHandle<'scope, Result<()>>,
) {
    reader_of(db.engine_mut(), sql, map, scope)
}

/// [`reader`] over any engine's [`Rows`].
pub(crate) fn reader_of<'scope, 'env, T: Send + 'scope, E: Rows + Send + ?Sized>(
    db: &'scope mut E,
    sql: TableSql,
    map: impl Fn(Block) -> T + Send + 'scope,
    scope: &'scope std::thread::Scope<'scope, 'env>,
) -> (
    Receiver<T>,
    std::thread::ScopedJoinHandle<'scope, Result<()>>,
) {
    scan_thread(
        move |sink: &mut dyn FnMut(Block) -> Result<bool>| {
            db.scan_into(&sql, None, BLOCK_ROWS, sink)
        },
        map,
        CHANNEL_BLOCKS,
        scope,
    )
}

/// The end of a reader thread: its own result, or an error naming `side`
/// if it panicked.
pub(crate) fn joined(
    reader: std::thread::ScopedJoinHandle<'_, Result<()>>,
    side: &str,
) -> Result<()> {
    reader
        .join()
        .map_err(|_| anyhow!("the {side} reader panicked"))?
}

/// Starts a thread that runs `scan` (a key-ordered read handing out
/// blocks), maps each block, and sends it through a channel of `capacity`
/// blocks.
pub(crate) fn scan_thread<'scope, 'env, T: Send + 'scope>(
    scan: impl FnOnce(&mut dyn FnMut(Block) -> Result<bool>) -> Result<()> + Send + 'scope,
    map: impl Fn(Block) -> T + Send + 'scope,
    capacity: usize,
    scope: &'scope std::thread::Scope<'scope, 'env>,
) -> (
    Receiver<T>,
    std::thread::ScopedJoinHandle<'scope, Result<()>>,
) {
    let (tx, rx) = sync_channel::<T>(capacity);
    let h = scope.spawn(move || {
        // The merge hung up: it failed, and its error is the one to report.
        scan(&mut |b| Ok(tx.send(map(b)).is_ok()))
    });
    (rx, h)
}

/// One side of the merge: the current block and the row in it.
pub(crate) struct Cursor<T> {
    rx: Receiver<T>,
    block: Option<T>,
    row: usize,
    /// The key of the last row of the previous block, to check key order
    /// across block boundaries.
    prev_last: Option<Row>,
    side: &'static str,
}

/// What a reader thread hands the merge: a block of rows, alone or with
/// what the reader knows of it.
pub(crate) trait HoldsBlock {
    fn block(&self) -> &Block;
}

impl HoldsBlock for Block {
    fn block(&self) -> &Block {
        self
    }
}

impl<T: HoldsBlock> Cursor<T> {
    pub(crate) fn new(rx: Receiver<T>, side: &'static str) -> Self {
        let mut c = Cursor {
            rx,
            block: None,
            row: 0,
            prev_last: None,
            side,
        };
        c.fill();
        c
    }

    fn fill(&mut self) {
        while self
            .block
            .as_ref()
            .is_none_or(|b| self.row >= b.block().rows())
        {
            match self.rx.recv() {
                Ok(b) => {
                    self.block = Some(b);
                    self.row = 0;
                }
                Err(_) => {
                    self.block = None;
                    return;
                }
            }
        }
    }

    pub(crate) fn current(&self) -> Option<(&T, usize)> {
        self.block.as_ref().map(|b| (b, self.row))
    }

    /// Moves past the rows whose key is below that of row `r` of `b`,
    /// handing each to `passed`; then how the current row's key stands
    /// against it (`Greater` once the rows are all passed).
    pub(crate) fn seek(
        &mut self,
        b: &Block,
        r: usize,
        k: usize,
        table: &str,
        mut passed: impl FnMut(&T, usize) -> Result<()>,
    ) -> Result<Ordering> {
        loop {
            let Some((tb, tr)) = self.current() else {
                return Ok(Ordering::Greater);
            };
            let o = tb.block().cmp_prefix(tr, b, r, k);
            if o != Ordering::Less {
                return Ok(o);
            }
            passed(tb, tr)?;
            self.advance(k, table)?;
        }
    }

    /// Moves to the next row, first checking that the keys strictly increase.
    pub(crate) fn advance(&mut self, k: usize, table: &str) -> Result<()> {
        let Some(b) = self.block.as_ref() else {
            return Ok(());
        };
        let rows = b.block();
        check_order(
            rows,
            self.row,
            self.prev_last.as_deref(),
            k,
            self.side,
            table,
        )?;
        self.row += 1;
        if self.row >= rows.rows() {
            self.prev_last = Some(rows.values(self.row - 1, k));
            self.fill();
        }
        Ok(())
    }
}

/// How the key of the row before `row` (in its block, or `prev_last`, the
/// last key of the block before) compares with `row`'s; `None` for the
/// first row of all.
#[inline]
pub(crate) fn order_after(
    rows: &Block,
    row: usize,
    prev_last: Option<&[Value]>,
    k: usize,
) -> Option<Ordering> {
    if row > 0 {
        Some(rows.cmp_prefix(row - 1, rows, row, k))
    } else {
        prev_last.map(|p| {
            (0..k)
                .map(|c| p[c].as_cell().sql_cmp(&rows.get(row, c)))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        })
    }
}

/// Keys must arrive strictly increasing in SQLite's order; a repeat is a
/// duplicate key, a step back means the engine ordered differently than we
/// compare (a non-binary collation on the key), and a merge would lie.
/// `prev_last` is the key of the row before the block's first.
#[inline]
fn check_order(
    rows: &Block,
    row: usize,
    prev_last: Option<&[Value]>,
    k: usize,
    side: &str,
    table: &str,
) -> Result<()> {
    match order_after(rows, row, prev_last, k) {
        Some(o) if o.is_ge() => Err(out_of_order(rows, row, k, o, side, table)),
        _ => Ok(()),
    }
}

/// The error for a key that did not strictly increase; kept out of line so
/// the per-row check stays small.
#[cold]
#[inline(never)]
fn out_of_order(
    rows: &Block,
    row: usize,
    k: usize,
    o: Ordering,
    side: &str,
    table: &str,
) -> anyhow::Error {
    let key = crate::value::display_key(&rows.values(row, k));
    if o.is_eq() {
        // A damaged page can read as a key twice, as well as out of order.
        return anyhow::Error::new(crate::db::MaybeDamage(format!(
            "{side} table '{table}' holds two rows with key {key}; the spec's key must be unique (add a unique index, or fix the key in the spec)"
        )));
    }
    anyhow::Error::new(crate::db::MaybeDamage(format!(
        "{side} table '{table}' returned key {key} out of order: the key column sorts with a collation other than BINARY; reconcile needs binary key order"
    )))
}

/// What a pass over the source found for one table.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SourceScan {
    pub rows: u64,
    pub invalid: u64,
    pub non_canonical: u64,
}

/// Reads a source table once, forward-transforming every row and checking
/// key order and uniqueness; hands each note (an invalid or non-canonical
/// row) to `note` with the row's key. This is `check`, and load's
/// validation before its first write.
///
/// A row that forwards without a note round-trips exactly: canonical text
/// is by definition what reverse writes back (the property tests of
/// `transform` pin that), and a map is bijective. So only non-canonical rows
/// need their reverse rendered.
/// `shown`: a progress bar for the scan (none for one in the background).
/// The table is read on its own thread, beside the transform.
pub fn scan_source(
    table: &Table,
    source: &mut Db,
    shown: bool,
    mut note: impl FnMut(Row, &Note) -> Result<bool>,
) -> Result<SourceScan> {
    // Only the checked and transformed columns are looked into; the large
    // values of the others are read as digests, never copied.
    let sql = source.source_sql(table).digesting(table.compared_only());
    let k = table.key_len;
    let mut scan = SourceScan::default();
    let mut prev_last: Option<Row> = None;
    let bar = match shown {
        true if progress::visible() => {
            Bar::new(&table.name, Some(source.rows().count_rows(&sql)? as u64))
        }
        true => Bar::new(&table.name, None),
        false => Bar::hidden(),
    };
    std::thread::scope(|scope| -> Result<()> {
        let (rx, reading) = reader(source, sql, |b| b, scope);
        let walked = (|| -> Result<()> {
            while let Ok(raw) = rx.recv() {
                bar.add(raw.rows() as u64);
                let mut fwd = vec![CellRef::Null; table.columns.len()];
                for r in 0..raw.rows() {
                    check_order(
                        &raw,
                        r,
                        prev_last.as_deref(),
                        k,
                        "source",
                        &table.source_table,
                    )?;
                    scan.rows += 1;
                    let n = match forward_row(table, &raw, r, &mut fwd) {
                        Forwarded::Ok => continue,
                        Forwarded::NonCanonical(n) => {
                            scan.non_canonical += 1;
                            n
                        }
                        Forwarded::Invalid(n) => {
                            scan.invalid += 1;
                            n
                        }
                    };
                    if !note(raw.values(r, k), &n)? {
                        return Ok(());
                    }
                }
                if raw.rows() > 0 {
                    prev_last = Some(raw.values(raw.rows() - 1, k));
                }
            }
            Ok(())
        })();
        // The reader stops when its channel closes.
        drop(rx);
        let read = joined(reading, "source");
        walked?;
        read
    })?;
    Ok(scan)
}

/// The statements of a spec table as the source holds it, on any engine.
pub(crate) fn source_sql_of<E: Rows + ?Sized>(db: &E, t: &Table) -> TableSql {
    db.table_sql(&t.source_table, &t.source_names(), t.key_len, None)
}

/// The statements of a spec table as the target holds it, on any engine.
pub(crate) fn target_sql_of<E: Rows + ?Sized>(db: &E, t: &Table) -> TableSql {
    db.table_sql(&t.target_table, &t.target_names(), t.key_len, None)
}

/// What the merge of one table has found so far: its counts and control
/// totals. Every row the merge meets goes through [`Tally::visit`]; the
/// digest mode adds whole segments that matched with [`Tally::matched`].
pub(crate) struct Tally<'t> {
    table: &'t Table,
    money: Vec<usize>,
    report: TableReport,
    totals: BTreeMap<(usize, Option<String>), (i128, i128)>,
    // Without a currency column the totals are a fixed array, updated
    // without a map look-up per row.
    plain: Vec<(i128, i128)>,
}

impl<'t> Tally<'t> {
    pub(crate) fn new(table: &'t Table) -> Tally<'t> {
        let money = table.money_columns();
        Tally {
            table,
            plain: vec![(0, 0); money.len()],
            money,
            report: TableReport {
                name: table.name.clone(),
                ..Default::default()
            },
            totals: BTreeMap::new(),
        }
    }

    /// Counts one row the merge met, keeping its difference in `rec`.
    pub(crate) fn visit(&mut self, rec: &mut Reconciliation, met: Met<'_, '_>) {
        let table = self.table;
        let k = table.key_len;
        match met {
            Met::TargetOnly(tb, tr) => {
                self.report.target_rows += 1;
                add_target_totals(
                    table,
                    &self.money,
                    tb,
                    tr,
                    &mut self.totals,
                    &mut self.plain,
                );
                self.report.extra += 1;
                rec.keep(|| {
                    Diff::new(
                        table,
                        DiffKind::Extra,
                        &tb.values(tr, k),
                        None,
                        None,
                        None,
                        None,
                    )
                });
            }
            Met::Source {
                block: sb,
                row: sr,
                fwd,
                forwarded,
                target,
            } => {
                self.report.source_rows += 1;
                let (invalid, note) = match forwarded {
                    Forwarded::Ok => (false, None),
                    Forwarded::NonCanonical(n) => (false, Some(n)),
                    Forwarded::Invalid(n) => (true, Some(n)),
                };
                if let Some(note) = note {
                    match note {
                        Note::Invalid(..) => self.report.invalid += 1,
                        Note::NonCanonical(..) => self.report.non_canonical += 1,
                    }
                    rec.keep(|| Diff::from_note(table, &sb.values(sr, k), &note));
                }
                if !invalid {
                    let cur = table.currency.map(|c| currency_text(fwd[c]));
                    for (i, &m) in self.money.iter().enumerate() {
                        if let CellRef::Integer(v) = fwd[m] {
                            match &cur {
                                Some(c) => {
                                    self.totals.entry((m, Some(c.clone()))).or_default().0 +=
                                        i128::from(v)
                                }
                                None => self.plain[i].0 += i128::from(v),
                            }
                        }
                    }
                }
                match target {
                    Some((tb, tr)) => {
                        self.report.target_rows += 1;
                        add_target_totals(
                            table,
                            &self.money,
                            tb,
                            tr,
                            &mut self.totals,
                            &mut self.plain,
                        );
                        if !invalid {
                            let mut same = true;
                            for (c, &e) in fwd.iter().enumerate().skip(k) {
                                let a = tb.get(tr, c);
                                if !cells_equal(e, a) {
                                    same = false;
                                    rec.keep(|| {
                                        Diff::new(
                                            table,
                                            DiffKind::Changed,
                                            &sb.values(sr, k),
                                            Some(&table.columns[c].target),
                                            Some(e.to_value()),
                                            Some(a.to_value()),
                                            None,
                                        )
                                    });
                                }
                            }
                            if same {
                                self.report.matched += 1;
                            } else {
                                self.report.changed += 1;
                            }
                        }
                    }
                    None if !invalid => {
                        self.report.missing += 1;
                        rec.keep(|| {
                            Diff::new(
                                table,
                                DiffKind::Missing,
                                &sb.values(sr, k),
                                None,
                                None,
                                None,
                                None,
                            )
                        });
                    }
                    None => {}
                }
            }
        }
    }

    /// Counts `rows` rows that both sides hold alike (a segment whose
    /// digests matched): every one matched, none with a note.
    pub(crate) fn matched(&mut self, rows: u64) {
        self.report.source_rows += rows;
        self.report.target_rows += rows;
        self.report.matched += rows;
    }

    /// Adds a sum of money column `m` (a column index, one of the table's
    /// money columns) to one side's total, under the currency cell of the
    /// rows summed (`None` without a currency column). Only called for sums
    /// of at least one integer value, as the merge adds only those.
    pub(crate) fn add_sum(
        &mut self,
        m: usize,
        currency: Option<CellRef<'_>>,
        source: bool,
        sum: i128,
    ) {
        let Some(i) = self.money.iter().position(|&c| c == m) else {
            return;
        };
        let slot = match (self.table.currency, currency) {
            (Some(_), Some(c)) => self.totals.entry((m, Some(currency_text(c)))).or_default(),
            _ => &mut self.plain[i],
        };
        if source {
            slot.0 += sum;
        } else {
            slot.1 += sum;
        }
    }

    /// The table's report, with its totals.
    pub(crate) fn finish(mut self) -> TableReport {
        let table = self.table;
        for (i, &m) in self.money.iter().enumerate() {
            if table.currency.is_none() || !self.totals.keys().any(|(c, _)| *c == m) {
                let e = self.totals.entry((m, None)).or_default();
                e.0 += self.plain[i].0;
                e.1 += self.plain[i].1;
            }
        }
        self.report.totals = self
            .totals
            .into_iter()
            .map(|((c, currency), (s, t))| Total {
                column: table.columns[c].target.clone(),
                currency,
                source: s,
                target: t,
            })
            .collect();
        self.report
    }
}

/// Streams one table whole through the merge.
pub(crate) fn reconcile_table<S, T>(
    table: &Table,
    source: &mut S,
    target: &mut T,
    rec: &mut Reconciliation,
    digest: bool,
) -> Result<(TableReport, Option<String>)>
where
    S: Rows + Send + ?Sized,
    T: Rows + Send + ?Sized,
{
    use sha2::Digest;
    let hasher = std::sync::Mutex::new(sha2::Sha256::new());
    // Columns carried as they are only need comparing: their large values
    // are read as digests on both sides, so that neither reader holds one
    // twice. Not when the target's rows are digested for the fence, which
    // hashes every value whole.
    let compared: Vec<usize> = match digest {
        true => Vec::new(),
        false => table.compared_only().collect(),
    };
    let s_sql = source_sql_of(source, table).digesting(compared.iter().copied());
    let t_sql = target_sql_of(target, table).digesting(compared);
    let mut tally = Tally::new(table);

    let total = if progress::visible() {
        Some(source.count_rows(&s_sql)? as u64)
    } else {
        None
    };
    let bar = Bar::new(&table.name, total);
    std::thread::scope(|scope| -> Result<()> {
        // Both readers only read; the transform runs here, in the merge,
        // which balances the work across cores (the source's SQLite scan is
        // the heaviest part) and never copies a forwarded row.
        let bar = &bar;
        let (s_rx, s_h) = reader_of(
            source,
            s_sql,
            move |b| {
                bar.add(b.rows() as u64);
                b
            },
            scope,
        );
        let hasher = &hasher;
        let (t_rx, t_h) = reader_of(
            target,
            t_sql,
            move |b| {
                if digest && let Ok(mut h) = hasher.lock() {
                    b.hash_into(&mut h);
                }
                b
            },
            scope,
        );
        let mut t: Cursor<Block> = Cursor::new(t_rx, "target");
        merge_join(table, &s_rx, &mut t, |met| {
            tally.visit(rec, met);
            Ok(())
        })?;
        drop(t);
        joined(s_h, "source")?;
        joined(t_h, "target")
    })?;

    let report = tally.finish();
    let d = match (digest, hasher.into_inner()) {
        (true, Ok(h)) => Some(hex::encode(h.finalize())),
        (true, Err(_)) => bail!(
            "the target reader of table '{}' failed while digesting",
            table.name
        ),
        (false, _) => None,
    };
    Ok((report, d))
}

/// A row the merge met, in key order.
pub(crate) enum Met<'b, 'f> {
    /// A target row whose key the source does not hold.
    TargetOnly(&'b Block, usize),
    /// A source row, forwarded to the target's form (`fwd`, complete unless
    /// `forwarded` says it is invalid), with the target row of the same key
    /// when there is one.
    Source {
        block: &'b Block,
        row: usize,
        fwd: &'f [CellRef<'b>],
        forwarded: Forwarded,
        target: Option<(&'b Block, usize)>,
    },
}

/// The one key-ordered merge of a spec table's source against its target:
/// source blocks arrive on `s_rx`, the target moves under `t`. Both sides'
/// key order is checked; every row of both is handed to `visit` once, in
/// key order (a target row the source lacks before the source row after
/// it). The gate (and so replay's closing reconcile) walks its tables
/// through it; sync's survey, which counts a repeated source key rather than
/// stopping at it, moves its own target [`Cursor`] with [`Cursor::seek`].
pub(crate) fn merge_join(
    table: &Table,
    s_rx: &Receiver<Block>,
    t: &mut Cursor<Block>,
    mut visit: impl FnMut(Met<'_, '_>) -> Result<()>,
) -> Result<()> {
    let k = table.key_len;
    let width = table.columns.len();
    let mut s_prev_last: Option<Row> = None;
    // The source is walked block by block (each owned here while its rows
    // are merged), so the forwarded cells of a row borrow from its block
    // with no copy; the target moves under a cursor.
    while let Ok(sb) = s_rx.recv() {
        let mut fwd = vec![CellRef::Null; width];
        for sr in 0..sb.rows() {
            check_order(
                &sb,
                sr,
                s_prev_last.as_deref(),
                k,
                "source",
                &table.source_table,
            )?;
            // Where the target's current row stands against this source
            // row, once the target rows before it are passed.
            let order = t.seek(&sb, sr, k, &table.target_table, |tb, tr| {
                visit(Met::TargetOnly(tb, tr))
            })?;
            let forwarded = forward_row(table, &sb, sr, &mut fwd);
            let target = match order {
                Ordering::Equal => t.current(),
                _ => None,
            };
            let matched = target.is_some();
            visit(Met::Source {
                block: &sb,
                row: sr,
                fwd: &fwd,
                forwarded,
                target,
            })?;
            if matched {
                t.advance(k, &table.target_table)?;
            }
        }
        if sb.rows() > 0 {
            s_prev_last = Some(sb.values(sb.rows() - 1, k));
        }
    }
    // Whatever the target holds past the last source key.
    while let Some((tb, tr)) = t.current() {
        visit(Met::TargetOnly(tb, tr))?;
        t.advance(k, &table.target_table)?;
    }
    Ok(())
}

/// Equality with storage class: the text `'1250'` is not the integer `1250`.
pub(crate) fn cells_equal(a: CellRef<'_>, b: CellRef<'_>) -> bool {
    match (a, b) {
        (CellRef::Real(x), CellRef::Real(y)) => x == y || (x.is_nan() && y.is_nan()),
        _ => a == b,
    }
}

fn add_target_totals(
    table: &Table,
    money: &[usize],
    b: &Block,
    r: usize,
    totals: &mut BTreeMap<(usize, Option<String>), (i128, i128)>,
    plain: &mut [(i128, i128)],
) {
    let cur = table.currency.map(|c| currency_text(b.get(r, c)));
    for (i, &m) in money.iter().enumerate() {
        if let CellRef::Integer(v) = b.get(r, m) {
            match &cur {
                Some(c) => totals.entry((m, Some(c.clone()))).or_default().1 += i128::from(v),
                None => plain[i].1 += i128::from(v),
            }
        }
    }
}

/// The currency label a money total is kept under.
fn currency_text(v: CellRef<'_>) -> String {
    match v {
        CellRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        other => other.to_value().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Access;
    use crate::spec::Side;
    use crate::value::BLOCK_BYTES;

    /// Source and target of `n` orders in which every row differs (cents
    /// off by one) and a tenth of the source is missing from the target.
    fn fixture(dir: &std::path::Path, n: i64) -> Result<Spec> {
        let src: String = (1..=n)
            .map(|i| format!("({i}, '{}.{:02}', 'A'),", i / 100, i % 100))
            .collect();
        let tgt: String = (1..=n)
            .filter(|i| i % 10 != 0)
            .map(|i| format!("({i}, {}, 'active'),", i + 1))
            .collect();
        Db::create(
            &dir.join("source.db"),
            &format!(
                "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT, status TEXT); INSERT INTO orders VALUES {};",
                src.trim_end_matches(',')
            ),
        )?;
        Db::create(
            &dir.join("target.db"),
            &format!(
                "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER, status TEXT); INSERT INTO orders VALUES {};",
                tgt.trim_end_matches(',')
            ),
        )?;
        std::fs::write(
            dir.join("spec.toml"),
            include_str!("../fixtures/orders/spec.toml"),
        )?;
        crate::spec::load(&dir.join("spec.toml"))
    }

    fn run(n: i64, max_diffs: usize) -> Result<Reconciliation> {
        let dir = tempfile::tempdir()?;
        let spec = fixture(dir.path(), n)?;
        let mut s = Db::open(&spec.source, Access::Read, Side::Source)?;
        let mut t = Db::open(&spec.target, Access::Read, Side::Target)?;
        reconcile(&spec, &mut s, &mut t, max_diffs)
    }

    // Memory must not grow with the table: every difference is counted, but
    // only the first `max_diffs` are kept, at 2,000 rows as at 40,000.
    #[test]
    fn kept_differences_are_bounded_while_all_are_counted() -> Result<()> {
        for n in [2_000, 40_000] {
            let rec = run(n, 5)?;
            let t = &rec.tables[0];
            assert_eq!(t.source_rows, n as u64);
            assert_eq!(t.missing, (n / 10) as u64);
            assert_eq!(t.changed, (n - n / 10) as u64);
            assert_eq!(rec.diffs_found, n as u64, "every difference is counted");
            assert_eq!(rec.diffs.len(), 5, "only the first few are kept");
        }
        Ok(())
    }

    // The other structures are fixed: totals per money column (and per
    // currency), and at most CHANNEL_BLOCKS blocks of BLOCK_BYTES in flight
    // per side.
    #[test]
    fn totals_are_one_entry_per_money_column_whatever_the_rows() -> Result<()> {
        let small = run(1_000, 0)?;
        let large = run(30_000, 0)?;
        assert_eq!(small.tables[0].totals.len(), 1);
        assert_eq!(large.tables[0].totals.len(), 1);
        assert!(large.diffs.is_empty());
        const { assert!(CHANNEL_BLOCKS * BLOCK_BYTES <= 4 << 20) };
        Ok(())
    }
}
