//! The catalogue of the spec's schema: its tables, their columns (declared
//! type, primary-key position, how values are read), unique keys, foreign
//! keys and the rows that break them, generated columns, triggers (with
//! their enabled state), schema text and identity sequences.
//!
//! Table names are exact (quoted): `Orders` is not `orders`. A name that
//! is not a table of the schema gives empty answers, as SQLite's do. A
//! parent table in another schema is named `schema.table`.

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};

use super::scan::Raw;
use super::table_sql::Column;
use super::types::{self, Kind};
use super::{Postgres, quote_ident};
use crate::db::{
    Catalogue, ColumnInfo, ForeignKey, ForeignKeyViolation, Generated, OwnTriggers, SchemaPart,
    SequenceMark, TableSql,
};
use crate::value::{ColumnKind, Row, Value};

impl Postgres {
    /// The table's `regclass` argument: the qualified, quoted name as text.
    fn regclass(&self, table: &str) -> String {
        self.qualified(table)
    }

    /// The table's CHECK constraints, each as `name: clause`.
    fn check_constraints(&self, table: &str) -> Result<Vec<String>> {
        let rows = self.client()?.query(
            "SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint
             WHERE conrelid = to_regclass($1) AND contype = 'c' ORDER BY conname",
            &[&self.regclass(table)],
        )?;
        Ok(rows
            .iter()
            .map(|r| format!("{}: {}", r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect())
    }
}

impl Catalogue for Postgres {
    /// Columns of a table in declaration order; empty when there is no such
    /// table. `decl_type` is PostgreSQL's own (`numeric(10,2)`, `text`).
    fn table_columns(&self, table: &str) -> Result<Vec<ColumnInfo>> {
        let rows = self.client()?.query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod),
                    coalesce(array_position(i.indkey::int2[], a.attnum), -1) + 1,
                    a.attnotnull AND NOT a.atthasdef AND a.attidentity = '' AND a.attgenerated = '',
                    (SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
                     FROM pg_enum e WHERE e.enumtypid = a.atttypid)
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
                kind: kind_of(r.get(1)),
                decl_type: r.get(1),
                // indkey::int2[] starts at index 0, so the position found
                // is already 0-based; +1 above made it 1-based (0: not in it).
                pk: i64::from(r.get::<_, i32>(2)),
                labels: None,
                unread: None,
                // An enum type's labels bound it as an ENUM does.
                limit: match r.get::<_, Option<Vec<String>>>(4) {
                    Some(labels) => crate::db::Limit::Members(labels),
                    None => limit_of(r.get(1)),
                },
                required: r.get(3),
            })
            .collect())
    }

    /// The generated columns of a table, all stored (PostgreSQL 15 has no
    /// virtual ones).
    fn generated_columns(&self, table: &str) -> Result<Vec<Generated>> {
        let rows = self.client()?.query(
            "SELECT attname::text FROM pg_attribute
             WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attgenerated = 's'
             ORDER BY attnum",
            &[&self.regclass(table)],
        )?;
        Ok(rows
            .iter()
            .map(|r| Generated {
                name: r.get(0),
                stored: true,
            })
            .collect())
    }

    /// The tables of the schema (partitioned tables, not their
    /// partitions), not cutover's own unless `own`.
    fn tables(&self, own: bool) -> Result<Vec<String>> {
        let rows = self.client()?.query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition
               AND ($2 OR c.relname NOT LIKE '\\_cutover\\_%')
             ORDER BY c.relname COLLATE \"C\"",
            &[&self.schema, &own],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Whether the table enforces uniqueness of exactly these columns (its
    /// primary key, or a unique index without a predicate or expression,
    /// checked at once rather than deferred): then an insert that collides
    /// can be trusted to fail rather than to add a second row.
    fn key_is_unique(&self, table: &str, key: &[&str]) -> Result<bool> {
        let want: BTreeSet<&str> = key.iter().copied().collect();
        let rows = self.client()?.query(
            "SELECT array_agg(a.attname::text)
             FROM pg_index i
             JOIN pg_attribute a ON a.attrelid = i.indrelid
                AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])
             WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indimmediate
               AND i.indpred IS NULL AND i.indexprs IS NULL
               -- A table's unique index does not cover the rows of the
               -- tables inheriting from it.
               AND NOT EXISTS (SELECT 1 FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent
                               WHERE h.inhparent = i.indrelid AND p.relkind = 'r')
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
    fn foreign_keys(&self, table: &str) -> Result<Vec<ForeignKey>> {
        let rows = self.client()?.query(
            "SELECT c.oid, CASE WHEN pn.nspname = $2 THEN pc.relname::text
                                ELSE pn.nspname || '.' || pc.relname END,
                    a.attname::text, pa.attname::text, c.conname::text, c.condeferrable
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
                Some(last) if last.0 == id => last.1.columns.push((from, Some(to))),
                _ => out.push((
                    id,
                    ForeignKey {
                        name: Some(r.get(4)),
                        parent,
                        columns: vec![(from, Some(to))],
                        deferrable: r.get(5),
                    },
                )),
            }
        }
        Ok(out.into_iter().map(|(_, fk)| fk).collect())
    }

    fn foreign_key_violations(
        &self,
        table: &str,
        key_names: &[&str],
    ) -> Result<Vec<ForeignKeyViolation>> {
        let kinds = self.columns_of(table)?;
        let key_kinds: Vec<Kind> = key_names
            .iter()
            .map(|k| {
                kinds
                    .iter()
                    .find(|c| c.name == *k)
                    .map_or(Kind::Other, |c| c.kind)
            })
            .collect();
        let keys = key_names
            .iter()
            .zip(&key_kinds)
            .map(|(k, kind)| kind.select(&format!("c.{}", quote_ident(k))))
            .collect::<Vec<_>>()
            .join(", ");
        let mut out = Vec::new();
        for ForeignKey {
            parent,
            columns: pairs,
            ..
        } in self.foreign_keys(table)?
        {
            let parent_q = match parent.split_once('.') {
                Some((s, t)) if !self.has_table(&parent)? => {
                    format!("{}.{}", quote_ident(s), quote_ident(t))
                }
                _ => self.qualified(&parent),
            };
            let present = pairs
                .iter()
                .map(|(c, _)| format!("c.{} IS NOT NULL", quote_ident(c)))
                .collect::<Vec<_>>()
                .join(" AND ");
            let joined = pairs
                .iter()
                .map(|(c, p)| {
                    format!(
                        "p.{} = c.{}",
                        quote_ident(p.as_deref().unwrap_or(c)),
                        quote_ident(c)
                    )
                })
                .collect::<Vec<_>>()
                .join(" AND ");
            let select = if key_names.is_empty() { "1" } else { &keys };
            let text = format!(
                "SELECT {select} FROM {} c WHERE {present} AND NOT EXISTS (SELECT 1 FROM {parent_q} p WHERE {joined})",
                self.qualified(table)
            );
            let rows = self
                .client()?
                .query(text.as_str(), &[])
                .with_context(|| format!("checking the foreign keys of '{table}'"))?;
            let mut scratch = String::new();
            for r in &rows {
                let key = if key_names.is_empty() {
                    None
                } else {
                    let mut row: Row = Vec::with_capacity(key_names.len());
                    for (i, &kind) in key_kinds.iter().enumerate() {
                        let Raw(raw) = r.try_get(i)?;
                        row.push(match raw {
                            None => Value::Null,
                            Some(b) => types::decode(kind, b, &mut scratch, |c| c.to_value())?,
                        });
                    }
                    Some(row)
                };
                out.push(ForeignKeyViolation {
                    child: table.to_string(),
                    key,
                    parent: parent.clone(),
                    constraint: None,
                });
            }
        }
        Ok(out)
    }

    /// Every table, index, constraint and trigger of the given tables and
    /// of cutover's own, as `(kind name, definition)` in that order. A
    /// table's definition lists its columns (type, NOT NULL, default,
    /// identity, generation); a trigger's ends with its enabled state.
    fn schema_of(&self, tables: &[&str]) -> Result<Vec<SchemaPart>> {
        let names: Vec<String> = tables.iter().map(|t| t.to_string()).collect();
        let rows = self.client()?.query(
            "WITH RECURSIVE named AS (
               SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
                 AND (c.relname = ANY ($2) OR c.relname LIKE '\\_cutover\\_%')
             ),
             -- Tables inheriting from a spec table hold its rows and carry
             -- the journal's and the fence's triggers like it.
             t(oid, relname) AS (
               SELECT oid, relname::text FROM named
               UNION
               SELECT c.oid, CASE WHEN n.nspname = $1 THEN c.relname::text
                                  ELSE n.nspname || '.' || c.relname END
               FROM t JOIN pg_inherits i ON i.inhparent = t.oid
               JOIN pg_class p ON p.oid = i.inhparent AND p.relkind = 'r'
               JOIN pg_class c ON c.oid = i.inhrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
             )
             SELECT name, def FROM (
             SELECT 'table ' || t.relname::text AS name,
                    string_agg(quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod)
                      || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
                      || CASE WHEN a.attidentity <> '' THEN ' IDENTITY ' || a.attidentity::text ELSE '' END
                      || CASE WHEN a.attgenerated <> '' THEN ' GENERATED ' ELSE '' END
                      || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), ''),
                      ', ' ORDER BY a.attnum) AS def
             FROM t JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
             LEFT JOIN pg_attrdef d ON d.adrelid = t.oid AND d.adnum = a.attnum
             GROUP BY t.relname
             UNION ALL
             SELECT 'index ' || i.relname::text, pg_get_indexdef(x.indexrelid)
             FROM t JOIN pg_index x ON x.indrelid = t.oid JOIN pg_class i ON i.oid = x.indexrelid
             UNION ALL
             SELECT 'constraint ' || t.relname::text || '.' || k.conname::text, pg_get_constraintdef(k.oid)
             FROM t JOIN pg_constraint k ON k.conrelid = t.oid
             UNION ALL
             SELECT 'trigger ' || g.tgname::text, pg_get_triggerdef(g.oid) || ' ENABLED ' || g.tgenabled::text
             FROM t JOIN pg_trigger g ON g.tgrelid = t.oid AND NOT g.tgisinternal
             ) parts ORDER BY name COLLATE \"C\"",
            &[&self.schema, &names],
        )?;
        Ok(rows
            .iter()
            .map(|r| SchemaPart {
                name: r.get(0),
                definition: r.get(1),
            })
            .collect())
    }

    /// Sets each sequence that feeds a column of the table — owned by it
    /// (serial), its identity, or called by its default (`DEFAULT
    /// nextval('…')`, found through the default's dependency on the
    /// sequence, whoever owns it) — so that its next value is past the
    /// largest integer in every such column, and the table's own sequence
    /// also past `to`. A sequence already past, or one that counts down,
    /// is left alone.
    fn raise_sequence(&self, table: &str, to: i64) -> Result<()> {
        let feeding = self.feeding_sequences(table)?;
        let mut want: Vec<(String, i64)> = Vec::new();
        for (i, (column, seq, integer)) in feeding.iter().enumerate() {
            let held: Option<i64> = if *integer {
                self.client()?
                    .query_one(
                        &format!(
                            "SELECT ceil(max({})::numeric)::int8 FROM {}",
                            quote_ident(column),
                            self.qualified(table)
                        ),
                        &[],
                    )
                    .with_context(|| {
                        format!(
                            "reading the largest '{column}' of '{table}' in {}",
                            self.shown
                        )
                    })?
                    .get(0)
            } else {
                None
            };
            let floor = held.unwrap_or(0).max(if i == 0 { to } else { 0 });
            match want.iter_mut().find(|(s, _)| s == seq) {
                Some((_, w)) => *w = (*w).max(floor),
                None => want.push((seq.clone(), floor)),
            }
        }
        for (seq, floor) in want {
            if floor < 1 {
                continue;
            }
            let mark = self.mark_of(&seq)?;
            let row = self.client()?.query_one(
                "SELECT seqincrement FROM pg_sequence WHERE seqrelid = to_regclass($1)",
                &[&seq],
            )?;
            let step: i64 = row.get(0);
            let next = match mark.is_called {
                true => mark.last_value.saturating_add(step),
                false => mark.last_value,
            };
            if step < 0 || next > floor {
                continue;
            }
            self.client()?
                .execute("SELECT setval(to_regclass($1), $2, true)", &[&seq, &floor])
                .with_context(|| {
                    format!(
                        "setting sequence {seq} (feeding '{table}') past {floor} in {}",
                        self.shown
                    )
                })?;
        }
        Ok(())
    }

    /// Each sequence feeding a column of the tables (once per table), the
    /// one feeding a table's first such column marked its own.
    fn sequence_marks(&self, tables: &[&str]) -> Result<Vec<SequenceMark>> {
        let mut out: Vec<SequenceMark> = Vec::new();
        for t in tables {
            for (i, (_, seq, _)) in self.feeding_sequences(t)?.into_iter().enumerate() {
                if out.iter().any(|m| m.name == seq && m.table == *t) {
                    continue;
                }
                let mut mark = self.mark_of(&seq)?;
                mark.table = t.to_string();
                mark.own = i == 0;
                out.push(mark);
            }
        }
        Ok(out)
    }

    fn restore_sequences(&self, marks: &[SequenceMark]) -> Result<Vec<String>> {
        let mut moved = Vec::new();
        for m in marks {
            let now = self.mark_of(&m.name)?;
            if (now.last_value, now.is_called) == (m.last_value, m.is_called) {
                continue;
            }
            self.client()?
                .execute(
                    "SELECT setval(to_regclass($1), $2, $3)",
                    &[&m.name, &m.last_value, &m.is_called],
                )
                .with_context(|| format!("putting sequence {} back in {}", m.name, self.shown))?;
            moved.push(m.name.clone());
        }
        Ok(moved)
    }

    /// Each written column's value as the binary write would encode it
    /// (type, range, scale), then what the server does on assignment:
    /// NOT NULL, a `varchar(n)` or `char(n)` length (and `char(n)`'s
    /// padding), a `numeric(p,s)` precision, the fraction digits a
    /// `timestamp(p)` or `time(p)` keeps. With `server`, also whether text
    /// of a type cutover reads as text (uuid, json, an array) casts to the
    /// column's type, one round trip per such value.
    fn holding<'a>(&'a self, sql: &TableSql, server: bool) -> Result<crate::db::Holding<'a>> {
        let plan = self.plan(sql)?;
        let modifiers: Vec<Modifier> = plan.types.iter().map(|t| Modifier::of(t)).collect();
        let written = plan.written();
        let checks = self.check_constraints(&plan.table)?;
        let check = move |row: &[Value]| -> Result<Option<crate::db::Unfit>> {
            let mut raw = Vec::new();
            for &i in &written {
                let (name, v) = (&plan.names[i], &row[i]);
                let unfit = |why: String| {
                    Some(crate::db::Unfit {
                        column: name.clone(),
                        why,
                    })
                };
                if matches!(v, Value::Null) {
                    if plan.not_null[i] {
                        return Ok(unfit(format!(
                            "NULL cannot be written to column '{name}' of table '{}', which is NOT NULL",
                            plan.table
                        )));
                    }
                    continue;
                }
                raw.clear();
                if let Err(e) = types::encode(plan.kinds[i], v.as_cell(), &mut raw) {
                    return Ok(unfit(format!(
                        "column '{name}' ({}) of table '{}' cannot hold it: {e:#}",
                        plan.types[i], plan.table
                    )));
                }
                let why = match (plan.kinds[i], v) {
                    (Kind::Other, Value::Text(t)) if server => {
                        self.cast_refused(&plan.types[i], t)?
                    }
                    _ => modifiers[i].refuses(v),
                };
                if let Some(why) = why {
                    return Ok(unfit(format!(
                        "column '{name}' ({}) of table '{}' cannot hold it: {why}",
                        plan.types[i], plan.table
                    )));
                }
            }
            Ok(None)
        };
        Ok(crate::db::Holding::new(check, checks))
    }

    fn own_triggers(&self, table: &str) -> Result<OwnTriggers> {
        Ok(OwnTriggers {
            journal: self.journal_triggers(table)?,
            fence: self.fence_triggers(table)?,
        })
    }

    /// Adds the column, of the PostgreSQL type closest to the source's
    /// kind that holds every value of it ([`Postgres::evolved_type`]).
    fn add_column(&self, table: &str, from: &ColumnInfo) -> Result<()> {
        let column = &from.name;
        let ty = self.evolved_type(column, &from.kind)?;
        self.client()?
            .batch_execute(&format!(
                "ALTER TABLE {} ADD COLUMN {} {ty}",
                self.qualified(table),
                quote_ident(column)
            ))
            .with_context(|| format!("adding column '{column}' to '{table}' in {}", self.shown))
    }
}

