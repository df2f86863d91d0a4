//! `cutover watch` after the switch, on SQLite and on PostgreSQL: the
//! application writes (Python's `sqlite3`; `psql` as a role with ordinary
//! grants) a mix of reversible writes and every kind of irreversible one;
//! watch exits 1 naming exactly the entries an oracle computed here finds
//! irreversible, a pass after the operator's fixes exits 0, and the replay
//! after `fence on` then succeeds, the source equal to the target by
//! arithmetic done here. `replay --rehearse` changes nothing in either
//! database. The metrics file parses as the Prometheus text format.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};

use support::postgres::TestDb;

const SOURCE: &str = "
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                     dollars TEXT NOT NULL, status TEXT NOT NULL, ref VARCHAR(4));
INSERT INTO customers VALUES (1, 'Ada'), (2, 'Bo'), (3, 'Cy');
INSERT INTO orders VALUES (101, 1, '12.50', 'A', 'r1'), (102, 2, '7.50', 'C', 'r2'),
                          (103, 1, '20.00', 'A', 'r3');
";

const TARGET: &str = "
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, cents NUMERIC NOT NULL,
                     status TEXT NOT NULL, ref TEXT);
";

const TABLES: &str = r#"
[[tables]]
name = "customers"
key = ["id"]

[[tables.columns]]
source = "name"
target = "name"

[[tables]]
name = "orders"
key = ["id"]
source_limit = { ref = "watch" }

[[tables.columns]]
source = "customer_id"
target = "customer_id"

[[tables.columns]]
source = "dollars"
target = "cents"
transform = "decimal_to_minor"
scale = 2

[[tables.columns]]
source = "status"
target = "status"
transform = "map"
map = { A = "active", C = "closed" }

[[tables.columns]]
source = "ref"
target = "ref"
"#;

/// What the source is made to do after the switch, behind the target's
/// back: a customer deleted (no order refers to it), an order inserted
/// under a key the application then writes too, an order changed.
const SOURCE_AFTER_SWITCH: &str = "
DELETE FROM customers WHERE id = 3;
INSERT INTO orders VALUES (200, 1, '1.00', 'A', 'rx');
UPDATE orders SET dollars = '8.00' WHERE id = 102;
";

/// The operator's fixes of the source: the changed rows settled back to
/// what they were at the switch, the deleted parent restored.
const SOURCE_SETTLED: &str = "
INSERT INTO customers VALUES (3, 'Cy');
DELETE FROM orders WHERE id = 200;
UPDATE orders SET dollars = '7.50' WHERE id = 102;
";

/// The application's writes, one row each, in order: the k-th is seq k.
fn writes(unfixable: bool, postgres: bool) -> Vec<&'static str> {
    let mut w = vec![
        "UPDATE orders SET cents = 1400 WHERE id = 101",
        "INSERT INTO customers VALUES (4, 'Di')",
        // Its parent was brought by the entry before it.
        "INSERT INTO orders VALUES (104, 4, 900, 'active', 'r4')",
        // A status word the source's map does not know.
        "INSERT INTO orders VALUES (105, 1, 500, 'pending', 'r5')",
        // Its parent is gone from the source.
        "INSERT INTO orders VALUES (106, 3, 300, 'active', 'r6')",
        // A key the source already holds.
        "INSERT INTO orders VALUES (200, 2, 100, 'active', 'r7')",
        // A row the source changed since the switch.
        "UPDATE orders SET status = 'active' WHERE id = 102",
        "DELETE FROM orders WHERE id = 103",
    ];
    if unfixable {
        // A fraction of a cent (a PostgreSQL target keeps cents in a
        // bigint, which refuses it itself); NULL where the source says NOT
        // NULL.
        if !postgres {
            w.push("INSERT INTO orders VALUES (107, 1, 1250.5, 'active', 'r8')");
        }
        w.push("UPDATE customers SET name = NULL WHERE id = 2");
        if postgres {
            // Longer than the source's varchar(4).
            w.push("UPDATE orders SET ref = 'r10000' WHERE id = 101");
        }
    }
    w
}

