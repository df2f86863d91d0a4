//! Digests: the [`Digests`] interface, a table's canonical rows hashed and
//! summed inside PostgreSQL per key range, so the gate reads rows only
//! where the two sides differ.
//!
//! Every value is hashed as the merge compares it (`reconcile::cells_equal`,
//! equality with kind), by PostgreSQL's own 64-bit hash functions (those of
//! hash partitioning, stable across servers and versions) seeded by the
//! column's position and the value's kind as the engine reads it
//! ([`super::types`]): integers (booleans as 0 and 1) by `hashint8extended`,
//! reals by `hashfloat8extended` (`-0` is `0`, every NaN one), text (numeric,
//! dates and other types by their text, `char(n)` with its padding) by
//! `hashtextextended` over its bytes, bytes by their hex, NULL as a constant
//! of the column. A row hashes its values' hashes combined, and a range is
//! the exact sum of its rows' hashes: keys are unique, so the sum stands for
//! the set of rows, and no sort is needed. Each row's range is found by a
//! binary search over the ranges' bounds (`width_bucket` for a key of one
//! column, nested `CASE`s for a key of several), so a table is digested
//! into thousands of ranges in one pass.
//!
//! The source's transforms run in SQL exactly as `transform` runs them:
//! `decimal_to_minor` by the same grammar with exact NUMERIC arithmetic and
//! the 64-bit range check, `map` as a `CASE` on bytes, constants as
//! literals; the checks `integer`, `min` and `values` on the result. A row
//! that is invalid or not canonical is counted as a note, so the gate
//! streams it and reports it as the merge does. Key ranges are compared
//! with the key order expressions of the table's plan, which order as
//! cutover does.

use anyhow::{Context, Result, bail};

use super::scan::Raw;
use super::table_sql::{Plan, literal};
use super::types::{self, Kind};
use super::{Postgres, quote_literal};
use crate::db::segments::{self, Group};
use crate::db::{CellForm, ColumnForm, Digests, KeyRange, SegmentDigest, TableForm, TableSql};
use crate::value::{Block, Row, Value};

/// Rows of a sample per key range a whole table is first cut into.
const SAMPLE_ROWS_PER_PART: u64 = 64;

/// The largest and smallest 64-bit integers, the range of minor units.
const I64_RANGE: &str = "BETWEEN -9223372036854775808 AND 9223372036854775807";

/// A canonical value in SQL: its tag (`'n'` for NULL) and its payload text.
struct Canon {
    tag: String,
    payload: String,
    /// The value as an `int8` when it is an integer, else NULL.
    int: String,
    /// The value's hash (an `int8`), NULL for NULL.
    hash: String,
    /// The row cannot be carried across (a `Note::Invalid`).
    invalid: String,
    /// Accepted but not canonical text (a `Note::NonCanonical`).
    noncanonical: String,
    /// A value the others are computed from, computed once per row under
    /// this name: `(name, expression)`.
    pre: Option<(String, String)>,
}

/// The seed of the hash of column `col`'s values of kind `tag`: values of
/// different kinds or in different columns hash apart.
fn seed(col: usize, tag: char) -> i64 {
    let kind = match tag {
        'i' => 1,
        'r' => 2,
        't' => 3,
        'b' => 4,
        _ => 5,
    };
    col as i64 * 8 + kind
}

