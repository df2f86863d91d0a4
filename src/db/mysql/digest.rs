//! Digests on MySQL and MariaDB: the [`Digests`] interface, a table's
//! canonical rows hashed and summed inside the server per key range, so
//! the gate reads rows only where the two sides differ (as
//! pt-table-checksum does with CRC32 chunks, with a stronger hash).
//!
//! Each value is spelled as the engine reads it ([`super::types`]), with
//! its kind as the merge compares it (`reconcile::cells_equal`, equality
//! with kind): an integer by its digits (`YEAR` and `BIT` as numbers), a
//! `DECIMAL` as the server prints it, text by its utf8mb4 bytes, bytes as
//! they are, `DATE`, `DATETIME` and `TIMESTAMP` in the engine's spelling
//! (`2024-03-15 13:45:00.5`, a `TIMESTAMP` in UTC then `+00`). A value is
//! its kind's letter, its length in bytes, `:` and its bytes, or `n` for
//! NULL; a text or blob of more than [`LONG`] bytes is spelled by its own
//! length and its MD5, so it never spells as a shorter value. A row is its values in column order, hashed by the first 64
//! bits of its MD5; a range is the exact sum of its rows' hashes (keys are
//! unique, so the sum stands for the set of rows, and no sort is needed).
//! Every server of MySQL or MariaDB computes the same digest of the same
//! rows. PostgreSQL hashes otherwise: a gate between the two streams.
//!
//! The source's transforms run in SQL exactly as `transform` runs them:
//! `decimal_to_minor` over a `DECIMAL` (exact decimal arithmetic, the
//! 64-bit range checked, a column scale other than the spec's a note) or an
//! integer, `map` as a `CASE` on bytes, constants as literals; the checks
//! `integer`, `min` and `values` on the result. A value the engine refuses
//! on reading (the zero date, a `BIGINT UNSIGNED` past 2^63) and a row that
//! is invalid or not canonical is counted as a note, so the gate streams
//! its range and reports it as the merge does.
//!
//! Refused, so that the table is streamed (the report says why): `FLOAT`
//! and `DOUBLE` (the server prints reals rounded), MySQL's `JSON`, `TIME`,
//! `decimal_to_minor` over text (only cutover's parser reads it), a key
//! that is not NOT NULL and unique.
//!
//! Each row's range is found by a binary search over the ranges' bounds
//! (`INTERVAL()` for a key of one integer column, nested `CASE`s of key
//! tuples for others), so a table is digested into thousands of ranges in
//! one pass. Bounds are bound as parameters, compared with the key's order
//! expressions ([`super::types::Kind::order`]); the texts of a map or a
//! constant are written as hexadecimal literals, never as quoted text.

use anyhow::{Context, Result, bail};
use mysql::Value as My;
use mysql::prelude::Queryable;

use super::table_sql::Plan;
use super::types::{self, Kind};
use super::{MySql, quote_ident};
use crate::db::segments::{self, Group};
use crate::db::{
    Catalogue, CellForm, ColumnForm, Digests, KeyRange, SegmentDigest, TableForm, TableSql,
};
use crate::value::{Block, Row, Value};

/// A text or blob longer than this many bytes is spelled by its MD5, so
/// that a row's spelling stays well under `max_allowed_packet`.
pub const LONG: u64 = 32 << 10;

/// The most parameters one statement binds (the protocol's limit is 65,535).
const MAX_PARAMS: usize = 60_000;

/// The largest and smallest 64-bit integers, the range of minor units.
const I64_RANGE: &str = "BETWEEN -9223372036854775808 AND 9223372036854775807";

/// A canonical value in SQL.
struct Canon {
    /// Its kind: `'n'` NULL, `'i'` integer, `'t'` text, `'b'` bytes, `'x'`
    /// a value that cannot be carried.
    tag: String,
    /// Its bytes (NULL for `'n'` and `'x'`).
    payload: String,
    /// What a row's spelling holds in place of the bytes, when not the
    /// bytes themselves (a long value's MD5, see [`long`]).
    body: Option<String>,
    /// The value as a 64-bit integer when it is one, else NULL.
    int: String,
    /// The row cannot be carried across (a `Note::Invalid`).
    invalid: String,
    /// Accepted but not canonical (a `Note::NonCanonical`).
    noncanonical: String,
}

/// `X'…'`: bytes as a literal no quoting can break.
fn hex(bytes: &[u8]) -> String {
    format!("X'{}'", hex::encode(bytes))
}

