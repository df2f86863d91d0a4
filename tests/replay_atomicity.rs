//! A replay that will not reconcile writes nothing; one that the source can
//! take, statement by statement, ends as those statements would have left it.
//!
//! Generated cases on SQLite → SQLite: `acct (id, email UNIQUE, money,
//! note)` with `rev` and `moves` in the source only (ignored by the spec,
//! so the source's triggers that set them fire on replay's writes,
//! docs/spec.md). The source holds what the target does not (the triggers
//! in two cases of three: without them, replay folds a key deleted and
//! inserted again in one batch into an update in place, docs/journal.md,
//! "Journal order"):
//!
//! - a trigger `acct_rev` (`AFTER UPDATE OF email, dollars, note`, every
//!   carried column, no `WHEN`: `rev = rev + 1`), which counts the
//!   application's writes, loaded rows starting from random counts. Every
//!   update the application writes names a carried column, so each one the
//!   journal holds counts once, one that changed no value too (replay sets
//!   every carried column for it, docs/journal.md, "Journal order");
//! - a trigger `acct_moves` (`AFTER UPDATE OF email WHEN` it changes:
//!   `moves = moves + 1`): an update that changes no value is journaled
//!   with equal images, which cannot tell which columns its statement
//!   named, so this count is of changes;
//! - a trigger `acct_gone` (`AFTER DELETE`: a row in `audit`, a table
//!   outside the spec, AUTOINCREMENT);
//! - a narrower `note` (`CHECK (length(note) <= 5)`; the target's is any
//!   text).
//!
//! The application writes random transactions to the journaled target
//! through Python's `sqlite3` (inserts, updates of each column, deletes,
//! email swaps through a temporary value: one computed in SQL, one as an
//! application that read both emails first writes it, `'tmp'` and the two
//! emails as literals, and one through a delete and re-insert of one of the
//! rows), some refused by the target's own schema (not
//! journaled), some holding a note the source cannot hold; sometimes the
//! source is written after the switch (a conflict, or a difference the
//! closing reconcile finds). Then `fence on`, and `replay` at `--batch 1`,
//! at 2 to 7 (a boundary inside a swap's transaction) or at the default
//! (one batch), crashed at `CUTOVER_FAULT` points or killed with SIGKILL
//! after a random delay, then run again without a fault.
//!
//! The oracle is the test's own: the application's statements that the
//! journal holds (committed, and changing a row of the target), in source
//! form, applied in order to a copy of the pre-replay source with
//! rusqlite, its triggers firing, as the old application writing them to
//! the source would have; a key deleted and inserted again gets back the
//! `rev` and `moves` it had, as replay gives back the columns the spec
//! does not carry. The property:
//!
//! - after every run that did not exit 0 (exit 1 or 2, a crash point, a
//!   kill) the source's user tables, its `sqlite_sequence` (but for
//!   cutover's own tables, and rows at 0, which SQLite writes for a table a
//!   statement could have inserted into) and `_cutover_applied` are exactly
//!   what they were before the first replay began, unless a crash point or
//!   a kill came after the replay's commit: then every entry is recorded as
//!   applied and the carried columns equal the target's (and that state is
//!   what later runs must leave);
//! - a run that exits 0 leaves the source's user tables and
//!   `sqlite_sequence` equal to the oracle's (and every journal entry
//!   recorded as applied); a case whose oracle fails has no such state, so
//!   a replay that passes there fails the property;
//! - when the oracle applies every statement and its carried columns equal
//!   the target's, the final rerun (after the kills) exits 0 — unless the
//!   source changed a row after the switch that the journal then writes:
//!   the journal's before-image is not what the source holds, a conflict by
//!   design, whatever a blind statement would have done to the row.
//!
//! Every state is read with rusqlite from a copy of the folder (so that a
//! hot rollback journal a kill left stays for cutover's next run to
//! recover), never through cutover. The two halves are two properties over
//! the same cases, so that each shrinks to its own smallest failure. Cases
//! are few by default (48 a property, under half a minute on two cores); set
//! `PROPTEST_CASES` for a long run (CONTRIBUTING.md). `survey` (ignored)
//! runs many cases without stopping at the first failure and counts each
//! kind of failure, for a picture of which cases fail and why.

mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence, TestRunner};
use rusqlite::types::Value;
use support::{Dir, FAULT_EXIT, Rows, Spec, Table, dollars};

/// `default` cases, or `PROPTEST_CASES` when it is set.
fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        // Each case runs the binary several times: bound the shrinking.
        max_shrink_iters: 400,
        // Next to this file: tests/replay_atomicity.proptest-regressions.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

// --- the schema ---------------------------------------------------------------------

