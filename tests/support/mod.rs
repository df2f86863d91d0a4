//! The harness every integration test uses: a temporary folder ([`Dir`])
//! holding a spec and the migration's databases, the built `cutover` binary
//! run inside it, and helpers to read the databases back row by row or the
//! folder byte by byte.
//!
//! - `engine.rs`: the seam to the database engine ([`Engine`]; SQLite today),
//!   which every fixture goes through;
//! - `mysql.rs`: a MySQL or MariaDB database per test, and an application
//!   user with ordinary grants, through the `mariadb` command-line client;
//! - `conformance.rs`: the engines the interface contracts of
//!   `tests/conformance.rs` run on;
//! - `spec.rs`: the spec builder ([`Spec`], [`Table`], [`Column`]);
//! - `run.rs`: running the binary ([`Cmd`], [`Output`]) and other processes;
//! - `feed.rs`: the change-feed fixtures (invoices, items) and feed lines;
//! - `golden.rs`: golden files;
//! - `workload.rs`: the seeded workloads of the adversarial suites.

#![allow(
    dead_code,
    unused_macros,
    unused_imports,
    reason = "each test binary uses a different part of the shared harness"
)]

pub mod conformance;
pub mod engine;
pub mod feed;
pub mod golden;
pub mod layout;
pub mod mysql;
pub mod postgres;
pub mod run;
pub mod seam;
pub mod spec;
pub mod workload;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use rusqlite::types::Value;

pub use engine::{Engine, Image, Rows, Sqlite};
pub use golden::{assert_golden, first_difference, repo_path};
pub use layout::Layout;
pub use run::{
    Cmd, FAULT_EXIT, Output, PY_WRITE, assert_no_panic, cutover, cutover_in, python, sh,
};
pub use seam::Seam;
pub use spec::{Column, Lit, Spec, Table};
pub use workload::{JournalJson, applied_seqs, fenced_orders_workload, journal_json, journal_seqs};

/// The engines whose tests may never skip: `CUTOVER_REQUIRE_ENGINES`, a
/// comma-separated list of `sqlite`, `postgres` and `mysql` (`.ci/run` names
/// all three); under `CI` every engine is required.
pub fn required_engines(ci: bool, listed: Option<&str>) -> Vec<&'static str> {
    const ALL: [&str; 3] = ["sqlite", "postgres", "mysql"];
    if ci {
        return ALL.to_vec();
    }
    let mut out = Vec::new();
    for name in listed.unwrap_or("").split(',').map(str::trim) {
        if name.is_empty() {
            continue;
        }
        let Some(known) = ALL.iter().find(|a| a.eq_ignore_ascii_case(name)) else {
            panic!(
                "CUTOVER_REQUIRE_ENGINES names {name:?}, not an engine: write sqlite, postgres or mysql"
            );
        };
        out.push(*known);
    }
    out
}

/// A test needs `engine`'s server (`postgres` or `mysql`) and none
/// answered: a failure when the engine is required
/// ([`required_engines`]), else one line saying the test skipped.
pub fn no_server(test: &str, engine: &str, why: &dyn fmt::Display) {
    let listed = std::env::var("CUTOVER_REQUIRE_ENGINES").ok();
    let required = required_engines(std::env::var_os("CI").is_some(), listed.as_deref());
    assert!(
        !required.contains(&engine),
        "{test} needs a {engine} server, which is required here (CI or CUTOVER_REQUIRE_ENGINES), and none answered: {why}"
    );
    println!("skipping {test}: no {engine} server ({why})");
}

/// The running example's fixtures, compiled in so tests run from any folder.
pub const ORDERS_SPEC: &str = include_str!("../../fixtures/orders/spec.toml");
pub const ORDERS_SOURCE: &str = include_str!("../../fixtures/orders/source.sql");
pub const ORDERS_TARGET: &str = include_str!("../../fixtures/orders/target.sql");
pub const ORDERS_APP_WRITES: &str = include_str!("../../fixtures/orders/app_writes.sql");

