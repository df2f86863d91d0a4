//! Replay on PostgreSQL (BENCHMARKS.md, "PostgreSQL"): `cutover replay` of a
//! journal of `min(rows, 1M)` mixed changes into a PostgreSQL source, beside
//! the build before (`CUTOVER_BENCH_BEFORE`) and a plain batched client loop
//! writing the same row changes, measured one after the other in one run:
//!
//! - the fixture: the running example's schema, source `src.orders(id,
//!   dollars numeric(12,2), status)` of `rows` rows built in the server,
//!   target `tgt.orders(id, cents, status)` filled by `cutover load`, two
//!   schemas of one database the bench creates (and drops);
//! - `journal install`, then the application's changes on the target, 80%
//!   updates, 10% inserts past the last id, 10% deletes (the ids of
//!   benches/perf.rs), set-based, 1,000 a transaction; `fence on`;
//! - the database as it is then is kept as a template, and each timed run
//!   starts from a copy of it (source and target alike), made untimed;
//! - the plain loop: the journal read in seq order and written to the source
//!   by prepared statements, one transaction per 1,000 entries, checking
//!   nothing: the floor replay is judged against. It must leave the source
//!   as replay does (count and sum of the rows);
//! - what the proof costs: this build's replay records in the state file
//!   beside the spec how long it applied entries and how long its closing
//!   reconciliation (inside its transaction) took; the bench reports both
//!   for its best run.
//!
//! `cargo bench --bench pg_replay` runs 100,000 rows; `CUTOVER_BENCH_ROWS`
//! sets another size, `CUTOVER_BENCH_RUNS` the runs each time is the best of
//! (3), `CUTOVER_BENCH_PG` the server (default
//! `postgres://root@127.0.0.1:5432/postgres`, a role that may create
//! databases), `CUTOVER_BENCH_BIN` the binary timed as this build (default:
//! the release binary cargo built), `CUTOVER_BENCH_BEFORE` another build
//! timed on the same journal.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cutover::db::postgres::client::Client;

mod support;
use support::{connect, measured_pace, try_connect, watch};

const SPEC: &str = include_str!("../fixtures/orders/spec.toml");
/// Journal entries per transaction of the plain loop, as replay's default
/// batch.
const BATCH: usize = 1_000;
/// The application's changes per transaction.
const CHANGES: i64 = 1_000;

/// The bench's database and its template, dropped when the bench ends (or
/// panics).
struct Databases {
    admin_url: String,
    names: [String; 2],
}

impl Drop for Databases {
    fn drop(&mut self) {
        let mut admin = match try_connect(&self.admin_url) {
            Ok(c) => c,
            Err(e) => return eprintln!("could not drop the bench's databases: {e}"),
        };
        for name in &self.names {
            let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
            if let Err(e) = admin.batch_execute(&sql) {
                eprintln!("could not drop database {name}: {e}");
            }
        }
    }
}

/// Where the bench runs: its server, database and folder.
struct Bench {
    admin_url: String,
    /// The server's URL up to the database name, and its query.
    before: String,
    query: String,
    name: String,
    template: String,
    dir: PathBuf,
}

