//! Journal write overhead as the application sees it (BENCHMARKS.md,
//! "Journal write overhead").
//!
//! A target table, the running example's `orders(id INTEGER PRIMARY KEY,
//! cents INTEGER NOT NULL, status TEXT NOT NULL)`, with `rows` rows (default
//! 1,000,000; `CUTOVER_BENCH_ROWS` overrides). The application is a Python
//! program on the system's SQLite (`sqlite3` module), with its connection
//! defaults for `journal_mode` and `synchronous` (printed; on Debian's
//! library: `delete` and `2` = FULL). It makes `rows` single-row writes,
//! committed in batches of 1,000, on a fresh copy of the table without
//! triggers and on another after `cutover journal install`: same seed, same
//! rows, one after the other, three times with the order alternating
//! (`CUTOVER_BENCH_REPEATS`). Workloads (`CUTOVER_BENCH_WORKLOADS`, default
//! `update,update-stride,insert,delete`):
//!
//! - `update`: `UPDATE orders SET cents = cents + 1 WHERE id = ?` on ids
//!   drawn at random (seeded) from the table;
//! - `update-stride`: the same updates on ids `(i * 13) % rows + 1`, the
//!   pattern of `benches/perf.rs` (each batch of 1,000 touches a few dozen
//!   pages, so commits write little and the triggers' CPU cost shows);
//! - `insert`: `INSERT INTO orders VALUES (?, ?, 'active')` of new ids past
//!   the last one;
//! - `delete`: `DELETE FROM orders WHERE id = ?` of every row, in a seeded
//!   random order.
//!
//! The time is measured inside the Python process, around the writes only:
//! wall time, and the process's CPU time (user and system,
//! `time.process_time()`), which the load of a shared machine moves much
//! less; the summary gives the median ratio of each.
//! `CUTOVER_BENCH_DIR` picks where the databases go.

use std::path::{Path, PathBuf};
use std::process::Command;

use rusqlite::{Connection, params};

const SPEC: &str = include_str!("../fixtures/orders/spec.toml");
const SOURCE_DDL: &str =
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL)";
const TARGET_DDL: &str =
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL)";

/// The application: `python3 -c APP DB WORKLOAD ROWS SEED`; prints
/// `seconds journal_mode synchronous sqlite_version cpu_seconds`.
const APP: &str = r#"
import random, sqlite3, sys, time
db, workload, rows, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
if workload == "update":
    ids = [rng.randrange(rows) + 1 for _ in range(rows)]
    sql = "UPDATE orders SET cents = cents + 1 WHERE id = ?"
    args = [(i,) for i in ids]
elif workload == "update-stride":
    ids = [(i * 13) % rows + 1 for i in range(1, rows + 1)]
    sql = "UPDATE orders SET cents = cents + 1 WHERE id = ?"
    args = [(i,) for i in ids]
elif workload == "insert":
    sql = "INSERT INTO orders (id, cents, status) VALUES (?, ?, 'active')"
    args = [(rows + 1 + i, rng.randrange(10_000_000)) for i in range(rows)]
elif workload == "delete":
    ids = list(range(1, rows + 1))
    rng.shuffle(ids)
    sql = "DELETE FROM orders WHERE id = ?"
    args = [(i,) for i in ids]
else:
    sys.exit("unknown workload " + workload)
con = sqlite3.connect(db, isolation_level=None)
mode = con.execute("PRAGMA journal_mode").fetchone()[0]
sync = con.execute("PRAGMA synchronous").fetchone()[0]
start = time.perf_counter()
cpu = time.process_time()
for b in range(0, len(args), 1000):
    con.execute("BEGIN")
    for a in args[b:b + 1000]:
        if con.execute(sql, a).rowcount != 1:
            sys.exit("a write changed no row: %s %r" % (sql, a))
    con.execute("COMMIT")
