//! The harness every integration test uses: a temporary folder holding a
//! spec and SQLite files, the built `cutover` binary run inside it, and
//! helpers to read databases back row by row or byte by byte.
//!
//! Modelled on ripgrep's `tests/util.rs`: a command that exits with a code the
//! test did not expect panics with the command, its folder, the status and
//! everything it printed, so a failure explains itself in CI logs.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the shared harness"
)]

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rusqlite::Connection;
use rusqlite::types::Value;

/// The running example's fixtures, compiled in so tests run from any folder.
pub const ORDERS_SPEC: &str = include_str!("../../fixtures/orders/spec.toml");
pub const ORDERS_SOURCE: &str = include_str!("../../fixtures/orders/source.sql");
pub const ORDERS_TARGET: &str = include_str!("../../fixtures/orders/target.sql");
pub const ORDERS_APP_WRITES: &str = include_str!("../../fixtures/orders/app_writes.sql");

/// The exit code of a `CUTOVER_FAULT` crash point.
pub const FAULT_EXIT: i32 = 73;

/// The spec file name every `Dir` uses.
pub const SPEC: &str = "spec.toml";

/// A table as `SELECT * … ORDER BY 1` returns it, storage classes kept.
pub type Rows = Vec<Vec<Value>>;

/// A temporary folder that holds one migration: spec, source and target.
pub struct Dir {
    tmp: tempfile::TempDir,
}

