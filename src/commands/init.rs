//! `cutover init`: drafts a spec from the two schemas. Tables and columns
//! are matched by name (case, underscores and a plural `s` ignored:
//! `InvoiceLine` ↔ `invoice_lines`), keys come from the source's primary
//! key, `decimal_to_minor` is proposed where a decimal, NUMERIC or REAL
//! source column meets an INTEGER target column, `map` where a text column
//! holds few distinct values that the target spells otherwise, and whatever
//! does not match is a commented line to decide on. The draft is a proposal:
//! `cutover check` is what proves it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::db::{Access, ColumnInfo, Db};
use crate::report::Report;
use crate::spec::Location;
use crate::value::{Value, key_json};

/// At most this many distinct text values make a column a `map` candidate.
const MAP_MAX_VALUES: usize = 12;
/// Rows read per column to find a scale or a map (a draft, not a proof).
const SAMPLE_ROWS: usize = 100_000;

/// The spec `init` drafted: where, what it matched, what is left to decide.
#[derive(Debug, Serialize)]
pub struct InitReport {
    pub out: Option<String>,
    pub tables: Vec<String>,
    pub unmatched_source_tables: Vec<String>,
    pub unmatched_target_tables: Vec<String>,
    pub to_decide: usize,
    /// The draft itself (printed when there is no `--out`).
    #[serde(skip)]
    pub toml: String,
}

impl Report for InitReport {
    fn holds(&self) -> bool {
        true
    }
}

/// A name as matching sees it: lower case, no underscores, no plural `s`.
fn norm(name: &str) -> String {
    let n: String = name
        .chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    n.strip_suffix('s').map(str::to_string).unwrap_or(n)
}

/// A TOML string literal.
fn lit(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn open(url: &str, role: &str) -> Result<Db> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Db::open(&Location::Postgres(url.to_string()), Access::Read, role);
    }
    let path = url.strip_prefix("sqlite://").with_context(|| {
        format!(
            "--{role} {}: write sqlite://PATH (relative to the current folder) or postgres://USER@HOST:PORT/DB?schema=NAME",
            crate::spec::without_password(url),
        )
    })?;
    Db::open_file(Path::new(path), Access::Read, role)
}

/// The scale a declared type gives (`NUMERIC(10,2)` → 2).
fn declared_scale(decl: &str) -> Option<u32> {
    let inside = decl.split_once('(')?.1.split_once(')')?.0;
    inside.split_once(',')?.1.trim().parse().ok()
}

fn numeric_type(decl: &str) -> bool {
    let d = decl.to_ascii_uppercase();
    ["NUMERIC", "DECIMAL", "REAL", "DOUBLE", "FLOAT", "MONEY"]
        .iter()
        .any(|t| d.contains(t))
}

fn integer_type(decl: &str) -> bool {
    decl.to_ascii_uppercase().contains("INT")
}

/// Values of one column keyed by the table's key, first rows only.
fn sample(db: &Db, table: &str, key: &[&str], column: &str) -> Result<Vec<(Vec<Value>, Value)>> {
    let mut cols: Vec<&str> = key.to_vec();
    cols.push(column);
    let sql = db.table_sql(table, &cols, key.len(), None);
    let mut out = Vec::new();
    db.scan(&sql, None, |mut row| {
        let v = row.pop().unwrap_or(Value::Null);
        out.push((row, v));
        Ok(out.len() < SAMPLE_ROWS)
    })?;
    Ok(out)
}

/// The largest number of fraction digits among decimal-looking values.
fn data_scale(values: &[(Vec<Value>, Value)]) -> u32 {
    values
        .iter()
        .filter_map(|(_, v)| match v {
            Value::Text(t) => Some(t.clone()),
            Value::Real(r) if r.is_finite() => Some(format!("{r}")),
            _ => None,
        })
        .map(|t| t.split_once('.').map_or(0, |(_, f)| f.len() as u32))
        .max()
        .unwrap_or(0)
}

