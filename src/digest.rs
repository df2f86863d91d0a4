//! The gate's digest mode: when both databases can compute digests
//! ([`crate::db::Digests`]), each table is split into key ranges whose
//! canonical rows are counted, hashed and summed inside each database; a
//! range whose digests, counts and sums agree (and whose source rows carry
//! no note) is counted as matched without a row crossing the network. A
//! range that differs is split again, down to [`LEAF_ROWS`] rows, and then
//! streamed through the merge ([`crate::reconcile`]) for that range only,
//! in key order, so the counts, differences, totals and verdict are the
//! streaming gate's. A table the engines cannot digest exactly is streamed
//! whole, and the report says why; so is every table between two engines
//! (PostgreSQL and MySQL hash with different functions).

use anyhow::{Result, anyhow, bail};

use crate::db::{
    CellForm, ColumnForm, Count, Db, Digests, KeyRange, Rows, SegmentDigest, TableForm, TableSql,
};
use crate::reconcile::{
    self, BLOCK_ROWS, CHANNEL_BLOCKS, Cursor, Reconciliation, TableMode, Tally, merge_join,
    scan_thread, source_sql_of, target_sql_of,
};
use crate::spec::{Spec, Table};
use crate::transform::Transform;
use crate::value::{Block, key_cmp};

/// Key ranges a table is first split into, at least, per side.
pub const TOP_PARTS: usize = 16;
/// Rows per first key range of a large table.
pub const SEGMENT_ROWS: u64 = 2048;
/// Key ranges a table is first split into, at most (all digested in one
/// pass over the table).
pub const MAX_TOP_PARTS: usize = 8192;
/// Ranges a differing range is split into.
pub const FANOUT: usize = 16;
/// A differing range of at most this many rows (on either side) is streamed.
pub const LEAF_ROWS: u64 = 256;
/// Splits deeper than this stream the range whatever its size.
const MAX_DEPTH: usize = 64;

/// How the gate compares the two databases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every row streamed and merged.
    Stream,
    /// Digests per key range inside both databases; rows only where they differ.
    Digest,
    /// Digest when both databases can compute digests, else stream.
    Auto,
}

/// Reconciles every table of the spec in `mode`. `Digest` with a database
/// that cannot compute digests is refused, naming it.
pub fn reconcile(
    spec: &Spec,
    source: &mut Db,
    target: &mut Db,
    max_diffs: usize,
    mode: Mode,
) -> Result<Reconciliation> {
    let can = (
        source.rows().digests().is_some(),
        target.rows().digests().is_some(),
    );
    if mode == Mode::Digest && can != (true, true) {
        let side = if can.0 {
            ("target", target.location().to_string())
        } else {
            ("source", source.location().to_string())
        };
        bail!(
            "gate --mode digest needs both databases to compute digests (PostgreSQL, MySQL); the {} {} cannot: use --mode stream (or auto)",
            side.0,
            side.1
        );
    }
    if mode == Mode::Stream || can != (true, true) {
        return reconcile::reconcile(spec, source, target, max_diffs);
    }
    // Each engine hashes with its own functions: digests of two engines
    // never agree, so the tables are streamed, and the report says why.
    let (a, b) = (source.engine().name, target.engine().name);
    if a != b {
        let mut rec = reconcile::reconcile(spec, source, target, max_diffs)?;
        rec.modes = rec
            .tables
            .iter()
            .map(|t| TableMode {
                table: t.name.clone(),
                mode: "stream".into(),
                reason: Some(format!(
                    "{a} and {b} hash rows with different functions, so their digests cannot be compared"
                )),
                rows_streamed: t.source_rows + t.target_rows,
                ..Default::default()
            })
            .collect();
        return Ok(rec);
    }
    // Digest mode asks each side many questions: each side answers them all
    // from one snapshot, as a streaming scan does.
    source.on_one_snapshot(|source| {
        target.on_one_snapshot(|target| {
            reconcile_engines(
                spec,
                source.engine_mut(),
                target.engine_mut(),
                max_diffs,
                Mode::Digest,
            )
        })
    })
}

