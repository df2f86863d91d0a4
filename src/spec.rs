//! The migration spec: one TOML file that says where source and target are and
//! how each table's columns are carried across.
//!
//! Loading is two-staged. [`load`] parses and checks everything the file alone
//! can tell (unknown fields and transforms, a `map` that is not bijective, a bad
//! pattern); [`Spec::check_schema`] then compares every table and column with
//! the databases' own catalogue, before any command reads a row. Nothing is
//! checked by trying SQL and seeing it fail.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use regex::Regex;
use serde::Deserialize;

use crate::transform::{MAX_SCALE, SetLabels, Transform};
use crate::value::{CellRef, Value};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    source: RawEndpoint,
    target: RawEndpoint,
    tables: Vec<RawTable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpoint {
    url: String,
}

impl std::fmt::Debug for RawEndpoint {
    /// Without the URL's password, as everywhere.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawEndpoint")
            .field("url", &without_password(&self.url))
            .finish()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    name: String,
    source_table: Option<String>,
    target_table: Option<String>,
    key: Vec<String>,
    revision: Option<String>,
    watermark: Option<String>,
    /// The sync lookback of this table (`--lookback` wins where it fits).
    lookback: Option<String>,
    currency: Option<String>,
    on_change: Option<String>,
    #[serde(default)]
    ignore: Vec<String>,
    /// Replay's decision for a trigger or rule of the source table, by
    /// name, where the default does not fit.
    #[serde(default)]
    replay_policy: BTreeMap<String, Decision>,
    /// Hazards accepted, by source column: a column the spec does not
    /// carry, or one it does (its entry may say it instead).
    #[serde(default)]
    source_limit: BTreeMap<String, SourceLimit>,
    #[serde(default)]
    columns: Vec<RawColumn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawColumn {
    source: Option<String>,
    /// A target-only column's constant.
    value: Option<toml::Value>,
    /// A target-only column left to the target's own default.
    default: Option<bool>,
    target: Option<String>,
    /// Earlier names of the target column (renamed after `journal install`).
    #[serde(default)]
    was: Vec<String>,
    transform: Option<String>,
    scale: Option<u32>,
    map: Option<BTreeMap<String, String>>,
    /// What a `map`'s codes are: `"text"` (the default) or `"integer"`.
    codes: Option<String>,
    /// A `set_to_array` column's SET labels, in declaration order.
    labels: Option<Vec<String>>,
    /// The column's hazards accepted (`"watch"`).
    source_limit: Option<SourceLimit>,
    integer: Option<bool>,
    min: Option<i64>,
    values: Option<Vec<String>>,
    pattern: Option<String>,
}

/// A loaded spec with paths resolved against the spec file's folder.
#[derive(Debug)]
pub struct Spec {
    pub path: PathBuf,
    pub source: Location,
    pub target: Location,
    pub tables: Vec<Table>,
}

/// Where a database is: what a spec's `url` names, paths resolved against
/// the spec file's folder. Which engine opens a server's URL is decided by
/// its scheme, in one place (`db::engines`).
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    /// `sqlite://PATH`: a SQLite file.
    Sqlite(PathBuf),
    /// `csv://PATH`: a CSV snapshot (UTF-8, header row) of the spec's one
    /// table; a source only, never written.
    Csv(PathBuf),
    /// `SCHEME://user@host:port/db…`: a database on a server, as written
    /// (`postgres://user@host:port/db?schema=NAME`: one schema of a
    /// PostgreSQL database, `public` unless named).
    Server(String),
}

impl std::fmt::Debug for Location {
    /// As [`Location::display`]: a URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            Location::Csv(p) => f.debug_tuple("Csv").field(p).finish(),
            Location::Server(url) => f
                .debug_tuple("Server")
                .field(&without_password(url))
                .finish(),
        }
    }
}

impl Location {
    /// The file a location names; none for a server.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Location::Sqlite(p) | Location::Csv(p) => Some(p),
            Location::Server(_) => None,
        }
    }

    /// How messages name it: a path, or a URL without its password.
    pub fn display(&self) -> String {
        match self {
            Location::Sqlite(p) | Location::Csv(p) => p.display().to_string(),
            Location::Server(url) => without_password(url),
        }
    }
}