/// The literal of `10^scale`, an exact decimal.
fn factor(scale: u32) -> String {
    format!("1{}", "0".repeat(scale as usize))
}

/// How a column of `kind` (quoted `c`) reads: its tag, its payload and
/// its integer when not NULL, and when the engine refuses it on reading.
fn stored(kind: &Kind, c: &str) -> Result<(char, String, Option<String>, String)> {
    let date_bad = format!(
        "(YEAR({c}) = 0 OR MONTH({c}) = 0 OR DAYOFMONTH({c}) = 0 OR coalesce(DAYOFMONTH({c}) > DAYOFMONTH(LAST_DAY({c})), true))"
    );
    let clock = format!(
        "CONCAT(DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s'), IF(MICROSECOND({c}) = 0, '', CONCAT('.', TRIM(TRAILING '0' FROM LPAD(MICROSECOND({c}), 6, '0')))))"
    );
    Ok(match kind {
        Kind::Int { bytes, unsigned } => {
            let big = *bytes == 8 && *unsigned;
            let bad = if big {
                format!("({c} > 9223372036854775807)")
            } else {
                "false".into()
            };
            let int = if big {
                format!("CAST(IF({c} > 9223372036854775807, NULL, {c}) AS SIGNED)")
            } else {
                c.to_string()
            };
            ('i', format!("CONCAT({c})"), Some(int), bad)
        }
        Kind::Year => (
            'i',
            format!("CONCAT({c} + 0)"),
            Some(format!("({c} + 0)")),
            "false".into(),
        ),
        Kind::Bit { width } => {
            let bad = if *width == 64 {
                format!("({c} + 0 > 9223372036854775807)")
            } else {
                "false".into()
            };
            let int = format!("CAST(IF({c} + 0 > 9223372036854775807, NULL, {c} + 0) AS SIGNED)");
            ('i', format!("CONCAT({c} + 0)"), Some(int), bad)
        }
        Kind::Decimal { .. } => ('t', format!("CONCAT({c})"), None, "false".into()),
        Kind::Char | Kind::Enum(_) | Kind::Set(_) => (
            't',
            format!("CAST(CONVERT({c} USING utf8mb4) AS BINARY)"),
            None,
            "false".into(),
        ),
        Kind::Text => {
            let t = format!("CAST(CONVERT({c} USING utf8mb4) AS BINARY)");
            ('t', t, None, "false".into())
        }
        Kind::Binary { .. } => ('b', format!("CAST({c} AS BINARY)"), None, "false".into()),
        Kind::Blob => ('b', format!("CAST({c} AS BINARY)"), None, "false".into()),
        Kind::Date => ('t', format!("DATE_FORMAT({c}, '%Y-%m-%d')"), None, date_bad),
        Kind::DateTime { .. } => ('t', clock, None, date_bad),
        Kind::Timestamp { .. } => ('t', format!("CONCAT({clock}, '+00')"), None, date_bad),
        Kind::Float { .. } | Kind::Double { .. } => {
            bail!(
                "a {} is printed rounded by the server, so only the merge compares it exactly",
                kind.name()
            )
        }
        Kind::Json => bail!("MySQL's JSON is printed normalised by the server"),
        Kind::Time { .. } => bail!("a TIME is not digested yet"),
    })
}

/// What a row's spelling holds of a text or blob: its bytes, or past
/// [`LONG`] bytes their MD5. The length before it is the value's own, so a
/// value of more than [`LONG`] bytes is never spelled as a shorter one.
fn long(p: &str) -> String {
    format!("IF(LENGTH({p}) > {LONG}, MD5({p}), {p})")
}