impl Dir {
    /// An empty folder; `name` only makes it recognisable in `/tmp`.
    pub fn new(name: &str) -> Dir {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("cutover-test-{name}-"))
            .tempdir()
            .expect("creating a temporary folder");
        Dir { tmp }
    }

    /// The running example, before anything ran: the fixture spec, the
    /// source with orders 101, 102, 103 and the empty target.
    pub fn orders(name: &str) -> Dir {
        let d = Dir::new(name);
        d.write(SPEC, ORDERS_SPEC);
        d.create_db("source.db", ORDERS_SOURCE);
        d.create_db("target.db", ORDERS_TARGET);
        d
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

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path().join(name)
    }

    pub fn exists(&self, name: impl AsRef<Path>) -> bool {
        self.join(name).exists()
    }

    /// Writes a file (the spec, usually).
    pub fn write(&self, name: impl AsRef<Path>, contents: &str) {
        let p = self.join(name);
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
    }

    /// Writes `spec.toml`.
    pub fn spec(&self, toml: &str) {
        self.write(SPEC, toml);
    }

    /// Creates a SQLite database from a script; it must not exist yet.
    pub fn create_db(&self, name: &str, sql: &str) {
        let p = self.join(name);
        assert!(!p.exists(), "{} already exists", p.display());
        let conn = Connection::open(&p).unwrap_or_else(|e| panic!("creating {name}: {e}"));
        conn.execute_batch(sql)
            .unwrap_or_else(|e| panic!("running SQL on new {name}: {e}\n{sql}"));
    }

    /// A connection of the test's own, as any other writer would have.
    pub fn conn(&self, name: &str) -> Connection {
        let p = self.join(name);
        assert!(p.exists(), "{} does not exist", p.display());
        let conn = Connection::open(&p).unwrap_or_else(|e| panic!("opening {name}: {e}"));
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .expect("setting a busy timeout");
        conn
    }

    /// Runs SQL on a database and panics if it fails.
    pub fn exec(&self, name: &str, sql: &str) {
        self.conn(name)
            .execute_batch(sql)
            .unwrap_or_else(|e| panic!("running SQL on {name}: {e}\n{sql}"));
    }

    /// Runs SQL on a database and returns the error message, if any.
    pub fn try_exec(&self, name: &str, sql: &str) -> Result<(), String> {
        self.conn(name)
            .execute_batch(sql)
            .map_err(|e| e.to_string())
    }

    /// Every row of a query, storage classes kept.
    pub fn query(&self, name: &str, sql: &str) -> Rows {
        let conn = self.conn(name);
        let mut st = conn
            .prepare(sql)
            .unwrap_or_else(|e| panic!("preparing on {name}: {e}\n{sql}"));
        let width = st.column_count();
        let rows = st
            .query_map([], |r| {
                (0..width)
                    .map(|i| r.get::<_, Value>(i))
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .unwrap_or_else(|e| panic!("querying {name}: {e}\n{sql}"));
        rows.collect::<rusqlite::Result<_>>()
            .unwrap_or_else(|e| panic!("reading rows of {name}: {e}\n{sql}"))
    }

    /// One integer from a query such as `SELECT count(*) …`.
    pub fn int(&self, name: &str, sql: &str) -> i64 {
        self.conn(name)
            .query_row(sql, [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("querying {name}: {e}\n{sql}"))
    }

    /// `SELECT * FROM table ORDER BY 1`: a table's whole content.
    pub fn dump(&self, name: &str, table: &str) -> Rows {
        self.query(
            name,
            &format!(
                "SELECT * FROM \"{}\" ORDER BY 1",
                table.replace('"', "\"\"")
            ),
        )
    }

    /// Whether a database has a table (control tables included).
    pub fn has_table(&self, name: &str, table: &str) -> bool {
        self.conn(name)
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get::<_, i64>(0),
            )
            .expect("reading the catalogue")
            > 0
    }

    /// The exact bytes of a file.
    pub fn bytes(&self, name: impl AsRef<Path>) -> Vec<u8> {
        let p = self.join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
    }

    /// Every file in the folder with its bytes, to prove nothing changed.
    pub fn snapshot(&self) -> Snapshot {
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(self.path()).expect("listing the folder") {
            let entry = entry.expect("listing the folder");
            if entry.file_type().expect("file type").is_file() {
                let name = entry.file_name().to_string_lossy().into_owned();
                files.insert(name, std::fs::read(entry.path()).expect("reading a file"));
            }
        }
        Snapshot(files)
    }

    /// Panics naming every file that differs from `before`.
    pub fn assert_unchanged(&self, before: &Snapshot, what: &str) {
        let after = self.snapshot();
        let mut changed = Vec::new();
        for (name, bytes) in &before.0 {
            match after.0.get(name) {
                None => changed.push(format!("{name} was removed")),
                Some(b) if b != bytes => changed.push(format!("{name} changed")),
                _ => {}
            }
        }
        for name in after.0.keys() {
            if !before.0.contains_key(name) {
                changed.push(format!("{name} was created"));
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
        for (file, bytes) in self.snapshot().0 {
            std::fs::write(d.join(&file), bytes).expect("copying a file");
        }
        d
    }

    /// `cutover ARGS` run in this folder, arguments exactly as given.
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Cmd {
        let mut c = Cmd::new(self.path());
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

    /// `cutover ARGS --spec spec.toml`, which must exit with `code`.
    pub fn run(&self, args: &[&str], code: i32) -> Output {
        self.cutover(args).expect(code)
    }

    /// `cutover --format json ARGS --spec spec.toml`, which must exit with
    /// `code` and print exactly one JSON document.
    pub fn json(&self, args: &[&str], code: i32) -> serde_json::Value {
        let mut c = self.command(&["--format", "json"]);
        for a in args {
            c.arg(a);
        }
        c.arg("--spec").arg(SPEC);
        c.expect(code).json()
    }
}

/// Every file of a folder with its bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot(pub BTreeMap<String, Vec<u8>>);

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, v.len())))
            .finish()
    }
}

/// One run of the binary, not started yet.
pub struct Cmd {
    cwd: PathBuf,
    args: Vec<OsString>,
    envs: Vec<(String, String)>,
}

impl Cmd {
    fn new(cwd: &Path) -> Cmd {
        Cmd {
            cwd: cwd.to_path_buf(),
            args: Vec::new(),
            // Lock tests wait half a second, not ten.
            envs: vec![("CUTOVER_BUSY_TIMEOUT_MS".into(), "500".into())],
        }
    }

