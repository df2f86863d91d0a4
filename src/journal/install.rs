//! The journal put on the target in one write transaction: its identity
//! (renewed when the source has already taken entries of it back), an image
//! table per spec table, the triggers, and a rolled-back write through each
//! that proves them.

use anyhow::{Result, bail};

use super::new_identity;
use crate::db::control::identity::Identity;
use crate::db::{Db, JournalId, Journaled};
use crate::spec::Spec;

/// A journal already replayed into the source, begun again under a new
/// identity after the entries already there.
#[derive(Clone, Debug)]
pub struct Renewed {
    pub old: JournalId,
    pub new: JournalId,
    /// The last seq before the new attempt.
    pub after: i64,
}

/// In a report, `[old, new, after]`, as `journal install --format json`
/// has always written it.
impl serde::Serialize for Renewed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        (self.old.as_str(), self.new.as_str(), self.after).serialize(s)
    }
}

/// Installs the journal of `spec` on `target`, proven; `Err` leaves the
/// target unchanged. The triggers created or replaced (none: already up to
/// date), and the identity renewed, if it was.
pub fn install(spec: &Spec, source: &Db, target: &Db) -> Result<(usize, Option<Renewed>)> {
    let names: Vec<&str> = spec.tables.iter().map(|t| t.name.as_str()).collect();
    let mut renewed = None;
    let r = target.schema_change(|| -> Result<usize> {
        target.progress().ensure_control_tables()?;
        match target.identity().get()? {
            None => target.identity().set(&new_identity(target), &names)?,
            Some(Identity { id, tables }) => {
                let other: Vec<&String> = tables
                    .iter()
                    .filter(|t| !names.contains(&t.as_str()))
                    .collect();
                if !other.is_empty() {
                    bail!(
                        "target {} already has a journal for tables {} that this spec does not list (another spec on the same file?). One journal per target file: list every table in one spec, or remove the other journal with its own spec first; nothing was changed",
                        target.location(),
                        other
                            .iter()
                            .map(|t| format!("'{t}'"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                target.identity().set_tables(&names)?;
                // The source has taken entries of this journal back: that
                // attempt was rolled back, and an install on an unfenced
                // target (restored from a copy, say, whose seqs start over)
                // begins a new attempt, under a new identity, after the
                // entries already there.
                if target.fence_records().row()?.is_none()
                    && source.applied_set().progress(id.as_str())?.entries > 0
                {
                    let last = target.journal().journal_extent()?.last;
                    let fresh = new_identity(target);
                    target.identity().renew(&fresh, last)?;
                    renewed = Some(Renewed {
                        old: id,
                        new: fresh,
                        after: last,
                    });
                }
            }
        }
        // Every image table exists (and an earlier cutover's journal is on
        // the list of entries) before any trigger is written.
        for t in &spec.tables {
            target.capture().image_for(&t.name, &t.target_table, &t.target_names())?;
        }
        let columns: Vec<Vec<&str>> = spec.tables.iter().map(|t| t.target_names()).collect();
        let tables: Vec<Journaled<'_>> = spec
            .tables
            .iter()
            .zip(&columns)
            .map(|(t, c)| super::journaled(t, c))
            .collect();
        let mut changed = 0;
        for t in &tables {
            changed += target.capture().install_journal(t)?;
        }
        // Each table's triggers proved with writes that are rolled back: a
        // row taken out, put back and rewritten must journal exactly
        // itself, with `trusted_schema=OFF` as a hardened application runs.
        // An empty table has no row to write; its triggers are compiled
        // instead.
        target.capture().prove_journals(&tables).map_err(|u| {
            u.error.context(format!(
                "proving the journal triggers of table '{}' with a write that was rolled back: an application write would fail the same way",
                spec.tables[u.table].target_table
            ))
        })?;
        Ok(changed)
    });
    let changed = r.map_err(|e| {
        e.context(format!(
            "the journal was not installed; {} is unchanged",
            target.location()
        ))
    })?;
    Ok((changed, renewed))
}