/// A schema script with every word `from` (a type name, any case) written
/// `to`; quoted literals are left as written.
pub fn retyped(sql: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.eq_ignore_ascii_case(from) {
            out.push_str(to);
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in sql.chars() {
        if quoted {
            out.push(c);
            quoted = c != '\'';
        } else if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            quoted = c == '\'';
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Drafts `spec` with `cutover init` from `source` to `target`, then takes
/// in the lines its `DECIDE` comments offer, as the operator who read them
/// would: each commented `# source_limit = …` (the hazards accepted) and
/// `# replay_policy = …` (the triggers let fire). The draft as `init`
/// wrote it is returned.
pub fn init_and_decide(source: &str, target: &str, spec: &Path) -> String {
    run::cutover(&[
        "init",
        "--source",
        source,
        "--target",
        target,
        "--out",
        spec.to_str().expect("a UTF-8 path"),
    ])
    .expect(0);
    let draft = std::fs::read_to_string(spec).expect("the drafted spec");
    let decided = draft
        .replace("\n# source_limit = ", "\nsource_limit = ")
        .replace("\n# replay_policy = ", "\nreplay_policy = ");
    std::fs::write(spec, decided).expect("the spec");
    draft
}

/// The spec file name every `Dir` uses.
pub const SPEC: &str = "spec.toml";

/// A temporary folder that holds one migration: spec, source and target.
pub struct Dir {
    tmp: tempfile::TempDir,
    engine: Box<dyn Engine>,
}

impl Dir {
    /// An empty folder whose databases are SQLite files in it; `name` only
    /// makes it recognisable in `/tmp`.
    pub fn new(name: &str) -> Dir {
        Dir::with_engine(name, |path| Box::new(Sqlite::new(path)))
    }

    /// An empty folder whose databases `engine` (given the folder) keeps:
    /// where a test parameterised over engines starts.
    pub fn with_engine(name: &str, engine: impl FnOnce(&Path) -> Box<dyn Engine>) -> Dir {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("cutover-test-{name}-"))
            .tempdir()
            .expect("creating a temporary folder");
        let engine = engine(tmp.path());
        Dir { tmp, engine }
    }

    /// An empty folder whose databases are where `layout` puts them.
    pub fn on(layout: Layout, name: &str) -> Dir {
        Dir::with_engine(name, |path| layout.engine(path))
    }

    /// [`Dir::with`] in a layout: `spec` rendered with its engines' urls.
    pub fn with_on(layout: Layout, name: &str, spec: &Spec, source: &str, target: &str) -> Dir {
        let d = Dir::on(layout, name);
        d.spec(spec);
        d.create_db("source.db", source);
        d.create_db("target.db", target);
        d
    }

    /// The running example before anything ran, in a layout.
    pub fn orders_on(layout: Layout, name: &str) -> Dir {
        Dir::with_on(layout, name, &Spec::orders(), ORDERS_SOURCE, ORDERS_TARGET)
    }

    /// The running example loaded, in a layout.
    pub fn orders_loaded_on(layout: Layout, name: &str) -> Dir {
        let d = Dir::orders_on(layout, name);
        d.run(&["load"], 0);
        d
    }

    /// The running example after the application's writes, in a layout:
    /// loaded, journaled, then `app_writes.sql` run by the target engine's
    /// own client in another process.
    pub fn orders_after_writes_on(layout: Layout, name: &str) -> Dir {
        let d = Dir::orders_loaded_on(layout, name);
        d.run(&["journal", "install"], 0);
        d.client("target.db", ORDERS_APP_WRITES);
        d
    }

    /// The running example fenced, ready to replay, in a layout.
    pub fn orders_fenced_on(layout: Layout, name: &str) -> Dir {
        let d = Dir::orders_after_writes_on(layout, name);
        d.run(&["fence", "on"], 0);
        d
    }

    /// A folder holding `spec.toml` and the two databases built from scripts.
    pub fn with(name: &str, spec: &(impl AsSpec + ?Sized), source: &str, target: &str) -> Dir {
        let d = Dir::new(name);
        d.spec(spec);
        d.create_db("source.db", source);
        d.create_db("target.db", target);
        d
    }

    /// The running example, before anything ran: the fixture spec, the
    /// source with orders 101, 102, 103 and the empty target.
    pub fn orders(name: &str) -> Dir {
        Dir::with(name, ORDERS_SPEC, ORDERS_SOURCE, ORDERS_TARGET)
    }

    /// The running example loaded and gated clean.
    pub fn orders_loaded(name: &str) -> Dir {
        let d = Dir::orders(name);
        d.run(&["load"], 0);
        d
    }

    /// The running example at the moment of the rollback decision: loaded,
    /// journaled, the application's writes made (101 → 1400, 104 inserted,
    /// 103 deleted), fence not yet on.
    pub fn orders_after_writes(name: &str) -> Dir {
        let d = Dir::orders_loaded(name);
        d.run(&["journal", "install"], 0);
        d.exec("target.db", ORDERS_APP_WRITES);
        d
    }

    /// The running example fenced at boundary 3, ready to replay.
    pub fn orders_fenced(name: &str) -> Dir {
        let d = Dir::orders_after_writes(name);
        d.run(&["fence", "on"], 0);
        d
    }

    /// The engine holding this folder's databases.
    pub fn engine(&self) -> &dyn Engine {
        self.engine.as_ref()
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path().join(name)
    }

    pub fn exists(&self, name: impl AsRef<Path>) -> bool {
        self.join(name).exists()
    }

    /// Writes a file; returns its path.
    pub fn write(&self, name: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.join(name);
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
        p
    }

    /// Writes `spec.toml`: TOML text as it is, a [`Spec`] rendered with this
    /// folder's engine.
    pub fn spec(&self, spec: &(impl AsSpec + ?Sized)) {
        self.spec_file(SPEC, spec);
    }

    /// Writes a spec under another name (`b.toml`).
    pub fn spec_file(&self, name: &str, spec: &(impl AsSpec + ?Sized)) {
        self.write(name, spec.spec_text(self.engine()));
    }

    /// Creates a database from a script; it must not exist yet.
    pub fn create_db(&self, name: &str, sql: &str) {
        self.engine.create(name, sql);
    }

    /// Creates database `to` as a copy of `name` (an oracle, a second
    /// source); `to` must not exist yet.
    pub fn copy_db(&self, name: &str, to: &str) {
        self.engine.copy_db(name, to);
    }

    /// A SQLite connection of the test's own, as any other writer would
    /// have: for the tests that need SQLite itself (a transaction held open,
    /// triggers switched off, a `PRAGMA`).
    pub fn conn(&self, name: &str) -> Connection {
        self.engine
            .as_sqlite()
            .unwrap_or_else(|| {
                panic!(
                    "a connection of its own needs SQLite, not {}",
                    self.engine.name()
                )
            })
            .connect(name)
    }

    /// Runs SQL on a database and panics if it fails.
    pub fn exec(&self, name: &str, sql: &str) {
        self.engine
            .exec(name, sql)
            .unwrap_or_else(|e| panic!("running SQL on {name}: {e}\n{sql}"));
    }

    /// Runs a script on a database through its engine's own client in
    /// another process (Python's `sqlite3`, `psql`), as the application
    /// would; panics if it fails.
    pub fn client(&self, name: &str, sql: &str) {
        self.try_client(name, sql)
            .unwrap_or_else(|e| panic!("running SQL on {name} from another process: {e}\n{sql}"));
    }

    /// The same, returning the client's error message, if any.
    pub fn try_client(&self, name: &str, sql: &str) -> Result<(), String> {
        self.engine.client(self.path(), name, sql)
    }

    /// The engine holding database `name` (`sqlite`, `postgres`).
    pub fn engine_of(&self, name: &str) -> &'static str {
        self.engine.engine_of(name)
    }

    /// Runs SQL on a database and returns the error message, if any.
    pub fn try_exec(&self, name: &str, sql: &str) -> Result<(), String> {
        self.engine.exec(name, sql)
    }

    /// Every row of a query, storage classes kept.
    pub fn query(&self, name: &str, sql: &str) -> Rows {
        self.engine
            .query(name, sql)
            .unwrap_or_else(|e| panic!("querying {name}: {e}\n{sql}"))
    }

    /// Every row of a query, or the engine's error message.
    pub fn try_query(&self, name: &str, sql: &str) -> Result<Rows, String> {
        self.engine.query(name, sql)
    }

    /// One integer from a query such as `SELECT count(*) …`.
    pub fn int(&self, name: &str, sql: &str) -> i64 {
        match self.query(name, sql).first().and_then(|r| r.first()) {
            Some(Value::Integer(i)) => *i,
            other => panic!("querying {name}: {other:?} is not an integer\n{sql}"),
        }
    }

    /// A table's whole content, ordered by its primary key.
    pub fn dump(&self, name: &str, table: &str) -> Rows {
        self.engine.dump(name, table)
    }

    /// The id counters a database keeps outside its tables: each
    /// sequence's `last_value` and `is_called` on PostgreSQL, each table's
    /// `AUTO_INCREMENT` on MySQL (cutover's own aside); none on SQLite,
    /// whose `sqlite_sequence` is a table.
    pub fn counters(&self, name: &str) -> Rows {
        match self.engine_of(name) {
            "postgres" => {
                let mut out = Vec::new();
                for r in self.query(
                    name,
                    "SELECT sequencename::text FROM pg_sequences
                     WHERE schemaname = current_schema() ORDER BY 1",
                ) {
                    let Value::Text(seq) = &r[0] else {
                        panic!("a sequence name read as {r:?}")
                    };
                    out.extend(self.query(
                        name,
                        &format!("SELECT '{seq}', last_value, is_called FROM \"{seq}\""),
                    ));
                }
                out
            }
            "mysql" => self.query(
                name,
                "SELECT TABLE_NAME, AUTO_INCREMENT FROM information_schema.TABLES
                 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME NOT LIKE '\\_cutover\\_%'
                 ORDER BY TABLE_NAME",
            ),
            _ => Vec::new(),
        }
    }

    /// The rows of a table; 0 when the table does not exist.
    pub fn count(&self, name: &str, table: &str) -> i64 {
        self.engine.count(name, table)
    }

    /// Journal entries recorded as applied in `name` (the source): the sum
    /// of its runs; 0 before the first replay.
    pub fn applied_entries(&self, name: &str) -> i64 {
        if !self.has_table(name, "_cutover_applied") {
            return 0;
        }
        let as_integer = match self.engine_of(name) {
            "mysql" => "SIGNED",
            _ => "bigint",
        };
        self.int(
            name,
            &format!(
                "SELECT CAST(coalesce(sum(entries), 0) AS {as_integer}) FROM _cutover_applied"
            ),
        )
    }

    /// The journal seqs recorded as applied in `name` (the source), in
    /// order: each run (`first_seq..=seq`) read over the seqs the journal of
    /// `journal` (the target) holds, so that a run across a gap in the
    /// numbering reads right. Panics when a run holds other than its
    /// `entries` journal entries, or two runs overlap.
    pub fn applied_seqs(&self, name: &str, journal: &str) -> Vec<i64> {
        if !self.has_table(name, "_cutover_applied") {
            return Vec::new();
        }
        let int = |v: &Value| match v {
            Value::Integer(i) => *i,
            other => panic!("{other:?} is not an integer"),
        };
        let held: Vec<i64> = self
            .query(journal, "SELECT seq FROM _cutover_journal ORDER BY seq")
            .iter()
            .map(|r| int(&r[0]))
            .collect();
        let mut out = Vec::new();
        let mut last_of_previous = i64::MIN;
        for run in self.query(
            name,
            "SELECT coalesce(first_seq, seq), seq, entries FROM _cutover_applied ORDER BY seq",
        ) {
            let (first, last, entries) = (int(&run[0]), int(&run[1]), int(&run[2]));
            assert!(
                first > last_of_previous && first <= last,
                "applied run {first}..{last} overlaps the one before (ending {last_of_previous})"
            );
            let covered: Vec<i64> = held
                .iter()
                .copied()
                .filter(|s| (first..=last).contains(s))
                .collect();
            assert_eq!(
                covered.len() as i64,
                entries,
                "applied run {first}..{last} records {entries} entries; the journal holds {covered:?} there"
            );
            out.extend(covered);
            last_of_previous = last;
        }
        out
    }

    /// Whether a database has a table (control tables included).
    pub fn has_table(&self, name: &str, table: &str) -> bool {
        self.engine.tables(name).contains(table)
    }

    /// One database's catalogue and every table's rows, to say exactly what
    /// changed, table by table.
    pub fn image(&self, name: &str) -> Image {
        self.engine.image(name)
    }

    /// Panics naming each table of `name` that differs from `before`.
    #[track_caller]
    pub fn assert_db_unchanged(&self, name: &str, before: &Image, what: &dyn fmt::Display) {
        before.assert_same(&self.image(name), what);
    }

    /// The exact bytes of a file.
    pub fn bytes(&self, name: impl AsRef<Path>) -> Vec<u8> {
        let p = self.join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
    }

    /// Everything "nothing changed" compares: every file in the folder with
    /// its bytes (SQLite's databases among them), and an image of each
    /// database the engine keeps elsewhere.
    pub fn snapshot(&self) -> Snapshot {
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(self.path()).expect("listing the folder") {
            let entry = entry.expect("listing the folder");
            if entry.file_type().expect("file type").is_file() {
                let name = entry.file_name().to_string_lossy().into_owned();
                files.insert(name, std::fs::read(entry.path()).expect("reading a file"));
            }
        }
        let databases = self
            .engine
            .external()
            .into_iter()
            .map(|db| {
                let image = self.engine.image(&db);
                (db, image)
            })
            .collect();
        Snapshot { files, databases }
    }

    /// Panics naming every file and database that differs from `before`.
    #[track_caller]
    pub fn assert_unchanged(&self, before: &Snapshot, what: &str) {
        let after = self.snapshot();
        let mut changed = Vec::new();
        for (name, bytes) in &before.files {
            match after.files.get(name) {
                None => changed.push(format!("{name} was removed")),
                Some(b) if b != bytes && !same_but_verdicts(bytes, b) => {
                    changed.push(format!("{name} changed"))
                }
                _ => {}
            }
        }
        for name in after.files.keys() {
            if !before.files.contains_key(name) {
                changed.push(format!("{name} was created"));
            }
        }
        for (db, image) in &before.databases {
            match after.databases.get(db) {
                None => changed.push(format!("database {db} was removed")),
                Some(i) => changed.extend(
                    image
                        .differences(i)
                        .into_iter()
                        .map(|d| format!("in database {db}, {d}")),
                ),
            }
        }
        assert!(
            changed.is_empty(),
            "{what}: the folder was supposed to be left exactly as it was, but {}",
            changed.join(", ")
        );
    }

    /// A second folder holding byte-for-byte copies of this one's files.
    pub fn copy(&self, name: &str) -> Dir {
        let d = Dir::new(name);
        assert!(
            self.engine.external().is_empty(),
            "copying databases kept outside the folder is not implemented"
        );
        for (file, bytes) in self.snapshot().files {
            std::fs::write(d.join(&file), bytes).expect("copying a file");
        }
        d
    }

    /// `cutover ARGS` run in this folder, arguments exactly as given.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Cmd {
        let mut c = Cmd::new(Some(self.path()));
        for a in args {
            c.arg(a);
        }
        c
    }

    /// `cutover ARGS --spec spec.toml`.
    pub fn cutover(&self, args: &[&str]) -> Cmd {
        let mut c = self.command(args);
        c.arg("--spec").arg(SPEC);
        c
    }

    /// `cutover --format json ARGS --spec spec.toml`.
    pub fn cutover_json(&self, args: &[&str]) -> Cmd {
        let mut c = self.command(&["--format", "json"]);
        for a in args {
            c.arg(a);
        }
        c.arg("--spec").arg(SPEC);
        c
    }

    /// `cutover ARGS --spec spec.toml`, which must exit with `code`.
    #[track_caller]
    pub fn run(&self, args: &[&str], code: i32) -> Output {
        self.cutover(args).expect(code)
    }

    /// `cutover --format json ARGS --spec spec.toml`, which must exit with
    /// `code` and print exactly one JSON document.
    #[track_caller]
    pub fn json(&self, args: &[&str], code: i32) -> serde_json::Value {
        self.cutover_json(args).expect(code).json()
    }
}

