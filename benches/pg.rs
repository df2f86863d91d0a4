//! Throughput and memory of `cutover` on PostgreSQL, next to its peers
//! (BENCHMARKS.md, "PostgreSQL"), measured one after the other in one run:
//!
//! - the fixture: the running example's schema scaled up, source and target
//!   in two schemas of one database the bench creates (and drops), built in
//!   the server with `INSERT … SELECT … generate_series`, 100 scattered
//!   mismatches;
//! - `cutover gate` PostgreSQL → PostgreSQL (stream mode), and
//!   `gate --mode digest` when the binary has it;
//! - reladiff's joindiff and hashdiff on the same server, on a target-shaped
//!   copy of the source (reladiff cannot express the transform), skipped with
//!   a line saying why when reladiff cannot be imported or installed;
//! - `cutover load` SQLite → PostgreSQL against two batched INSERT loops
//!   through a plain client (the crate's own, `tokio-postgres` behind
//!   blocking calls), same rows, same rows per transaction: a prepared
//!   one-row INSERT per row (the loop a migration script writes), and
//!   prepared 1,000-row INSERTs (the fastest INSERT there is).
//!
//! `cargo bench --bench pg` runs 100,000 rows per side;
//! `CUTOVER_BENCH_ROWS` sets another size, `CUTOVER_BENCH_PG` the server
//! (default `postgres://root@127.0.0.1:5432/postgres`). The tools run as
//! child processes whose peak memory (VmHWM) is read from /proc.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cutover::db::postgres::client::Client;
use rusqlite::Connection;
use tokio_postgres::types::ToSql;

mod support;
use support::{connect, try_connect, watch};

const SPEC: &str = include_str!("../fixtures/orders/spec.toml");
/// Rows per transaction, as `cutover load`'s default batch.
const BATCH: i64 = 10_000;
/// Rows per statement of the reference loop (3 parameters each).
const ROWS_PER_INSERT: i64 = 1_000;

struct Row {
    what: String,
    time: Option<Duration>,
    rows: i64,
    rss: Option<u64>,
    note: String,
}

/// The bench's own database, dropped when the bench ends (or panics).
struct Database {
    admin_url: String,
    name: String,
}

impl Drop for Database {
    fn drop(&mut self) {
        match try_connect(&self.admin_url) {
            Ok(mut c) => {
                if let Err(e) = c.batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                )) {
                    eprintln!("could not drop database {}: {e}", self.name);
                }
            }
            Err(e) => eprintln!("could not drop database {}: {e}", self.name),
        }
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