/// The oracle: which writes cannot go back, and why, from a model of both
/// databases kept here (the source as it stands after its own changes).
fn irreversible(writes: &[&str], varchar: bool) -> BTreeMap<i64, &'static str> {
    // orders: id → (customer, status word, cents text); customers: ids.
    let source_orders: BTreeMap<i64, (i64, &str)> = [
        (101, (1, "12.50")),
        (102, (2, "8.00")),
        (103, (1, "20.00")),
        (200, (1, "1.00")),
    ]
    .into();
    let source_customers: BTreeSet<i64> = [1, 2].into();
    let at_switch: BTreeMap<i64, (i64, &str)> =
        [(101, (1, "12.50")), (102, (2, "7.50")), (103, (1, "20.00"))].into();
    let mut journal_customers: BTreeSet<i64> = BTreeSet::new();
    let mut touched: BTreeSet<i64> = BTreeSet::new();
    let mut out = BTreeMap::new();
    for (i, w) in writes.iter().enumerate() {
        let seq = i as i64 + 1;
        let words: Vec<&str> = w
            .split([' ', ',', '(', ')'])
            .filter(|s| !s.is_empty())
            .collect();
        if w.starts_with("INSERT INTO customers") {
            journal_customers.insert(words[4].parse().expect("an id"));
        } else if w.starts_with("INSERT INTO orders") {
            let id: i64 = words[4].parse().expect("an id");
            let customer: i64 = words[5].parse().expect("a customer");
            // A word the map does not know, or a fraction of a cent.
            let unknown = words[7] != "'active'" && words[7] != "'closed'";
            let why = if unknown || words[6].contains('.') {
                Some("transform")
            } else if !touched.contains(&id) && source_orders.contains_key(&id) {
                Some("collision")
            } else if !source_customers.contains(&customer)
                && !journal_customers.contains(&customer)
            {
                Some("parent")
            } else {
                None
            };
            touched.insert(id);
            if let Some(why) = why {
                out.insert(seq, why);
            }
        } else if w.starts_with("UPDATE orders") || w.starts_with("DELETE FROM orders") {
            let id: i64 = words.last().expect("an id").parse().expect("an id");
            let first = touched.insert(id);
            if w.contains("'r10000'") && varchar {
                out.insert(seq, "source_column");
            } else if first && source_orders.get(&id) != at_switch.get(&id) {
                out.insert(seq, "source_changed");
            }
        } else if w.contains("name = NULL") {
            out.insert(seq, "source_column");
        }
    }
    out
}

/// One migration on one engine: its folder, and how the application and
/// the operator reach each side.
trait Migration {
    fn dir(&self) -> &Path;
    /// Runs SQL on the target as the application.
    fn application(&self, sql: &str);
    /// Runs SQL on the source (the operator, or the old system).
    fn source(&self, sql: &str);
    /// Every row of a table of `side` as text, in key order.
    fn rows(&self, side: &str, table: &str) -> Vec<Vec<String>>;
    /// The bytes that must not change in a rehearsal.
    fn image(&self) -> Vec<String>;
    fn postgres(&self) -> bool;
}

fn cutover(m: &dyn Migration, args: &[&str], code: i32) -> support::Output {
    let mut c = support::cutover_in(m.dir(), args);
    c.env("CUTOVER_BUSY_TIMEOUT_MS", "10000")
        .env("CUTOVER_LOCK_TIMEOUT_MS", "10000");
    c.expect(code)
}

fn json(m: &dyn Migration, args: &[&str], code: i32) -> serde_json::Value {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    cutover(m, &all, code).json()
}

/// load, gate, journal install; the source changes behind the target's
/// back; the application writes.
fn switch_and_write(m: &dyn Migration, writes: &[&str]) {
    cutover(m, &["load"], 0);
    cutover(m, &["gate"], 0);
    cutover(m, &["journal", "install"], 0);
    m.source(SOURCE_AFTER_SWITCH);
    for w in writes {
        m.application(w);
    }
}

/// The findings of a watch pass: seq → kinds.
fn found(pass: &serde_json::Value) -> BTreeMap<i64, BTreeSet<String>> {
    let mut out: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for f in pass["findings"].as_array().expect("findings") {
        out.entry(f["seq"].as_i64().expect("a seq"))
            .or_default()
            .insert(f["kind"].as_str().expect("a kind").to_string());
        for field in ["table", "key", "reason", "fix"] {
            assert!(!f[field].is_null(), "a finding without its {field}: {f}");
        }
    }
    out
}

