//! How the target differs from what the spec and the journal expect: a
//! table gone, columns the spec does not map or maps but the table lacks,
//! journal triggers missing or out of date. Writes there may be unjournaled,
//! which `status` raises as an alarm and `fence on` reports.

use anyhow::Result;

use crate::db::{Db, JournalLogExt};
use crate::spec::Spec;

/// Whether every table of the spec has its journal triggers, as the spec
/// needs them now.
pub fn installed(spec: &Spec, target: &Db) -> Result<bool> {
    if !target.identity().installed()? {
        return Ok(false);
    }
    for t in &spec.tables {
        if !stale(t, target)?.is_empty() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The journal triggers of a table that are missing or out of date.
pub fn stale(t: &crate::spec::Table, target: &Db) -> Result<Vec<String>> {
    let columns = t.target_names();
    target
        .capture()
        .stale_journal_triggers(&super::journaled(t, &columns))
}

/// How the target differs from what the spec and the journal expect: each
/// table missing, with columns the spec does not map or maps but the table
/// lacks, or with journal triggers missing or out of date.
pub fn drift(spec: &Spec, target: &Db) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for t in &spec.tables {
        // Since when: the table's last journaled write.
        let since = match target.journal().last_journaled(&t.name)? {
            Some(seq) => format!("writes after journal seq {seq}, the table's last entry,"),
            None => "writes since journal install".to_string(),
        };
        let cols = target.catalogue().table_columns(&t.target_table)?;
        if cols.is_empty() {
            out.push(format!(
                "table {} is gone from the target; {since} may be unjournaled",
                t.target_table
            ));
            continue;
        }
        // A generated column is the target's to compute: no write sets
        // it, so there is nothing to journal or carry back.
        let generated = target.catalogue().generated_columns(&t.target_table)?;
        let extra: Vec<&str> = cols
            .iter()
            .map(|c| c.name.as_str())
            .filter(|c| {
                !t.columns.iter().any(|x| x.target == *c)
                    && !t.target_defaults.iter().any(|d| d == c)
                    && !generated.iter().any(|g| g.name == *c)
            })
            .collect();
        let missing: Vec<&str> = t
            .columns
            .iter()
            .map(|c| c.target.as_str())
            .filter(|c| !cols.iter().any(|x| x.name == *c))
            .collect();
        // One column gone and one new is said once, below, as a rename.
        let renamed = missing.len() == 1 && extra.len() == 1;
        if !extra.is_empty() && !renamed {
            out.push(format!(
                "table {} has columns the spec does not map: {} (writes to them are not journaled; add them to the source, map them in the spec and run `cutover journal install` again: replay reports the values written before then as not journaled, by key)",
                t.target_table,
                extra.join(", ")
            ));
        }
        if !missing.is_empty() {
            // One column gone and one new: most likely a rename.
            let hint = match (&missing[..], &extra[..]) {
                ([from], [to]) => format!(
                    "if '{from}' was renamed to '{to}', set target = \"{to}\" and was = [\"{from}\"] in its [[tables.columns]] entry and run `cutover journal install` again; the entries before keep the name '{from}', which was = […] lets replay read"
                ),
                _ => "renamed or dropped after the switch: map the new name, or keep the journaled one, before the replay".to_string(),
            };
            out.push(format!(
                "table {} lacks columns the spec maps: {} ({hint})",
                t.target_table,
                missing.join(", ")
            ));
        }
        let stale = stale(t, target)?;
        if !stale.is_empty() {
            out.push(format!(
                "table {}: journal triggers missing or out of date ({}); {since} may be unjournaled or out of order. Run `cutover journal install` again",
                t.target_table,
                stale.join(", ")
            ));
        }
    }
    Ok(out)
}
