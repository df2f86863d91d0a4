//! `cutover load`: the full copy source → target through the forward
//! transform, in batches written by the apply engine.
//!
//! Every source row is validated before the first commit, so an invalid row
//! stops the load with nothing written. The validation reads the source over
//! a second connection while the batches are written; they are held in one
//! open transaction until it ends, so the two overlap instead of taking one
//! pass each. Each batch after that commits with the table's load
//! checkpoint (`_cutover_load`), so a load stopped part-way (a crash, a kill)
//! resumes after its last committed key instead of starting over.

use anyhow::{Result, bail};
use serde::{Serialize, Serializer};

use crate::apply::{BatchOutcome, Engine, LoadCheckpoint};
use crate::canonical::{self, Note};
use crate::db::{Access, Db};
use crate::progress::{self, Progress};
use crate::reconcile;
use crate::report::{self, Report, Verdict};
use crate::schema;
use crate::spec::{Location, Side, Spec};
use crate::value::{Block, Row, Value, display_key, key_from_json, key_json};

/// Rows per block read for load: a batch is whole blocks.
const BATCH_BLOCK_ROWS: usize = 1024;

#[derive(Debug, Serialize)]
pub struct TableLoad {
    pub name: String,
    pub loaded: u64,
    pub already_present: u64,
    pub resumed_after: Option<serde_json::Value>,
    pub batches: u64,
    /// A completed load of this table was found; nothing was done.
    pub complete_before: bool,
}

/// What `cutover load` did: the tables loaded, or the invalid row that
/// stopped it with nothing committed.
#[derive(Debug, Serialize)]
pub struct LoadReport {
    pub verdict: Verdict,
    pub tables: Vec<TableLoad>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<InvalidRow>,
}

impl Report for LoadReport {
    fn holds(&self) -> bool {
        self.verdict.holds()
    }
}

/// A source row the forward transform refuses.
#[derive(Debug, Serialize)]
pub struct InvalidRow {
    pub table: String,
    #[serde(serialize_with = "key_as_json")]
    pub key: Row,
    pub column: String,
    #[serde(serialize_with = "value_as_json")]
    pub value: Value,
    pub reason: String,
}

fn key_as_json<S: Serializer>(key: &Row, s: S) -> std::result::Result<S::Ok, S::Error> {
    key_json(key).serialize(s)
}

fn value_as_json<S: Serializer>(value: &Value, s: S) -> std::result::Result<S::Ok, S::Error> {
    value.to_json().serialize(s)
}

pub fn run(spec: &Spec, batch: usize, replace: bool) -> Result<LoadReport> {
    let (mut source, target, _) = schema::open(spec, Access::Read, Access::Write)?;
    crate::schema::refuse_if_fenced(
        &target,
        "load would write into a database under rollback. Nothing was written",
    )?;
    for t in &spec.tables {
        if target.journal_triggers(&t.target_table)? > 0 {
            bail!(
                "table '{}' in target {} is journaled; a load now would journal every row. Run `cutover journal remove` first if this really is a fresh load. Nothing was written",
                t.name,
                target.location()
            );
        }
    }

    // A stopped load's session may still be ending on the server: its
    // transaction settles (rolled back, or committed) before the
    // checkpoints are read.
    let tables: Vec<&str> = spec
        .tables
        .iter()
        .map(|t| t.target_table.as_str())
        .collect();
    target.await_other_runs(&tables, &mut |m| eprintln!("load: {m}"))?;

    // Every row (its columns, key order and uniqueness) is validated
    // before the first commit. A database source is validated over a second
    // connection, on its own thread, while the load writes: the batches are
    // held in one open transaction until the validation ends. A CSV source is
    // materialised once, so it is validated first.
    let beside = !matches!(spec.source, Location::Csv(_));
    if !beside && let Some(bad) = validate(spec, &mut source)? {
        return Ok(LoadReport::invalid(bad));
    }
    let engine = Engine::new(&spec.tables, &target, Side::Target);
    std::thread::scope(|scope| {
        let mut validation = Validation::Done;
        if beside {
            engine.hold()?;
            validation = Validation::Running(scope.spawn(|| {
                let mut source = schema::open_source(spec, None, Access::Read)?;
                validate(spec, &mut source)
            }));
        }
        let loaded = load_tables(
            spec,
            &mut source,
            &target,
            &engine,
            batch,
            replace,
            &mut validation,
        );
        // The tables loaded, or the first invalid row.
        let verdict: Result<std::result::Result<Vec<TableLoad>, Box<InvalidRow>>> = match loaded {
            Ok(tables) => validation
                .wait()
                .map(|bad| bad.map_or(Ok(tables), |b| Err(Box::new(b)))),
            Err(e) => match e.downcast::<Invalid>() {
                Ok(Invalid(bad)) => Ok(Err(Box::new(bad))),
                // While the batches are held, what the validation finds is
                // the cause to report (a duplicate source key, say, that
                // the writer met as a conflict).
                Err(e) => match validation.wait() {
                    Ok(Some(bad)) => Ok(Err(Box::new(bad))),
                    Ok(None) => Err(e),
                    Err(v) => Err(v),
                },
            },
        };
        match verdict {
            Ok(Ok(tables)) => {
                engine.commit_held()?;
                Ok(LoadReport {
                    verdict: Verdict::Pass,
                    tables,
                    invalid: None,
                })
            }
            Ok(Err(bad)) => {
                engine.rollback_held();
                Ok(LoadReport::invalid(*bad))
            }
            Err(e) => {
                engine.rollback_held();
                Err(e)
            }
        }
    })
}