fn every_kind_is_named(m: &dyn Migration) {
    let w = writes(true, m.postgres());
    switch_and_write(m, &w);
    let pass = json(m, &["watch"], 1);
    let expected = irreversible(&w, m.postgres());
    assert_eq!(pass["entries"], w.len() as i64, "{pass:#}");
    let start = pass["position"].as_i64().expect("a position") - w.len() as i64;
    let got: BTreeMap<i64, BTreeSet<String>> = found(&pass)
        .into_iter()
        .map(|(seq, k)| (seq - start, k))
        .collect();
    let want: BTreeMap<i64, BTreeSet<String>> = expected
        .iter()
        .map(|(s, k)| (*s, [k.to_string()].into()))
        .collect();
    assert_eq!(got, want, "{pass:#}");
    assert_eq!(pass["irreversible"], expected.len() as i64);
    // status raises the alarm, and says what to do.
    let status = cutover(m, &["status"], 1);
    status.assert_mentions(&["ALARM", "cannot go back", "cutover watch --spec"]);
    // The fence goes on, saying what the replay will refuse.
    let fence = json(m, &["fence", "on"], 0);
    let warning = fence["watch"].as_str().unwrap_or_default();
    assert!(
        warning.contains(&format!(
            "left {} entries that cannot go back",
            expected.len()
        )),
        "{fence:#}"
    );
}

fn fixed_then_replayed(m: &dyn Migration) {
    let w = writes(false, m.postgres());
    switch_and_write(m, &w);
    let pass = json(m, &["watch", "--metrics", "watch.prom"], 1);
    assert_eq!(
        pass["irreversible"],
        irreversible(&w, m.postgres()).len() as i64
    );
    metrics_parse(&m.dir().join("watch.prom"), w.len() as f64, 4.0);
    // The rehearsal proves nothing more can go back than watch says, and
    // changes nothing.
    let before = m.image();
    let rehearsal = json(m, &["replay", "--rehearse"], 1);
    assert_eq!(m.image(), before, "the rehearsal changed a database");
    assert!(
        !rehearsal["conflicts"]
            .as_array()
            .expect("conflicts")
            .is_empty()
    );
    // The operator's fixes: a map word in the spec, the source settled.
    let spec = std::fs::read_to_string(m.dir().join("spec.toml")).expect("the spec");
    std::fs::write(
        m.dir().join("spec.toml"),
        spec.replace(
            r#"map = { A = "active", C = "closed" }"#,
            r#"map = { A = "active", C = "closed", P = "pending" }"#,
        ),
    )
    .expect("the spec");
    m.source(SOURCE_SETTLED);
    let pass = json(m, &["watch", "--metrics", "watch.prom"], 0);
    assert_eq!(pass["irreversible"], 0, "{pass:#}");
    assert_eq!(pass["started_over"], "the spec changed");
    // A pass with nothing new checks nothing again.
    let again = json(m, &["watch"], 0);
    assert_eq!(again["read"], 0);
    // The rehearsal now passes, leaves both sides as they were, and
    // measures the pace the estimate goes by.
    let before = m.image();
    let rehearsal = json(m, &["replay", "--rehearse"], 0);
    assert_eq!(m.image(), before, "the rehearsal changed a database");
    let rehearsed = rehearsal["rehearsal"]["entries"].clone();
    assert_eq!(rehearsed, w.len() as i64);
    let pass = json(m, &["watch", "--metrics", "watch.prom"], 0);
    assert_eq!(pass["estimate"]["measured_by"]["kind"], "rehearsal");
    assert!(pass["estimate"]["seconds"].as_f64().is_some());
    metrics_parse(&m.dir().join("watch.prom"), w.len() as f64, 0.0);
    cutover(m, &["fence", "on"], 0);
    let replay = json(m, &["replay", "--report", "replay.json"], 0);
    report_fingerprints(m, &replay);
    assert_eq!(replay["verdict"], "pass");
    assert_eq!(replay["applied"], rehearsed);
    // The source holds the target's rows, by arithmetic done here.
    assert_eq!(m.rows("source", "customers"), m.rows("target", "customers"));
    let back: Vec<Vec<String>> = m
        .rows("target", "orders")
        .into_iter()
        .map(|r| {
            let cents: i64 = r[2].parse().expect("whole cents");
            let code = match r[3].as_str() {
                "active" => "A",
                "closed" => "C",
                "pending" => "P",
                other => panic!("a status the test does not know: {other}"),
            };
            vec![
                r[0].clone(),
                r[1].clone(),
                format!("{}.{:02}", cents / 100, cents % 100),
                code.to_string(),
                r[4].clone(),
            ]
        })
        .collect();
    assert_eq!(m.rows("source", "orders"), back);
}

