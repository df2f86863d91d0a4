//! The replay's reports as text: the figures, each conflict with its rows
//! in both forms and what to do, the closing reconciliation and the verdict;
//! for a dry run, the plan and what the rolled-back replay met.

use crate::replay::{DryRunReport, Replay, ReplayReport};
use crate::replay::{Plan, cause, conflict_text};
use crate::report;
use crate::spec::Spec;

/// The report as text, the rows of a conflict in both forms (`spec` gives
/// the source form).
pub fn render(spec: &Spec, rep: &Replay) -> String {
    match rep {
        Replay::Ran(r) => render_replay(spec, r),
        Replay::DryRun(d) => render_dry_run(spec, d),
    }
}

fn render_dry_run(spec: &Spec, dry: &DryRunReport) -> String {
    let mut text = render_plan(&dry.plan);
    let Some(rep) = &dry.tried else {
        text.push_str(&format!(
            "dry run: {} is read-only for this user, so only the plan was made; the before-images, reverse transforms and the closing reconciliation were not checked. Nothing was written\n",
            dry.source
        ));
        return text;
    };
    let (conflicts, would_pass) = (&rep.conflicts, rep.verdict.holds());
    for c in conflicts {
        text.push_str(&conflict_text(spec, c));
        text.push_str(&format!("\n{}\n", cause(c)));
    }
    if let Some(b) = &rep.breach {
        text.push_str(&format!("\n{b}\n"));
    }
    for v in &rep.foreign_keys {
        text.push_str(&format!("foreign key: {v}\n"));
    }
    if let Some(rec) = &rep.reconciliation {
        text.push_str("\nreconciliation the replay would end with (source against target)\n");
        text.push_str(&report::reconciliation(rec));
        text.push('\n');
    }
    for d in &rep.drift {
        text.push_str(&format!("drift: {d}\n"));
    }
    if let Some(r) = &dry.rehearsal {
        text.push_str(&rehearsal_lines(r, conflicts.len(), would_pass));
        return text;
    }
    text.push_str(&if would_pass {
        "dry run: the replay would apply every entry and reconcile; nothing was written\n".to_string()
    } else if conflicts.is_empty() {
        "dry run: the replay would not reconcile (see above); nothing was written\n".to_string()
    } else {
        format!(
            "dry run: the replay would stop at {} conflict{} (each listed; later entries of those records left out); nothing was written\n",
            conflicts.len(),
            if conflicts.len() == 1 { "" } else { "s" }
        )
    });
    text
}

/// What a replay that did not reconcile left: nothing (docs/journal.md,
/// "The replay").
const NOTHING_WRITTEN: &str = "the replay was rolled back whole: nothing of it was written, and the source's id sequences and counters are as before";

