//! Change feeds: the journal, or any upstream change source, as a JSON Lines
//! file (format in docs/feed.md), and the two commands that use one:
//! `journal export` writes the fenced journal as a feed, `apply` applies a
//! feed through the apply engine with the delivery contract.
//!
//! A feed is validated whole before anything is written, each rejection
//! naming line, position, key and field. Then it is applied one delivery at
//! a time, each delivery one transaction with its receipt, reading the file
//! again so memory holds one delivery, never the feed.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json, json};
use sha2::{Digest, Sha256};

use crate::apply::{
    Applied, BatchOutcome, Change, DeliveryCheckpoint, Engine, FailedChange, Rule,
    row_from_json_of, row_json_of,
};
use crate::db::{Access, Db};
use crate::report::{self, BatchStatus, Report, Verdict};
use crate::schema;
use crate::spec::{Side, Spec, Table};
use crate::transform::Transform;
use crate::value::{Row, Value, key_json};

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
    canonical: String,
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
    let fail = |rej: &Rejection, field: Option<&str>, reason: String| Rejection {
        field: field.map(str::to_string),
        reason,
        ..rej.clone()
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
    for name in obj.keys() {
        if !FIELDS.contains(&name.as_str()) {
            return Err(fail(
                &rej,
                Some(name),
                format!("unknown field; a feed line has only {}", FIELDS.join(", ")),
            ));
        }
    }
    let required = |name: &str| {
        obj.get(name)
            .ok_or_else(|| fail(&rej, Some(name), "missing field".into()))
    };
    let text_field = |name: &str| -> Result<String, Rejection> {
        match required(name)? {
            Json::String(s) if !s.is_empty() => Ok(s.clone()),
            other => Err(fail(
                &rej,
                Some(name),
                format!("must be a non-empty string, found {other}"),
            )),
        }
    };
    let feed = text_field("feed")?;
    let delivery = text_field("delivery")?;
    let position =
        positive(required("position")?, "position").map_err(|r| fail(&rej, Some("position"), r))?;
    let seq = match obj.get("seq") {
        None => None,
        Some(v) => Some(positive(v, "seq").map_err(|r| fail(&rej, Some("seq"), r))?),
    };
    let table_name = text_field("table")?;
    let Some(&ti) = tables.get(table_name.as_str()) else {
        return Err(fail(
            &rej,
            Some("table"),
            format!("the spec has no table '{table_name}'"),
        ));
    };
    let table = &spec.tables[ti];
    let op = text_field("op")?;
    if op != "upsert" && op != "delete" {
        return Err(fail(
            &rej,
            Some("op"),
            format!("must be \"upsert\" or \"delete\", found \"{op}\""),
        ));
    }
    let key = parse_key(table, required("key")?).map_err(|(f, r)| fail(&rej, f.as_deref(), r))?;
    let revision = match obj.get("revision") {
        None => None,
        Some(v) => Some(positive(v, "revision").map_err(|r| fail(&rej, Some("revision"), r))?),
    };
    if revision.is_some() && table.revision.is_none() {
        return Err(fail(
            &rej,
            Some("revision"),
            format!("table '{}' has no revision column in the spec", table.name),
        ));
    }
    let row = match (op.as_str(), obj.get("row")) {
        ("upsert", Some(r)) => {
            Some(parse_row(table, r, "row").map_err(|(f, r)| fail(&rej, Some(&f), r))?)
        }
        ("upsert", None) => {
            return Err(fail(
                &rej,
                Some("row"),
                "an upsert needs the whole row".into(),
            ));
        }
        (_, Some(_)) => return Err(fail(&rej, Some("row"), "a delete carries no row".into())),
        (_, None) => None,
    };
    if let Some((r, absent)) = &row {
        for (i, c) in table.key_columns().iter().enumerate() {
            if r[i] != key[i] {
                return Err(fail(
                    &rej,
                    Some(&format!("row.{}", c.target)),
                    format!("{} differs from the key's {}", r[i], key[i]),
                ));
            }
        }
        if let Some(rc) = table.revision
            && absent.contains(&rc)
        {
            return Err(fail(
                &rej,
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
                &rej,
                Some(&format!("row.{}", table.columns[rc].target)),
                format!("{} differs from the line's revision {rev}", r[rc]),
            ));
        }
    }
    let before = match obj.get("before") {
        None => None,
        Some(Json::Null) => {
            if op == "delete" {
                return Err(fail(
                    &rej,
                    Some("before"),
                    "a delete must say which row it removes".into(),
                ));
            }
            Some(None)
        }
        Some(b) => Some(Some(
            parse_row(table, b, "before").map_err(|(f, r)| fail(&rej, Some(&f), r))?,
        )),
    };
    // A line may leave out columns only under the replay rule, the same in
    // both images: a journal entry recorded before the column was journaled
    // carries no value for it, which is not NULL.
    let absent = match (&row, &before) {
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
                &rej,
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
            &rej,
            Some("row"),
            format!(
                "column '{}' of table '{}' is missing; a row leaves out a column only together with `before` (the replay rule), as the line of a journal entry recorded before the column was journaled does",
                table.columns[i].target, table.name
            ),
        ));
    }
    let row = row.map(|(r, _)| r);
    let before = before.map(|b| b.map(|(r, _)| r));
    let rule = match (&before, revision) {
        (Some(b), r) => Rule::Expect {
            before: b.clone(),
            revision: r,
        },
        (None, Some(r)) => Rule::Revision(r),
        (None, None) if table.revision.is_some() => {
            return Err(fail(
                &rej,
                Some("revision"),
                format!(
                    "table '{}' orders records by revision; the line needs one",
                    table.name
                ),
            ));
        }
        (None, None) => Rule::Plain,
    };
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

