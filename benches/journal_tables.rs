//! The journal on schemas of real size (BENCHMARKS.md, "Journal and fence
//! by number of tables").
//!
//! For each count of tables (`CUTOVER_BENCH_TABLES`, default `1,100,1000`):
//! a source and a target of that many tables `t<i>(id INTEGER PRIMARY KEY,
//! v TEXT NOT NULL)`, 100 rows each, and a spec listing them all. It
//! measures, on the release binary run as a child process (time and peak
//! memory, VmHWM, read from /proc while it runs):
//!
//! - `cutover journal install` on the fresh target;
//! - one application write: `UPDATE t1 SET v = v || 'x' WHERE id = ?`
//!   through a rusqlite connection opened after the install, `writes`
//!   (default 10,000; `CUTOVER_BENCH_WRITES`) single-row updates committed
//!   in batches of 1,000 (`synchronous=FULL`, rollback journal), the time per
//!   write; and, apart, opening a connection and making its first write
//!   (SQLite reads the whole schema then, once per connection);
//! - `cutover fence on`.
//!
//! Each figure is the best of `CUTOVER_BENCH_RUNS` runs (default 3) on a
//! fresh copy. `CUTOVER_BENCH_DIR` picks where the databases go.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

struct Figures {
    tables: usize,
    install: Duration,
    install_kb: Option<u64>,
    write: Duration,
    first_write: Duration,
    fence: Duration,
    fence_kb: Option<u64>,
}