/// The canonical value of quoted `c` of `kind` through `form`.
fn canon(kind: &Kind, c: &str, form: &ColumnForm) -> Result<Canon> {
    let (tag, p, int, bad) = stored(kind, c)?;
    let not_null = format!("({c} IS NOT NULL)");
    let out = match &form.form {
        CellForm::Copy => Canon {
            tag: format!("(CASE WHEN {c} IS NULL THEN 'n' WHEN {bad} THEN 'x' ELSE '{tag}' END)"),
            body: matches!(kind, Kind::Text | Kind::Blob).then(|| long(&p)),
            payload: p,
            int: int.unwrap_or_else(|| "NULL".into()),
            invalid: format!("({not_null} AND {bad})"),
            noncanonical: "false".into(),
        },
        CellForm::Constant(v) => match v {
            Value::Integer(i) => Canon {
                tag: "'i'".into(),
                payload: format!("'{i}'"),
                body: None,
                int: i.to_string(),
                invalid: "false".into(),
                noncanonical: "false".into(),
            },
            Value::Text(t) => Canon {
                tag: "'t'".into(),
                payload: hex(t.as_bytes()),
                body: None,
                int: "NULL".into(),
                invalid: "false".into(),
                noncanonical: "false".into(),
            },
            Value::Null => Canon {
                tag: "'n'".into(),
                payload: "NULL".into(),
                body: None,
                int: "NULL".into(),
                invalid: "false".into(),
                noncanonical: "false".into(),
            },
            other => bail!("a constant {other} is not digested"),
        },
        CellForm::Map(pairs) => {
            if tag != 't' {
                // Only text is a code; NULL stays NULL.
                Canon {
                    tag: format!("IF({not_null}, 'x', 'n')"),
                    payload: "NULL".into(),
                    body: None,
                    int: "NULL".into(),
                    invalid: not_null,
                    noncanonical: "false".into(),
                }
            } else {
                let mut word = format!("(CASE {p}");
                for (code, w) in pairs {
                    word.push_str(&format!(
                        " WHEN {} THEN {}",
                        hex(code.as_bytes()),
                        hex(w.as_bytes())
                    ));
                }
                word.push_str(" END)");
                Canon {
                    tag: format!(
                        "(CASE WHEN {c} IS NULL THEN 'n' WHEN {bad} OR {word} IS NULL THEN 'x' ELSE 't' END)"
                    ),
                    invalid: format!("({not_null} AND ({bad} OR {word} IS NULL))"),
                    payload: word,
                    body: None,
                    int: "NULL".into(),
                    noncanonical: "false".into(),
                }
            }
        }
        CellForm::DecimalToMinor(s) => minor(kind, c, *s, tag, int.as_deref(), &bad)?,
    };
    Ok(checked(out, form))
}

/// `out` with the checks of `form` (`integer`, `min`, `values`) run on
/// it: a value that fails one is invalid; NULL passes.
fn checked(mut out: Canon, form: &ColumnForm) -> Canon {
    let mut fails = Vec::new();
    if form.integer || form.min.is_some() {
        fails.push(format!("{} NOT IN ('n', 'i')", out.tag));
    }
    if let Some(min) = form.min {
        fails.push(format!("({} < {min})", out.int));
    }
    if let Some(values) = &form.values {
        let list: Vec<String> = values.iter().map(|v| hex(v.as_bytes())).collect();
        let inside = if list.is_empty() {
            "false".to_string()
        } else {
            format!("CAST({} AS BINARY) IN ({})", out.payload, list.join(", "))
        };
        fails.push(format!(
            "({t} <> 'n' AND NOT coalesce({t} = 't' AND {inside}, false))",
            t = out.tag
        ));
    }
    if !fails.is_empty() {
        out.invalid = format!(
            "({} OR coalesce({}, false))",
            out.invalid,
            fails.join(" OR ")
        );
    }
    out
}

/// `decimal_to_minor` at scale `s` over quoted `c` of `kind`.
fn minor(kind: &Kind, c: &str, s: u32, tag: char, int: Option<&str>, bad: &str) -> Result<Canon> {
    let not_null = format!("({c} IS NOT NULL)");
    // Minor units as an exact decimal, NULL when the value is not an
    // amount; and whether it is spelled otherwise than canonically.
    let (m, noncanonical) = match (kind, int) {
        (
            Kind::Decimal {
                precision, scale, ..
            },
            _,
        ) => {
            if precision + s + 1 > 65 {
                bail!("DECIMAL({precision},{scale}) times 10^{s} is past the server's 65 digits");
            } else if *scale > s {
                // More fraction digits than the spec's scale: zeros there
                // are exact (`12.5000` in a DECIMAL(19,4)), as the streaming
                // read takes them (`transform::TypedSource`); a value
                // TRUNCATE would change is refused.
                (
                    format!(
                        "(CASE WHEN {c} = TRUNCATE({c}, {s}) THEN {c} * {} END)",
                        factor(s)
                    ),
                    "false".to_string(),
                )
            } else {
                (
                    format!("({c} * {})", factor(s)),
                    (if *scale < s { "true" } else { "false" }).to_string(),
                )
            }
        }
        (_, Some(i)) => (
            format!("(CAST({i} AS DECIMAL(65,0)) * {})", factor(s)),
            "false".into(),
        ),
        _ if tag == 'b'
            || matches!(
                kind,
                Kind::Date | Kind::DateTime { .. } | Kind::Timestamp { .. }
            ) =>
        {
            // Bytes and dates are never an amount.
            ("NULL".to_string(), "false".to_string())
        }
        _ => bail!(
            "decimal_to_minor over a {} column reads text, which only cutover's parser reads exactly",
            kind.name()
        ),
    };
    let valid = format!("(NOT {bad} AND coalesce({m} {I64_RANGE}, false))");
    let int = format!("IF({valid}, CAST({m} AS SIGNED), NULL)");
    Ok(Canon {
        tag: format!("(CASE WHEN {c} IS NULL THEN 'n' WHEN {valid} THEN 'i' ELSE 'x' END)"),
        payload: format!("CONCAT({int})"),
        body: None,
        int,
        invalid: format!("({not_null} AND NOT {valid})"),
        noncanonical: format!("({not_null} AND {valid} AND {noncanonical})"),
    })
}