/// One delivery as found in the file.
#[derive(Clone, Debug, Serialize)]
pub struct DeliveryInfo {
    pub feed: String,
    pub delivery: String,
    pub first_position: i64,
    pub last_position: i64,
    pub first_line: u64,
    pub last_line: u64,
    pub digest: String,
}

/// Reads a feed file line by line, handing each validated line to `f`.
fn read_lines(
    path: &Path,
    spec: &Spec,
    mut f: impl FnMut(Result<Line, Rejection>) -> Result<bool>,
) -> Result<()> {
    let file =
        std::fs::File::open(path).with_context(|| format!("opening feed {}", path.display()))?;
    let tables: HashMap<&str, usize> = spec
        .tables
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let mut n = 0u64;
    for text in BufReader::new(file).lines() {
        n += 1;
        let text = match text {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let r = Rejection {
                    line: n,
                    position: None,
                    key: None,
                    field: None,
                    reason: "not valid UTF-8".into(),
                };
                if !f(Err(r))? {
                    return Ok(());
                }
                continue;
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("reading feed {} at line {n}", path.display()));
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        if !f(parse_line(spec, &tables, n, &text))? {
            break;
        }
    }
    Ok(())
}

/// Pass one: every line valid, deliveries contiguous and single-feed,
/// positions consecutive within a delivery. Returns the deliveries in order.
pub fn validate(
    path: &Path,
    spec: &Spec,
    max_errors: usize,
) -> Result<Result<Vec<DeliveryInfo>, Vec<Rejection>>> {
    let mut errors = Vec::new();
    let mut found = 0usize;
    let mut deliveries: Vec<DeliveryInfo> = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut hasher = Sha256::new();
    let mut push = |errors: &mut Vec<Rejection>, r: Rejection| {
        found += 1;
        if errors.len() < max_errors {
            errors.push(r);
        }
    };
    read_lines(path, spec, |l| {
        let l = match l {
            Ok(l) => l,
            Err(r) => {
                push(&mut errors, r);
                return Ok(true);
            }
        };
        let at = |reason: String, field: &str| Rejection {
            line: l.line,
            position: Some(l.position),
            key: Some(key_json(&l.change.key)),
            field: Some(field.into()),
            reason,
        };
        match deliveries.last_mut() {
            Some(d) if d.delivery == l.delivery => {
                if d.feed != l.feed {
                    push(
                        &mut errors,
                        at(
                            format!(
                                "delivery '{}' mixes feeds '{}' and '{}'; a delivery belongs to one feed",
                                l.delivery, d.feed, l.feed
                            ),
                            "feed",
                        ),
                    );
                } else if d.last_position.checked_add(1) != Some(l.position) {
                    push(
                        &mut errors,
                        at(
                            format!(
                                "position {} follows {} in delivery '{}'; positions must be consecutive",
                                l.position, d.last_position, l.delivery
                            ),
                            "position",
                        ),
                    );
                }
                d.last_position = l.position;
                d.last_line = l.line;
            }
            _ => {
                if let Some(d) = deliveries.last_mut() {
                    d.digest = hex::encode(std::mem::take(&mut hasher).finalize());
                }
                if let Some(first) = seen.insert(l.delivery.clone(), l.line) {
                    push(
                        &mut errors,
                        at(
                            format!(
                                "delivery '{}' appears twice in the file (first at line {first}); a delivery's lines must be together",
                                l.delivery
                            ),
                            "delivery",
                        ),
                    );
                }
                deliveries.push(DeliveryInfo {
                    feed: l.feed.clone(),
                    delivery: l.delivery.clone(),
                    first_position: l.position,
                    last_position: l.position,
                    first_line: l.line,
                    last_line: l.line,
                    digest: String::new(),
                });
            }
        }
        hasher.update(l.canonical.as_bytes());
        hasher.update(b"\n");
        Ok(true)
    })?;
    if let Some(d) = deliveries.last_mut() {
        d.digest = hex::encode(hasher.finalize());
    }
    if found > 0 {
        return Ok(Err(errors));
    }
    if deliveries.is_empty() {
        bail!("feed {} holds no changes", path.display());
    }
    Ok(Ok(deliveries))
}

