//! `cutover replay`: the rollback. Applies the fenced journal, at or below
//! its boundary, to the source through the reverse transform, batch by batch
//! through the apply engine, with each entry's `seq` recorded in
//! `_cutover_applied` in the same transaction as its rows. Then reconciles the
//! source against the target; exit 0 only if they are equal.
//!
//! Applied entries are always a prefix of the journal in `seq` order (a batch
//! commits whole), so a rerun after any crash starts after the last applied
//! `seq` and applies nothing twice. Gaps in `seq` are counted, never waited for.

use std::collections::HashMap;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::apply::{BatchOutcome, Change, Checkpoint, Conflict, Engine, Rule, row_from_json};
use crate::db::{Access, Db, JournalEntry};
use crate::fence::Watch;
use crate::progress::Progress;
use crate::reconcile;
use crate::report::{self, Outcome};
use crate::spec::{self, Side, Spec};
use crate::value::key_from_json;

#[derive(Debug, Serialize)]
struct StaleKey {
    table: String,
    key: serde_json::Value,
    ops: String,
    effect: &'static str,
}

#[derive(Debug, Serialize)]
struct Plan {
    boundary: i64,
    already_applied: i64,
    pending: i64,
    gaps: i64,
    insert: i64,
    update: i64,
    delete: i64,
    stale_keys: u64,
    keys: Vec<StaleKey>,
}

#[derive(Debug, Serialize)]
struct ReplayReport {
    verdict: &'static str,
    boundary: i64,
    entries: i64,
    previously_applied: i64,
    applied: u64,
    already_in_place: u64,
    batches: u64,
    gaps: i64,
    /// Another replay ran at the same time; this one skipped what it applied.
    raced: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    conflict: Option<Conflict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    breach: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reconciliation: Option<reconcile::Reconciliation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<String>,
}

/// Turns one journal entry into a change in canonical form.
fn to_change(spec: &Spec, index: &HashMap<&str, usize>, e: &JournalEntry) -> Result<Change> {
    let ctx = || {
        format!(
            "journal entry seq {} (table '{}', op {}, key {})",
            e.seq, e.tbl, e.op, e.key
        )
    };
    let &ti = index.get(e.tbl.as_str()).with_context(|| {
        format!(
            "{}: the spec has no table '{}'; replay with the spec the journal was installed with",
            ctx(),
            e.tbl
        )
    })?;
    let table = &spec.tables[ti];
    let image = |j: &Option<String>, which: &str| -> Result<Option<crate::value::Row>> {
        match j {
            None => Ok(None),
            Some(text) => {
                let json: serde_json::Value = serde_json::from_str(text)
                    .with_context(|| format!("{which}-image is not JSON"))?;
                Ok(Some(
                    row_from_json(table, &json).with_context(|| format!("{which}-image"))?,
                ))
            }
        }
    };
    let old = image(&e.old, "before").with_context(ctx)?;
    let new = image(&e.new, "after").with_context(ctx)?;
    let (before, after): (Option<crate::value::Row>, Option<crate::value::Row>) =
        match (e.op.as_str(), old, new) {
            ("insert", None, Some(n)) => (None, Some(n)),
            ("update", Some(o), Some(n)) => (Some(o), Some(n)),
            ("delete", Some(o), None) => (Some(o), None),
            _ => bail!(
                "{}: the images do not fit the op; the journal is damaged",
                ctx()
            ),
        };
    // The key column must agree with the image it names.
    let key = key_from_json(&serde_json::from_str(&e.key).with_context(ctx)?).with_context(ctx)?;
    let named = after
        .as_ref()
        .or(before.as_ref())
        .map(|r| &r[..table.key_len]);
    if named != Some(&key[..]) {
        bail!(
            "{}: key {} does not match the row's own key; the journal is damaged",
            ctx(),
            e.key
        );
    }
    // The change is addressed by the key the row had before it (a key
    // change moves it from there).
    let at = before
        .as_ref()
        .or(after.as_ref())
        .map(|r| r[..table.key_len].to_vec())
        .unwrap_or_default();
    Ok(Change {
        table: ti,
        key: at,
        rule: Rule::Expect {
            before,
            revision: None,
        },
        after,
        tag: e.seq,
    })
}