fn main() {
    let rows: i64 = std::env::var("CUTOVER_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let server = std::env::var("CUTOVER_BENCH_PG")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".into());
    let base = std::env::var_os("CUTOVER_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).expect("a temporary folder");
    let d = dir.path();

    let (before, query) = split_url(&server);
    let name = format!("cutover_bench_{}", std::process::id());
    let db_url = |extra: &str| {
        let q: Vec<&str> = [extra, query.as_str()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if q.is_empty() {
            format!("{before}{name}")
        } else {
            format!("{before}{name}?{}", q.join("&"))
        }
    };
    let mut admin = connect(&server);
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .expect("dropping a leftover bench database");
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("creating the bench database");
    drop(admin);
    let _database = Database {
        admin_url: server.clone(),
        name: name.clone(),
    };
    let mut pg = connect(&db_url(""));
    println!(
        "cutover PostgreSQL bench: {rows} rows per side, database {name} on {}",
        before.trim_end_matches('/')
    );

    let mut results: Vec<Row> = Vec::new();
    let mut say = |what: &str, n: i64, t: Option<Duration>, rss: Option<u64>, note: String| {
        match t {
            Some(t) => println!(
                "{what:<34} {n:>10} rows  {:>8.3} s  {:>6.2} M rows/s  {:>8}  {note}",
                t.as_secs_f64(),
                n as f64 / t.as_secs_f64() / 1e6,
                rss.map(|k| format!("{} MB", k / 1024)).unwrap_or_default()
            ),
            None => println!("{what:<34} {note}"),
        }
        results.push(Row {
            what: what.to_string(),
            time: t,
            rows: n,
            rss,
            note,
        });
    };

    // 1. The fixture, built inside the server.
    let t = Instant::now();
    fixture(&mut pg, rows);
    say(
        "fixture: source and target",
        2 * rows,
        Some(t.elapsed()),
        None,
        "generate_series in the server, then keys, VACUUM ANALYZE".into(),
    );
    let t = Instant::now();
    pg.batch_execute(
        "CREATE TABLE peer.orders AS SELECT id, (dollars * 100)::bigint AS cents, \
           CASE status WHEN 'A' THEN 'active' WHEN 'C' THEN 'closed' END AS status \
         FROM src.orders; \
         ALTER TABLE peer.orders ADD PRIMARY KEY (id); \
         ALTER TABLE peer.orders ALTER cents SET NOT NULL, ALTER status SET NOT NULL",
    )
    .expect("the peer's copy");
    pg.batch_execute("VACUUM ANALYZE peer.orders")
        .expect("vacuum");
    say(
        "fixture: target-shaped copy",
        rows,
        Some(t.elapsed()),
        None,
        "the source transformed in SQL, for reladiff".into(),
    );

    // 2. The gate, PostgreSQL → PostgreSQL, stream mode.
    let spec = SPEC
        .replace("sqlite://source.db", &db_url("schema=src"))
        .replace("sqlite://target.db", &db_url("schema=tgt"));
    std::fs::write(d.join("gate.toml"), spec).expect("spec");
    // A binary with `--mode` picks digest on servers by default (`auto`):
    // the stream row asks for stream by name.
    let help = Command::new(env!("CARGO_BIN_EXE_cutover"))
        .args(["gate", "--help"])
        .output()
        .expect("cutover gate --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let has_digest = help.contains("--mode") && help.contains("digest");
    let gate_run = |mode: Option<&str>| {
        let mut args = vec!["gate", "--spec", "gate.toml", "--max-diffs", "5"];
        args.extend(["--format", "json", "--quiet"]);
        if let Some(m) = mode {
            args.extend(["--mode", m]);
        }
        let (t, rss, code, out) = run(cutover(d, &args), d);
        assert_eq!(code, 1, "the gate must find the mismatches: {out}");
        let report: serde_json::Value = serde_json::from_str(&out).expect("the gate's JSON");
        assert_eq!(
            report["diffs_found"].as_i64(),
            Some(100),
            "the gate must find the 100 mismatches: {out}"
        );
        let streamed = report["modes"][0]["rows_streamed"].as_i64();
        (t, rss, streamed)
    };
    let (gate, gate_rss, _) = gate_run(has_digest.then_some("stream"));
    // Digest mode can be left out (it was slow when this bench was written).
    let skip_digest = std::env::var_os("CUTOVER_BENCH_SKIP_DIGEST").is_some();
    let digest = (has_digest && !skip_digest).then(|| gate_run(Some("digest")));

    // 3. reladiff on the same server, target-shaped copy against the target.
    let peer = reladiff_python();
    let startup = peer.as_ref().ok().map(|python| {
        let t = Instant::now();
        let ok = Command::new(python)
            .args(["-c", "import reladiff.__main__"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "importing reladiff");
        t.elapsed()
    });
    let peer_run = |algorithm: &str| -> Result<(Duration, Option<u64>), String> {
        let python = peer.as_ref().map_err(|e| e.clone())?;
        // reladiff knows the server by the `postgresql://` scheme only.
        let url = db_url("").replacen("postgres://", "postgresql://", 1);
        let mut c = Command::new(python);
        c.args(["-m", "reladiff", &url, "peer.orders", "tgt.orders"])
            .args(["-k", "id", "-c", "cents", "-c", "status"])
            .args(["-a", algorithm, "--stats", "--json"])
            .env("COLUMNS", "1000");
        let (t, rss, code, out) = run(c, d);
        if code != 0 {
            return Err(format!(
                "reladiff {algorithm} exited with {code}: {}",
                out.trim().lines().last().unwrap_or("")
            ));
        }
        assert_eq!(
            differences(&out),
            Some(100),
            "reladiff {algorithm} must find the 100 mismatches: {out}"
        );
        Ok((t, rss))
    };
    let joindiff = peer_run("joindiff");
    let hashdiff = peer_run("hashdiff");
    let startup = startup.unwrap_or_default().as_secs_f64();

    say(
        "cutover gate (stream)",
        rows,
        Some(gate),
        gate_rss,
        match &joindiff {
            Ok((j, _)) => format!(
                "with the transform; {:.2}x joindiff's time",
                gate.as_secs_f64() / j.as_secs_f64()
            ),
            Err(_) => "with the transform".into(),
        },
    );
    match joindiff {
        Ok((t, rss)) => say(
            "reladiff joindiff",
            rows,
            Some(t),
            rss,
            format!(
                "copy vs target, no transform; work in the server; {:.2} s is Python's start-up and import",
                startup
            ),
        ),
        Err(why) => say(
            "reladiff joindiff",
            rows,
            None,
            None,
            format!("skipped: {why}"),
        ),
    }
    match digest {
        Some((t, rss, streamed)) => say(
            "cutover gate --mode digest",
            rows,
            Some(t),
            rss,
            match &hashdiff {
                Ok((h, _)) => format!(
                    "with the transform, {} rows streamed; {:.2}x hashdiff's time",
                    streamed.unwrap_or(-1),
                    t.as_secs_f64() / h.as_secs_f64()
                ),
                Err(_) => format!(
                    "with the transform, {} rows streamed",
                    streamed.unwrap_or(-1)
                ),
            },
        ),
        None => say(
            "cutover gate --mode digest",
            rows,
            None,
            None,
            if skip_digest {
                "not measured: CUTOVER_BENCH_SKIP_DIGEST is set".into()
            } else {
                "not measured: this binary's `gate --help` has no `--mode digest`".into()
            },
        ),
    }
    match hashdiff {
        Ok((t, rss)) => say(
            "reladiff hashdiff",
            rows,
            Some(t),
            rss,
            format!(
                "copy vs target, no transform; checksums in the server; {:.2} s start-up",
                startup
            ),
        ),
        Err(why) => say(
            "reladiff hashdiff",
            rows,
            None,
            None,
            format!("skipped: {why}"),
        ),
    }

    // 4. Load SQLite → PostgreSQL, against a batched INSERT loop.
    sqlite_source(&d.join("source.db"), rows);
    for schema in ["load", "ref", "one"] {
        pg.batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.orders \
             (id bigint PRIMARY KEY, cents bigint NOT NULL, status text NOT NULL)"
        ))
        .expect("an empty target");
    }
    // A row a round trip: about 10,000 rows a second here, so it writes
    // the first `CUTOVER_BENCH_ONE_ROW` rows (200,000 unless set) and is
    // compared by its rate.
    let one_rows: i64 = std::env::var("CUTOVER_BENCH_ONE_ROW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000)
        .min(rows);
    let one_by_one = insert_loop(&mut pg, "one", one_rows, 1);
    say(
        "reference: batched INSERT loop",
        one_rows,
        Some(one_by_one),
        None,
        format!("a prepared one-row INSERT per row, {BATCH} rows per transaction"),
    );
    let one_rate = one_rows as f64 / one_by_one.as_secs_f64();
    let reference = insert_loop(&mut pg, "ref", rows, ROWS_PER_INSERT);
    say(
        "reference: multi-row INSERT loop",
        rows,
        Some(reference),
        None,
        format!("prepared {ROWS_PER_INSERT}-row INSERTs, {BATCH} rows per transaction"),
    );
    let spec = SPEC.replace("sqlite://target.db", &db_url("schema=load"));
    std::fs::write(d.join("load.toml"), spec).expect("spec");
    let (t, rss, code, out) = run(cutover(d, &["load", "--spec", "load.toml", "--quiet"]), d);
    assert_eq!(code, 0, "load failed: {out}");
    let totals = |c: &mut Client, schema: &str| -> (i64, i64) {
        let r = c
            .query_one(
                &format!("SELECT count(*), sum(cents)::bigint FROM {schema}.orders"),
                &[],
            )
            .expect("totals");
        (r.get(0), r.get(1))
    };
    assert_eq!(
        totals(&mut pg, "load"),
        totals(&mut pg, "ref"),
        "load and the reference must write the same rows"
    );
    let first = |c: &mut Client, schema: &str| -> (i64, i64) {
        let r = c
            .query_one(
                &format!(
                    "SELECT count(*), sum(cents)::bigint FROM {schema}.orders WHERE id <= {one_rows}"
                ),
                &[],
            )
            .expect("totals");
        (r.get(0), r.get(1))
    };
    assert_eq!(
        first(&mut pg, "one"),
        first(&mut pg, "ref"),
        "both references must write the same rows"
    );
    say(
        "cutover load (binary COPY)",
        rows,
        Some(t),
        rss,
        format!(
            "SQLite source, validate then write; {:.1}x the INSERT loop's rate, {:.2}x the multi-row loop's time",
            rows as f64 / t.as_secs_f64() / one_rate,
            t.as_secs_f64() / reference.as_secs_f64()
        ),
    );
    drop(pg);

    println!(
        "\n| measurement | time (s) | M rows/s | peak MB | ratio / note |\n|---|---|---|---|---|"
    );
    for r in &results {
        let (time, rate) = match r.time {
            Some(t) => (
                format!("{:.3}", t.as_secs_f64()),
                format!("{:.2}", r.rows as f64 / t.as_secs_f64() / 1e6),
            ),
            None => ("-".into(), "-".into()),
        };
        let rss = r
            .rss
            .map(|k| format!("{:.1}", k as f64 / 1024.0))
            .unwrap_or_else(|| "-".into());
        println!("| {} | {time} | {rate} | {rss} | {} |", r.what, r.note);
    }
}

/// Source `src.orders(id, dollars numeric(12,2), status)` and target
/// `tgt.orders(id, cents, status)` of `rows` orders each, equal under the
/// spec's transform but for 100 scattered mismatches: a third changed, a
/// third missing from the target, a third extra in it (as benches/perf.rs).
fn fixture(pg: &mut Client, rows: i64) {
    let step = (rows / 100).max(1);
    // A scattered id: `id % step = step / 2` and `id / step < 100`; which
    // kind of mismatch it gets is `(id / step) % 3`.
    let scattered = format!("(id % {step} = {} AND id / {step} < 100)", step / 2);
    pg.batch_execute(&format!(
        "CREATE SCHEMA src; CREATE SCHEMA tgt; CREATE SCHEMA peer;
         CREATE TABLE src.orders (id bigint NOT NULL, dollars numeric(12,2) NOT NULL, status text NOT NULL);
         CREATE TABLE tgt.orders (id bigint NOT NULL, cents bigint NOT NULL, status text NOT NULL);
         INSERT INTO src.orders
           SELECT id, ((id * 7919) % 10000000) / 100.0,
                  CASE WHEN id % 3 = 0 THEN 'C' ELSE 'A' END
           FROM generate_series(1::bigint, {rows}::bigint) AS id;
         INSERT INTO tgt.orders
           SELECT id,
                  (id * 7919) % 10000000
                    + CASE WHEN {scattered} AND (id / {step}) % 3 = 0 THEN 1 ELSE 0 END,
                  CASE WHEN id % 3 = 0 THEN 'closed' ELSE 'active' END
           FROM generate_series(1::bigint, {rows}::bigint) AS id
           WHERE NOT ({scattered} AND (id / {step}) % 3 = 1);
         INSERT INTO tgt.orders
           SELECT {rows} + 1 + id / {step}, (id * 7919) % 10000000,
                  CASE WHEN id % 3 = 0 THEN 'closed' ELSE 'active' END
           FROM generate_series(1::bigint, {rows}::bigint) AS id
           WHERE {scattered} AND (id / {step}) % 3 = 2;
         ALTER TABLE src.orders ADD PRIMARY KEY (id);
         ALTER TABLE tgt.orders ADD PRIMARY KEY (id);"
    ))
    .expect("the fixture");
    // VACUUM runs outside a transaction block: one statement per call.
    for table in ["src.orders", "tgt.orders"] {
        pg.batch_execute(&format!("VACUUM ANALYZE {table}"))
            .expect("vacuum");
    }
}

/// The load's source in SQLite: the same rows as `src.orders`, dollars as
/// decimal text (the running example's SQLite source).
fn sqlite_source(path: &Path, rows: i64) {
    let c = Connection::open(path).expect("source");
    c.execute_batch(&format!(
        "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;
         CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL);
         INSERT INTO orders
           WITH RECURSIVE s(id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM s WHERE id < {rows})
           SELECT id, printf('%d.%02d', c / 100, c % 100),
                  CASE WHEN id % 3 = 0 THEN 'C' ELSE 'A' END
           FROM (SELECT id, (id * 7919) % 10000000 AS c FROM s);"
    ))
    .expect("the SQLite source");
}

/// A reference for load: the target's rows (what the transform makes of
/// the source) written to `{schema}.orders` by prepared INSERTs of
/// `per_insert` rows each, `BATCH` rows per transaction, generated in the
/// bench (no source read).
fn insert_loop(pg: &mut Client, schema: &str, rows: i64, per_insert: i64) -> Duration {
    let statement = |pg: &mut Client, n: i64| {
        let values: Vec<String> = (0..n)
            .map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3))
            .collect();
        pg.prepare(&format!(
            "INSERT INTO {schema}.orders (id, cents, status) VALUES {}",
            values.join(", ")
        ))
        .expect("prepare")
    };
    let start = Instant::now();
    let full = statement(pg, per_insert);
    let mut id = 0;
    while id < rows {
        let end = (id + BATCH).min(rows);
        pg.batch_execute("BEGIN").expect("begin");
        while id < end {
            let n = per_insert.min(end - id);
            let ids: Vec<i64> = (id + 1..=id + n).collect();
            let cents: Vec<i64> = ids.iter().map(|i| (i * 7919) % 10_000_000).collect();
            let status: Vec<&str> = ids
                .iter()
                .map(|i| if i % 3 == 0 { "closed" } else { "active" })
                .collect();
            let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(3 * n as usize);
            for k in 0..n as usize {
                params.push(&ids[k]);
                params.push(&cents[k]);
                params.push(&status[k]);
            }
            if n == per_insert {
                pg.execute(&full, &params).expect("insert");
            } else {
                let values: Vec<String> = (0..n)
                    .map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3))
                    .collect();
                let st = pg
                    .prepare(&format!(
                        "INSERT INTO {schema}.orders (id, cents, status) VALUES {}",
                        values.join(", ")
                    ))
                    .expect("prepare");
                pg.execute(&st, &params).expect("insert");
            }
            id += n;
        }
        pg.batch_execute("COMMIT").expect("commit");
    }
    start.elapsed()
}

