//! The PostgreSQL client alone (BENCHMARKS.md, "The PostgreSQL client"):
//! cutover's own client (`cutover::db::postgres::client`, a `tokio-postgres`
//! client behind blocking calls that drives a whole COPY inside one
//! `block_on`), the one the tool, its tests and its benches use, next to
//! the driver itself (`tokio-postgres`, each whole measurement one
//! `block_on`: what no blocking wrapper can beat), one after the other in
//! one run, on one server, over the same plaintext TCP connection settings:
//!
//! - **COPY out**: `COPY src TO STDOUT (FORMAT binary)` of the whole table,
//!   every piece of data counted and dropped;
//! - **COPY in**: the same rows, encoded once ahead in binary and handed to
//!   the client in pieces of 256 KiB (as `cutover load` does), into an empty
//!   table without a key (`TRUNCATE`d before each run, untimed);
//! - **keyed queries**: one prepared `SELECT n, status FROM src WHERE id =
//!   $1` after another for `CUTOVER_BENCH_QUERIES` keys spread over the
//!   table, each row read.
//!
//! Each measurement is the best of `CUTOVER_BENCH_RUNS` runs (default 3),
//! the two clients taking turns at going first. Besides the time it gives
//! the client's own CPU time (its thread's, from /proc), since the server
//! shares the machine's cores. Both clients must see the same data.
//!
//! `cargo bench --bench pg_client` runs 1,000,000 rows and 100,000 queries;
//! `CUTOVER_BENCH_ROWS` and `CUTOVER_BENCH_QUERIES` set others,
//! `CUTOVER_BENCH_PG` the server (default
//! `postgres://root@127.0.0.1:5432/postgres`), in which the bench creates a
//! database of its own and drops it at the end.

use std::time::{Duration, Instant};

use bytes::Bytes;
use cutover::db::postgres::client::Client;
use futures_util::{SinkExt, StreamExt};

mod support;
use support::{connect, try_connect};

/// Rows per piece of COPY input, as `cutover load` hands them over.
const CHUNK: usize = 256 * 1024;

/// One client under test: the few things the bench asks of it.
trait Side {
    fn name(&self) -> &'static str;
    fn batch(&mut self, sql: &str);
    /// The pieces of data and the bytes a COPY out sent.
    fn copy_out(&mut self, sql: &str) -> (u64, u64);
    /// The rows a COPY in of `chunks` wrote.
    fn copy_in(&mut self, sql: &str, chunks: &[Vec<u8>]) -> u64;
    /// The sum of `n` and of the status's lengths over the rows of `keys`.
    fn lookups(&mut self, sql: &str, keys: &[i64]) -> (i64, usize);
}

/// cutover's client, as the engine uses it.
struct Cutover(Client);

/// `tokio-postgres` on a runtime of its own, each measurement one future.
struct Driver {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Driver {
    fn connect(url: &str) -> Driver {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let (client, connection) = runtime
            .block_on(tokio_postgres::connect(url, tokio_postgres::NoTls))
            .expect("connecting");
        runtime.spawn(async move {
            let _ = connection.await;
        });
        Driver { runtime, client }
    }
}

impl Side for Cutover {
    fn name(&self) -> &'static str {
        "cutover client"
    }

    fn batch(&mut self, sql: &str) {
        self.0.batch_execute(sql).expect(sql);
    }

    fn copy_out(&mut self, sql: &str) -> (u64, u64) {
        let (mut pieces, mut bytes) = (0, 0);
        self.0
            .copy_out(sql, &mut |piece| {
                pieces += 1;
                bytes += piece.len() as u64;
                Ok(true)
            })
            .expect("COPY out");
        (pieces, bytes)
    }

    fn copy_in(&mut self, sql: &str, chunks: &[Vec<u8>]) -> u64 {
        let mut w = self.0.copy_in(sql).expect("COPY in");
        for c in chunks {
            w.write_all(c).expect("COPY data");
        }
        w.finish().expect("COPY end")
    }

    fn lookups(&mut self, sql: &str, keys: &[i64]) -> (i64, usize) {
        let st = self.0.prepare(sql).expect("prepare");
        let (mut sum, mut len) = (0i64, 0usize);
        for k in keys {
            let r = self.0.query_one(&st, &[k]).expect("a row");
            sum += r.get::<_, i64>(0);
            len += r.get::<_, &str>(1).len();
        }
        (sum, len)
    }
}