/// Whether two versions of a folder's file are SQLite databases that hold
/// the same schema and rows but for the replay verdicts
/// ([`engine::VERDICTS`]), which every replay that ends records.
fn same_but_verdicts(before: &[u8], after: &[u8]) -> bool {
    let (Some(b), Some(a)) = (before.get(..16), after.get(..16)) else {
        return false;
    };
    if b != b"SQLite format 3\0" || a != b {
        return false;
    }
    let tmp = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(tmp.path().join("before.db"), before).expect("writing a copy");
    std::fs::write(tmp.path().join("after.db"), after).expect("writing a copy");
    let engine = Sqlite::new(tmp.path());
    let (b, a) = (engine.image("before.db"), engine.image("after.db"));
    b.differences(&a).is_empty()
}

/// What a spec file holds: TOML text as it is, or a [`Spec`] rendered with
/// the folder's engine.
pub trait AsSpec {
    fn spec_text(&self, engine: &dyn Engine) -> String;
}

impl AsSpec for str {
    fn spec_text(&self, _: &dyn Engine) -> String {
        self.to_string()
    }
}

impl AsSpec for String {
    fn spec_text(&self, _: &dyn Engine) -> String {
        self.clone()
    }
}

impl AsSpec for Spec {
    fn spec_text(&self, engine: &dyn Engine) -> String {
        self.render_with(&|db| engine.url(db))
    }
}

