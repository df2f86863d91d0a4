//! Throughput and memory of the MySQL engine's key-ordered scan
//! (`cutover::db::mysql`, in process: the engine is not selectable in a
//! spec yet), next to what the server and its own client do with the same
//! table, one after the other in one run:
//!
//! - the fixture: `big (id INT PRIMARY KEY, n BIGINT, amount
//!   DECIMAL(12,2), name VARCHAR(40) utf8mb4_general_ci, at DATETIME(3))`,
//!   built in the server from MariaDB's `seq_1_to_N`, in a database the
//!   bench creates and drops;
//! - the engine's scan in key order (an index serves it), blocks of 1,024
//!   rows, every value decoded into its block; the same scan by `name`,
//!   a text key the server must sort by its bytes;
//! - `mariadb -e 'SELECT … ORDER BY id' > /dev/null`, as the client reads
//!   by default (the whole result held, then printed) and with `--quick`
//!   (row by row);
//! - the server alone: `SELECT COUNT(*), BIT_XOR(CRC32(CONCAT_WS(…)))`.
//!
//! `cargo bench --bench mysql` runs 1,000,000 rows; `CUTOVER_BENCH_ROWS`
//! sets another size, `CUTOVER_BENCH_MYSQL` the server (default
//! `mysql://root@127.0.0.1:3306/test`, TCP, no password). The engine's
//! memory is this process's peak (VmHWM) after the table is built by the
//! server; the client's is read from /proc while it runs.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cutover::db::Access;
use cutover::db::mysql::MySql;
use cutover::db::mysql::scan::Scan;

mod support;
use support::watch;

/// `(user, host, port)` of the bench's server URL.
fn server() -> (String, String, u16) {
    let url = std::env::var("CUTOVER_BENCH_MYSQL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
    let rest = url.strip_prefix("mysql://").expect("a mysql:// URL");
    let authority = rest.split('/').next().unwrap_or("");
    let (user, hostport) = authority.rsplit_once('@').expect("a user");
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "3306"));
    (
        user.to_string(),
        host.to_string(),
        port.parse().expect("a port"),
    )
}

fn client(db: Option<&str>) -> Command {
    let (user, host, port) = server();
    let mut c = Command::new("mariadb");
    c.args([
        "--protocol=TCP",
        &format!("--host={host}"),
        &format!("--port={port}"),
        &format!("--user={user}"),
        "--batch",
        "--skip-column-names",
    ]);
    if let Some(db) = db {
        c.arg(format!("--database={db}"));
    }
    c
}

fn sql(db: Option<&str>, sql: &str) -> String {
    let out = client(db)
        .args(["-e", sql])
        .output()
        .expect("running mariadb");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The bench's own database, dropped when the bench ends (or panics).
struct Database(String);

impl Drop for Database {
    fn drop(&mut self) {
        sql(None, &format!("DROP DATABASE IF EXISTS `{}`", self.0));
    }
}

fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn line(what: &str, rows: u64, time: Duration, memory: &str) {
    println!(
        "| {what} | {rows} | {:.2} s | {:.0} rows/s | {memory} |",
        time.as_secs_f64(),
        rows as f64 / time.as_secs_f64()
    );
}

/// Scans `big` through the engine by `key` (then the other columns);
/// rows read and the time taken.
fn engine_scan(db: &MySql, key: &str) -> (u64, Duration) {
    let mut columns = vec![key];
    columns.extend(
        ["id", "n", "amount", "name", "at"]
            .iter()
            .filter(|c| **c != key),
    );
    let scan = Scan::new(db, "big", &columns, 1).expect("the scan");
    let start = Instant::now();
    let mut rows = 0u64;
    db.scan(&scan, None, 1024, &mut |b| {
        rows += b.rows() as u64;
        Ok(true)
    })
    .expect("scanning");
    (rows, start.elapsed())
}

fn main() {
    let rows: u64 = std::env::var("CUTOVER_BENCH_ROWS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1_000_000);
    let name = format!("cutover_bench_{}", std::process::id());
    sql(None, &format!("CREATE DATABASE `{name}`"));
    let db = Database(name);
    let built = Instant::now();
    sql(
        Some(&db.0),
        &format!(
            "CREATE TABLE big (id INT PRIMARY KEY, n BIGINT NOT NULL, amount DECIMAL(12,2) NOT NULL,
               name VARCHAR(40) COLLATE utf8mb4_general_ci NOT NULL, at DATETIME(3) NOT NULL);
             INSERT INTO big SELECT seq, seq * 7919 % 1000003, (seq % 100000) / 100,
               CONCAT('customer ', seq), TIMESTAMP('2024-01-01') + INTERVAL (seq * 1001000) MICROSECOND
             FROM seq_1_to_{rows};"
        ),
    );
    println!(
        "built {rows} rows in {:.1} s\n",
        built.elapsed().as_secs_f64()
    );
    let (user, host, port) = server();
    let url = format!("mysql://{user}@{host}:{port}/{}", db.0);
    let engine = MySql::open(&url, Access::Read, "source").expect("opening");
    // Warm the buffer pool, so that every run below reads from memory.
    sql(Some(&db.0), "SELECT COUNT(*), SUM(LENGTH(name)) FROM big");

    println!("| what | rows | time | rate | peak memory |");
    println!("|---|---|---|---|---|");
    let before = peak_kib();
    let (n, t) = engine_scan(&engine, "id");
    assert_eq!(n, rows);
    line(
        "engine scan by id (INT key)",
        n,
        t,
        &format!(
            "{} MiB (process, {} MiB before)",
            peak_kib() / 1024,
            before / 1024
        ),
    );
    let (n, t) = engine_scan(&engine, "name");
    assert_eq!(n, rows);
    line(
        "engine scan by name (text key, sorted by its bytes)",
        n,
        t,
        &format!("{} MiB (process)", peak_kib() / 1024),
    );
    for (what, quick) in [
        ("mariadb -e 'SELECT … ORDER BY id' > /dev/null", false),
        ("the same with --quick", true),
    ] {
        let mut c = client(Some(&db.0));
        if quick {
            c.arg("--quick");
        }
        let start = Instant::now();
        let mut child = c
            .args(["-e", "SELECT id, n, amount, name, at FROM big ORDER BY id"])
            .stdout(Stdio::null())
            .spawn()
            .expect("mariadb");
        let (code, peak) = watch(&mut child);
        let t = start.elapsed();
        assert_eq!(code, 0);
        line(what, rows, t, &format!("{} MiB", peak.unwrap_or(0) / 1024));
    }
    let start = Instant::now();
    let out = sql(
        Some(&db.0),
        "SELECT COUNT(*), BIT_XOR(CRC32(CONCAT_WS('|', id, n, amount, name, at))) FROM big",
    );
    line(
        &format!("server: COUNT(*), BIT_XOR(CRC32(CONCAT_WS(…))) = {out}"),
        rows,
        start.elapsed(),
        "(server)",
    );
}