/// The replay's report: the command line, the journal, and each side's
/// fingerprint before and after, per engine.
fn report_fingerprints(m: &dyn Migration, replay: &serde_json::Value) {
    let text = std::fs::read_to_string(m.dir().join("replay.json")).expect("the report");
    let report: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert!(
        report["command_line"]
            .as_str()
            .expect("a command line")
            .contains("replay --report replay.json")
    );
    assert!(
        report["journal"]
            .as_str()
            .expect("a journal")
            .starts_with("journal-")
    );
    assert_eq!(report["applied"], replay["applied"]);
    let prints = report["fingerprints"].as_array().expect("fingerprints");
    assert_eq!(prints.len(), 4, "{report:#}");
    let digest = |role: &str, taken: &str| -> serde_json::Value {
        let f = prints
            .iter()
            .find(|f| f["role"] == role && f["taken"] == taken)
            .expect("a fingerprint");
        let engine = f["identity"][0][1].as_str().expect("an engine").to_string();
        assert!(
            engine.starts_with(if m.postgres() { "PostgreSQL" } else { "SQLite" }),
            "{f}"
        );
        if m.postgres() {
            assert_eq!(f["identity"][1][0], "system_identifier");
        }
        f["tables"].clone()
    };
    // The replay changed the source, not the target.
    assert_ne!(digest("source", "before"), digest("source", "after"));
    assert_eq!(digest("target", "before"), digest("target", "after"));
}

#[test]
fn a_gate_rehearsal_is_reported_as_a_rehearsal_in_plain_cells() {
    let m = Files::new();
    cutover(&m, &["load"], 0);
    cutover(
        &m,
        &[
            "gate",
            "--inject-mismatch",
            "--table",
            "orders",
            "--report",
            "gate.md",
        ],
        1,
    );
    let md = std::fs::read_to_string(m.dir().join("gate.md")).expect("the report");
    assert!(
        md.contains("rehearsal: the gate caught 3 of 3 injected faults"),
        "{md}"
    );
    assert!(md.contains("--inject-mismatch --table orders"), "{md}");
    let tables: String = md
        .split("## Report")
        .next()
        .expect("the provenance")
        .to_string();
    assert!(
        !tables.contains('{') && !tables.contains('['),
        "a JSON cell in\n{tables}"
    );
    assert!(
        tables.contains("| source | before |") && tables.contains("| target | after  |"),
        "{tables}"
    );
}

/// The metrics file, read by a Prometheus text-format parser.
fn metrics_parse(path: &Path, journaled: f64, irreversible: f64) {
    let text = std::fs::read_to_string(path).expect("the metrics file");
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text format");
    let value = |name: &str| -> f64 {
        let s = scrape
            .samples
            .iter()
            .find(|s| s.metric == name)
            .unwrap_or_else(|| panic!("no sample {name} in\n{text}"));
        match s.value {
            prometheus_parse::Value::Gauge(v) => v,
            ref other => panic!("{name} is not a gauge: {other:?}"),
        }
    };
    assert_eq!(value("cutover_journal_entries"), journaled);
    assert_eq!(value("cutover_watch_entries_irreversible"), irreversible);
    assert_eq!(value("cutover_watch_entries_unchecked"), 0.0);
    assert_eq!(value("cutover_fence_on"), 0.0);
    for name in [
        "cutover_watch_entries_checked",
        "cutover_watch_seconds_since_previous_pass",
        "cutover_watch_last_pass_timestamp_seconds",
        "cutover_rollback_estimated_seconds",
    ] {
        value(name);
    }
}

