//! What the source's own triggers and rules allow a replay: one whose
//! effect the role cannot hold (switch off for replay's writes) refuses the
//! replay before anything is written.

use anyhow::{Result, bail};

use crate::db::Db;
use crate::side_effects::Policy;

/// Refuses, before anything is written, a replay whose source has triggers
/// or rules the role cannot hold, each named with why.
pub fn refuse_unheld(policy: &Policy, source: &Db) -> Result<()> {
    let unheld: Vec<String> = policy
        .unheld_triggers()
        .map(|d| {
            format!(
                "source {} '{}' on '{}': {}",
                d.effect.kind,
                d.effect.name,
                d.effect.table,
                d.cannot.as_deref().unwrap_or_default()
            )
        })
        .collect();
    if !unheld.is_empty() {
        bail!(
            "replay cannot keep its promise on source {} and wrote nothing:\n  {}",
            source.location(),
            unheld.join("\n  ")
        );
    }
    Ok(())
}
