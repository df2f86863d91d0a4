//! The fence put on, proven and taken off: its triggers, guard and row
//! written in one transaction (where schema changes commit at once, the
//! triggers one by one and the row after them, and the triggers taken off
//! again should the row not follow); the fence proven by a write from another
//! connection on every table it guards; and, when it cannot stand, taken
//! off again with what `fence on` changed put back.

use anyhow::{Context, Result, bail};

use super::record::keep_copy;
use super::{FENCE_TABLE, FORMAT, FenceRow, Fingerprint, journal_tables, message, read};
use crate::db::{Access, Db, FenceRecord, JournalId, Transaction};
use crate::spec::Spec;

/// What `fence on` changes on the target besides the fence's triggers, row
/// and guard, as it was before: the functions the triggers call
/// (PostgreSQL), and the id sequences of the tables it probes, which a
/// refused insert still moves (PostgreSQL's `nextval` is not rolled back).
pub struct Before {
    functions: Vec<String>,
    sequences: Vec<crate::db::SequenceMark>,
}

impl Before {
    pub fn read(target: &Db, tables: &[&str]) -> Result<Before> {
        Ok(Before {
            functions: target.fence().fence_functions()?,
            sequences: target.catalogue().sequence_marks(tables)?,
        })
    }
}

/// Proves a fence just committed: its row read back, a write from another
/// connection, as any other writer would come, refused on every table it
/// guards, and a copy of its record kept in the source. The row, the
/// refusals and what became of the copy.
pub fn stand(
    spec: &Spec,
    tables: &[String],
    images: &[String],
) -> Result<(FenceRow, Vec<String>, String)> {
    let other = crate::schema::open_target(spec, Access::Write)?;
    let row = read(other.fence_records())?.context("the fence row just written is not there")?;
    let mut refused = Vec::new();
    for t in tables
        .iter()
        .chain(images)
        .map(String::as_str)
        .chain([FENCE_TABLE])
    {
        for crate::db::Probe {
            write: what,
            outcome,
        } in other.fence().probe_writes(t)?
        {
            match outcome {
                Err(msg) if msg.contains("cutover fence") => refused.push(msg),
                // An update or delete that matched no row proves nothing either way.
                Ok(0) if what != "insert" => {}
                Err(msg) => bail!(
                    "fence verification: an {what} on '{t}' from another connection failed, but not because of the fence ({msg}), so the fence could not be proven. Find what refused the write (a trigger of the table that runs before the fence's, a constraint or default that fails, a permission of the role), then run `cutover fence on` again"
                ),
                Ok(_) => bail!(
                    "fence verification FAILED: an {what} on '{t}' from another connection went through (it was rolled back): the fence does not hold there. Find what lets the write past the fence's triggers before fencing again"
                ),
            }
        }
    }
    // The copy outside the target, once the fence stands: a record
    // rewritten on the target no longer matches it.
    let copy = keep_copy(spec, &other, &row).map_err(|e| {
        e.context(format!(
            "the copy of the fence record could not be kept in the source, and replay refuses without it. When source {} can be written, run `cutover fence on --spec {}` again",
            spec.source.display(),
            spec.path.display()
        ))
    })?;
    Ok((row, refused, copy))
}

/// Takes a fence that could not stand off again, in one transaction: as
/// `fence off` does, and the functions this command created and the
/// sequences as they were. `why` is what stopped the fence, with what
/// became of the target.
pub fn take_off(
    target: &Db,
    tables: &[String],
    before: &Before,
    why: anyhow::Error,
) -> anyhow::Error {
    let undone = target.write(|| {
        unfence(target, tables, Some(&before.functions))?;
        target.catalogue().restore_sequences(&before.sequences)?;
        Ok(())
    });
    match undone {
        Ok(()) => why.context(format!(
            "the fence was taken off again: target {} is as it was before `fence on`, and writers can change it",
            target.location()
        )),
        Err(e) => why.context(format!(
            "the fence could not be taken off again ({e:#}): target {} may still be fenced, unproven. Run `cutover fence status`; lift it with `cutover fence off --force` before fencing again",
            target.location()
        )),
    }
}

