//! `cutover journal install|remove|status`: the journal (src/journal/) put
//! on the target's tables, taken off, or counted, and the report each gives.

use anyhow::{Result, bail};
use serde::Serialize;

use crate::db::{Access, Db, JournalLogExt};
use crate::journal::stale;
use crate::report::{self, Report};
use crate::schema;
use crate::spec::Spec;

mod export;

pub use export::{ExportReport, export, render_export};

#[derive(Debug, Serialize)]
pub struct TableStatus {
    pub name: String,
    pub triggers: usize,
    /// How many journal triggers a table has on the target's engine.
    #[serde(skip)]
    pub triggers_per_table: usize,
    /// Journal triggers missing or out of date.
    pub stale: Vec<String>,
    pub insert: i64,
    pub update: i64,
    pub delete: i64,
}

/// Which journal command made a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Install,
    Remove,
    Status,
}

/// The journal as `journal install`, `remove` or `status` leaves it.
#[derive(Debug, Serialize)]
pub struct JournalReport {
    pub action: Action,
    pub installed: bool,
    pub journal: Option<crate::db::JournalId>,
    pub entries: i64,
    pub last_seq: i64,
    pub fenced_at_boundary: Option<i64>,
    pub tables: Vec<TableStatus>,
    /// Install: triggers created or replaced (none: already up to date).
    #[serde(skip)]
    pub triggers_changed: usize,
    /// Install: the journal already replayed into the source, as
    /// (old identity, new identity, the last seq before the new attempt).
    #[serde(skip)]
    pub renewed: Option<crate::journal::install::Renewed>,
}

/// A journal command that returns a report did what it was asked; what
/// fails is an error.
impl Report for JournalReport {
    fn holds(&self) -> bool {
        true
    }
}

pub fn install(spec: &Spec) -> Result<JournalReport> {
    let (source, target, _) = schema::open(spec, Access::Read, Access::Write)?;
    refuse_undecided(spec, &source, &target)?;
    let (changed, renewed) = crate::journal::install::install(spec, &source, &target)?;
    let mut rep = status_report(spec, &target, Action::Install)?;
    rep.triggers_changed = changed;
    rep.renewed = renewed;
    Ok(rep)
}

/// Refuses, before anything is written, while `check` names a hazard the
/// spec has not decided: after the switch a write that crosses it cannot
/// go back, and nobody said so was acceptable.
fn refuse_undecided(spec: &Spec, source: &Db, target: &Db) -> Result<()> {
    let hazards = crate::hazards::of(spec, source, target)?;
    let open: Vec<_> = crate::hazards::undecided(&hazards).collect();
    let Some(first) = open.first() else {
        return Ok(());
    };
    bail!(
        "spec {}: {} hazard(s) undecided, the first: table '{}', source column '{}' ({}): {} hazard: {}. After the switch such a write cannot go back. Decide each before installing the journal: widen the source column, add the target CHECK that `cutover check --spec {}` prints, or accept it with {}; nothing was changed",
        spec.path.display(),
        open.len(),
        first.table,
        first.column,
        first.source_type,
        first.kind.name(),
        first.why,
        spec.path.display(),
        first.acceptance()
    )
}

pub fn remove(spec: &Spec) -> Result<JournalReport> {
    let (_, target, _) = schema::open(spec, Access::Read, Access::Write)?;
    crate::schema::refuse_if_fenced(
        &target,
        "the journal is what the rollback replays. Finish the replay and run `cutover fence off` first",
    )?;
    target.write(|| {
        for t in &spec.tables {
            target.capture().remove_journal(&t.target_table)?;
        }
        Ok(())
    })?;
    status_report(spec, &target, Action::Remove)
}

pub fn status(spec: &Spec) -> Result<JournalReport> {
    let (_, target, _) = schema::open(spec, Access::Read, Access::Read)?;
    status_report(spec, &target, Action::Status)
}

fn status_report(spec: &Spec, target: &Db, action: Action) -> Result<JournalReport> {
    let counts = target.journal().counts_by_table()?;
    let extent = target.journal().journal_extent()?;
    let (entries, last_seq) = (extent.entries, extent.last);
    let mut tables = Vec::new();
    for t in &spec.tables {
        // A table the journal holds no entry of has none of any op.
        let of_table = counts
            .iter()
            .find(|(n, _)| *n == t.name)
            .map(|(_, c)| *c)
            .unwrap_or_default();
        tables.push(TableStatus {
            name: t.name.clone(),
            triggers: target.catalogue().own_triggers(&t.target_table)?.journal,
            triggers_per_table: target.engine().journal_triggers,
            stale: stale(t, target)?,
            insert: of_table.insert,
            update: of_table.update,
            delete: of_table.delete,
        });
    }
    let installed = tables.iter().all(|t| t.stale.is_empty()) && target.identity().installed()?;
    Ok(JournalReport {
        action,
        installed,
        journal: target.identity().id()?,
        entries,
        last_seq,
        fenced_at_boundary: target.fence_records().row()?.map(|f| f.boundary),
        tables,
        triggers_changed: 0,
        renewed: None,
    })
}

/// The report as text: what the command did, then triggers and entries
/// per table, and the journal's extent.
pub fn render(rep: &JournalReport) -> String {
    let mut text = String::new();
    match rep.action {
        Action::Install => {
            if let Some(r) = &rep.renewed {
                text.push_str(&format!(
                    "journal: {} was already replayed into the source; this is a new attempt, journaled as {} from seq {}\n",
                    r.old,
                    r.new,
                    r.after + 1
                ));
            }
            text += &if rep.triggers_changed == 0 {
                "journal: already installed and up to date; nothing changed\n".to_string()
            } else {
                format!(
                    "journal: installed ({} triggers created or replaced); every insert, update and delete on the target is now recorded\n\
                     journal: its triggers name every column the spec maps. To drop one of them, take it out of the spec first (the source column in ignore, the target column default = true) and run `cutover journal install` again, then drop it: on SQLite ALTER TABLE … DROP COLUMN fails while the triggers name it, on PostgreSQL every write to the table fails after it until the journal is installed again (RUNBOOK B1a)\n",
                    rep.triggers_changed
                )
            };
        }
        Action::Remove => text.push_str(
            "journal: triggers removed; writes are no longer recorded. The entries already in _cutover_journal are kept\n",
        ),
        Action::Status => {}
    }
    text.push_str(&report::table(
        &["table", "triggers", "insert", "update", "delete"],
        rep.tables.iter().map(|t| {
            vec![
                t.name.clone(),
                if t.stale.is_empty() {
                    format!("{}/{}", t.triggers, t.triggers_per_table)
                } else {
                    format!(
                        "{}/{}, {} stale",
                        t.triggers,
                        t.triggers_per_table,
                        t.stale.len()
                    )
                },
                t.insert.to_string(),
                t.update.to_string(),
                t.delete.to_string(),
            ]
        }),
    ));
    text.push('\n');
    text.push_str(&report::pairs(&[
        ("journal_entries", rep.entries.to_string()),
        ("last_seq", rep.last_seq.to_string()),
        (
            "fence",
            rep.fenced_at_boundary
                .map_or("off".into(), |b| format!("on, journal_boundary={b}")),
        ),
    ]));
    text
}