#[derive(Debug, Serialize, Deserialize)]
pub struct DeliveryReport {
    pub feed: String,
    pub delivery: String,
    pub positions: [i64; 2],
    pub lines: [u64; 2],
    pub status: BatchStatus,
    pub applied: u64,
    pub duplicate: u64,
    pub stale: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What `cutover apply` did, delivery by delivery. It reads back from its
/// JSON too: the drill runs apply in a child process.
#[derive(Debug, Serialize, Deserialize)]
pub struct ApplyReport {
    pub verdict: Verdict,
    pub into: String,
    pub feed_file: String,
    pub deliveries: Vec<DeliveryReport>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected_lines: Vec<Rejection>,
    pub checkpoints: BTreeMap<String, i64>,
}

impl Report for ApplyReport {
    fn holds(&self) -> bool {
        self.verdict.holds()
    }
}

/// `cutover apply --feed FILE --into source|target`.
pub fn apply(spec: &Spec, path: &Path, into: Side) -> Result<ApplyReport> {
    if !path.is_file() {
        bail!("feed {} is not a readable file", path.display());
    }
    let (source, target, _) = match into {
        Side::Source => schema::open(spec, Access::Write, Access::Read)?,
        Side::Target => schema::open(spec, Access::Read, Access::Write)?,
    };
    let db = match into {
        Side::Source => &source,
        Side::Target => &target,
    };
    let mut rep = ApplyReport {
        verdict: Verdict::Fail,
        into: into.to_string(),
        feed_file: path.display().to_string(),
        deliveries: Vec::new(),
        rejected_lines: Vec::new(),
        checkpoints: BTreeMap::new(),
    };
    let infos = match validate(path, spec, 20)? {
        Ok(d) => d,
        Err(rejections) => {
            rep.rejected_lines = rejections;
            return with_checkpoints(rep, db);
        }
    };
    let engine = Engine::new(&spec.tables, db, into);
    let mut pending: Vec<Line> = Vec::new();
    let mut idx = 0usize;
    let mut stopped = false;
    let mut apply_delivery = |lines: &mut Vec<Line>, rep: &mut ApplyReport| -> Result<bool> {
        let info = &infos[idx];
        idx += 1;
        let mut h = Sha256::new();
        for l in lines.iter() {
            h.update(l.canonical.as_bytes());
            h.update(b"\n");
        }
        if hex::encode(h.finalize()) != info.digest {
            bail!(
                "feed {} changed while it was being applied (delivery '{}'); apply it again",
                path.display(),
                info.delivery
            );
        }
        let changes: Vec<Change> = lines.iter().map(|l| l.change.clone()).collect();
        let seqs: Vec<i64> = lines.iter().map(|l| l.seq.unwrap_or(0)).collect();
        let cp = DeliveryCheckpoint {
            feed: &info.feed,
            delivery: &info.delivery,
            digest: &info.digest,
            first: info.first_position,
            last: info.last_position,
            seqs: &seqs,
        };
        let mut dr = DeliveryReport {
            feed: info.feed.clone(),
            delivery: info.delivery.clone(),
            positions: [info.first_position, info.last_position],
            lines: [info.first_line, info.last_line],
            status: BatchStatus::Applied,
            applied: 0,
            duplicate: 0,
            stale: 0,
            reason: None,
        };
        let outcome = engine.apply_batch(&changes, &cp).map_err(|e| {
            let at = e
                .downcast_ref::<FailedChange>()
                .and_then(|f| lines.get(f.index))
                .map(|l| (l.line, l.position));
            match at {
                Some((line, position)) => e.context(format!(
                    "feed {}, delivery '{}', line {line}, position {position}",
                    path.display(),
                    info.delivery
                )),
                None => e.context(format!(
                    "feed {}, delivery '{}'",
                    path.display(),
                    info.delivery
                )),
            }
        })?;
        let go_on = match outcome {
            BatchOutcome::Committed(Applied {
                written,
                duplicate,
                stale,
            }) => {
                (dr.applied, dr.duplicate, dr.stale) = (written, duplicate, stale);
                true
            }
            BatchOutcome::Replayed => {
                dr.status = BatchStatus::Replayed;
                true
            }
            BatchOutcome::Refused(why) => {
                dr.status = BatchStatus::Rejected;
                dr.reason = Some(why);
                false
            }
            BatchOutcome::Conflict(c) => {
                let line = lines
                    .iter()
                    .find(|l| l.position == c.tag)
                    .map_or(0, |l| l.line);
                dr.status = BatchStatus::Rejected;
                dr.reason = Some(format!(
                    "line {line}, position {}, table '{}', key {}{}: {}; found {}, wanted {}. The whole delivery was rolled back",
                    c.tag,
                    c.table,
                    c.key,
                    c.column
                        .as_ref()
                        .map(|col| format!(", column '{col}'"))
                        .unwrap_or_default(),
                    c.reason,
                    c.found.as_ref().map_or("no row".into(), |f| f.to_string()),
                    c.wanted.as_ref().map_or("no row".into(), |f| f.to_string()),
                ));
                false
            }
            BatchOutcome::Raced => bail!("unexpected race applying delivery '{}'", info.delivery),
        };
        rep.deliveries.push(dr);
        lines.clear();
        Ok(go_on)
    };
    read_lines(path, spec, |l| {
        let l = l.map_err(|r| {
            anyhow::anyhow!(
                "feed {} changed while it was being applied: {r}",
                path.display()
            )
        })?;
        if pending.last().is_some_and(|p| p.delivery != l.delivery)
            && !apply_delivery(&mut pending, &mut rep)?
        {
            stopped = true;
            return Ok(false);
        }
        pending.push(l);
        Ok(true)
    })?;
    if !stopped && !pending.is_empty() && !apply_delivery(&mut pending, &mut rep)? {
        stopped = true;
    }
    for info in infos.iter().skip(rep.deliveries.len()) {
        rep.deliveries.push(DeliveryReport {
            feed: info.feed.clone(),
            delivery: info.delivery.clone(),
            positions: [info.first_position, info.last_position],
            lines: [info.first_line, info.last_line],
            status: BatchStatus::NotAttempted,
            applied: 0,
            duplicate: 0,
            stale: 0,
            reason: Some("an earlier delivery was rejected; positions must stay gapless".into()),
        });
    }
    if !stopped {
        rep.verdict = Verdict::Pass;
    }
    with_checkpoints(rep, db)
}

/// The report with each feed's checkpoint as the database holds it now.
fn with_checkpoints(mut rep: ApplyReport, db: &Db) -> Result<ApplyReport> {
    let feeds: Vec<String> = rep.deliveries.iter().map(|d| d.feed.clone()).collect();
    for f in feeds {
        let at = db.feed_checkpoint(&f)?;
        rep.checkpoints.insert(f, at);
    }
    Ok(rep)
}

/// The report as text: each delivery and what became of it, the
/// checkpoints; or every rejected line of an invalid feed.
pub fn render(rep: &ApplyReport) -> String {
    let mut text = String::new();
    if !rep.rejected_lines.is_empty() {
        text.push_str(&format!(
            "feed {} is invalid; nothing was written:\n",
            rep.feed_file
        ));
        for r in &rep.rejected_lines {
            text.push_str(&format!("  {r}\n"));
        }
        text.push_str("fix the feed (format: docs/feed.md) and apply it again\n");
        return text;
    }
    text.push_str(&report::table(
        &[
            "feed",
            "delivery",
            "positions",
            "status",
            "applied",
            "duplicate",
            "stale",
        ],
        rep.deliveries.iter().map(|d| {
            vec![
                d.feed.clone(),
                d.delivery.clone(),
                format!("{}..{}", d.positions[0], d.positions[1]),
                report::name(&d.status),
                d.applied.to_string(),
                d.duplicate.to_string(),
                d.stale.to_string(),
            ]
        }),
    ));
    text.push('\n');
    for d in rep
        .deliveries
        .iter()
        .filter(|d| d.status == BatchStatus::Rejected)
    {
        text.push_str(&format!(
            "delivery '{}' REJECTED: {}\n",
            d.delivery,
            d.reason.as_deref().unwrap_or("")
        ));
    }
    for (f, at) in &rep.checkpoints {
        text.push_str(&format!("checkpoint {f}: position {at}\n"));
    }
    text.push_str(if rep.holds() {
        "apply: done\n"
    } else {
        "apply: FAIL; later deliveries were not attempted\n"
    });
    text
}

/// What `journal export` wrote.
#[derive(Debug, Serialize)]
pub struct ExportReport {
    pub feed: String,
    pub out: String,
    pub boundary: i64,
    pub changes: i64,
    pub deliveries: u64,
    pub delivery_size: usize,
}

impl Report for ExportReport {
    fn holds(&self) -> bool {
        true
    }
}

/// `cutover journal export --out FILE`: the fenced journal as a feed.
pub fn export(spec: &Spec, out: &Path, delivery_size: usize) -> Result<ExportReport> {
    let (_, target, _) = schema::open(spec, Access::Read, Access::Read)?;
    let Some(fence) = crate::fence::read(&target)? else {
        bail!(
            "target {} is not fenced; export takes the journal at the fence's boundary. Run `cutover fence on` first",
            target.location()
        );
    };
    // The feed is named after the journal's identity, which is also the
    // name of the source's applied set: a replay and this feed's apply never
    // apply one entry twice.
    let feed = crate::journal::identity(&target)?.with_context(|| {
        format!(
            "target {} has a fence but its journal has no identity; install the journal with this version of cutover",
            target.location()
        )
    })?;
    let reader = crate::journal::Reader::new(spec, &target)?;
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    let mut w = std::io::BufWriter::new(tmp.as_file_mut());
    let (mut after, mut position, mut deliveries) = (target.journal_start()?, 0i64, 0u64);
    loop {
        let page = crate::journal::next_run(
            spec,
            &target,
            &reader,
            after,
            fence.boundary,
            delivery_size,
            crate::journal::Reading::Whole,
        )?;
        let Some(last) = page.iter().map(|e| e.seq).max() else {
            break;
        };
        after = last;
        let first = position + 1;
        let delivery = format!("{feed}:{first}-{}", position + page.len() as i64);
        deliveries += 1;
        for e in page {
            position += 1;
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
                "table": table.name, "op": if e.op == "delete" { "delete" } else { "upsert" }, "key": key,
            });
            if let Some(n) = new {
                line["row"] = n;
            }
            // The before-image carries the replay rule; an insert's is null:
            // there must be no row, or already this one.
            line["before"] = old.unwrap_or(Json::Null);
            serde_json::to_writer(&mut w, &line)?;
            w.write_all(b"\n")?;
        }
    }
    w.flush()?;
    drop(w);
    // A temporary file is private (0600); a feed is an ordinary file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(out)
        .with_context(|| format!("writing feed {}", out.display()))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(ExportReport {
        feed,
        out: out.display().to_string(),
        boundary: fence.boundary,
        changes: position,
        deliveries,
        delivery_size,
    })
}

/// The export as text: the feed, its file and its figures.
pub fn render_export(rep: &ExportReport) -> String {
    report::pairs(&[
        ("feed", rep.feed.clone()),
        ("file", rep.out.clone()),
        ("journal_boundary", rep.boundary.to_string()),
        ("changes", rep.changes.to_string()),
        ("deliveries", rep.deliveries.to_string()),
    ])
}