/// Every file of a folder with its bytes, and the images of the databases
/// kept outside it.
#[derive(Clone, PartialEq)]
pub struct Snapshot {
    pub files: BTreeMap<String, Vec<u8>>,
    pub databases: BTreeMap<String, Image>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.files.iter().map(|(k, v)| (k, v.len())))
            .entries(self.databases.iter().map(|(k, v)| (k, v.tables.len())))
            .finish()
    }
}

/// A tiny seeded generator (SplitMix64), so that tests that pick random
/// values or delays do the same thing on every run for a given seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo < hi, "empty range {lo}..{hi}");
        lo + self.next_u64() % (hi - lo)
    }
}

/// Canonical decimal text of cents at scale 2, as the reverse transform
/// writes it: `1250` → `"12.50"`, `-1` → `"-0.01"`.
pub fn dollars(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let a = cents.unsigned_abs();
    format!("{sign}{}.{:02}", a / 100, a % 100)
}

/// An integer SQL value, for comparing dumps.
pub fn int(i: i64) -> Value {
    Value::Integer(i)
}

/// A text SQL value, for comparing dumps.
pub fn text(t: &str) -> Value {
    Value::Text(t.to_string())
}

/// One scenario, one `#[test]` per layout. The scenario is an ordinary
/// function of the file taking a [`Layout`]; `each_layout!(name)` adds a
/// module of the same name with a test per layout
/// (`gate_mismatch_exits_1::sqlite_to_pg`), each running that one body. A
/// layout that needs a PostgreSQL server skips with one line when none
/// answers, unless its engine is required (`no_server`).
///
/// ```ignore
/// /// What it proves.
/// fn load_then_gate_passes(layout: Layout) {
///     let d = Dir::orders_loaded_on(layout, "load-gate");
///     d.run(&["gate"], 0);
/// }
/// each_layout!(load_then_gate_passes);
/// ```
///
/// A scenario that must leave a layout out lists the ones it runs on:
/// `each_layout!(name: [sqlite, pg_to_pg])`.
macro_rules! each_layout {
    ($name:ident) => {
        $crate::support::each_layout!($name: [sqlite, sqlite_to_pg, pg_to_pg, pg_to_sqlite, my_to_pg, sqlite_to_my, pg_to_my, my_to_my]);
    };
    ($name:ident: [$($l:ident),+ $(,)?]) => {
        mod $name {
            $(
                #[test]
                fn $l() {
                    $crate::support::Layout::named(stringify!($l))
                        .run(concat!(module_path!(), "::", stringify!($l)), super::$name);
                }
            )+
        }
    };
}
pub(crate) use each_layout;