pub fn run(spec: &Spec, batch: usize, dry_run: bool, max_diffs: usize) -> Result<Outcome> {
    if batch == 0 {
        bail!("--batch must be at least 1");
    }
    let source_access = if dry_run { Access::Read } else { Access::Write };
    let mut source = spec::open_source(spec, None, source_access)?;
    let mut target = crate::db::Db::open(&spec.target, Access::Read, "target")?;
    if let Err(e) = spec.check_schema(&source, &target) {
        // A table dropped or altered behind the fence shows as a schema
        // error; it is a breach (exit 1), not a spec to fix.
        if crate::fence::read(&target)?.is_some()
            && let Ok(Err(breach)) = Watch::start(&target, spec)
        {
            let boundary = crate::fence::read(&target)?.map_or(0, |f| f.boundary);
            let entries = target.journal_count_upto(boundary)?;
            return breached(spec, breach, boundary, entries);
        }
        return Err(e);
    }
    let mut watch = match Watch::start(&target, spec)? {
        Ok(w) => w,
        Err(breach) => {
            let boundary = crate::fence::read(&target)?.map_or(0, |f| f.boundary);
            let entries = target.journal_count_upto(boundary)?;
            return breached(spec, breach, boundary, entries);
        }
    };
    let boundary = watch.fence().boundary;
    let (applied_rows, last_applied) = source.applied_progress()?;
    let entries = target.journal_count_upto(boundary)?;
    let consistent = target.journal_count_upto(last_applied)?;
    if consistent != applied_rows || last_applied > boundary {
        bail!(
            "source {} records {applied_rows} applied entries up to seq {last_applied}, but the journal holds {consistent} entries up to that seq (boundary {boundary}); this source was replayed from another journal. Stop and investigate",
            source.path().display()
        );
    }
    let gaps = (boundary - last_applied) - (entries - applied_rows);
    if dry_run {
        return plan(
            &target,
            boundary,
            applied_rows,
            last_applied,
            gaps,
            max_diffs,
        );
    }

    let index: HashMap<&str, usize> = spec
        .tables
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let engine = Engine::new(spec, &source, Side::Source);
    let mut rep = ReplayReport {
        verdict: "fail",
        boundary,
        entries,
        previously_applied: applied_rows,
        applied: 0,
        already_in_place: 0,
        batches: 0,
        gaps,
        raced: false,
        conflict: None,
        breach: None,
        reconciliation: None,
        summary: None,
    };
    let mut after = last_applied;
    let bar = Progress::new("replay", Some((entries - applied_rows).max(0) as u64));
    loop {
        let page = target.journal_page(after, boundary, batch)?;
        let Some(last) = page.last() else { break };
        let last_seq = last.seq;
        let changes: Vec<Change> = page
            .iter()
            .map(|e| to_change(spec, &index, e))
            .collect::<Result<_>>()?;
        if let Some(b) = watch.recheck(&target, spec)? {
            rep.breach = Some(b);
            break;
        }
        let delivery = format!("journal:{}-{}", page[0].seq, last_seq);
        let seqs: Vec<i64> = page.iter().map(|e| e.seq).collect();
        match engine.apply_batch(
            &changes,
            Checkpoint::Journal {
                after,
                seqs: &seqs,
                delivery: &delivery,
            },
        )? {
            BatchOutcome::Committed(a) => {
                bar.add(page.len() as u64);
                rep.applied += a.written;
                rep.already_in_place += a.duplicate;
                rep.batches += 1;
            }
            BatchOutcome::Conflict(c) => {
                rep.conflict = Some(*c);
                break;
            }
            BatchOutcome::Raced => {
                // Another replay committed first: carry on after what it did.
                after = source.applied_last()?;
                rep.raced = true;
                continue;
            }
            other => bail!("unexpected outcome of a replay batch: {other:?}"),
        }
        after = last_seq;
    }
    drop(engine);
    if rep.breach.is_none() && rep.conflict.is_none() {
        // One read of the target serves both the rollback reconciliation
        // and the fence's final check.
        let mut rec = reconcile::reconcile_digesting(spec, &mut source, &mut target, max_diffs)?;
        rep.breach = watch.verify(&target, spec, std::mem::take(&mut rec.target_digests))?;
        rep.summary = Some(crate::gate::summary(spec, &rec));
        if rec.clean() && rep.breach.is_none() {
            rep.verdict = "pass";
        }
        rep.reconciliation = Some(rec);
    }
    render(spec, rep)
}

fn breached(spec: &Spec, breach: String, boundary: i64, entries: i64) -> Result<Outcome> {
    let rep = ReplayReport {
        verdict: "fail",
        boundary,
        entries,
        previously_applied: 0,
        applied: 0,
        already_in_place: 0,
        batches: 0,
        gaps: 0,
        raced: false,
        conflict: None,
        breach: Some(breach),
        reconciliation: None,
        summary: None,
    };
    render(spec, rep)
}

