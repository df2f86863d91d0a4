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

use crate::apply::Applier;
use crate::canonical::Note;
use crate::db::{Access, Db};
use crate::reconcile;
use crate::report::{self, Report, Verdict};
use crate::schema;
use crate::spec::{Location, Side, Spec};
use crate::value::{Row, Value, display_key, key_json};

mod cursor;
mod tables;

use tables::{Validation, load_tables};

#[derive(Debug, Serialize)]
pub struct TableLoad {
    pub name: String,
    pub loaded: u64,
    pub already_present: u64,
    pub resumed_after: Option<serde_json::Value>,
    pub batches: u64,
    /// A completed load of this table was found; nothing was done.
    pub complete_before: bool,
    /// The watermarks this run copied, for the first sync's cursor.
    #[serde(skip)]
    pub span: cursor::Span,
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
    let cycles = refuse_before_writing(spec, &target)?;

    // A stopped load's session may still be ending on the server: its
    // transaction settles (rolled back, or committed) before the
    // checkpoints are read.
    let tables: Vec<&str> = spec
        .tables
        .iter()
        .map(|t| t.target_table.as_str())
        .collect();
    target
        .connection()
        .await_other_runs(&tables, &mut |m| eprintln!("load: {m}"))?;

    // Every row (its columns, key order and uniqueness) is validated
    // before the first commit. A database source is validated over a second
    // connection, on its own thread, while the load writes: the batches are
    // held in one open transaction until the validation ends. A CSV source is
    // materialised once, so it is validated first.
    let beside = !matches!(spec.source, Location::Csv(_));
    if !beside && let Some(bad) = validate(spec, &mut source)? {
        return Ok(LoadReport::invalid(bad));
    }
    let engine = Applier::new(&spec.tables, &target, Side::Target);
    let rep = std::thread::scope(|scope| {
        let mut validation = Validation::Done;
        if !cycles.is_empty() {
            engine.hold_whole()?;
        } else if beside {
            engine.hold()?;
        }
        if beside {
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
    })?;
    if rep.verdict == Verdict::Pass {
        cursor::record(spec, &mut source, &target, &rep.tables)?;
    }
    Ok(rep)
}

/// What refuses a load before anything is written: a fenced or journaled
/// target, a cycle of foreign keys no order gets past. The foreign keys on
/// cycles the load defers to its commit.
fn refuse_before_writing(
    spec: &Spec,
    target: &Db,
) -> Result<Vec<(usize, usize, crate::db::ForeignKey)>> {
    crate::schema::refuse_if_fenced(
        target,
        "load would write into a database under rollback. Nothing was written",
    )?;
    for t in &spec.tables {
        if target.catalogue().own_triggers(&t.target_table)?.journal > 0 {
            bail!(
                "table '{}' in target {} is journaled; a load now would journal every row. Run `cutover journal remove` first if this really is a fresh load. Nothing was written",
                t.name,
                target.location()
            );
        }
    }

    // Tables whose keys refer to each other in a cycle load only in one
    // transaction that checks the keys at its commit; a key that cannot
    // wait for it is refused before anything is written.
    let cycles = spec.foreign_key_cycles(target.catalogue())?;
    refuse_binding_cycle(spec, target, &cycles)?;
    Ok(cycles)
}

/// Refuses a cycle of foreign keys between the spec's target tables with
/// a key its database checks at each statement (not `DEFERRABLE`), which
/// no order of the tables gets past: the keys, and what to do.
fn refuse_binding_cycle(
    spec: &Spec,
    target: &Db,
    cycles: &[(usize, usize, crate::db::ForeignKey)],
) -> Result<()> {
    let binding: Vec<&(usize, usize, crate::db::ForeignKey)> =
        cycles.iter().filter(|e| !e.2.deferrable).collect();
    let edges: Vec<(usize, usize, ())> = binding.iter().map(|e| (e.0, e.1, ())).collect();
    let on = schema::on_cycles(spec.tables.len(), &edges);
    let Some(&&(i, _, ref fk)) = binding.iter().zip(&on).find(|(_, c)| **c).map(|(e, _)| e) else {
        return Ok(());
    };
    let shown: Vec<String> = binding
        .iter()
        .zip(&on)
        .filter(|(_, c)| **c)
        .map(|((c, _, k), _)| {
            let cols: Vec<&str> = k.columns.iter().map(|c| c.0.as_str()).collect();
            format!(
                "{}({}) → {} ({})",
                spec.tables[*c].target_table,
                cols.join(", "),
                k.parent,
                k.name.as_deref().unwrap_or("unnamed"),
            )
        })
        .collect();
    let table = &spec.tables[i].target_table;
    let name = fk.name.as_deref().unwrap_or("…");
    bail!(
        "target {}: tables of the spec refer to each other through foreign keys in a cycle that are checked at each statement (not DEFERRABLE): {}. No order loads one before the other. Make one of them DEFERRABLE (PostgreSQL: ALTER TABLE {table} ALTER CONSTRAINT {name} DEFERRABLE), and load writes the cycle's tables in one transaction whose commit checks every key; or drop the key for the load and add it back after. Nothing was written",
        target.location(),
        shown.join(", ")
    );
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
pub(super) struct Invalid(pub(super) InvalidRow);

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
