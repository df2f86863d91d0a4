//! The control store: cutover's own tables (docs/journal.md, "Control
//! tables"), written once for every engine. Each concept has its view —
//! the source's applied set ([`applied`]), a feed's receipts
//! ([`receipts`]), load and sync progress ([`progress`]), the journal's
//! identity ([`identity`]), the fence's record, its copy and the replay
//! verdicts ([`fence`]) — and every view writes the same SQL on every
//! engine, through the engine's [`Dialect`]: how a parameter is written,
//! the clock, byte order, the type of a 64-bit integer, how a watermark is
//! kept, the lock that serialises writers of the applied set, and the DDL
//! of each set of tables (`sql/<engine>/*.sql`).
//!
//! An engine runs what the store writes through [`ControlSql`] and nothing
//! else: a [`Statement`] can only be made here, so the seam carries no
//! way to run SQL of the caller's own.
//!
//! Statements are written with named parameters (`:journal`) and the
//! tokens `{now}` (the time, as the control tables write it), `{bytes}`
//! (after a text in `ORDER BY`: byte order) and `{bigint}` (a 64-bit
//! integer's type); a table is named `{{schema}}._cutover_…`, which the
//! engine qualifies (PostgreSQL: the spec's schema) or leaves bare.

use anyhow::{Context, Result, bail};

use super::{Catalogue, ControlSql};
use crate::value::{Row, Value};

pub mod applied;
pub mod fence;
pub mod identity;
pub mod progress;
pub mod receipts;

/// What an engine's SQL for the control tables differs in. Static data of
/// the engine ([`super::engines::Engine::dialect`]), not a connection's.
pub struct Dialect {
    /// How parameter `n` (1-based) of kind `kind` is written (`?1`;
    /// `$1::bigint`, so that PostgreSQL knows its type wherever it stands).
    pub param: fn(n: usize, kind: Kind) -> String,
    /// Whether a parameter used twice is bound once (numbered
    /// placeholders) rather than once per use.
    pub numbered: bool,
    /// The current time in UTC to the millisecond, as text
    /// (`2024-03-15T13:45:00.123Z`), as an SQL expression.
    pub now: &'static str,
    /// What follows a text column in `ORDER BY` for byte order (SQLite's
    /// default is; PostgreSQL: ` COLLATE "C"`).
    pub bytes: &'static str,
    /// The type of a 64-bit integer column.
    pub bigint: &'static str,
    /// How a sync watermark, which may be any value, is kept.
    pub watermarks: Watermarks,
    /// A statement that holds `_cutover_applied` against every other
    /// writer until the transaction ends, where the write transaction does
    /// not already (SQLite's holds the database's one write lock).
    pub lock_applied: Option<&'static str>,
    /// What follows an `INSERT` so that a row whose `key` is taken
    /// updates the columns `from_new` from the row inserted and sets
    /// `extra` (SQL assignments, or empty), or, with neither, is left out
    /// without an error (`ON CONFLICT … DO UPDATE` / `DO NOTHING`;
    /// MySQL's `ON DUPLICATE KEY UPDATE`).
    pub upsert: fn(key: &[&str], from_new: &[&str], extra: &str) -> String,
    /// A query counting which of `n` relations (text parameters 1..=n,
    /// names without a schema) exist.
    pub present: fn(n: usize) -> String,
    /// The DDL of each set of tables, with `{{schema}}` where the engine
    /// puts its schema.
    pub ddl: fn(Set) -> &'static str,
}

/// How a [`Dialect`] keeps a sync watermark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watermarks {
    /// In one column that holds any value with its kind (SQLite).
    Native,
    /// As a kind and a text that give the value back exactly
    /// (sql/postgres/sync.sql): JSON would lose a NaN, and PostgreSQL
    /// text cannot hold a NUL.
    KindAndText,
}

/// The kind of a parameter, which an engine that types its parameters
/// writes into the placeholder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Integer,
    Text,
    Boolean,
    /// Any value, kept as it is ([`Watermarks::Native`] only).
    Any,
}

/// A set of control tables, made together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Set {
    /// The target's: the journal's identity and column lists, the fence
    /// row, the load checkpoints.
    Target,
    /// The source's applied set and the columns replay keeps.
    Applied,
    /// The source's copies of the fence record and the replay verdicts.
    Verdicts,
    /// A feed's receipts and revision evidence.
    Receipts,
    /// Sync's cursor, provenance, source schema and evolved columns.
    Sync,
}