/// A row of a report, given in target form, as the source would hold it:
/// what an operator types to fix a source row by hand.
fn source_form(spec: &Spec, table: &str, row: &serde_json::Value) -> String {
    let Some(t) = spec.table(table) else {
        return String::new();
    };
    let Ok(values) = row_from_json(t, row) else {
        return String::new();
    };
    let mut out = serde_json::Map::new();
    for (c, v) in t.columns.iter().zip(&values) {
        match c.transform.reverse(v) {
            Ok(s) => {
                out.insert(c.source.clone(), s.to_json());
            }
            Err(r) => return format!("(cannot be carried back: {r})"),
        }
    }
    serde_json::Value::Object(out).to_string()
}

fn render(spec: &Spec, rep: ReplayReport) -> Result<Outcome> {
    let holds = rep.verdict == "pass";
    let mut text = report::pairs(&[
        ("journal_boundary", rep.boundary.to_string()),
        ("entries", rep.entries.to_string()),
        ("previously_applied", rep.previously_applied.to_string()),
        ("applied", rep.applied.to_string()),
        ("already_in_place", rep.already_in_place.to_string()),
        ("gaps", rep.gaps.to_string()),
    ]);
    if let Some(c) = &rep.conflict {
        text.push_str(&format!(
            "\nCONFLICT at seq {} in table '{}', key {}{}: {}\n",
            c.tag,
            c.table,
            c.key,
            c.column
                .as_ref()
                .map(|col| format!(", column '{col}'"))
                .unwrap_or_default(),
            c.reason
        ));
        let show = |label: &str, v: &Option<serde_json::Value>| match v {
            Some(j) => vec![
                label.to_string(),
                j.to_string(),
                source_form(spec, &c.table, j),
            ],
            None => vec![
                label.to_string(),
                "(no row)".to_string(),
                "(no row)".to_string(),
            ],
        };
        text.push_str(&report::table(
            &["version", "row (target form)", "row (source form)"],
            [
                show("expected (journal before-image)", &c.expected),
                show("found in source now", &c.found),
                show("journal after-image", &c.wanted),
            ],
        ));
        text.push_str(if c.found.is_some() && c.found == c.expected {
            "\nthe batch was rolled back; entries before it stay applied. The source row is as the journal expected, but the target's value cannot be written back to the source: extend the spec (a map, a column check) or settle the value by hand in the source, then run `cutover replay` again\n"
        } else {
            "\nthe batch was rolled back; entries before it stay applied. The source row was changed after the cutover: decide which version is right, fix the source row by hand, and run `cutover replay` again\n"
        });
    }
    if let Some(b) = &rep.breach {
        text.push_str(&format!(
            "\n{b}\nreplay stopped; batches already committed stay applied\n"
        ));
    }
    if let Some(rec) = &rep.reconciliation {
        text.push_str("\nrollback reconciliation (source against target)\n");
        text.push_str(&report::reconciliation(rec));
        text.push('\n');
        if let Some(s) = &rep.summary {
            text.push_str(&format!("{s}\n"));
        }
        text.push_str(if holds {
            "replay: done; the source holds exactly the target's data. Switch the application back to the source and keep the fence on\n"
        } else {
            "replay: FAIL; the source does not reconcile with the target after the replay (a write that bypassed the journal?); do not switch back yet\n"
        });
    }
    Outcome::new(holds, &rep, text)
}

fn plan(
    target: &Db,
    boundary: i64,
    applied: i64,
    last_applied: i64,
    gaps: i64,
    max_keys: usize,
) -> Result<Outcome> {
    let counts = target.journal_pending_counts(last_applied, boundary)?;
    let get = |op: &str| counts.iter().find(|(o, _)| o == op).map_or(0, |c| c.1);
    let mut keys = Vec::new();
    let mut stale = 0u64;
    target.journal_touched_keys(last_applied, boundary, |tbl, key, ops| {
        stale += 1;
        if keys.len() < max_keys {
            let first = ops.split(',').next().unwrap_or("");
            let last = ops.rsplit(',').next().unwrap_or("");
            let effect = match (first, last) {
                ("insert", "delete") => "inserted and deleted",
                ("insert", _) => "new",
                (_, "delete") => "deleted",
                _ => "updated",
            };
            keys.push(StaleKey {
                table: tbl,
                key: serde_json::from_str(&key)?,
                ops,
                effect,
            });
        }
        Ok(())
    })?;
    let p = Plan {
        boundary,
        already_applied: applied,
        pending: get("insert") + get("update") + get("delete"),
        gaps,
        insert: get("insert"),
        update: get("update"),
        delete: get("delete"),
        stale_keys: stale,
        keys,
    };
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
                    k.effect.to_string(),
                    k.ops.clone(),
                ]
            }),
        ));
        text.push('\n');
    }
    text.push_str("dry run: nothing was written\n");
    Outcome::new(true, &p, text)
}