const SOURCE: &str = "
CREATE TABLE acct (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    email TEXT NOT NULL UNIQUE,
    dollars TEXT NOT NULL,
    note TEXT CHECK (length(note) <= 5),
    rev INTEGER NOT NULL DEFAULT 0,
    moves INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE audit (n INTEGER PRIMARY KEY AUTOINCREMENT, id INTEGER NOT NULL, what TEXT NOT NULL);
";

/// The source's triggers, in the cases that have them.
const SOURCE_TRIGGERS: &str = "
CREATE TRIGGER acct_rev AFTER UPDATE OF email, dollars, note ON acct
BEGIN UPDATE acct SET rev = rev + 1 WHERE id = NEW.id; END;
CREATE TRIGGER acct_moves AFTER UPDATE OF email ON acct WHEN OLD.email IS NOT NEW.email
BEGIN UPDATE acct SET moves = moves + 1 WHERE id = NEW.id; END;
CREATE TRIGGER acct_gone AFTER DELETE ON acct
BEGIN INSERT INTO audit (id, what) VALUES (OLD.id, 'gone'); END;
";

const TARGET: &str = "
CREATE TABLE acct (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    email TEXT NOT NULL UNIQUE,
    cents INTEGER NOT NULL,
    note TEXT
);
";

fn spec() -> Spec {
    Spec::new().table(
        Table::new("acct")
            .key(["id"])
            .ignore(["rev", "moves"])
            .copy("email")
            .decimal("dollars", "cents", 2)
            .copy("note"),
    )
}

const EMAILS: [&str; 8] = ["a@x", "b@x", "c@x", "d@x", "e@x", "f@x", "g@x", "h@x"];

/// Notes: the source holds up to five characters.
const NOTES: [Option<&str>; 5] = [
    None,
    Some("n"),
    Some("five!"),
    Some("sixsix"),
    Some("a long note"),
];

fn note_sql(n: usize) -> String {
    NOTES[n].map_or("NULL".to_string(), |t| format!("'{t}'"))
}

// --- what is generated --------------------------------------------------------------

/// One transaction of the application on the target.
#[derive(Clone, Debug)]
enum Write {
    Insert {
        id: i64,
        email: usize,
        cents: i64,
        note: usize,
    },
    Email {
        id: i64,
        email: usize,
    },
    Money {
        id: i64,
        cents: i64,
    },
    Note {
        id: i64,
        note: usize,
    },
    Delete {
        id: i64,
    },
    /// Two rows' emails exchanged through a temporary value (SQLite checks
    /// UNIQUE row by row, so one UPDATE cannot swap them).
    Swap {
        a: i64,
        b: i64,
    },
    /// The same exchange as an application that read both emails first
    /// writes it, each value a literal: `a` to `'tmp'`, `b` to what `a`
    /// held, `a` to what `b` held. Written in another order than the
    /// journal's, or folded into each row's net effect, the three updates
    /// would put one email on two rows at once.
    SwapThroughTmp {
        a: i64,
        b: i64,
    },
    /// The exchange through no row at all, as an application that read
    /// both emails first writes it: `a` deleted, `b` given what `a` held,
    /// `a` inserted again with what `b` held.
    SwapThroughDelete {
        a: i64,
        b: i64,
        cents: i64,
        note: usize,
    },
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Source,
    Target,
}

impl Write {
    /// The keys the write names.
    fn ids(&self) -> Vec<i64> {
        match *self {
            Write::Insert { id, .. }
            | Write::Email { id, .. }
            | Write::Money { id, .. }
            | Write::Note { id, .. }
            | Write::Delete { id } => vec![id],
            Write::Swap { a, b }
            | Write::SwapThroughTmp { a, b }
            | Write::SwapThroughDelete { a, b, .. } => vec![a, b],
        }
    }

    /// The keys whose emails the application reads, inside the
    /// transaction, before it writes.
    fn reads(&self) -> Vec<i64> {
        match *self {
            Write::SwapThroughTmp { a, b } | Write::SwapThroughDelete { a, b, .. } => vec![a, b],
            _ => Vec::new(),
        }
    }

    /// The transaction's statements, as the application writes them to the
    /// target, or the same statements in the source's form (dollars for
    /// cents); `read` holds the emails of [`Write::reads`], in order (or
    /// placeholders the application fills in).
    fn statements(&self, side: Side, read: &[String]) -> Vec<String> {
        let money = |cents: i64| match side {
            Side::Target => ("cents", cents.to_string()),
            Side::Source => ("dollars", format!("'{}'", dollars(cents))),
        };
        match *self {
            Write::Insert {
                id,
                email,
                cents,
                note,
            } => {
                let (col, v) = money(cents);
                vec![format!(
                    "INSERT INTO acct (id, email, {col}, note) VALUES ({id}, '{}', {v}, {})",
                    EMAILS[email],
                    note_sql(note)
                )]
            }
            Write::Email { id, email } => vec![format!(
                "UPDATE acct SET email = '{}' WHERE id = {id}",
                EMAILS[email]
            )],
            Write::Money { id, cents } => {
                let (col, v) = money(cents);
                vec![format!("UPDATE acct SET {col} = {v} WHERE id = {id}")]
            }
            Write::Note { id, note } => vec![format!(
                "UPDATE acct SET note = {} WHERE id = {id}",
                note_sql(note)
            )],
            Write::Delete { id } => vec![format!("DELETE FROM acct WHERE id = {id}")],
            Write::Swap { a, b } => vec![
                format!(
                    "UPDATE acct SET email = email || '|' || (SELECT email FROM acct WHERE id = {b}) \
                     WHERE id = {a} AND EXISTS (SELECT 1 FROM acct WHERE id = {b})"
                ),
                format!(
                    "UPDATE acct SET email = (SELECT substr(email, 1, instr(email, '|') - 1) FROM acct WHERE id = {a}) \
                     WHERE id = {b} AND (SELECT instr(email, '|') FROM acct WHERE id = {a}) > 0"
                ),
                format!(
                    "UPDATE acct SET email = substr(email, instr(email, '|') + 1) \
                     WHERE id = {a} AND instr(email, '|') > 0"
                ),
            ],
            Write::SwapThroughTmp { a, b } => vec![
                format!("UPDATE acct SET email = 'tmp' WHERE id = {a}"),
                format!("UPDATE acct SET email = '{}' WHERE id = {b}", read[0]),
                format!("UPDATE acct SET email = '{}' WHERE id = {a}", read[1]),
            ],
            Write::SwapThroughDelete { a, b, cents, note } => {
                let (col, v) = money(cents);
                vec![
                    format!("DELETE FROM acct WHERE id = {a}"),
                    format!("UPDATE acct SET email = '{}' WHERE id = {b}", read[0]),
                    format!(
                        "INSERT INTO acct (id, email, {col}, note) VALUES ({a}, '{}', {v}, {})",
                        read[1],
                        note_sql(note)
                    ),
                ]
            }
        }
    }

    /// The statements with placeholders `{0}`, `{1}`, … where the values
    /// the application reads go.
    fn templates(&self) -> Vec<String> {
        let slots: Vec<String> = (0..self.reads().len())
            .map(|i| format!("{{{i}}}"))
            .collect();
        self.statements(Side::Target, &slots)
    }
}

/// A write to the source after the switch, which the journal knows nothing
/// of.
#[derive(Clone, Debug)]
enum SourceEdit {
    None,
    Money { id: i64, cents: i64 },
    Insert { id: i64, email: usize },
}

/// One run of the replay before the final rerun.
#[derive(Clone, Debug)]
enum Attempt {
    Fault(&'static str),
    KillAfterMs(u64),
}

#[derive(Clone, Debug)]
struct Case {
    /// id → (email, cents, note) in source and target alike, and the
    /// source's `rev`; emails are distinct.
    initial: Vec<(i64, usize, i64, usize, i64)>,
    writes: Vec<Write>,
    edit: SourceEdit,
    /// `--batch`; `None` for the default.
    batch: Option<usize>,
    /// Whether the source has its triggers: without them, replay folds a
    /// delete and re-insert of a key in one batch into an update in place
    /// (docs/journal.md, "Journal order").
    triggers: bool,
    attempts: Vec<Attempt>,
}

fn cents() -> impl Strategy<Value = i64> {
    prop_oneof![4 => 0i64..100_000, 1 => -500i64..0]
}

/// Mostly notes the source holds.
fn note() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 0usize..3, 1 => 3usize..5]
}

