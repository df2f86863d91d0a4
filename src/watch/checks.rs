//! The checks of one journal entry, as replay would make them on the
//! source after the entries before it, without writing: the reverse
//! transform and the spec's checks ([`crate::apply::source_form`]), what
//! the source column can hold ([`crate::db::Catalogue::holding`]), the
//! source's row under each key the entry touches against the one the
//! target had (the journal's record of the key, else the source as it
//! stands), and the row's parents (in the source, or brought by an
//! earlier entry).

use anyhow::Result;

use super::state::{Finding, Fix, Key, Kind, Record};
use crate::apply::{row_json_of, same_recorded, source_form};
use crate::db::{Db, Holding, TableSql, Unfit};
use crate::journal::Entry;
use crate::spec::{Spec, Table};
use crate::transform::Transform;
use crate::value::{Row, Value, display_key, key_json};

/// A trigger, rule or CHECK constraint of the source that only a write
/// judges: `replay --rehearse` does, watch cannot.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Unjudged {
    /// The source table.
    pub table: String,
    /// What it is, as messages name it.
    pub what: String,
}

/// A foreign key of a spec table in the source, resolved once per pass.
struct Parent {
    /// The child's spec columns that hold the reference.
    columns: Vec<usize>,
    /// The parent table in the source.
    table: String,
    /// The parent as a spec table referenced by its key, with both sides
    /// carried as they are: its keys can then be found in the record.
    spec_table: Option<usize>,
    /// The parent's rows by the referenced columns.
    sql: TableSql,
}

/// The checks of a pass, over the source as it stands.
pub struct Checker<'a> {
    spec: &'a Spec,
    source: &'a Db,
    /// Each spec table's statements on the source.
    sql: Vec<TableSql>,
    parents: Vec<Vec<Parent>>,
    /// What the source can hold, by table and the columns an image did not
    /// record, read on first use.
    holding: std::cell::RefCell<std::collections::HashMap<(usize, Vec<usize>), Holding<'a>>>,
    /// Per spec table, the triggers and rules of the source that act on
    /// replay's writes, as messages name them: there a write is never
    /// merged into the next one, and only a write judges what they do.
    acting: Vec<Vec<String>>,
    /// Per spec table, the source columns an insert must fill that the
    /// spec does not carry: no row new to the source can go back there.
    required: Vec<Vec<String>>,
}

/// Whether whole rows go both ways as they are.
fn copied(t: &Table, cols: &[usize]) -> bool {
    cols.iter()
        .all(|&c| matches!(t.columns[c].transform, Transform::Copy))
}

