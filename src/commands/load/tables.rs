//! `cutover load`'s tables, one after another, parents first: where each
//! starts (a completed load, a stopped one resumed after its last committed
//! key, or a fresh one), then its rows read and made canonical on a thread
//! of their own while this one writes them in batches with the table's
//! checkpoint, beside the validation of every source row.

use anyhow::{Result, bail};

use super::{Invalid, InvalidRow, TableLoad};
use crate::apply::{Applier, BatchOutcome, LoadCheckpoint};
use crate::canonical::{self, Note};
use crate::db::{CatalogueExt, Db, RowsExt, TableSql};
use crate::progress::{self, Bar};
use crate::reconcile;
use crate::spec::{Spec, Table};
use crate::value::{Block, display_key, key_from_json, key_json};

/// Rows per block read for load: a batch is whole blocks.
const BATCH_BLOCK_ROWS: usize = 1024;

/// The validation of every source row, running beside the load until it
/// ends.
pub(super) enum Validation<'s> {
    Running(std::thread::ScopedJoinHandle<'s, Result<Option<InvalidRow>>>),
    Done,
}

impl Validation<'_> {
    /// What the validation found, once it has ended; `Ok(None)` after.
    pub(super) fn wait(&mut self) -> Result<Option<InvalidRow>> {
        match std::mem::replace(self, Validation::Done) {
            Validation::Running(h) => h
                .join()
                .map_err(|_| anyhow::anyhow!("the source validation panicked"))?,
            Validation::Done => Ok(None),
        }
    }

    /// Between batches: once the validation has ended clean, the held
    /// batches commit and each later batch commits on its own.
    fn poll(&mut self, engine: &Applier) -> Result<()> {
        if let Validation::Running(h) = self
            && h.is_finished()
        {
            if let Some(bad) = self.wait()? {
                return Err(Invalid(bad).into());
            }
            if !engine.holds_whole() {
                engine.commit_held()?;
            }
        }
        Ok(())
    }
}

/// Loads every spec table, parents first, in batches.
pub(super) fn load_tables(
    spec: &Spec,
    source: &mut Db,
    target: &Db,
    engine: &Applier,
    batch: usize,
    replace: bool,
    validation: &mut Validation,
) -> Result<Vec<TableLoad>> {
    let mut tables = Vec::new();
    // Parents before children. cutover's connections enforce no foreign key,
    // so any order would load; this one never leaves a committed child
    // without its parent should the load stop part-way.
    for ti in spec.parents_first(target.catalogue())? {
        let t = &spec.tables[ti];
        let s_sql = source.source_sql(t);
        let t_sql = target.target_sql(t);
        let (resume, rows_before, seen) = match start(t, target, &t_sql, replace)? {
            Start::Complete(tl) => {
                tables.push(*tl);
                continue;
            }
            Start::At {
                resume,
                rows_before,
                seen,
            } => (resume, rows_before, seen),
        };
        let tl = TableLoad {
            name: t.name.clone(),
            loaded: 0,
            already_present: 0,
            resumed_after: resume.as_deref().map(key_json),
            batches: 0,
            complete_before: false,
            span: Default::default(),
        };
        let sequence = source.catalogue().sequence(&t.source_table)?;
        let mut batches = Batches {
            engine,
            target,
            ti,
            t,
            seen,
            total: rows_before,
            clear: replace,
            sequence,
            tl,
        };
        if replace {
            // Empty the table in its own first transaction, together with a
            // reset checkpoint, so a crash after it resumes a fresh load.
            batches.flush(&mut Vec::new(), false)?;
        }
        batches.read(source, &s_sql, &resume, batch, validation)?;
        tables.push(batches.tl);
    }
    Ok(tables)
}

/// Where a table's load starts, as its checkpoint and the target say.
enum Start {
    /// A completed load was found: nothing to do.
    Complete(Box<TableLoad>),
    /// After `resume` (from the first row without it), with the rows the
    /// checkpoint recorded before and the count the first batch expects.
    At {
        resume: Option<Vec<crate::value::Value>>,
        rows_before: i64,
        seen: i64,
    },
}

