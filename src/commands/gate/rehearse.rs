//! `cutover gate --inject-mismatch`: the rehearsal that proves the gate is
//! alive. It changes one target row, deletes another and adds a third
//! inside a transaction that is always rolled back, runs the same reconcile
//! over that view, and reports how many of the three faults were caught.
//! Each fault is a write the target's own constraints accept (another row
//! or column is tried where one refuses it), so an ordinary schema (a
//! second UNIQUE column, CHECKs, a foreign key) is rehearsed like any other.

use anyhow::{Result, bail};
use serde::Serialize;

use crate::db::{Access, Db, Rows, RowsExt, TableSql};
use crate::reconcile::{self, DiffKind, Reconciliation};
use crate::report::{self, Report, Verdict};
use crate::schema;
use crate::spec::{Side, Spec, Table};
use crate::value::{Row, Value, display_key, key_json};

/// One injected fault and whether the gate saw it.
#[derive(Debug, Serialize)]
pub struct Injected {
    pub kind: DiffKind,
    pub table: String,
    pub key: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    pub detail: String,
    pub caught: bool,
}

/// The rehearsal's report: the faults injected, which the gate caught, and
/// what it reported on the injected view. Its verdict is always `fail`: the
/// gate blocks that view (a rehearsal that misses a fault is an error, not
/// a report).
#[derive(Debug, Serialize)]
pub struct RehearsalReport {
    pub verdict: Verdict,
    pub injected: usize,
    pub caught: usize,
    pub faults: Vec<Injected>,
    #[serde(flatten)]
    pub rec: Reconciliation,
}

impl Report for RehearsalReport {
    fn holds(&self) -> bool {
        self.verdict.holds()
    }
}

/// `--inject-mismatch`: three faults injected into the target inside a
/// transaction that is rolled back, and the gate run over that view.
pub fn rehearse(spec: &Spec, max_diffs: usize) -> Result<RehearsalReport> {
    let (mut source, mut target, _) = schema::open(spec, Access::Read, Access::Write)?;
    crate::schema::refuse_if_fenced(
        &target,
        "the rehearsal writes inside a rolled-back transaction, which the fence forbids. Rehearse before the cutover, or on a copy",
    )?;
    let baseline = reconcile::reconcile(spec, &mut source, &mut target, 0)?;
    let sequences = crate::apply::Sequences::mark(target.catalogue(), &spec.tables, Side::Target)?;
    // Always rolled back, whatever happened: the target stays as it was,
    // its sequences included.
    let result = target.rolled_back(|target| {
        inject_and_reconcile(spec, &mut source, target, &baseline, max_diffs)
    });
    sequences.restore(target.catalogue())?;
    let (faults, rec) = result?;
    if faults.is_empty() {
        bail!("the rehearsal found no target rows to change; load the target first");
    }
    let caught = faults.iter().filter(|f| f.caught).count();
    let rep = RehearsalReport {
        verdict: Verdict::Fail,
        injected: faults.len(),
        caught,
        faults,
        rec,
    };
    if rep.caught < rep.injected {
        // A gate that misses a fault is a broken tool, not a data finding.
        eprint!("{}", render_rehearsal(&rep));
        bail!(
            "the rehearsal missed {} of {} injected faults",
            rep.injected - rep.caught,
            rep.injected
        );
    }
    // All caught: the gate blocks, which is exit 1.
    Ok(rep)
}

/// The rehearsal as text: each fault and whether it was caught, then what
/// the gate reported on the injected view.
pub fn render_rehearsal(rep: &RehearsalReport) -> String {
    let all = rep.caught == rep.injected;
    let mut text = report::table(
        &["injected", "table", "key", "column", "detail", "caught"],
        rep.faults.iter().map(|f| {
            vec![
                report::name(&f.kind),
                f.table.clone(),
                f.key.to_string(),
                f.column.clone().unwrap_or_default(),
                f.detail.clone(),
                if f.caught { "yes".into() } else { "NO".into() },
            ]
        }),
    );
    text.push_str("\nwhat the gate reported on the injected view:\n");
    text.push_str(&report::reconciliation(&rep.rec));
    text.push_str(&format!(
        "\nrehearsal: caught {} of {} injected faults\n",
        rep.caught, rep.injected
    ));
    text.push_str(if all {
        "verdict: FAIL (as it should be): cutover is blocked; the gate is alive. The target was rolled back and is unchanged\n"
    } else {
        "rehearsal: the gate MISSED an injected fault; do not trust a passing gate until this is fixed\n"
    });
    text
}

