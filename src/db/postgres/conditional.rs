//! Replay's per-entry write in one statement ([`ConditionalWrite`]): an
//! `UPDATE` or `DELETE` of the row under its key only where every other
//! written column still holds the value expected, an `INSERT … ON CONFLICT
//! DO NOTHING`; instead of reading the row and then writing it.
//!
//! A statement that changes no row must have done nothing, since the
//! caller then takes the long way (reads the row, and writes it or names
//! the conflict): so only a table without triggers or rules of its own has
//! these statements, and only where each column compares exactly as the
//! long way compares its value read back (integers, booleans, text by its
//! bytes, `bytea`, dates and times, a `numeric` by value and scale, a float
//! by its bits). A statement the server refuses (a UNIQUE value taken, a
//! CHECK, a foreign key) spoils the transaction: its error is returned, the
//! row's conflict, and the caller's batch rolled back to its savepoint.

use anyhow::Result;
use tokio_postgres::Statement;

use super::Postgres;
use super::scan::Bound;
use super::table_sql::{Plan, key_match};
use super::types::{self, Kind};
use crate::db::{ConditionalWrite, TableSql};
use crate::value::{Value, key_cmp};

/// `col` holds exactly the value of parameter `n`, as the long way would
/// compare the value read back; `None` for a kind that has no such test
/// here.
fn same(kind: Kind, col: &str, n: usize) -> Option<String> {
    Some(match kind {
        Kind::Bool
        | Kind::Int2
        | Kind::Int4
        | Kind::Int8
        | Kind::Bytea
        | Kind::Date
        | Kind::Timestamp
        | Kind::Timestamptz => format!("{col} IS NOT DISTINCT FROM ${n}"),
        Kind::Text => format!("{col} IS NOT DISTINCT FROM (${n} COLLATE \"C\")"),
        Kind::Float4 => format!("float4send({col}) IS NOT DISTINCT FROM float4send(${n}::float4)"),
        Kind::Float8 => format!("float8send({col}) IS NOT DISTINCT FROM float8send(${n}::float8)"),
        // `12.5` equals `12.50`, which read back is other text.
        Kind::Numeric(_) => format!(
            "({col} IS NOT DISTINCT FROM ${n}::numeric AND scale({col}) IS NOT DISTINCT FROM scale(${n}::numeric))"
        ),
        Kind::Bpchar | Kind::Enum | Kind::Other | Kind::Absent => return None,
    })
}

/// The conditional statements of a table: `UPDATE`, `DELETE`, `INSERT`.
struct Texts {
    update: String,
    delete: String,
    insert: String,
}

/// The statements for `plan`, when every column it writes compares
/// exactly and it has a column beside the key.
fn texts(plan: &Plan, sql: &TableSql) -> Option<Texts> {
    let k = plan.key_len;
    let quoted: Vec<String> = plan.names.iter().map(|c| super::quote_ident(c)).collect();
    let written = plan.written();
    let rest: Vec<usize> = written.iter().copied().filter(|&i| i >= k).collect();
    if rest.is_empty() || written.len() != plan.names.len() {
        return None;
    }
    let keys_from = |first: usize| {
        (0..k)
            .map(|i| key_match(plan.kinds[i], &quoted[i], first + i))
            .collect::<Vec<_>>()
            .join(" AND ")
    };
    let same_from = |first: usize| -> Option<String> {
        rest.iter()
            .enumerate()
            .map(|(p, &i)| same(plan.kinds[i], &quoted[i], first + p))
            .collect::<Option<Vec<_>>>()
            .map(|s| s.join(" AND "))
    };
    (0..k).try_for_each(|i| same(plan.kinds[i], "", 0).map(drop))?;
    let set = rest
        .iter()
        .enumerate()
        .map(|(p, &i)| format!("{} = ${}", quoted[i], p + 1))
        .collect::<Vec<_>>()
        .join(", ");
    let q = &plan.qualified;
    let r = rest.len();
    Some(Texts {
        update: format!(
            "UPDATE {q} SET {set} WHERE {} AND {}",
            keys_from(r + 1),
            same_from(r + k + 1)?
        ),
        delete: format!(
            "DELETE FROM {q} WHERE {} AND {}",
            keys_from(1),
            same_from(k + 1)?
        ),
        insert: format!("{} ON CONFLICT DO NOTHING", sql.insert),
    })
}