fn write() -> impl Strategy<Value = Write> {
    let id = 1i64..=7;
    let email = 0usize..EMAILS.len();
    prop_oneof![
        2 => (id.clone(), email.clone(), cents(), note())
            .prop_map(|(id, email, cents, note)| Write::Insert { id, email, cents, note }),
        2 => (id.clone(), email).prop_map(|(id, email)| Write::Email { id, email }),
        2 => (id.clone(), cents()).prop_map(|(id, cents)| Write::Money { id, cents }),
        1 => (id.clone(), note()).prop_map(|(id, note)| Write::Note { id, note }),
        1 => id.clone().prop_map(|id| Write::Delete { id }),
        1 => (id.clone(), id.clone()).prop_map(|(a, b)| Write::Swap { a, b }),
        2 => (id.clone(), id.clone()).prop_map(|(a, b)| Write::SwapThroughTmp { a, b }),
        1 => (id.clone(), id, cents(), note())
            .prop_map(|(a, b, cents, note)| Write::SwapThroughDelete { a, b, cents, note }),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    // At least two rows, so that a swap's keys are often both there.
    let initial = (
        proptest::sample::subsequence((1i64..=6).collect::<Vec<_>>(), 2..=6),
        proptest::collection::vec((0i64..100_000, 0usize..3, 0i64..4), 6),
    )
        .prop_map(|(ids, values)| {
            ids.into_iter()
                .enumerate()
                .map(|(i, id)| (id, i, values[i].0, values[i].1, values[i].2))
                .collect()
        });
    let edit = prop_oneof![
        6 => Just(SourceEdit::None),
        1 => (1i64..=6, cents()).prop_map(|(id, cents)| SourceEdit::Money { id, cents }),
        1 => (1i64..=7, 0usize..EMAILS.len()).prop_map(|(id, email)| SourceEdit::Insert { id, email }),
    ];
    let attempt = prop_oneof![
        1 => Just(Attempt::Fault("mid-batch")),
        1 => Just(Attempt::Fault("before-commit")),
        1 => Just(Attempt::Fault("after-commit")),
        2 => (0u64..60).prop_map(Attempt::KillAfterMs),
    ];
    // One entry a batch; a few, so that a boundary falls inside a
    // transaction (a swap's three updates); the default, the whole journal.
    let batch = prop_oneof![
        1 => Just(Some(1)),
        2 => (2usize..=7).prop_map(Some),
        1 => Just(None),
    ];
    (
        initial,
        proptest::collection::vec(write(), 0..14),
        edit,
        batch,
        prop_oneof![2 => Just(true), 1 => Just(false)],
        proptest::collection::vec(attempt, 0..=3),
    )
        .prop_map(|(initial, writes, edit, batch, triggers, attempts)| Case {
            initial,
            writes,
            edit,
            batch,
            triggers,
            attempts,
        })
}

// --- reading the source ---------------------------------------------------------------

/// What the property compares in the source, read with rusqlite.
#[derive(Clone, Debug, PartialEq)]
struct State {
    /// Every table not named `_cutover_*`, by name, rows by rowid.
    tables: BTreeMap<String, Rows>,
    /// `sqlite_sequence` but for cutover's own tables and rows at 0.
    sequences: Rows,
    /// `_cutover_applied`, whole; `None` when it does not exist.
    applied: Option<Rows>,
}

impl State {
    /// What the application can see: the user tables and their sequences.
    fn user(&self) -> (&BTreeMap<String, Rows>, &Rows) {
        (&self.tables, &self.sequences)
    }
}

fn read_state(conn: &rusqlite::Connection) -> State {
    let rows = |sql: &str| -> Rows {
        let mut st = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let n = st.column_count();
        st.query_map([], |r| (0..n).map(|i| r.get::<_, Value>(i)).collect())
            .and_then(|rows| rows.collect())
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    let names: Vec<String> = rows(
        "SELECT name FROM sqlite_schema WHERE type = 'table' \
         AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE '\\_cutover\\_%' ESCAPE '\\' \
         ORDER BY name",
    )
    .into_iter()
    .map(|r| match &r[0] {
        Value::Text(t) => t.clone(),
        other => panic!("a table name {other:?}"),
    })
    .collect();
    let tables = names
        .into_iter()
        .map(|t| {
            let content = rows(&format!("SELECT * FROM \"{t}\" ORDER BY rowid"));
            (t, content)
        })
        .collect();
    let has = |t: &str| -> bool {
        conn.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [t],
            |r| r.get::<_, i64>(0),
        )
        .expect("reading the catalogue")
            > 0
    };
    let sequences = if has("sqlite_sequence") {
        // A row at 0 is no row: SQLite writes one for every AUTOINCREMENT
        // table a statement could insert into (through a trigger too), even
        // when it inserts nothing, and the next id is the same either way.
        rows(
            "SELECT name, seq FROM sqlite_sequence \
             WHERE name NOT LIKE '\\_cutover\\_%' ESCAPE '\\' AND seq <> 0 ORDER BY name",
        )
    } else {
        Vec::new()
    };
    let applied =
        has("_cutover_applied").then(|| rows("SELECT * FROM _cutover_applied ORDER BY 1, 2"));
    State {
        tables,
        sequences,
        applied,
    }
}

/// The source's state, and the journal seqs it records as applied, as a
/// copy of the folder shows them: the folder stays exactly as a kill left
/// it for cutover's next run to recover.
fn source_state(d: &Dir) -> (State, Vec<i64>) {
    let peek = d.copy("atomicity-peek");
    let state = read_state(&peek.conn("source.db"));
    (state, peek.applied_seqs("source.db", "target.db"))
}

/// The target's carried columns, in the source's form, by id.
fn target_rows(d: &Dir) -> Rows {
    d.query(
        "target.db",
        "SELECT id, email, cents, note FROM acct ORDER BY id",
    )
    .into_iter()
    .map(|mut r| {
        if let Value::Integer(c) = r[2] {
            r[2] = Value::Text(dollars(c));
        }
        r
    })
    .collect()
}

fn carried(state: &State) -> Rows {
    state.tables["acct"]
        .iter()
        .map(|r| r[..4].to_vec())
        .collect()
}

// --- one case ---------------------------------------------------------------------------

/// The Python program of the application: runs each transaction on the
/// database and commits it, or rolls it back when the database refuses a
/// statement. A transaction first reads the emails of the keys in `read`
/// (and writes nothing, rolled back, when one is missing), then runs its
/// statements, `{i}` in each replaced by the i-th email read. Prints, for
/// each, the error, the emails read and the rows each statement changed.
const PY_APP: &str = r#"
import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=5, isolation_level=None)
out = []
for txn in json.loads(sys.argv[2]):
    read = []
    try:
        con.execute("BEGIN IMMEDIATE")
        for key in txn["read"]:
            row = con.execute("SELECT email FROM acct WHERE id = ?", (key,)).fetchone()
            read.append(row and row[0])
        if None in read:
            con.execute("ROLLBACK")
            out.append({"error": None, "read": read, "rows": []})
            continue
        rows = []
        for sql in txn["sql"]:
            for i, v in enumerate(read):
                sql = sql.replace("{%d}" % i, v)
            rows.append(con.execute(sql).rowcount)
        con.execute("COMMIT")
        out.append({"error": None, "read": read, "rows": rows})
    except sqlite3.Error as e:
        if con.in_transaction:
            con.execute("ROLLBACK")
        out.append({"error": str(e), "read": read, "rows": []})