impl Postgres {
    /// The sequences feeding the table's columns, in column order: `(column,
    /// sequence as a qualified quoted name, whether the column holds
    /// integers)`. A sequence feeds a column it is owned by (serial, `OWNED
    /// BY`), the identity it generates, or a column whose default depends
    /// on it (`DEFAULT nextval('…')`, owned or not): each found through
    /// `pg_depend`, never by reading the default's text.
    fn feeding_sequences(&self, table: &str) -> Result<Vec<(String, String, bool)>> {
        let rows = self
            .client()?
            .query(
                "WITH fed(attnum, seq) AS (
                   SELECT d.refobjsubid, d.objid
                   FROM pg_depend d
                   WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
                     AND d.refobjid = to_regclass($1) AND d.refobjsubid > 0 AND d.deptype IN ('a', 'i')
                   UNION
                   SELECT ad.adnum, d.refobjid
                   FROM pg_attrdef ad
                   JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid
                                   AND d.refclassid = 'pg_class'::regclass
                   WHERE ad.adrelid = to_regclass($1)
                 )
                 SELECT a.attname::text, format('%I.%I', n.nspname, s.relname),
                        coalesce(nullif(t.typbasetype, 0), t.oid)
                          IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'numeric'::regtype)
                 FROM fed
                 JOIN pg_class s ON s.oid = fed.seq AND s.relkind = 'S'
                 JOIN pg_namespace n ON n.oid = s.relnamespace
                 JOIN pg_attribute a ON a.attrelid = to_regclass($1) AND a.attnum = fed.attnum
                                    AND NOT a.attisdropped
                 JOIN pg_type t ON t.oid = a.atttypid
                 ORDER BY a.attnum, 2",
                &[&self.regclass(table)],
            )
            .with_context(|| {
                format!("finding the sequences of '{table}' in {}", self.shown)
            })?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    /// Where a sequence stands (read from the sequence itself, which a
    /// rollback does not change).
    fn mark_of(&self, seq: &str) -> Result<SequenceMark> {
        let row = self
            .client()?
            .query_one(&format!("SELECT last_value, is_called FROM {seq}"), &[])
            .with_context(|| format!("reading sequence {seq} in {}", self.shown))?;
        Ok(SequenceMark {
            name: seq.to_string(),
            last_value: row.get(0),
            is_called: row.get(1),
            table: String::new(),
            own: false,
            transactional: false,
        })
    }

    /// How each column of a table is read, in declaration order; domains
    /// resolved to their base type.
    pub fn columns_of(&self, table: &str) -> Result<Vec<Column>> {
        let rows = self
            .client()?
            .query(
                "WITH RECURSIVE base(num, name, nn, oid, typtype, typmod, declared, generated) AS (
                   SELECT a.attnum, a.attname::text, a.attnotnull, t.oid, t.typtype::text, a.atttypmod,
                          format_type(a.atttypid, a.atttypmod), a.attgenerated <> ''
                   FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                   WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
                   UNION ALL
                   SELECT b.num, b.name, b.nn OR d.typnotnull, bt.oid, bt.typtype::text,
                          CASE WHEN b.typmod = -1 THEN d.typtypmod ELSE b.typmod END, b.declared,
                          b.generated
                   FROM base b JOIN pg_type d ON d.oid = b.oid JOIN pg_type bt ON bt.oid = d.typbasetype
                   WHERE b.typtype = 'd'
                 )
                 SELECT name, oid, typtype, typmod, nn, declared, generated FROM base
                 WHERE typtype <> 'd' ORDER BY num",
                &[&self.regclass(table)],
            )
            .with_context(|| format!("reading the columns of '{table}' in {}", self.shown))?;
        Ok(rows
            .iter()
            .map(|r| Column {
                name: r.get(0),
                kind: Kind::of(r.get(1), r.get(2), r.get(3)),
                not_null: r.get(4),
                type_name: r.get(5),
                generated: r.get(6),
            })
            .collect())
    }

    /// Whether the schema has a table (or view) of this name.
    pub fn has_table(&self, table: &str) -> Result<bool> {
        let row = self.client()?.query_one(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&self.regclass(table)],
        )?;
        Ok(row.get(0))
    }

    /// Whether a table declares foreign keys.
    pub fn has_foreign_keys(&self, table: &str) -> Result<bool> {
        let row = self.client()?.query_one(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'f'",
            &[&self.regclass(table)],
        )?;
        Ok(row.get::<_, i64>(0) > 0)
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

/// The kind of a column of PostgreSQL type `ty` (as `format_type` spells
/// it); a type that is not one of the kinds (a domain, an array, `uuid`,
/// `json`) is PostgreSQL's own.
pub(super) fn kind_of(ty: &str) -> ColumnKind {
    let (name, args) = match ty.split_once('(') {
        Some((n, rest)) => (
            n.trim(),
            rest.split(')')
                .next()
                .unwrap_or("")
                .split(',')
                .filter_map(|a| a.trim().parse::<u32>().ok())
                .collect::<Vec<_>>(),
        ),
        None => (ty.trim(), Vec::new()),
    };
    match name {
        "smallint" | "integer" | "bigint" => ColumnKind::Integer,
        "real" | "double precision" => ColumnKind::Real,
        "numeric" => ColumnKind::Decimal {
            precision: args.first().copied(),
            scale: args.get(1).copied(),
        },
        "money" => ColumnKind::Money,
        "text" => ColumnKind::Text {
            max_len: None,
            fixed: false,
        },
        "character varying" => ColumnKind::Text {
            max_len: args.first().copied(),
            fixed: false,
        },
        "character" => ColumnKind::Text {
            max_len: args.first().copied(),
            fixed: true,
        },
        "bytea" => ColumnKind::Blob,
        "boolean" => ColumnKind::Boolean,
        "date" => ColumnKind::Date,
        "timestamp without time zone" => ColumnKind::Timestamp { zone: false },
        "timestamp with time zone" => ColumnKind::Timestamp { zone: true },
        // With a precision, `format_type` spells the zone after it:
        // `timestamp(3) with time zone`.
        "timestamp" => match ty.rsplit_once(')').map(|(_, zone)| zone.trim()) {
            Some("without time zone") => ColumnKind::Timestamp { zone: false },
            Some("with time zone") => ColumnKind::Timestamp { zone: true },
            _ => ColumnKind::Other {
                engine: "PostgreSQL",
                name: ty.to_string(),
            },
        },
        _ => ColumnKind::Other {
            engine: "PostgreSQL",
            name: ty.to_string(),
        },
    }
}

impl Postgres {
    /// Why the server refuses `text` cast to `type_name` (`malformed array
    /// literal: …`), asked in a block that catches the error in a
    /// subtransaction of its own, so an open transaction goes on and
    /// nothing is written; `None` when it casts.
    fn cast_refused(&self, type_name: &str, text: &str) -> Result<Option<String>> {
        let literal = super::quote_literal(text)?;
        // A dollar-quote tag the value does not hold.
        let tag = (0..)
            .map(|n| format!("$cutover{n}$"))
            .find(|t| !text.contains(t.as_str()))
            .unwrap_or_default();
        let mut c = self.client()?;
        c.batch_execute(&format!(
            "SELECT set_config('cutover.cast_refused', '', false);
             DO {tag} BEGIN PERFORM CAST({literal} AS {type_name});
             EXCEPTION WHEN others THEN
                 PERFORM set_config('cutover.cast_refused', SQLERRM, false);
             END {tag}"
        ))?;
        let why: String = c
            .query_one("SELECT current_setting('cutover.cast_refused')", &[])?
            .get(0);
        Ok((!why.is_empty()).then_some(why))
    }

    /// The PostgreSQL type of a column `sync --evolve` adds for a source
    /// column of kind `kind`: a type of PostgreSQL's own as it is, every
    /// other kind the PostgreSQL type that holds every value of it (an
    /// integer of 64 bits, a real of double precision, text for what
    /// admits anything). A column without a declared type, which holds any
    /// value, has no PostgreSQL counterpart and is refused.
    pub fn evolved_type(&self, column: &str, kind: &ColumnKind) -> Result<String> {
        Ok(match kind {
            ColumnKind::Integer => "bigint".into(),
            ColumnKind::Real => "double precision".into(),
            ColumnKind::Decimal {
                precision: Some(p),
                scale,
            } => format!("numeric({p},{})", scale.unwrap_or(0)),
            ColumnKind::Decimal { .. } => "numeric".into(),
            ColumnKind::Money => "money".into(),
            ColumnKind::Text {
                max_len: Some(n),
                fixed: true,
            } => format!("character({n})"),
            ColumnKind::Text {
                max_len: Some(n),
                fixed: false,
            } => format!("character varying({n})"),
            ColumnKind::Text { .. } => "text".into(),
            ColumnKind::Blob => "bytea".into(),
            ColumnKind::Boolean => "boolean".into(),
            ColumnKind::Date => "date".into(),
            ColumnKind::Timestamp { zone: false } => "timestamp".into(),
            ColumnKind::Timestamp { zone: true } => "timestamptz".into(),
            ColumnKind::Other {
                engine: "PostgreSQL",
                name,
            } => name.clone(),
            // Carried as the other engine's text for it, or whatever it was.
            ColumnKind::Other { .. } | ColumnKind::Loose(_) => "text".into(),
            ColumnKind::Any => bail!(
                "source column '{column}' has no declared type; a PostgreSQL column needs a type: add the column to the target yourself and map it in the spec"
            ),
        })
    }
}

/// The bound of a type as `format_type` names it, for `check`'s hazards.
fn limit_of(type_name: &str) -> crate::db::Limit {
    use crate::db::Limit;
    let int = |bits: u32| Limit::Integer {
        min: -(1i128 << (bits - 1)),
        max: (1i128 << (bits - 1)) - 1,
    };
    match type_name {
        "smallint" => return int(16),
        "integer" => return int(32),
        "bigint" => return int(64),
        // Read as 0 and 1.
        "boolean" => return Limit::Integer { min: 0, max: 1 },
        _ => {}
    }
    let time = |fraction| Limit::Time {
        fraction,
        years: None,
    };
    if type_name.starts_with("timestamp ") || type_name.starts_with("time ") {
        return time(6);
    }
    match Modifier::of(type_name) {
        Modifier::Chars { length, padded } => Limit::Chars {
            length: length as u32,
            padded,
            cut: false,
        },
        Modifier::Numeric { precision, scale } => Limit::Digits {
            precision,
            scale,
            unsigned: false,
        },
        Modifier::Fraction(p) => time(p as u32),
        Modifier::None => Limit::None,
    }
}

/// What a column's type modifier makes the server do to a value written
/// into it, read from its type's name (`format_type`) once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Modifier {
    None,
    /// `varchar(n)`; `char(n)` pads a shorter text with spaces.
    Chars {
        length: usize,
        padded: bool,
    },
    /// `numeric(p,s)`: at most `p - s` digits before the point.
    Numeric {
        precision: u32,
        scale: u32,
    },
    /// `timestamp(p)`, `timestamptz(p)`, `time(p)`: `p` fraction digits
    /// kept, the rest rounded away.
    Fraction(usize),
}

