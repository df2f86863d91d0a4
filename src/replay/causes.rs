//! What the closing reconciliation's differences trace to: the source's
//! triggers and rules that fired on replay's writes and set a differing
//! column, and the values of a column the journal never saw (added to the
//! target after `journal install`).

use anyhow::Result;

use crate::db::Db;
use crate::reconcile;
use crate::side_effects::Policy;
use crate::spec::Spec;

/// The keys whose value of a column added to the target after `journal
/// install` the journal never saw: entries recorded before the column was
/// journaled carry none (replay left the source's value, or the column's
/// default in a row it inserted), and the reconciliation found the source
/// differing there. One line per column.
pub fn unjournaled(
    spec: &Spec,
    target: &Db,
    rec: &reconcile::Reconciliation,
) -> Result<Vec<String>> {
    let reader = crate::journal::Reader::new(spec, target)?;
    let mut out = Vec::new();
    for (ti, col) in reader.unjournaled() {
        let t = &spec.tables[*ti];
        let keys: Vec<String> = rec
            .diffs
            .iter()
            .filter(|d| d.table == t.name && d.column.as_deref() == Some(col.as_str()))
            .map(|d| d.key.to_string())
            .collect();
        if keys.is_empty() {
            continue;
        }
        out.push(format!(
            "column '{col}' of table '{}' was added after `journal install`: its values written before the journal was installed again are not journaled, keys {}{} (the entries recorded before carry no value for it: replay left the source's own value there, or the column's default in a row it inserted). Copy them into the source by hand, then run `cutover replay` again",
            t.target_table,
            keys.join(", "),
            if rec.diffs_found as usize > rec.diffs.len() {
                " (and perhaps more, past the differences listed)"
            } else {
                ""
            }
        ));
    }
    Ok(out)
}

/// What the closing reconciliation's differences can be traced to: for each
/// differing column, the source's triggers and rules that fired on replay's
/// writes and set it. Only what cutover can see is named.
pub fn causes(spec: &Spec, policy: &Policy, rec: &reconcile::Reconciliation) -> Vec<String> {
    let mut out = Vec::new();
    for d in &rec.diffs {
        let Some(t) = spec.table(&d.table) else {
            continue;
        };
        let Some(col) = &d.column else { continue };
        let Some(c) = t.columns.iter().find(|c| c.target == *col) else {
            continue;
        };
        for w in policy.writers_of(&t.source_table, &c.source) {
            let line = format!(
                "column '{}' of '{}' is set by source {} '{}' ({}), which fired on replay's writes: {}",
                c.source,
                t.source_table,
                w.effect.kind,
                w.effect.name,
                w.effect.when,
                fix(policy, &w.effect.name)
            );
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}

/// What an operator can do about a trigger or rule that made the source
/// differ, on the source's engine: where no connection can switch a trigger
/// off (SQLite, MySQL), change or drop it for the rollback; elsewhere the
/// spec can have replay suppress it.
fn fix(policy: &Policy, name: &str) -> String {
    let p = &policy.powers;
    if p.triggers_always_fire || p.triggers_fixed {
        format!(
            "this engine cannot switch a trigger off for one connection, so drop '{name}' for the rollback and create it again once replay is done, or change it to leave the carried column alone"
        )
    } else {
        format!("say suppress for '{name}' in the table's replay_policy")
    }
}