fn inject_and_reconcile(
    spec: &Spec,
    source: &mut Db,
    target: &mut Db,
    baseline: &Reconciliation,
    max_diffs: usize,
) -> Result<(Vec<Injected>, Reconciliation)> {
    let mut faults = Vec::new();
    // The change and the deletion go with no foreign key checked or acted
    // on (a parent row deleted, a key column nudged); the extra row is
    // inserted as the application would, its triggers filling what they
    // fill.
    let tables: Vec<&str> = spec
        .tables
        .iter()
        .map(|t| t.target_table.as_str())
        .collect();
    target.connection().suspend_foreign_keys(&tables, true)?;
    for t in &spec.tables {
        inject(t, target, &tables, &mut faults)?;
        if !faults.is_empty() {
            // One table is enough to prove the read path.
            break;
        }
    }
    let rec = reconcile::reconcile(spec, source, target, max_diffs.max(faults.len()))?;
    mark_caught(&mut faults, &rec, baseline, max_diffs);
    Ok((faults, rec))
}

/// Injects the three faults into one table of the target, where its rows
/// allow: a column nudged in one row, another row deleted, a row added
/// under a fresh key. Each write is tried in a savepoint and only kept
/// when the target's constraints (UNIQUE, CHECK, NOT NULL, a foreign key)
/// take it; one they refuse is undone and another row or value is tried,
/// so the rehearsal works on any schema the gate reads.
fn inject(t: &Table, target: &mut Db, tables: &[&str], faults: &mut Vec<Injected>) -> Result<()> {
    let sql = target.target_sql(t);
    let mut rows: Vec<Row> = Vec::new();
    target.scan(&sql, None, |r| {
        rows.push(r);
        Ok(rows.len() < CANDIDATES)
    })?;
    if rows.is_empty() {
        return Ok(());
    }
    // Chosen before anything changes, so it can never be a deleted key.
    let extra_key = fresh_key(t, target.rows(), &sql, &rows[0])?;
    // changed: the second of three rows (the first of fewer), one column
    // nudged; missing: the last of the first three, then the others, never
    // the changed one.
    let first = rows.len().min(3);
    let changed = if first >= 3 { 1 } else { 0 };
    if let Some(fault) = change_one(t, target, &sql, &rows[changed])? {
        faults.push(fault);
    }
    let mut gone = None;
    let order = (0..first).rev().chain(first..rows.len());
    for i in order.filter(|&i| i != changed) {
        let row = &rows[i];
        if kept(target, |db| {
            db.rows().delete_row(&sql, &row[..t.key_len]).map(drop)
        })? {
            faults.push(Injected {
                kind: DiffKind::Missing,
                table: t.name.clone(),
                key: key_json(&row[..t.key_len]),
                column: None,
                detail: format!("row {} deleted", display_key(&row[..t.key_len])),
                caught: false,
            });
            gone = Some(i);
            break;
        }
    }
    let Some(key) = extra_key else {
        return Ok(());
    };
    target.connection().suspend_foreign_keys(tables, false)?;
    // extra: a copy of the first row under a key the source does not have;
    // where a UNIQUE column refuses it, a copy of the deleted row, whose
    // UNIQUE values are free again (and whose CHECKs, NOT NULLs and parents
    // held already); then the others; then each with one column nudged
    // (a UNIQUE email made new where no row could be deleted).
    let bases: Vec<usize> = std::iter::once(0)
        .chain(gone.filter(|&g| g != 0))
        .chain((1..rows.len()).filter(|&i| Some(i) != gone))
        .collect();
    let rows = &rows;
    let copies = bases.iter().map(|&i| rows[i].clone());
    let nudged = bases.iter().flat_map(|&i| {
        (t.key_len..t.columns.len()).filter_map(move |c| {
            let mut row = rows[i].clone();
            row[c] = nudge(&row[c])?;
            Some(row)
        })
    });
    for mut extra in copies.chain(nudged) {
        extra.splice(..t.key_len, key.iter().cloned());
        if kept(target, |db| db.rows().insert_row(&sql, &extra).map(drop))? {
            faults.push(Injected {
                kind: DiffKind::Extra,
                table: t.name.clone(),
                key: key_json(&extra[..t.key_len]),
                column: None,
                detail: format!("row {} added", display_key(&extra[..t.key_len])),
                caught: false,
            });
            break;
        }
    }
    Ok(())
}