impl Modifier {
    fn of(type_name: &str) -> Modifier {
        let Some((base, rest)) = type_name.split_once('(') else {
            return Modifier::None;
        };
        let Some((args, _)) = rest.split_once(')') else {
            return Modifier::None;
        };
        let args: Option<Vec<u32>> = args.split(',').map(|a| a.trim().parse().ok()).collect();
        match (base.trim(), args.as_deref()) {
            ("character varying", Some([n])) => Modifier::Chars {
                length: *n as usize,
                padded: false,
            },
            ("character", Some([n])) => Modifier::Chars {
                length: *n as usize,
                padded: true,
            },
            ("numeric", Some([p, s])) => Modifier::Numeric {
                precision: *p,
                scale: *s,
            },
            ("timestamp" | "time", Some([p])) => Modifier::Fraction(*p as usize),
            _ => Modifier::None,
        }
    }

    /// What the server would do to `v` instead of storing it as it is.
    fn refuses(self, v: &Value) -> Option<String> {
        match (self, v) {
            (Modifier::Chars { length, padded }, Value::Text(t)) => {
                let whole = t.chars().count();
                let len = t.trim_end_matches(' ').chars().count();
                // Trailing spaces past the length are cut silently by the
                // server: the stored text would not be the one written.
                if whole > length {
                    let cut = if len <= length {
                        " (trailing spaces the server would cut)"
                    } else {
                        ""
                    };
                    return Some(format!("{whole} characters{cut}, longer than {length}"));
                }
                (padded && whole < length).then(|| {
                    format!(
                        "{whole} characters, shorter than {length}: the server would pad it with spaces"
                    )
                })
            }
            (
                Modifier::Numeric { precision, scale },
                Value::Integer(_) | Value::Text(_) | Value::Real(_),
            ) => {
                let text = match v {
                    Value::Text(t) => t.trim().to_string(),
                    other => other.to_string(),
                };
                let digits = text
                    .trim_start_matches(['-', '+'])
                    .split('.')
                    .next()
                    .unwrap_or("")
                    .trim_start_matches('0')
                    .len();
                (digits as u32 > precision.saturating_sub(scale)).then(|| {
                    format!(
                        "{digits} digits before the point, more than numeric({precision},{scale}) holds"
                    )
                })
            }
            (Modifier::Fraction(kept), Value::Text(t)) => {
                let digits = fraction_digits(t);
                (digits > kept).then(|| {
                    format!(
                        "{digits} digits of a second after the point where the column keeps {kept}: the server would round it"
                    )
                })
            }
            _ => None,
        }
    }
}