fn main() {
    let counts: String = env_or("CUTOVER_BENCH_TABLES", "1,100,1000".to_string());
    let writes: usize = env_or("CUTOVER_BENCH_WRITES", 10_000);
    let runs: usize = env_or("CUTOVER_BENCH_RUNS", 3).max(1);
    let base = std::env::var_os("CUTOVER_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).expect("a temporary folder");
    let d = dir.path();
    println!(
        "journal by number of tables: {counts}; {writes} writes; best of {runs}; in {}",
        d.display()
    );
    let mut all = Vec::new();
    for n in counts
        .split(',')
        .filter_map(|c| c.trim().parse::<usize>().ok())
    {
        generate(d, n);
        let mut best: Option<Figures> = None;
        for run in 0..runs {
            std::fs::copy(d.join("target.base.db"), d.join("target.db")).expect("copy");
            let (install, install_kb) = cutover(d, &["journal", "install"]);
            let (write, first_write) = app_writes(&d.join("target.db"), writes);
            let entries: i64 = Connection::open(d.join("target.db"))
                .and_then(|c| {
                    c.query_row("SELECT count(*) FROM _cutover_journal", [], |r| r.get(0))
                })
                .expect("counting the journal");
            assert_eq!(
                entries as usize,
                writes + 1,
                "one entry per write (and the first write's)"
            );
            let (fence, fence_kb) = cutover(d, &["fence", "on"]);
            println!(
                "{n:>5} tables, run {}: install {:.3} s ({} MB), write {:.1} µs, open + first write {:.2} ms, fence on {:.3} s ({} MB)",
                run + 1,
                install.as_secs_f64(),
                mb(install_kb),
                write.as_secs_f64() * 1e6,
                first_write.as_secs_f64() * 1e3,
                fence.as_secs_f64(),
                mb(fence_kb),
            );
            let f = Figures {
                tables: n,
                install,
                install_kb,
                write,
                first_write,
                fence,
                fence_kb,
            };
            best = Some(match best {
                None => f,
                Some(b) => Figures {
                    tables: n,
                    install: b.install.min(f.install),
                    install_kb: b.install_kb.max(f.install_kb),
                    write: b.write.min(f.write),
                    first_write: b.first_write.min(f.first_write),
                    fence: b.fence.min(f.fence),
                    fence_kb: b.fence_kb.max(f.fence_kb),
                },
            });
        }
        all.extend(best);
    }
    let first = all.first().map(|f| (f.install, f.write, f.fence));
    println!(
        "\n| tables | journal install | one write | open + first write | fence on | install ÷ 1 table | write ÷ 1 table |"
    );
    println!("|---|---|---|---|---|---|---|");
    for f in &all {
        let (i1, w1, _) = first.expect("a first row");
        println!(
            "| {} | {:.3} s, {} MB | {:.1} µs | {:.2} ms | {:.3} s, {} MB | {:.2}× | {:.2}× |",
            f.tables,
            f.install.as_secs_f64(),
            mb(f.install_kb),
            f.write.as_secs_f64() * 1e6,
            f.first_write.as_secs_f64() * 1e3,
            f.fence.as_secs_f64(),
            mb(f.fence_kb),
            f.install.as_secs_f64() / i1.as_secs_f64(),
            f.write.as_secs_f64() / w1.as_secs_f64(),
        );
    }
}

fn mb(kb: Option<u64>) -> String {
    kb.map_or("?".into(), |k| format!("{:.1}", k as f64 / 1024.0))
}

/// A source and a target of `n` tables, 100 rows each, and their spec.
fn generate(d: &Path, n: usize) {
    let mut spec = String::from(
        "[source]\nurl = \"sqlite://source.db\"\n\n[target]\nurl = \"sqlite://target.db\"\n",
    );
    for db in ["source.db", "target.base.db"] {
        let _ = std::fs::remove_file(d.join(db));
        let mut c = Connection::open(d.join(db)).expect("create");
        let tx = c.transaction().expect("begin");
        for i in 1..=n {
            tx.execute_batch(&format!(
                "CREATE TABLE t{i} (id INTEGER PRIMARY KEY, v TEXT NOT NULL)"
            ))
            .expect("ddl");
            let mut st = tx
                .prepare(&format!("INSERT INTO t{i} VALUES (?1, ?2)"))
                .expect("prepare");
            for id in 1..=100i64 {
                st.execute(params![id, format!("row {id}")])
                    .expect("insert");
            }
        }
        tx.commit().expect("commit");
    }
    for i in 1..=n {
        spec.push_str(&format!(
            "\n[[tables]]\nname = \"t{i}\"\nkey = [\"id\"]\n\n[[tables.columns]]\nsource = \"v\"\ntarget = \"v\"\n"
        ));
    }
    std::fs::write(d.join("spec.toml"), spec).expect("the spec");
}

/// Runs `cutover ARGS --spec spec.toml`: its time and peak memory.
fn cutover(d: &Path, args: &[&str]) -> (Duration, Option<u64>) {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cutover"))
        .args(args)
        .args(["--spec", "spec.toml"])
        .current_dir(d)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running cutover");
    let (code, kb) = support::watch(&mut child);
    let took = start.elapsed();
    if code != 0 {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        panic!("cutover {args:?} exited {code}: {err}");
    }
    (took, kb)
}

/// The time of one write (`writes` updates of `t1`, batches of 1,000), and
/// of opening a connection and making its first write.
fn app_writes(db: &Path, writes: usize) -> (Duration, Duration) {
    let start = Instant::now();
    let c = Connection::open(db).expect("open");
    c.execute_batch("PRAGMA synchronous = FULL")
        .expect("pragma");
    c.execute("UPDATE t1 SET v = v || 'x' WHERE id = 1", [])
        .expect("first write");
    let first = start.elapsed();
    let mut st = c
        .prepare("UPDATE t1 SET v = v || 'x' WHERE id = ?1")
        .expect("prepare");
    let start = Instant::now();
    for b in 0..writes.div_ceil(1000) {
        c.execute_batch("BEGIN").expect("begin");
        for i in b * 1000..((b + 1) * 1000).min(writes) {
            let n = st.execute([((i * 13) % 100 + 1) as i64]).expect("update");
            assert_eq!(n, 1);
        }
        c.execute_batch("COMMIT").expect("commit");
    }
    (start.elapsed() / writes.max(1) as u32, first)
}