    pub fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Cmd {
        self.args.push(a.as_ref().to_os_string());
        self
    }

    pub fn env(&mut self, key: &str, value: &str) -> &mut Cmd {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Runs somewhere other than the folder.
    pub fn current_dir(&mut self, cwd: &Path) -> &mut Cmd {
        self.cwd = cwd.to_path_buf();
        self
    }

    fn build(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cutover"));
        c.args(&self.args).current_dir(&self.cwd);
        // Whatever the developer's shell sets, the test decides.
        c.env_remove("CUTOVER_FAULT");
        for (k, v) in &self.envs {
            c.env(k, v);
        }
        c
    }

    /// The command as a shell would show it.
    pub fn shown(&self) -> String {
        let mut s: Vec<String> = self.envs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push("cutover".into());
        s.extend(self.args.iter().map(|a| a.to_string_lossy().into_owned()));
        s.join(" ")
    }

    /// Runs to the end, whatever the exit code.
    pub fn output(&self) -> Output {
        let out = self
            .build()
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.shown()));
        Output {
            command: self.shown(),
            cwd: self.cwd.clone(),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs to the end; panics with everything it printed unless it exits
    /// with `code`.
    pub fn expect(&self, code: i32) -> Output {
        let out = self.output();
        if out.code != Some(code) {
            panic!("expected exit code {code}\n{out}");
        }
        out
    }

    /// Starts it in the background, output discarded (crash tests kill it).
    pub fn spawn(&self) -> Child {
        self.build()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.shown()))
    }
}

/// What one run of the binary did.
pub struct Output {
    pub command: String,
    pub cwd: PathBuf,
    /// `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// stdout parsed as exactly one JSON document (trailing whitespace only).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not exactly one JSON document: {e}\n{self}"))
    }

    /// stdout and stderr together, for "the message names X" checks.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    /// Panics unless stdout or stderr contains every one of `parts`.
    pub fn assert_mentions(&self, parts: &[&str]) {
        let all = self.all();
        let missing: Vec<&&str> = parts.iter().filter(|p| !all.contains(**p)).collect();
        assert!(
            missing.is_empty(),
            "the output does not mention {missing:?}\n{self}"
        );
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "command: {}", self.command)?;
        writeln!(f, "cwd:     {}", self.cwd.display())?;
        writeln!(
            f,
            "status:  {}",
            self.code
                .map_or("killed by a signal".to_string(), |c| format!("exit {c}"))
        )?;
        writeln!(f, "---- stdout ----\n{}", self.stdout)?;
        write!(f, "---- stderr ----\n{}", self.stderr)
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

/// Runs a Python snippet in another OS process: `python3 -c SCRIPT ARGS…`.
/// Returns (exit code, stdout + stderr).
pub fn python(cwd: &Path, script: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("python3 is installed on the test machine");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A Python program that runs one SQL statement on a database in its own
/// process and commits; it prints `ok`, or the error and exits 3.
pub const PY_WRITE: &str = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=2)
try:
    con.execute(sys.argv[2])
    con.commit()
except sqlite3.Error as e:
    print("error:", e)
    sys.exit(3)
print("ok")
"#;

// --- helpers of the adversarial suites (hostile_*, fence_bypass, concurrency,
// environment, kills, properties) -----------------------------------------------

/// The journal `seq`s recorded as applied in the source, in order (empty
/// before the first replay).
pub fn applied_seqs(d: &Dir) -> Vec<i64> {
    if !d.has_table("source.db", "_cutover_applied") {
        return Vec::new();
    }
    d.query("source.db", "SELECT seq FROM _cutover_applied ORDER BY seq")
        .into_iter()
        .map(|r| match r[0] {
            Value::Integer(i) => i,
            ref other => panic!("_cutover_applied.seq holds {other:?}"),
        })
        .collect()
}