/// The applied set's contract on any engine, in a fresh database: replay
/// batches are recorded as runs that never overlap, a feed's entries one by
/// one, per journal, rolled back with their transaction (part of
/// `tests/conformance.rs`, which runs it on every engine).
pub fn applied_set_contract(db: &cutover::db::Db) -> anyhow::Result<()> {
    let a = db.applied_set();
    let progress = |j: &str| -> anyhow::Result<(i64, i64)> {
        let p = a.progress(j)?;
        Ok((p.entries, p.last))
    };
    assert_eq!(progress("j1")?, (0, 0));
    assert_eq!(a.last("j1")?, 0);
    db.write(|| a.ensure())?;
    db.write(|| a.ensure())?;
    let at = db.control().now()?;
    db.write(|| {
        // A feed's entries, each a run of one: once only.
        assert_eq!(a.record_entries("j1", &[1], "d1", &at)?, 1);
        assert_eq!(a.record_entries("j1", &[1], "d1", &at)?, 0);
        // A batch: entries 2, 3 and 5 (the journal has no 4), one run.
        assert_eq!(a.record_run("j1", &[2, 3, 5], "d2")?, 3);
        // Any run meeting a recorded one records nothing: the same batch,
        // one that only shares an entry inside it, or one that covers it.
        assert_eq!(a.record_run("j1", &[2, 3, 5], "d2")?, 0);
        assert_eq!(a.record_run("j1", &[3], "d2")?, 0);
        assert_eq!(a.record_run("j1", &[0, 6], "d2")?, 0);
        // A feed's entry inside a recorded run was applied; the others of
        // its delivery are recorded, each once.
        assert_eq!(a.record_entries("j1", &[4, 6, 7], "d1", &at)?, 2);
        assert_eq!(a.record_run("j2", &[], "d2")?, 0);
        assert_eq!(a.record_run("j2", &[7], "d3")?, 1);
        Ok(())
    })?;
    for (seq, applied) in [
        (0, false),
        (1, true),
        (2, true),
        (3, true),
        (5, true),
        (6, true),
        (7, true),
        (8, false),
    ] {
        assert_eq!(a.is_applied("j1", seq)?, applied, "entry {seq} of j1");
    }
    assert!(!a.is_applied("j2", 5)?);
    assert!(a.is_applied("j2", 7)?);
    assert_eq!(progress("j1")?, (6, 7));
    assert_eq!(a.last("j1")?, 7);
    assert_eq!(progress("j2")?, (1, 7));
    assert_eq!(progress("j3")?, (0, 0));

    // Rolled back with the transaction, like the rows it describes.
    let tx = db.begin_write()?;
    a.record_run("j1", &[9, 10], "d4")?;
    tx.rollback();
    assert_eq!(a.last("j1")?, 7);
    assert_eq!(progress("j1")?, (6, 7));
    Ok(())
}

