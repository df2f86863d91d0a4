//! The carrying pass of `cutover sync`: a table's rows past its cursor
//! (or, carried whole, every row but the late ones) read in watermark order
//! and applied through the apply engine, each batch with its cursor row.

use std::cmp::Ordering;

use anyhow::{Result, bail};
use sha2::{Digest, Sha256};

use super::{BatchReport, Options, TableSync};
use crate::apply::{Applier, BatchOutcome, Change, Rule, SyncCheckpoint};
use crate::canonical::{self, Note};
use crate::db::{ColumnInfo, Db};
use crate::provenance::Cursor;
use crate::reconcile;
use crate::report::BatchStatus;
use crate::spec::{Side, Table};
use crate::survey::{Position, Survey};
use crate::value::{Block, CellRef, Row, Value, display_key, key_json};
use crate::watermark::mark;

/// A table as checked, ready to be synced.
pub(super) struct Planned<'a> {
    pub(super) spec: &'a Table,
    /// The table as sync carries it (evolved columns included).
    pub(super) plan: Table,
    pub(super) wm: Option<usize>,
    /// Whether every row is carried, not only those past the cursor.
    pub(super) whole: bool,
    pub(super) cursor: Option<crate::db::control::progress::Cursor>,
    pub(super) pos: Option<Position>,
    pub(super) found: Survey,
    pub(super) source_cols: Vec<ColumnInfo>,
    pub(super) evolving: bool,
}