/// The significant digits of a time's fraction of a second
/// (`2025-12-31 23:59:59.70+05:30` has 1): the digits after the point that
/// follows the seconds (`:ss.`), trailing zeros left out.
fn fraction_digits(t: &str) -> usize {
    let b = t.as_bytes();
    let Some(point) = (3..b.len()).find(|&i| {
        b[i] == b'.' && b[i - 3] == b':' && b[i - 2].is_ascii_digit() && b[i - 1].is_ascii_digit()
    }) else {
        return 0;
    };
    let digits = b[point + 1..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>();
    digits
        .iter()
        .rposition(|&&c| c != b'0')
        .map_or(0, |p| p + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_modifier_refuses_what_the_server_would_change() {
        let t = |s: &str| Value::Text(s.into());
        let ts0 = Modifier::of("timestamp(0) without time zone");
        assert_eq!(ts0, Modifier::Fraction(0));
        assert!(ts0.refuses(&t("2025-12-31 23:59:59.7")).is_some());
        assert!(ts0.refuses(&t("2025-12-31 23:59:59.000")).is_none());
        assert!(ts0.refuses(&t("2025-12-31 23:59:59+05:30")).is_none());
        let tz3 = Modifier::of("timestamp(3) with time zone");
        assert!(tz3.refuses(&t("2025-12-31 23:59:59.123+05:30")).is_none());
        assert!(tz3.refuses(&t("2025-12-31 23:59:59.1234+00")).is_some());
        assert_eq!(Modifier::of("timestamp without time zone"), Modifier::None);
        let v5 = Modifier::of("character varying(5)");
        assert!(v5.refuses(&t("abc  ")).is_none());
        assert!(
            v5.refuses(&t("abc   "))
                .unwrap()
                .contains("trailing spaces")
        );
        let c5 = Modifier::of("character(5)");
        assert!(c5.refuses(&t("abc  ")).is_none());
        assert!(c5.refuses(&t("abc")).unwrap().contains("pad"));
        let n = Modifier::of("numeric(19,4)");
        assert!(n.refuses(&t("123456789012345.1234")).is_none());
        assert!(n.refuses(&t("1234567890123456.5")).is_some());
        assert!(n.refuses(&Value::Integer(-42)).is_none());
    }

    #[test]
    fn a_timestamp_with_a_precision_is_a_timestamp() {
        for (ty, kind) in [
            ("date", ColumnKind::Date),
            (
                "timestamp without time zone",
                ColumnKind::Timestamp { zone: false },
            ),
            (
                "timestamp(3) without time zone",
                ColumnKind::Timestamp { zone: false },
            ),
            (
                "timestamp(0) with time zone",
                ColumnKind::Timestamp { zone: true },
            ),
        ] {
            assert_eq!(kind_of(ty), kind, "{ty}");
        }
        assert!(matches!(
            kind_of("time(3) without time zone"),
            ColumnKind::Other { .. }
        ));
    }
}