impl Bench {
    /// The bench's database's URL, with `extra` added to the query.
    fn url(&self, extra: &str) -> String {
        let q: Vec<&str> = [extra, self.query.as_str()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if q.is_empty() {
            format!("{}{}", self.before, self.name)
        } else {
            format!("{}{}?{}", self.before, self.name, q.join("&"))
        }
    }

    fn connect(&self) -> Client {
        connect(&self.url(""))
    }

    /// Runs each statement of `sql` on the server's first database.
    fn admin(&self, sql: &[String]) {
        let mut admin = connect(&self.admin_url);
        for s in sql {
            admin
                .batch_execute(s)
                .unwrap_or_else(|e| panic!("{s}: {e}"));
        }
    }

    /// The database as the template holds it, then a checkpoint, so that
    /// the copy's writes are not flushed during the timed run.
    fn restore(&self) {
        self.admin(&[
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            format!("CREATE DATABASE {} TEMPLATE {}", self.name, self.template),
            "CHECKPOINT".into(),
        ]);
    }
}

/// A server URL split around its database name: `(before, query)`, so that
/// `before + db + "?" + query` names another database of the same server.
fn split_url(url: &str) -> (String, String) {
    let (head, query) = url.split_once('?').unwrap_or((url, ""));
    let after_scheme = head.find("://").map_or(0, |i| i + 3);
    let slash = head[after_scheme..]
        .find('/')
        .map_or(head.len(), |i| after_scheme + i);
    (format!("{}/", &head[..slash]), query.to_string())
}

fn env_number(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rows = env_number("CUTOVER_BENCH_ROWS", 100_000);
    let runs = env_number("CUTOVER_BENCH_RUNS", 3).max(1) as usize;
    let server = std::env::var("CUTOVER_BENCH_PG")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".into());
    let this = std::env::var_os("CUTOVER_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cutover")));
    let before_bin = std::env::var_os("CUTOVER_BENCH_BEFORE").map(PathBuf::from);
    let base = std::env::var_os("CUTOVER_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).expect("a temporary folder");

    let (before, query) = split_url(&server);
    let name = format!("cutover_bench_{}", std::process::id());
    let bench = Bench {
        admin_url: server.clone(),
        before,
        query,
        template: format!("{name}_before"),
        name,
        dir: dir.path().to_path_buf(),
    };
    bench.admin(&[
        format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", bench.name),
        format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", bench.template),
        format!("CREATE DATABASE {}", bench.name),
    ]);
    let _databases = Databases {
        admin_url: server.clone(),
        names: [bench.name.clone(), bench.template.clone()],
    };
    println!(
        "cutover PostgreSQL replay bench: {rows} rows, database {} on {}",
        bench.name,
        bench.before.trim_end_matches('/')
    );

    let t = Instant::now();
    let entries = prepare(&bench, &this, rows);
    println!(
        "(fixture, load, {entries} journal entries and the fence in {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let measured = measure(&bench, runs, &this, before_bin.as_deref());
    report(entries, &measured);
}

/// The three measurements: this build's replay, the build before's (when
/// there is one) and the plain loop, each the best of `runs` from the
/// template. The source after each must be the same.
fn measure(bench: &Bench, runs: usize, this: &Path, before: Option<&Path>) -> Measured {
    let mut after: Option<(i64, String)> = None;
    let mut same = |what: &str| {
        let got = source_totals(&mut bench.connect());
        match &after {
            None => after = Some(got),
            Some(want) => assert_eq!(&got, want, "{what} must leave the source as replay does"),
        }
    };
    let replay = |bin: &Path| {
        bench.restore();
        cutover(bin, &bench.dir, &["replay", "--spec", "spec.toml"], 0)
    };
    let mut this_time = Duration::MAX;
    let mut proof = None;
    for _ in 0..runs {
        let t = replay(this);
        same("this build's replay");
        if t < this_time {
            this_time = t;
            proof = Some(measured_pace(&bench.dir));
        }
    }
    let before_time = before.map(|bin| {
        let mut best = Duration::MAX;
        for _ in 0..runs {
            best = best.min(replay(bin));
            same("the build before's replay");
        }
        best
    });
    let mut loop_time = Duration::MAX;
    for _ in 0..runs {
        bench.restore();
        loop_time = loop_time.min(plain_replay(&mut bench.connect()));
        same("the plain loop");
    }
    Measured {
        this: this_time,
        proof,
        before: before_time,
        plain: loop_time,
    }
}

struct Measured {
    this: Duration,
    /// What this build's best replay measured of itself: applying the
    /// entries and the closing reconciliation, in seconds.
    proof: Option<(f64, f64)>,
    before: Option<Duration>,
    plain: Duration,
}

/// The measurements and their ratios, as tables.
fn report(entries: i64, m: &Measured) {
    let secs = |t: Duration| t.as_secs_f64();
    let line = |what: &str, t: Duration| {
        format!(
            "| {what} | {entries} | {:.3} | {:.0} |",
            secs(t),
            entries as f64 / secs(t)
        )
    };
    println!("\n| measurement | entries | time (s) | entries/s |\n|---|---|---|---|");
    println!("{}", line("replay, this build", m.this));
    if let Some((apply, reconcile)) = m.proof {
        println!("| of which applying the entries | {entries} | {apply:.3} | |");
        println!("| of which the proof (closing reconciliation) | {entries} | {reconcile:.3} | |");
    }
    if let Some(b) = m.before {
        println!("{}", line("replay, the build before", b));
    }
    println!("{}", line("plain loop (batches of 1,000)", m.plain));
    println!("\n| ratio | measured |\n|---|---|");
    println!(
        "| this build's rate ÷ the loop's | {:.2} |",
        secs(m.plain) / secs(m.this)
    );
    if let Some((_, reconcile)) = m.proof {
        println!(
            "| the proof's share of this build's replay | {:.2} |",
            reconcile / secs(m.this)
        );
    }
    if let Some(b) = m.before {
        println!(
            "| the build before's rate ÷ the loop's | {:.2} |",
            secs(m.plain) / secs(b)
        );
        println!(
            "| this build's rate ÷ the build before's | {:.2} |",
            secs(b) / secs(m.this)
        );
    }
}

/// Source and target, load, the journal and the application's changes, the
/// fence, then the template; the number of journal entries.
fn prepare(bench: &Bench, bin: &Path, rows: i64) -> i64 {
    // numeric(12,2) dollars under bigint cents: a range hazard, accepted
    // as an operator would (watch counts writes past it).
    let spec = SPEC
        .replace("sqlite://source.db", &bench.url("schema=src"))
        .replace("sqlite://target.db", &bench.url("schema=tgt"))
        .replace("scale = 2\n", "scale = 2\nsource_limit = \"watch\"\n");
    std::fs::write(bench.dir.join("spec.toml"), spec).expect("spec");
    let mut pg = bench.connect();
    pg.batch_execute(&format!(
        "CREATE SCHEMA src; CREATE SCHEMA tgt;
         CREATE TABLE src.orders (id bigint PRIMARY KEY, dollars numeric(12,2) NOT NULL, status text NOT NULL);
         CREATE TABLE tgt.orders (id bigint PRIMARY KEY, cents bigint NOT NULL, status text NOT NULL);
         INSERT INTO src.orders
           SELECT id, ((id * 7919) % 10000000) / 100.0,
                  CASE WHEN id % 3 = 0 THEN 'C' ELSE 'A' END
           FROM generate_series(1::bigint, {rows}::bigint) AS id;"
    ))
    .expect("the fixture");
    pg.batch_execute("VACUUM ANALYZE src.orders")
        .expect("vacuum");
    let d = &bench.dir;
    cutover(bin, d, &["load", "--spec", "spec.toml"], 0);
    cutover(bin, d, &["journal", "install", "--spec", "spec.toml"], 0);
    let n = rows.min(1_000_000);
    write_changes(&mut pg, rows, n);
    cutover(bin, d, &["fence", "on", "--spec", "spec.toml"], 0);
    let entries: i64 = pg
        .query_one("SELECT count(*) FROM tgt._cutover_journal_1", &[])
        .expect("the journal's entries")
        .get(0);
    pg.batch_execute("VACUUM ANALYZE").expect("vacuum");
    drop(pg);
    bench.admin(&[format!(
        "CREATE DATABASE {} TEMPLATE {}",
        bench.template, bench.name
    )]);
    entries
}

/// The application's `n` changes on the target, `CHANGES` a transaction:
/// change `k` is an insert past the last id when `k % 10 = 0`, a delete of
/// `(k * 7) % rows + 1` when `k % 10 = 5`, else an update of
/// `(k * 13) % rows + 1` (cents + 1), each kind set-based in its
/// transaction. An update or delete of an id deleted before changes nothing
/// and is not journaled.
fn write_changes(pg: &mut Client, rows: i64, n: i64) {
    let mut lo = 1;
    while lo <= n {
        let hi = (lo + CHANGES - 1).min(n);
        let ks = format!("generate_series({lo}::bigint, {hi}::bigint) AS k");
        pg.batch_execute(&format!(
            "BEGIN;
             UPDATE tgt.orders SET cents = cents + 1 WHERE id IN
               (SELECT (k * 13) % {rows} + 1 FROM {ks} WHERE k % 10 NOT IN (0, 5));
             DELETE FROM tgt.orders WHERE id IN
               (SELECT (k * 7) % {rows} + 1 FROM {ks} WHERE k % 10 = 5);
             INSERT INTO tgt.orders (id, cents, status)
               SELECT {rows} + 1000 + k, 100, 'active' FROM {ks} WHERE k % 10 = 0;
             COMMIT;"
        ))
        .expect("the application's changes");
        lo = hi + 1;
    }
}

/// The source's row count and its sum of dollars (as text: exact).
fn source_totals(pg: &mut Client) -> (i64, String) {
    let r = pg
        .query_one(
            "SELECT count(*), coalesce(sum(dollars), 0)::text || '/' || \
               count(*) FILTER (WHERE status = 'C') FROM src.orders",
            &[],
        )
        .expect("the source's totals");
    (r.get(0), r.get(1))
}

/// The floor for replay: the journal read in seq order and the same row
/// changes written to the source by prepared statements, one transaction
/// per `BATCH` entries, checking nothing. Timed from the journal's query.
fn plain_replay(pg: &mut Client) -> Duration {
    let start = Instant::now();
    let journal = pg
        .query(
            "SELECT op, coalesce(n1, o1), n2, n3 FROM tgt._cutover_journal_1 ORDER BY seq",
            &[],
        )
        .expect("the journal");
    let upd = pg
        .prepare("UPDATE src.orders SET dollars = $2::text::numeric, status = $3 WHERE id = $1")
        .expect("prepare");
    let ins = pg
        .prepare("INSERT INTO src.orders (id, dollars, status) VALUES ($1, $2::text::numeric, $3)")
        .expect("prepare");
    let del = pg
        .prepare("DELETE FROM src.orders WHERE id = $1")
        .expect("prepare");
    for batch in journal.chunks(BATCH) {
        pg.batch_execute("BEGIN").expect("begin");
        for r in batch {
            let op: &str = r.get(0);
            let id: i64 = r.get(1);
            if op == "delete" {
                pg.execute(&del, &[&id]).expect("delete");
                continue;
            }
            let cents: i64 = r.get(2);
            let status: &str = r.get(3);
            let code = if status == "closed" { "C" } else { "A" };
            let dollars = format!("{}.{:02}", cents / 100, cents % 100);
            let st = if op == "update" { &upd } else { &ins };
            pg.execute(st, &[&id, &dollars, &code]).expect("write");
        }
        pg.batch_execute("COMMIT").expect("commit");
    }
    start.elapsed()
}

/// Runs `bin` in `dir` with `args`, which must exit with `code`; its time.
fn cutover(bin: &Path, dir: &Path, args: &[&str], code: i32) -> Duration {
    let start = Instant::now();
    let mut child = Command::new(bin)
        .current_dir(dir)
        .args(args)
        .arg("--quiet")
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    let (got, _) = watch(&mut child);
    assert_eq!(got, code, "{} {}", bin.display(), args.join(" "));
    start.elapsed()
}