/// `postgres://user:secret@host/db` as `postgres://user:***@host/db`, and
/// a `password=` parameter's value as `***`: how every message, report and
/// JSON document names a URL.
pub fn without_password(url: &str) -> String {
    redacted(url, true)
}

/// `url` with no password at all (`postgres://user@host/db`, no
/// `password=` parameter): how a drafted spec, which is committed and
/// attached to tickets, writes it; the password then comes from the
/// engine's environment (`PGPASSWORD`, `~/.pgpass`, `MYSQL_PWD`).
pub fn password_removed(url: &str) -> String {
    redacted(url, false)
}

/// `url` with its password masked as `***` (`mask`) or left out.
fn redacted(url: &str, mask: bool) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or("");
            if mask {
                format!("{name}:***@{host}")
            } else {
                format!("{name}@{host}")
            }
        }
        _ => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .filter_map(|pair| match pair.split_once('=') {
                    Some(("password", _)) if mask => Some("password=***".to_string()),
                    Some(("password", _)) => None,
                    _ => Some(pair.to_string()),
                })
                .collect();
            if pairs.is_empty() {
                path.to_string()
            } else {
                format!("{path}?{}", pairs.join("&"))
            }
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// `text` with every password of a URL in it (`scheme://user:PASSWORD@`,
/// `password=PASSWORD`) replaced by `***`: the last guard on what the
/// binary prints.
pub fn mask_passwords(text: &str) -> String {
    use std::sync::OnceLock;
    static USERINFO: OnceLock<regex::Regex> = OnceLock::new();
    static PARAM: OnceLock<regex::Regex> = OnceLock::new();
    let userinfo = USERINFO.get_or_init(|| {
        regex::Regex::new(r#"([A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s'"]*):[^@/?#\s'"]*@"#)
            .expect("a valid pattern")
    });
    let param = PARAM
        .get_or_init(|| regex::Regex::new(r#"\bpassword=[^&\s'"]*"#).expect("a valid pattern"));
    let text = userinfo.replace_all(text, "$1:***@");
    param.replace_all(&text, "password=***").into_owned()
}

/// A database's url: a SQLite file relative to `base` (the spec's folder,
/// or the current one on the command line), or a server's URL as written;
/// which engine answers to its scheme is asked when it is opened.
pub fn database(base: &Path, url: &str) -> Result<Location> {
    match url.split_once("://") {
        Some((scheme, path)) if scheme.eq_ignore_ascii_case("sqlite") && !path.is_empty() => {
            Ok(Location::Sqlite(base.join(path)))
        }
        Some((scheme, rest))
            if !scheme.is_empty()
                && !rest.is_empty()
                && !scheme.eq_ignore_ascii_case("csv")
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            Ok(Location::Server(url.to_string()))
        }
        _ => bail!(
            "url '{}' is not supported; write sqlite://PATH (in a spec, relative to its folder), a server's URL such as postgres://USER@HOST:PORT/DB?schema=NAME, or csv://PATH for a source snapshot",
            without_password(url)
        ),
    }
}

/// One migrated table. `columns` holds the key columns first (carried as
/// `copy`), then the mapped ones; every row in the tool uses this order.
#[derive(Clone, Debug)]
pub struct Table {
    pub name: String,
    pub source_table: String,
    pub target_table: String,
    pub key_len: usize,
    pub columns: Vec<Column>,
    pub ignore: Vec<String>,
    pub currency: Option<usize>,
    /// The revision column, when records carry one (see apply's revision rule).
    pub revision: Option<usize>,
    /// The sync cursor's column (a mapped source column).
    pub watermark: Option<usize>,
    /// The table's sync lookback window (`lookback = "2d"` or a number).
    pub lookback: Option<String>,
    /// Target-only columns left to the target's default (`default = true`):
    /// never written by load, never compared, never carried back.
    pub target_defaults: Vec<String>,
    pub on_change: OnChange,
    /// Replay's decision for a trigger or rule of the source table, by
    /// name (`replay_policy = { touch = "fire" }`), overriding the default.
    pub replay_policy: BTreeMap<String, Decision>,
    /// Source columns whose hazards the spec accepts (`source_limit =
    /// "watch"`): `check` notes them, `journal install` goes ahead, and
    /// `watch` counts each write that crosses one.
    pub watched: BTreeSet<String>,
}

/// What the spec decides about a hazard of a source column
/// (crate::hazards): the only decision is to accept it and watch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceLimit {
    /// The target may hold what the source cannot; `watch` counts each
    /// write that crosses the source's limit, and such a write is a
    /// conflict at the rollback.
    Watch,
}

/// What replay does about one trigger or rule of the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// It acts on replay's writes as on the application's.
    Fire,
    /// It does not act on replay's writes.
    Suppress,
}