/// A Python that can import reladiff: `CUTOVER_BENCH_PYTHON`, else the
/// system's `python3`, else the venv `target/bench-venv` (made and filled
/// with `pip install 'reladiff[postgresql]'` when missing). Err says why not.
fn reladiff_python() -> Result<PathBuf, String> {
    let imports = |p: &Path| {
        Command::new(p)
            .args(["-c", "import reladiff, psycopg2"])
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if let Some(p) = std::env::var_os("CUTOVER_BENCH_PYTHON") {
        let p = PathBuf::from(p);
        return if imports(&p) {
            Ok(p)
        } else {
            Err(format!(
                "CUTOVER_BENCH_PYTHON={} cannot import reladiff and psycopg2",
                p.display()
            ))
        };
    }
    if imports(Path::new("python3")) {
        return Ok("python3".into());
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-venv");
    let python = venv.join("bin/python");
    if imports(&python) {
        return Ok(python);
    }
    println!("installing reladiff into {} …", venv.display());
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .map_err(|e| format!("python3 -m venv: {e}"))?;
    if !made.status.success() {
        return Err(format!(
            "python3 -m venv failed: {}",
            String::from_utf8_lossy(&made.stderr).trim()
        ));
    }
    let pip = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "reladiff[postgresql]"])
        .output()
        .map_err(|e| format!("pip: {e}"))?;
    if !pip.status.success() {
        let err = String::from_utf8_lossy(&pip.stderr);
        return Err(format!(
            "pip install 'reladiff[postgresql]' failed: {}",
            err.trim().lines().last().unwrap_or("")
        ));
    }
    if imports(&python) {
        Ok(python)
    } else {
        Err("reladiff installed but not importable".into())
    }
}

/// The number of differing rows in reladiff's `--stats --json` output
/// (printed through `rich`, which may wrap it across lines).
fn differences(out: &str) -> Option<i64> {
    let json = &out[out.find('{')?..=out.rfind('}')?];
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.get("total")?.as_i64()
}

fn cutover(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cutover"));
    c.current_dir(dir).args(args);
    c
}

/// Runs `command`; its time, peak memory (KiB, from /proc while it runs),
/// exit code, and its stdout and stderr.
fn run(mut command: Command, dir: &Path) -> (Duration, Option<u64>, i32, String) {
    let out_path = dir.join("child.out");
    let out = File::create(&out_path).expect("output file");
    let err = out.try_clone().expect("output file");
    let start = Instant::now();
    let mut child = command
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .expect("running a child");
    let (code, peak) = watch(&mut child);
    let elapsed = start.elapsed();
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    (elapsed, peak, code, text)
}
