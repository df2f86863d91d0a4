//! The control store on MySQL and MariaDB: its [`DIALECT`] (positional `?`
//! placeholders, the time from `UTC_TIMESTAMP(3)`, byte order by binary
//! columns, watermarks as a kind and a text, the applied set locked with
//! `SELECT … FOR UPDATE`, an upsert of `ON DUPLICATE KEY UPDATE`, the DDL
//! of `sql/mysql/`), and [`ControlSql`]: the store's statements run in the
//! spec's database with their parameters bound, their rows read as
//! integers and texts.
//!
//! The store writes identifiers in double quotes (`"column"`): every
//! session runs with `ANSI_QUOTES` in its `sql_mode` (cutover's own SQL
//! writes string literals in single quotes only). Text that is part of a
//! key of a control table is `VARBINARY`, so that neither a `PAD SPACE`
//! collation (`'a' = 'a '`) nor a case-insensitive one makes two keys one,
//! and `ORDER BY` is byte order; `SUM()` returns a `DECIMAL`, read back as
//! the integer it is.

use anyhow::{Result, bail};
use mysql::Value as My;
use mysql::prelude::Queryable;

use super::{MySql, quote_ident};
use crate::db::ControlSql;
use crate::db::control::{Dialect, Set, Statement, Watermarks};
use crate::value::{Row, Value};

/// The time a control table records: UTC to the millisecond,
/// `2024-03-15T13:45:00.123Z`.
pub(super) const NOW: &str =
    "CONCAT(LEFT(DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')";

/// `ON DUPLICATE KEY UPDATE c = VALUES(c)` (MariaDB and MySQL 8 both take
/// `VALUES()`); with nothing to set, an assignment of the key's first
/// column to itself, which changes nothing and counts no row.
fn on_duplicate(key: &[&str], from_new: &[&str], extra: &str) -> String {
    let mut sets: Vec<String> = from_new
        .iter()
        .map(|c| format!("{c} = VALUES({c})"))
        .collect();
    if !extra.is_empty() {
        sets.push(extra.to_string());
    }
    if sets.is_empty() {
        let k = key.first().copied().unwrap_or("journal");
        sets.push(format!("{k} = {k}"));
    }
    format!("ON DUPLICATE KEY UPDATE {}", sets.join(", "))
}

pub static DIALECT: Dialect = Dialect {
    param: |_, _| "?".to_string(),
    numbered: false,
    now: NOW,
    bytes: "",
    bigint: "BIGINT",
    watermarks: Watermarks::KindAndText,
    lock_applied: Some("SELECT COUNT(*) FROM {{schema}}._cutover_applied FOR UPDATE"),
    upsert: on_duplicate,
    present: |n| {
        let names: Vec<&str> = vec!["?"; n];
        // An index is a relation of a set too (`_cutover_deliveries_position`).
        format!(
            "SELECT COUNT(*) FROM (
               SELECT TABLE_NAME AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()
               UNION SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
             ) r WHERE CAST(n AS BINARY) IN ({})",
            names.join(", ")
        )
    },
    ddl: |set| match set {
        Set::Target => include_str!("../../../sql/mysql/control.sql"),
        Set::Applied => include_str!("../../../sql/mysql/applied.sql"),
        Set::Verdicts => include_str!("../../../sql/mysql/verdicts.sql"),
        Set::Receipts => include_str!("../../../sql/mysql/apply.sql"),
        Set::Sync => include_str!("../../../sql/mysql/sync.sql"),
    },
};

/// A control parameter as the server takes it.
fn param(v: &Value) -> Result<My> {
    Ok(match v {
        Value::Null => My::NULL,
        Value::Integer(i) => My::Int(*i),
        Value::Text(t) => My::Bytes(t.as_bytes().to_vec()),
        other => bail!("a control parameter cannot be {other}"),
    })
}

/// A control row's column as a value: integers as integers (a `SUM()`'s
/// `DECIMAL` too, when integral), texts (binary or not) as text.
fn column(v: &My) -> Result<Value> {
    Ok(match v {
        My::NULL => Value::Null,
        My::Int(i) => Value::Integer(*i),
        My::UInt(u) => Value::Integer(i64::try_from(*u)?),
        My::Bytes(b) => match std::str::from_utf8(b) {
            Ok(t) => Value::Text(t.to_string()),
            Err(_) => bail!("a control table holds text that is not UTF-8"),
        },
        other => bail!("a control query returned {}", other.as_sql(true)),
    })
}

impl ControlSql for MySql {
    fn control_execute(&self, st: &Statement) -> Result<u64> {
        let text = self.in_schema(st.text());
        if st.is_script() {
            use crate::db::Fixtures;
            return self
                .execute_script(&text)
                .map_err(|e| {
                    e.context(format!(
                        "writing cutover's control tables in {}",
                        self.shown()
                    ))
                })
                .map(|()| 0);
        }
        let params = st.params().iter().map(param).collect::<Result<Vec<_>>>()?;
        let mut conn = self.conn()?;
        conn.exec_drop(&text, params)
            .map_err(|e| self.failed("writing cutover's control tables", &e))?;
        Ok(super::rows::matched(&conn))
    }

    fn control_query(&self, st: &Statement) -> Result<Vec<Row>> {
        let text = self.in_schema(st.text());
        let params = st.params().iter().map(param).collect::<Result<Vec<_>>>()?;
        let rows: Vec<mysql::Row> = self
            .conn()?
            .exec(&text, params)
            .map_err(|e| self.failed("reading cutover's control tables", &e))?;
        rows.into_iter()
            .map(|r| {
                let decimals: Vec<bool> = r
                    .columns_ref()
                    .iter()
                    .map(|c| c.column_type() == mysql::consts::ColumnType::MYSQL_TYPE_NEWDECIMAL)
                    .collect();
                r.unwrap_raw()
                    .into_iter()
                    .zip(decimals)
                    .map(|(v, decimal)| {
                        let v = v.unwrap_or(My::NULL);
                        match (&v, decimal) {
                            (My::Bytes(b), true) => {
                                let t = String::from_utf8_lossy(b);
                                Ok(Value::Integer(t.parse().map_err(|_| {
                                    anyhow::anyhow!(
                                        "a control query's sum {t} is not a 64-bit integer"
                                    )
                                })?))
                            }
                            _ => column(&v),
                        }
                    })
                    .collect()
            })
            .collect()
    }
}

impl MySql {
    /// `text` with `{{schema}}` made the spec's database, quoted.
    pub(super) fn in_schema(&self, text: &str) -> String {
        text.replace("{{schema}}", &quote_ident(self.database()))
    }
}
