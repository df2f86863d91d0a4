//! `cutover watch` on the running example's schema scaled up (BENCHMARKS.md,
//! "Watch"): a table of `CUTOVER_BENCH_ROWS` rows (default 1,000,000;
//! 10,000,000 for the recorded run), `CUTOVER_BENCH_ENTRIES` journaled
//! updates of scattered rows (default 100,000), then
//!
//! - the first watch pass over those entries;
//! - a pass with nothing new;
//! - beside them, `replay --rehearse` (its apply and its closing reconcile
//!   timed apart) and `replay --dry-run` of the same entries once fenced
//!   (whole: its closing reconcile reads every row of both sides).
//!
//! Each is the release binary in a child process, timed whole. The rows are
//! written straight into both SQLite files (the load is not what is
//! measured), then the journal installed and the updates made through the
//! triggers in batches of 1,000.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

const SPEC: &str = include_str!("../fixtures/orders/spec.toml");

fn env(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn cutover(dir: &Path, args: &[&str]) -> (Duration, i32) {
    let bin = env!("CARGO_BIN_EXE_cutover");
    let t = Instant::now();
    let out = Command::new(bin)
        .args(args)
        .args(["--quiet", "--spec", "spec.toml"])
        .current_dir(dir)
        .output()
        .expect("running cutover");
    let code = out.status.code().unwrap_or(-1);
    if !matches!(code, 0 | 1) {
        panic!(
            "cutover {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (t.elapsed(), code)
}

fn fill(path: &Path, ddl: &str, rows: i64, target: bool) {
    let c = Connection::open(path).expect("a database");
    c.execute_batch(&format!("PRAGMA journal_mode=WAL; {ddl}; BEGIN"))
        .expect("the table");
    {
        let mut st = c
            .prepare("INSERT INTO orders VALUES (?1, ?2, ?3)")
            .expect("an insert");
        for id in 1..=rows {
            let cents = id % 100_000;
            if target {
                st.execute(params![id, cents, "active"])
            } else {
                st.execute(params![
                    id,
                    format!("{}.{:02}", cents / 100, cents % 100),
                    "A"
                ])
            }
            .expect("a row");
        }
    }
    c.execute_batch("COMMIT").expect("commit");
}

fn main() {
    let rows = env("CUTOVER_BENCH_ROWS", 1_000_000);
    let entries = env("CUTOVER_BENCH_ENTRIES", 100_000);
    let dir = tempfile::tempdir().expect("a folder");
    let d = dir.path();
    std::fs::write(d.join("spec.toml"), SPEC).expect("the spec");
    let t = Instant::now();
    fill(
        &d.join("source.db"),
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL)",
        rows,
        false,
    );
    fill(
        &d.join("target.db"),
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL)",
        rows,
        true,
    );
    cutover(d, &["journal", "install"]);
    let app = Connection::open(d.join("target.db")).expect("the target");
    let mut n = 0;
    while n < entries {
        app.execute_batch("BEGIN").expect("begin");
        for _ in 0..1000.min(entries - n) {
            // Scattered rows: a multiplicative step through the table.
            let id = (n * 7_919) % rows + 1;
            app.execute(
                "UPDATE orders SET cents = cents + 1 WHERE id = ?1",
                params![id],
            )
            .expect("an update");
            n += 1;
        }
        app.execute_batch("COMMIT").expect("commit");
    }
    drop(app);
    println!(
        "watch bench: {rows} rows, {entries} journaled updates (setup {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let (first, code) = cutover(d, &["watch"]);
    assert_eq!(code, 0, "every update can go back");
    println!(
        "  watch, first pass over {entries} new entries: {:.2} s",
        first.as_secs_f64()
    );
    let (idle, _) = cutover(d, &["watch"]);
    println!(
        "  watch, a pass with nothing new:           {:.3} s",
        idle.as_secs_f64()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cutover"))
        .args([
            "--format",
            "json",
            "replay",
            "--rehearse",
            "--quiet",
            "--spec",
            "spec.toml",
        ])
        .current_dir(d)
        .output()
        .expect("the rehearsal");
    let rehearsal: serde_json::Value = serde_json::from_slice(&out.stdout).expect("its JSON");
    println!(
        "  replay --rehearse: apply {:.2} s, closing reconcile {:.2} s",
        rehearsal["rehearsal"]["apply_seconds"]
            .as_f64()
            .unwrap_or(f64::NAN),
        rehearsal["rehearsal"]["reconcile_seconds"]
            .as_f64()
            .unwrap_or(f64::NAN)
    );
    let (estimated, _) = cutover(d, &["watch"]);
    println!(
        "  watch, nothing new, with an estimate:      {:.3} s",
        estimated.as_secs_f64()
    );
    cutover(d, &["fence", "on"]);
    let (dry, code) = cutover(d, &["replay", "--dry-run"]);
    assert_eq!(code, 0, "the dry run passes");
    println!(
        "  replay --dry-run of the same entries:      {:.2} s",
        dry.as_secs_f64()
    );
    println!(
        "  watch / dry run: {:.2}",
        first.as_secs_f64() / dry.as_secs_f64()
    );
}