/// Where table `t`'s load starts; an error when the target holds rows no
/// load of this table recorded.
fn start(t: &Table, target: &Db, t_sql: &TableSql, replace: bool) -> Result<Start> {
    let checkpoint = target.progress().load_checkpoint(&t.name)?;
    let mut resume: Option<Vec<crate::value::Value>> = None;
    let mut rows_before = 0;
    // The checkpoint's row count as this load found it: its first batch
    // expects it unchanged (another load that committed meanwhile
    // changed it), and then its own count.
    let mut seen = 0;
    let held = match (&checkpoint, replace) {
        (Some(_), false) => target.rows().count_rows(t_sql)?,
        _ => 0,
    };
    match (&checkpoint, replace) {
        (_, true) => {}
        (Some(c), false) if c.done && held == c.rows => {
            // A rerun after a completed load (say, after a crash that hit
            // once the last batch had committed) has nothing to do.
            return Ok(Start::Complete(Box::new(TableLoad {
                name: t.name.clone(),
                loaded: 0,
                already_present: c.rows as u64,
                resumed_after: None,
                batches: 0,
                complete_before: true,
                span: Default::default(),
            })));
        }
        (Some(c), false) if !c.done && held == c.rows => {
            rows_before = c.rows;
            seen = c.rows;
            if let Some(k) = &c.last_key {
                resume = Some(key_from_json(&serde_json::from_str(k)?)?);
            }
        }
        _ => {
            let n = match checkpoint {
                Some(_) => held,
                None => target.rows().count_rows(t_sql)?,
            };
            if n > 0 {
                bail!(
                    "target table '{}' in {} already holds {n} rows{}; pass --replace to delete them and load again. Nothing was written",
                    t.target_table,
                    target.location(),
                    match &checkpoint {
                        Some(c) if c.done => format!(
                            ", not the {} its completed load recorded (the target changed since)",
                            c.rows
                        ),
                        Some(c) => format!(
                            ", not the {} its interrupted load recorded (the target changed since)",
                            c.rows
                        ),
                        None => String::new(),
                    }
                );
            }
            // Empty (emptied by hand since a load, say by TRUNCATE): a
            // fresh load over the old checkpoint, which its first batch
            // replaces.
            seen = checkpoint.as_ref().map_or(0, |c| c.rows);
        }
    }
    Ok(Start::At {
        resume,
        rows_before,
        seen,
    })
}

/// One table's batches as they are written, and where its load stands.
struct Batches<'a, 'e> {
    engine: &'a Applier<'e>,
    target: &'a Db,
    ti: usize,
    t: &'a Table,
    /// The checkpoint's row count as this load found it: its first batch
    /// expects it unchanged (another load that committed meanwhile
    /// changed it), and then its own count.
    seen: i64,
    total: i64,
    clear: bool,
    sequence: Option<i64>,
    tl: TableLoad,
}