/// What a different row under a known key does when there is no revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnChange {
    /// Refused as a conflict (the default): never a blind replace.
    Reject,
    /// The later change (feed position, sync watermark) replaces the row.
    Update,
}

#[derive(Clone, Debug)]
pub struct Column {
    pub source: String,
    pub target: String,
    /// Names the target column had before (`was = ["cents"]`): journal
    /// entries recorded under one of them are read as this column.
    pub was: Vec<String>,
    pub transform: Transform,
    pub checks: Checks,
}

/// Checks on a column's canonical (target) value.
#[derive(Clone, Debug, Default)]
pub struct Checks {
    pub integer: bool,
    pub min: Option<i64>,
    pub values: Option<BTreeSet<String>>,
    pub pattern: Option<Regex>,
}

impl Checks {
    /// Checks a canonical value; NULL passes (nullability is the schema's job).
    pub fn check(&self, v: &Value) -> Result<(), String> {
        self.check_ref(v.as_cell())
    }

    /// The same, on a borrowed cell (the hot path: most columns have no
    /// checks, and the rest are checked out of line).
    #[inline]
    pub fn check_ref(&self, v: CellRef<'_>) -> Result<(), String> {
        if self.is_empty() || matches!(v, CellRef::Null) {
            return Ok(());
        }
        self.check_present(v)
    }

    #[inline(never)]
    fn check_present(&self, v: CellRef<'_>) -> Result<(), String> {
        let shown = || v.to_value();
        if (self.integer || self.min.is_some()) && !matches!(v, CellRef::Integer(_)) {
            return Err(format!(
                "{} is not an integer ({})",
                shown(),
                shown().class()
            ));
        }
        if let (Some(min), CellRef::Integer(i)) = (self.min, v)
            && i < min
        {
            return Err(format!("{i} is below the minimum {min}"));
        }
        let text = match v {
            CellRef::Text(t) => std::str::from_utf8(t).ok(),
            _ => None,
        };
        if let Some(values) = &self.values
            && !text.is_some_and(|t| values.contains(t))
        {
            return Err(format!("{} is not one of the allowed values", shown()));
        }
        if let Some(re) = &self.pattern
            && !text.is_some_and(|t| re.is_match(t))
        {
            return Err(format!(
                "{} does not match the pattern {}",
                shown(),
                re.as_str()
            ));
        }
        Ok(())
    }

    /// Whether there is no check at all.
    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.integer && self.min.is_none() && self.values.is_none() && self.pattern.is_none()
    }
}

impl Table {
    /// The columns whose values a comparison of rows needs only to compare:
    /// carried as `copy`, with no check, and not in the key. Their large
    /// values can be read as digests ([`crate::db::TableSql::digesting`]).
    pub fn compared_only(&self) -> impl Iterator<Item = usize> + '_ {
        self.columns
            .iter()
            .enumerate()
            .skip(self.key_len)
            .filter(|(_, c)| {
                matches!(c.transform, crate::transform::Transform::Copy) && c.checks.is_empty()
            })
            .map(|(i, _)| i)
    }

    pub fn key_columns(&self) -> &[Column] {
        &self.columns[..self.key_len]
    }

    pub fn source_names(&self) -> Vec<&str> {
        self.columns.iter().map(|c| c.source.as_str()).collect()
    }

    pub fn target_names(&self) -> Vec<&str> {
        self.columns.iter().map(|c| c.target.as_str()).collect()
    }

    /// Indexes of the `decimal_to_minor` columns, whose sums are control totals.
    pub fn money_columns(&self) -> Vec<usize> {
        (0..self.columns.len())
            .filter(|&i| matches!(self.columns[i].transform, Transform::DecimalToMinor { .. }))
            .collect()
    }
}

impl Spec {
    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }
}

/// Which side of the migration a database is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Source,
    Target,
}

impl Side {
    /// The variable that gives this side's password, whatever its engine
    /// (docs/engines.md).
    pub fn password_variable(self) -> &'static str {
        match self {
            Side::Source => "CUTOVER_SOURCE_PASSWORD",
            Side::Target => "CUTOVER_TARGET_PASSWORD",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Source => "source",
            Side::Target => "target",
        })
    }
}