impl<'a> Checker<'a> {
    pub fn new(spec: &'a Spec, source: &'a Db) -> Result<Checker<'a>> {
        let sql = spec.tables.iter().map(|t| source.source_sql(t)).collect();
        let mut parents = Vec::new();
        for t in &spec.tables {
            parents.push(Self::parents_of(spec, source, t)?);
        }
        let policy = crate::side_effects::Policy::read(spec, source)?;
        let acting = policy.acting(spec);
        let required = spec
            .tables
            .iter()
            .map(|t| crate::hazards::required_columns(t, source, &policy))
            .collect::<Result<_>>()?;
        Ok(Checker {
            spec,
            source,
            sql,
            parents,
            holding: Default::default(),
            acting,
            required,
        })
    }

    /// The source the checks read.
    pub fn source(&self) -> &'a Db {
        self.source
    }

    /// What only a write can judge, per spec table of the source: the
    /// triggers and rules left to fire on replay's writes, and the CHECK
    /// constraints.
    pub fn unjudged(&self) -> Result<Vec<Unjudged>> {
        let mut out = Vec::new();
        for (ti, (t, acting)) in self.spec.tables.iter().zip(&self.acting).enumerate() {
            let table = &t.source_table;
            let checks = self
                .source
                .catalogue()
                .holding(&self.sql[ti], true)?
                .checks()
                .to_vec();
            out.extend(
                acting
                    .iter()
                    .cloned()
                    .chain(checks.into_iter().map(|c| format!("CHECK {c}")))
                    .map(|what| Unjudged {
                        table: table.clone(),
                        what,
                    }),
            );
        }
        Ok(out)
    }

    fn parents_of(spec: &Spec, source: &Db, t: &Table) -> Result<Vec<Parent>> {
        let mut out = Vec::new();
        for fk in source.catalogue().foreign_keys(&t.source_table)? {
            let (parent, pairs) = (fk.parent, fk.columns);
            // A reference in a column the spec does not carry is never
            // written by replay: the source keeps it as it is.
            let Some(columns) = pairs
                .iter()
                .map(|(from, _)| t.columns.iter().position(|c| c.source == *from))
                .collect::<Option<Vec<usize>>>()
            else {
                continue;
            };
            let mut pk: Vec<_> = source
                .catalogue()
                .table_columns(&parent)?
                .into_iter()
                .filter(|c| c.pk > 0)
                .collect();
            pk.sort_by_key(|c| c.pk);
            let referenced: Vec<String> = pairs
                .iter()
                .enumerate()
                .map(|(i, (_, to))| {
                    to.clone()
                        .or_else(|| pk.get(i).map(|c| c.name.clone()))
                        .unwrap_or_default()
                })
                .collect();
            if referenced.iter().any(String::is_empty) {
                continue;
            }
            let spec_table = spec.tables.iter().position(|p| {
                p.source_table == parent
                    && p.key_len == referenced.len()
                    && p.source_names()[..p.key_len]
                        == referenced.iter().map(String::as_str).collect::<Vec<_>>()[..]
                    && copied(p, &(0..p.key_len).collect::<Vec<_>>())
                    && copied(t, &columns)
            });
            let names: Vec<&str> = referenced.iter().map(String::as_str).collect();
            let sql = source.rows().table_sql(&parent, &names, names.len(), None);
            out.push(Parent {
                columns,
                table: parent,
                spec_table,
                sql,
            });
        }
        Ok(out)
    }

    /// The findings of entry `e`. `fresh`: read for the first time, so the
    /// record takes its images; otherwise an open finding checked again,
    /// against the record and the source as they are now.
    pub fn check(&self, record: &Record, e: &Entry, fresh: bool) -> Result<Vec<Finding>> {
        let t = &self.spec.tables[e.table];
        let mut out = Vec::new();
        let finding = |kind,
                       key: &Row,
                       column: Option<String>,
                       value: Option<String>,
                       reason: String,
                       fix| Finding {
            seq: e.seq,
            kind,
            table: t.name.clone(),
            key: key_json(&key[..t.key_len.min(key.len())]),
            column,
            value,
            reason,
            fix,
        };
        for r in [&e.before, &e.after].into_iter().flatten() {
            if let Some(i) = (0..t.key_len).find(|&i| matches!(r[i], Value::Null)) {
                out.push(finding(
                    Kind::NullKey,
                    r,
                    Some(t.columns[i].target.clone()),
                    Some("NULL".into()),
                    "a key column is NULL: the row has no identity, so it cannot be carried".into(),
                    Fix::CannotGoBack(format!(
                        "give the row a key in the target table '{}'",
                        t.target_table
                    )),
                ));
                return Ok(out);
            }
        }
        // A row the application set right by its next write to the record
        // is never written: replay merges the two (docs/journal.md,
        // "Journal order").
        let superseded = !fresh && self.superseded(record, e)?;
        let carried = match &e.after {
            Some(_) if superseded => None,
            Some(a) => match source_form(t, a, &e.unrecorded) {
                Ok(s) => Some(s),
                Err((column, why)) => {
                    let i = t.columns.iter().position(|c| c.target == column);
                    let value = i.map(|i| a[i].to_string());
                    let fix = transform_fix(t, i);
                    out.push(finding(Kind::Transform, a, Some(column), value, why, fix));
                    None
                }
            },
            None => None,
        };
        if let (Some(s), Some(a)) = (&carried, &e.after)
            && let Some(Unfit { column, why }) = self.cannot_hold(e.table, s, &e.unrecorded)?
        {
            let value = t
                .columns
                .iter()
                .position(|c| c.source == column)
                .map(|i| s[i].to_string());
            out.push(finding(
                Kind::SourceColumn,
                a,
                Some(column.clone()),
                value,
                why,
                Fix::Source(format!(
                    "let source column '{column}' of table '{}' hold the value (widen its type, drop the NOT NULL), or correct the row in the target",
                    t.source_table
                )),
            ));
        }
        if let (Some(a), None, Some(column)) = (&e.after, &e.before, self.required[e.table].first())
            && carried.is_some()
        {
            out.push(finding(
                Kind::SourceColumn,
                a,
                Some(column.clone()),
                Some("NULL".into()),
                format!(
                    "source column '{column}' is NOT NULL without a default and the spec does not carry it: replay cannot insert the row"
                ),
                Fix::Source(format!(
                    "give source column '{column}' of table '{}' a default, or let it hold NULL",
                    t.source_table
                )),
            ));
        }
        out.extend(self.keys(record, e, fresh)?);
        if let (Some(s), Some(a)) = (&carried, &e.after) {
            out.extend(self.parents(record, e, s, a)?);
        }
        Ok(out)
    }

    /// Whether a later entry of the record updated, in place, the row `e`
    /// left under its key, where replay merges `e` into that write: `e` an
    /// insert or an update that keeps its key, no trigger or rule of the
    /// source acting on the table. A row later moved away or deleted stays a
    /// finding (replay merges only into an update in place), which errs on
    /// the side of a rollback that goes through.
    fn superseded(&self, record: &Record, e: &Entry) -> Result<bool> {
        let t = &self.spec.tables[e.table];
        let k = t.key_len;
        let Some(after) = &e.after else {
            return Ok(false);
        };
        let moves = e.before.as_ref().is_some_and(|b| b[..k] != after[..k]);
        if moves || self.acting.get(e.table).is_none_or(|a| !a.is_empty()) {
            return Ok(false);
        }
        let text = key_json(&after[..k]).to_string();
        Ok(record.get(t, &text)?.is_some_and(|known| {
            // The row under the key now is the one `e` left, updated in
            // place since (it stood there from `e` on, or from before).
            known.born.is_some_and(|b| b <= e.seq)
                && !same_recorded(known.latest.as_ref(), Some(after), &e.unrecorded)
                && known.latest.is_some()
        }))
    }

    /// The source's row under each key the entry touches, against the one
    /// the target had there before it; the record takes the entry's images.
    fn keys(&self, record: &Record, e: &Entry, fresh: bool) -> Result<Vec<Finding>> {
        let t = &self.spec.tables[e.table];
        let k = t.key_len;
        let from = e.before.as_ref().map(|r| key_json(&r[..k]).to_string());
        let to = e.after.as_ref().map(|r| key_json(&r[..k]).to_string());
        let mut keys: Vec<(String, Row, bool)> = Vec::new();
        if let (Some(f), Some(b)) = (&from, &e.before) {
            keys.push((f.clone(), b[..k].to_vec(), true));
        }
        if let (Some(to), Some(a)) = (&to, &e.after)
            && from.as_ref() != Some(to)
        {
            keys.push((to.clone(), a[..k].to_vec(), false));
        }
        let mut out = Vec::new();
        for (text, key, is_from) in keys {
            let expected = if is_from { e.before.clone() } else { None };
            let left = if to.as_ref() == Some(&text) {
                e.after.clone()
            } else {
                None
            };
            // Since when the row left stands under the key: updated in
            // place, since it did; brought (an insert, a move), from here.
            let born = |was: Option<i64>| match (&left, is_from) {
                (None, _) => None,
                (Some(_), true) => was,
                (Some(_), false) => Some(e.seq),
            };
            match record.get(t, &text)? {
                None => {
                    out.extend(self.source_differs(e, &key, expected.as_ref())?);
                    if fresh {
                        record.put(
                            t,
                            &text,
                            &Key {
                                base: expected,
                                latest: left.clone(),
                                first_seq: e.seq,
                                touches: 1,
                                born: born(Some(0)),
                            },
                        )?;
                    }
                }
                Some(known) if known.first_seq == e.seq => {
                    out.extend(self.source_differs(e, &key, known.base.as_ref())?);
                }
                Some(mut known) if fresh => {
                    // A key a move arrives at may still hold its row for a
                    // moment (a deferred key): the fold settles it.
                    if is_from
                        && !same_recorded(known.latest.as_ref(), expected.as_ref(), &e.unrecorded)
                    {
                        out.push(self.chain(e, &key, known.latest.as_ref()));
                    }
                    known.born = born(known.born);
                    known.latest = left;
                    known.touches += 1;
                    record.put(t, &text, &known)?;
                }
                Some(_) => {}
            }
        }
        Ok(out)
    }

    /// A finding when the source's row under `key` is not `expected` (the
    /// row the target had before the journal's first write to the key).
    fn source_differs(
        &self,
        e: &Entry,
        key: &Row,
        expected: Option<&Row>,
    ) -> Result<Option<Finding>> {
        let t = &self.spec.tables[e.table];
        let Ok(src_key) = key
            .iter()
            .zip(&t.columns)
            .map(|(v, c)| c.transform.reverse(v))
            .collect::<Result<Row, _>>()
        else {
            return Ok(None);
        };
        let shown = display_key(key);
        let found = match self.source.rows().get_row(&self.sql[e.table], &src_key)? {
            None => None,
            Some(row) => match crate::canonical::canonical(t, row) {
                Ok(r) => Some(r),
                Err((_, column, value, why)) => {
                    return Ok(Some(Finding {
                        seq: e.seq,
                        kind: Kind::SourceChanged,
                        table: t.name.clone(),
                        key: key_json(key),
                        column: Some(column.clone()),
                        value: Some(value.to_string()),
                        reason: format!(
                            "the source holds {value} in column '{column}' of key {shown}, which cannot be read: {why}"
                        ),
                        fix: Fix::Source(format!(
                            "put a value the spec can read in source column '{column}' of key {shown}"
                        )),
                    }));
                }
            },
        };
        let (kind, column, value, reason, fix) = match (&found, expected) {
            (None, None) => return Ok(None),
            (Some(f), Some(x)) if same_recorded(Some(f), Some(x), &e.unrecorded) => {
                return Ok(None);
            }
            (Some(f), None) => (
                Kind::Collision,
                None,
                Some(row_json_of(t, f, &[]).to_string()),
                format!(
                    "the source already holds key {shown}, which the target did not have before this write"
                ),
                Fix::Source(format!(
                    "delete or settle the row of key {shown} in source table '{}' (written there after the switch)",
                    t.source_table
                )),
            ),
            (None, Some(_)) => (
                Kind::SourceChanged,
                None,
                None,
                format!(
                    "the source no longer holds key {shown}, which the target had before this write: the source changed since the switch"
                ),
                Fix::Source(format!(
                    "put the row of key {shown} back into source table '{}' as it was at the switch",
                    t.source_table
                )),
            ),
            (Some(f), Some(x)) => {
                let i = (0..f.len()).find(|&i| f[i] != x[i] && !e.unrecorded.contains(&i));
                let column = i.map(|i| t.columns[i].target.clone());
                let value = i.map(|i| format!("source {} where the target had {}", f[i], x[i]));
                (
                    Kind::SourceChanged,
                    column,
                    value,
                    format!(
                        "the source's row of key {shown} changed since the switch: it is not the row the target had before this write"
                    ),
                    Fix::Source(format!(
                        "settle the row of key {shown} in source table '{}': put it back as it was at the switch (the row the target had), or carry the source's change into the target",
                        t.source_table
                    )),
                )
            }
        };
        Ok(Some(Finding {
            seq: e.seq,
            kind,
            table: t.name.clone(),
            key: key_json(key),
            column,
            value,
            reason,
            fix,
        }))
    }

    fn chain(&self, e: &Entry, key: &Row, latest: Option<&Row>) -> Finding {
        let t = &self.spec.tables[e.table];
        Finding {
            seq: e.seq,
            kind: Kind::Chain,
            table: t.name.clone(),
            key: key_json(key),
            column: None,
            value: latest.map(|r| row_json_of(t, r, &e.unrecorded).to_string()),
            reason: format!(
                "the journal's last image of key {} is not the row this write found: a write to the target went unjournaled",
                display_key(key)
            ),
            fix: Fix::CannotGoBack(format!(
                "compare table '{}' with the journal (cutover status shows drift); the write between them is not in the journal",
                t.target_table
            )),
        }
    }

    /// The row's parents, where the write sets a reference: in the record
    /// (brought or deleted by an earlier entry), else in the source.
    fn parents(
        &self,
        record: &Record,
        e: &Entry,
        carried: &Row,
        after: &Row,
    ) -> Result<Vec<Finding>> {
        let t = &self.spec.tables[e.table];
        let mut out = Vec::new();
        for p in &self.parents[e.table] {
            let sets = match &e.before {
                None => true,
                Some(b) => {
                    p.columns
                        .iter()
                        .any(|&c| b[c] != after[c] && !e.unrecorded.contains(&c))
                        || b[..t.key_len] != after[..t.key_len]
                }
            };
            if !sets || p.columns.iter().any(|&c| e.unrecorded.contains(&c)) {
                continue;
            }
            let values: Row = p.columns.iter().map(|&c| carried[c].clone()).collect();
            if values.iter().any(|v| matches!(v, Value::Null)) {
                continue;
            }
            let known = match p.spec_table {
                Some(pi) => {
                    let canon: Row = p.columns.iter().map(|&c| after[c].clone()).collect();
                    record
                        .get(&self.spec.tables[pi], &key_json(&canon).to_string())?
                        .map(|k| k.latest.is_some())
                }
                None => None,
            };
            let present = match known {
                Some(p) => p,
                None => self.source.rows().get_row(&p.sql, &values)?.is_some(),
            };
            if !present {
                let column = t.columns[p.columns[0]].target.clone();
                out.push(Finding {
                    seq: e.seq,
                    kind: Kind::Parent,
                    table: t.name.clone(),
                    key: key_json(&after[..t.key_len]),
                    column: Some(column),
                    value: Some(display_key(&values)),
                    reason: format!(
                        "its parent {} in source table '{}' is missing (not in the source, nor brought by an earlier entry)",
                        display_key(&values),
                        p.table
                    ),
                    fix: Fix::Source(format!(
                        "insert the parent {} into source table '{}' before the rollback",
                        display_key(&values),
                        p.table
                    )),
                });
            }
        }
        Ok(out)
    }

    /// What the source column cannot hold of the carried row `row`, the
    /// columns its image did not record left out.
    fn cannot_hold(&self, ti: usize, row: &Row, unrecorded: &[usize]) -> Result<Option<Unfit>> {
        let t = &self.spec.tables[ti];
        let mut holding = self.holding.borrow_mut();
        let holds = match holding.entry((ti, unrecorded.to_vec())) {
            std::collections::hash_map::Entry::Occupied(h) => h.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let h = if unrecorded.is_empty() {
                    self.source.catalogue().holding(&self.sql[ti], true)?
                } else {
                    let names: Vec<&str> = t
                        .columns
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !unrecorded.contains(i))
                        .map(|(_, c)| c.source.as_str())
                        .collect();
                    let sql =
                        self.source
                            .rows()
                            .table_sql(&t.source_table, &names, t.key_len, None);
                    self.source.catalogue().holding(&sql, true)?
                };
                v.insert(h)
            }
        };
        if unrecorded.is_empty() {
            return holds.unfit(row);
        }
        let kept: Row = row
            .iter()
            .enumerate()
            .filter(|(i, _)| !unrecorded.contains(i))
            .map(|(_, v)| v.clone())
            .collect();
        holds.unfit(&kept)
    }
}

