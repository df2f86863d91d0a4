//! `cutover status`: where the migration stands (loaded, journaling, fenced,
//! replayed k of n, rolled back) and the next command the runbook calls for.
//! Reads counters and control tables; with a fence on, it re-reads the fence's
//! fingerprint (a scan of the fenced tables) to say whether it still holds.

use anyhow::Result;
use serde::Serialize;

use crate::db::Access;
use crate::report::{self, Outcome};
use crate::schema;
use crate::spec::Spec;

#[derive(Debug, Serialize)]
struct StatusReport {
    phase: String,
    next: String,
    target_rows: i64,
    journal_installed: bool,
    journal_entries: i64,
    fenced: bool,
    boundary: Option<i64>,
    replayed: i64,
    to_replay: i64,
    /// How the target differs from the spec and journal (an alarm).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    drift: Vec<String>,
    /// Per synced table: its sync batches so far and where the cursor is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    sync: Vec<serde_json::Value>,
}

pub fn run(spec: &Spec) -> Result<Outcome> {
    // No schema check: a target whose schema drifted after the switch is
    // exactly what status must report, not refuse.
    let source = schema::open_source(spec, None, Access::Read)?;
    let target = crate::db::Db::open(&spec.target, Access::Read, "target")?;
    if target.journal_id()?.is_none() {
        // Before the switch, a spec that does not fit is an error to fix.
        schema::open(spec, Access::Read, Access::Read)?;
    }
    let mut target_rows = 0;
    for t in &spec.tables {
        target_rows += target.row_count(&target.target_sql(t)).unwrap_or(0);
    }
    let journal_installed = crate::journal::installed(spec, &target)?;
    let (journal_entries, _) = target.journal_extent()?;
    let fence = crate::fence::read(&target)?;
    let journal = crate::journal::identity(&target)?;
    let (replayed, _) = match &journal {
        Some(j) => source.applied_progress(j)?,
        None => (0, 0),
    };
    // Once a journal exists, the target must stay as the spec describes it:
    // drift or a missing trigger means writes may be unjournaled.
    let drift = if journal.is_some() {
        crate::journal::drift(spec, &target)?
    } else {
        Vec::new()
    };
    let spec_arg = format!("--spec {}", spec.path.display());
    let mut load_incomplete = Vec::new();
    for t in &spec.tables {
        if let Some((_, _, false)) = target.load_checkpoint(&t.name)? {
            load_incomplete.push(t.name.clone());
        }
    }
    let (phase, next, to_replay) = match &fence {
        Some(f) => {
            let n = target.journal_count_between(target.journal_start()?, f.boundary)?;
            if let Some(what) = f.breach(&target, spec)? {
                (
                    format!(
                        "fence BREACHED: {what} (fenced at boundary {}, replayed {replayed} of {n})",
                        f.boundary
                    ),
                    format!(
                        "stop: find what changed with cutover fence status {spec_arg}; then re-plan the rollback (cutover fence off --force, cutover fence on, cutover replay --dry-run)"
                    ),
                    n,
                )
            } else if replayed >= n {
                (
                    format!("rolled back (fenced at boundary {}, replayed {replayed} of {n})", f.boundary),
                    "switch the application back to the source; keep the fence on. Confirm with `cutover gate`".to_string(),
                    n,
                )
            } else {
                (
                    format!(
                        "fenced at boundary {}, replayed {replayed} of {n}",
                        f.boundary
                    ),
                    format!("cutover replay {spec_arg}"),
                    n,
                )
            }
        }
        // A rollback that finished, and whose fence was lifted afterwards.
        None if replayed > 0 && journal_installed => (
            format!(
                "rolled back, fence lifted (replayed {replayed} entries); the journal is still installed"
            ),
            format!("when the target is retired: cutover journal remove {spec_arg}"),
            replayed,
        ),
        None if replayed > 0 => (
            format!(
                "rolled back and finished (replayed {replayed} entries; fence and journal removed)"
            ),
            "nothing; the source is the system of record again".to_string(),
            replayed,
        ),
        None if journal_installed => (
            format!("journaling ({journal_entries} entries)"),
            format!(
                "if the cutover fails: cutover fence on {spec_arg}, then cutover replay {spec_arg}"
            ),
            0,
        ),
        None if !load_incomplete.is_empty() => (
            format!("load incomplete (tables {})", load_incomplete.join(", ")),
            format!("cutover load {spec_arg} (it resumes after the last committed batch)"),
            0,
        ),
        None if target_rows > 0 => (
            "loaded".to_string(),
            format!("cutover gate {spec_arg}; at the switch: cutover journal install {spec_arg}"),
            0,
        ),
        None => (
            "not loaded".to_string(),
            format!("cutover check {spec_arg}, then cutover load {spec_arg}"),
            0,
        ),
    };
    let (phase, next) = if drift.is_empty() {
        (phase, next)
    } else {
        (
            format!("ALARM: {} ({phase})", drift.join("; ")),
            format!(
                "if the cutover is failing: cutover fence on {spec_arg} (it fences the target as it is); otherwise carry the change into the spec and run cutover journal install {spec_arg}"
            ),
        )
    };
    let mut rep = StatusReport {
        drift,
        phase,
        next,
        target_rows,
        journal_installed,
        journal_entries,
        fenced: fence.is_some(),
        boundary: fence.as_ref().map(|f| f.boundary),
        replayed,
        to_replay,
        sync: Vec::new(),
    };

    for t in spec.tables.iter().filter(|t| t.watermark.is_some()) {
        let batches = target.sync_batches(&t.name)?.len();
        let cursor = target.sync_cursor(&t.name)?;
        rep.sync.push(serde_json::json!({
            "table": t.name,
            "batches": batches,
            "cursor": cursor.map(|(w, k)| serde_json::json!({ "watermark": w.to_json(), "key": serde_json::from_str::<serde_json::Value>(&k).unwrap_or_default() })),
        }));
    }
    let sync_lines: Vec<(String, String)> = rep
        .sync
        .iter()
        .map(|s| {
            let at = match &s["cursor"] {
                serde_json::Value::Null => "no sync yet".to_string(),
                c => format!("cursor ({}, {})", c["watermark"], c["key"]),
            };
            (
                format!("sync {}", s["table"].as_str().unwrap_or("")),
                format!("{} batches, {at}", s["batches"]),
            )
        })
        .collect();
    let mut text = report::pairs(&[
        ("phase", rep.phase.clone()),
        ("target_rows", rep.target_rows.to_string()),
        (
            "journal",
            if rep.journal_installed {
                format!("installed, {} entries", rep.journal_entries)
            } else {
                format!("not installed ({} entries)", rep.journal_entries)
            },
        ),
        (
            "fence",
            rep.boundary
                .map_or("off".into(), |b| format!("on, journal_boundary={b}")),
        ),
        ("replayed", format!("{} of {}", rep.replayed, rep.to_replay)),
        ("next", rep.next.clone()),
    ]);
    for (k, v) in &sync_lines {
        text.push_str(&format!("{k}  {v}\n"));
    }
    Outcome::new(rep.drift.is_empty(), &rep, text)
}