/// Both sides SQLite files; the application writes through Python's
/// `sqlite3`, in its own process.
struct Files(tempfile::TempDir);

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().expect("a folder");
        for (name, sql) in [("source.db", SOURCE), ("target.db", TARGET)] {
            rusqlite::Connection::open(dir.path().join(name))
                .and_then(|c| c.execute_batch(sql))
                .expect("a database");
        }
        std::fs::write(
            dir.path().join("spec.toml"),
            format!(
                "[source]\nurl = \"sqlite://source.db\"\n[target]\nurl = \"sqlite://target.db\"\n{TABLES}"
            ),
        )
        .expect("the spec");
        Files(dir)
    }

    fn python(&self, db: &str, sql: &str) {
        let (code, out) = support::python(self.dir(), support::PY_WRITE, &[db, sql]);
        assert_eq!(code, 0, "{sql}: {out}");
    }
}

impl Migration for Files {
    fn dir(&self) -> &Path {
        self.0.path()
    }
    fn application(&self, sql: &str) {
        self.python("target.db", sql);
    }
    fn source(&self, sql: &str) {
        rusqlite::Connection::open(self.dir().join("source.db"))
            .and_then(|c| c.execute_batch(sql))
            .expect("the source");
    }
    fn rows(&self, side: &str, table: &str) -> Vec<Vec<String>> {
        let c = rusqlite::Connection::open(self.dir().join(format!("{side}.db"))).expect("open");
        let mut st = c
            .prepare(&format!("SELECT * FROM {table} ORDER BY id"))
            .expect("a query");
        let n = st.column_count();
        st.query_map([], |r| {
            (0..n)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => "NULL".to_string(),
                        rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                        rusqlite::types::ValueRef::Real(v) => v.to_string(),
                        rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into(),
                        rusqlite::types::ValueRef::Blob(b) => format!("{b:?}"),
                    })
                })
                .collect()
        })
        .expect("rows")
        .collect::<rusqlite::Result<_>>()
        .expect("rows")
    }
    fn image(&self) -> Vec<String> {
        use sha2::Digest;
        ["source.db", "target.db"]
            .iter()
            .map(|f| {
                hex::encode(sha2::Sha256::digest(
                    std::fs::read(self.dir().join(f)).expect("a file"),
                ))
            })
            .collect()
    }
    fn postgres(&self) -> bool {
        false
    }
}

#[test]
fn sqlite_watch_names_every_irreversible_write() {
    every_kind_is_named(&Files::new());
}

#[test]
fn sqlite_watch_after_the_fixes_passes_and_the_replay_succeeds() {
    fixed_then_replayed(&Files::new());
}

/// Both sides schemas of one PostgreSQL database; the application writes
/// through `psql` as a role of its own with ordinary grants.
struct Server {
    dir: tempfile::TempDir,
    db: TestDb,
    app: String,
}

impl Server {
    fn new(test: &str) -> Option<Server> {
        let db = TestDb::new(test)?;
        let app = format!("app_{}", db.name.trim_start_matches("cutover_t_"));
        let mut c = db.client();
        c.batch_execute(&format!(
            "CREATE SCHEMA source; CREATE SCHEMA target; SET search_path = source; {SOURCE}
             SET search_path = target; {}
             CREATE ROLE {app} LOGIN; GRANT USAGE ON SCHEMA target TO {app};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA target TO {app};",
            TARGET.replace("NUMERIC", "bigint")
        ))
        .expect("the schemas");
        let dir = tempfile::tempdir().expect("a folder");
        std::fs::write(
            dir.path().join("spec.toml"),
            format!(
                "[source]\nurl = \"{0}?schema=source\"\n[target]\nurl = \"{0}?schema=target\"\n{TABLES}",
                db.url
            ),
        )
        .expect("the spec");
        Some(Server { dir, db, app })
    }

    fn psql(&self, user: Option<&str>, schema: &str, sql: &str) {
        let url = match user {
            Some(u) => {
                let (scheme, rest) = self.db.url.split_once("://").expect("a URL");
                let host = rest.split_once('@').map_or(rest, |(_, h)| h);
                format!("{scheme}://{u}@{host}")
            }
            None => self.db.url.clone(),
        };
        let mut child = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("psql");
        use std::io::Write as _;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(format!("SET search_path = {schema};\n{sql};\n").as_bytes())
            .expect("writing to psql");
        let out = child.wait_with_output().expect("psql");
        assert!(
            out.status.success(),
            "psql: {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut c = self.db.client();
        let _ = c.batch_execute(&format!("DROP OWNED BY {} CASCADE", self.app));
        if let Ok(mut a) = support::postgres::Client::connect(&self.db.admin) {
            let _ = a.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE); DROP ROLE IF EXISTS {}",
                self.db.name, self.app
            ));
        }
    }
}

