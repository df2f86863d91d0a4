//! Digests: the [`Digests`] interface, a table's canonical rows hashed and
//! summed inside PostgreSQL per key range, so the gate reads rows only
//! where the two sides differ.
//!
//! Every value is hashed as the merge compares it (`reconcile::cells_equal`,
//! equality with kind): a self-delimiting text `tag length ':' payload`, the
//! tag the value's kind as the engine reads it ([`super::types`]): `i`
//! integer (booleans as 0 and 1), `r` real (shortest exact text, `-0` as
//! `0`), `t` text (numeric, dates and other types by their text, `char(n)`
//! with its padding), `b` bytes (hex), `n` NULL. A row hashes the
//! concatenation of its values, a range the row hashes in key order.
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
use crate::db::{
    CellForm, ColumnForm, Digests, KeyRange, MoneyGroup, SegmentDigest, TableForm, TableSql,
};
use crate::value::{Block, Row, Value};

/// The largest and smallest 64-bit integers, the range of minor units.
const I64_RANGE: &str = "BETWEEN -9223372036854775808 AND 9223372036854775807";

/// A canonical value in SQL: its tag (`'n'` for NULL) and its payload text.
struct Canon {
    tag: String,
    payload: String,
    /// The row cannot be carried across (a `Note::Invalid`).
    invalid: String,
    /// Accepted but not canonical text (a `Note::NonCanonical`).
    noncanonical: String,
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

/// The canonical value of column `col` of `kind` through `form`.
fn canon(kind: Kind, col: &str, form: &ColumnForm) -> Result<Canon> {
    let (tag, p) = stored(kind, col);
    let null = if tag == 'n' {
        "true".to_string()
    } else {
        format!("({col} IS NULL)")
    };
    let plain = |tag: String, payload: String| Canon {
        tag,
        payload,
        invalid: "false".into(),
        noncanonical: "false".into(),
    };
    let mut c = match &form.form {
        CellForm::Copy => plain(tag_of(tag, col), p.clone()),
        CellForm::Constant(v) => match v {
            Value::Integer(i) => plain("'i'".into(), format!("'{i}'")),
            Value::Text(t) => plain("'t'".into(), quote_literal(t.as_str())?),
            Value::Null => plain("'n'".into(), "NULL::text".into()),
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
                    invalid: format!("(NOT {null})"),
                    noncanonical: "false".into(),
                }
            } else {
                Canon {
                    tag: format!("(CASE WHEN {word} IS NULL THEN 'n' ELSE 't' END)"),
                    invalid: format!("(NOT {null} AND {word} IS NULL)"),
                    payload: word,
                    noncanonical: "false".into(),
                }
            }
        }
        CellForm::DecimalToMinor(scale) => {
            let s = *scale;
            // Minor units as a NUMERIC, NULL when the value is not an amount.
            let (minor, noncanonical) = match tag {
                'i' => (format!("(({p})::numeric * {})", factor(s)), "false".into()),
                'r' => {
                    let t = format!("({col})::float8::text");
                    (
                        format!(
                            "(CASE WHEN {t} NOT IN ('NaN', 'Infinity', '-Infinity') AND scale({t}::numeric) <= {s} THEN {t}::numeric * {} END)",
                            factor(s)
                        ),
                        "false".into(),
                    )
                }
                't' => {
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
                        "(NOT (({p}) COLLATE \"C\" ~ '{canonical}') OR (left({p}, 1) = '-' AND {minor} = 0))"
                    );
                    (minor, nc)
                }
                // Bytes are never an amount; a missing column is NULL.
                'b' => ("NULL::numeric".to_string(), "false".into()),
                _ => ("NULL::numeric".to_string(), "false".into()),
            };
            let valid = format!("coalesce({minor} {I64_RANGE}, false)");
            Canon {
                tag: format!("(CASE WHEN {valid} THEN 'i' ELSE 'n' END)"),
                payload: format!("(CASE WHEN {valid} THEN ({minor})::int8::text END)"),
                invalid: format!("(NOT {null} AND NOT {valid})"),
                noncanonical: format!("(NOT {null} AND {valid} AND {noncanonical})"),
            }
        }
    };
    // The checks, on the canonical value; NULL passes.
    let mut fails = Vec::new();
    if form.integer || form.min.is_some() {
        fails.push(format!("{} NOT IN ('n', 'i')", c.tag));
    }
    if let Some(min) = form.min {
        fails.push(format!(
            "({} = 'i' AND ({})::numeric < {min})",
            c.tag, c.payload
        ));
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
        c.invalid = format!("({} OR {})", c.invalid, fails.join(" OR "));
    }
    Ok(c)
}

/// The hashed text of a canonical value.
fn encoded(c: &Canon) -> String {
    format!(
        "(CASE WHEN {tag} = 'n' THEN 'n' ELSE {tag} || octet_length({p})::text || ':' || {p} END)",
        tag = c.tag,
        p = c.payload
    )
}