impl Batches<'_, '_> {
    /// Writes the canonical rows waiting for their batch, with the table's
    /// load checkpoint (`done` with the last).
    fn flush(&mut self, pending: &mut Vec<Block>, done: bool) -> Result<()> {
        let t = self.t;
        let n: usize = pending.iter().map(Block::rows).sum();
        for b in pending.iter() {
            self.tl.span.see(t, b);
        }
        let last_key = pending
            .iter()
            .rev()
            .find(|b| b.rows() > 0)
            .map(|b| key_json(&b.values(b.rows() - 1, t.key_len)).to_string());
        let checkpoint = LoadCheckpoint {
            table: &t.name,
            target_table: &t.target_table,
            last_key,
            expect_rows: self.seen,
            rows: self.total + n as i64,
            done,
            clear: std::mem::take(&mut self.clear),
            sequence: self.sequence,
        };
        match self
            .engine
            .load_rows(self.ti, pending, self.total + 1, &checkpoint)?
        {
            BatchOutcome::Committed(a) => {
                self.total += n as i64;
                self.seen = self.total;
                self.tl.loaded += a.written;
                self.tl.already_present += a.duplicate;
                self.tl.batches += u64::from(n > 0);
            }
            BatchOutcome::Conflict(c) => bail!(
                "table '{}', key {}: {}; found {}, loading {}. The batch was rolled back; pass --replace to load over existing rows",
                c.table,
                c.key,
                c.reason,
                c.found
                    .map(|f| f.to_string())
                    .unwrap_or_else(|| "no row".into()),
                c.wanted.map(|f| f.to_string()).unwrap_or_default()
            ),
            BatchOutcome::Raced => bail!(
                "another load of table '{}' committed into {} while this one ran; let it finish, then run `cutover gate`",
                t.name,
                self.target.location()
            ),
            other => bail!("unexpected outcome of a load batch: {other}"),
        }
        pending.clear();
        Ok(())
    }

    /// Reads the source after `resume`, made canonical on its own thread,
    /// into batches of about `batch` rows written on this one.
    fn read(
        &mut self,
        source: &mut Db,
        s_sql: &TableSql,
        resume: &Option<Vec<crate::value::Value>>,
        batch: usize,
        validation: &mut Validation,
    ) -> Result<()> {
        let t = self.t;
        // Canonical rows waiting for their batch, in blocks as they came.
        let mut pending: Vec<Block> = Vec::new();
        let mut pending_rows = 0usize;
        let total = if progress::visible() {
            Some(source.rows().count_rows(s_sql)? as u64)
        } else {
            None
        };
        let bar = Bar::new(&format!("load {}", t.name), total);
        // Blocks no larger than a batch, so a batch is whole blocks, and
        // small, so a batch passes its size by less than a block.
        let block_rows = batch.min(BATCH_BLOCK_ROWS);
        // Room for the next batch while this one is written, so reading and
        // writing overlap instead of taking turns; capped, so a huge --batch
        // does not hold a table in memory.
        let ahead = batch
            .div_ceil(block_rows)
            .clamp(reconcile::CHANNEL_BLOCKS, 64);
        // The source is read and made canonical on its own thread while
        // this one writes the batches before it.
        std::thread::scope(|scope| -> Result<()> {
            let reading = source.engine_mut();
            let (blocks, reader) = reconcile::scan_thread(
                move |sink: &mut dyn FnMut(Block) -> Result<bool>| {
                    reading.scan_into(s_sql, resume.as_deref(), block_rows, sink)
                },
                |raw: Block| {
                    let canon = canonical::canonical_block(t, &raw);
                    let invalid = canon.notes.iter().find_map(|(r, n)| match n {
                        Note::Invalid(column, value, reason) => Some((
                            raw.values(*r, t.key_len),
                            column.clone(),
                            value.clone(),
                            reason.clone(),
                        )),
                        _ => None,
                    });
                    (raw.rows(), canon.rows, invalid)
                },
                ahead,
                scope,
            );
            for (read, rows, invalid) in blocks.iter() {
                if let Some((key, column, value, reason)) = invalid {
                    bail!(
                        "table '{}', key {}, column '{column}': {value} ({reason}); the source changed during the load. Rows committed so far stay; fix the row and run load again to resume",
                        t.name,
                        display_key(&key)
                    );
                }
                bar.add(read as u64);
                pending_rows += rows.rows();
                pending.push(rows);
                if pending_rows >= batch {
                    pending_rows = 0;
                    self.flush(&mut pending, false)?;
                    validation.poll(self.engine)?;
                }
            }
            drop(blocks);
            reconcile::joined(reader, "source")
        })?;
        self.flush(&mut pending, true)?;
        validation.poll(self.engine)?;
        Ok(())
    }
}