/// [`reconcile`] over two engines, however they were opened.
pub fn reconcile_engines<S, T>(
    spec: &Spec,
    source: &mut S,
    target: &mut T,
    max_diffs: usize,
    mode: Mode,
) -> Result<Reconciliation>
where
    S: Rows + Send + ?Sized,
    T: Rows + Send + ?Sized,
{
    let digest = match mode {
        Mode::Stream => false,
        Mode::Digest | Mode::Auto => {
            let can = source.digests().is_some() && target.digests().is_some();
            if !can && mode == Mode::Digest {
                bail!(
                    "gate --mode digest needs both databases to compute digests (PostgreSQL, MySQL); use --mode stream (or auto)"
                );
            }
            can
        }
    };
    let mut rec = Reconciliation {
        diffs_kept_max: max_diffs,
        ..Default::default()
    };
    for table in &spec.tables {
        if digest {
            let (report, mode) = digest_table(table, source, target, &mut rec)?;
            rec.tables.push(report);
            rec.modes.push(mode);
        } else {
            let (report, _) = reconcile::reconcile_table(table, source, target, &mut rec, false)?;
            rec.tables.push(report);
        }
    }
    Ok(rec)
}

/// The source's canonical form of a table as SQL can compute it, or why not.
pub fn source_form(table: &Table) -> Result<TableForm, String> {
    let columns = table
        .columns
        .iter()
        .map(|c| {
            if let Some(p) = &c.checks.pattern {
                return Err(format!(
                    "column '{}' has the pattern check {}, which only cutover runs",
                    c.source,
                    p.as_str()
                ));
            }
            let form = match &c.transform {
                Transform::Copy => CellForm::Copy,
                Transform::DecimalToMinor { scale, .. } => CellForm::DecimalToMinor(*scale),
                Transform::Map {
                    integers: Some(_), ..
                } => {
                    return Err(format!(
                        "column '{}' maps integer codes, which only the streaming comparison carries",
                        c.source
                    ));
                }
                Transform::Map { forward, .. } => CellForm::Map(
                    forward
                        .iter()
                        .map(|(a, b)| (a.clone(), b.clone()))
                        .collect(),
                ),
                Transform::Constant(v) => CellForm::Constant(v.clone()),
                Transform::SetToArray(_) => {
                    return Err(format!(
                        "column '{}' turns a SET into an array, which only the streaming comparison carries",
                        c.source
                    ));
                }
            };
            Ok(ColumnForm {
                form,
                integer: c.checks.integer,
                min: c.checks.min,
                values: c
                    .checks
                    .values
                    .as_ref()
                    .map(|v| v.iter().cloned().collect()),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(TableForm {
        columns,
        money: table.money_columns(),
        currency: table.currency,
    })
}

/// The target's form: its values as stored.
pub fn target_form(table: &Table) -> TableForm {
    let copy = ColumnForm {
        form: CellForm::Copy,
        integer: false,
        min: None,
        values: None,
    };
    TableForm {
        columns: vec![copy; table.columns.len()],
        money: table.money_columns(),
        currency: table.currency,
    }
}

fn engine(r: Option<&dyn Digests>) -> Result<&dyn Digests> {
    r.ok_or_else(|| anyhow!("the engine lost its digests"))
}

/// Runs `f` on the source and `g` on the target at once, each on its own
/// connection.
fn both<S, T, A, B>(
    source: &mut S,
    target: &mut T,
    f: impl FnOnce(&dyn Digests) -> Result<A> + Send,
    g: impl FnOnce(&dyn Digests) -> Result<B> + Send,
) -> Result<(A, B)>
where
    S: Rows + Send + ?Sized,
    T: Rows + Send + ?Sized,
    A: Send,
    B: Send,
{
    std::thread::scope(|scope| {
        let h = scope.spawn(move || f(engine(source.digests())?));
        let b = g(engine(target.digests())?);
        let a = h.join().map_err(|_| anyhow!("a digest query panicked"))?;
        Ok((a?, b?))
    })
}

/// A range still to compare: its depth and both sides' digests of it.
type Pending = (KeyRange, usize, SegmentDigest, SegmentDigest);

fn differs(s: &SegmentDigest, t: &SegmentDigest) -> bool {
    s.rows != t.rows || s.digest != t.digest || s.notes > 0 || s.money != t.money
}

/// One table in digest mode.
fn digest_table<S, T>(
    table: &Table,
    source: &mut S,
    target: &mut T,
    rec: &mut Reconciliation,
) -> Result<(crate::reconcile::TableReport, TableMode)>
where
    S: Rows + Send + ?Sized,
    T: Rows + Send + ?Sized,
{
    let s_sql = source_sql_of(source, table);
    let t_sql = target_sql_of(target, table);
    let t_form = target_form(table);
    let mut mode = TableMode {
        table: table.name.clone(),
        mode: "digest".into(),
        ..Default::default()
    };
    let refusal = match source_form(table) {
        Err(why) => Err(why),
        Ok(s_form) => {
            let (a, b) = both(
                source,
                target,
                |d| d.digest_refusal(&s_sql, &s_form),
                |d| d.digest_refusal(&t_sql, &t_form),
            )?;
            match a.or(b) {
                Some(why) => Err(why),
                None => Ok(s_form),
            }
        }
    };
    // The first ranges, split at keys of both sides so that each side's
    // keys are known to be keys of the other's types before any is counted.
    let top = refusal.and_then(|s_form| {
        top_ranges(table, source, target, &s_sql, &t_sql, &s_form, &t_form)
            .map(|r| (s_form, r))
            .map_err(|e| format!("{e:#}"))
    });
    let (s_form, top) = match top {
        Ok(t) => t,
        Err(why) => {
            let (report, _) = reconcile::reconcile_table(table, source, target, rec, false)?;
            mode.mode = "stream".into();
            mode.reason = Some(format!("digests cannot be computed for it: {why}"));
            mode.rows_streamed = report.source_rows + report.target_rows;
            return Ok((report, mode));
        }
    };
    // Differences scattered through the table make most first ranges
    // differ; bisecting them would read the table again several times over
    // in small queries, so the table is streamed once instead.
    let differing = top.iter().filter(|(_, s, t)| differs(s, t)).count();
    if differing * 2 > top.len() {
        let (report, _) = reconcile::reconcile_table(table, source, target, rec, false)?;
        mode.mode = "stream".into();
        mode.reason = Some(format!(
            "{differing} of its {} first key ranges differ, so streaming it reads less than splitting them",
            top.len()
        ));
        mode.segments = top.len() as u64;
        mode.rows_streamed = report.source_rows + report.target_rows;
        return Ok((report, mode));
    }
    let mut tally = Tally::new(table);
    // Depth first, in key order, so differences are kept as the merge
    // would meet them.
    let mut todo: Vec<Pending> = top
        .into_iter()
        .rev()
        .map(|(r, s, t)| (r, 0, s, t))
        .collect();
    while let Some((range, depth, s, t)) = todo.pop() {
        mode.segments += 1;
        if !differs(&s, &t) {
            tally.matched(s.rows);
            add_money(&mut tally, table, &s, true);
            add_money(&mut tally, table, &t, false);
            continue;
        }
        let most = s.rows.max(t.rows);
        let split = if most > LEAF_ROWS && depth < MAX_DEPTH {
            let (a, b) = both(
                source,
                target,
                |d| match s.rows >= t.rows {
                    true => d.split_keys(&s_sql, &range, FANOUT),
                    false => Ok(Vec::new()),
                },
                |d| match s.rows < t.rows {
                    true => d.split_keys(&t_sql, &range, FANOUT),
                    false => Ok(Vec::new()),
                },
            )?;
            if a.is_empty() { b } else { a }
        } else {
            Vec::new()
        };
        if split.is_empty() {
            mode.segments_streamed += 1;
            mode.rows_streamed += stream_range(
                table, source, target, &s_sql, &t_sql, &range, &mut tally, rec,
            )?;
            continue;
        }
        let (a, b) = both(
            source,
            target,
            |d| d.digest_ranges(&s_sql, &s_form, &range, &split),
            |d| d.digest_ranges(&t_sql, &t_form, &range, &split),
        )?;
        let parts = ranges_between(&range, split).into_iter().zip(a).zip(b);
        for ((r, s), t) in parts.rev() {
            todo.push((r, depth + 1, s, t));
        }
    }
    Ok((tally.finish(), mode))
}

/// `range` cut at `keys` (in key order, inside it).
fn ranges_between(range: &KeyRange, keys: Vec<crate::value::Row>) -> Vec<KeyRange> {
    let mut out = Vec::with_capacity(keys.len() + 1);
    let mut from = range.from.clone();
    for k in keys {
        out.push(KeyRange {
            from,
            before: Some(k.clone()),
        });
        from = Some(k);
    }
    out.push(KeyRange {
        from,
        before: range.before.clone(),
    });
    out
}

/// The first ranges of a table with their digests, cut at split keys of
/// the larger side (about [`SEGMENT_ROWS`] rows each), all digested in one
/// pass on each side.
#[allow(clippy::too_many_arguments, reason = "both sides, statement and form")]
fn top_ranges<S, T>(
    table: &Table,
    source: &mut S,
    target: &mut T,
    s_sql: &TableSql,
    t_sql: &TableSql,
    s_form: &TableForm,
    t_form: &TableForm,
) -> Result<Vec<(KeyRange, SegmentDigest, SegmentDigest)>>
where
    S: Rows + Send + ?Sized,
    T: Rows + Send + ?Sized,
{
    let all = KeyRange::default();
    // The servers' statistics, one quick question each.
    let a = source.row_count(s_sql, Count::Estimate)?.max(0) as u64;
    let b = target.row_count(t_sql, Count::Estimate)?.max(0) as u64;
    let parts = usize::try_from(a.max(b) / SEGMENT_ROWS)
        .unwrap_or(MAX_TOP_PARTS)
        .clamp(TOP_PARTS, MAX_TOP_PARTS);
    // The larger side is cut; the other is cut at the same keys.
    let (keys, more) = both(
        source,
        target,
        |d| match a >= b {
            true => d.split_keys(s_sql, &all, parts),
            false => Ok(Vec::new()),
        },
        |d| match a < b {
            true => d.split_keys(t_sql, &all, parts),
            false => Ok(Vec::new()),
        },
    )?;
    let keys = if keys.is_empty() { more } else { keys };
    debug_assert!(keys.is_sorted_by(|a, b| key_cmp(a, b).is_lt()));
    debug_assert!(keys.iter().all(|k| k.len() == table.key_len));
    let (a, b) = both(
        source,
        target,
        |d| d.digest_ranges(s_sql, s_form, &all, &keys),
        |d| d.digest_ranges(t_sql, t_form, &all, &keys),
    )?;
    Ok(ranges_between(&all, keys)
        .into_iter()
        .zip(a)
        .zip(b)
        .map(|((r, s), t)| (r, s, t))
        .collect())
}

/// Adds a matched range's money sums to one side's totals.
fn add_money(tally: &mut Tally<'_>, table: &Table, seg: &SegmentDigest, source: bool) {
    let money = table.money_columns();
    for g in &seg.money {
        for (j, &(count, sum)) in g.sums.iter().enumerate() {
            if count > 0 {
                let cur = table.currency.map(|_| g.currency.as_cell());
                tally.add_sum(money[j], cur, source, sum);
            }
        }
    }
}

/// Streams the rows of one key range of both sides through the merge;
/// returns how many rows were read.
#[allow(clippy::too_many_arguments, reason = "both sides of one range")]
fn stream_range<S, T>(
    table: &Table,
    source: &mut S,
    target: &mut T,
    s_sql: &TableSql,
    t_sql: &TableSql,
    range: &KeyRange,
    tally: &mut Tally<'_>,
    rec: &mut Reconciliation,
) -> Result<u64>
where
    S: Rows + Send + ?Sized,
    T: Rows + Send + ?Sized,
{
    use std::sync::atomic::{AtomicU64, Ordering};
    let read = AtomicU64::new(0);
    std::thread::scope(|scope| -> Result<()> {
        let read = &read;
        let count = move |b: Block| {
            read.fetch_add(b.rows() as u64, Ordering::Relaxed);
            b
        };
        let scan =
            |db: &dyn Digests, sql: &TableSql, sink: &mut dyn FnMut(Block) -> Result<bool>| {
                db.scan_range(sql, range, BLOCK_ROWS, sink)
            };
        let (s_rx, s_h) = scan_thread(
            move |sink: &mut dyn FnMut(Block) -> Result<bool>| match source.digests() {
                Some(d) => scan(d, s_sql, sink),
                None => bail!("the source lost its digests"),
            },
            count,
            CHANNEL_BLOCKS,
            scope,
        );
        let (t_rx, t_h) = scan_thread(
            move |sink: &mut dyn FnMut(Block) -> Result<bool>| match target.digests() {
                Some(d) => scan(d, t_sql, sink),
                None => bail!("the target lost its digests"),
            },
            count,
            CHANNEL_BLOCKS,
            scope,
        );
        let mut t: Cursor<Block> = Cursor::new(t_rx, "target");
        merge_join(table, &s_rx, &mut t, |met| {
            tally.visit(rec, met);
            Ok(())
        })?;
        drop(t);
        crate::reconcile::joined(s_h, "source")?;
        crate::reconcile::joined(t_h, "target")
    })?;
    Ok(read.into_inner())
}