/// The journal `seq`s of the target at or below `boundary`, in order.
pub fn journal_seqs(d: &Dir, boundary: i64) -> Vec<i64> {
    d.query(
        "target.db",
        &format!("SELECT seq FROM _cutover_journal WHERE seq <= {boundary} ORDER BY seq"),
    )
    .into_iter()
    .map(|r| match r[0] {
        Value::Integer(i) => i,
        ref other => panic!("_cutover_journal.seq holds {other:?}"),
    })
    .collect()
}

/// Builds the running example's schema with `rows` orders on both sides
/// (gated clean), installs the journal, lets the "application" make `ops`
/// seeded random writes to the target (updates, inserts, deletes and key
/// changes, one transaction), and fences. Returns the journal entries, all at
/// or below the boundary.
pub fn fenced_orders_workload(d: &Dir, rows: i64, ops: usize, seed: u64) -> i64 {
    let mut rng = Rng::new(seed);
    d.spec(ORDERS_SPEC);
    d.create_db(
        "source.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL);",
    );
    d.create_db("target.db", ORDERS_TARGET);
    let mut live = Vec::with_capacity(rows as usize + ops);
    {
        let mut s = d.conn("source.db");
        let mut t = d.conn("target.db");
        let st = s.transaction().expect("a source transaction");
        let tt = t.transaction().expect("a target transaction");
        {
            let mut si = st
                .prepare("INSERT INTO orders (id, dollars, status) VALUES (?1, ?2, ?3)")
                .expect("preparing");
            let mut ti = tt
                .prepare("INSERT INTO orders (id, cents, status) VALUES (?1, ?2, ?3)")
                .expect("preparing");
            for id in 1..=rows {
                let cents = rng.range(0, 1_000_000) as i64;
                let closed = rng.range(0, 4) == 0;
                si.execute(rusqlite::params![
                    id,
                    dollars(cents),
                    if closed { "C" } else { "A" }
                ])
                .expect("inserting a source row");
                ti.execute(rusqlite::params![
                    id,
                    cents,
                    if closed { "closed" } else { "active" }
                ])
                .expect("inserting a target row");
                live.push(id);
            }
        }
        st.commit().expect("committing the source");
        tt.commit().expect("committing the target");
    }
    d.run(&["gate"], 0);
    d.run(&["journal", "install"], 0);
    {
        let mut t = d.conn("target.db");
        let tx = t.transaction().expect("a target transaction");
        let mut next = rows + 1;
        for _ in 0..ops {
            let pick = rng.range(0, 20);
            if live.is_empty() || (5..8).contains(&pick) {
                let cents = rng.range(0, 1_000_000) as i64;
                tx.execute(
                    "INSERT INTO orders (id, cents, status) VALUES (?1, ?2, 'active')",
                    [next, cents],
                )
                .expect("an application insert");
                live.push(next);
                next += 1;
                continue;
            }
            let i = rng.range(0, live.len() as u64) as usize;
            let id = live[i];
            match pick {
                0..5 | 10..18 => {
                    let cents = rng.range(0, 1_000_000) as i64;
                    let status = if rng.range(0, 2) == 0 {
                        "active"
                    } else {
                        "closed"
                    };
                    tx.execute(
                        "UPDATE orders SET cents = ?1, status = ?2 WHERE id = ?3",
                        rusqlite::params![cents, status, id],
                    )
                    .expect("an application update");
                }
                8..10 | 18 => {
                    tx.execute("DELETE FROM orders WHERE id = ?1", [id])
                        .expect("an application delete");
                    live.swap_remove(i);
                }
                _ => {
                    tx.execute("UPDATE orders SET id = ?1 WHERE id = ?2", [next, id])
                        .expect("an application key change");
                    live[i] = next;
                    next += 1;
                }
            }
        }
        tx.commit().expect("committing the application's writes");
    }
    let json = d.json(&["fence", "on"], 0);
    json["journal_rows"]
        .as_i64()
        .unwrap_or_else(|| panic!("journal_rows in {json:#}"))
}

