//! Change capture, installing side: the journal's triggers and image
//! tables, its identity, and the proof that a write is journaled.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result, bail};
use rusqlite::{OptionalExtension, params};

use super::*;
use crate::db::transaction::Savepoint;

impl Capture for Sqlite {
    /// The image id for `name` with these columns: the existing one when the
    /// columns are the same, else a new one with its image tables. The
    /// journal's list of entries comes first (and an earlier cutover's
    /// journal is moved onto it).
    fn image_for(&self, name: &str, table: &str, columns: &[&str]) -> Result<i64> {
        self.ensure_entries()?;
        let list = serde_json::to_string(columns)?;
        let found: Option<i64> = self
            .conn
            .query_row(
                "SELECT img FROM _cutover_journal_tables WHERE tbl = ?1 AND target_table = ?2 AND columns = ?3",
                params![name, table, list],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(img) = found {
            return Ok(img);
        }
        self.conn.execute(
            "INSERT INTO _cutover_journal_tables (tbl, target_table, columns) VALUES (?1, ?2, ?3)",
            params![name, table, list],
        )?;
        let img = self.conn.last_insert_rowid();
        // No declared types on the image columns: no affinity, values kept
        // as they are. `seq` is an INTEGER PRIMARY KEY, never the implicit
        // rowid, which VACUUM may renumber.
        for (p, (t, range)) in journal_parts(img, columns.len()).into_iter().enumerate() {
            let sql = format!(
                "CREATE TABLE {} (seq INTEGER PRIMARY KEY, {}{}, {})",
                quote_ident(&t),
                if p == 0 { "op, " } else { "" },
                prefixed("o", range.clone()),
                prefixed("n", range)
            );
            self.own_ddl(&sql, |s| s.created_table(&t))?;
        }
        let pending = pending_table(img);
        let sql = format!(
            "CREATE TABLE {} ({})",
            quote_ident(&pending),
            col_list(1..columns.len() + 1)
        );
        self.own_ddl(&sql, |s| s.created_table(&pending))?;
        Ok(img)
    }

    /// Installs (or replaces, when they differ from what the spec needs
    /// now) the journal triggers on one table. Returns how many triggers were
    /// created or replaced.
    fn install_journal(&self, t: &Journaled<'_>) -> Result<usize> {
        let (name, table, columns, key_len) = (t.name, t.table, t.columns, t.key_len);
        let img = self.image_for(name, table, columns)?;
        let want = self.journal_trigger_sql(img, table, columns, key_len)?;
        let have = self.triggers_on(table)?;
        let mut differ = 0;
        for (trigger, sql) in &want {
            if have.get(trigger) != Some(sql) {
                differ += 1;
            }
        }
        if differ == 0 && self.newer_trigger(table)?.is_none() {
            return Ok(0);
        }
        // All of them again, in order: SQLite fires the newest trigger of an
        // event first, and the order among them (and after the
        // application's own triggers) is part of what they journal.
        self.remove_journal(table)?;
        for (trigger, sql) in &want {
            self.own_ddl(sql, |s| s.created_trigger(trigger, table, sql))
                .with_context(|| format!("installing journal triggers on '{table}'"))?;
        }
        Ok(differ.max(1))
    }

    /// Writes through each table's journal triggers inside one savepoint
    /// that is always rolled back, with `trusted_schema=OFF`: the first row (by key)
    /// is deleted, inserted again and updated to itself, and the journal's
    /// first three new entries must be exactly those, with that row as
    /// their images (an application trigger may journal more after them).
    /// An empty or fenced table is not written; the statements that fire
    /// the triggers are compiled instead, which is where SQLite refuses a
    /// trigger it cannot run.
    ///
    /// Every table's proof in one savepoint: SQLite reads the whole schema
    /// again after a rollback to a savepoint in a transaction that changed
    /// it, so a savepoint per table would make the install's time grow
    /// with the square of the number of tables.
    fn prove_journals(&self, tables: &[Journaled<'_>]) -> Result<(), Unproven> {
        let failed = |table| move |error| Unproven { table, error };
        let proof = Savepoint::open(self).map_err(failed(0))?;
        let r = self
            .conn
            .pragma_update(None, "trusted_schema", false)
            .map_err(|e| failed(0)(e.into()))
            .and_then(|()| {
                for (i, t) in tables.iter().enumerate() {
                    self.probe_writes_journal(t.name, t.table, t.columns, t.key_len)
                        .map_err(failed(i))?;
                }
                Ok(())
            });
        let _ = self.conn.pragma_update(None, "trusted_schema", true);
        proof.rollback();
        r
    }

    /// The journal triggers of one table that are missing or differ from the
    /// ones the spec needs now (`columns`, `key_len`): their names.
    fn stale_journal_triggers(&self, t: &Journaled<'_>) -> Result<Vec<String>> {
        let (name, table, columns, key_len) = (t.name, t.table, t.columns, t.key_len);
        let list = serde_json::to_string(columns)?;
        let img: Option<i64> = if self.has_table("_cutover_journal_tables")? {
            self.conn
                .query_row(
                    "SELECT img FROM _cutover_journal_tables WHERE tbl = ?1 AND target_table = ?2 AND columns = ?3",
                    params![name, table, list],
                    |r| r.get(0),
                )
                .optional()?
        } else {
            None
        };
        let Some(img) = img else {
            return Ok(journal_trigger_names(table)
                .into_iter()
                .filter(|n| self.trigger_sql(n).ok().flatten().is_some())
                .chain(std::iter::once(format!(
                    "(no journal image for columns {list})"
                )))
                .collect());
        };
        let mut stale = Vec::new();
        let have = self.triggers_on(table)?;
        for (trigger, sql) in self.journal_trigger_sql(img, table, columns, key_len)? {
            if have.get(&trigger) != Some(&sql) {
                stale.push(trigger);
            }
        }
        if let Some(app) = self.newer_trigger(table)? {
            stale.push(format!(
                "application trigger {app} was created after them and fires first"
            ));
        }
        Ok(stale)
    }

    fn remove_journal(&self, table: &str) -> Result<()> {
        for n in journal_trigger_names(table) {
            self.own_ddl(
                &format!("DROP TRIGGER IF EXISTS {}", quote_ident(&n)),
                |s| s.dropped_trigger(&n),
            )?;
        }
        Ok(())
    }

    /// The journal's image tables (before- and after-images) and its list
    /// of entries, which the fence guards like the journal itself.
    fn journal_image_tables(&self) -> Result<Vec<String>> {
        let mut out = self.image_tables()?;
        if self.has_entry_list()? {
            out.push(ENTRIES.to_string());
        }
        Ok(out)
    }
}

impl Sqlite {
    /// Whether the journal was installed: the view `_cutover_journal` over
    /// its tables exists. A table of that name is an older cutover's.
    pub(super) fn has_journal(&self) -> Result<bool> {
        let kind = self.with_schema(|s| s.kind_of("_cutover_journal").map(str::to_string))?;
        match kind.as_deref() {
            None => Ok(false),
            Some("view") => Ok(true),
            Some(_) => bail!(
                "{}: _cutover_journal was written by an older cutover (JSON images); finish that rollback with the version that started it, or remove the journal and install it again",
                self.location
            ),
        }
    }

    /// How many of a table's journal triggers exist.
    pub(super) fn journal_triggers(&self, table: &str) -> Result<usize> {
        self.count_triggers(&journal_trigger_names(table))
    }

    /// The journal's image tables (before- and after-images), in image
    /// order.
    pub(super) fn image_tables(&self) -> Result<Vec<String>> {
        Ok(self
            .journal_tables()?
            .into_iter()
            .flat_map(|t| {
                journal_parts(t.img, t.columns.len())
                    .into_iter()
                    .map(|p| p.0)
            })
            .collect())
    }

    /// The column sets the table holds unique: its primary key (or rowid
    /// alias) and every UNIQUE index that is neither partial nor on an
    /// expression. A REPLACE deletes the rows a new row collides with on any
    /// of them.
    pub(super) fn unique_sets(&self, table: &str) -> Result<Vec<Vec<String>>> {
        let mut sets: Vec<Vec<String>> = Vec::new();
        let mut pk: Vec<(i64, String)> = self
            .table_columns(table)?
            .into_iter()
            .filter(|c| c.pk > 0)
            .map(|c| (c.pk, c.name))
            .collect();
        pk.sort();
        if !pk.is_empty() {
            sets.push(pk.into_iter().map(|c| c.1).collect());
        }
        let mut st = self.conn.prepare(
            "SELECT il.name, ii.seqno, ii.name FROM pragma_index_list(?1) AS il, pragma_index_info(il.name) AS ii
             WHERE il.\"unique\" AND il.partial = 0 ORDER BY il.name, ii.seqno",
        )?;
        let rows: Vec<(String, i64, Option<String>)> = st
            .query_map([table], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut by_index: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
        for (index, _, col) in rows {
            let entry = by_index.entry(index).or_insert_with(|| Some(Vec::new()));
            match (entry.as_mut(), col) {
                (Some(cols), Some(c)) => cols.push(c),
                // An expression column: the index cannot be matched by columns.
                _ => *entry = None,
            }
        }
        for cols in by_index.into_values().flatten() {
            let set: BTreeSet<&String> = cols.iter().collect();
            if !sets
                .iter()
                .any(|s| s.iter().collect::<BTreeSet<_>>() == set)
            {
                sets.push(cols);
            }
        }
        Ok(sets)
    }

    /// Whether the view `_cutover_journal` reads the list of entries
    /// (`_cutover_journal_entries`). A journal installed by an earlier
    /// cutover has no such list: its view is a UNION ALL of every journal
    /// table, and each trigger took the next seq over all of them.
    pub(super) fn has_entry_list(&self) -> Result<bool> {
        self.with_schema(|s| {
            s.sql("view", "_cutover_journal")
                .is_some_and(|sql| sql.contains(ENTRIES))
        })
    }

    /// The list of entries `_cutover_journal_entries (seq, img, op)` and the
    /// view `_cutover_journal` over it. A journal installed by an earlier
    /// cutover is upgraded in place: its entries are copied into the list,
    /// seq for seq, in the install's transaction, before its triggers are
    /// replaced.
    pub(super) fn ensure_entries(&self) -> Result<()> {
        if self.has_entry_list()? {
            return Ok(());
        }
        self.conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {ENTRIES} (seq INTEGER PRIMARY KEY, img, op)"
        ))?;
        for t in self.journal_tables()? {
            let first = &journal_parts(t.img, t.columns.len())[0].0;
            if !self.has_table(first)? {
                continue;
            }
            self.conn
                .execute(
                    &format!(
                        "INSERT INTO {ENTRIES} (seq, img, op) SELECT seq, ?1, op FROM {} ORDER BY seq",
                        quote_ident(first)
                    ),
                    [t.img],
                )
                .with_context(|| {
                    format!("moving the entries of {first} onto the journal's list of entries")
                })?;
        }
        self.conn.execute_batch(&format!(
            "DROP VIEW IF EXISTS _cutover_journal; CREATE VIEW _cutover_journal AS SELECT seq, img, op FROM {ENTRIES}"
        ))?;
        Ok(())
    }

    /// The journal triggers of one table as `(name, CREATE statement)`, for
    /// image `img` with `columns` (key columns first, `key_len` of them).
    pub(super) fn journal_trigger_sql(
        &self,
        img: i64,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<Vec<(String, String)>> {
        let t = quote_ident(table);
        let q: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
        let cols = (1..=columns.len())
            .map(|i| format!("c{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut sets = self.unique_sets(table)?;
        // The spec's key is unique too (check and load insist on it).
        let key: Vec<String> = columns[..key_len].iter().map(|c| c.to_string()).collect();
        if !sets
            .iter()
            .any(|s| s.iter().collect::<BTreeSet<_>>() == key.iter().collect::<BTreeSet<_>>())
        {
            sets.push(key);
        }
        let conflict = sets
            .iter()
            .map(|s| {
                let parts: Vec<String> = s
                    .iter()
                    .map(|c| format!("{t}.{0} = NEW.{0}", quote_ident(c)))
                    .collect();
                format!("({})", parts.join(" AND "))
            })
            .collect::<Vec<_>>()
            .join(" OR ");
        let unique_cols: BTreeSet<&String> = sets.iter().flatten().collect();
        let moved = unique_cols
            .iter()
            .map(|c| format!("NEW.{0} IS NOT OLD.{0}", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(" OR ");
        let not_old = format!(
            "NOT ({})",
            q[..key_len]
                .iter()
                .map(|c| format!("{t}.{c} IS OLD.{c}"))
                .collect::<Vec<_>>()
                .join(" AND ")
        );
        let old_is = q[..key_len]
            .iter()
            .enumerate()
            .map(|(i, c)| format!("c{} IS OLD.{c}", i + 1))
            .collect::<Vec<_>>()
            .join(" AND ");
        let pending = quote_ident(&pending_table(img));
        // The next seq: one more than the largest of the journal, found at
        // the end of the list of entries' primary key whatever the number
        // of journaled tables.
        let next = format!("coalesce((SELECT max(seq) FROM {ENTRIES}), 0) + 1");
        let parts = journal_parts(img, columns.len());
        // One entry: a row of the journal table, and of each further part,
        // keyed by the seq just written (`last_insert_rowid()`, since `seq`
        // is the rowid of every part).
        let entry = |op: &str, old: Option<&str>, new: Option<&str>| {
            parts
                .iter()
                .enumerate()
                .map(|(p, (t, range))| {
                    let mut names = Vec::new();
                    let mut vals = Vec::new();
                    for (prefix, row) in [("o", old), ("n", new)] {
                        if let Some(row) = row {
                            names.push(prefixed(prefix, range.clone()));
                            vals.push(
                                q[range.start - 1..range.end - 1]
                                    .iter()
                                    .map(|c| format!("{row}.{c}"))
                                    .collect::<Vec<_>>()
                                    .join(", "),
                            );
                        }
                    }
                    let (list, opcol, opval) = if p == 0 {
                        (
                            format!(
                                "    INSERT INTO {ENTRIES} (seq, img, op) VALUES ({next}, {img}, '{op}');\n"
                            ),
                            "op, ",
                            format!("'{op}', "),
                        )
                    } else {
                        (String::new(), "", String::new())
                    };
                    format!(
                        "{list}    INSERT INTO {} (seq, {opcol}{}) VALUES (last_insert_rowid(), {opval}{});",
                        quote_ident(t),
                        names.join(", "),
                        vals.join(", ")
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        // The flush triggers' WHEN decides whether they run at all; inside,
        // the pending rows are journaled one per UNIQUE constraint at most.
        let flush = || {
            let delete_pending = parts
                .iter()
                .enumerate()
                .map(|(p, (t, range))| {
                    let (list, opcol, opval) = if p == 0 {
                        (
                            format!(
                                "    INSERT INTO {ENTRIES} (seq, img, op) SELECT {next}, {img}, 'delete' FROM {pending} ORDER BY rowid LIMIT 1;\n"
                            ),
                            "op, ",
                            "'delete', ",
                        )
                    } else {
                        (String::new(), "", "")
                    };
                    format!(
                        "{list}    INSERT INTO {} (seq, {opcol}{}) SELECT last_insert_rowid(), {opval}{} FROM {pending} ORDER BY rowid LIMIT 1;",
                        quote_ident(t),
                        prefixed("o", range.clone()),
                        col_list(range.clone())
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            (0..sets.len())
                .map(|_| {
                    JOURNAL_FLUSH
                        .replace("{{delete_pending}}", &delete_pending)
                        .replace("{{pending}}", &pending)
                })
                .collect::<String>()
        };
        let [ins, upd, del, pre_ins, pre_upd, flush_ins, flush_upd] =
            journal_trigger_names(table).map(|n| quote_ident(&n));
        let sql = JOURNAL_TRIGGERS
            .replace("{{flush}}", flush().trim_end())
            .replace("{{flush_ins}}", &flush_ins)
            .replace("{{flush_upd}}", &flush_upd)
            .replace("{{pre_ins}}", &pre_ins)
            .replace("{{pre_upd}}", &pre_upd)
            .replace("{{ins}}", &ins)
            .replace("{{upd}}", &upd)
            .replace("{{del}}", &del)
            .replace("{{table}}", &t)
            .replace("{{insert}}", &entry("insert", None, Some("NEW")))
            .replace("{{update}}", &entry("update", Some("OLD"), Some("NEW")))
            .replace("{{delete}}", &entry("delete", Some("OLD"), None))
            .replace("{{pending}}", &pending)
            .replace(
                "{{cols_of_table}}",
                &q.iter()
                    .map(|c| format!("{t}.{c}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
            .replace("{{cols}}", &cols)
            .replace("{{conflict}}", &conflict)
            .replace("{{moved}}", &format!("({moved})"))
            .replace("{{not_old}}", &not_old)
            .replace("{{old_is}}", &old_is);
        // One statement per trigger, as sqlite_schema stores it.
        let names = journal_trigger_names(table);
        let mut out = Vec::new();
        for stmt in sql.split("\nEND;").filter(|s| s.contains("CREATE TRIGGER")) {
            let text = format!(
                "{}\nEND",
                stmt[stmt.find("CREATE TRIGGER").unwrap_or(0)..].trim_end()
            );
            let name = names
                .iter()
                .find(|n| text.starts_with(&format!("CREATE TRIGGER {} ", quote_ident(n))))
                .with_context(|| format!("journal trigger template: unnamed trigger {text}"))?;
            out.push((name.clone(), text));
        }
        Ok(out)
    }

    /// An application trigger on `table` created after the journal's
    /// triggers: it fires before them, so a trigger of its that rewrites its
    /// own row (a "touch updated_at") is journaled out of order.
    pub(super) fn newer_trigger(&self, table: &str) -> Result<Option<String>> {
        self.with_schema(|s| {
            let first = s
                .triggers_on(table)
                .find(|(_, o)| like_prefix(&o.name, "_cutover_journal_"))?
                .0;
            s.triggers_on(table)
                .find(|(id, o)| *id > first && !like_prefix(&o.name, "_cutover_"))
                .map(|(_, o)| o.name.clone())
        })
    }

    /// The triggers on `table` by name, with their stored `CREATE TRIGGER`
    /// statements.
    pub(super) fn triggers_on(&self, table: &str) -> Result<BTreeMap<String, String>> {
        self.with_schema(|s| {
            s.triggers_on(table)
                .map(|(_, o)| (o.name.clone(), o.sql.clone().unwrap_or_default()))
                .collect()
        })
    }

    /// The stored `CREATE TRIGGER` statement of a trigger.
    pub(super) fn trigger_sql(&self, name: &str) -> Result<Option<String>> {
        self.with_schema(|s| s.sql("trigger", name).map(str::to_string))
    }

    pub(super) fn probe_writes_journal(
        &self,
        name: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<()> {
        let t = quote_ident(table);
        let first_col = quote_ident(columns[0]);
        let compile = [
            format!("INSERT INTO {t} DEFAULT VALUES"),
            format!("UPDATE {t} SET {first_col} = {first_col} WHERE 0"),
            format!("DELETE FROM {t} WHERE 0"),
        ];
        for sql in &compile {
            self.conn.prepare(sql)?;
        }
        if self.fence_triggers(table)? > 0 {
            return Ok(());
        }
        let sql = self.table_sql(table, columns, key_len, None);
        let mut first = None;
        self.scan_into(&sql, None, 1, &mut |b| {
            first = Some(b.values(0, b.width()));
            Ok(false)
        })?;
        let Some(row) = first else { return Ok(()) };
        let before: i64 = self.conn.query_row(
            "SELECT coalesce(max(seq), 0) FROM _cutover_journal",
            [],
            |r| r.get(0),
        )?;
        let key = row[..key_len].to_vec();
        self.delete_row(&sql, &key)?;
        self.insert_row(&sql, &row)?;
        self.update_row(&sql, &key, &row)?;
        let whole = |_: i64, _: usize, _: bool| false;
        let shape = RunShape {
            limit: 10,
            bytes: usize::MAX,
            digest: &whole,
        };
        let page = self.journal_run(before, i64::MAX, &shape)?.entries;
        // The application's own triggers may journal more after these
        // three (a "touch updated_at"); the first three must be exactly ours.
        let ours = page.len() >= 3
            && page[0].op == Op::Delete
            && page[0].old.as_ref() == Some(&row)
            && page[1].op == Op::Insert
            && page[1].new.as_ref() == Some(&row)
            && page[2].op == Op::Update
            && page[2].old.as_ref() == Some(&row);
        if !ours {
            bail!(
                "a delete, insert and update of one row of '{name}' journaled {} entries ({}) instead of those three with the row as their images",
                page.len(),
                page.iter()
                    .map(|e| e.op.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(())
    }
}

const JOURNAL_TRIGGERS: &str = include_str!("../../../sql/sqlite/journal_triggers.sql");
const JOURNAL_FLUSH: &str = include_str!("../../../sql/sqlite/journal_flush.sql");

/// Whether `name` starts with `prefix` as SQLite's `LIKE 'prefix%'` with
/// `_` escaped says: ASCII letters in either case.
fn like_prefix(name: &str, prefix: &str) -> bool {
    name.len() >= prefix.len()
        && name.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// The names of the journal's triggers on one table.
/// How many triggers the journal puts on each table.
pub(crate) const JOURNAL_TRIGGERS_PER_TABLE: usize = 7;

pub(super) fn journal_trigger_names(table: &str) -> [String; JOURNAL_TRIGGERS_PER_TABLE] {
    [
        "insert",
        "update",
        "delete",
        "replace",
        "rekey",
        "flush_insert",
        "flush_update",
    ]
    .map(|op| format!("_cutover_journal_{op}_{table}"))
}

/// The journal's list of entries, `(seq, img, op)`: every trigger takes
/// its next seq from it and writes its entry there before the images.
pub(super) const ENTRIES: &str = "_cutover_journal_entries";

/// At most this many columns of each image per journal table: with `seq`
/// and `op`, and SQLite's 2,000-column limit on tables and insert lists, any
/// table width fits in a few parts.
pub(super) const PART: usize = 998;

/// The journal table of image `img`, then its further parts for a table of
/// `width` columns (`_cutover_journal_7`, `_cutover_journal_7_2`, …), each
/// with the 1-based column range it holds.
pub(super) fn journal_parts(img: i64, width: usize) -> Vec<(String, std::ops::Range<usize>)> {
    (0..width.max(1).div_ceil(PART))
        .map(|p| {
            let name = if p == 0 {
                format!("_cutover_journal_{img}")
            } else {
                format!("_cutover_journal_{img}_{}", p + 1)
            };
            (name, p * PART + 1..((p + 1) * PART).min(width) + 1)
        })
        .collect()
}

pub(super) fn pending_table(img: i64) -> String {
    format!("_cutover_pending_{img}")
}

/// `c3, c4, …` for a 1-based column range.
pub(super) fn col_list(range: std::ops::Range<usize>) -> String {
    prefixed("c", range)
}

/// `o3, o4, …`: a prefix and a 1-based column range.
pub(super) fn prefixed(prefix: &str, range: std::ops::Range<usize>) -> String {
    range
        .map(|i| format!("{prefix}{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}
