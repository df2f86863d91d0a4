//! One feed line (format in docs/feed.md): parsed and validated against the
//! spec, each rejection naming line, position, key and field; a line is a
//! change for the apply engine, under the replay rule when it carries a
//! before-image; and a journal entry written as one.

use std::collections::HashMap;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json, json};

use crate::apply::{Change, Rule, row_from_json_of, row_json_of};
use crate::spec::{Spec, Table};
use crate::transform::Transform;
use crate::value::{Row, Value};

const FIELDS: [&str; 10] = [
    "feed", "delivery", "position", "seq", "table", "op", "key", "revision", "row", "before",
];

/// One validated feed line.
#[derive(Clone, Debug)]
pub struct Line {
    pub line: u64,
    pub feed: String,
    pub delivery: String,
    pub position: i64,
    pub seq: Option<i64>,
    pub change: Change,
    /// The line in canonical JSON (sorted keys), for the delivery digest.
    pub canonical: String,
}

/// A rejection, naming where and what.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rejection {
    pub line: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}", self.line)?;
        if let Some(p) = self.position {
            write!(f, ", position {p}")?;
        }
        if let Some(k) = &self.key {
            write!(f, ", key {k}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ", field '{field}'")?;
        }
        write!(f, ": {}", self.reason)
    }
}

fn positive(v: &Json, what: &str) -> Result<i64, String> {
    match v {
        Json::Number(n) if n.is_i64() || n.is_u64() => match n.as_i64() {
            Some(i) if i > 0 => Ok(i),
            Some(i) => Err(format!("{what} must be a positive integer, found {i}")),
            None => Err(format!("{what} {n} is past the 64-bit range")),
        },
        Json::Number(n) => Err(format!(
            "{what} must be a positive integer, found the float {n}"
        )),
        Json::Bool(b) => Err(format!(
            "{what} must be a positive integer, found the boolean {b}"
        )),
        Json::String(s) => Err(format!(
            "{what} must be a positive integer, found the string \"{s}\""
        )),
        other => Err(format!("{what} must be a positive integer, found {other}")),
    }
}

/// Parses and validates one line against the spec.
pub fn parse_line(
    spec: &Spec,
    tables: &HashMap<&str, usize>,
    line: u64,
    text: &str,
) -> Result<Line, Rejection> {
    let mut rej = Rejection {
        line,
        position: None,
        key: None,
        field: None,
        reason: String::new(),
    };
    let json: Json =
        serde_json::from_str(text).map_err(|e| fail(&rej, None, format!("not valid JSON: {e}")))?;
    let Json::Object(obj) = &json else {
        return Err(fail(&rej, None, "a feed line must be a JSON object".into()));
    };
    if let Some(v) = obj.get("position") {
        rej.position = v.as_i64();
    }
    if let Some(k) = obj.get("key") {
        rej.key = Some(k.clone());
    }
    let f = Fields { obj, rej };
    f.known()?;
    let feed = f.text_field("feed")?;
    let delivery = f.text_field("delivery")?;
    let position = positive(f.required("position")?, "position")
        .map_err(|r| fail(&f.rej, Some("position"), r))?;
    let seq = match f.obj.get("seq") {
        None => None,
        Some(v) => Some(positive(v, "seq").map_err(|r| fail(&f.rej, Some("seq"), r))?),
    };
    let table_name = f.text_field("table")?;
    let Some(&ti) = tables.get(table_name.as_str()) else {
        return Err(fail(
            &f.rej,
            Some("table"),
            format!("the spec has no table '{table_name}'"),
        ));
    };
    let table = &spec.tables[ti];
    let op = f.text_field("op")?;
    if op != "upsert" && op != "delete" {
        return Err(fail(
            &f.rej,
            Some("op"),
            format!("must be \"upsert\" or \"delete\", found \"{op}\""),
        ));
    }
    let key = parse_key(table, f.required("key")?)
        .map_err(|(field, r)| fail(&f.rej, field.as_deref(), r))?;
    let revision = match f.obj.get("revision") {
        None => None,
        Some(v) => Some(positive(v, "revision").map_err(|r| fail(&f.rej, Some("revision"), r))?),
    };
    if revision.is_some() && table.revision.is_none() {
        return Err(fail(
            &f.rej,
            Some("revision"),
            format!("table '{}' has no revision column in the spec", table.name),
        ));
    }
    let (row, before) = images(&f, table, &op, &key, revision)?;
    let absent = absent(&f, table, &row, &before)?;
    let row = row.map(|(r, _)| r);
    let before = before.map(|b| b.map(|(r, _)| r));
    let rule = rule(&f, table, &before, revision)?;
    // A change of key is addressed by the key the row had before.
    let at = match &before {
        Some(Some(b)) => b[..table.key_len].to_vec(),
        _ => key,
    };
    Ok(Line {
        line,
        feed,
        delivery,
        position,
        seq,
        change: Change {
            table: ti,
            key: at,
            rule,
            after: row,
            tag: position,
            source_images: None,
            entries: 1,
            unrecorded: absent,
        },
        canonical: serde_json::to_string(&json).unwrap_or_default(),
    })
}