print(json.dumps(out))
"#;

/// Which half of the property a failure breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Half {
    /// A run that did not exit 0 left something in the source.
    NothingUnlessPassed,
    /// A run that exited 0 left other than the oracle, or a case the oracle
    /// applies cleanly did not end in a pass.
    PassAsTheStatementsWould,
}

/// How a case went: the kinds of failure it showed (empty when it holds
/// the property) and a log of everything that ran.
struct Outcome {
    failures: Vec<(Half, String)>,
    log: String,
}

impl Outcome {
    fn of(&self, half: Half) -> Vec<&str> {
        self.failures
            .iter()
            .filter(|(h, _)| *h == half)
            .map(|(_, f)| f.as_str())
            .collect()
    }
}

/// What differs between two states of the source, named: `acct` (the
/// carried columns), `acct.rev/moves` (those the source's triggers count),
/// `audit`, `sqlite_sequence`,
/// `_cutover_applied`.
fn differing(a: &State, b: &State) -> String {
    let mut parts = Vec::new();
    let acct = |s: &State, f: fn(&[Value]) -> Vec<Value>| -> Vec<Vec<Value>> {
        s.tables
            .get("acct")
            .map(|rows| rows.iter().map(|r| f(r)).collect())
            .unwrap_or_default()
    };
    if acct(a, |r| r[..4].to_vec()) != acct(b, |r| r[..4].to_vec()) {
        parts.push("acct");
    } else if acct(a, |r| r.to_vec()) != acct(b, |r| r.to_vec()) {
        parts.push("acct.rev/moves");
    }
    if a.tables.get("audit") != b.tables.get("audit") {
        parts.push("audit");
    }
    if a.sequences != b.sequences {
        parts.push("sqlite_sequence");
    }
    if a.applied != b.applied {
        parts.push("_cutover_applied");
    }
    parts.join(", ")
}