impl Set {
    /// The relations the set makes: when all are there, nothing is run
    /// (an index made `IF NOT EXISTS` would still lock its table).
    fn relations(self) -> &'static [&'static str] {
        match self {
            Set::Target => &[
                "_cutover_journal_id",
                "_cutover_journal_tables",
                "_cutover_fence",
                "_cutover_load",
            ],
            Set::Applied => &["_cutover_applied", "_cutover_kept"],
            Set::Verdicts => &["_cutover_fences", "_cutover_replays"],
            Set::Receipts => &[
                "_cutover_deliveries",
                "_cutover_deliveries_position",
                "_cutover_revisions",
            ],
            Set::Sync => &[
                "_cutover_cursor",
                "_cutover_source_schema",
                "_cutover_evolved",
            ],
        }
    }

    fn what(self) -> &'static str {
        match self {
            Set::Target => "cutover's control tables",
            Set::Applied => "the applied set",
            Set::Verdicts => "the fence's copies and the replay verdicts",
            Set::Receipts => "the feed's receipts",
            Set::Sync => "sync's control tables",
        }
    }
}

/// A statement of the control store, in the engine's dialect, with its
/// parameters in order. Made only by the store.
#[derive(Clone, Debug)]
pub struct Statement {
    text: String,
    params: Vec<Value>,
    script: bool,
}

impl Statement {
    /// The SQL, `{{schema}}` still to be put in by the engine.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The parameters, in placeholder order: integers, texts, NULLs, and
    /// booleans as the integers 0 and 1.
    pub fn params(&self) -> &[Value] {
        &self.params
    }

    /// Several statements without parameters (DDL), run as one script.
    pub fn is_script(&self) -> bool {
        self.script
    }
}