/// A rejection of `rej`'s line, pointing at `field`.
fn fail(rej: &Rejection, field: Option<&str>, reason: String) -> Rejection {
    Rejection {
        field: field.map(str::to_string),
        reason,
        ..rej.clone()
    }
}

/// A line's fields, and where a rejection of one of them points.
struct Fields<'a> {
    obj: &'a serde_json::Map<String, Json>,
    rej: Rejection,
}

impl Fields<'_> {
    /// Refuses a field a feed line does not have.
    fn known(&self) -> Result<(), Rejection> {
        for name in self.obj.keys() {
            if !FIELDS.contains(&name.as_str()) {
                return Err(fail(
                    &self.rej,
                    Some(name),
                    format!("unknown field; a feed line has only {}", FIELDS.join(", ")),
                ));
            }
        }
        Ok(())
    }

    fn required(&self, name: &str) -> Result<&Json, Rejection> {
        self.obj
            .get(name)
            .ok_or_else(|| fail(&self.rej, Some(name), "missing field".into()))
    }

    fn text_field(&self, name: &str) -> Result<String, Rejection> {
        match self.required(name)? {
            Json::String(s) if !s.is_empty() => Ok(s.clone()),
            other => Err(fail(
                &self.rej,
                Some(name),
                format!("must be a non-empty string, found {other}"),
            )),
        }
    }
}

/// An image of the row, with the columns it leaves out.
type Image = (Row, Vec<usize>);

/// The line's row and before-image, each checked against the op, the key
/// and the revision.
#[allow(
    clippy::type_complexity,
    reason = "a row, and a before-image that may be null"
)]
fn images(
    f: &Fields<'_>,
    table: &Table,
    op: &str,
    key: &Row,
    revision: Option<i64>,
) -> Result<(Option<Image>, Option<Option<Image>>), Rejection> {
    let row = match (op, f.obj.get("row")) {
        ("upsert", Some(r)) => {
            Some(parse_row(table, r, "row").map_err(|(field, r)| fail(&f.rej, Some(&field), r))?)
        }
        ("upsert", None) => {
            return Err(fail(
                &f.rej,
                Some("row"),
                "an upsert needs the whole row".into(),
            ));
        }
        (_, Some(_)) => return Err(fail(&f.rej, Some("row"), "a delete carries no row".into())),
        (_, None) => None,
    };
    if let Some((r, absent)) = &row {
        for (i, c) in table.key_columns().iter().enumerate() {
            if r[i] != key[i] {
                return Err(fail(
                    &f.rej,
                    Some(&format!("row.{}", c.target)),
                    format!("{} differs from the key's {}", r[i], key[i]),
                ));
            }
        }
        if let Some(rc) = table.revision
            && absent.contains(&rc)
        {
            return Err(fail(
                &f.rej,
                Some("row"),
                format!(
                    "revision column '{}' is missing; a row of a table with revisions carries it",
                    table.columns[rc].target
                ),
            ));
        }
        if let (Some(rc), Some(rev)) = (table.revision, revision)
            && r[rc] != Value::Integer(rev)
        {
            return Err(fail(
                &f.rej,
                Some(&format!("row.{}", table.columns[rc].target)),
                format!("{} differs from the line's revision {rev}", r[rc]),
            ));
        }
    }
    let before = match f.obj.get("before") {
        None => None,
        Some(Json::Null) => {
            if op == "delete" {
                return Err(fail(
                    &f.rej,
                    Some("before"),
                    "a delete must say which row it removes".into(),
                ));
            }
            Some(None)
        }
        Some(b) => Some(Some(
            parse_row(table, b, "before").map_err(|(field, r)| fail(&f.rej, Some(&field), r))?,
        )),
    };
    Ok((row, before))
}

/// The columns the line leaves out: only under the replay rule, the same
/// in both images.
fn absent(
    f: &Fields<'_>,
    table: &Table,
    row: &Option<Image>,
    before: &Option<Option<Image>>,
) -> Result<Vec<usize>, Rejection> {
    // A line may leave out columns only under the replay rule, the same in
    // both images: a journal entry recorded before the column was journaled
    // carries no value for it, which is not NULL.
    let absent = match (row, before) {
        (Some((_, a)), Some(Some((_, b)))) if a != b => {
            let names = |cols: &[usize]| -> String {
                let n: Vec<&str> = cols
                    .iter()
                    .map(|&i| table.columns[i].target.as_str())
                    .collect();
                if n.is_empty() {
                    "none".into()
                } else {
                    n.join(", ")
                }
            };
            return Err(fail(
                &f.rej,
                Some("before"),
                format!(
                    "row and before leave out different columns (row: {}; before: {}); the images of one change carry the same columns",
                    names(a),
                    names(b)
                ),
            ));
        }
        (Some((_, a)), _) => a.clone(),
        (None, Some(Some((_, b)))) => b.clone(),
        (None, _) => Vec::new(),
    };
    if before.is_none()
        && let Some(&i) = absent.first()
    {
        return Err(fail(
            &f.rej,
            Some("row"),
            format!(
                "column '{}' of table '{}' is missing; a row leaves out a column only together with `before` (the replay rule), as the line of a journal entry recorded before the column was journaled does",
                table.columns[i].target, table.name
            ),
        ));
    }
    Ok(absent)
}