/// How many rows of a table the rehearsal reads to choose its faults from.
const CANDIDATES: usize = 8;

/// Runs one write in a savepoint: kept when the target takes it, undone
/// (`false`) when a constraint or the column refuses it.
fn kept(target: &Db, write: impl FnOnce(&Db) -> Result<()>) -> Result<bool> {
    let attempt = target.savepoint()?;
    match write(target) {
        Ok(()) => {
            attempt.release()?;
            Ok(true)
        }
        Err(e) if crate::db::constraint_violation(target.engine(), &e).is_some() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Nudges one column of `changed`: numbers first, as any column holding
/// one takes another. A text may be the text form of a value its column
/// parses (an array, a uuid), which a nudged text can break, or one a
/// CHECK lists: the database refuses it, and the next column is tried.
fn change_one(
    t: &Table,
    target: &mut Db,
    sql: &TableSql,
    changed: &Row,
) -> Result<Option<Injected>> {
    let mut order: Vec<usize> = (t.key_len..t.columns.len()).collect();
    order.sort_by_key(|&i| !matches!(changed[i], Value::Integer(_) | Value::Real(_)));
    for col in order {
        let Some(new) = nudge(&changed[col]) else {
            continue;
        };
        let mut row = changed.clone();
        let old = std::mem::replace(&mut row[col], new);
        if kept(target, |db| {
            db.rows()
                .update_row(sql, &changed[..t.key_len], &row)
                .map(drop)
        })? {
            return Ok(Some(Injected {
                kind: DiffKind::Changed,
                table: t.name.clone(),
                key: key_json(&changed[..t.key_len]),
                column: Some(t.columns[col].target.clone()),
                detail: format!("{} {old} → {}", t.columns[col].target, row[col]),
                caught: false,
            }));
        }
    }
    Ok(None)
}

/// Marks each fault the reconciliation caught: counted beyond the baseline
/// and listed (or the list full).
fn mark_caught(
    faults: &mut [Injected],
    rec: &Reconciliation,
    baseline: &Reconciliation,
    max_diffs: usize,
) {
    for f in faults {
        let table = rec.tables.iter().find(|r| r.name == f.table);
        let base = baseline.tables.iter().find(|r| r.name == f.table);
        let (Some(r), Some(b)) = (table, base) else {
            continue;
        };
        let counted = match f.kind {
            DiffKind::Changed => r.changed > b.changed,
            DiffKind::Missing => r.missing > b.missing,
            DiffKind::Extra => r.extra > b.extra,
            _ => false,
        };
        let listed = rec
            .diffs
            .iter()
            .any(|d| d.table == f.table && d.kind == f.kind && d.key == f.key)
            || rec.diffs.len() >= max_diffs;
        f.caught = counted && listed;
    }
}

/// A different value of the same storage class.
fn nudge(v: &Value) -> Option<Value> {
    match v {
        Value::Integer(i) => Some(Value::Integer(i.checked_add(1).unwrap_or(i - 1))),
        Value::Real(r) => Some(Value::Real(r + 1.0)),
        Value::Text(t) => Some(Value::Text(format!("{t}~"))),
        Value::TextBytes(t) => {
            let mut t = t.clone();
            t.push(b'~');
            Some(Value::TextBytes(t))
        }
        Value::Blob(b) => {
            let mut b = b.clone();
            b.push(0);
            Some(Value::Blob(b))
        }
        Value::Large(l) => {
            let mut b = l.bytes.clone();
            b.push(if l.text { b'~' } else { 0 });
            Some(Value::from_bytes(l.text, b))
        }
        Value::Null | Value::Digested(_) => None,
    }
}

/// A key not present in the target: the last key part bumped until free.
fn fresh_key(
    t: &Table,
    target: &dyn Rows,
    sql: &TableSql,
    like: &Row,
) -> Result<Option<Vec<Value>>> {
    let mut key = like[..t.key_len].to_vec();
    let last = t.key_len - 1;
    if let Value::Integer(_) = key[last] {
        // Past the largest key, so the extra row sorts last, as a new row would.
        let max = target.max_integer(&t.target_table, &t.columns[last].target)?;
        key[last] = Value::Integer(max.unwrap_or(0).saturating_add(1));
    }
    for _ in 0..100 {
        if target.get_row(sql, &key)?.is_none() {
            return Ok(Some(key));
        }
        key[last] = match nudge(&key[last]) {
            Some(v) => v,
            None => return Ok(None),
        };
    }
    Ok(None)
}