/// The first source row of every spec table that the forward transform
/// refuses; an error for a key out of order or repeated.
fn validate(spec: &Spec, source: &mut Db) -> Result<Option<InvalidRow>> {
    for t in &spec.tables {
        let mut bad = None;
        reconcile::scan_source(t, source, false, |key, note| {
            if let Note::Invalid(column, value, reason) = note {
                bad = Some(InvalidRow {
                    table: t.name.clone(),
                    key,
                    column: column.clone(),
                    value: value.clone(),
                    reason: reason.clone(),
                });
                return Ok(false);
            }
            Ok(true)
        })?;
        if bad.is_some() {
            return Ok(bad);
        }
    }
    Ok(None)
}

/// An invalid source row found while batches were held: nothing of them
/// is committed.
#[derive(Debug)]
struct Invalid(InvalidRow);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "table '{}', key {}, column '{}': invalid value {}",
            self.0.table,
            display_key(&self.0.key),
            self.0.column,
            self.0.value
        )
    }
}

impl std::error::Error for Invalid {}

/// The validation of every source row, running beside the load until it
/// ends.
enum Validation<'s> {
    Running(std::thread::ScopedJoinHandle<'s, Result<Option<InvalidRow>>>),
    Done,
}

impl Validation<'_> {
    /// What the validation found, once it has ended; `Ok(None)` after.
    fn wait(&mut self) -> Result<Option<InvalidRow>> {
        match std::mem::replace(self, Validation::Done) {
            Validation::Running(h) => h
                .join()
                .map_err(|_| anyhow::anyhow!("the source validation panicked"))?,
            Validation::Done => Ok(None),
        }
    }

    /// Between batches: once the validation has ended clean, the held
    /// batches commit and each later batch commits on its own.
    fn poll(&mut self, engine: &Engine) -> Result<()> {
        if let Validation::Running(h) = self
            && h.is_finished()
        {
            if let Some(bad) = self.wait()? {
                return Err(Invalid(bad).into());
            }
            engine.commit_held()?;
        }
        Ok(())
    }
}

