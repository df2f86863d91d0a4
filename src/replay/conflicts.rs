//! A conflict in words: where and why, the three versions of the row in
//! target and source form, and what its evidence shows to do — said only
//! as far as the rows prove it.

use crate::apply::{Conflict, row_from_json};
use crate::report;
use crate::spec::Spec;

/// What a conflict's evidence shows, and what to do: said only as far as
/// the three versions of the row prove it.
pub fn cause(c: &Conflict) -> String {
    let again = "then run `cutover replay` again";
    if c.reason.contains("changed no row") {
        return format!(
            "A trigger or rule of the source swallowed the write: give it replay_policy = {{ NAME = \"suppress\" }} in the spec's table (where the engine can switch it off), or drop or adjust it for the rollback, {again}"
        );
    }
    if c.reason.contains("would set off foreign-key action") {
        return format!(
            "Rows of the source still refer to this row at this point of the journal (no earlier entry of the journal moved them away), and the source's foreign-key action would change them behind the journal's back: run replay as a role that can hold the action (above), or settle the referring rows by hand in the source, {again}"
        );
    }
    if c.reason.contains("refuses the row") {
        return format!(
            "The source's own constraint refuses the row ({}): settle the row that collides with it in the source by hand, {again}",
            c.reason
        );
    }
    if c.reason.contains("cannot be carried back") || c.reason.contains("cannot be read") {
        let fix = if c.reason.contains("not in the map") || c.reason.contains("map") {
            "add the value to the column's map in the spec"
        } else if c.reason.contains("integer") || c.reason.contains("real") {
            "the target holds a value of another kind than the column carries (a float where an integer belongs, say): correct it in the target before the fence, or settle the source row by hand"
        } else {
            "extend the spec (a map, a column check) or settle the value by hand in the source"
        };
        return format!(
            "The source row is as the journal expected, but the target's value cannot be written back to the source: {fix}, {again}"
        );
    }
    match (&c.expected, &c.found) {
        (Some(e), Some(f)) if e == f => format!(
            "The source row is as the journal expected, but the write cannot be made: {}; settle it by hand in the source, {again}",
            c.reason
        ),
        (None, Some(_)) => format!(
            "The journal says this key was inserted on the target after the cutover, but the source already has a row under it: it was written in the source after the cutover. Decide which version is right, fix the source row by hand, {again}"
        ),
        (Some(_), None) => format!(
            "The source no longer has the row the journal changed: it was deleted in the source after the cutover. Decide whether it should exist, restore or leave it by hand, {again}"
        ),
        (Some(_), Some(_)) => format!(
            "The source row differs from the one the journal expected: it was changed in the source after the cutover. Decide which version is right, fix the source row by hand, {again}"
        ),
        (None, None) => format!("{}; settle it by hand in the source, {again}", c.reason),
    }
}

/// A row of a report, given in target form, as the source would hold it:
/// what an operator types to fix a source row by hand.
pub fn source_form(spec: &Spec, table: &str, row: &serde_json::Value) -> String {
    let Some(t) = spec.table(table) else {
        return String::new();
    };
    let Ok(values) = row_from_json(t, row) else {
        return String::new();
    };
    let mut out = serde_json::Map::new();
    // A target-only column has no source column to show.
    for (c, v) in t
        .columns
        .iter()
        .zip(&values)
        .filter(|(c, _)| !c.source.is_empty())
    {
        match c.transform.reverse(v) {
            Ok(s) => {
                out.insert(c.source.clone(), s.to_json());
            }
            Err(r) => return format!("(cannot be carried back: {r})"),
        }
    }
    serde_json::Value::Object(out).to_string()
}

/// A conflict as a report shows it: where, why, and the three versions of
/// the row in target and source form.
pub fn conflict_text(spec: &Spec, c: &Conflict) -> String {
    let mut text = format!(
        "\nCONFLICT at seq {} in table '{}', key {}{}: {}\n",
        c.tag,
        c.table,
        c.key,
        c.column
            .as_ref()
            .map(|col| format!(", column '{col}'"))
            .unwrap_or_default(),
        c.reason
    );
    let show = |label: &str, v: &Option<serde_json::Value>| match v {
        Some(j) => vec![
            label.to_string(),
            j.to_string(),
            source_form(spec, &c.table, j),
        ],
        None => vec![label.to_string(), "(no row)".into(), "(no row)".into()],
    };
    text.push_str(&report::table(
        &["version", "row (target form)", "row (source form)"],
        [
            show("expected (journal before-image)", &c.expected),
            show("found in source now", &c.found),
            show("journal after-image", &c.wanted),
        ],
    ));
    text
}
