//! The control store on PostgreSQL: its [`DIALECT`] (typed `$n`
//! placeholders, the statement's time in UTC, `COLLATE "C"` for byte order,
//! watermarks as a kind and a text, the applied set locked against other
//! writers, the DDL of `sql/postgres/`), and [`ControlSql`]: the store's
//! statements run in the spec's schema, prepared once per connection,
//! their parameters bound by the types their placeholders name and their
//! rows read as integers (booleans as 0 and 1) and texts.

use anyhow::{Context, Result, bail};
use tokio_postgres::types::{IsNull, ToSql, Type};

use super::{Postgres, quote_ident};
use crate::db::ControlSql;
use crate::db::control::{Dialect, Kind, Set, Statement, Watermarks};
use crate::value::{Row, Value};

/// The time a control table records, as SQL: the statement's time in UTC,
/// `2024-03-15T13:45:00.123Z`.
pub(super) const NOW: &str =
    "to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";

pub static DIALECT: Dialect = Dialect {
    param: |n, kind| {
        format!(
            "${n}{}",
            match kind {
                Kind::Integer => "::bigint",
                Kind::Text => "::text",
                Kind::Boolean => "::boolean",
                Kind::Any => "",
            }
        )
    },
    numbered: true,
    now: NOW,
    bytes: " COLLATE \"C\"",
    bigint: "bigint",
    watermarks: Watermarks::KindAndText,
    lock_applied: Some("LOCK TABLE {{schema}}._cutover_applied IN SHARE ROW EXCLUSIVE MODE"),
    // The session's search_path is the spec's schema alone (after
    // pg_catalog), so `current_schema()` names it, however it is spelled.
    upsert: crate::db::control::on_conflict,
    present: |n| {
        let names: Vec<String> = (1..=n).map(|i| format!("${i}::text")).collect();
        format!(
            "SELECT count(*) FROM unnest(ARRAY[{}]::text[]) AS n
             WHERE to_regclass(quote_ident(current_schema()) || '.' || quote_ident(n)) IS NOT NULL",
            names.join(", ")
        )
    },
    ddl: |set| match set {
        Set::Target => include_str!("../../../sql/postgres/control.sql"),
        Set::Applied => include_str!("../../../sql/postgres/applied.sql"),
        Set::Verdicts => include_str!("../../../sql/postgres/verdicts.sql"),
        Set::Receipts => include_str!("../../../sql/postgres/apply.sql"),
        Set::Sync => include_str!("../../../sql/postgres/sync.sql"),
    },
};

/// A control statement's parameter, bound as the type its placeholder
/// names: an integer as `bigint` (or `integer`, range-checked) or
/// `boolean`, a text as `text`.
#[derive(Debug)]
struct Param<'a>(&'a Value);

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match (self.0, ty) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (Value::Integer(i), &Type::BOOL) => (*i != 0).to_sql(ty, out),
            (Value::Integer(i), &Type::INT4) => i32::try_from(*i)?.to_sql(ty, out),
            (Value::Integer(i), &Type::INT8) => i.to_sql(ty, out),
            (Value::Text(t), &Type::TEXT | &Type::VARCHAR) => t.as_str().to_sql(ty, out),
            (other, ty) => Err(format!(
                "a control parameter of type {ty} cannot hold {}",
                other.to_json()
            )
            .into()),
        }
    }

    fn accepts(ty: &Type) -> bool {
        matches!(
            *ty,
            Type::BOOL | Type::INT4 | Type::INT8 | Type::TEXT | Type::VARCHAR
        )
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A control row's column as a value: integers and booleans as integers,
/// texts as text.
fn column(row: &tokio_postgres::Row, i: usize) -> Result<Value> {
    let ty = row.columns()[i].type_();
    Ok(match *ty {
        Type::BOOL => row
            .get::<_, Option<bool>>(i)
            .map_or(Value::Null, |b| Value::Integer(i64::from(b))),
        Type::INT2 => row
            .get::<_, Option<i16>>(i)
            .map_or(Value::Null, |n| Value::Integer(n.into())),
        Type::INT4 => row
            .get::<_, Option<i32>>(i)
            .map_or(Value::Null, |n| Value::Integer(n.into())),
        Type::INT8 => row
            .get::<_, Option<i64>>(i)
            .map_or(Value::Null, Value::Integer),
        // A sum of integers (`sum(bigint)` is numeric): an integer.
        Type::NUMERIC => match row.get::<_, super::scan::Raw<'_>>(i).0 {
            None => Value::Null,
            Some(raw) => {
                let mut text = String::new();
                super::numeric::decode(raw, &mut text)?;
                Value::Integer(text.parse().with_context(|| {
                    format!("a control query's sum {text} is not a 64-bit integer")
                })?)
            }
        },
        Type::TEXT | Type::VARCHAR | Type::NAME => row
            .get::<_, Option<String>>(i)
            .map_or(Value::Null, Value::Text),
        _ => bail!("a control query returned a column of type {ty}"),
    })
}

impl ControlSql for Postgres {
    fn control_execute(&self, st: &Statement) -> Result<u64> {
        let text = self.in_schema(st.text());
        let mut client = self.client()?;
        if st.is_script() {
            client
                .batch_execute(&text)
                .with_context(|| format!("writing cutover's control tables in {}", self.shown))?;
            return Ok(0);
        }
        let prepared = self.prepare(&mut client, &text)?;
        let params: Vec<Param<'_>> = st.params().iter().map(Param).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        client
            .execute(&prepared, &refs)
            .with_context(|| format!("writing cutover's control tables in {}", self.shown))
    }

    fn control_query(&self, st: &Statement) -> Result<Vec<Row>> {
        let text = self.in_schema(st.text());
        let mut client = self.client()?;
        let prepared = self.prepare(&mut client, &text)?;
        let params: Vec<Param<'_>> = st.params().iter().map(Param).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        let rows = client
            .query(&prepared, &refs)
            .with_context(|| format!("reading cutover's control tables in {}", self.shown))?;
        rows.iter()
            .map(|r| (0..r.len()).map(|i| column(r, i)).collect())
            .collect()
    }
}

impl Postgres {
    /// `text` with `{{schema}}` made the spec's schema, quoted.
    pub(super) fn in_schema(&self, text: &str) -> String {
        text.replace("{{schema}}", &quote_ident(&self.schema))
    }
}