/// A value bound for a write; `None` when its column cannot hold it (the
/// long way names it).
fn written(kind: Kind, v: &Value) -> Option<Bound> {
    if matches!(v, Value::Null) {
        return Some(Bound(None));
    }
    let mut raw = Vec::new();
    types::encode(kind, v.as_cell(), &mut raw).ok()?;
    Some(Bound(Some(raw)))
}

/// A value bound for a comparison: a `numeric` at any scale (the scale is
/// compared, not checked); `None` when its column's type cannot hold it,
/// so no row holds it.
fn compared(kind: Kind, v: &Value) -> Option<Bound> {
    match kind {
        Kind::Numeric(_) => written(Kind::Numeric(None), v),
        k => written(k, v),
    }
}

/// A table's conditional statements, prepared on first use.
pub(super) struct ConditionalWriter<'a> {
    db: &'a Postgres,
    plan: std::sync::Arc<Plan>,
    texts: Texts,
    update: Option<Statement>,
    delete: Option<Statement>,
    insert: Option<Statement>,
}

impl Postgres {
    /// The conditional writes of the table of `sql`, where it has them: no
    /// trigger or rule of its own, every column comparable exactly.
    pub(super) fn conditional_writer_of<'a>(
        &'a self,
        sql: &TableSql,
    ) -> Result<Option<ConditionalWriter<'a>>> {
        let plan = self.plan(sql)?;
        let Some(texts) = texts(&plan, sql) else {
            return Ok(None);
        };
        let own: i64 = self
            .client()?
            .query_one(
                "SELECT (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = to_regclass($1)
                       AND NOT t.tgisinternal AND t.tgname NOT LIKE '\\_cutover\\_%')
                  + (SELECT count(*) FROM pg_rewrite r WHERE r.ev_class = to_regclass($1)
                       AND r.rulename <> '_RETURN')",
                &[&plan.qualified],
            )?
            .get(0);
        Ok((own == 0).then(|| ConditionalWriter {
            db: self,
            plan,
            texts,
            update: None,
            delete: None,
            insert: None,
        }))
    }
}

impl ConditionalWrite for ConditionalWriter<'_> {
    fn write_if(&mut self, before: Option<&[Value]>, after: Option<&[Value]>) -> Result<bool> {
        let plan = &self.plan;
        let k = plan.key_len;
        // A value known by its digest is compared the long way.
        if before
            .into_iter()
            .chain(after)
            .flatten()
            .any(Value::is_large)
        {
            return Ok(false);
        }
        let rest = || (k..plan.names.len()).collect::<Vec<usize>>();
        let bound: Option<Vec<Bound>> = match (before, after) {
            (None, Some(a)) => (0..plan.names.len())
                .map(|i| written(plan.kinds[i], &a[i]))
                .collect(),
            (Some(b), Some(a)) if key_cmp(&a[..k], &b[..k]).is_eq() => rest()
                .into_iter()
                .map(|i| written(plan.kinds[i], &a[i]))
                .chain((0..k).map(|i| compared(plan.kinds[i], &b[i])))
                .chain(rest().into_iter().map(|i| compared(plan.kinds[i], &b[i])))
                .collect(),
            (Some(b), None) => (0..k)
                .chain(rest())
                .map(|i| compared(plan.kinds[i], &b[i]))
                .collect(),
            _ => return Ok(false),
        };
        let Some(bound) = bound else {
            return Ok(false);
        };
        let (slot, text) = match (before, after) {
            (None, _) => (&mut self.insert, &self.texts.insert),
            (_, Some(_)) => (&mut self.update, &self.texts.update),
            (_, None) => (&mut self.delete, &self.texts.delete),
        };
        let mut client = self.db.client()?;
        let st = match slot {
            Some(st) => st.clone(),
            None => slot.insert(self.db.prepare(&mut client, text)?).clone(),
        };
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = bound
            .iter()
            .map(|b| b as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        let n = client.execute(&st, &refs).map_err(|e| {
            anyhow::Error::new(e).context(format!(
                "writing a row of '{}' in {}",
                plan.table, self.db.shown
            ))
        })?;
        Ok(n == 1)
    }
}