/// An applied set written before runs were recorded (one row per entry,
/// without `first_seq` and `entries`) gains the run columns and reads as
/// runs of one; replay goes on after it. `db` is a fresh database.
pub fn older_applied_set_upgrades(db: &cutover::db::Db) -> anyhow::Result<()> {
    db.fixtures().execute_script(
        "CREATE TABLE _cutover_applied (
             journal TEXT NOT NULL, seq bigint NOT NULL, delivery TEXT NOT NULL,
             applied_at TEXT NOT NULL, PRIMARY KEY (journal, seq));
         INSERT INTO _cutover_applied VALUES
             ('j1', 1, 'd1', '2026-01-01T00:00:00.000Z'),
             ('j1', 2, 'd1', '2026-01-01T00:00:00.000Z');",
    )?;
    let a = db.applied_set();
    let tx = db.begin_write()?;
    a.ensure()?;
    let p = a.progress("j1")?;
    assert_eq!((p.entries, p.last), (2, 2));
    assert!(a.is_applied("j1", 2)?);
    assert_eq!(a.record_run("j1", &[2, 3], "d2")?, 0);
    assert_eq!(a.record_run("j1", &[3, 4], "d2")?, 2);
    tx.commit()?;
    let p = a.progress("j1")?;
    assert_eq!((p.entries, p.last), (4, 4));
    assert!(!a.is_applied("j1", 5)?);
    Ok(())
}