/// The hash of NULL in column `col`: a constant of the column
/// (SplitMix64 of its position).
fn null_hash(col: usize) -> i64 {
    let mut z = (col as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as i64
}

/// The hash of a value of kind `tag` held in `int` (an `int8`, for `'i'`)
/// or `payload` (its text), in column `col`.
fn hash_of(tag: char, int: &str, payload: &str, col: usize) -> String {
    let s = seed(col, tag);
    match tag {
        'i' => format!("hashint8extended({int}, {s})"),
        'r' => format!("hashfloat8extended(({payload})::float8, {s})"),
        't' | 'b' => format!("hashtextextended(({payload}) COLLATE \"C\", {s})"),
        _ => "NULL::int8".into(),
    }
}

/// The tag a column of `kind` reads as, and the payload of quoted `col`.
fn stored(kind: Kind, col: &str) -> (char, String) {
    match kind {
        Kind::Bool => ('i', format!("({col})::int::text")),
        Kind::Int2 | Kind::Int4 | Kind::Int8 => ('i', format!("({col})::text")),
        // Equal reals are equal texts: -0 is 0, every NaN 'NaN'.
        Kind::Float4 | Kind::Float8 => (
            'r',
            format!("(CASE WHEN ({col})::float8 = 0 THEN '0' ELSE ({col})::float8::text END)"),
        ),
        Kind::Bpchar => ('t', format!("concat({col})")),
        Kind::Bytea => ('b', format!("encode({col}, 'hex')")),
        Kind::Absent => ('n', "NULL::text".into()),
        Kind::Text
        | Kind::Enum
        | Kind::Numeric(_)
        | Kind::Date
        | Kind::Timestamp
        | Kind::Timestamptz
        | Kind::Other => ('t', format!("({col})::text")),
    }
}

/// The value of quoted `col` of `kind` as an `int8`, when it reads as an
/// integer.
fn stored_int(kind: Kind, col: &str) -> Option<String> {
    match kind {
        Kind::Bool => Some(format!("({col})::int::int8")),
        Kind::Int2 | Kind::Int4 | Kind::Int8 => Some(format!("({col})::int8")),
        _ => None,
    }
}

fn tag_of(tag: char, col: &str) -> String {
    if tag == 'n' {
        "'n'".into()
    } else {
        format!("(CASE WHEN {col} IS NULL THEN 'n' ELSE '{tag}' END)")
    }
}

/// `10^scale` as an exact NUMERIC literal.
fn factor(scale: u32) -> String {
    format!("1{}::numeric", "0".repeat(scale as usize))
}

/// The canonical value of quoted `col` of `kind` through `form`, in
/// column `at` of the table.
fn canon(kind: Kind, col: &str, form: &ColumnForm, at: usize) -> Result<Canon> {
    let (tag, p) = stored(kind, col);
    let null = if tag == 'n' {
        "true".to_string()
    } else {
        format!("({col} IS NULL)")
    };
    let plain = |tag: String, payload: String, int: String, hash: String| Canon {
        tag,
        payload,
        int,
        hash,
        invalid: "false".into(),
        noncanonical: "false".into(),
        pre: None,
    };
    let mut c = match &form.form {
        CellForm::Copy => {
            let int = stored_int(kind, col).unwrap_or_else(|| "NULL::int8".into());
            let hash = hash_of(tag, &int, &p, at);
            plain(tag_of(tag, col), p.clone(), int, hash)
        }
        CellForm::Constant(v) => match v {
            Value::Integer(i) => {
                let int = format!("{i}::int8");
                let hash = hash_of('i', &int, "", at);
                plain("'i'".into(), format!("'{i}'"), int, hash)
            }
            Value::Text(t) => {
                let payload = quote_literal(t.as_str())?;
                let hash = hash_of('t', "", &payload, at);
                plain("'t'".into(), payload, "NULL::int8".into(), hash)
            }
            Value::Null => plain(
                "'n'".into(),
                "NULL::text".into(),
                "NULL::int8".into(),
                "NULL::int8".into(),
            ),
            other => bail!("a constant {other} cannot be computed in SQL"),
        },
        CellForm::Map(pairs) => {
            let mut word = format!("(CASE ({p}) COLLATE \"C\"");
            for (code, w) in pairs {
                word.push_str(&format!(
                    " WHEN {} THEN {}",
                    quote_literal(code)?,
                    quote_literal(w)?
                ));
            }
            word.push_str(" END)");
            if tag != 't' {
                // Only text is a code; NULL stays NULL.
                Canon {
                    tag: "'n'".into(),
                    payload: "NULL::text".into(),
                    int: "NULL::int8".into(),
                    hash: "NULL::int8".into(),
                    invalid: format!("(NOT {null})"),
                    noncanonical: "false".into(),
                    pre: None,
                }
            } else {
                Canon {
                    tag: format!("(CASE WHEN {word} IS NULL THEN 'n' ELSE 't' END)"),
                    invalid: format!("(NOT {null} AND {word} IS NULL)"),
                    int: "NULL::int8".into(),
                    hash: hash_of('t', "", &word, at),
                    payload: word,
                    noncanonical: "false".into(),
                    pre: None,
                }
            }
        }
        CellForm::DecimalToMinor(scale) => {
            let s = *scale;
            // The minor units, computed once per row by the digest query.
            let m = super::quote_ident(&format!("cutover minor {at}"));
            // Minor units as a NUMERIC, NULL when the value is not an amount.
            let (minor, noncanonical) = match (tag, kind) {
                // A NUMERIC's text has exactly its scale's digits after the
                // point (none at scale 0) and no leading zeros: the
                // grammar below, read off its scale. Zeros past the spec's
                // scale are exact (`12.5000` in a `numeric(19,4)`), as the
                // streaming read takes them (`transform::TypedSource`): only
                // a value `trunc` would change is refused.
                ('t', Kind::Numeric(_)) => (
                    format!(
                        "(CASE WHEN scale({col}) <= {s} OR ({col}) = trunc({col}, {s}) THEN ({col}) * {} END)",
                        factor(s)
                    ),
                    format!("(scale({col}) < {s})"),
                ),
                ('i', _) => (format!("(({p})::numeric * {})", factor(s)), "false".into()),
                ('r', _) => {
                    let t = format!("({col})::float8::text");
                    (
                        format!(
                            "(CASE WHEN {t} NOT IN ('NaN', 'Infinity', '-Infinity') AND scale({t}::numeric) <= {s} THEN {t}::numeric * {} END)",
                            factor(s)
                        ),
                        "false".into(),
                    )
                }
                ('t', _) => {
                    let grammar = if s == 0 {
                        "^-?[0-9]+$".to_string()
                    } else {
                        format!("^-?[0-9]+(\\.[0-9]{{1,{s}}})?$")
                    };
                    let canonical = if s == 0 {
                        "^-?(0|[1-9][0-9]*)$".to_string()
                    } else {
                        format!("^-?(0|[1-9][0-9]*)\\.[0-9]{{{s}}}$")
                    };
                    let digits = format!(
                        "ltrim(ltrim(split_part({p}, '.', 1), '-') || rpad(split_part({p}, '.', 2), {s}, '0'), '0')"
                    );
                    let minor = format!(
                        "(CASE WHEN ({p}) COLLATE \"C\" ~ '{grammar}' AND length({digits}) <= 19 THEN (CASE WHEN left({p}, 1) = '-' THEN -1 ELSE 1 END) * (CASE WHEN {digits} = '' THEN 0::numeric ELSE {digits}::numeric END) END)"
                    );
                    let nc = format!(
                        "(NOT (({p}) COLLATE \"C\" ~ '{canonical}') OR (left({p}, 1) = '-' AND {m} = 0))"
                    );
                    (minor, nc)
                }
                // Bytes are never an amount; a missing column is NULL.
                _ => ("NULL::numeric".to_string(), "false".into()),
            };
            let valid = format!("coalesce({m} {I64_RANGE}, false)");
            let int = format!("(CASE WHEN {valid} THEN ({m})::int8 END)");
            Canon {
                tag: format!("(CASE WHEN {valid} THEN 'i' ELSE 'n' END)"),
                payload: format!("(CASE WHEN {valid} THEN ({m})::int8::text END)"),
                hash: hash_of('i', &int, "", at),
                int,
                invalid: format!("(NOT {null} AND NOT {valid})"),
                noncanonical: format!("(NOT {null} AND {valid} AND {noncanonical})"),
                pre: Some((m, minor)),
            }
        }
    };
    // The checks, on the canonical value; NULL passes.
    let mut fails = Vec::new();
    if form.integer || form.min.is_some() {
        fails.push(format!("{} NOT IN ('n', 'i')", c.tag));
    }
    if let Some(min) = form.min {
        fails.push(format!("({} < {min})", c.int));
    }
    if let Some(values) = &form.values {
        let list = values
            .iter()
            .map(|v| quote_literal(v))
            .collect::<Result<Vec<_>>>()?;
        let inside = if list.is_empty() {
            "false".to_string()
        } else {
            format!("({}) COLLATE \"C\" IN ({})", c.payload, list.join(", "))
        };
        fails.push(format!(
            "({} <> 'n' AND NOT coalesce({} = 't' AND {inside}, false))",
            c.tag, c.tag
        ));
    }
    if !fails.is_empty() {
        c.invalid = format!("({} OR coalesce({}, false))", c.invalid, fails.join(" OR "));
    }
    Ok(c)
}

/// A row's hash: its values' hashes combined and mixed once more.
fn row_hash(canons: &[Canon]) -> String {
    let parts = canons
        .iter()
        .enumerate()
        .map(|(i, c)| format!("coalesce({}, {})", c.hash, null_hash(i)))
        .collect::<Vec<_>>()
        .join(" # ");
    format!("hashint8extended({parts}, 0)")
}

/// `(k1, k2, …)` as literals of the table's kinds.
fn key_tuple(plan: &Plan, key: &Row) -> Result<String> {
    let k = plan.key_len;
    if key.len() != k {
        bail!(
            "table '{}': a key of {} values for a key of {k} columns",
            plan.table,
            key.len()
        );
    }
    let values = (0..k)
        .map(|i| literal(plan.kinds[i], &key[i]))
        .collect::<Result<Vec<_>>>()?;
    Ok(format!("({})", values.join(", ")))
}

/// The segment of a row among segments `lo..=hi`, cut at `bounds[lo..hi]`
/// (segment `j` holds the keys from `bounds[j - 1]` up to but excluding
/// `bounds[j]`): a binary search as nested `CASE`s.
fn segment_of(keys: &str, bounds: &[String], lo: usize, hi: usize) -> String {
    if lo == hi {
        return lo.to_string();
    }
    let mid = (lo + hi) / 2;
    format!(
        "CASE WHEN {keys} < {} THEN {} ELSE {} END",
        bounds[mid],
        segment_of(keys, bounds, lo, mid),
        segment_of(keys, bounds, mid + 1, hi)
    )
}

/// The segment of a row cut at `bounds` (as [`segment_of`]): for a key of
/// one column, PostgreSQL's own binary search `width_bucket`.
fn segment(plan: &Plan, bounds: &[Row]) -> Result<String> {
    if bounds.is_empty() {
        return Ok("0".into());
    }
    if plan.key_len == 1 {
        let values = bounds
            .iter()
            .map(|b| match b.as_slice() {
                [v] => literal(plan.kinds[0], v),
                _ => bail!(
                    "table '{}': a key of {} values for one column",
                    plan.table,
                    b.len()
                ),
            })
            .collect::<Result<Vec<_>>>()?;
        return Ok(format!(
            "width_bucket({}, ARRAY[{}])",
            plan.key_exprs[0],
            values.join(", ")
        ));
    }
    let tuples = bounds
        .iter()
        .map(|b| key_tuple(plan, b))
        .collect::<Result<Vec<_>>>()?;
    Ok(segment_of(&key_exprs(plan), &tuples, 0, tuples.len()))
}

/// The `WHERE` of a key range, with the key as literals of the table's kinds.
fn range_sql(plan: &Plan, range: &KeyRange) -> Result<String> {
    let exprs = key_exprs(plan);
    let mut parts = vec!["true".to_string()];
    if let Some(a) = &range.from {
        parts.push(format!("{exprs} >= {}", key_tuple(plan, a)?));
    }
    if let Some(u) = &range.before {
        parts.push(format!("{exprs} < {}", key_tuple(plan, u)?));
    }
    Ok(parts.join(" AND "))
}

/// The key's order expressions as one tuple.
fn key_exprs(plan: &Plan) -> String {
    format!("({})", plan.key_exprs.join(", "))
}

/// Reads a decimal text (a `sum` or a count) as an `i128`.
fn int_text(t: &str) -> Result<i128> {
    t.parse()
        .with_context(|| format!("a sum '{t}' that is not an integer"))
}

/// The canonical currency value of a money group, from its tag and payload.
fn currency_value(tag: &str, payload: Option<String>) -> Result<Value> {
    Ok(match (tag, payload) {
        ("i", Some(p)) => Value::Integer(p.parse()?),
        ("r", Some(p)) => Value::Real(match p.as_str() {
            "Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            other => other.parse()?,
        }),
        ("t", Some(p)) => Value::Text(p),
        ("b", Some(p)) => Value::Blob(hex::decode(p)?),
        _ => Value::Null,
    })
}

impl Postgres {
    /// About how many rows the table holds: the server's statistics
    /// (`reltuples`), or a row per 64 bytes of the heap before the first
    /// ANALYZE.
    pub(super) fn estimate_rows(&self, sql: &TableSql) -> Result<i64> {
        let plan = self.plan(sql)?;
        // `reltuples` is -1 before the first ANALYZE: a row per 64 bytes
        // of the heap then.
        let r = self
            .client()?
            .query_one(
                "SELECT reltuples::float8, pg_relation_size(oid)::int8 FROM pg_class
                 WHERE oid = to_regclass($1)",
                &[&plan.qualified],
            )
            .with_context(|| format!("estimating table '{}' in {}", plan.table, self.shown))?;
        let (tuples, bytes): (f64, i64) = (r.get(0), r.get(1));
        Ok(if tuples >= 0.0 {
            tuples as i64
        } else {
            bytes.max(0) / 64
        })
    }

    /// Whether the key columns are NOT NULL and a unique index covers them.
    fn key_is_identity(&self, plan: &Plan) -> Result<bool> {
        use crate::db::Catalogue;
        let names: Vec<&str> = plan.names[..plan.key_len]
            .iter()
            .map(String::as_str)
            .collect();
        let not_null: i64 = self
            .client()?
            .query_one(
                "SELECT count(*) FROM pg_attribute
                 WHERE attrelid = to_regclass($1) AND attname = ANY($2) AND attnotnull
                   AND NOT attisdropped",
                &[&plan.qualified, &names],
            )?
            .get(0);
        Ok(not_null == names.len() as i64 && self.key_is_unique(&plan.table, &names)?)
    }
}

impl Digests for Postgres {
    fn digest_refusal(&self, sql: &TableSql, form: &TableForm) -> Result<Option<String>> {
        let plan = match self.plan(sql) {
            Ok(p) => p,
            Err(e) => return Ok(Some(format!("{e:#}"))),
        };
        if form.columns.len() != plan.kinds.len() {
            bail!(
                "table '{}': a form of {} columns for {}",
                plan.table,
                form.columns.len(),
                plan.kinds.len()
            );
        }
        for i in 0..plan.key_len {
            if matches!(plan.kinds[i], Kind::Float4 | Kind::Float8 | Kind::Absent) {
                return Ok(Some(format!(
                    "key column '{}' is a {}, whose keys the merge orders by their bits",
                    plan.names[i],
                    types::name(plan.kinds[i])
                )));
            }
        }
        if !self.key_is_identity(&plan)? {
            return Ok(Some(format!(
                "the key of '{}' is not NOT NULL and unique in {}, so only the merge can check it",
                plan.table, self.shown
            )));
        }
        for (i, c) in form.columns.iter().enumerate() {
            if let Err(e) = canon(plan.kinds[i], "x", c, i) {
                return Ok(Some(format!("column '{}': {e:#}", plan.names[i])));
            }
        }
        Ok(None)
    }

    fn split_keys(&self, sql: &TableSql, range: &KeyRange, parts: usize) -> Result<Vec<Row>> {
        let plan = self.plan(sql)?;
        let k = plan.key_len;
        let quoted: Vec<String> = plan.names[..k]
            .iter()
            .map(|n| super::quote_ident(n))
            .collect();
        let inner = (0..k)
            .map(|i| format!("{} AS k{i}", plan.kinds[i].select(&quoted[i])))
            .collect::<Vec<_>>()
            .join(", ");
        let outer = (0..k)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let range_where = range_sql(&plan, range)?;
        // A key of one integer column is cut into runs of equal width
        // between its ends, which its index gives at once.
        if k == 1 && matches!(plan.kinds[0], Kind::Int2 | Kind::Int4 | Kind::Int8) {
            let r = self
                .client()?
                .query_one(
                    format!(
                        "SELECT min({c})::int8, max({c})::int8 FROM {} WHERE {range_where}",
                        plan.qualified,
                        c = quoted[0]
                    )
                    .as_str(),
                    &[],
                )
                .with_context(|| format!("splitting table '{}' in {}", plan.table, self.shown))?;
            let (Some(lo), Some(hi)) = (r.get::<_, Option<i64>>(0), r.get::<_, Option<i64>>(1))
            else {
                return Ok(Vec::new());
            };
            return Ok(crate::db::segments::equal_width(lo, hi, parts));
        }
        // Other keys of a whole large table are cut at keys of a sample of
        // its rows (`SAMPLE_ROWS_PER_PART` rows a part), not at keys of an
        // ordered pass over all of it.
        let whole = range.from.is_none() && range.before.is_none();
        let sampled = parts as u64 * SAMPLE_ROWS_PER_PART;
        let estimate = if whole && parts > 1 {
            self.estimate_rows(sql)?
        } else {
            0
        };
        let from = if estimate as u64 > 2 * sampled {
            format!(
                "{} TABLESAMPLE BERNOULLI ({:.6}) REPEATABLE (0)",
                plan.qualified,
                sampled as f64 * 100.0 / estimate as f64
            )
        } else {
            plan.qualified.clone()
        };
        let query = format!(
            "SELECT {outer} FROM (SELECT {inner}, row_number() OVER (ORDER BY {order}) AS cutover_rn,
                                  count(*) OVER () AS cutover_n
                                  FROM {from} WHERE {range}) s
             WHERE cutover_rn > 1
               AND cutover_rn % greatest(1, ceil(cutover_n::numeric / {parts}))::int8 = 0
             ORDER BY cutover_rn",
            order = plan.key_order,
            range = range_where,
            parts = parts.max(1),
        );
        let rows = self
            .client()?
            .query(query.as_str(), &[])
            .with_context(|| format!("splitting table '{}' in {}", plan.table, self.shown))?;
        let mut scratch = String::new();
        rows.iter()
            .map(|r| {
                (0..k)
                    .map(|i| {
                        let Raw(raw) = r.try_get(i)?;
                        Ok(match raw {
                            None => Value::Null,
                            Some(b) => {
                                types::decode(plan.kinds[i], b, &mut scratch, |c| c.to_value())?
                            }
                        })
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
        let quoted: Vec<String> = plan.names.iter().map(|n| super::quote_ident(n)).collect();
        let canons = (0..plan.kinds.len())
            .map(|i| canon(plan.kinds[i], &quoted[i], &form.columns[i], i))
            .collect::<Result<Vec<_>>>()?;
        let note = canons
            .iter()
            .map(|c| format!("{} OR {}", c.invalid, c.noncanonical))
            .collect::<Vec<_>>()
            .join(" OR ");
        let segment = segment(&plan, bounds)?;
        // The money sums are grouped by the currency's canonical value.
        let (cur_tag, cur_payload) = match form.currency {
            Some(c) => (canons[c].tag.clone(), canons[c].payload.clone()),
            None => ("'n'".to_string(), "NULL::text".to_string()),
        };
        let sums: String = (0..form.money.len())
            .map(|j| format!(", count(cutover_m{j})::int8, coalesce(sum(cutover_m{j}), 0)::text"))
            .collect();
        let money_values: String = form
            .money
            .iter()
            .enumerate()
            .map(|(j, &m)| format!(", {} AS cutover_m{j}", canons[m].int))
            .collect();
        // Three levels, each kept apart by `OFFSET 0` so that PostgreSQL
        // does not fold them together and compute a transform several
        // times a row: the rows of the range with their transforms, their
        // segments, hashes and notes, and the sums per segment.
        let pre: String = canons
            .iter()
            .filter_map(|c| c.pre.as_ref())
            .map(|(name, expr)| format!(", {expr} AS {name}"))
            .collect();
        let query = format!(
            "SELECT cutover_seg, cutover_tag, cutover_payload, count(*)::int8,
                    (count(*) FILTER (WHERE cutover_note))::int8, coalesce(sum(cutover_hash), 0)::text {sums}
             FROM (SELECT {segment} AS cutover_seg, {cur_tag} AS cutover_tag,
                          {cur_payload} AS cutover_payload, ({note}) AS cutover_note,
                          {hash} AS cutover_hash {money_values}
                   FROM (SELECT *{pre} FROM {table} WHERE {range} OFFSET 0) cutover_rows
                   OFFSET 0) cutover_canon
             GROUP BY 1, 2, 3",
            hash = row_hash(&canons),
            table = plan.qualified,
            range = range_sql(&plan, range)?,
        );
        let groups = self
            .client()?
            .query(query.as_str(), &[])
            .with_context(|| format!("digesting table '{}' in {}", plan.table, self.shown))?;
        let groups = groups.iter().map(|g| {
            let currency = if form.money.is_empty() {
                Value::Null
            } else {
                currency_value(g.get(1), g.get(2))?
            };
            Ok(Group {
                seg: usize::try_from(g.get::<_, i32>(0))?,
                currency,
                rows: g.get::<_, i64>(3) as u64,
                notes: g.get::<_, i64>(4) as u64,
                hash: int_text(g.get(5))?,
                sums: (0..form.money.len())
                    .map(|j| {
                        Ok((
                            g.get::<_, i64>(6 + 2 * j) as u64,
                            int_text(g.get(7 + 2 * j))?,
                        ))
                    })
                    .collect::<Result<_>>()?,
            })
        });
        segments::fold(&plan.table, bounds.len() + 1, form.money.len(), groups)
    }

    fn scan_range(
        &self,
        sql: &TableSql,
        range: &KeyRange,
        block_rows: usize,
        sink: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        let plan = self.plan(sql)?;
        let query = format!(
            "SELECT {} FROM {} WHERE {} ORDER BY {}",
            plan.list,
            plan.qualified,
            range_sql(&plan, range)?,
            plan.key_order
        );
        self.copy_query(sql, &plan, &query, block_rows, sink)
    }
}