/// What would carry a value the reverse transform refuses: a word the map
/// does not know is a spec change; anything else cannot go back.
fn transform_fix(t: &Table, column: Option<usize>) -> Fix {
    let Some(c) = column.map(|i| &t.columns[i]) else {
        return Fix::CannotGoBack(format!(
            "correct the row in target table '{}'",
            t.target_table
        ));
    };
    match &c.transform {
        Transform::Map { .. } => Fix::Spec(format!(
            "add the word to the map of column '{}' of table '{}' (with the source code that stands for it), or change the row in the target",
            c.target, t.name
        )),
        Transform::DecimalToMinor { scale, .. } => Fix::CannotGoBack(format!(
            "the source keeps whole units of 10^-{scale}; correct the amount in target column '{}' of table '{}'",
            c.target, t.target_table
        )),
        Transform::SetToArray(s) => Fix::CannotGoBack(format!(
            "the source's SET holds only the labels {} in that order, each once: write the array of column '{}' of target table '{}' so (a new label needs the source's SET and the spec's labels first)",
            s.labels.join(","),
            c.target,
            t.target_table
        )),
        _ => Fix::CannotGoBack(format!(
            "correct column '{}' of the row in target table '{}', or relax the spec's check of it",
            c.target, t.target_table
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::Checker;
    use crate::db::{Access, Db, Op};
    use crate::journal::Entry;
    use crate::spec::{Side, Spec};
    use crate::value::{Row, Value};
    use crate::watch::state::{self, Kind, Record};

    /// The running example's source (orders 101, 102, 103 in dollars and
    /// one-letter codes) beside its spec, in a temporary folder.
    fn source() -> (tempfile::TempDir, Spec, Db) {
        let dir = tempfile::tempdir().unwrap();
        let spec_path = dir.path().join("spec.toml");
        std::fs::write(&spec_path, include_str!("../../fixtures/orders/spec.toml")).unwrap();
        Db::create(
            &dir.path().join("source.db"),
            include_str!("../../fixtures/orders/source.sql"),
        )
        .unwrap();
        let spec = crate::spec::load(&spec_path).unwrap();
        let db = Db::open(&spec.source, Access::Read, Side::Source).unwrap();
        (dir, spec, db)
    }

    /// An order as the target holds it: cents and a status word.
    fn order(id: i64, cents: i64, status: &str) -> Row {
        vec![
            Value::Integer(id),
            Value::Integer(cents),
            Value::Text(status.into()),
        ]
    }

    fn entry(seq: i64, op: Op, before: Option<Row>, after: Option<Row>) -> Entry {
        Entry {
            seq,
            table: 0,
            op,
            before,
            after,
            unrecorded: Vec::new(),
        }
    }

    /// The kinds of the findings of `e`, read for the first time.
    fn kinds(spec: &Spec, db: &Db, e: &Entry) -> Vec<Kind> {
        let file = state::open(spec).unwrap();
        let record = Record { file: &file };
        let checker = Checker::new(spec, db).unwrap();
        checker
            .check(&record, e, true)
            .unwrap()
            .into_iter()
            .map(|f| f.kind)
            .collect()
    }

    #[test]
    fn a_write_over_the_row_the_source_holds_is_clean() {
        let (_dir, spec, db) = source();
        let e = entry(
            1,
            Op::Update,
            Some(order(101, 1250, "active")),
            Some(order(101, 1400, "closed")),
        );
        assert_eq!(kinds(&spec, &db, &e), Vec::<Kind>::new());
    }

    #[test]
    fn a_source_row_that_is_not_the_one_the_target_had_is_found() {
        let (_dir, spec, db) = source();
        let e = entry(
            1,
            Op::Update,
            Some(order(101, 999, "active")),
            Some(order(101, 1400, "active")),
        );
        assert_eq!(kinds(&spec, &db, &e), vec![Kind::SourceChanged]);
        // An insert of a key the source already holds collides.
        let insert = entry(2, Op::Insert, None, Some(order(102, 750, "closed")));
        assert_eq!(kinds(&spec, &db, &insert), vec![Kind::Collision]);
    }

    #[test]
    fn a_value_that_cannot_go_back_and_a_null_key_are_found() {
        let (_dir, spec, db) = source();
        // No source code maps to this status word.
        let e = entry(1, Op::Insert, None, Some(order(200, 100, "pending")));
        assert_eq!(kinds(&spec, &db, &e), vec![Kind::Transform]);
        let mut nokey = order(201, 100, "active");
        nokey[0] = Value::Null;
        let e = entry(2, Op::Insert, None, Some(nokey));
        assert_eq!(kinds(&spec, &db, &e), vec![Kind::NullKey]);
    }
}