/// Loads every spec table, parents first, in batches.
fn load_tables(
    spec: &Spec,
    source: &mut Db,
    target: &Db,
    engine: &Engine,
    batch: usize,
    replace: bool,
    validation: &mut Validation,
) -> Result<Vec<TableLoad>> {
    let mut tables = Vec::new();
    // Parents before children. cutover's connections enforce no foreign key,
    // so any order would load; this one never leaves a committed child
    // without its parent should the load stop part-way.
    for ti in spec.parents_first(target)? {
        let t = &spec.tables[ti];
        let s_sql = source.source_sql(t);
        let t_sql = target.target_sql(t);
        let checkpoint = target.load_checkpoint(&t.name)?;
        let mut resume: Option<Vec<crate::value::Value>> = None;
        let mut rows_before = 0;
        // The checkpoint's row count as this load found it: its first batch
        // expects it unchanged (another load that committed meanwhile
        // changed it), and then its own count.
        let mut seen = 0;
        let held = match (&checkpoint, replace) {
            (Some(_), false) => target.row_count(&t_sql)?,
            _ => 0,
        };
        match (&checkpoint, replace) {
            (_, true) => {}
            (Some((_, rows, true)), false) if held == *rows => {
                // A rerun after a completed load (say, after a crash that hit
                // once the last batch had committed) has nothing to do.
                tables.push(TableLoad {
                    name: t.name.clone(),
                    loaded: 0,
                    already_present: *rows as u64,
                    resumed_after: None,
                    batches: 0,
                    complete_before: true,
                });
                continue;
            }
            (Some((last, rows, false)), false) if held == *rows => {
                rows_before = *rows;
                seen = *rows;
                if let Some(k) = last {
                    resume = Some(key_from_json(&serde_json::from_str(k)?)?);
                }
            }
            _ => {
                let n = match checkpoint {
                    Some(_) => held,
                    None => target.row_count(&t_sql)?,
                };
                if n > 0 {
                    bail!(
                        "target table '{}' in {} already holds {n} rows{}; pass --replace to delete them and load again. Nothing was written",
                        t.target_table,
                        target.location(),
                        match checkpoint {
                            Some((_, rows, true)) => format!(
                                ", not the {rows} its completed load recorded (the target changed since)"
                            ),
                            Some((_, rows, false)) => format!(
                                ", not the {rows} its interrupted load recorded (the target changed since)"
                            ),
                            None => String::new(),
                        }
                    );
                }
                // Empty (emptied by hand since a load, say by TRUNCATE): a
                // fresh load over the old checkpoint, which its first batch
                // replaces.
                seen = checkpoint.as_ref().map_or(0, |c| c.1);
            }
        }
        let mut tl = TableLoad {
            name: t.name.clone(),
            loaded: 0,
            already_present: 0,
            resumed_after: resume.as_deref().map(key_json),
            batches: 0,
            complete_before: false,
        };
        // Canonical rows waiting for their batch, in blocks as they came.
        let mut pending: Vec<Block> = Vec::new();
        let mut pending_rows = 0usize;
        let mut total = rows_before;
        let mut clear = replace;
        let sequence = source.sequence(&t.source_table)?;
        let mut flush = |pending: &mut Vec<Block>, done: bool| -> Result<()> {
            let n: usize = pending.iter().map(Block::rows).sum();
            let last_key = pending
                .iter()
                .rev()
                .find(|b| b.rows() > 0)
                .map(|b| key_json(&b.values(b.rows() - 1, t.key_len)).to_string());
            let checkpoint = LoadCheckpoint {
                table: &t.name,
                target_table: &t.target_table,
                last_key,
                expect_rows: seen,
                rows: total + n as i64,
                done,
                clear: std::mem::take(&mut clear),
                sequence,
            };
            match engine.load_rows(ti, pending, total + 1, &checkpoint)? {
                BatchOutcome::Committed(a) => {
                    total += n as i64;
                    seen = total;
                    tl.loaded += a.written;
                    tl.already_present += a.duplicate;
                    tl.batches += u64::from(n > 0);
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
                    target.location()
                ),
                other => bail!("unexpected outcome of a load batch: {other:?}"),
            }
            pending.clear();
            Ok(())
        };
        if replace {
            // Empty the table in its own first transaction, together with a
            // reset checkpoint, so a crash after it resumes a fresh load.
            flush(&mut Vec::new(), false)?;
        }
        let total = if progress::visible() {
            Some(source.row_count(&s_sql)? as u64)
        } else {
            None
        };
        let bar = Progress::new(&format!("load {}", t.name), total);
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
            let (s_sql, resume) = (&s_sql, &resume);
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
                    flush(&mut pending, false)?;
                    validation.poll(engine)?;
                }
            }
            drop(blocks);
            reconcile::joined(reader, "source")
        })?;
        flush(&mut pending, true)?;
        validation.poll(engine)?;
        tables.push(tl);
    }
    Ok(tables)
}

impl LoadReport {
    fn invalid(bad: InvalidRow) -> LoadReport {
        LoadReport {
            verdict: Verdict::Fail,
            tables: Vec::new(),
            invalid: Some(bad),
        }
    }
}

/// The report as text: rows loaded per table, or the invalid row.
pub fn render(rep: &LoadReport) -> String {
    if let Some(bad) = &rep.invalid {
        return format!(
            "load: FAIL, nothing was written\ntable '{}', key {}, column '{}': {} ({})\nfix the source row (run `cutover check` to list every invalid row) and load again\n",
            bad.table,
            display_key(&bad.key),
            bad.column,
            bad.value,
            bad.reason
        );
    }
    let mut text = report::table(
        &[
            "table",
            "rows loaded",
            "already present",
            "resumed after",
            "note",
        ],
        rep.tables.iter().map(|t| {
            vec![
                t.name.clone(),
                t.loaded.to_string(),
                t.already_present.to_string(),
                t.resumed_after
                    .as_ref()
                    .map(|k| k.to_string())
                    .unwrap_or_default(),
                if t.complete_before {
                    "already loaded; nothing to do".into()
                } else {
                    String::new()
                },
            ]
        }),
    );
    text.push_str(
        "\nload: done; next run `cutover gate` to prove the target holds exactly the source\n",
    );
    text
}