impl Migration for Server {
    fn dir(&self) -> &Path {
        self.dir.path()
    }
    fn application(&self, sql: &str) {
        self.psql(Some(&self.app), "target", sql);
    }
    fn source(&self, sql: &str) {
        self.psql(None, "source", sql);
    }
    fn rows(&self, side: &str, table: &str) -> Vec<Vec<String>> {
        let mut c = self.db.client();
        let cols: Vec<String> = c
            .query(
                "SELECT column_name::text FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
                &[&side, &table],
            )
            .expect("columns")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let list: Vec<String> = cols
            .iter()
            .map(|c| format!("coalesce({c}::text, 'NULL')"))
            .collect();
        c.query(
            &format!("SELECT {} FROM {side}.{table} ORDER BY id", list.join(", ")),
            &[],
        )
        .expect("rows")
        .iter()
        .map(|r| (0..cols.len()).map(|i| r.get::<_, String>(i)).collect())
        .collect()
    }
    fn image(&self) -> Vec<String> {
        let mut out = Vec::new();
        for side in ["source", "target"] {
            for t in ["customers", "orders"] {
                out.push(format!("{side}.{t}: {:?}", self.rows(side, t)));
            }
        }
        let mut c = self.db.client();
        for r in c
            .query(
                "SELECT n.nspname::text || '.' || c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'S' ORDER BY 1",
                &[],
            )
            .expect("sequences")
        {
            let name: String = r.get(0);
            let v = c
                .query_one(&format!("SELECT last_value::text || is_called::text FROM {name}"), &[])
                .expect("a sequence");
            out.push(format!("{name}: {}", v.get::<_, String>(0)));
        }
        out
    }
    fn postgres(&self) -> bool {
        true
    }
}

#[test]
fn postgres_watch_names_every_irreversible_write() {
    if let Some(s) = Server::new("watch_kinds") {
        every_kind_is_named(&s);
    }
}

#[test]
fn postgres_watch_after_the_fixes_passes_and_the_replay_succeeds() {
    if let Some(s) = Server::new("watch_fixed") {
        fixed_then_replayed(&s);
    }
}

mod property {
    //! A write watch calls reversible never makes replay stop: random
    //! workloads of the application's writes and of the source's own
    //! changes, watch's verdict against a replay in a copy of the folder.

    use super::*;
    use proptest::prelude::*;

    /// Runs each statement in its own transaction through Python's
    /// `sqlite3`; a statement the target refuses (a key taken) is skipped,
    /// as the application would see it fail.
    const PY_EACH: &str = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=5)
for sql in sys.argv[2].split("\n"):
    try:
        con.execute(sql)
        con.commit()
    except sqlite3.Error:
        con.rollback()