fn run_case(c: &Case) -> Outcome {
    let mut log = String::new();
    let mut failures = Vec::new();
    let d = Dir::new("atomicity");
    d.spec(&spec());
    let mut source = SOURCE.to_string();
    if c.triggers {
        source.push_str(SOURCE_TRIGGERS);
    }
    for &(id, email, cents, note, rev) in &c.initial {
        let _ = writeln!(
            source,
            "INSERT INTO acct (id, email, dollars, note, rev) VALUES ({id}, '{}', '{}', {}, {rev});",
            EMAILS[email],
            dollars(cents),
            note_sql(note)
        );
    }
    d.create_db("source.db", &source);
    d.create_db("target.db", TARGET);
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);

    // The application's writes, through its own client.
    let txns: Vec<serde_json::Value> = c
        .writes
        .iter()
        .map(|w| serde_json::json!({"read": w.reads(), "sql": w.templates()}))
        .collect();
    let (code, out) = support::python(
        d.path(),
        PY_APP,
        &["target.db", &serde_json::to_string(&txns).expect("json")],
    );
    assert_eq!(code, 0, "the application's writes: {out}");
    let results: Vec<serde_json::Value> = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("the application printed {out:?}: {e}"));
    // The journal's statements: those of committed transactions that
    // changed a row of the target (one that changed none left no entry).
    let mut journaled = Vec::new();
    for (w, r) in c.writes.iter().zip(&results) {
        match r["error"].as_str() {
            None => {
                let rows = r["rows"].as_array().expect("rows changed");
                let read: Vec<String> = r["read"]
                    .as_array()
                    .expect("the values read")
                    .iter()
                    .map(|v| v.as_str().unwrap_or_default().to_string())
                    .collect();
                if rows.is_empty() {
                    let _ = writeln!(log, "the application wrote nothing of {w:?}: read {read:?}");
                }
                for (sql, n) in w.statements(Side::Source, &read).into_iter().zip(rows) {
                    if n.as_i64() != Some(0) {
                        journaled.push(sql);
                    }
                }
            }
            // The target's own schema refuses a duplicate: not journaled.
            Some(e) if e.starts_with("UNIQUE constraint failed") => {
                let _ = writeln!(log, "target refused {w:?}: {e}");
            }
            Some(e) => panic!("{w:?} failed on the journaled target: {e}"),
        }
    }
    d.run(&["fence", "on"], 0);

    let (unedited, _) = source_state(&d);
    match c.edit {
        SourceEdit::None => {}
        SourceEdit::Money { id, cents } => d.exec(
            "source.db",
            &format!(
                "UPDATE acct SET dollars = '{}' WHERE id = {id}",
                dollars(cents)
            ),
        ),
        SourceEdit::Insert { id, email } => d.exec(
            "source.db",
            &format!(
                "INSERT OR IGNORE INTO acct (id, email, dollars) VALUES ({id}, '{}', '0.01')",
                EMAILS[email]
            ),
        ),
    }

    let (before, _) = source_state(&d);
    let target = target_rows(&d);
    let journal = support::journal_seqs(&d, i64::MAX);

    // The oracle: the journal's statements in source form, in order, on a
    // copy of the pre-replay source.
    let oracle_dir = d.copy("atomicity-oracle");
    let oracle: Result<State, String> = {
        let conn = oracle_dir.conn("source.db");
        // Replay keeps a deleted row's columns the spec does not carry
        // (`rev`, `moves`) and gives them back when its key is inserted again
        // (docs/journal.md, "The replay"): so does the oracle.
        let mut kept: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
        let id_after = |sql: &str, at: &str| -> Option<i64> {
            let rest = &sql[sql.find(at)? + at.len()..];
            rest.split(|ch: char| !ch.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        };
        journaled
            .iter()
            .try_for_each(|sql| {
                let deleted = sql
                    .starts_with("DELETE")
                    .then(|| id_after(sql, "WHERE id = "))
                    .flatten();
                if let Some(id) = deleted
                    && let Ok(uncarried) =
                        conn.query_row("SELECT rev, moves FROM acct WHERE id = ?1", [id], |r| {
                            Ok((r.get(0)?, r.get(1)?))
                        })
                {
                    kept.insert(id, uncarried);
                }
                conn.execute(sql, [])
                    .map(drop)
                    .map_err(|e| format!("{sql}: {e}"))?;
                let inserted = sql
                    .starts_with("INSERT")
                    .then(|| id_after(sql, "VALUES ("))
                    .flatten();
                if let Some(id) = inserted
                    && let Some((rev, moves)) = kept.remove(&id)
                {
                    // Sets neither trigger's columns: neither fires.
                    conn.execute(
                        "UPDATE acct SET rev = ?1, moves = ?2 WHERE id = ?3",
                        [rev, moves, id],
                    )
                    .map_err(|e| format!("giving rev and moves back to {id}: {e}"))?;
                }
                Ok::<(), String>(())
            })
            .map(|()| read_state(&conn))
    };
    // A row the source changed after the switch that the journal then
    // writes is a conflict by design (docs/journal.md): the journal's
    // before-image is not what the source holds, whatever a blind
    // statement of the application would have done to it.
    let edited = match c.edit {
        SourceEdit::None => None,
        SourceEdit::Money { id, .. } | SourceEdit::Insert { id, .. } => Some(id),
    };
    let conflicts_by_design = unedited != before
        && edited.is_some_and(|id| c.writes.iter().any(|w| w.ids().contains(&id)));
    let must_pass = !conflicts_by_design && matches!(&oracle, Ok(o) if carried(o) == target);
    let _ = writeln!(
        log,
        "journal: {} entries; oracle: {}; must pass: {must_pass}",
        journal.len(),
        match &oracle {
            Ok(o) if carried(o) == target => "applies, equals the target".to_string(),
            Ok(o) => format!(
                "applies, differs from the target: {:?} vs {target:?}",
                carried(o)
            ),
            Err(e) => format!("fails at {e}"),
        }
    );
    let _ = writeln!(log, "before: {:?}", before.user());
    if let Ok(o) = &oracle {
        let _ = writeln!(log, "oracle: {:?}", o.user());
    }

    let batch = c.batch.map(|b| b.to_string());
    let mut args = vec!["replay"];
    if let Some(b) = &batch {
        args.extend(["--batch", b.as_str()]);
    }
    let mut passed = false;
    // What a run that does not pass must leave: the source before the first
    // replay, or as a run that committed whole before it was killed left it.
    let mut baseline = before.clone();
    let mut final_reason = String::new();
    let runs = c
        .attempts
        .iter()
        .map(Some)
        .chain(std::iter::once(None::<&Attempt>));
    for (i, attempt) in runs.enumerate() {
        let what = match attempt {
            Some(a) => format!("{a:?}"),
            None => "final rerun".to_string(),
        };
        let code = match attempt {
            Some(Attempt::Fault(f)) => {
                let out = d.cutover_json(&args).env("CUTOVER_FAULT", f).output();
                let _ = writeln!(log, "run {i} ({what}): {}", brief(&out));
                out.code
            }
            Some(Attempt::KillAfterMs(ms)) => {
                let mut child = d.cutover_json(&args).spawn();
                std::thread::sleep(Duration::from_millis(*ms));
                let killed = child.try_wait().expect("polling").is_none();
                if killed {
                    child.kill().expect("SIGKILL");
                }
                let status = child.wait().expect("reaping");
                let _ = writeln!(
                    log,
                    "run {i} ({what}): {}",
                    if killed {
                        "killed".to_string()
                    } else {
                        format!("ended by itself, {status}")
                    }
                );
                if killed { None } else { status.code() }
            }
            None => {
                let out = d.cutover_json(&args).output();
                let _ = writeln!(log, "run {i} ({what}): {}", brief(&out));
                final_reason = why(&out);
                out.code
            }
        };
        let (now, applied) = source_state(&d);
        match code {
            Some(0) => {
                match &oracle {
                    Ok(o) if now.user() == o.user() => {}
                    Ok(o) => {
                        let what = differing(
                            &State {
                                applied: None,
                                ..now.clone()
                            },
                            o,
                        );
                        failures.push((
                            Half::PassAsTheStatementsWould,
                            format!("exit 0, the source differs from the oracle in {what}"),
                        ));
                        let _ = writeln!(log, "  source after exit 0: {:?}", now.user());
                    }
                    Err(_) => {
                        failures.push((
                            Half::PassAsTheStatementsWould,
                            "exit 0 where the oracle fails".to_string(),
                        ));
                        let _ = writeln!(log, "  source after exit 0: {:?}", now.user());
                    }
                }
                if applied != journal {
                    failures.push((
                        Half::PassAsTheStatementsWould,
                        "exit 0 without every entry applied".to_string(),
                    ));
                    let _ = writeln!(log, "  applied {applied:?} of {journal:?}");
                }
                passed = true;
                break;
            }
            Some(1 | 2 | FAULT_EXIT) | None => {
                // A crash or a kill may come after the one commit: every
                // entry recorded, the source reconciled with the target.
                // Whether that state is the oracle's is the other half's
                // question, asked when a rerun passes.
                let committed_whole = code.is_none_or(|c| c == FAULT_EXIT)
                    && applied == journal
                    && carried(&now) == target;
                if now != baseline && !committed_whole {
                    let run = match code {
                        Some(c @ (1 | 2)) => format!("a replay that exited {c}"),
                        Some(_) => "a replay crashed at its fault point".to_string(),
                        None => "a killed replay".to_string(),
                    };
                    failures.push((
                        Half::NothingUnlessPassed,
                        format!("{run} changed {}", differing(&now, &baseline)),
                    ));
                    let _ = writeln!(log, "  source now: {:?}", now);
                    let _ = writeln!(log, "  applied now: {:?}", now.applied);
                }
                if committed_whole {
                    baseline = now;
                }
            }
            Some(other) => {
                failures.push((
                    Half::NothingUnlessPassed,
                    format!("exit {other}, none of 0, 1, 2 or a crash point's"),
                ));
                let _ = writeln!(log, "  exit {other}");
            }
        }
    }
    if must_pass && !passed {
        failures.push((
            Half::PassAsTheStatementsWould,
            format!("a case the oracle applies cleanly did not end in a pass ({final_reason})"),
        ));
    }
    failures.sort_unstable();
    failures.dedup();
    Outcome { failures, log }
}

