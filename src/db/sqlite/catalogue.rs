//! What SQLite's catalogue says about tables: columns, keys, foreign keys,
//! triggers, schema text and AUTOINCREMENT sequences.

use anyhow::{Context, Result};
use rusqlite::{OptionalExtension, params};

use super::*;
use crate::value::ColumnKind;

impl Catalogue for Sqlite {
    /// Columns of a table in declaration order; empty when there is no such table.
    fn table_columns(&self, table: &str) -> Result<Vec<ColumnInfo>> {
        let mut st = self
            .conn
            // A lone INTEGER PRIMARY KEY is the rowid, which an insert
            // without it fills.
            .prepare(
                "SELECT name, type, pk,
                        \"notnull\" AND dflt_value IS NULL
                        AND NOT (pk = 1 AND upper(type) = 'INTEGER'
                                 AND (SELECT count(*) FROM pragma_table_info(?1) WHERE pk > 0) = 1)
                 FROM pragma_table_info(?1)",
            )?;
        let rows = st.query_map([table], |r| {
            let decl_type: String = r.get(1)?;
            // A column of INTEGER affinity holds 64-bit integers; any other
            // bound SQLite does not keep.
            let limit = if decl_type.to_ascii_uppercase().contains("INT") {
                crate::db::Limit::Integer {
                    min: i64::MIN.into(),
                    max: i64::MAX.into(),
                }
            } else {
                crate::db::Limit::None
            };
            Ok(ColumnInfo {
                name: r.get(0)?,
                kind: kind_of(&decl_type),
                decl_type,
                pk: r.get(2)?,
                labels: None,
                unread: None,
                limit,
                required: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The generated columns of a table, `VIRTUAL` (hidden 2) or
    /// `STORED` (hidden 3).
    fn generated_columns(&self, table: &str) -> Result<Vec<Generated>> {
        let mut st = self
            .conn
            .prepare("SELECT name, hidden FROM pragma_table_xinfo(?1) WHERE hidden IN (2, 3)")?;
        let rows = st.query_map([table], |r| {
            Ok(Generated {
                name: r.get(0)?,
                stored: r.get::<_, i64>(1)? == 3,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The tables in `sqlite_schema`, the user's alone (no `sqlite_…`
    /// table, no `_cutover_…` one) unless `own`.
    fn tables(&self, own: bool) -> Result<Vec<String>> {
        let mut st = self.conn.prepare(if own {
            "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"
        } else {
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '\\_cutover\\_%' ESCAPE '\\' ORDER BY name"
        })?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Whether the table enforces uniqueness of exactly these columns (its
    /// primary key, or a unique index): then an insert that collides can be
    /// trusted to fail rather than to add a second row.
    fn key_is_unique(&self, table: &str, key: &[&str]) -> Result<bool> {
        let want: std::collections::BTreeSet<&str> = key.iter().copied().collect();
        let pk: std::collections::BTreeSet<String> = self
            .table_columns(table)?
            .into_iter()
            .filter(|c| c.pk > 0)
            .map(|c| c.name)
            .collect();
        if pk.len() == want.len() && pk.iter().all(|c| want.contains(c.as_str())) {
            return Ok(true);
        }
        let mut st = self.conn.prepare(
            "SELECT il.name, ii.name FROM pragma_index_list(?1) AS il, pragma_index_info(il.name) AS ii
             WHERE il.\"unique\" AND il.partial = 0 ORDER BY il.name",
        )?;
        let rows: Vec<(String, Option<String>)> = st
            .query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut by_index: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
            Default::default();
        for (index, col) in rows {
            // An expression column (NULL name) makes the index useless here.
            by_index
                .entry(index)
                .or_default()
                .insert(col.unwrap_or_default());
        }
        Ok(by_index
            .values()
            .any(|cols| cols.len() == want.len() && cols.iter().all(|c| want.contains(c.as_str()))))
    }

    /// The foreign keys a table declares: `(parent table, [(column, parent
    /// column)])`, in declaration order.
    fn foreign_keys(&self, table: &str) -> Result<Vec<ForeignKey>> {
        // SQLite numbers a table's foreign keys from the last declared.
        let mut st = self.conn.prepare(
            "SELECT id, \"table\", \"from\", \"to\" FROM pragma_foreign_key_list(?1) ORDER BY id DESC, seq",
        )?;
        let rows: Vec<(i64, String, String, Option<String>)> = st
            .query_map([table], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut out: Vec<(i64, ForeignKey)> = Vec::new();
        for (id, parent, from, to) in rows {
            match out.last_mut() {
                Some(last) if last.0 == id => last.1.columns.push((from, to)),
                _ => out.push((
                    id,
                    ForeignKey {
                        name: None,
                        parent,
                        columns: vec![(from, to)],
                        deferrable: true,
                    },
                )),
            }
        }
        Ok(out.into_iter().map(|(_, fk)| fk).collect())
    }

    /// Rows of `table` that break a foreign key: `(child table, rowid,
    /// parent table)`, as `PRAGMA foreign_key_check` finds them.
    fn foreign_key_violations(
        &self,
        table: &str,
        key_names: &[&str],
    ) -> Result<Vec<ForeignKeyViolation>> {
        let mut st = self
            .conn
            .prepare("SELECT \"table\", rowid, parent FROM pragma_foreign_key_check(?1)")?;
        let rows: Vec<(String, Option<i64>, String)> = st
            .query_map([table], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut out = Vec::new();
        for (child, rowid, parent) in rows {
            // A WITHOUT ROWID table's violation has no rowid to find it by.
            let key = match rowid {
                // A table without a named key is named by its rowid.
                Some(r) if key_names.is_empty() => Some(vec![Value::Integer(r)]),
                Some(r) => self.key_of_rowid(&child, key_names, r)?,
                None => None,
            };
            out.push(ForeignKeyViolation {
                child,
                key,
                parent,
                constraint: None,
            });
        }
        Ok(out)
    }

    /// The schema of the given tables and of the control tables: every table,
    /// index and trigger definition, as `(name, sql)` in name order.
    fn schema_of(&self, tables: &[&str]) -> Result<Vec<SchemaPart>> {
        let mut st = self.conn.prepare(
            "SELECT type || ' ' || name, coalesce(sql, '') FROM sqlite_schema
             WHERE lower(tbl_name) IN (SELECT lower(value) FROM json_each(?1)) OR tbl_name LIKE '\\_cutover\\_%' ESCAPE '\\'
             ORDER BY type, name",
        )?;
        let list = serde_json::to_string(tables)?;
        let rows = st.query_map([list], |r| {
            Ok(SchemaPart {
                name: r.get(0)?,
                definition: r.get(1)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Raises a table's AUTOINCREMENT high-water mark to at least `to`, so
    /// it never hands out an id the other database already used. Nothing
    /// for a table without AUTOINCREMENT.
    fn raise_sequence(&self, table: &str, to: i64) -> Result<()> {
        if to <= 0 {
            return Ok(());
        }
        let autoincrement: bool = self.conn.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1 AND upper(sql) LIKE '%AUTOINCREMENT%'",
            [table],
            |r| r.get::<_, i64>(0).map(|n| n > 0),
        )?;
        if !autoincrement || !self.has_table("sqlite_sequence")? {
            return Ok(());
        }
        self.conn.execute(
            "UPDATE sqlite_sequence SET seq = ?2 WHERE name = ?1 AND seq < ?2",
            params![table, to],
        )?;
        self.conn.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT ?1, ?2 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?1)",
            params![table, to],
        )?;
        Ok(())
    }

    /// Each table's AUTOINCREMENT high-water mark (`sqlite_sequence`): the
    /// largest id it ever handed out, rows deleted since included. Marked
    /// transactional: `sqlite_sequence` is a table, and a rollback puts it
    /// back with the rows.
    fn sequence_marks(&self, tables: &[&str]) -> Result<Vec<SequenceMark>> {
        if !self.has_table("sqlite_sequence")? {
            return Ok(Vec::new());
        }
        let mut st = self
            .conn
            .prepare_cached("SELECT seq FROM sqlite_sequence WHERE name = ?1")?;
        let mut out = Vec::new();
        for t in tables {
            if let Some(seq) = st.query_row([t], |r| r.get::<_, i64>(0)).optional()? {
                out.push(SequenceMark {
                    name: quote_ident(t),
                    last_value: seq,
                    is_called: true,
                    table: t.to_string(),
                    own: true,
                    transactional: true,
                });
            }
        }
        Ok(out)
    }

    /// Nothing to put back: a rollback did.
    fn restore_sequences(&self, _marks: &[SequenceMark]) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Adds the column: a SQLite column keeps its declared type as it is;
    /// any other engine's kind becomes SQLite's name for it (SQLite keeps
    /// each value with its storage class whatever the name).
    fn add_column(&self, table: &str, from: &ColumnInfo) -> Result<()> {
        let ty = if from.kind == kind_of(&from.decl_type) && plain(&from.decl_type) {
            from.decl_type.clone()
        } else {
            declared(&from.kind)
        };
        let column = &from.name;
        self.conn
            .execute_batch(&format!(
                "ALTER TABLE {} ADD COLUMN {} {ty}",
                quote_ident(table),
                quote_ident(column)
            ))
            .with_context(|| format!("adding column '{column}' to '{table}' in {}", self.location))
    }

    fn own_triggers(&self, table: &str) -> Result<OwnTriggers> {
        Ok(OwnTriggers {
            journal: self.journal_triggers(table)?,
            fence: self.fence_triggers(table)?,
        })
    }

    /// NOT NULL, and in a STRICT table a value of a class its column's
    /// type refuses (SQLite's own check on write): any other value SQLite
    /// stores as given.
    fn holding<'a>(&'a self, sql: &TableSql, _server: bool) -> Result<crate::db::Holding<'a>> {
        let declared: Vec<(String, String, bool)> = self
            .conn
            .prepare_cached("SELECT name, upper(type), \"notnull\" FROM pragma_table_info(?1)")?
            .query_map([&sql.table], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let strict: bool = self
            .conn
            .prepare_cached("SELECT strict FROM pragma_table_list(?1) WHERE schema = 'main'")?
            .query_row([&sql.table], |r| r.get(0))
            .optional()?
            .unwrap_or(false);
        // Per column of the statements: its name, declared type and NOT NULL.
        let columns: Vec<Option<(String, String, bool)>> = sql
            .columns
            .iter()
            .map(|name| declared.iter().find(|d| d.0 == *name).cloned())
            .collect();
        let checks = self.check_constraints(&sql.table)?;
        let table = sql.table.clone();
        let check = move |row: &[Value]| {
            for (c, v) in columns.iter().zip(row) {
                let Some((name, ty, not_null)) = c else {
                    continue;
                };
                let refused = match v {
                    Value::Null if *not_null => Some("NULL in a NOT NULL column".to_string()),
                    Value::Null => None,
                    _ if !strict => None,
                    v => strict_refuses(ty, v),
                };
                if let Some(why) = refused {
                    return Ok(Some(crate::db::Unfit {
                        column: name.clone(),
                        why: format!("column '{name}' of table '{table}' cannot hold {v}: {why}"),
                    }));
                }
            }
            Ok(None)
        };
        Ok(crate::db::Holding::new(check, checks))
    }
}

impl Sqlite {
    /// SQLite keeps a table's CHECK constraints only in the text of its
    /// definition, and names few: the word in that text says there are
    /// some (a quoted name or a string holding it says so too, which only
    /// costs a needless rehearsal).
    fn check_constraints(&self, table: &str) -> Result<Vec<String>> {
        static CHECK: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        let check =
            CHECK.get_or_init(|| regex::Regex::new(r"(?i)\bCHECK\s*\(").expect("a pattern"));
        let sql: Option<String> = self
            .conn
            .prepare_cached("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1")?
            .query_row([table], |r| r.get(0))
            .optional()?;
        Ok(match sql {
            Some(sql) if check.is_match(&sql) => {
                vec!["CHECK constraints in the table's definition".to_string()]
            }
            _ => Vec::new(),
        })
    }

    pub(super) fn has_table(&self, name: &str) -> Result<bool> {
        self.with_schema(|s| s.has("table", name))
    }

    /// The key columns' values of a row given by rowid (for reports).
    pub(super) fn key_of_rowid(
        &self,
        table: &str,
        key_names: &[&str],
        rowid: i64,
    ) -> Result<Option<Row>> {
        let sql = format!(
            "SELECT {} FROM {} WHERE rowid = ?1",
            key_names
                .iter()
                .map(|c| quote_ident(c))
                .collect::<Vec<_>>()
                .join(", "),
            quote_ident(table)
        );
        let mut st = self.conn.prepare(&sql)?;
        let mut rows = st.query([rowid])?;
        Ok(match rows.next()? {
            Some(r) => Some(read_row(r, key_names.len())?),
            None => None,
        })
    }
}

impl Sqlite {
    /// The triggers on a table that are not cutover's: `(name)`.
    pub(super) fn app_triggers(&self, table: &str) -> Result<Vec<String>> {
        let mut st = self.conn.prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ?1
             AND name NOT LIKE '\\_cutover\\_%' ESCAPE '\\' ORDER BY name",
        )?;
        let rows = st.query_map([table], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// Whether a declared type is a plain name SQLite may be given back as it
/// is (letters, digits, spaces, a parenthesised list).
fn plain(decl: &str) -> bool {
    decl.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == ' ' || c == '(' || c == ')' || c == ',')
}

/// The kind of a column SQLite declares `decl`, by SQLite's own affinity
/// rules (<https://sqlite.org/datatype3.html>, 3.1), in their order: INT,
/// then TEXT, then BLOB or none, then REAL; what is left has NUMERIC
/// affinity, where a decimal's precision and scale, a boolean, a date and a
/// timestamp are told apart and every other name admits whatever it is
/// given.
pub(super) fn kind_of(decl: &str) -> ColumnKind {
    let upper = decl.trim().to_ascii_uppercase();
    let args: Vec<u32> = upper
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(inside, _)| {
            inside
                .split(',')
                .filter_map(|a| a.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if upper.contains("INT") {
        return ColumnKind::Integer;
    }
    if ["CHAR", "CLOB", "TEXT"].iter().any(|a| upper.contains(a)) {
        return ColumnKind::Text {
            max_len: args.first().copied(),
            fixed: false,
        };
    }
    if upper.is_empty() {
        return ColumnKind::Any;
    }
    if upper.contains("BLOB") {
        return ColumnKind::Blob;
    }
    if ["REAL", "FLOA", "DOUB"].iter().any(|a| upper.contains(a)) {
        return ColumnKind::Real;
    }
    let name = upper.split('(').next().unwrap_or("").trim();
    match name {
        "NUMERIC" | "DECIMAL" => ColumnKind::Decimal {
            precision: args.first().copied(),
            scale: args.get(1).copied(),
        },
        "BOOLEAN" | "BOOL" => ColumnKind::Boolean,
        "DATE" => ColumnKind::Date,
        "TIMESTAMP" => ColumnKind::Timestamp { zone: false },
        _ if name.contains("MONEY") => ColumnKind::Money,
        _ => ColumnKind::Loose(decl.trim().to_string()),
    }
}

/// SQLite's name for a column of another engine's kind.
fn declared(kind: &ColumnKind) -> String {
    match kind {
        ColumnKind::Integer => "INTEGER".into(),
        ColumnKind::Real => "REAL".into(),
        ColumnKind::Decimal {
            precision: Some(p),
            scale: Some(s),
        } => format!("NUMERIC({p},{s})"),
        ColumnKind::Decimal { .. } | ColumnKind::Money => "NUMERIC".into(),
        ColumnKind::Text { .. } => "TEXT".into(),
        ColumnKind::Blob => "BLOB".into(),
        ColumnKind::Boolean => "BOOLEAN".into(),
        ColumnKind::Date => "DATE".into(),
        ColumnKind::Timestamp { .. } => "TIMESTAMP".into(),
        // Whatever it was given, as SQLite keeps it.
        ColumnKind::Loose(_) | ColumnKind::Any | ColumnKind::Other { .. } => String::new(),
    }
}

/// What a STRICT table's column of type `ty` refuses of a value that is
/// not NULL: a value SQLite cannot store as that type without loss.
fn strict_refuses(ty: &str, v: &Value) -> Option<String> {
    let numeric = |t: &str| t.trim().parse::<f64>().is_ok();
    match (ty, v) {
        ("ANY", _) | ("BLOB", _) => None,
        (_, Value::Blob(_)) => Some(format!("a blob in a {ty} column of a STRICT table")),
        ("INTEGER" | "INT", Value::Real(r)) if r.fract() != 0.0 || !r.is_finite() => {
            Some(format!("a real in an {ty} column of a STRICT table"))
        }
        ("INTEGER" | "INT", Value::Text(t)) if t.trim().parse::<i64>().is_err() => {
            Some(format!("text in an {ty} column of a STRICT table"))
        }
        ("REAL", Value::Text(t)) if !numeric(t) => {
            Some("text in a REAL column of a STRICT table".to_string())
        }
        _ => None,
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    #[test]
    fn declared_types_take_their_kind_by_affinity() {
        for (decl, kind) in [
            ("INTEGER", ColumnKind::Integer),
            ("UNSIGNED BIG INT", ColumnKind::Integer),
            ("POINT", ColumnKind::Integer),
            (
                "varchar(12)",
                ColumnKind::Text {
                    max_len: Some(12),
                    fixed: false,
                },
            ),
            ("", ColumnKind::Any),
            ("blob", ColumnKind::Blob),
            ("DOUBLE PRECISION", ColumnKind::Real),
            (
                "numeric(10,2)",
                ColumnKind::Decimal {
                    precision: Some(10),
                    scale: Some(2),
                },
            ),
            (
                "DECIMAL",
                ColumnKind::Decimal {
                    precision: None,
                    scale: None,
                },
            ),
            ("BOOLEAN", ColumnKind::Boolean),
            ("DATE", ColumnKind::Date),
            ("DATETIME", ColumnKind::Loose("DATETIME".into())),
            ("MONEY", ColumnKind::Money),
        ] {
            assert_eq!(kind_of(decl), kind, "{decl}");
        }
    }
}