/// One value's spelling in a row: `n`, `x`, or its tag, length, `:` and
/// bytes.
fn spelled(c: &Canon) -> String {
    format!(
        "(CASE {t} WHEN 'n' THEN 'n' WHEN 'x' THEN 'x' ELSE CONCAT({t}, LENGTH({p}), ':', {b}) END)",
        t = c.tag,
        p = c.payload,
        b = c.body.as_deref().unwrap_or(&c.payload)
    )
}

/// A row's hash: the first 64 bits of the MD5 of its values' spellings.
fn row_hash(canons: &[Canon]) -> String {
    let parts: Vec<String> = canons.iter().map(spelled).collect();
    format!(
        "CAST(CONV(LEFT(MD5(CONCAT({})), 16), 16, 10) AS UNSIGNED)",
        parts.join(", ")
    )
}

/// A statement's text and the values it binds, in order.
#[derive(Default)]
struct Bound {
    sql: String,
    params: Vec<My>,
}

impl Bound {
    fn push(&mut self, text: &str) {
        self.sql.push_str(text);
    }
}

/// The key's order expressions.
fn key_exprs(plan: &Plan) -> Result<Vec<String>> {
    (0..plan.key_len)
        .map(|i| plan.kinds[i].order(&quote_ident(&plan.names[i]), plan.collations[i].as_deref()))
        .collect()
}

/// The parameters a key is compared by, one per key column.
fn key_params(plan: &Plan, key: &Row) -> Result<Vec<My>> {
    if key.len() != plan.key_len {
        bail!(
            "table '{}': a key of {} values for a key of {} columns",
            plan.table,
            key.len(),
            plan.key_len
        );
    }
    (0..plan.key_len)
        .map(|i| {
            plan.kinds[i]
                .order_param(key[i].as_cell(), plan.collations[i].as_deref())
                .with_context(|| format!("table '{}', key column '{}'", plan.table, plan.names[i]))
        })
        .collect()
}

/// `(e1, e2) < (?, ?)` (or `e < ?` for one column) comparing the key
/// with `key`, appended to `out`.
fn compare(out: &mut Bound, plan: &Plan, exprs: &[String], op: &str, key: &Row) -> Result<()> {
    let params = key_params(plan, key)?;
    if exprs.len() == 1 {
        out.push(&format!("{} {op} ?", exprs[0]));
    } else {
        // The first column narrows the range, so that an index serves it.
        let first = if op.starts_with('>') { ">=" } else { "<=" };
        out.push(&format!(
            "{} {first} ? AND ({}) {op} ({})",
            exprs[0],
            exprs.join(", "),
            vec!["?"; exprs.len()].join(", ")
        ));
        out.params.push(params[0].clone());
    }
    out.params.extend(params);
    Ok(())
}

/// The `WHERE` of a key range.
fn range_sql(out: &mut Bound, plan: &Plan, exprs: &[String], range: &KeyRange) -> Result<()> {
    out.push("true");
    if let Some(a) = &range.from {
        out.push(" AND ");
        compare(out, plan, exprs, ">=", a)?;
    }
    if let Some(u) = &range.before {
        out.push(" AND ");
        compare(out, plan, exprs, "<", u)?;
    }
    Ok(())
}

