//! The rules, each on a SQLite target in a temporary folder: what a change
//! writes, counts or refuses, read back from the table; and a batch that
//! conflicts leaving every row as it was.

use anyhow::Result;

use super::{Applied, Applier, BatchOutcome, Change, Checkpoint, Conflict, Rule};
use crate::db::{Access, Db, RowsExt};
use crate::spec::{Side, Spec};
use crate::value::{Row, Value};

/// `plain(id, v)`; `revised(id, v, rev)` by revision `rev`; `synced(id, v,
/// at)` by watermark `at`; `updating(id, v)` under `on_change = "update"`.
const SPEC: &str = r#"
[[tables]]
name = "plain"
key = ["id"]
[[tables.columns]]
source = "v"
target = "v"

[[tables]]
name = "revised"
key = ["id"]
revision = "rev"
[[tables.columns]]
source = "v"
target = "v"
[[tables.columns]]
source = "rev"
target = "rev"

[[tables]]
name = "synced"
key = ["id"]
watermark = "at"
[[tables.columns]]
source = "v"
target = "v"
[[tables.columns]]
source = "at"
target = "at"

[[tables]]
name = "updating"
key = ["id"]
on_change = "update"
[[tables.columns]]
source = "v"
target = "v"
"#;

const TABLES: &str = "
CREATE TABLE plain (id INTEGER PRIMARY KEY, v TEXT);
CREATE TABLE revised (id INTEGER PRIMARY KEY, v TEXT, rev INTEGER);
CREATE TABLE synced (id INTEGER PRIMARY KEY, v TEXT, at TEXT);
CREATE TABLE updating (id INTEGER PRIMARY KEY, v TEXT);
";

const PLAIN: usize = 0;
const REVISED: usize = 1;
const SYNCED: usize = 2;
const UPDATING: usize = 3;

/// A batch's record that records nothing, beside the receipts the revision
/// rule keeps its evidence in.
struct Bare;

impl Checkpoint for Bare {
    fn ensure_tables(&self, db: &Db) -> Result<()> {
        db.receipts().ensure()
    }

    fn precondition(&self, _db: &Db) -> Result<Option<BatchOutcome>> {
        Ok(None)
    }

    fn delivery(&self) -> &str {
        "unit"
    }

    fn record(&self, _db: &Db, _side: Side, _done: &Applied) -> Result<()> {
        Ok(())
    }
}

struct Target {
    _dir: tempfile::TempDir,
    spec: Spec,
    db: Db,
}

fn target() -> Target {
    let (dir, spec) = crate::spec::in_folder(SPEC);
    Db::create(&dir.path().join("t.db"), TABLES).unwrap();
    let db = Db::open(&spec.target, Access::Write, Side::Target).unwrap();
    Target {
        _dir: dir,
        spec,
        db,
    }
}

impl Target {
    fn engine(&self) -> Applier<'_> {
        Applier::new(&self.spec.tables, &self.db, Side::Target)
    }

    fn apply(&self, changes: &[Change]) -> BatchOutcome {
        self.engine().apply_batch(changes, &Bare).unwrap()
    }

    fn row(&self, table: usize, id: i64) -> Option<Row> {
        let sql = self.db.target_sql(&self.spec.tables[table]);
        self.db.rows().get_row(&sql, &[Value::Integer(id)]).unwrap()
    }

    fn seed(&self, table: usize, rows: &[Row]) {
        let sql = self.db.target_sql(&self.spec.tables[table]);
        for r in rows {
            self.db.rows().insert_row(&sql, r).unwrap();
        }
    }
}

fn t(s: &str) -> Value {
    Value::Text(s.to_string())
}

fn i(n: i64) -> Value {
    Value::Integer(n)
}

fn change(table: usize, rule: Rule, key: i64, after: Option<Row>) -> Change {
    Change {
        table,
        key: vec![i(key)],
        rule,
        after,
        tag: key,
        source_images: None,
        entries: 1,
        unrecorded: Vec::new(),
    }
}

fn committed(outcome: BatchOutcome) -> Applied {
    match outcome {
        BatchOutcome::Committed(a) => a,
        other => panic!("expected a committed batch, got {other}"),
    }
}