/// Why a run did not pass, in general terms (no keys or values): its exit
/// and the conflict's reason, or that the closing reconcile differed.
fn why(out: &support::Output) -> String {
    let code = out
        .code
        .map_or("killed by a signal".to_string(), |c| format!("exit {c}"));
    let Ok(j) = serde_json::from_str::<serde_json::Value>(&out.stdout) else {
        return format!("{code}: {}", out.stderr.lines().next().unwrap_or_default());
    };
    if let Some(reason) = j["conflict"]["reason"].as_str() {
        // "source.db refuses the row: UNIQUE constraint failed: acct.email"
        return format!("{code}: conflict: {reason}");
    }
    if j["reconciliation"]["diffs_found"].as_i64().unwrap_or(0) > 0 {
        return format!("{code}: the closing reconcile differs");
    }
    format!("{code}: verdict {}", j["verdict"])
}

/// A run's exit and the gist of its JSON report.
fn brief(out: &support::Output) -> String {
    let code = out
        .code
        .map_or("killed by a signal".to_string(), |c| format!("exit {c}"));
    match serde_json::from_str::<serde_json::Value>(&out.stdout) {
        Ok(j) => {
            let mut gist = serde_json::Map::new();
            for k in [
                "verdict",
                "applied",
                "already_in_place",
                "previously_applied",
                "batches",
                "conflict",
                "summary",
                "orphans",
                "accepted",
            ] {
                if let Some(v) = j.get(k) {
                    gist.insert(k.to_string(), v.clone());
                }
            }
            format!("{code} {}", serde_json::Value::Object(gist))
        }
        Err(_) => format!(
            "{code} stdout {:?} stderr {:?}",
            out.stdout.trim(),
            out.stderr.trim()
        ),
    }
}