/// The segment of a row among segments `lo..=hi`, cut at `bounds[lo..hi]`
/// (segment `j` holds the keys from `bounds[j - 1]` up to but excluding
/// `bounds[j]`): a binary search as nested `CASE`s.
fn segment_of(
    out: &mut Bound,
    plan: &Plan,
    exprs: &[String],
    bounds: &[Row],
    lo: usize,
    hi: usize,
) -> Result<()> {
    if lo == hi {
        out.push(&lo.to_string());
        return Ok(());
    }
    let mid = (lo + hi) / 2;
    out.push("CASE WHEN ");
    compare(out, plan, exprs, "<", &bounds[mid])?;
    out.push(" THEN ");
    segment_of(out, plan, exprs, bounds, lo, mid)?;
    out.push(" ELSE ");
    segment_of(out, plan, exprs, bounds, mid + 1, hi)?;
    out.push(" END");
    Ok(())
}

/// The segment of a row cut at `bounds`: for a key of one integer column
/// the server's own binary search, `INTERVAL()`.
fn segment(out: &mut Bound, plan: &Plan, exprs: &[String], bounds: &[Row]) -> Result<()> {
    if bounds.is_empty() {
        out.push("0");
        return Ok(());
    }
    if plan.key_len == 1 && matches!(plan.kinds[0], Kind::Int { .. }) {
        out.push(&format!("INTERVAL({}", exprs[0]));
        for b in bounds {
            out.push(", ?");
            out.params.extend(key_params(plan, b)?);
        }
        out.push(")");
        return Ok(());
    }
    segment_of(out, plan, exprs, bounds, 0, bounds.len())
}

/// An exact integer the server printed (a `SUM` or a `COUNT`).
fn integer(v: &My) -> Result<i128> {
    Ok(match v {
        My::Int(i) => i128::from(*i),
        My::UInt(u) => i128::from(*u),
        My::NULL => 0,
        My::Bytes(b) => {
            let t = std::str::from_utf8(b)?;
            t.parse()
                .with_context(|| format!("a sum '{t}' that is not an integer"))?
        }
        other => bail!("a sum {} that is not an integer", other.as_sql(true)),
    })
}

/// The canonical currency value of a money group, from its tag and payload.
fn currency_value(tag: &My, payload: &My) -> Result<Value> {
    let bytes = |v: &My| match v {
        My::Bytes(b) => Some(b.clone()),
        _ => None,
    };
    Ok(match (bytes(tag).as_deref(), bytes(payload)) {
        (Some(b"i"), Some(p)) => Value::Integer(std::str::from_utf8(&p)?.parse()?),
        (Some(b"t"), Some(p)) => Value::Text(String::from_utf8(p)?),
        (Some(b"b"), Some(p)) => Value::Blob(p),
        _ => Value::Null,
    })
}

impl MySql {
    /// The canonical values of a plan's columns through `form`.
    fn canons(&self, plan: &Plan, form: &TableForm) -> Result<Vec<Canon>> {
        if form.columns.len() != plan.kinds.len() {
            bail!(
                "table '{}': a form of {} columns for {}",
                plan.table,
                form.columns.len(),
                plan.kinds.len()
            );
        }
        (0..plan.kinds.len())
            .map(|i| {
                if plan.names[i].is_empty() {
                    // A column the table does not have reads NULL.
                    let null = ColumnForm {
                        form: match &form.columns[i].form {
                            CellForm::Constant(v) => CellForm::Constant(v.clone()),
                            _ => CellForm::Constant(Value::Null),
                        },
                        ..form.columns[i].clone()
                    };
                    return canon(&Kind::Text, "NULL", &null);
                }
                canon(
                    &plan.kinds[i],
                    &quote_ident(&plan.names[i]),
                    &form.columns[i],
                )
                .with_context(|| format!("column '{}'", plan.names[i]))
            })
            .collect()
    }

    /// Runs a statement of bound values; its rows.
    fn rows_of(&self, q: Bound, what: &str) -> Result<Vec<mysql::Row>> {
        self.conn()?
            .exec(q.sql.as_str(), q.params)
            .map_err(|e| self.failed(what, &e))
    }
}

