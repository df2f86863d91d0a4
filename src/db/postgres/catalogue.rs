//! The catalogue of the spec's schema: its tables, their columns (declared
//! type, primary-key position, how values are read), unique keys, foreign
//! keys, generated columns and triggers.
//!
//! Table names are exact (quoted): `Orders` is not `orders`. A name that
//! is not a table of the schema gives empty answers, as SQLite's do.

use std::collections::BTreeSet;

use anyhow::{Context, Result};

use super::Db;
use super::types::Kind;
use crate::db::ColumnInfo;

/// A foreign key: `(parent table, [(column, parent column)])`. A parent in
/// another schema is named `schema.table`.
pub type ForeignKey = (String, Vec<(String, Option<String>)>);

/// How a column is read: its name, [`Kind`] and whether it is NOT NULL.
#[derive(Clone, Debug)]
pub struct ColumnKind {
    pub name: String,
    pub kind: Kind,
    pub not_null: bool,
}

impl Db {
    /// The table's `regclass` argument: the qualified, quoted name as text.
    fn regclass(&self, table: &str) -> String {
        self.qualified(table)
    }

    /// Columns of a table in declaration order; empty when there is no such
    /// table. `decl_type` is PostgreSQL's own (`numeric(10,2)`, `text`).
    pub fn table_columns(&self, table: &str) -> Result<Vec<ColumnInfo>> {
        let rows = self.client()?.query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod),
                    coalesce(array_position(i.indkey::int2[], a.attnum), -1) + 1
             FROM pg_attribute a
             LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum",
            &[&self.regclass(table)],
        )?;
        Ok(rows
            .iter()
            .map(|r| ColumnInfo {
                name: r.get(0),
                decl_type: r.get(1),
                // indkey::int2[] starts at index 0, so the position found
                // is already 0-based; +1 above made it 1-based (0: not in it).
                pk: r.get::<_, i32>(2) as i64,
            })
            .collect())
    }

    /// How each column of a table is read, in declaration order; domains
    /// resolved to their base type.
    pub fn column_kinds(&self, table: &str) -> Result<Vec<ColumnKind>> {
        let rows = self
            .client()?
            .query(
                "WITH RECURSIVE base(num, name, nn, oid, typtype, typmod) AS (
                   SELECT a.attnum, a.attname::text, a.attnotnull, t.oid, t.typtype::text, a.atttypmod
                   FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                   WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
                   UNION ALL
                   SELECT b.num, b.name, b.nn OR d.typnotnull, bt.oid, bt.typtype::text,
                          CASE WHEN b.typmod = -1 THEN d.typtypmod ELSE b.typmod END
                   FROM base b JOIN pg_type d ON d.oid = b.oid JOIN pg_type bt ON bt.oid = d.typbasetype
                   WHERE b.typtype = 'd'
                 )
                 SELECT name, oid, typtype, typmod, nn FROM base WHERE typtype <> 'd' ORDER BY num",
                &[&self.regclass(table)],
            )
            .with_context(|| format!("reading the columns of '{table}' in {}", self.shown))?;
        Ok(rows
            .iter()
            .map(|r| ColumnKind {
                name: r.get(0),
                kind: Kind::of(r.get(1), r.get(2), r.get(3)),
                not_null: r.get(4),
            })
            .collect())
    }

    /// The generated columns of a table: `(name, "stored")` (PostgreSQL 15
    /// has no virtual ones).
    pub fn generated_columns(&self, table: &str) -> Result<Vec<(String, &'static str)>> {
        let rows = self.client()?.query(
            "SELECT attname::text FROM pg_attribute
             WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attgenerated = 's'
             ORDER BY attnum",
            &[&self.regclass(table)],
        )?;
        Ok(rows.iter().map(|r| (r.get(0), "stored")).collect())
    }

    /// The user tables of the schema (partitioned tables, not their
    /// partitions; not cutover's own), in byte order of their names.
    pub fn user_tables(&self) -> Result<Vec<String>> {
        let rows = self.client()?.query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition
               AND c.relname NOT LIKE '\\_cutover\\_%'
             ORDER BY c.relname COLLATE \"C\"",
            &[&self.schema],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Whether the schema has a table (or view) of this name.
    pub fn has_table(&self, table: &str) -> Result<bool> {
        let row = self.client()?.query_one(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&self.regclass(table)],
        )?;
        Ok(row.get(0))
    }

    /// Whether the table enforces uniqueness of exactly these columns (its
    /// primary key, or a unique index without a predicate or expression,
    /// checked at once rather than deferred): then an insert that collides
    /// can be trusted to fail rather than to add a second row.
    pub fn key_is_unique(&self, table: &str, key: &[&str]) -> Result<bool> {
        let want: BTreeSet<&str> = key.iter().copied().collect();
        let rows = self.client()?.query(
            "SELECT array_agg(a.attname::text)
             FROM pg_index i
             JOIN pg_attribute a ON a.attrelid = i.indrelid
                AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])
             WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indimmediate
               AND i.indpred IS NULL AND i.indexprs IS NULL
             GROUP BY i.indexrelid",
            &[&self.regclass(table)],
        )?;
        Ok(rows.iter().any(|r| {
            let cols: Vec<String> = r.get(0);
            cols.len() == want.len() && cols.iter().all(|c| want.contains(c.as_str()))
        }))
    }

    /// The foreign keys a table declares: `(parent table, [(column, parent
    /// column)])`, in the order they were created.
    pub fn foreign_keys(&self, table: &str) -> Result<Vec<ForeignKey>> {
        let rows = self.client()?.query(
            "SELECT c.oid, CASE WHEN pn.nspname = $2 THEN pc.relname::text
                                ELSE pn.nspname || '.' || pc.relname END,
                    a.attname::text, pa.attname::text
             FROM pg_constraint c
             CROSS JOIN LATERAL unnest(c.conkey, c.confkey) WITH ORDINALITY AS k(col, pcol, n)
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.col
             JOIN pg_attribute pa ON pa.attrelid = c.confrelid AND pa.attnum = k.pcol
             JOIN pg_class pc ON pc.oid = c.confrelid
             JOIN pg_namespace pn ON pn.oid = pc.relnamespace
             WHERE c.conrelid = to_regclass($1) AND c.contype = 'f'
             ORDER BY c.oid, k.n",
            &[&self.regclass(table), &self.schema],
        )?;
        let mut out: Vec<(u32, ForeignKey)> = Vec::new();
        for r in &rows {
            let (id, parent, from, to): (u32, String, String, String) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            match out.last_mut() {
                Some(last) if last.0 == id => last.1.1.push((from, Some(to))),
                _ => out.push((id, (parent, vec![(from, Some(to))]))),
            }
        }
        Ok(out.into_iter().map(|(_, fk)| fk).collect())
    }

    /// Whether a table declares foreign keys.
    pub fn has_foreign_keys(&self, table: &str) -> Result<bool> {
        let row = self.client()?.query_one(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'f'",
            &[&self.regclass(table)],
        )?;
        Ok(row.get::<_, i64>(0) > 0)
    }

    /// The triggers on a table that are not cutover's (nor PostgreSQL's
    /// own, such as those enforcing foreign keys), by name.
    pub fn app_triggers(&self, table: &str) -> Result<Vec<String>> {
        Ok(self
            .trigger_states(table)?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    /// The application's triggers on a table with their `tgenabled` state:
    /// `O` fires in the origin role (the default), `D` disabled, `R` only in
    /// the replica role, `A` always.
    pub fn trigger_states(&self, table: &str) -> Result<Vec<(String, String)>> {
        let rows = self.client()?.query(
            "SELECT tgname::text, tgenabled::text FROM pg_trigger
             WHERE tgrelid = to_regclass($1) AND NOT tgisinternal
               AND tgname NOT LIKE '\\_cutover\\_%'
             ORDER BY tgname COLLATE \"C\"",
            &[&self.regclass(table)],
        )?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}