impl Side for Driver {
    fn name(&self) -> &'static str {
        "tokio-postgres"
    }

    fn batch(&mut self, sql: &str) {
        self.runtime
            .block_on(self.client.batch_execute(sql))
            .expect(sql);
    }

    fn copy_out(&mut self, sql: &str) -> (u64, u64) {
        let client = &self.client;
        self.runtime.block_on(async {
            let stream = client.copy_out(sql).await.expect("COPY out");
            let mut stream = std::pin::pin!(stream);
            let (mut pieces, mut bytes) = (0, 0);
            while let Some(piece) = stream.next().await {
                pieces += 1;
                bytes += piece.expect("COPY data").len() as u64;
            }
            (pieces, bytes)
        })
    }

    fn copy_in(&mut self, sql: &str, chunks: &[Vec<u8>]) -> u64 {
        let client = &self.client;
        self.runtime.block_on(async {
            let sink = client.copy_in(sql).await.expect("COPY in");
            let mut sink = std::pin::pin!(sink);
            for c in chunks {
                sink.send(Bytes::copy_from_slice(c))
                    .await
                    .expect("COPY data");
            }
            sink.as_mut().finish().await.expect("COPY end")
        })
    }

    fn lookups(&mut self, sql: &str, keys: &[i64]) -> (i64, usize) {
        let client = &self.client;
        self.runtime.block_on(async {
            let st = client.prepare(sql).await.expect("prepare");
            let (mut sum, mut len) = (0i64, 0usize);
            for k in keys {
                let r = client.query_one(&st, &[k]).await.expect("a row");
                sum += r.get::<_, i64>(0);
                len += r.get::<_, &str>(1).len();
            }
            (sum, len)
        })
    }
}

/// The bench's own database, dropped when the bench ends (or panics).
struct Database {
    admin_url: String,
    name: String,
}

impl Drop for Database {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let dropped = try_connect(&self.admin_url)
            .and_then(|mut c| c.batch_execute(&drop).map_err(|e| e.to_string()));
        if let Err(e) = dropped {
            eprintln!("could not drop database {}: {e}", self.name);
        }
    }
}

/// CPU time of the calling thread so far; both clients run their runtime on
/// the thread that calls them.
fn thread_cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns = text
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

/// `rows` rows of `src` in binary COPY format, in pieces of about `CHUNK`.
fn encoded(rows: i64) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + 256);
    buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    buf.extend_from_slice(&0u32.to_be_bytes());
    buf.extend_from_slice(&0u32.to_be_bytes());
    for id in 1..=rows {
        let (n, status, at) = row(id);
        buf.extend_from_slice(&4i16.to_be_bytes());
        for v in [id, n] {
            buf.extend_from_slice(&8i32.to_be_bytes());
            buf.extend_from_slice(&v.to_be_bytes());
        }
        buf.extend_from_slice(&(status.len() as i32).to_be_bytes());
        buf.extend_from_slice(status.as_bytes());
        buf.extend_from_slice(&8i32.to_be_bytes());
        buf.extend_from_slice(&at.to_be_bytes());
        if buf.len() >= CHUNK {
            chunks.push(std::mem::replace(&mut buf, Vec::with_capacity(CHUNK + 256)));
        }
    }
    buf.extend_from_slice(&(-1i16).to_be_bytes());
    chunks.push(buf);
    chunks
}

/// Row `id`'s other columns: `n`, `status`, and `at` in microseconds since
/// 2000-01-01 (the server's epoch), as the fixture's SQL computes them.
fn row(id: i64) -> (i64, &'static str, i64) {
    let n = (id * 7919) % 10_000_000;
    let status = if id % 3 == 0 { "closed" } else { "active" };
    (n, status, id * 1_000_000)
}

struct Best {
    time: Duration,
    cpu: Duration,
}

/// The best of `runs` runs of `f` on each side, the sides taking turns at
/// going first; `prepare` runs untimed before each run. Every run's result
/// must equal the first one's, which is returned with the best runs.
fn measure<T: PartialEq + std::fmt::Debug>(
    sides: &mut [Box<dyn Side>],
    runs: usize,
    prepare: &dyn Fn(&mut dyn Side),
    f: &dyn Fn(&mut dyn Side) -> T,
) -> (Vec<Best>, T) {
    let mut best: Vec<Option<Best>> = sides.iter().map(|_| None).collect();
    let mut first: Option<T> = None;
    for run in 0..runs {
        for k in 0..sides.len() {
            let i = (k + run) % sides.len();
            let side = sides[i].as_mut();
            prepare(side);
            let (t, c) = (Instant::now(), thread_cpu());
            let got = f(side);
            let (time, cpu) = (t.elapsed(), thread_cpu() - c);
            match &first {
                None => first = Some(got),
                Some(want) => assert_eq!(&got, want, "{} saw other data", side.name()),
            }
            if best[i].as_ref().is_none_or(|b| time < b.time) {
                best[i] = Some(Best { time, cpu });
            }
        }
    }
    let best = best
        .into_iter()
        .map(|b| b.expect("at least one run"))
        .collect();
    (best, first.expect("at least one run"))
}