// The two halves of one property, over the same cases, so that each
// shrinks to its own smallest failure.
proptest! {
    #![proptest_config(cases(48))]

    #[test]
    fn a_replay_that_does_not_pass_leaves_the_source_as_it_was(c in case()) {
        let o = run_case(&c);
        let failures = o.of(Half::NothingUnlessPassed);
        prop_assert!(failures.is_empty(), "{:?}\n{}", failures, o.log);
    }

    #[test]
    fn a_replay_that_passes_leaves_what_the_statements_would_and_one_that_can_passes(c in case()) {
        let o = run_case(&c);
        let failures = o.of(Half::PassAsTheStatementsWould);
        prop_assert!(failures.is_empty(), "{:?}\n{}", failures, o.log);
    }
}

/// Many cases, each run to its end: how many fail, in which way, with the
/// smallest journal of each kind. `cargo test --test replay_atomicity survey
/// -- --ignored --nocapture` (`PROPTEST_CASES` cases, 200 by default).
#[test]
#[ignore = "a survey, not a check: prints counts of each kind of failure"]
fn survey() {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut runner = TestRunner::default();
    let strategy = case();
    let mut kinds: BTreeMap<Vec<(Half, String)>, (u32, Case, String)> = BTreeMap::new();
    let mut must_pass = 0;
    for _ in 0..n {
        let c = strategy.new_tree(&mut runner).expect("a case").current();
        let o = run_case(&c);
        if o.log.contains("must pass: true") {
            must_pass += 1;
        }
        let size = |c: &Case| c.writes.len() + c.attempts.len();
        kinds
            .entry(o.failures)
            .and_modify(|(count, smallest, log)| {
                *count += 1;
                if size(&c) < size(smallest) {
                    *smallest = c.clone();
                    log.clone_from(&o.log);
                }
            })
            .or_insert((1, c.clone(), o.log));
    }
    eprintln!("{n} cases, {must_pass} of them the oracle applies cleanly");
    for (failures, (count, c, log)) in &kinds {
        eprintln!("\n=== {count} cases: {failures:?}\nsmallest: {c:#?}\n{log}");
    }
}