fn conflict(outcome: BatchOutcome) -> Box<Conflict> {
    match outcome {
        BatchOutcome::Conflict(c) => c,
        other => panic!("expected a conflict, got {other}"),
    }
}

fn applied(written: u64, duplicate: u64, stale: u64) -> Applied {
    Applied {
        written,
        duplicate,
        stale,
    }
}

#[test]
fn the_plain_rule_inserts_the_absent_and_counts_the_identical() {
    let tg = target();
    let add = |id, v| change(PLAIN, Rule::Plain, id, Some(vec![i(id), t(v)]));
    assert_eq!(
        committed(tg.apply(&[add(1, "a"), add(2, "b")])),
        applied(2, 0, 0)
    );
    assert_eq!(committed(tg.apply(&[add(1, "a")])), applied(0, 1, 0));
    assert_eq!(tg.row(PLAIN, 2), Some(vec![i(2), t("b")]));
    // A delete of a row that is there deletes it; of one that is not, is
    // a duplicate.
    let gone = change(PLAIN, Rule::Plain, 2, None);
    assert_eq!(
        committed(tg.apply(std::slice::from_ref(&gone))),
        applied(1, 0, 0)
    );
    assert_eq!(committed(tg.apply(&[gone])), applied(0, 1, 0));
    assert_eq!(tg.row(PLAIN, 2), None);
}

#[test]
fn the_plain_rule_refuses_other_content_unless_the_table_updates() {
    let tg = target();
    tg.seed(PLAIN, &[vec![i(1), t("a")]]);
    tg.seed(UPDATING, &[vec![i(1), t("a")]]);
    let new = change(PLAIN, Rule::Plain, 2, Some(vec![i(2), t("n")]));
    let other = change(PLAIN, Rule::Plain, 1, Some(vec![i(1), t("z")]));
    let c = conflict(tg.apply(&[new, other]));
    assert_eq!(c.column.as_deref(), Some("v"));
    assert!(c.reason.contains("on_change"), "{}", c.reason);
    // The batch is refused whole: the insert before the conflict is gone.
    assert_eq!(tg.row(PLAIN, 2), None);
    assert_eq!(tg.row(PLAIN, 1), Some(vec![i(1), t("a")]));
    let update = change(UPDATING, Rule::Plain, 1, Some(vec![i(1), t("z")]));
    assert_eq!(committed(tg.apply(&[update])), applied(1, 0, 0));
    assert_eq!(tg.row(UPDATING, 1), Some(vec![i(1), t("z")]));
}

#[test]
fn the_watermark_rule_keeps_the_later_row() {
    let tg = target();
    tg.seed(SYNCED, &[vec![i(1), t("a"), t("2024-01-02")]]);
    let at = |v, when| {
        change(
            SYNCED,
            Rule::Watermark(2),
            1,
            Some(vec![i(1), t(v), t(when)]),
        )
    };
    assert_eq!(
        committed(tg.apply(&[at("old", "2024-01-01")])),
        applied(0, 0, 1)
    );
    assert_eq!(tg.row(SYNCED, 1), Some(vec![i(1), t("a"), t("2024-01-02")]));
    let same = conflict(tg.apply(&[at("other", "2024-01-02")]));
    assert!(same.reason.contains("same watermark"), "{}", same.reason);
    assert_eq!(
        committed(tg.apply(&[at("new", "2024-01-03")])),
        applied(1, 0, 0)
    );
    assert_eq!(
        tg.row(SYNCED, 1),
        Some(vec![i(1), t("new"), t("2024-01-03")])
    );
}