/// Takes the fence off `tables`, the journal and the fence table, and its
/// row, and lifts the source's copy of its record.
pub fn lift(
    source: &Db,
    target: &Db,
    journal: Option<&JournalId>,
    tables: &[String],
) -> Result<()> {
    // The source's copy is lifted first: should lifting the target fail,
    // `fence on` keeps a new copy of the fence still standing.
    if let Some(journal) = journal {
        source.write(|| source.fence_records().lift_copy(journal))?;
    }
    target
        .write(|| unfence(target, tables, None))
        .map_err(|e| e.context("the fence is still on"))
}

/// Inside the caller's write transaction: the fence taken off `tables`,
/// the journal and the fence table, and its row ([`crate::db::Fence::remove_fence`];
/// `keep_functions` as there).
pub fn unfence(target: &Db, tables: &[String], keep_functions: Option<&[String]>) -> Result<()> {
    let images = journal_tables(target.capture())?;
    let all: Vec<&str> = tables.iter().chain(&images).map(String::as_str).collect();
    target.fence().remove_fence(&all, keep_functions)
}

/// Puts the fence on inside the write transaction the caller began with the
/// writers drained: the fence's triggers on `tables` and the journal's
/// `images`, the guard of the fence table, the fingerprint and the fence
/// row, the DDL guard; then commits. On a failure the transaction is rolled
/// back, leaving the target unchanged. What guards cutover's tables against
/// schema changes, where the engine has one.
///
/// Where schema changes commit at once (`transactional_ddl` false), each
/// trigger stands as soon as it is made and waits for the writers of its
/// table itself: the fingerprint and the row are then read and written in
/// a transaction of their own, begun once the last trigger stands, so
/// that its snapshot holds every write committed before the fence; and a
/// failure takes off again every trigger already made, so the target is
/// still as it was. A crash between the triggers and the row leaves
/// triggers without a row, which `fence status` and `fence off` report
/// ([`super::orphaned`]) and a rerun of `fence on` completes.
pub fn install(
    target: &Db,
    tx: Transaction<'_>,
    spec: &Spec,
    tables: &[String],
    images: &[String],
) -> Result<Option<String>> {
    let ddl_commits = !target.engine().capabilities.transactional_ddl;
    let r = (|| -> Result<Option<String>> {
        for t in tables.iter().chain(images) {
            target.fence().install_fence_triggers(t, &message(t))?;
        }
        let guard = target.fence().install_fence_guard(
            &message(FENCE_TABLE),
            "cutover fence: the schema of cutover's tables cannot change while the target is fenced; lift the fence only with `cutover fence off`",
        )?;
        let row_tx = if ddl_commits {
            Some(target.begin_write()?)
        } else {
            None
        };
        let fp = Fingerprint::read(target, spec, FORMAT)?;
        if let Some(failed) = &fp.failed {
            bail!("{failed}");
        }
        let mut record = FenceRecord {
            boundary: fp.max_seq,
            journal_rows: fp.journal_rows,
            fingerprint: String::new(),
            tables: tables.to_vec(),
            parts: serde_json::to_string(&fp)?,
            fenced_at: target.control().now()?,
        };
        record.fingerprint = fp.hash_v3(&record);
        target.fence_records().set_row(&record)?;
        if let Some(row_tx) = row_tx {
            row_tx.commit()?;
        }
        Ok(guard)
    })()
    .and_then(|guard| tx.commit().map(|()| guard));
    match r {
        Ok(guard) => Ok(guard),
        Err(e) if ddl_commits => {
            // The triggers made so far were committed with their DDL: they
            // come off again, as `fence off` takes them off.
            match target.write(|| unfence(target, tables, None)) {
                Ok(()) => Err(e.context(
                    "the fence was not installed; the target is unchanged (the fence's triggers made before the failure were taken off again)",
                )),
                Err(undo) => Err(e.context(format!(
                    "the fence was not installed, and the fence's triggers made before the failure could not be taken off again ({undo:#}): target {} may still refuse writes. Run `cutover fence status`, then `cutover fence on` to complete the fence or `cutover fence off --force` to lift it",
                    target.location()
                ))),
            }
        }
        Err(e) => Err(e.context("the fence was not installed; the target is unchanged")),
    }
}
