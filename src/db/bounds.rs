//! A target CHECK that mirrors a source column's bound ([`Limit`]), in each
//! engine's SQL: the DDL `check` prints beside a hazard, so that the
//! application's write that the source could not store is refused on the
//! target at once instead of being found at the rollback. Each engine names
//! its function in its [`super::engines::Engine`] entry.

use super::Limit;

/// The statement that adds the CHECK on PostgreSQL.
pub fn postgres(table: &str, column: &str, limit: &Limit) -> Option<String> {
    let c = super::postgres::quote_ident(column);
    let clause = match limit {
        &Limit::Time { fraction, years } => time(
            fraction,
            years,
            |unit| format!("extract(microseconds FROM {c})::bigint % {unit} = 0"),
            |from, to| {
                format!("{c} >= '{from}-01-01 00:00:01+00' AND {c} < '{to}-01-19 03:14:08+00'")
            },
        )?,
        other => shared(&c, other, "char_length")?,
    };
    Some(add(&super::postgres::quote_ident(table), column, &clause))
}

/// The statement that adds the CHECK on MySQL or MariaDB (both enforce a
/// CHECK since MySQL 8.0.16 and MariaDB 10.2).
pub fn mysql(table: &str, column: &str, limit: &Limit) -> Option<String> {
    let c = super::mysql::quote_ident(column);
    let clause = match limit {
        &Limit::Time { fraction, years } => time(
            fraction,
            years,
            |unit| format!("MICROSECOND({c}) % {unit} = 0"),
            |from, to| format!("{c} BETWEEN '{from}-01-01 00:00:01' AND '{to}-01-19 03:14:07'"),
        )?,
        other => shared(&c, other, "CHAR_LENGTH")?,
    };
    Some(add(&super::mysql::quote_ident(table), column, &clause))
}

/// A time's clause from the engine's two tests: the microseconds a whole
/// multiple of `unit` (10^(6 - fraction)), and the years between `from`
/// and `to` (a MySQL `TIMESTAMP`'s range); `None` when neither bounds it.
fn time(
    fraction: u32,
    years: Option<(i32, i32)>,
    micro: impl Fn(i64) -> String,
    span: impl Fn(i32, i32) -> String,
) -> Option<String> {
    let parts: Vec<String> = (fraction < 6)
        .then(|| micro(10i64.pow(6 - fraction)))
        .into_iter()
        .chain(years.map(|(from, to)| span(from, to)))
        .collect();
    (!parts.is_empty()).then(|| parts.join(" AND "))
}

/// SQLite adds a CHECK only in a table's definition: the clause to put
/// there, the table rebuilt. A time, kept as text, has none.
pub fn sqlite(_table: &str, column: &str, limit: &Limit) -> Option<String> {
    let c = super::sqlite::quote_ident(column);
    let clause = shared(&c, limit, "length")?;
    Some(format!(
        "CONSTRAINT {} CHECK ({clause}) in the table's definition (SQLite adds a CHECK only when the table is created anew)",
        constraint_name(column)
    ))
}

/// The name of the CHECK that holds target column `column` to the source's
/// bound: `check` takes a constraint of this name on the target table as
/// the hazard fixed.
pub fn constraint_name(column: &str) -> String {
    format!("{column}_fits_source")
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() {
                ch.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// `ALTER TABLE … ADD CONSTRAINT … CHECK (…)`.
fn add(table: &str, column: &str, clause: &str) -> String {
    let name = constraint_name(column);
    format!("ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({clause})")
}

/// The clause every engine writes alike, `length` being its function that
/// counts characters; `None` for a bound with no such clause.
fn shared(c: &str, limit: &Limit, length: &str) -> Option<String> {
    Some(match limit {
        Limit::None | Limit::Time { .. } => return None,
        Limit::Integer { min, max } => format!("{c} BETWEEN {min} AND {max}"),
        Limit::Digits {
            precision,
            scale,
            unsigned,
        } => {
            let whole = precision.saturating_sub(*scale);
            let mut clause = format!("{c} = ROUND({c}, {scale}) AND ABS({c}) < 1e{whole}");
            if *unsigned {
                clause.push_str(&format!(" AND {c} >= 0"));
            }
            clause
        }
        Limit::Chars {
            length: n,
            padded,
            cut,
        } => {
            let mut clause = if *padded {
                format!("{length}({c}) = {n}")
            } else {
                format!("{length}({c}) <= {n}")
            };
            if *cut {
                clause.push_str(&format!(" AND {c} NOT LIKE '% '"));
            }
            clause
        }
        Limit::Members(labels) => {
            let quoted: Vec<String> = labels
                .iter()
                .map(|l| format!("'{}'", l.replace('\'', "''")))
                .collect();
            format!("{c} IN ({})", quoted.join(", "))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fraction_of_a_second_and_the_years_of_a_mysql_timestamp() {
        let limit = Limit::Time {
            fraction: 0,
            years: Some((1970, 2038)),
        };
        assert_eq!(
            postgres("orders", "created", &limit).unwrap(),
            "ALTER TABLE \"orders\" ADD CONSTRAINT created_fits_source CHECK (extract(microseconds FROM \"created\")::bigint % 1000000 = 0 AND \"created\" >= '1970-01-01 00:00:01+00' AND \"created\" < '2038-01-19 03:14:08+00')"
        );
        let fraction = Limit::Time {
            fraction: 6,
            years: None,
        };
        assert_eq!(mysql("orders", "created", &fraction), None);
        assert_eq!(sqlite("orders", "created", &limit), None);
    }

    #[test]
    fn digits_lengths_and_labels_read_alike_on_every_engine() {
        let digits = Limit::Digits {
            precision: 12,
            scale: 2,
            unsigned: true,
        };
        assert_eq!(
            mysql("t", "amount", &digits).unwrap(),
            "ALTER TABLE `t` ADD CONSTRAINT amount_fits_source CHECK (`amount` = ROUND(`amount`, 2) AND ABS(`amount`) < 1e10 AND `amount` >= 0)"
        );
        let chars = Limit::Chars {
            length: 3,
            padded: true,
            cut: false,
        };
        assert!(
            postgres("t", "code", &chars)
                .unwrap()
                .ends_with("CHECK (char_length(\"code\") = 3)")
        );
        let labels = Limit::Members(vec!["a".into(), "it's".into()]);
        assert!(
            sqlite("t", "kind", &labels)
                .unwrap()
                .starts_with("CONSTRAINT kind_fits_source CHECK (\"kind\" IN ('a', 'it''s'))")
        );
    }
}