#[test]
fn the_replay_rule_writes_only_over_the_row_it_expects() {
    let tg = target();
    tg.seed(PLAIN, &[vec![i(1), t("a")], vec![i(2), t("b")]]);
    let expect = |id, before: &str, after: &str| {
        change(
            PLAIN,
            Rule::Expect {
                before: Some(vec![i(id), t(before)]),
                revision: None,
            },
            id,
            Some(vec![i(id), t(after)]),
        )
    };
    assert_eq!(
        committed(tg.apply(&[expect(1, "a", "x")])),
        applied(1, 0, 0)
    );
    assert_eq!(tg.row(PLAIN, 1), Some(vec![i(1), t("x")]));
    // Already the row the change leaves: a duplicate, nothing written.
    assert_eq!(
        committed(tg.apply(&[expect(1, "a", "x")])),
        applied(0, 1, 0)
    );
    // Another row than expected: the batch's earlier write is undone.
    let c = conflict(tg.apply(&[expect(2, "b", "y"), expect(1, "q", "r")]));
    assert_eq!(c.key, serde_json::json!([1]));
    assert!(c.reason.contains("differs"), "{}", c.reason);
    assert_eq!(c.found, Some(serde_json::json!({"id": 1, "v": "x"})));
    assert_eq!(tg.row(PLAIN, 2), Some(vec![i(2), t("b")]));
    // An insert where a row already is, and a delete of a row gone.
    let insert = change(
        PLAIN,
        Rule::Expect {
            before: None,
            revision: None,
        },
        2,
        Some(vec![i(2), t("new")]),
    );
    assert!(
        conflict(tg.apply(&[insert]))
            .reason
            .contains("expected none")
    );
    // A delete whose row is already gone is the row it leaves; an update
    // of a row gone is a conflict.
    let delete = change(
        PLAIN,
        Rule::Expect {
            before: Some(vec![i(9), t("z")]),
            revision: None,
        },
        9,
        None,
    );
    assert_eq!(committed(tg.apply(&[delete])), applied(0, 1, 0));
    assert!(
        conflict(tg.apply(&[expect(9, "z", "y")]))
            .reason
            .contains("gone")
    );
    assert_eq!(tg.row(PLAIN, 9), None);
}

#[test]
fn the_revision_rule_replaces_older_and_keeps_older_as_evidence() {
    let tg = target();
    tg.seed(REVISED, &[vec![i(1), t("a"), i(5)]]);
    let at = |rev, v: &str| {
        change(
            REVISED,
            Rule::Revision(rev),
            1,
            Some(vec![i(1), t(v), i(rev)]),
        )
    };
    // Older: kept as evidence, the row untouched; the same older revision
    // again is a duplicate of what was seen.
    assert_eq!(committed(tg.apply(&[at(3, "old")])), applied(0, 0, 1));
    assert_eq!(committed(tg.apply(&[at(3, "old")])), applied(0, 1, 0));
    assert!(
        conflict(tg.apply(&[at(3, "other")]))
            .reason
            .contains("seen before")
    );
    assert_eq!(tg.row(REVISED, 1), Some(vec![i(1), t("a"), i(5)]));
    // The stored revision with other content conflicts; a newer replaces.
    assert!(
        conflict(tg.apply(&[at(5, "b")]))
            .reason
            .contains("already stored")
    );
    assert_eq!(committed(tg.apply(&[at(6, "new")])), applied(1, 0, 0));
    assert_eq!(tg.row(REVISED, 1), Some(vec![i(1), t("new"), i(6)]));
}

#[test]
fn a_revision_deleted_is_never_brought_back_by_an_older_update() {
    let tg = target();
    tg.seed(REVISED, &[vec![i(1), t("a"), i(5)]]);
    let delete = change(REVISED, Rule::Revision(7), 1, None);
    assert_eq!(committed(tg.apply(&[delete])), applied(1, 0, 0));
    assert_eq!(tg.row(REVISED, 1), None);
    let late = change(
        REVISED,
        Rule::Revision(6),
        1,
        Some(vec![i(1), t("late"), i(6)]),
    );
    assert_eq!(committed(tg.apply(&[late])), applied(0, 0, 1));
    assert_eq!(tg.row(REVISED, 1), None);
    let same = change(
        REVISED,
        Rule::Revision(7),
        1,
        Some(vec![i(1), t("again"), i(7)]),
    );
    assert!(
        conflict(tg.apply(&[same]))
            .reason
            .contains("deleted at revision 7")
    );
    assert_eq!(tg.row(REVISED, 1), None);
}

#[test]
fn a_null_key_is_a_conflict_naming_the_key_column() {
    let tg = target();
    let mut c = change(PLAIN, Rule::Plain, 1, Some(vec![Value::Null, t("a")]));
    c.key = vec![Value::Null];
    let refused = conflict(tg.apply(&[c]));
    assert_eq!(refused.column.as_deref(), Some("id"));
    assert!(refused.reason.contains("NULL"), "{}", refused.reason);
}
