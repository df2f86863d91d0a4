//! `cutover sync`'s report as text.

use serde_json::Value as Json;

use super::{SyncReport, TableSync};
use crate::report::{self, Report};

/// The report as text: counts per table, then drift, quality, late rows,
/// conflicts, batches and cursors.
pub fn render(rep: &SyncReport) -> String {
    let mut text = String::new();
    if rep.ran {
        text.push_str(&report::table(
            &[
                "table",
                "rows read",
                "past cursor",
                "changed",
                "unchanged",
                "stale",
                "late",
            ],
            rep.tables.iter().map(|t| {
                vec![
                    t.name.clone(),
                    t.rows_read.to_string(),
                    t.candidates.to_string(),
                    t.changed.to_string(),
                    t.unchanged.to_string(),
                    t.stale.to_string(),
                    t.late.to_string(),
                ]
            }),
        ));
        text.push('\n');
    }
    for t in &rep.tables {
        render_table(t, rep.ran, &mut text);
    }
    text.push_str(if rep.holds() {
        "sync: done\n"
    } else {
        "sync: FAIL\n"
    });
    text
}

/// One table's findings and batches, after the counts.
fn render_table(t: &TableSync, ran: bool, text: &mut String) {
    if t.drift.any() {
        text.push_str(&format!(
            "table '{}': schema drift in the source; nothing was written\n",
            t.name
        ));
        for c in &t.drift.new {
            text.push_str(&format!("  new column '{c}' is not in the spec\n"));
        }
        for c in &t.drift.missing {
            text.push_str(&format!("  mapped column '{c}' is gone from the source\n"));
        }
        for c in &t.drift.retyped {
            text.push_str(&format!("  column type changed: {c}\n"));
        }
        if !t.drift.spec_lines.is_empty() {
            text.push_str("  to carry the new columns, add to the spec:\n");
            for l in &t.drift.spec_lines {
                for line in l.lines() {
                    text.push_str(&format!("    {line}\n"));
                }
            }
            text.push_str("  or run sync --evolve to add them to the target as copy columns\n");
        }
    }
    for c in &t.drift.evolved {
        text.push_str(&format!(
            "table '{}': added column '{c}' to the target as a copy column (--evolve); map it in the spec to keep the migration reversible\n",
            t.name
        ));
    }
    if t.quality.failures() > 0 {
        text.push_str(&format!(
            "table '{}': quality checks failed; nothing was written, the cursor is unchanged\n  NULL keys {}, duplicate keys {}, bad watermarks {}, invalid rows {}\n",
            t.name, t.quality.null_keys, t.quality.duplicate_keys, t.quality.bad_watermarks, t.quality.invalid
        ));
        for e in &t.quality.examples {
            text.push_str(&format!("  {e}\n"));
        }
    }
    if t.late > 0 {
        let keys: Vec<String> = t.late_keys.iter().map(Json::to_string).collect();
        text.push_str(&format!(
            "table '{}': {} late rows at or below the cursor: {} not in the target, {} different there (first keys {}); rerun with --lookback (or the table's lookback) to pick them up\n",
            t.name,
            t.late,
            t.late_missing,
            t.late_changed,
            keys.join(", ")
        ));
    }
    if let Some(c) = &t.conflict {
        text.push_str(&format!(
            "table '{}': CONFLICT at key {}: {}; the batch was rolled back\n",
            t.name, c.key, c.reason
        ));
    }
    for (i, b) in t.batches.iter().enumerate() {
        text.push_str(&format!(
            "table '{}': batch {}: {} rows, {} changed, watermarks {} .. {} ({})\n",
            t.name,
            i + 1,
            b.rows,
            b.changed,
            b.first_watermark,
            b.last_watermark,
            report::name(&b.status)
        ));
    }
    if ran && let Some(c) = &t.cursor_after {
        text.push_str(&format!("table '{}': cursor {}\n", t.name, c));
    }
}