impl Digests for MySql {
    fn digest_refusal(&self, sql: &TableSql, form: &TableForm) -> Result<Option<String>> {
        let plan = match self.plan(sql) {
            Ok(p) => p,
            Err(e) => return Ok(Some(format!("{e:#}"))),
        };
        if plan.first.is_some() {
            return Ok(Some(
                "its scan is ordered by a column before the key".into(),
            ));
        }
        for i in 0..plan.key_len {
            if matches!(plan.kinds[i], Kind::Float { .. } | Kind::Double { .. }) {
                return Ok(Some(format!(
                    "key column '{}' is a {}, whose keys the merge orders by their bits",
                    plan.names[i],
                    plan.kinds[i].name()
                )));
            }
        }
        let key: Vec<&str> = plan.names[..plan.key_len]
            .iter()
            .map(String::as_str)
            .collect();
        let columns = self.columns(&plan.table)?;
        let not_null = key
            .iter()
            .all(|k| columns.iter().any(|c| c.name == *k && !c.nullable));
        if !not_null || !self.key_is_unique(&plan.table, &key)? {
            return Ok(Some(format!(
                "the key of '{}' is not NOT NULL and unique in {}, so only the merge can check it",
                plan.table,
                self.shown()
            )));
        }
        if let Err(e) = self.canons(&plan, form) {
            return Ok(Some(format!("{e:#}")));
        }
        // A row's spelling must fit the server's largest string.
        let packet: Option<u64> = self
            .conn()?
            .query_first("SELECT @@max_allowed_packet")
            .map_err(|e| self.failed("reading max_allowed_packet", &e))?;
        let longest: u64 = plan
            .kinds
            .iter()
            .map(|k| match k {
                Kind::Text | Kind::Blob => LONG + 16,
                _ => 1024,
            })
            .sum();
        if packet.is_some_and(|p| longest + 65_536 > p) {
            return Ok(Some(format!(
                "a row's spelling of {longest} bytes could pass max_allowed_packet"
            )));
        }
        Ok(None)
    }

    fn split_keys(&self, sql: &TableSql, range: &KeyRange, parts: usize) -> Result<Vec<Row>> {
        let plan = self.plan(sql)?;
        let k = plan.key_len;
        // The bounds of one statement must fit its parameters.
        let parts = parts.clamp(1, MAX_PARAMS / (2 * k + 1));
        let exprs = key_exprs(&plan)?;
        let quoted: Vec<String> = plan.names[..k].iter().map(|n| quote_ident(n)).collect();
        let what = format!("splitting table '{}'", plan.table);
        let mut q = Bound::default();
        // A key of one integer column is cut into runs of equal width
        // between its ends, which its index gives at once.
        let narrow =
            |k: &Kind| matches!(k, Kind::Int { bytes, unsigned } if !(*bytes == 8 && *unsigned));
        if k == 1 && narrow(&plan.kinds[0]) {
            q.push(&format!(
                "SELECT CAST(MIN({c}) AS SIGNED), CAST(MAX({c}) AS SIGNED) FROM {} WHERE ",
                plan.qualified,
                c = quoted[0]
            ));
            range_sql(&mut q, &plan, &exprs, range)?;
            let rows = self.rows_of(q, &what)?;
            let ends = rows
                .first()
                .map(|r| (r.as_ref(0).cloned(), r.as_ref(1).cloned()));
            let (Some(My::Int(lo)), Some(My::Int(hi))) = ends.unwrap_or((None, None)) else {
                return Ok(Vec::new());
            };
            return Ok(segments::equal_width(lo, hi, parts));
        }
        // Other keys are cut at every n-th key of an ordered pass.
        q.push(&format!(
            "SELECT {cols} FROM (SELECT {cols}, ROW_NUMBER() OVER (ORDER BY {order}) AS cutover_rn,
                                 COUNT(*) OVER () AS cutover_n FROM {table} WHERE ",
            cols = quoted.join(", "),
            order = exprs.join(", "),
            table = plan.qualified,
        ));
        range_sql(&mut q, &plan, &exprs, range)?;
        q.push(&format!(
            ") cutover_keys WHERE cutover_rn > 1 AND cutover_rn % GREATEST(1, CEILING(cutover_n / {parts})) = 0
             ORDER BY cutover_rn"
        ));
        let rows = self.rows_of(q, &what)?;
        let mut scratch = String::new();
        rows.iter()
            .map(|r| {
                (0..k)
                    .map(|i| {
                        let v = r.as_ref(i).unwrap_or(&My::NULL);
                        types::decode(&plan.kinds[i], v, &mut scratch, |c| c.to_value()).map_err(
                            |why| {
                                anyhow::anyhow!(
                                    "table '{}', key column '{}': {why}",
                                    plan.table,
                                    plan.names[i]
                                )
                            },
                        )
                    })
                    .collect()
            })
            .collect()
    }