/// How the apply engine writes the line: under the replay rule with a
/// before-image, else by revision, else plainly.
fn rule(
    f: &Fields<'_>,
    table: &Table,
    before: &Option<Option<Row>>,
    revision: Option<i64>,
) -> Result<Rule, Rejection> {
    Ok(match (before, revision) {
        (Some(b), r) => Rule::Expect {
            before: b.clone(),
            revision: r,
        },
        (None, Some(r)) => Rule::Revision(r),
        (None, None) if table.revision.is_some() => {
            return Err(fail(
                &f.rej,
                Some("revision"),
                format!(
                    "table '{}' orders records by revision; the line needs one",
                    table.name
                ),
            ));
        }
        (None, None) => Rule::Plain,
    })
}

fn parse_key(table: &Table, v: &Json) -> Result<Row, (Option<String>, String)> {
    let Json::Object(k) = v else {
        return Err((
            Some("key".into()),
            format!("must be an object of the key columns, found {v}"),
        ));
    };
    let names: Vec<&str> = table
        .key_columns()
        .iter()
        .map(|c| c.target.as_str())
        .collect();
    for name in k.keys() {
        if !names.contains(&name.as_str()) {
            return Err((
                Some(format!("key.{name}")),
                format!(
                    "is not a key column of table '{}' (key: {})",
                    table.name,
                    names.join(", ")
                ),
            ));
        }
    }
    names
        .iter()
        .map(|n| {
            let v = k
                .get(*n)
                .ok_or_else(|| (Some(format!("key.{n}")), "key column missing".to_string()))?;
            match Value::from_json(v) {
                Ok(Value::Null) => Err((
                    Some(format!("key.{n}")),
                    "a key column cannot be null".to_string(),
                )),
                Ok(v) => {
                    // The key column's own checks (a minimum, a pattern) hold
                    // for keys too, deletes included.
                    let col = table.key_columns().iter().find(|c| c.target == *n);
                    match col.map(|c| c.checks.check(&v)) {
                        Some(Err(why)) => Err((Some(format!("key.{n}")), why)),
                        _ => Ok(v),
                    }
                }
                Err(e) => Err((Some(format!("key.{n}")), e.to_string())),
            }
        })
        .collect()
}

/// A canonical row, every value checked as the target would hold it, and
/// the columns it leaves out (never a key column).
fn parse_row(table: &Table, v: &Json, what: &str) -> Result<(Row, Vec<usize>), (String, String)> {
    let (row, absent) =
        row_from_json_of(table, v).map_err(|e| (what.to_string(), format!("{e:#}")))?;
    for (i, (c, val)) in table.columns.iter().zip(&row).enumerate() {
        if absent.contains(&i) {
            continue;
        }
        let field = format!("{what}.{}", c.target);
        if matches!(c.transform, Transform::DecimalToMinor { .. })
            && !matches!(val, Value::Integer(_) | Value::Null)
        {
            return Err((
                field,
                format!("money is integer minor units; found {} {val}", val.class()),
            ));
        }
        c.checks.check(val).map_err(|why| (field.clone(), why))?;
        // Whatever lands in the target must be something a rollback can
        // carry back to the source.
        c.transform
            .reverse(val)
            .map_err(|r| (field, format!("cannot be carried back to the source: {r}")))?;
    }
    Ok((row, absent))
}

/// A journal entry as the feed line `journal export` writes at `position`
/// of `delivery`.
pub fn entry_line(
    spec: &Spec,
    feed: &str,
    delivery: &str,
    position: i64,
    e: crate::journal::Entry,
) -> Result<Json> {
    let table = &spec.tables[e.table];
    // A column the entry's image did not record is left out of the
    // line: it has no value, which NULL would claim.
    let (old, new) = (
        e.before
            .as_ref()
            .map(|r| row_json_of(table, r, &e.unrecorded)),
        e.after
            .as_ref()
            .map(|r| row_json_of(table, r, &e.unrecorded)),
    );
    let named = new
        .as_ref()
        .or(old.as_ref())
        .with_context(|| format!("journal seq {} has no image", e.seq))?;
    let mut key = Map::new();
    for c in table.key_columns() {
        let part = named.get(&c.target).cloned().unwrap_or(Json::Null);
        if part.is_null() {
            bail!(
                "journal entry seq {} of table '{}': key column '{}' is NULL, and a feed cannot carry a record without identity; no feed was written",
                e.seq,
                table.name,
                c.target
            );
        }
        key.insert(c.target.clone(), part);
    }
    let mut line = json!({
        "feed": feed, "delivery": delivery, "position": position, "seq": e.seq,
        "table": table.name, "op": if e.op == crate::db::Op::Delete { "delete" } else { "upsert" }, "key": key,
    });
    if let Some(n) = new {
        line["row"] = n;
    }
    // The before-image carries the replay rule; an insert's is null:
    // there must be no row, or already this one.
    line["before"] = old.unwrap_or(Json::Null);
    Ok(line)
}