"#;

    fn app_write(op: u8, id: i64, cents: i64, status: usize, customer: i64) -> String {
        let word = ["active", "closed", "pending"][status];
        let amount = if cents % 7 == 0 {
            format!("{cents}.5")
        } else {
            cents.to_string()
        };
        match op {
            0 => format!("INSERT INTO orders VALUES ({id}, {customer}, {amount}, '{word}', 'r')"),
            1 => format!("UPDATE orders SET cents = {amount}, status = '{word}' WHERE id = {id}"),
            2 => format!("UPDATE orders SET id = {} WHERE id = {id}", id + 5),
            3 => format!("DELETE FROM orders WHERE id = {id}"),
            _ => format!("INSERT INTO customers VALUES ({customer}, 'c{customer}')"),
        }
    }

    fn source_change(op: u8, id: i64) -> String {
        match op {
            0 => format!("UPDATE orders SET dollars = '9.99' WHERE id = {id}"),
            1 => format!("DELETE FROM orders WHERE id = {id}"),
            _ => format!("INSERT OR IGNORE INTO orders VALUES ({id}, 1, '3.00', 'A', 'rs')"),
        }
    }

    fn copy_folder(from: &Path) -> tempfile::TempDir {
        let to = tempfile::tempdir().expect("a folder");
        for e in std::fs::read_dir(from).expect("the folder") {
            let e = e.expect("an entry");
            std::fs::copy(e.path(), to.path().join(e.file_name())).expect("a copy");
        }
        to
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]
        #[test]
        fn a_write_watch_calls_reversible_never_stops_the_replay(
            source in prop::collection::vec((0u8..3, 100i64..108), 0..4),
            writes in prop::collection::vec((0u8..5, 100i64..110, 1i64..3000, 0usize..3, 1i64..6), 1..25),
        ) {
            let m = Files::new();
            cutover(&m, &["load"], 0);
            cutover(&m, &["journal", "install"], 0);
            let changes: Vec<String> = source.iter().map(|(op, id)| source_change(*op, *id)).collect();
            m.source(&changes.join(";\n"));
            let sql: Vec<String> = writes.iter().map(|w| app_write(w.0, w.1, w.2, w.3, w.4)).collect();
            let (code, out) = support::python(m.dir(), PY_EACH, &["target.db", &sql.join("\n")]);
            prop_assert_eq!(code, 0, "{}", out);
            let mut c = support::cutover_in(m.dir(), &["--format", "json", "watch"]);
            let pass = c.env("CUTOVER_BUSY_TIMEOUT_MS", "10000").output();
            prop_assert!(matches!(pass.code, Some(0 | 1)), "{}", pass);
            let flagged: BTreeSet<i64> = found(&pass.json()).into_keys().collect();
            let flagged_keys: BTreeSet<(String, String)> = pass.json()["findings"]
                .as_array()
                .expect("findings")
                .iter()
                .map(|f| (f["table"].to_string(), f["key"].to_string()))
                .collect();
            // The replay, in a copy of the folder.
            let copy = copy_folder(m.dir());
            support::cutover_in(copy.path(), &["fence", "on"]).expect(0);
            let replay = support::cutover_in(copy.path(), &["--format", "json", "replay"]).output();
            let rep = replay.json();
            if let Some(seq) = rep["conflict"]["tag"].as_i64() {
                // Replay folds a record's entries of one batch into one
                // change, named by the first one's seq: the record is the
                // one watch flagged.
                let record = (rep["conflict"]["table"].to_string(), rep["conflict"]["key"].to_string());
                prop_assert!(
                    flagged.contains(&seq) || flagged_keys.contains(&record),
                    "replay stopped at seq {} which watch called reversible ({:?})\n{}", seq, flagged, replay
                );
            }
            // A source row changed behind a key no entry touches is for the
            // closing reconcile to find: watch answers for the entries.
            if pass.code == Some(0) {
                prop_assert!(rep["conflict"].is_null(), "watch passed, the replay stopped\n{}", replay);
                prop_assert!(rep.get("refused").is_none_or(|r| r.as_array().is_some_and(|a| a.is_empty())), "{}", replay);
                prop_assert!(rep.get("foreign_keys").is_none_or(|r| r.as_array().is_some_and(|a| a.is_empty())), "{}", replay);
                // Every entry applied, whether the replay then committed or (a
                // closing difference) was rolled back whole.
                prop_assert_eq!(rep["applied"].as_i64().unwrap_or(0) + rep["already_in_place"].as_i64().unwrap_or(0) + rep["rolled_back"].as_i64().unwrap_or(0), pass.json()["entries"].as_i64().unwrap_or(-1), "{}", replay);
            }
        }
    }
}

#[test]
fn follow_passes_until_interrupted_and_ends_cleanly_between_passes() {
    let m = Files::new();
    cutover(&m, &["load"], 0);
    cutover(&m, &["journal", "install"], 0);
    m.application("UPDATE orders SET cents = 1400 WHERE id = 101");
    let child = Command::new(env!("CARGO_BIN_EXE_cutover"))
        .args([
            "watch",
            "--follow",
            "--interval",
            "200ms",
            "--spec",
            "spec.toml",
        ])
        .current_dir(m.dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("watch --follow");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let out = child.wait_with_output().expect("watch --follow");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.matches("watch: PASS").count() >= 2, "{text}");
    // The state of the last pass committed: the next pass reads nothing new.
    assert_eq!(json(&m, &["watch"], 0)["read"], 0);
}