fn render_replay(spec: &Spec, rep: &ReplayReport) -> String {
    let holds = rep.verdict.holds();
    let mut text = report::pairs(&[
        ("journal_boundary", rep.boundary.to_string()),
        ("entries", rep.entries.to_string()),
        ("previously_applied", rep.previously_applied.to_string()),
        ("applied", rep.applied.to_string()),
        ("already_in_place", rep.already_in_place.to_string()),
        ("gaps", rep.gaps.to_string()),
    ]);
    if rep.rolled_back > 0 {
        text.push_str(&report::pairs(&[(
            "rolled_back",
            format!(
                "{} (applied, then undone with the whole replay)",
                rep.rolled_back
            ),
        )]));
    }
    if let Some(c) = &rep.conflict {
        text.push_str(&conflict_text(spec, c));
        text.push_str(&format!("\n{NOTHING_WRITTEN}. {}\n", cause(c)));
    }
    for c in &rep.refused {
        text.push_str(&conflict_text(spec, c));
    }
    if !rep.refused.is_empty() {
        text.push_str(&format!(
            "\nreplay: REFUSED before writing anything: {} entr{} would set off a foreign-key action of the source that its role cannot switch off. Run replay as a superuser or a role granted SET on session_replication_role, or settle the referring rows in the source by hand, then run `cutover replay` again\n",
            rep.refused.len(),
            if rep.refused.len() == 1 { "y" } else { "ies" }
        ));
    }
    if let Some(b) = &rep.breach {
        text.push_str(&format!("\n{b}\nreplay stopped; {NOTHING_WRITTEN}\n"));
    }
    if !rep.foreign_keys.is_empty() {
        text.push_str(&format!(
            "\nFOREIGN KEYS: the replay left {} source rows whose parent row is missing (cutover never lets a cascade or SET NULL change rows the journal does not name, so the source's foreign keys are checked instead):\n",
            rep.foreign_keys.len()
        ));
        for v in &rep.foreign_keys {
            text.push_str(&format!("  {v}\n"));
        }
        text.push_str(match rep.accepted.is_empty() {
            true => "the replay was rolled back whole, nothing of it written. Restore the missing parents (or settle the children) by hand in the source, then run `cutover replay` again; or, to replay and leave them so, `cutover replay --accept-findings`, which records them as accepted\n",
            false => "accepted (--accept-findings): the replay is committed with these rows as they are, and the verdict lists them\n",
        });
    }
    if let Some(rec) = &rep.reconciliation {
        text.push_str("\nrollback reconciliation (source against target)\n");
        text.push_str(&report::reconciliation(rec));
        text.push('\n');
        if let Some(s) = &rep.summary {
            text.push_str(&format!("{s}\n"));
        }
        for c in &rep.causes {
            text.push_str(&format!("cause: {c}\n"));
        }
        for u in &rep.unjournaled {
            text.push_str(&format!("not journaled: {u}\n"));
        }
        for d in &rep.drift {
            text.push_str(&format!("drift: {d}\n"));
        }
        for a in &rep.accepted {
            text.push_str(&format!("accepted: {a}\n"));
        }
        text.push_str(&if holds && !rep.accepted.is_empty() {
            format!(
                "replay: done, {} ({}); the source holds the target's data but for the findings above, recorded as accepted. Switch the application back to the source only if they are what you mean to keep, and keep the fence on\n",
                crate::fence::ACCEPTED,
                rep.accepted.len()
            )
        } else if holds {
            "replay: done; the source holds exactly the target's data. Switch the application back to the source and keep the fence on\n".to_string()
        } else if !rep.unjournaled.is_empty() {
            format!("replay: FAIL; the source would not reconcile with the target: values the journal never saw (above). {NOTHING_WRITTEN}. Copy them into the source, then run `cutover replay` again; do not switch back yet\n")
        } else if !rep.causes.is_empty() {
            format!("replay: FAIL; the source would not reconcile with the target: the causes above changed what replay wrote. {NOTHING_WRITTEN}. Do what each cause says, then run `cutover replay` again; do not switch back yet\n")
        } else if rec.clean() {
            format!("replay: FAIL; see above. {NOTHING_WRITTEN}; do not switch back yet\n")
        } else {
            format!("replay: FAIL; the source would not reconcile with the target, and no trigger or rule of the source that fired sets a differing column: the journal did not see a write (one made with the journal's triggers off, or before `journal install`), the target lost rows behind the journal (a TRUNCATE, a rebuilt table), or the source was written during the replay. {NOTHING_WRITTEN}. Find the rows above in both databases; do not switch back yet; to replay and keep the differences, `cutover replay --accept-findings`\n")
        });
    }
    text
}

/// The plan as text: the figures, then the stale keys.
fn render_plan(p: &Plan) -> String {
    let mut text = report::pairs(&[
        ("journal_boundary", p.boundary.to_string()),
        ("already_applied", p.already_applied.to_string()),
        (
            "to_apply",
            format!(
                "{} (insert {}, update {}, delete {})",
                p.pending, p.insert, p.update, p.delete
            ),
        ),
        ("gaps", p.gaps.to_string()),
        ("stale_keys", p.stale_keys.to_string()),
    ]);
    if !p.keys.is_empty() {
        text.push_str(&format!(
            "\nthe source is stale at these keys (first {} of {}):\n",
            p.keys.len(),
            p.stale_keys
        ));
        text.push_str(&report::table(
            &["table", "key", "effect", "journal ops"],
            p.keys.iter().map(|k| {
                vec![
                    k.table.clone(),
                    k.key.to_string(),
                    report::name(&k.effect),
                    k.ops.clone(),
                ]
            }),
        ));
        text.push('\n');
    }
    text
}

/// The rehearsal's closing lines: what it measured and its verdict.
fn rehearsal_lines(r: &crate::replay::Rehearsal, conflicts: usize, holds: bool) -> String {
    let mut text = report::pairs(&[
        (
            "rehearsed",
            format!("{} entries up to seq {}", r.entries, r.boundary),
        ),
        ("apply", format!("{:.2} s", r.apply_seconds)),
        (
            "reconcile",
            format!(
                "{:.2} s ({} rows read)",
                r.reconcile_seconds, r.rows_reconciled
            ),
        ),
        ("written_since", r.written_since.to_string()),
        ("rolled_back", r.rolled_back.clone()),
    ]);
    if r.written_since > 0 {
        text.push_str(&format!(
            "the application journaled {} entries during the rehearsal, past its boundary: the reconciliation's differences include theirs and are not counted\n",
            r.written_since
        ));
    }
    text.push_str(&match (holds, conflicts) {
        (true, _) => "rehearsal: PASS; every entry applies to the source under its constraints and the replay's policy; nothing changed in either database. The fence and the replay remain for the rollback itself\n".to_string(),
        (false, 0) => "rehearsal: FAIL; the replay would not end clean (see above); nothing changed in either database\n".to_string(),
        (false, n) => format!(
            "rehearsal: FAIL; the replay would stop at {n} conflict{} (each listed); nothing changed in either database\n",
            if n == 1 { "" } else { "s" }
        ),
    });
    text
}