/// Reads and checks a spec file.
pub fn load(path: &Path) -> Result<Spec> {
    if path.is_dir() {
        bail!(
            "spec {} is a directory; pass the spec's .toml file",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading spec {}; check the path given to --spec",
            path.display()
        )
    })?;
    from_text(&text, path)
}

/// Checks a spec's text as the file `path` would hold it: messages name
/// `path`, and relative paths in it are relative to its folder.
pub fn from_text(text: &str, path: &Path) -> Result<Spec> {
    let raw: RawSpec = toml::from_str(text).map_err(|e| {
        anyhow::anyhow!(
            "spec {} is not valid: {}",
            path.display(),
            e.to_string().trim_end()
        )
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let ctx = |what: &str| format!("spec {}: {what}", path.display());
    let source = match raw.source.url.strip_prefix("csv://") {
        Some(p) if !p.is_empty() => Location::Csv(base.join(p)),
        _ => database(base, &raw.source.url).with_context(|| ctx("[source] url"))?,
    };
    let target = database(base, &raw.target.url).with_context(|| ctx("[target] url"))?;
    if source == target {
        if let Location::Server(_) = &source {
            // One schema holding both the old and the new table (an
            // expand/contract migration, `orders` → `orders_v2`): cutover's
            // journal, fence and applied set are kept per side, each in its
            // side's schema, so the two sides must be two schemas.
            bail!(
                "spec {}: source and target are the same schema of one database ({}); cutover keeps the target's journal and fence and the source's applied set apart by schema, so the two sides must be two schemas. Put the new tables in a schema of their own (CREATE SCHEMA v2; ALTER TABLE orders_v2 SET SCHEMA v2) and name it in the target's url (?schema=v2)",
                path.display(),
                source.display()
            );
        }
        bail!(
            "spec {}: source and target are the same file {}; they must be two databases",
            path.display(),
            source.display()
        );
    }
    if raw.tables.is_empty() {
        bail!(
            "spec {}: no [[tables]]; describe at least one table",
            path.display()
        );
    }
    let mut names = BTreeSet::new();
    let mut tables = Vec::new();
    for t in raw.tables {
        if !names.insert(t.name.clone()) {
            bail!(
                "spec {}: table '{}' is described twice",
                path.display(),
                t.name
            );
        }
        let name = t.name.clone();
        tables.push(resolve_table(t).with_context(|| ctx(&format!("table '{name}'")))?);
    }
    if matches!(source, Location::Csv(_)) && tables.len() != 1 {
        bail!(
            "spec {}: a csv:// source is a snapshot of one table; describe exactly one [[tables]]",
            path.display()
        );
    }
    Ok(Spec {
        path: path.to_path_buf(),
        source,
        target,
        tables,
    })
}

fn resolve_table(t: RawTable) -> Result<Table> {
    if t.key.is_empty() {
        bail!("key is empty; name the column(s) that identify a row, e.g. key = [\"id\"]");
    }

    let on_change = match t.on_change.as_deref() {
        None | Some("reject") => OnChange::Reject,
        Some("update") => OnChange::Update,
        Some(other) => bail!("on_change = '{other}' is not one of \"reject\", \"update\""),
    };
    let mut columns: Vec<Column> = t
        .key
        .iter()
        .map(|k| Column {
            source: k.clone(),
            target: k.clone(),
            was: Vec::new(),
            transform: Transform::Copy,
            checks: Checks::default(),
        })
        .collect();
    let mut target_defaults = Vec::new();
    let mut watched: BTreeSet<String> = t.source_limit.keys().cloned().collect();
    for c in t.columns {
        if c.source_limit.is_some() {
            match &c.source {
                Some(s) => watched.insert(s.clone()),
                None => bail!(
                    "column '{}': source_limit = … decides about a source column's limit; a target-only column has none",
                    c.target.as_deref().unwrap_or("?")
                ),
            };
        }
        if c.default == Some(true) {
            let Some(target) = c.target.clone() else {
                bail!(
                    "a column with default = true is a target-only column: name it with target = \"…\""
                );
            };
            if c.source.is_some() || c.value.is_some() || c.transform.is_some() {
                bail!(
                    "column '{target}': default = true leaves it to the target's default; it takes no source, value or transform"
                );
            }
            target_defaults.push(target);
            continue;
        }
        let col = resolve_column(c)?;
        if let Some(i) = t.key.iter().position(|k| *k == col.source) {
            // A key column may be listed, to rename it in the target
            // (`InvoiceId` → `invoice_id`) or to check it, but it is carried
            // as the copy it is: a key must round-trip unchanged.
            if col.transform != Transform::Copy {
                bail!(
                    "key column '{}' must be carried as copy (it may be renamed with target = \"…\")",
                    col.source
                );
            }
            columns[i].target = col.target;
            columns[i].was = col.was;
            columns[i].checks = col.checks;
            continue;
        }
        columns.push(col);
    }
    let mut seen_s = BTreeSet::new();
    let mut seen_t = BTreeSet::new();
    for c in &columns {
        // A target-only constant has no source column.
        if !c.source.is_empty() && !seen_s.insert(c.source.as_str()) {
            bail!("source column '{}' is mapped twice", c.source);
        }
        if !seen_t.insert(c.target.as_str()) {
            bail!("target column '{}' is the target of two mappings", c.target);
        }
    }
    // Each earlier name stands for one column, and for no column of the
    // target as it is now.
    let mut seen_was = BTreeSet::new();
    for c in &columns {
        for w in &c.was {
            if *w == c.target || seen_t.contains(w.as_str()) {
                bail!(
                    "column '{}': was = [\"{w}\"] names a column the spec maps now; an earlier name must be one no mapped target column has",
                    c.target
                );
            }
            if !seen_was.insert(w.as_str()) {
                bail!(
                    "'{w}' is named in was = […] of two columns; an earlier name belongs to one column"
                );
            }
        }
    }
    for i in &t.ignore {
        if seen_s.contains(i.as_str()) {
            bail!("column '{i}' is both mapped and ignored; remove one");
        }
    }
    let revision = match &t.revision {
        None => None,
        Some(r) => {
            let i = columns
                .iter()
                .position(|col| col.target == *r)
                .with_context(|| format!("revision column '{r}' is not a mapped target column; map it (transform copy)"))?;
            if i < t.key.len() {
                bail!(
                    "revision column '{r}' is part of the key; a revision must be a separate column"
                );
            }
            columns[i].checks.integer = true;
            columns[i].checks.min = Some(columns[i].checks.min.unwrap_or(1).max(1));
            Some(i)
        }
    };
    let watermark = match &t.watermark {
        None => None,
        Some(w) => Some(
            columns
                .iter()
                .position(|col| col.source == *w)
                .with_context(|| format!("watermark column '{w}' is not a mapped source column; map it (it is usually carried as copy)"))?,
        ),
    };
    let currency = match &t.currency {
        None => None,
        Some(c) => Some(
            columns
                .iter()
                .position(|col| col.target == *c)
                .with_context(|| format!("currency column '{c}' is not a mapped target column"))?,
        ),
    };
    Ok(Table {
        source_table: t.source_table.unwrap_or_else(|| t.name.clone()),
        target_table: t.target_table.unwrap_or_else(|| t.name.clone()),
        name: t.name,
        key_len: t.key.len(),
        columns,
        ignore: t.ignore,
        currency,
        revision,
        watermark,
        lookback: t.lookback,
        target_defaults,
        on_change,
        replay_policy: t.replay_policy,
        watched,
    })
}

fn resolve_column(c: RawColumn) -> Result<Column> {
    if let Some(v) = &c.value {
        // A target-only column: `target = "currency"`, `value = "USD"`.
        let target = c.target.clone().context(
            "a column with value = … is a target-only column: name it with target = \"…\"",
        )?;
        if c.source.is_some() || c.transform.is_some() || c.scale.is_some() || c.map.is_some() {
            bail!(
                "column '{target}': value = … is a target-only constant; it takes no source, transform, scale or map"
            );
        }
        let value = match v {
            toml::Value::String(s) => Value::Text(s.clone()),
            toml::Value::Integer(i) => Value::Integer(*i),
            other => bail!(
                "column '{target}': value = {other} is not supported; a constant is a string or an integer"
            ),
        };
        return Ok(Column {
            source: String::new(),
            target,
            was: c.was.clone(),
            transform: Transform::Constant(value),
            checks: Checks::default(),
        });
    }
    let Some(source) = c.source.clone() else {
        bail!(
            "a [[tables.columns]] entry needs source = \"…\" (or, for a target-only column, target = \"…\" and value = …)"
        );
    };
    let what = format!("column '{source}'");
    let transform = transform_of(&c, &what)?;
    if c.labels.is_some() && !matches!(transform, Transform::SetToArray(_)) {
        bail!("{what}: labels = […] is only for transform = \"set_to_array\"");
    }
    if c.scale.is_some() && !matches!(transform, Transform::DecimalToMinor { .. }) {
        bail!("{what}: scale is only for decimal_to_minor");
    }
    if c.codes.is_some() && !matches!(transform, Transform::Map { .. }) {
        bail!("{what}: codes = … is only for transform = \"map\"");
    }
    if c.map.is_some() && !matches!(transform, Transform::Map { .. }) {
        bail!("{what}: map = {{…}} is only for transform = \"map\"");
    }
    let pattern =
        match c.pattern {
            None => None,
            Some(p) => Some(Regex::new(&p).with_context(|| {
                format!("{what}: pattern '{p}' is not a valid regular expression")
            })?),
        };
    Ok(Column {
        target: c.target.unwrap_or_else(|| source.clone()),
        was: c.was,
        source,
        transform,
        checks: Checks {
            integer: c.integer.unwrap_or(false),
            min: c.min,
            values: c.values.map(|v| v.into_iter().collect()),
            pattern,
        },
    })
}

/// The transform a column entry names, built from what it takes.
fn transform_of(c: &RawColumn, what: &str) -> Result<Transform> {
    Ok(match c.transform.as_deref().unwrap_or("copy") {
        "copy" => Transform::Copy,
        "decimal_to_minor" => {
            let scale = c.scale.with_context(|| {
                format!("{what}: decimal_to_minor needs a scale, e.g. scale = 2")
            })?;
            if scale > MAX_SCALE {
                bail!("{what}: scale {scale} is past the largest supported scale {MAX_SCALE}");
            }
            Transform::DecimalToMinor {
                scale,
                typed: Default::default(),
            }
        }
        "map" => {
            let map = c.map.clone().with_context(|| {
                format!("{what}: map needs a table, e.g. map = {{ A = \"active\" }}")
            })?;
            if map.is_empty() {
                bail!("{what}: map is empty");
            }
            let integers = match c.codes.as_deref() {
                None | Some("text") => false,
                Some("integer") => true,
                Some(other) => bail!(
                    "{what}: codes = \"{other}\" is not a kind of code; use \"text\" or \"integer\""
                ),
            };
            Transform::map_of(map, integers).map_err(|e| anyhow::anyhow!("{what}: {e}"))?
        }
        "set_to_array" => {
            let labels = c.labels.clone().with_context(|| {
                format!(
                    "{what}: set_to_array needs the SET's labels in declaration order, e.g. labels = [\"a\", \"b\"] for SET('a','b')"
                )
            })?;
            Transform::SetToArray(
                SetLabels::new(labels).map_err(|e| anyhow::anyhow!("{what}: {e}"))?,
            )
        }
        other => {
            bail!(
                "{what}: unknown transform '{other}'; use one of copy, decimal_to_minor, map, set_to_array"
            )
        }
    })
}

/// A spec of `text` (its tables; the source and target are the SQLite
/// files `s.db` and `t.db` beside it) written to a temporary folder and
/// loaded, for the unit tests of the modules that read a spec.
#[cfg(test)]
pub(crate) fn in_folder(tables: &str) -> (tempfile::TempDir, Spec) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spec.toml");
    std::fs::write(
        &path,
        format!("[source]\nurl = \"sqlite://s.db\"\n[target]\nurl = \"sqlite://t.db\"\n{tables}"),
    )
    .unwrap();
    let spec = load(&path).unwrap();
    (dir, spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("spec.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    const HEAD: &str = "[source]\nurl = \"sqlite://s.db\"\n[target]\nurl = \"sqlite://t.db\"\n";

    #[test]
    fn a_drafted_url_holds_no_password_at_all() {
        for (url, drafted) in [
            ("mysql://me:pw@h:3306/db", "mysql://me@h:3306/db"),
            (
                "postgres://me@h/db?password=pw&sslmode=require",
                "postgres://me@h/db?sslmode=require",
            ),
            ("postgres://me@h/db?password=pw", "postgres://me@h/db"),
            ("postgres://me@h/db?schema=s", "postgres://me@h/db?schema=s"),
            ("sqlite://x.db", "sqlite://x.db"),
        ] {
            assert_eq!(password_removed(url), drafted);
        }
    }

    #[test]
    fn urls_are_shown_without_their_passwords() {
        for (url, shown) in [
            (
                "postgres://me:pw@h:5432/db?schema=s",
                "postgres://me:***@h:5432/db?schema=s",
            ),
            (
                "postgres://me@h/db?password=pw&sslmode=require",
                "postgres://me@h/db?password=***&sslmode=require",
            ),
            ("postgres://me@h/db", "postgres://me@h/db"),
            ("sqlite://x.db", "sqlite://x.db"),
        ] {
            assert_eq!(without_password(url), shown);
            assert_eq!(
                mask_passwords(&format!("error in '{url}': x")),
                format!("error in '{shown}': x")
            );
        }
        assert_eq!(
            format!("{:?}", Location::Server("postgres://me:pw@h/db".into())),
            "Server(\"postgres://me:***@h/db\")"
        );
        assert_eq!(
            mask_passwords("mysql://a:b%40c@host/x and password=zz"),
            "mysql://a:***@host/x and password=***"
        );
    }

    #[test]
    fn paths_resolve_against_the_spec_folder() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = write(
            dir.path(),
            &format!("{HEAD}[[tables]]\nname = \"orders\"\nkey = [\"id\"]\n"),
        );
        let spec = load(&p)?;
        assert_eq!(spec.source, Location::Sqlite(dir.path().join("s.db")));
        assert_eq!(spec.tables[0].source_table, "orders");
        assert_eq!(spec.tables[0].columns.len(), 1);
        Ok(())
    }

    #[test]
    fn one_postgres_schema_on_both_sides_is_refused_with_the_way_that_works() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let url = "postgres://app@db.internal/shop?schema=public";
        let p = write(
            dir.path(),
            &format!(
                "[source]\nurl = \"{url}\"\n[target]\nurl = \"{url}\"\n[[tables]]\nname = \"orders\"\ntarget_table = \"orders_v2\"\nkey = [\"id\"]\n"
            ),
        );
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(
            err.contains("same schema of one database") && err.contains("?schema=v2"),
            "{err}"
        );
        assert!(!err.contains("same file"), "{err}");
        Ok(())
    }

    #[test]
    fn unknown_transform_is_refused() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = write(
            dir.path(),
            &format!(
                "{HEAD}[[tables]]\nname = \"o\"\nkey = [\"id\"]\n[[tables.columns]]\nsource = \"a\"\ntransform = \"round\"\n"
            ),
        );
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(err.contains("unknown transform 'round'"), "{err}");
        Ok(())
    }

    #[test]
    fn non_bijective_map_is_refused() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = write(
            dir.path(),
            &format!(
                "{HEAD}[[tables]]\nname = \"o\"\nkey = [\"id\"]\n[[tables.columns]]\nsource = \"s\"\ntransform = \"map\"\nmap = {{ A = \"x\", B = \"x\" }}\n"
            ),
        );
        let err = format!("{:#}", load(&p).unwrap_err());
        assert!(
            err.contains("both map to 'x'") && err.contains("table 'o'"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn unknown_field_is_refused() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = write(
            dir.path(),
            &format!("{HEAD}[[tables]]\nname = \"o\"\nkeys = [\"id\"]\n"),
        );
        assert!(format!("{:#}", load(&p).unwrap_err()).contains("keys"));
        Ok(())
    }

    #[test]
    fn checks_apply_to_canonical_values() -> Result<()> {
        let c = Checks {
            integer: false,
            min: Some(0),
            values: None,
            pattern: Some(Regex::new("^[A-Z]{3}$")?),
        };
        assert!(c.check(&Value::Integer(-1)).is_err());
        assert!(c.check(&Value::Text("1".into())).is_err());
        let p = Checks {
            pattern: Some(Regex::new("^[A-Z]{3}$")?),
            ..Checks::default()
        };
        assert!(p.check(&Value::Text("EUR".into())).is_ok());
        assert!(p.check(&Value::Text("eur".into())).is_err());
        Ok(())
    }
}