pub fn run(source_url: &str, target_url: &str, out: Option<&Path>) -> Result<InitReport> {
    if let Some(p) = out
        && p.exists()
    {
        bail!(
            "{} already exists; init never overwrites a file. Choose another --out, or remove it first",
            p.display()
        );
    }
    let source = open(source_url, "source")?;
    let target = open(target_url, "target")?;
    let s_tables = source.user_tables()?;
    let t_tables = target.user_tables()?;
    let mut toml = String::new();
    let _ = writeln!(
        toml,
        "# Drafted by `cutover init` from {} and {}.\n# Read every comment marked DECIDE, then run `cutover check --spec <this file>`.\n\n[source]\nurl = {}\n\n[target]\nurl = {}",
        crate::spec::without_password(source_url),
        crate::spec::without_password(target_url),
        lit(source_url),
        lit(target_url)
    );
    let mut matched = Vec::new();
    let mut to_decide = 0usize;
    let mut used_targets = Vec::new();
    for st in &s_tables {
        let Some(tt) = t_tables
            .iter()
            .find(|t| norm(t) == norm(st) && !used_targets.contains(*t))
        else {
            continue;
        };
        used_targets.push(tt.clone());
        matched.push(tt.clone());
        let s_cols = source.table_columns(st)?;
        let t_cols = target.table_columns(tt)?;
        let mut pk: Vec<&ColumnInfo> = s_cols.iter().filter(|c| c.pk > 0).collect();
        pk.sort_by_key(|c| c.pk);
        let _ = writeln!(toml, "\n[[tables]]\nname = {}", lit(tt));
        if st != tt {
            let _ = writeln!(toml, "source_table = {}", lit(st));
        }
        let _ = writeln!(toml, "target_table = {}", lit(tt));
        if pk.is_empty() {
            to_decide += 1;
            let _ = writeln!(
                toml,
                "# DECIDE: source table {st} has no primary key; name the column(s) that identify a row\nkey = []"
            );
        } else {
            let names: Vec<String> = pk.iter().map(|c| lit(&c.name)).collect();
            let _ = writeln!(toml, "key = [{}]", names.join(", "));
        }
        let key: Vec<&str> = pk.iter().map(|c| c.name.as_str()).collect();
        // Pair the columns first: `ignore` belongs above the column entries.
        let mut pairs: Vec<(&ColumnInfo, &ColumnInfo)> = Vec::new();
        let mut ignored: Vec<String> = Vec::new();
        for sc in &s_cols {
            if let Some(tc) = t_cols.iter().find(|t| {
                norm(&t.name) == norm(&sc.name) && !pairs.iter().any(|p| p.1.name == t.name)
            }) {
                pairs.push((sc, tc));
            }
        }
        // Second pass: an amount renamed with its unit (`Total` →
        // `total_cents`): a numeric source column and an integer target
        // column whose name starts with it, when exactly one does.
        for sc in &s_cols {
            if pairs.iter().any(|p| p.0.name == sc.name) {
                continue;
            }
            let free: Vec<&ColumnInfo> = t_cols
                .iter()
                .filter(|t| !pairs.iter().any(|p| p.1.name == t.name))
                .filter(|t| {
                    numeric_type(&sc.decl_type)
                        && integer_type(&t.decl_type)
                        && norm(&t.name).starts_with(&norm(&sc.name))
                })
                .collect();
            if let [tc] = free[..] {
                pairs.push((sc, tc));
            }
        }
        for sc in &s_cols {
            if !pairs.iter().any(|p| p.0.name == sc.name) {
                ignored.push(sc.name.clone());
            }
        }
        // In the source's column order.
        pairs.sort_by_key(|p| s_cols.iter().position(|c| c.name == p.0.name));
        if !ignored.is_empty() {
            to_decide += 1;
            let names: Vec<String> = ignored.iter().map(|c| lit(c)).collect();
            let _ = writeln!(
                toml,
                "# DECIDE: these source columns have no target column. Map each to a target column, or\n# drop them by removing the # below (the migration is then irreversible for them):\n# ignore = [{}]",
                names.join(", ")
            );
        }
        let used_t: Vec<&str> = pairs.iter().map(|p| p.1.name.as_str()).collect();
        for (sc, tc) in pairs {
            let is_key = key.contains(&sc.name.as_str());
            let mut entry = format!("\n[[tables.columns]]\nsource = {}\n", lit(&sc.name));
            if tc.name != sc.name {
                let _ = writeln!(entry, "target = {}", lit(&tc.name));
            }
            if !is_key && numeric_type(&sc.decl_type) && integer_type(&tc.decl_type) {
                let scale = match declared_scale(&sc.decl_type) {
                    Some(s) => s,
                    None => data_scale(&sample(&source, st, &key, &sc.name)?),
                };
                let _ = writeln!(
                    entry,
                    "transform = \"decimal_to_minor\"\nscale = {scale}   # from {}",
                    if declared_scale(&sc.decl_type).is_some() {
                        format!("the declared type {}", sc.decl_type)
                    } else {
                        "the data".to_string()
                    }
                );
            } else if !is_key && !key.is_empty() && !numeric_type(&sc.decl_type) {
                match propose_map(&source, st, &target, tt, &key, &sc.name, &tc.name)? {
                    Proposal::None => {}
                    Proposal::Values(values) => {
                        let shown: Vec<String> = values.iter().map(|v| lit(v)).collect();
                        let _ = writeln!(
                            entry,
                            "# a few distinct values: {}; if the target spells them otherwise, add\n# transform = \"map\" and map = {{ CODE = \"word\", … }}",
                            shown.join(", ")
                        );
                    }
                    Proposal::Map(pairs, undecided) => {
                        let _ = writeln!(entry, "transform = \"map\"");
                        if undecided > 0 {
                            to_decide += 1;
                            let _ = writeln!(
                                entry,
                                "# DECIDE: give each code its word (\"?\" marks the {undecided} not found under the same key in the target)"
                            );
                        }
                        let items: Vec<String> = pairs
                            .iter()
                            .map(|(k, v)| format!("{} = {}", lit(k), lit(v)))
                            .collect();
                        let _ = writeln!(entry, "map = {{ {} }}", items.join(", "));
                    }
                }
            }
            if !(is_key && tc.name == sc.name) {
                toml.push_str(&entry);
            }
        }
        for tc in t_cols.iter().filter(|t| !used_t.contains(&t.name.as_str())) {
            to_decide += 1;
            let _ = writeln!(
                toml,
                "\n# DECIDE: target column {}.{} ({}) has no source column: map one to it, hold a constant,\n# or leave it to the target's default (default = true instead of value):\n# [[tables.columns]]\n# target = {}\n# value = \"…\"",
                tt,
                tc.name,
                if tc.decl_type.is_empty() {
                    "untyped"
                } else {
                    &tc.decl_type
                },
                lit(&tc.name)
            );
        }
    }
    let unmatched_s: Vec<String> = s_tables
        .iter()
        .filter(|s| !t_tables.iter().any(|t| norm(t) == norm(s)))
        .cloned()
        .collect();
    let unmatched_t: Vec<String> = t_tables
        .iter()
        .filter(|t| !used_targets.contains(t))
        .cloned()
        .collect();
    for s in &unmatched_s {
        to_decide += 1;
        let _ = writeln!(
            toml,
            "\n# DECIDE: source table {s} has no target table of a matching name; add a [[tables]] with source_table = {}",
            lit(s)
        );
    }
    for t in &unmatched_t {
        to_decide += 1;
        let _ = writeln!(
            toml,
            "\n# DECIDE: target table {t} has no source table of a matching name; add a [[tables]] with target_table = {}",
            lit(t)
        );
    }
    // The draft must itself be valid TOML.
    toml::from_str::<toml::Value>(&toml).context("the drafted spec is not valid TOML (a bug)")?;
    if let Some(p) = out {
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut tmp = tempfile::NamedTempFile::new_in(dir)
            .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
        std::io::Write::write_all(&mut tmp, toml.as_bytes())?;
        // Never overwrites: refused if the file appeared meanwhile.
        tmp.persist_noclobber(p)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(InitReport {
        out: out.map(|p| p.display().to_string()),
        tables: matched,
        unmatched_source_tables: unmatched_s,
        unmatched_target_tables: unmatched_t,
        to_decide,
        toml,
    })
}

/// The report as text: the draft itself, or where it was written.
pub fn render(rep: &InitReport) -> String {
    match &rep.out {
        Some(p) => format!(
            "init: drafted {p} ({} tables matched, {} things to decide: see the DECIDE comments); next: cutover check --spec {p}\n",
            rep.tables.len(),
            rep.to_decide,
        ),
        None => rep.toml.clone(),
    }
}

/// What a text column's values suggest.
enum Proposal {
    /// Nothing: too many values, not text, or the target holds them as they are.
    None,
    /// Few distinct values and no target rows to pair them with: listed.
    Values(Vec<String>),
    /// The target spells them otherwise: each code with the word most often
    /// found under the same key (`"?"` where none was), and how many are `?`.
    Map(BTreeMap<String, String>, usize),
}

/// Whether a value reads as a code (`A`, `active`, `NC-17`, `gold_2`):
/// short, one word of letters, digits, `_` or `-`, and not a date, a time, an
/// e-mail address or a phone number.
fn looks_like_code(v: &str) -> bool {
    let digits = v.bytes().filter(u8::is_ascii_digit).count();
    !v.is_empty()
        && v.len() <= 16
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && v.bytes().any(|b| b.is_ascii_alphabetic())
        && digits * 2 <= v.len()
}

/// A `map` for a low-cardinality text column whose values the target spells
/// otherwise: each source code paired with the target word most often found
/// under the same key, `"?"` where the target has no row to tell.
fn propose_map(
    source: &Db,
    st: &str,
    target: &Db,
    tt: &str,
    key: &[&str],
    s_col: &str,
    t_col: &str,
) -> Result<Proposal> {
    let s = sample(source, st, key, s_col)?;
    let mut codes: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (_, v) in &s {
        match v {
            Value::Text(t) => {
                codes.entry(t.clone()).or_default();
            }
            Value::Null => {}
            _ => return Ok(Proposal::None),
        }
        if codes.len() > MAP_MAX_VALUES {
            return Ok(Proposal::None);
        }
    }
    if codes.is_empty() || !codes.keys().all(|c| looks_like_code(c)) {
        return Ok(Proposal::None);
    }
    // A code names a class of rows, so codes repeat. Where every row has a
    // value of its own (a small table of names), the values are data, not
    // codes, unless they are one- or two-letter codes.
    let present = s.iter().filter(|(_, v)| !matches!(v, Value::Null)).count();
    if codes.len() >= present && codes.keys().any(|c| c.len() > 2) {
        return Ok(Proposal::None);
    }
    // The target's words under the same keys (key names matched as the
    // source's, which the draft carries unchanged or renamed by position).
    let t_cols = target.table_columns(tt)?;
    let mut t_key: Vec<&str> = Vec::new();
    for k in key {
        match t_cols.iter().find(|c| norm(&c.name) == norm(k)) {
            Some(c) => t_key.push(&c.name),
            None => return Ok(Proposal::None),
        }
    }
    let t = sample(target, tt, &t_key, t_col)?;
    let words: std::collections::HashMap<String, &Value> = t
        .iter()
        .map(|(k, v)| (key_json(k).to_string(), v))
        .collect();
    let mut any_word = false;
    for (k, v) in &s {
        if let (Value::Text(code), Some(Value::Text(word))) =
            (v, words.get(&key_json(k).to_string()))
        {
            any_word = true;
            *codes
                .entry(code.clone())
                .or_default()
                .entry(word.clone())
                .or_default() += 1;
        }
    }
    // Codes the target already holds as they are need no map.
    let identical = codes.iter().all(|(c, w)| w.keys().all(|x| x == c));
    if any_word && identical {
        return Ok(Proposal::None);
    }
    if !any_word {
        return Ok(if t.is_empty() {
            Proposal::Values(codes.into_keys().collect())
        } else {
            Proposal::None
        });
    }
    let mut undecided = 0;
    let pairs = codes
        .into_iter()
        .map(|(code, words)| {
            let word = words
                .into_iter()
                .max_by_key(|(_, n)| *n)
                .map(|(w, _)| w)
                .unwrap_or_else(|| {
                    undecided += 1;
                    "?".to_string()
                });
            (code, word)
        })
        .collect();
    Ok(Proposal::Map(pairs, undecided))
}