/// Without source triggers, replay folds a key deleted and inserted again
/// in one batch into an update in place; a row that takes the deleted
/// row's UNIQUE email between the two must find it free, as it did under
/// the application (the smallest case the property found).
#[test]
fn a_row_that_takes_the_email_of_one_deleted_and_inserted_again_in_the_batch_replays() {
    for batch in [Some(3), None] {
        let c = Case {
            initial: vec![(2, 0, 0, 0, 0), (4, 1, 0, 0, 0)],
            writes: vec![Write::SwapThroughDelete {
                a: 2,
                b: 4,
                cents: 0,
                note: 0,
            }],
            edit: SourceEdit::None,
            batch,
            triggers: false,
            attempts: Vec::new(),
        };
        let o = run_case(&c);
        assert!(o.failures.is_empty(), "{:?}\n{}", o.failures, o.log);
    }
}

/// Without source triggers, a key deleted and inserted again in one batch
/// with a note the source cannot hold, then changed to one it can: the
/// application's statements would have stopped at the insert, so replay
/// writes nothing rather than pass by the net effect of the three.
#[test]
fn a_value_the_source_refuses_between_a_re_insert_and_a_later_write_fails_the_replay() {
    for batch in [Some(3), None] {
        let c = Case {
            initial: vec![(1, 0, 0, 0, 0)],
            writes: vec![
                Write::Delete { id: 1 },
                Write::Insert {
                    id: 1,
                    email: 0,
                    cents: 0,
                    note: 3,
                },
                Write::Note { id: 1, note: 0 },
            ],
            edit: SourceEdit::None,
            batch,
            triggers: false,
            attempts: Vec::new(),
        };
        let o = run_case(&c);
        assert!(o.failures.is_empty(), "{:?}\n{}", o.failures, o.log);
    }
}