/// The `WHERE` of a key range, with the key as literals of the table's kinds.
fn range_sql(plan: &Plan, range: &KeyRange) -> Result<String> {
    let k = plan.key_len;
    let tuple = |key: &Row| -> Result<String> {
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
    };
    let exprs = format!("({})", plan.key_exprs.join(", "));
    let mut parts = vec!["true".to_string()];
    if let Some(a) = &range.after {
        parts.push(format!("{exprs} > {}", tuple(a)?));
    }
    if let Some(u) = &range.upto {
        parts.push(format!("{exprs} <= {}", tuple(u)?));
    }
    Ok(parts.join(" AND "))
}

/// Reads a decimal text (a `sum` or a count) as an `i128`.
fn int_text(t: &str) -> Result<i128> {
    t.parse()
        .with_context(|| format!("a sum '{t}' that is not an integer"))
}

impl Postgres {
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
            if let Err(e) = canon(plan.kinds[i], "x", c) {
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
        let query = format!(
            "SELECT {outer} FROM (SELECT {inner}, row_number() OVER (ORDER BY {order}) AS cutover_rn,
                                  count(*) OVER () AS cutover_n
                                  FROM {table} WHERE {range}) s
             WHERE cutover_rn < cutover_n
               AND cutover_rn % greatest(1, ceil(cutover_n::numeric / {parts}))::int8 = 0
             ORDER BY cutover_rn",
            order = plan.key_order,
            table = plan.qualified,
            range = range_sql(&plan, range)?,
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

    fn digest_range(
        &self,
        sql: &TableSql,
        form: &TableForm,
        range: &KeyRange,
    ) -> Result<SegmentDigest> {
        let plan = self.plan(sql)?;
        let quoted: Vec<String> = plan.names.iter().map(|n| super::quote_ident(n)).collect();
        let canons = (0..plan.kinds.len())
            .map(|i| canon(plan.kinds[i], &quoted[i], &form.columns[i]))
            .collect::<Result<Vec<_>>>()?;
        let row = canons.iter().map(encoded).collect::<Vec<_>>().join(" || ");
        let note = canons
            .iter()
            .map(|c| format!("{} OR {}", c.invalid, c.noncanonical))
            .collect::<Vec<_>>()
            .join(" OR ");
        let table = &plan.qualified;
        let range = range_sql(&plan, range)?;
        let mut client = self.client()?;
        let r = client
            .query_one(
                format!(
                    "SELECT count(*)::int8, (count(*) FILTER (WHERE {note}))::int8,
                            sha256(coalesce(string_agg(sha256(convert_to({row}, 'UTF8')), ''::bytea
                                                       ORDER BY {order}), ''::bytea))
                     FROM {table} WHERE {range}",
                    order = plan.key_order
                )
                .as_str(),
                &[],
            )
            .with_context(|| format!("digesting table '{}' in {}", plan.table, self.shown))?;
        let mut seg = SegmentDigest {
            rows: r.get::<_, i64>(0) as u64,
            notes: r.get::<_, i64>(1) as u64,
            digest: r.get(2),
            money: Vec::new(),
        };
        if form.money.is_empty() || seg.rows == 0 {
            return Ok(seg);
        }
        // Sums of the integers of each money column, per currency value.
        let (cur_tag, cur_payload) = match form.currency {
            Some(c) => (canons[c].tag.clone(), canons[c].payload.clone()),
            None => ("'n'".to_string(), "NULL::text".to_string()),
        };
        let sums = form
            .money
            .iter()
            .map(|&m| {
                let v = format!(
                    "(CASE WHEN {} = 'i' THEN ({})::int8 END)",
                    canons[m].tag, canons[m].payload
                );
                format!("count({v})::int8, coalesce(sum({v}), 0)::text")
            })
            .collect::<Vec<_>>()
            .join(", ");
        let groups = client
            .query(
                format!(
                    "SELECT {cur_tag} AS cutover_tag, {cur_payload} AS cutover_payload, {sums}
                     FROM {table} WHERE {range} GROUP BY 1, 2"
                )
                .as_str(),
                &[],
            )
            .with_context(|| format!("summing table '{}' in {}", plan.table, self.shown))?;
        for g in groups {
            let tag: String = g.get(0);
            let payload: Option<String> = g.get(1);
            let currency = match (tag.as_str(), payload) {
                ("i", Some(p)) => Value::Integer(p.parse()?),
                ("r", Some(p)) => Value::Real(match p.as_str() {
                    "Infinity" => f64::INFINITY,
                    "-Infinity" => f64::NEG_INFINITY,
                    other => other.parse()?,
                }),
                ("t", Some(p)) => Value::Text(p),
                ("b", Some(p)) => Value::Blob(hex::decode(p)?),
                _ => Value::Null,
            };
            let sums = (0..form.money.len())
                .map(|j| {
                    let count: i64 = g.get(2 + 2 * j);
                    let sum: String = g.get(3 + 2 * j);
                    Ok((count as u64, int_text(&sum)?))
                })
                .collect::<Result<Vec<_>>>()?;
            seg.money.push(MoneyGroup { currency, sums });
        }
        Ok(seg)
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