took = time.perf_counter() - start
cpu = time.process_time() - cpu
con.close()
print("%.3f %s %s %s %.3f" % (took, mode, sync, sqlite3.sqlite_version, cpu))
"#;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rows: i64 = env_or("CUTOVER_BENCH_ROWS", 1_000_000);
    let repeats: usize = env_or("CUTOVER_BENCH_REPEATS", 3);
    let workloads: String = env_or(
        "CUTOVER_BENCH_WORKLOADS",
        "update,update-stride,insert,delete".into(),
    );
    let base = std::env::var_os("CUTOVER_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).expect("a temporary folder");
    let d = dir.path();
    println!(
        "journal overhead: {rows} rows, {repeats} repetitions, in {}",
        d.display()
    );
    generate(&d.join("base.db"), rows);
    Connection::open(d.join("source.db"))
        .and_then(|c| c.execute_batch(SOURCE_DDL))
        .expect("an empty source");
    std::fs::write(
        d.join("spec.toml"),
        SPEC.replace("target.db", "journaled.db"),
    )
    .expect("the spec");

    let mut summary = Vec::new();
    let mut settings = String::new();
    for (w, workload) in workloads.split(',').enumerate() {
        let mut without = Vec::new();
        let mut with = Vec::new();
        let mut cpu_without = Vec::new();
        let mut cpu_with = Vec::new();
        for rep in 0..repeats {
            let seed = 0xC0FFEE + w as u64;
            std::fs::copy(d.join("base.db"), d.join("plain.db")).expect("copy");
            std::fs::copy(d.join("base.db"), d.join("journaled.db")).expect("copy");
            let status = Command::new(env!("CARGO_BIN_EXE_cutover"))
                .args(["journal", "install", "--spec", "spec.toml", "--quiet"])
                .current_dir(d)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("running cutover");
            assert!(status.success(), "cutover journal install failed");
            // Alternate which goes first, so that a drift in the machine's
            // speed falls on both sides.
            let order: [bool; 2] = if rep % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for journaled in order {
                let db = if journaled {
                    "journaled.db"
                } else {
                    "plain.db"
                };
                let (secs, cpu, s) = app(d, db, workload, rows, seed);
                settings = s;
                println!(
                    "{workload:<7} run {}: {:<16} {secs:>8.3} s (cpu {cpu:.3} s)",
                    rep + 1,
                    if journaled {
                        "with journal"
                    } else {
                        "without journal"
                    }
                );
                if journaled {
                    with.push(secs);
                    cpu_with.push(cpu);
                    let n = journal_entries(&d.join(db));
                    assert_eq!(n, rows, "the journal must hold one entry per write");
                } else {
                    without.push(secs);
                    cpu_without.push(cpu);
                }
            }
        }
        let mut ratios: Vec<f64> = with.iter().zip(&without).map(|(a, b)| a / b).collect();
        let mut cpu_ratios: Vec<f64> = cpu_with
            .iter()
            .zip(&cpu_without)
            .map(|(a, b)| a / b)
            .collect();
        summary.push(Summary {
            workload: workload.to_string(),
            without: median(&mut without.clone()),
            with: median(&mut with.clone()),
            ratio: median(&mut ratios),
            ratios,
            cpu_without: median(&mut cpu_without.clone()),
            cpu_with: median(&mut cpu_with.clone()),
            cpu_ratio: median(&mut cpu_ratios),
            cpu_ratios,
        });
    }
    println!("\napplication: python3 sqlite3, {settings}; batches of 1,000 writes per commit");
    println!(
        "\n| workload | rows | without (s) | with (s) | ratio (median) | ratios per run | cpu without (s) | cpu with (s) | cpu ratio (median) | cpu ratios per run |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let list = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for s in summary {
        println!(
            "| {} | {rows} | {:.2} | {:.2} | {:.2}x | {} | {:.2} | {:.2} | {:.2}x | {} |",
            s.workload,
            s.without,
            s.with,
            s.ratio,
            list(&s.ratios),
            s.cpu_without,
            s.cpu_with,
            s.cpu_ratio,
            list(&s.cpu_ratios),
        );
    }
}

/// One workload's medians (wall and CPU seconds) and ratios per run.
struct Summary {
    workload: String,
    without: f64,
    with: f64,
    ratio: f64,
    ratios: Vec<f64>,
    cpu_without: f64,
    cpu_with: f64,
    cpu_ratio: f64,
    cpu_ratios: Vec<f64>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `rows` orders, ids 1..=rows, written fast (no rollback journal, no
/// sync); the file's own settings stay SQLite's defaults.
fn generate(db: &Path, rows: i64) {
    let c = Connection::open(db).expect("create");
    c.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")
        .expect("pragmas");
    c.execute_batch(TARGET_DDL).expect("ddl");
    c.execute_batch("BEGIN").expect("begin");
    {
        let mut st = c
            .prepare("INSERT INTO orders VALUES (?1, ?2, ?3)")
            .expect("prepare");
        for id in 1..=rows {
            let status = if id % 3 == 0 { "closed" } else { "active" };
            st.execute(params![id, (id * 7919) % 10_000_000, status])
                .expect("insert");
        }
    }
    c.execute_batch("COMMIT").expect("commit");
}

/// Runs the application on `db`; its wall and CPU seconds and its settings.
fn app(d: &Path, db: &str, workload: &str, rows: i64, seed: u64) -> (f64, f64, String) {
    let out = Command::new("python3")
        .args([
            "-c",
            APP,
            db,
            workload,
            &rows.to_string(),
            &seed.to_string(),
        ])
        .current_dir(d)
        .output()
        .expect("python3 is installed");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the application failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut f = text.split_whitespace();
    let secs: f64 = f.next().and_then(|s| s.parse().ok()).expect("seconds");
    let (mode, sync, version) = (
        f.next().unwrap_or("?"),
        f.next().unwrap_or("?"),
        f.next().unwrap_or("?"),
    );
    let cpu: f64 = f.next().and_then(|s| s.parse().ok()).expect("cpu seconds");
    (
        secs,
        cpu,
        format!("SQLite {version}, journal_mode={mode}, synchronous={sync}"),
    )
}

fn journal_entries(db: &Path) -> i64 {
    Connection::open(db)
        .and_then(|c| c.query_row("SELECT count(*) FROM _cutover_journal", [], |r| r.get(0)))
        .expect("counting the journal")
}
