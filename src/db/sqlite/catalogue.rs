//! What SQLite's catalogue says about tables: columns, keys, foreign keys,
//! triggers, schema text and AUTOINCREMENT sequences.

use anyhow::Result;
use rusqlite::{OptionalExtension, params};

use super::*;

impl Catalogue for Sqlite {
    /// Columns of a table in declaration order; empty when there is no such table.
    fn table_columns(&self, table: &str) -> Result<Vec<ColumnInfo>> {
        let mut st = self
            .conn
            .prepare("SELECT name, type, pk FROM pragma_table_info(?1)")?;
        let rows = st.query_map([table], |r| {
            Ok(ColumnInfo {
                name: r.get(0)?,
                decl_type: r.get(1)?,
                pk: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The generated columns of a table: `(name, "virtual" | "stored")`.
    fn generated_columns(&self, table: &str) -> Result<Vec<(String, &'static str)>> {
        let mut st = self
            .conn
            .prepare("SELECT name, hidden FROM pragma_table_xinfo(?1) WHERE hidden IN (2, 3)")?;
        let rows = st.query_map([table], |r| {
            Ok((
                r.get::<_, String>(0)?,
                if r.get::<_, i64>(1)? == 2 {
                    "virtual"
                } else {
                    "stored"
                },
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The user tables, for messages that list what is there.
    fn user_tables(&self) -> Result<Vec<String>> {
        let mut st = self.conn.prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '\\_cutover\\_%' ESCAPE '\\' ORDER BY name",
        )?;
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
                Some(last) if last.0 == id => last.1.1.push((from, to)),
                _ => out.push((id, (parent, vec![(from, to)]))),
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
            out.push((child, key, parent));
        }
        Ok(out)
    }

    /// The schema of the given tables and of the control tables: every table,
    /// index and trigger definition, as `(name, sql)` in name order.
    fn schema_of(&self, tables: &[&str]) -> Result<Vec<(String, String)>> {
        let mut st = self.conn.prepare(
            "SELECT type || ' ' || name, coalesce(sql, '') FROM sqlite_schema
             WHERE lower(tbl_name) IN (SELECT lower(value) FROM json_each(?1)) OR tbl_name LIKE '\\_cutover\\_%' ESCAPE '\\'
             ORDER BY type, name",
        )?;
        let list = serde_json::to_string(tables)?;
        let rows = st.query_map([list], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The AUTOINCREMENT high-water mark of a table (`sqlite_sequence`): the
    /// largest id it ever handed out, rows deleted since included.
    fn sequence(&self, table: &str) -> Result<Option<i64>> {
        if !self.has_table("sqlite_sequence")? {
            return Ok(None);
        }
        Ok(self
            .conn
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = ?1",
                [table],
                |r| r.get(0),
            )
            .optional()?)
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

    /// Nothing to mark: `sqlite_sequence` is a table, and a rollback puts
    /// it back with the rows.
    fn sequence_marks(&self, _tables: &[&str]) -> Result<Vec<SequenceMark>> {
        Ok(Vec::new())
    }

    fn restore_sequences(&self, _marks: &[SequenceMark]) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
}

impl Sqlite {
    pub(super) fn has_table(&self, name: &str) -> Result<bool> {
        self.with_schema(|s| s.has("table", name))
    }

    pub(super) fn has_column(&self, table: &str, column: &str) -> Result<bool> {
        Ok(self.table_columns(table)?.iter().any(|c| c.name == column))
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