/// Carries the rows of one table past its cursor (or, `whole`, every row
/// but the late ones) through the apply engine, batch by batch.
pub(super) fn sync_table(
    planned: &Planned<'_>,
    source: &Db,
    target: &Db,
    o: &Options<'_>,
    ts: &mut TableSync,
) -> Result<()> {
    let p = &planned.plan;
    let wm = planned.wm;
    let k = p.key_len;
    let cursor = &planned.cursor;
    ts.cursor_before = Cursor::of(cursor.clone());
    let found = &planned.found;
    // Past a cursor, only the rows from the least watermark the survey
    // wanted are read again; none wanted, none read. The cursor's own
    // watermark lowers that bound when it has the table's shape, so that a
    // row written since the survey, past the cursor, is carried too.
    let Some(from) = carry_from(planned) else {
        ts.cursor_after = ts.cursor_before.clone();
        return Ok(());
    };
    let engine = Applier::new(std::slice::from_ref(p), target, Side::Target);
    let s_sql = match wm {
        Some(w) => source
            .rows()
            .table_sql(&p.source_table, &p.source_names(), k, Some(w)),
        None => source.source_sql(p),
    };
    let mut pending: Vec<Change> = Vec::new();
    let mut failure: Option<anyhow::Error> = None;
    let flush = |pending: &mut Vec<Change>, ts: &mut TableSync| -> Result<bool> {
        flush(&engine, planned, pending, ts)
    };
    let mut read = 0i64;
    let after = from.map(|f| vec![f]);
    source.scan_blocks(&s_sql, after.as_deref(), reconcile::BLOCK_ROWS, |b| {
        let mut fwd = vec![CellRef::Null; p.columns.len()];
        for r in 0..b.rows() {
            read += 1;
            let take = match (&found.all_late, &planned.pos, wm) {
                // A whole pass (after --evolve): every row but the late ones,
                // which stay reported, not carried.
                (Some(late), ..) => !late.contains(&key_json(&b.values(r, k)).to_string()),
                (None, Some(pos), Some(w)) => {
                    mark(b.get(r, w)).is_ok_and(|m| pos.wants(m, &|| b.values(r, k)))
                }
                (None, ..) => true,
            };
            if !take {
                continue;
            }
            let key = b.values(r, k);
            if let canonical::Forwarded::Invalid(Note::Invalid(column, value, reason)) =
                canonical::forward_row(p, &b, r, &mut fwd)
            {
                failure = Some(anyhow::anyhow!("table '{}', key {}, column '{column}': {value} ({reason}); the source changed during the sync", p.name, display_key(&key)));
                return Ok(false);
            }
            let row: Row = fwd.iter().map(CellRef::to_value).collect();
            ts.candidates += 1;
            let rule = match wm {
                Some(w) => Rule::Watermark(w),
                None => Rule::Plain,
            };
            pending.push(Change {
                table: 0,
                key,
                rule,
                after: Some(row),
                tag: read,
                source_images: None,
                entries: 1,
                unrecorded: Vec::new(),
            });
            if pending.len() >= o.batch && !flush(&mut pending, ts)? {
                return Ok(false);
            }
        }
        Ok(true)
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    if ts.conflict.is_none() {
        flush(&mut pending, ts)?;
    }
    ts.cursor_after = Cursor::of(target.progress().sync_cursor(&p.name)?);
    Ok(())
}

/// Where the carrying pass starts reading, in watermark order: `None` when
/// the survey wanted no row past the cursor; `Some(None)` from the first.
fn carry_from(planned: &Planned<'_>) -> Option<Option<Value>> {
    let (found, cursor) = (&planned.found, &planned.cursor);
    Some(match &planned.pos {
        Some(_) if !planned.whole => {
            if found.wanted == 0 {
                return None;
            }
            let (least, mut from) = found.from.clone()?;
            if let Some(c) = cursor
                && let cw = &c.last_watermark
                && found.shape.as_ref().is_some_and(|s| s.fits(cw.as_cell()))
                && mark(cw.as_cell()).is_ok_and(|m| m < least)
            {
                from = cw.clone();
            }
            Some(from)
        }
        _ => None,
    })
}

/// Applies the rows pending as one batch, with the cursor row; whether the
/// next batch may follow (not after a conflict).
fn flush(
    engine: &Applier<'_>,
    planned: &Planned<'_>,
    pending: &mut Vec<Change>,
    ts: &mut TableSync,
) -> Result<bool> {
    let p = &planned.plan;
    let wm = planned.wm;
    let k = p.key_len;
    let cursor = &planned.cursor;
    let source_cols = &planned.source_cols;
    if pending.is_empty() {
        return Ok(true);
    }
    let mut digest = Sha256::new();
    let mut block = Block::new(p.columns.len(), pending.len());
    for c in pending.iter() {
        for v in c.after.iter().flatten() {
            block.push(v.as_cell());
        }
    }
    block.hash_into(&mut digest);
    let batch = hex::encode(digest.finalize());
    let first = pending[0]
        .after
        .as_ref()
        .and_then(|r| wm.map(|w| r[w].clone()))
        .unwrap_or(Value::Null);
    let last_row = pending
        .last()
        .and_then(|c| c.after.clone())
        .unwrap_or_default();
    let mut last = wm
        .and_then(|w| last_row.get(w).cloned())
        .unwrap_or(Value::Null);
    let mut last_key = key_json(&last_row[..k.min(last_row.len())]).to_string();
    // A lookback re-reads rows behind the cursor; the cursor never moves
    // back.
    if let (Some(c), Some(pos)) = (cursor, &planned.pos)
        && let Ok(m) = mark(last.as_cell())
        && pos.cmp(m, &|| last_row[..k.min(last_row.len())].to_vec()) == Ordering::Less
    {
        last = c.last_watermark.clone();
        last_key = c.last_key.clone();
    }
    let cp = SyncCheckpoint {
        table: &p.name,
        batch: &batch,
        first: &first,
        last: &last,
        last_key: &last_key,
        schema: source_cols,
    };
    let mut br = BatchReport {
        rows: pending.len() as u64,
        changed: 0,
        first_watermark: first.to_json(),
        last_watermark: last.to_json(),
        status: BatchStatus::Applied,
    };
    let go_on = match engine.apply_batch(pending, &cp)? {
        BatchOutcome::Committed(a) => {
            ts.changed += a.written;
            ts.unchanged += a.duplicate;
            ts.stale += a.stale;
            br.changed = a.written;
            true
        }
        BatchOutcome::Replayed => {
            ts.unchanged += pending.len() as u64;
            br.status = BatchStatus::Replayed;
            true
        }
        BatchOutcome::Conflict(c) => {
            ts.conflict = Some(*c);
            br.status = BatchStatus::Rejected;
            false
        }
        other => bail!("unexpected outcome of a sync batch: {other}"),
    };
    ts.batches.push(br);
    pending.clear();
    Ok(go_on)
}
