//! The journal put on the target in one write transaction: its identity
//! (renewed when the source has already taken entries of it back), an image
//! table per spec table, the triggers, and a rolled-back write through each
//! that proves them.

use anyhow::{Result, bail};

use super::new_identity;
use crate::db::Db;
use crate::spec::Spec;

/// A journal already replayed into the source, begun again under a new
/// identity: (old identity, new identity, the last seq before the new
/// attempt).
pub type Renewed = (String, String, i64);

/// Installs the journal of `spec` on `target`, proven; `Err` leaves the
/// target unchanged. The triggers created or replaced (none: already up to
/// date), and the identity renewed, if it was.
pub fn install(spec: &Spec, source: &Db, target: &Db) -> Result<(usize, Option<Renewed>)> {
    let names: Vec<&str> = spec.tables.iter().map(|t| t.name.as_str()).collect();
    let mut renewed = None;
    let r = target.write(|| -> Result<usize> {
        target.ensure_control_tables()?;
        match target.journal_id()? {
            None => target.set_journal_id(&new_identity(target), &names)?,
            Some((id, tables)) => {
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
                target.set_journal_tables(&names)?;
                // The source has taken entries of this journal back: that
                // attempt was rolled back, and an install on an unfenced
                // target (restored from a copy, say, whose seqs start over)
                // begins a new attempt, under a new identity, after the
                // entries already there.
                if target.fence_row()?.is_none()
                    && source.applied_progress(&format!("journal-{id}"))?.0 > 0
                {
                    let (_, last) = target.journal_extent()?;
                    let fresh = new_identity(target);
                    target.renew_journal_id(&fresh, last)?;
                    renewed = Some((format!("journal-{id}"), format!("journal-{fresh}"), last));
                }
            }
        }
        // Every image table exists (and an earlier cutover's journal is on
        // the list of entries) before any trigger is written.
        for t in &spec.tables {
            target.image_for(&t.name, &t.target_table, &t.target_names())?;
        }
        let mut changed = 0;
        for t in &spec.tables {
            changed +=
                target.install_journal(&t.name, &t.target_table, &t.target_names(), t.key_len)?;
        }
        // Each table's triggers proved with writes that are rolled back: a
        // row taken out, put back and rewritten must journal exactly
        // itself, with `trusted_schema=OFF` as a hardened application runs.
        // An empty table has no row to write; its triggers are compiled
        // instead.
        let proofs: Vec<(&str, &str, Vec<&str>, usize)> = spec
            .tables
            .iter()
            .map(|t| {
                (
                    t.name.as_str(),
                    t.target_table.as_str(),
                    t.target_names(),
                    t.key_len,
                )
            })
            .collect();
        target.prove_journals(&proofs).map_err(|(i, e)| {
            e.context(format!(
                "proving the journal triggers of table '{}' with a write that was rolled back: an application write would fail the same way",
                spec.tables[i].target_table
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
