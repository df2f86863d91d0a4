//! The journal: `AFTER INSERT/UPDATE/DELETE` triggers on every target table
//! of the spec, writing each change with its before- and after-image into
//! `_cutover_journal`, in commit order. It is what a rollback replays.

use anyhow::{Result, bail};
use serde::Serialize;

use crate::db::{Access, Db};
use crate::report::{self, Outcome};
use crate::spec::{self, Spec};

#[derive(Debug, Serialize)]
struct TableStatus {
    name: String,
    triggers: usize,
    insert: i64,
    update: i64,
    delete: i64,
}

#[derive(Debug, Serialize)]
struct JournalReport {
    action: &'static str,
    installed: bool,
    entries: i64,
    last_seq: i64,
    fenced_at_boundary: Option<i64>,
    tables: Vec<TableStatus>,
}

/// Whether every table of the spec has its three journal triggers.
pub fn installed(spec: &Spec, target: &Db) -> Result<bool> {
    for t in &spec.tables {
        if target.journal_triggers(&t.target_table)? != 3 {
            return Ok(false);
        }
    }
    target.has_journal()
}

pub fn install(spec: &Spec) -> Result<Outcome> {
    let (_, target, _) = spec::open(spec, Access::Read, Access::Write)?;
    target.begin_immediate()?;
    let r = (|| -> Result<()> {
        target.ensure_control_tables()?;
        for t in &spec.tables {
            target.install_journal(&t.name, &t.target_table, &t.target_names(), t.key_len)?;
        }
        target.commit()
    })();
    if r.is_err() {
        target.rollback();
    }
    r?;
    status_report(
        spec,
        &target,
        "install",
        "journal: installed; every insert, update and delete on the target is now recorded\n",
    )
}

pub fn remove(spec: &Spec) -> Result<Outcome> {
    let (_, target, _) = spec::open(spec, Access::Read, Access::Write)?;
    if let Some(b) = target.fence_row()?.map(|f| f.boundary) {
        bail!(
            "target {} is fenced at boundary {b}; the journal is what the rollback replays. Finish the replay and run `cutover fence off` first",
            target.path().display()
        );
    }
    target.begin_immediate()?;
    let r = (|| -> Result<()> {
        for t in &spec.tables {
            target.remove_journal(&t.target_table)?;
        }
        target.commit()
    })();
    if r.is_err() {
        target.rollback();
    }
    r?;
    status_report(
        spec,
        &target,
        "remove",
        "journal: triggers removed; writes are no longer recorded. The entries already in _cutover_journal are kept\n",
    )
}

pub fn status(spec: &Spec) -> Result<Outcome> {
    let (_, target, _) = spec::open(spec, Access::Read, Access::Read)?;
    status_report(spec, &target, "status", "")
}

fn status_report(
    spec: &Spec,
    target: &Db,
    action: &'static str,
    headline: &str,
) -> Result<Outcome> {
    let counts = target.journal_counts()?;
    let (entries, last_seq) = target.journal_extent()?;
    let mut tables = Vec::new();
    for t in &spec.tables {
        let get = |op: &str| {
            counts
                .iter()
                .find(|(n, o, _)| *n == t.name && o == op)
                .map_or(0, |c| c.2)
        };
        tables.push(TableStatus {
            name: t.name.clone(),
            triggers: target.journal_triggers(&t.target_table)?,
            insert: get("insert"),
            update: get("update"),
            delete: get("delete"),
        });
    }
    let installed = tables.iter().all(|t| t.triggers == 3) && target.has_journal()?;
    let rep = JournalReport {
        action,
        installed,
        entries,
        last_seq,
        fenced_at_boundary: target.fence_row()?.map(|f| f.boundary),
        tables,
    };
    let mut text = String::from(headline);
    text.push_str(&report::table(
        &["table", "triggers", "insert", "update", "delete"],
        rep.tables.iter().map(|t| {
            vec![
                t.name.clone(),
                format!("{}/3", t.triggers),
                t.insert.to_string(),
                t.update.to_string(),
                t.delete.to_string(),
            ]
        }),
    ));
    text.push('\n');
    text.push_str(&report::pairs(&[
        ("journal_entries", entries.to_string()),
        ("last_seq", last_seq.to_string()),
        (
            "fence",
            rep.fenced_at_boundary
                .map_or("off".into(), |b| format!("on, journal_boundary={b}")),
        ),
    ]));
    Outcome::new(true, &rep, text)
}