fn main() {
    let var = |name: &str, default: i64| -> i64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let rows = var("CUTOVER_BENCH_ROWS", 1_000_000);
    let queries = var("CUTOVER_BENCH_QUERIES", 100_000).min(rows);
    let runs = var("CUTOVER_BENCH_RUNS", 3).max(1) as usize;
    let server = std::env::var("CUTOVER_BENCH_PG")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".into());

    let name = format!("cutover_bench_client_{}", std::process::id());
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
    let (head, _) = server.split_once('?').unwrap_or((&server, ""));
    let (base, _) = head.rsplit_once('/').expect("the URL names a database");
    let url = format!("{base}/{name}");
    println!(
        "PostgreSQL client bench: {rows} rows, {queries} keyed queries, best of {runs}, database {name}"
    );

    let mut fixture = connect(&url);
    let t = Instant::now();
    fixture
        .batch_execute(&format!(
            "CREATE TABLE src (id bigint NOT NULL, n bigint NOT NULL, status text NOT NULL,
                               at timestamptz NOT NULL);
             INSERT INTO src
               SELECT id, (id * 7919) % 10000000,
                      CASE WHEN id % 3 = 0 THEN 'closed' ELSE 'active' END,
                      timestamptz '2000-01-01 00:00:00+00' + id * interval '1 second'
               FROM generate_series(1::bigint, {rows}::bigint) AS id;
             ALTER TABLE src ADD PRIMARY KEY (id);
             CREATE TABLE dst (LIKE src);"
        ))
        .expect("the fixture");
    fixture.batch_execute("VACUUM ANALYZE src").expect("vacuum");
    drop(fixture);
    println!("fixture: {rows} rows in {:.2} s", t.elapsed().as_secs_f64());
    let chunks = encoded(rows);

    let mut sides: Vec<Box<dyn Side>> = vec![
        Box::new(Cutover(connect(&url))),
        Box::new(Driver::connect(&url)),
    ];
    let names: Vec<&str> = sides.iter().map(|s| s.name()).collect();
    let mut table: Vec<(String, i64, Vec<Best>)> = Vec::new();

    let (out, _) = measure(&mut sides, runs, &|_| {}, &|s| {
        s.copy_out("COPY src TO STDOUT (FORMAT binary)")
    });
    table.push(("binary COPY out".into(), rows, out));
    let (copied, written) = measure(&mut sides, runs, &|s| s.batch("TRUNCATE dst"), &|s| {
        s.copy_in("COPY dst FROM STDIN (FORMAT binary)", &chunks)
    });
    assert_eq!(written, rows as u64, "COPY in must write every row");
    table.push(("binary COPY in".into(), rows, copied));
    let mut check = connect(&url);
    let same = check
        .query_one(
            "SELECT count(*) FROM (SELECT * FROM src EXCEPT SELECT * FROM dst) d",
            &[],
        )
        .expect("comparing")
        .get::<_, i64>(0);
    assert_eq!(same, 0, "COPY in must write the rows COPY out reads");
    drop(check);
    let keys: Vec<i64> = (0..queries).map(|i| (i * 7919) % rows + 1).collect();
    let (looked, found) = measure(&mut sides, runs, &|_| {}, &|s| {
        s.lookups("SELECT n, status FROM src WHERE id = $1", &keys)
    });
    let want = keys.iter().fold((0, 0), |(sum, len), &k| {
        let (n, status, _) = row(k);
        (sum + n, len + status.len())
    });
    assert_eq!(
        found, want,
        "the keyed queries must read the fixture's rows"
    );
    table.push(("keyed queries".into(), queries, looked));
    drop(sides);

    println!(
        "\n| measurement | client | time (s) | M rows/s | client CPU (s) | time ÷ {}'s |\n|---|---|---|---|---|---|",
        names[0]
    );
    for (what, n, best) in &table {
        for (i, b) in best.iter().enumerate() {
            println!(
                "| {what} | {} | {:.3} | {:.2} | {:.3} | {:.2} |",
                names[i],
                b.time.as_secs_f64(),
                *n as f64 / b.time.as_secs_f64() / 1e6,
                b.cpu.as_secs_f64(),
                b.time.as_secs_f64() / best[0].time.as_secs_f64()
            );
        }
    }
}