/// Runs a shell script (`sh -c`) in `cwd`; returns (exit code, stdout +
/// stderr). The environment variable `CUTOVER` holds the binary's path.
pub fn sh(cwd: &Path, script: &str) -> (i32, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(cwd)
        .env("CUTOVER", env!("CARGO_BIN_EXE_cutover"))
        .env("CUTOVER_BUSY_TIMEOUT_MS", "500")
        .env_remove("CUTOVER_FAULT")
        .stdin(Stdio::null())
        .output()
        .expect("sh is installed on the test machine");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Panics if a run of the binary panicked: exit 101 or Rust's panic message.
pub fn assert_no_panic(out: &Output) {
    assert!(
        out.code != Some(101) && !out.stderr.contains("panicked"),
        "the binary panicked\n{out}"
    );
}

/// One journal entry as JSON: `(seq, op, key, old_key, old, new)`; `key` is
/// the array of the first `key_len` columns of the after-image (the
/// before-image for a delete), `old_key` the before-image's when an update
/// changed it, `old`/`new` objects keyed by target column.
pub type JournalJson = (
    i64,
    String,
    serde_json::Value,
    Option<serde_json::Value>,
    Option<serde_json::Value>,
    Option<serde_json::Value>,
);

/// Reads the target's journal back from its image tables.
pub fn journal_json(d: &Dir, key_len: usize) -> Vec<JournalJson> {
    use serde_json::{Value as Json, json};
    let conn = d.conn("target.db");
    let to_json = |v: rusqlite::types::ValueRef<'_>| match v {
        rusqlite::types::ValueRef::Null => Json::Null,
        rusqlite::types::ValueRef::Integer(i) => json!(i),
        rusqlite::types::ValueRef::Real(r) => json!(r),
        rusqlite::types::ValueRef::Text(t) => Json::String(String::from_utf8_lossy(t).into()),
        rusqlite::types::ValueRef::Blob(b) => {
            json!({ "blob": b.iter().map(|x| format!("{x:02x}")).collect::<String>() })
        }
    };
    let mut heads = conn
        .prepare("SELECT j.seq, j.op, j.img, t.columns FROM _cutover_journal j JOIN _cutover_journal_tables t USING (img) ORDER BY j.seq")
        .expect("reading the journal");
    let heads: Vec<(i64, String, i64, String)> = heads
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("reading the journal")
        .collect::<Result<_, _>>()
        .expect("reading the journal");
    let mut out = Vec::new();
    for (seq, op, img, columns) in heads {
        let cols: Vec<String> = serde_json::from_str(&columns).expect("column list");
        let image = |prefix: &str| -> Option<(Json, Json)> {
            let list = (1..=cols.len())
                .map(|i| format!("{prefix}{i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let mut st = conn
                .prepare(&format!(
                    "SELECT {list} FROM _cutover_journal_{img} WHERE seq = ?1"
                ))
                .ok()?;
            st.query_row([seq], |r| {
                let mut obj = serde_json::Map::new();
                let mut key = Vec::new();
                for (i, c) in cols.iter().enumerate() {
                    let v = to_json(r.get_ref(i)?);
                    if i < key_len {
                        key.push(v.clone());
                    }
                    obj.insert(c.clone(), v);
                }
                Ok((Json::Array(key), Json::Object(obj)))
            })
            .ok()
        };
        let (old, new) = match op.as_str() {
            "insert" => (None, image("n")),
            "delete" => (image("o"), None),
            _ => (image("o"), image("n")),
        };
        let key = new
            .as_ref()
            .or(old.as_ref())
            .map(|k| k.0.clone())
            .expect("an image");
        let old_key = match (&old, &new) {
            (Some(o), Some(n)) if o.0 != n.0 => Some(o.0.clone()),
            _ => None,
        };
        out.push((seq, op, key, old_key, old.map(|o| o.1), new.map(|n| n.1)));
    }
    out
}
