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
//! fresh copy. `CUTOVER_BENCH_DIR` picks where the databases go;
//! `CUTOVER_BENCH_BIN` another cutover binary to time (an earlier build, to
//! compare under the same load), this build's by default.
//!
//! Beside wall time, each command's CPU time (user and system, from the
//! children's times in /proc/self/stat): on a shared machine the wall time
//! of one run moves with the load, its CPU time much less. The summary gives
//! both per table, and what each table added cost between one count and
//! the next (the fixed cost of starting a command cancels there).

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
    install_cpu: Duration,
    install_kb: Option<u64>,
    write: Duration,
    first_write: Duration,
    fence: Duration,
    fence_cpu: Duration,
    fence_kb: Option<u64>,
}

/// What one run of a command took.
struct Run {
    wall: Duration,
    cpu: Duration,
    kb: Option<u64>,
}

fn main() {
    let counts: String = env_or("CUTOVER_BENCH_TABLES", "1,100,1000".to_string());
    let writes: usize = env_or("CUTOVER_BENCH_WRITES", 10_000);
    let runs: usize = env_or("CUTOVER_BENCH_RUNS", 3).max(1);
    let base = std::env::var_os("CUTOVER_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    // Read before the first child is timed: getconf is a child too.
    clock_ticks();
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
            let install = cutover(d, &["journal", "install"]);
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
            let fence = cutover(d, &["fence", "on"]);
            println!(
                "{n:>5} tables, run {}: install {:.3} s (cpu {:.3} s, {} MB), write {:.1} µs, open + first write {:.2} ms, fence on {:.3} s (cpu {:.3} s, {} MB)",
                run + 1,
                install.wall.as_secs_f64(),
                install.cpu.as_secs_f64(),
                mb(install.kb),
                write.as_secs_f64() * 1e6,
                first_write.as_secs_f64() * 1e3,
                fence.wall.as_secs_f64(),
                fence.cpu.as_secs_f64(),
                mb(fence.kb),
            );
            let f = Figures {
                tables: n,
                install: install.wall,
                install_cpu: install.cpu,
                install_kb: install.kb,
                write,
                first_write,
                fence: fence.wall,
                fence_cpu: fence.cpu,
                fence_kb: fence.kb,
            };
            best = Some(match best {
                None => f,
                Some(b) => Figures {
                    tables: n,
                    install: b.install.min(f.install),
                    install_cpu: b.install_cpu.min(f.install_cpu),
                    install_kb: b.install_kb.max(f.install_kb),
                    write: b.write.min(f.write),
                    first_write: b.first_write.min(f.first_write),
                    fence: b.fence.min(f.fence),
                    fence_cpu: b.fence_cpu.min(f.fence_cpu),
                    fence_kb: b.fence_kb.max(f.fence_kb),
                },
            });
        }
        all.extend(best);
    }
    let per = |d: Duration, n: usize| d.as_secs_f64() * 1e3 / n.max(1) as f64;
    println!(
        "\n| tables | journal install | cpu | per table (cpu) | one write | open + first write | fence on | cpu | per table (cpu) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for f in &all {
        println!(
            "| {} | {:.3} s, {} MB | {:.3} s | {:.2} ms ({:.2} ms) | {:.1} µs | {:.2} ms | {:.3} s, {} MB | {:.3} s | {:.2} ms ({:.2} ms) |",
            f.tables,
            f.install.as_secs_f64(),
            mb(f.install_kb),
            f.install_cpu.as_secs_f64(),
            per(f.install, f.tables),
            per(f.install_cpu, f.tables),
            f.write.as_secs_f64() * 1e6,
            f.first_write.as_secs_f64() * 1e3,
            f.fence.as_secs_f64(),
            mb(f.fence_kb),
            f.fence_cpu.as_secs_f64(),
            per(f.fence, f.tables),
            per(f.fence_cpu, f.tables),
        );
    }
    // What each table added costs, between one count and the next: the
    // fixed cost of a command (starting, opening both databases) cancels.
    println!("\neach table added: install wall, cpu; fence on wall, cpu");
    for w in all.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let added = |x: Duration, y: Duration| {
            (y.as_secs_f64() - x.as_secs_f64()) * 1e3 / (b.tables - a.tables).max(1) as f64
        };
        println!(
            "{:>5} → {:>5} tables: {:.2} ms, {:.2} ms; {:.2} ms, {:.2} ms",
            a.tables,
            b.tables,
            added(a.install, b.install),
            added(a.install_cpu, b.install_cpu),
            added(a.fence, b.fence),
            added(a.fence_cpu, b.fence_cpu),
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

/// Runs `cutover ARGS --spec spec.toml`: its wall and CPU time and peak
/// memory.
fn cutover(d: &Path, args: &[&str]) -> Run {
    let bin = std::env::var_os("CUTOVER_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cutover")));
    let cpu_before = children_cpu();
    let start = Instant::now();
    let mut child = Command::new(bin)
        .args(args)
        .args(["--spec", "spec.toml"])
        .current_dir(d)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running cutover");
    let (code, kb) = support::watch(&mut child);
    let wall = start.elapsed();
    if code != 0 {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        panic!("cutover {args:?} exited {code}: {err}");
    }
    Run {
        wall,
        cpu: children_cpu().saturating_sub(cpu_before),
        kb,
    }
}

/// The user and system time of this process's children that have been
/// waited for (`cutime` and `cstime` of /proc/self/stat).
fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // cutime and cstime are fields 16 and 17 of stat(5), 14 and 15 here.
    let ticks: u64 =
        fields[13].parse::<u64>().unwrap_or(0) + fields[14].parse::<u64>().unwrap_or(0);
    Duration::from_secs_f64(ticks as f64 / clock_ticks())
}

/// Clock ticks per second, as `getconf CLK_TCK` says (100 on Linux).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(100.0)
    })
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