/// A parameter's value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum P<'a> {
    Int(i64),
    Text(&'a str),
    OptText(Option<&'a str>),
    Bool(bool),
    /// A value kept as it is ([`Watermarks::Native`]).
    Any(&'a Value),
}

impl P<'_> {
    fn kind(&self) -> Kind {
        match self {
            P::Int(_) => Kind::Integer,
            P::Text(_) | P::OptText(_) => Kind::Text,
            P::Bool(_) => Kind::Boolean,
            P::Any(_) => Kind::Any,
        }
    }

    fn value(&self) -> Value {
        match *self {
            P::Int(i) => Value::Integer(i),
            P::Text(t) => Value::Text(t.to_string()),
            P::OptText(t) => t.map_or(Value::Null, |t| Value::Text(t.to_string())),
            P::Bool(b) => Value::Integer(i64::from(b)),
            P::Any(v) => v.clone(),
        }
    }
}

/// Writes `template` in `dialect`: each `:name` a placeholder bound to
/// `params`' value of that name, then the tokens.
fn render(dialect: &Dialect, template: &str, params: &[(&str, P<'_>)]) -> Result<Statement> {
    let mut text = String::with_capacity(template.len() + 16);
    let mut bound: Vec<Value> = Vec::new();
    let mut numbers: Vec<(&str, usize)> = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find(':') {
        text.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if len == 0 {
            text.push(':');
            rest = after;
            continue;
        }
        let name = &after[..len];
        let Some((_, p)) = params.iter().find(|(n, _)| *n == name) else {
            bail!("control statement names parameter :{name}, which it is not given");
        };
        let n = match numbers.iter().find(|(n, _)| *n == name) {
            Some(&(_, n)) if dialect.numbered => n,
            _ => {
                bound.push(p.value());
                numbers.push((name, bound.len()));
                bound.len()
            }
        };
        text.push_str(&(dialect.param)(n, p.kind()));
        rest = &after[len..];
    }
    text.push_str(rest);
    let text = text
        .replace("{now}", dialect.now)
        .replace("{bytes}", dialect.bytes)
        .replace("{bigint}", dialect.bigint);
    Ok(Statement {
        text,
        params: bound,
        script: false,
    })
}

/// `ON CONFLICT`, as SQLite and PostgreSQL write it ([`Dialect::upsert`]).
pub fn on_conflict(key: &[&str], from_new: &[&str], extra: &str) -> String {
    let mut sets: Vec<String> = from_new
        .iter()
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    if !extra.is_empty() {
        sets.push(extra.to_string());
    }
    if sets.is_empty() {
        return "ON CONFLICT DO NOTHING".to_string();
    }
    format!(
        "ON CONFLICT ({}) DO UPDATE SET {}",
        key.join(", "),
        sets.join(", ")
    )
}

/// The engine's connection as the control store uses it: statements run,
/// and the catalogue asked which tables and columns are there.
#[derive(Clone, Copy)]
pub struct Control<'a> {
    sql: &'a dyn ControlSql,
    catalogue: &'a dyn Catalogue,
    dialect: &'static Dialect,
    location: &'a str,
}

impl<'a> Control<'a> {
    pub(crate) fn new(
        sql: &'a dyn ControlSql,
        catalogue: &'a dyn Catalogue,
        dialect: &'static Dialect,
        location: &'a str,
    ) -> Control<'a> {
        Control {
            sql,
            catalogue,
            dialect,
            location,
        }
    }

    pub(crate) fn dialect(&self) -> &'static Dialect {
        self.dialect
    }

    /// Runs a statement; the rows it changed.
    pub(crate) fn exec(&self, template: &str, params: &[(&str, P<'_>)]) -> Result<u64> {
        let st = render(self.dialect, template, params)?;
        self.sql.control_execute(&st)
    }

    /// Runs a query; its rows.
    pub(crate) fn query(&self, template: &str, params: &[(&str, P<'_>)]) -> Result<Vec<Row>> {
        let st = render(self.dialect, template, params)?;
        self.sql.control_query(&st)
    }

    /// The first row a query returns, if any.
    pub(crate) fn one(&self, template: &str, params: &[(&str, P<'_>)]) -> Result<Option<Row>> {
        Ok(self.query(template, params)?.into_iter().next())
    }

    /// Whether a table (or other relation) is there.
    pub fn has(&self, name: &str) -> Result<bool> {
        Ok(self.present(&[name])? == 1)
    }

    /// How many of `names` are there, in one query.
    fn present(&self, names: &[&str]) -> Result<usize> {
        let st = Statement {
            text: (self.dialect.present)(names.len()),
            params: names.iter().map(|n| Value::Text(n.to_string())).collect(),
            script: false,
        };
        let rows = self.sql.control_query(&st)?;
        let n = rows.first().map(|r| int(r, 0)).transpose()?.unwrap_or(0);
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Whether `table` has a column `column`.
    pub(crate) fn has_column(&self, table: &str, column: &str) -> Result<bool> {
        Ok(self
            .catalogue
            .table_columns(table)?
            .iter()
            .any(|c| c.name == column))
    }

    /// Whether none of a set's relations is there: a run that makes the
    /// set where a schema change commits at once asks it first, to take
    /// the set away again with [`Control::drop_if_empty`] if it ends
    /// having committed nothing.
    pub(crate) fn absent(&self, set: Set) -> Result<bool> {
        Ok(self.present(set.relations())? == 0)
    }

    /// Drops a set's tables if every one of them is there and holds no
    /// row: what a run made for itself and then committed nothing to (a
    /// refused load, a dry run), where a rollback cannot undo the making.
    /// Never inside an open transaction: a schema change would commit it.
    pub(crate) fn drop_if_empty(&self, set: Set) -> Result<()> {
        let names = set.relations();
        if self.present(names)? != names.len() {
            return Ok(());
        }
        for name in names {
            let row = self.one(&format!("SELECT count(*) FROM {{{{schema}}}}.{name}"), &[])?;
            if row.map(|r| int(&r, 0)).transpose()?.unwrap_or(0) != 0 {
                return Ok(());
            }
        }
        for name in names {
            self.exec(&format!("DROP TABLE IF EXISTS {{{{schema}}}}.{name}"), &[])
                .with_context(|| format!("dropping the empty {name} in {}", self.location))?;
        }
        Ok(())
    }

    /// Makes a set of tables, inside whatever transaction is open, unless
    /// every relation of it is already there.
    pub(crate) fn ensure(&self, set: Set) -> Result<()> {
        let names = set.relations();
        if self.present(names)? == names.len() {
            return Ok(());
        }
        let st = Statement {
            text: (self.dialect.ddl)(set).to_string(),
            params: Vec::new(),
            script: true,
        };
        self.sql
            .control_execute(&st)
            .with_context(|| format!("creating {} in {}", set.what(), self.location))
            .map(drop)
    }

    /// The time now as the control tables write it.
    pub fn now(&self) -> Result<String> {
        let row = self.one("SELECT {now}", &[])?;
        text(row.as_ref().context("the time")?, 0)
    }
}

/// What a control row's column holds, for a message: its kind, never the
/// value (a fingerprint's parts run to megabytes).
fn kind_of(v: Option<&Value>) -> &'static str {
    match v {
        None => "nothing",
        Some(Value::Null) => "NULL",
        Some(Value::Integer(_)) => "an integer",
        Some(Value::Real(_)) => "a real",
        Some(Value::Text(_) | Value::TextBytes(_)) => "text",
        Some(Value::Blob(_)) => "bytes",
        Some(Value::Large(l)) if l.text => "text",
        Some(Value::Large(_)) => "bytes",
        Some(Value::Digested(_)) => "a digest",
    }
}

/// Column `i` of a control row as an integer (a boolean reads as 0 or 1).
pub(crate) fn int(r: &[Value], i: usize) -> Result<i64> {
    match r.get(i) {
        Some(Value::Integer(n)) => Ok(*n),
        other => bail!(
            "a control table's column {i} holds {}, not an integer",
            kind_of(other)
        ),
    }
}

/// Column `i` as an integer, or `None` when NULL.
pub(crate) fn opt_int(r: &[Value], i: usize) -> Result<Option<i64>> {
    match r.get(i) {
        Some(Value::Null) => Ok(None),
        _ => int(r, i).map(Some),
    }
}

/// Column `i` as text (a large one too: the fingerprint's parts of a
/// fence over many tables).
pub(crate) fn text(r: &[Value], i: usize) -> Result<String> {
    match r.get(i) {
        Some(Value::Text(t)) => Ok(t.clone()),
        Some(Value::Large(l)) if l.text => String::from_utf8(l.bytes.clone()).map_err(|_| {
            anyhow::anyhow!("a control table's column {i} holds text that is not UTF-8")
        }),
        other => bail!(
            "a control table's column {i} holds {}, not text",
            kind_of(other)
        ),
    }
}

/// Column `i` as text, or `None` when NULL.
pub(crate) fn opt_text(r: &[Value], i: usize) -> Result<Option<String>> {
    match r.get(i) {
        Some(Value::Null) => Ok(None),
        _ => text(r, i).map(Some),
    }
}

/// Column `i` as a flag (an integer or boolean, not 0).
pub(crate) fn flag(r: &[Value], i: usize) -> Result<bool> {
    Ok(int(r, i)? != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(n: usize, k: Kind) -> String {
        format!(
            "${n}{}",
            match k {
                Kind::Integer => "::bigint",
                Kind::Text => "::text",
                Kind::Boolean => "::boolean",
                Kind::Any => "",
            }
        )
    }

    fn dialect(numbered_params: bool) -> Dialect {
        Dialect {
            param: if numbered_params {
                numbered
            } else {
                |_, _| "?".to_string()
            },
            numbered: numbered_params,
            now: "to_char(x, 'HH24:MI')",
            bytes: " COLLATE \"C\"",
            bigint: "bigint",
            watermarks: Watermarks::KindAndText,
            lock_applied: None,
            upsert: on_conflict,
            present: |_| String::new(),
            ddl: |_| "",
        }
    }

    #[test]
    fn a_parameter_used_twice_is_bound_once_where_placeholders_are_numbered() -> Result<()> {
        let t = "SELECT {now} WHERE tbl = :tbl AND seq >= :seq AND t2 = :tbl ORDER BY c{bytes}";
        let params = [("tbl", P::Text("a")), ("seq", P::Int(3))];
        let st = render(&dialect(true), t, &params)?;
        assert_eq!(
            st.text(),
            "SELECT to_char(x, 'HH24:MI') WHERE tbl = $1::text AND seq >= $2::bigint AND t2 = $1::text ORDER BY c COLLATE \"C\""
        );
        assert_eq!(st.params(), [Value::Text("a".into()), Value::Integer(3)]);
        // Unnumbered placeholders bind a value per use.
        let st = render(&dialect(false), t, &params)?;
        assert_eq!(st.params().len(), 3);
        assert_eq!(st.text().matches('?').count(), 3);
        Ok(())
    }

    #[test]
    fn an_upsert_sets_what_it_is_given_or_does_nothing() {
        assert_eq!(on_conflict(&["k"], &[], ""), "ON CONFLICT DO NOTHING");
        assert_eq!(
            on_conflict(&["a", "b"], &["v", "w"], "at = {now}"),
            "ON CONFLICT (a, b) DO UPDATE SET v = excluded.v, w = excluded.w, at = {now}"
        );
    }

    #[test]
    fn a_parameter_not_given_is_refused_and_a_bare_colon_kept() {
        assert!(render(&dialect(true), "WHERE a = :missing", &[]).is_err());
        let st = render(&dialect(true), "SELECT ': x'", &[]).unwrap();
        assert_eq!(st.text(), "SELECT ': x'");
        let st = render(&dialect(true), "SELECT :b", &[("b", P::Bool(true))]).unwrap();
        assert_eq!(st.params(), [Value::Integer(1)]);
        assert_eq!(st.text(), "SELECT $1::boolean");
    }
}