    fn digest_ranges(
        &self,
        sql: &TableSql,
        form: &TableForm,
        range: &KeyRange,
        bounds: &[Row],
    ) -> Result<Vec<SegmentDigest>> {
        let plan = self.plan(sql)?;
        let exprs = key_exprs(&plan)?;
        let canons = self.canons(&plan, form)?;
        let note = canons
            .iter()
            .map(|c| format!("{} OR {}", c.invalid, c.noncanonical))
            .collect::<Vec<_>>()
            .join(" OR ");
        let (cur_tag, cur_payload) = match form.currency {
            Some(c) => (canons[c].tag.clone(), canons[c].payload.clone()),
            None => ("'n'".to_string(), "NULL".to_string()),
        };
        let sums: String = form
            .money
            .iter()
            .map(|&m| {
                let v = &canons[m].int;
                format!(", COUNT({v}), CAST(COALESCE(SUM({v}), 0) AS CHAR)")
            })
            .collect();
        let mut q = Bound::default();
        q.push("SELECT ");
        segment(&mut q, &plan, &exprs, bounds)?;
        q.push(&format!(
            " AS cutover_seg, {cur_tag} AS cutover_tag, CAST({cur_payload} AS BINARY) AS cutover_payload,
               COUNT(*), CAST(SUM(IF({note}, 1, 0)) AS CHAR), CAST(COALESCE(SUM({hash}), 0) AS CHAR) {sums}
             FROM {table} WHERE ",
            hash = row_hash(&canons),
            table = plan.qualified,
        ));
        range_sql(&mut q, &plan, &exprs, range)?;
        q.push(" GROUP BY 1, 2, 3");
        let groups = self.rows_of(q, &format!("digesting table '{}'", plan.table))?;
        let money = form.money.len();
        let groups = groups.iter().map(|g| {
            let at = |i: usize| g.as_ref(i).cloned().unwrap_or(My::NULL);
            let currency = if money == 0 {
                Value::Null
            } else {
                currency_value(&at(1), &at(2))?
            };
            Ok(Group {
                seg: usize::try_from(integer(&at(0))?)?,
                currency,
                rows: u64::try_from(integer(&at(3))?)?,
                notes: u64::try_from(integer(&at(4))?)?,
                hash: integer(&at(5))?,
                sums: (0..money)
                    .map(|j| {
                        Ok((
                            u64::try_from(integer(&at(6 + 2 * j))?)?,
                            integer(&at(7 + 2 * j))?,
                        ))
                    })
                    .collect::<Result<_>>()?,
            })
        });
        segments::fold(&plan.table, bounds.len() + 1, money, groups)
    }

    fn scan_range(
        &self,
        sql: &TableSql,
        range: &KeyRange,
        block_rows: usize,
        sink: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        let plan = self.plan(sql)?;
        let exprs = key_exprs(&plan)?;
        // The columns as the scan reads them: NULL for one the table lacks.
        let list = plan
            .names
            .iter()
            .map(|n| {
                if n.is_empty() {
                    "NULL".into()
                } else {
                    quote_ident(n)
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let mut q = Bound::default();
        q.push(&format!("SELECT {list} FROM {} WHERE ", plan.qualified));
        range_sql(&mut q, &plan, &exprs, range)?;
        q.push(&format!(" ORDER BY {}", exprs.join(", ")));
        self.stream(&plan.shape(), &q.sql, q.params, block_rows, sink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_spelled_with_its_kind_and_length() {
        let c = canon(
            &Kind::Text,
            "`a`",
            &ColumnForm {
                form: CellForm::Copy,
                integer: false,
                min: None,
                values: None,
            },
        )
        .expect("text digests");
        let s = spelled(&c);
        assert!(s.contains("LENGTH("), "{s}");
        assert!(s.contains("WHEN 'n' THEN 'n'"), "{s}");
        assert_eq!(hex(b"a'b"), "X'612762'");
        assert!(
            canon(
                &Kind::Double { scale: None },
                "`d`",
                &ColumnForm {
                    form: CellForm::Copy,
                    integer: false,
                    min: None,
                    values: None,
                }
            )
            .is_err()
        );
    }
}
