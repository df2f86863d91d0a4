//! The rollback on a PostgreSQL target, through the binary: a SQLite source
//! loaded into PostgreSQL, the application writing from 16 connections of
//! its own while `fence on` runs, then replay into the source. The source
//! must end equal to the target, checked against an oracle computed here
//! (the target's rows turned back into source form), with no journal entry
//! lost or doubled; 20 seeded rounds. Then replay and load killed at random
//! moments and run again, ending exactly as one clean run.
//!
//! Each round makes its own database (`cutover_t_…`) and drops it. The
//! server is `CUTOVER_TEST_PG`, else root@ or postgres@127.0.0.1:5432.
//! Without a server the tests say so and pass, except under CI (`CI` set).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::Rng;
use support::postgres::{Client, Error, OrdersOnServer, SERVER_ORDERS_SOURCE, TestDb};

/// One application connection writing until `stop`: transactions of 1 to
/// 5 statements — inserts of fresh ids, updates, deletes and key changes of
/// random ids — some rolled back. Adds the rows its committed transactions
/// changed (each one journal entry) to `committed` as they commit.
fn application(url: &str, thread: u64, seed: u64, stop: &AtomicBool, committed: &AtomicU64) {
    let mut c = Client::connect(url).expect("an application connection");
    let mut rng = Rng::new(seed ^ (thread << 32));
    let mut fresh = 100_000 + thread * 1_000_000;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut tx) = c.transaction() else { break };
        let mut changed = 0u64;
        let mut failed = false;
        for _ in 0..1 + rng.range(0, 5) {
            let id = 1 + rng.range(0, 300) as i64;
            let r = match rng.range(0, 4) {
                0 => {
                    fresh += 1;
                    tx.execute(
                        "INSERT INTO orders VALUES ($1, $2, 'active')",
                        &[&(fresh as i64), &((rng.range(0, 100_000)) as i64)],
                    )
                }
                1 => tx.execute(
                    "UPDATE orders SET cents = cents + 1, status = CASE status WHEN 'active' THEN 'closed' ELSE 'active' END WHERE id = $1",
                    &[&id],
                ),
                2 => tx.execute("DELETE FROM orders WHERE id = $1", &[&id]),
                _ => {
                    fresh += 1;
                    tx.execute("UPDATE orders SET id = $2 WHERE id = $1", &[&id, &(fresh as i64)])
                }
            };
            match r {
                Ok(n) => changed += n,
                Err(_) => {
                    // A deadlock, or the fence: this transaction is over.
                    failed = true;
                    break;
                }
            }
        }
        if failed || rng.range(0, 8) == 0 {
            let _ = tx.rollback();
        } else if tx.commit().is_ok() {
            committed.fetch_add(changed, Ordering::SeqCst);
        }
    }
}

fn rounds() -> u64 {
    std::env::var("CUTOVER_PG_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

#[test]
fn sixteen_writers_while_the_fence_goes_on_then_replay_leaves_the_source_equal_to_the_target() {
    for round in 0..rounds() {
        let seed = 0xC0_70_0E + round;
        let Some(m) = OrdersOnServer::new("sixteen_writers", 300) else {
            return;
        };
        m.run(&["load"], 0);
        m.run(&["journal", "install"], 0);
        let stop = Arc::new(AtomicBool::new(false));
        let changes = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..16)
            .map(|t| {
                let (url, stop, changes) = (m.db.url.clone(), stop.clone(), changes.clone());
                std::thread::spawn(move || application(&url, t, seed, &stop, &changes))
            })
            .collect();
        let mut rng = Rng::new(seed);
        // The fence goes on once the application is writing, however slow
        // the machine is today.
        let started = Instant::now();
        while changes.load(Ordering::SeqCst) < 50 && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(rng.range(0, 300)));
        // The fence goes on while the application writes: every write
        // committed before it is inside the boundary, none after.
        let fence = m.run(&["fence", "on"], 0);
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().expect("an application thread");
        }
        // The round proves something only if the application wrote.
        assert!(
            changes.load(Ordering::Relaxed) > 16,
            "round {round}: the application committed almost nothing"
        );
        let status = m.json(&["journal", "status"]);
        let entries = status["entries"].as_i64().expect("entries");
        assert_eq!(
            entries as u64,
            changes.load(Ordering::Relaxed),
            "round {round}: the journal holds {entries} entries, the application committed {} row changes\n{}",
            changes.load(Ordering::Relaxed),
            fence.stdout
        );
        m.run(&["replay"], 0);
        assert_eq!(
            m.source_rows(),
            m.target_as_source(),
            "round {round}: the source differs from the target after replay"
        );
        let applied = m.applied_entries();
        assert_eq!(applied, entries, "round {round}: entries applied once each");
        // A second replay finds nothing to do and changes nothing but the
        // verdict it records.
        let image = || {
            use support::Engine as _;
            support::Sqlite::new(m.path()).image("source.db")
        };
        let before = image();
        m.run(&["replay"], 0);
        before.assert_same(&image(), &format!("round {round}: a second replay"));
        m.run(&["gate"], 0);
    }
}

/// Runs `args` killed after a random delay, again and again, until a run
/// ends by itself; returns how many were killed. A replay killed before its
/// commit starts over from the first entry (all or nothing), so the bound
/// on the delay grows by half after each kill: a run that takes longer than
/// `max_ms` is still killed at random moments, and one finally outlives its
/// delay.
fn kill_until_done(m: &OrdersOnServer, args: &[&str], rng: &mut Rng, max_ms: u64) -> u32 {
    let mut killed = 0;
    let mut bound = max_ms;
    loop {
        let mut child = m.command(args).spawn_keeping_stderr();
        let deadline = Instant::now() + Duration::from_millis(rng.range(0, bound));
        bound += bound / 2;
        loop {
            if let Some(status) = child.try_wait().expect("waiting") {
                let mut stderr = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
                }
                assert_eq!(
                    status.code(),
                    Some(0),
                    "cutover {args:?} failed on its own after {killed} killed runs:\n{stderr}"
                );
                return killed;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                killed += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[test]
fn load_and_replay_killed_at_random_moments_end_as_one_clean_run() {
    let mut kills = 0;
    for round in 0..6u64 {
        let mut rng = Rng::new(0x0C11 + round);
        let Some(m) = OrdersOnServer::new("kills", 4_000) else {
            return;
        };
        kills += kill_until_done(&m, &["load", "--batch", "200"], &mut rng, 400);
        m.run(&["gate"], 0);
        m.run(&["journal", "install"], 0);
        let mut c = m.db.client();
        c.batch_execute(
            "UPDATE orders SET cents = cents + 7 WHERE id % 5 = 0;
             DELETE FROM orders WHERE id % 11 = 0;
             INSERT INTO orders SELECT 100000 + g, g, 'closed' FROM generate_series(1, 500) g;
             UPDATE orders SET id = id + 200000 WHERE id % 13 = 0 AND id < 100000;",
        )
        .expect("the application's writes");
        let expected = m.target_as_source();
        m.run(&["fence", "on"], 0);
        kills += kill_until_done(&m, &["replay", "--batch", "50"], &mut rng, 300);
        assert_eq!(
            m.source_rows(),
            expected,
            "round {round}: source after killed replays"
        );
        let applied = m.applied_entries();
        let entries = m.json(&["journal", "status"])["entries"]
            .as_i64()
            .expect("entries");
        assert_eq!(applied, entries, "round {round}: every entry applied once");
        m.run(&["gate"], 0);
    }
    // The campaign must have killed something, or it proved nothing.
    assert!(kills > 0, "no run was killed");
}

/// Whether the server refused a write with the fence's message.
fn refused_by_fence(e: &Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        d.message()
            .contains("read-only while the migration rolls back")
    })
}

/// Every route a PostgreSQL writer has around a fence is refused, or, for
/// the owner who switches the fence's triggers off and back on, seen by
/// replay as a breach that stops it before anything is written.
#[test]
fn every_write_route_into_a_fenced_postgres_table_is_refused_or_seen_as_a_breach() {
    let Some(m) = OrdersOnServer::new("fence_routes", 20) else {
        return;
    };
    m.run(&["load"], 0);
    m.run(&["journal", "install"], 0);
    let mut app = m.db.client();
    app.batch_execute("CREATE VIEW open_orders AS SELECT * FROM orders WHERE status = 'active'")
        .expect("a view of the application's");
    app.batch_execute("UPDATE orders SET cents = cents + 5 WHERE id = 1")
        .expect("a write before the fence");
    m.run(&["fence", "on"], 0);
    let before = m.target_as_source();
    let routes = [
        ("insert", "INSERT INTO orders VALUES (900, 1, 'active')"),
        ("update", "UPDATE orders SET cents = 0"),
        ("delete", "DELETE FROM orders"),
        ("truncate", "TRUNCATE orders"),
        (
            "a view",
            "INSERT INTO open_orders VALUES (901, 1, 'active')",
        ),
        (
            "upsert",
            "INSERT INTO orders VALUES (1, 7, 'active') ON CONFLICT (id) DO UPDATE SET cents = 7",
        ),
        (
            "replica role",
            "SET session_replication_role = replica; UPDATE orders SET cents = 0",
        ),
    ];
    for (route, sql) in routes {
        let mut c = m.db.client();
        match c.batch_execute(sql) {
            Ok(()) => panic!("{route}: the fence let `{sql}` through"),
            Err(e) => assert!(
                refused_by_fence(&e),
                "{route}: `{sql}` failed, but not at the fence: {e:?}"
            ),
        }
    }
    // COPY FROM goes through the row triggers too.
    {
        let mut c = m.db.client();
        let copied = (|| -> Result<u64, Error> {
            let mut w = c.copy_in("COPY orders FROM STDIN")?;
            w.write_all(b"902\t1\tactive\n")?;
            w.finish()
        })();
        match copied {
            Ok(_) => panic!("COPY FROM went through the fence"),
            Err(e) => assert!(
                refused_by_fence(&e),
                "COPY failed, but not at the fence: {e:?}"
            ),
        }
    }
    assert_eq!(
        m.target_as_source(),
        before,
        "a refused route changed the target"
    );
    // The owner switches the fence off underneath, writes, and switches it
    // back on: the fence cannot stop that, but replay sees it and refuses.
    app.batch_execute(
        "ALTER TABLE orders DISABLE TRIGGER ALL;
         UPDATE orders SET cents = cents + 1 WHERE id = 2;
         DO $$ DECLARE t text; BEGIN
           FOR t IN SELECT tgname FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal LOOP
             EXECUTE format('ALTER TABLE orders ENABLE ALWAYS TRIGGER %I', t);
           END LOOP;
         END $$;",
    )
    .expect("the owner's bypass");
    let source_before = std::fs::read(m.path().join("source.db")).expect("source bytes");
    m.run(&["replay"], 1);
    assert_eq!(
        std::fs::read(m.path().join("source.db")).expect("source bytes"),
        source_before,
        "replay wrote to the source past a breached fence"
    );
}

/// `cutover drill --target URL` (and `--source URL`) runs the whole runbook
/// with that side on the server, in a schema of its own that is gone
/// afterwards; the default drill stays on SQLite files.
#[test]
fn the_drill_runs_the_runbook_with_either_side_on_a_server_and_leaves_nothing_there() {
    let Some(db) = TestDb::new("drill_on_a_server") else {
        return;
    };
    let schemas = |c: &mut Client| -> i64 {
        c.query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'cutover_drill_%'",
            &[],
        )
        .expect("counting schemas")
        .get(0)
    };
    let mut c = db.client();
    for args in [
        vec!["--target", db.url.as_str()],
        vec!["--source", db.url.as_str()],
        vec!["--source", db.url.as_str(), "--target", db.url.as_str()],
    ] {
        let rep = support::cutover(&[&["--format", "json", "drill"], &args[..]].concat())
            .expect(0)
            .json();
        assert_eq!(rep["verdict"], "pass", "drill {args:?}: {rep}");
        assert_eq!(schemas(&mut c), 0, "drill {args:?} left its schema behind");
    }
    // A url the drill cannot use is refused before anything is made.
    support::cutover(&["drill", "--target", &format!("{}?schema=public", db.url)]).expect(2);
    assert_eq!(schemas(&mut c), 0);
}

/// `cutover init` drafts a spec from a SQLite source and a PostgreSQL
/// target, matching the table and its columns through the server's
/// catalogue, and never lists cutover's own tables.
#[test]
fn init_drafts_a_spec_from_a_postgres_target() {
    let Some(m) = OrdersOnServer::new("init", 3) else {
        return;
    };
    m.run(&["load"], 0);
    m.run(&["journal", "install"], 0);
    support::cutover(&[
        "init",
        "--source",
        "sqlite://source.db",
        "--target",
        &m.db.url,
        "--out",
        "drafted.toml",
    ])
    .current_dir(m.path())
    .expect(0);
    let draft = std::fs::read_to_string(m.path().join("drafted.toml")).expect("the draft");
    let spec: toml::Table = toml::from_str(&draft).expect("the draft is TOML");
    assert_eq!(spec["target"]["url"].as_str(), Some(m.db.url.as_str()));
    let tables = spec["tables"].as_array().expect("tables");
    assert_eq!(tables.len(), 1, "{draft}");
    assert_eq!(tables[0]["name"].as_str(), Some("orders"));
    assert!(!draft.contains("_cutover"), "{draft}");
}

/// Through the binary, PostgreSQL → PostgreSQL: `gate --mode digest` says
/// what `--mode stream` says, clean and after a change, and reads fewer
/// rows; a SQLite side cannot digest and is refused with exit 2.
#[test]
fn gate_in_digest_mode_agrees_with_the_streaming_gate_through_the_binary() {
    let Some(db) = TestDb::new("digest_cli") else {
        return;
    };
    let dir = tempfile::tempdir().expect("a folder");
    let kept = dir.path().join("kept");
    let mut drill = support::cutover(&[
        "drill",
        "--source",
        &db.url,
        "--target",
        &db.url,
        "--stop-after",
        "gate",
        "--keep",
    ]);
    drill.arg(&kept).expect(0);
    let gate = |mode: &str, code: i32| -> serde_json::Value {
        support::cutover_in(&kept, &["--format", "json", "gate", "--mode", mode])
            .expect(code)
            .json()
    };
    let same = |a: &serde_json::Value, b: &serde_json::Value| {
        for key in ["verdict", "tables", "diffs", "diffs_found", "summary"] {
            assert!(a.get(key).is_some(), "no {key} in {a}");
            assert_eq!(a.get(key), b.get(key), "{key}: stream {a}\ndigest {b}");
        }
    };
    same(&gate("stream", 0), &gate("digest", 0));
    let spec = std::fs::read_to_string(kept.join("spec.toml")).expect("the kept spec");
    let schema = spec
        .split("schema=")
        .nth(2)
        .and_then(|s| s.split('"').next())
        .expect("the target's schema");
    db.client()
        .batch_execute(&format!(
            "UPDATE \"{schema}\".orders SET cents = 751 WHERE id = 102"
        ))
        .expect("a change to the target");
    let (stream, digest) = (gate("stream", 1), gate("digest", 1));
    same(&stream, &digest);
    assert_eq!(digest["diffs_found"], 1, "{digest}");
    // A SQLite side cannot compute digests.
    let mut bad = spec.clone();
    let source_url = spec
        .lines()
        .find(|l| l.starts_with("url = \"postgres"))
        .expect("the source url")
        .to_string();
    bad = bad.replacen(&source_url, "url = \"sqlite://nowhere.db\"", 1);
    std::fs::write(kept.join("sqlite.toml"), bad).expect("writing a spec");
    rusqlite::Connection::open(kept.join("nowhere.db"))
        .expect("a SQLite source")
        .execute_batch(SERVER_ORDERS_SOURCE)
        .expect("its table");
    support::cutover(&["gate", "--spec", "sqlite.toml", "--mode", "digest"])
        .current_dir(&kept)
        .expect(2)
        .assert_mentions(&["--mode digest"]);
}

/// Makes the target's key an identity column defined GENERATED ALWAYS.
fn identity_key(c: &mut Client) {
    c.batch_execute(
        "DROP TABLE orders;
         CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, cents bigint NOT NULL, status text NOT NULL)",
    )
    .expect("an identity key");
}

/// The id the application's next insert into the target gets.
fn next_id(c: &mut Client) -> i64 {
    c.query_one(
        "INSERT INTO orders (cents, status) VALUES (900, 'active') RETURNING id",
        &[],
    )
    .expect("the application's insert")
    .get(0)
}

/// A PostgreSQL target whose key is an identity column: load writes the
/// source's ids and leaves the sequence past them, so the application's
/// first insert after the switch takes a new id instead of colliding.
#[test]
fn after_load_an_identity_key_hands_out_ids_past_the_loaded_ones() {
    let Some(m) = OrdersOnServer::new("identity", 50) else {
        return;
    };
    let mut c = m.db.client();
    identity_key(&mut c);
    m.run(&["load"], 0);
    m.run(&["journal", "install"], 0);
    let id = next_id(&mut c);
    assert!(
        id > 50,
        "the first new id {id} collides with the loaded ids 1..=50"
    );
    m.run(&["fence", "on"], 0);
    m.run(&["replay"], 0);
    assert_eq!(m.source_rows(), m.target_as_source());
}

/// The rollback into a PostgreSQL source whose key is an identity column
/// defined GENERATED ALWAYS: replay inserts the target's new rows with
/// their ids, and leaves the source's sequence past them, so the
/// application switched back takes new ids.
#[test]
fn replay_into_a_postgres_identity_key_keeps_the_ids_and_moves_the_sequence() {
    let Some(db) = TestDb::new("identity_source") else {
        return;
    };
    let mut c = db.client();
    c.batch_execute(
        "CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, dollars text NOT NULL, status text NOT NULL);
         INSERT INTO orders (dollars, status) VALUES ('12.50', 'A'), ('7.50', 'C'), ('20.00', 'A');",
    )
    .expect("the source");
    let dir = tempfile::tempdir().expect("a folder");
    rusqlite::Connection::open(dir.path().join("target.db"))
        .expect("the target")
        .execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL)")
        .expect("its table");
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/orders/spec.toml"
    ))
    .expect("the fixture spec")
    .replace("sqlite://source.db", &db.url);
    std::fs::write(dir.path().join("spec.toml"), spec).expect("the spec");
    let run = |args: &[&str], code: i32| {
        support::cutover_in(dir.path(), args).expect(code);
    };
    run(&["load"], 0);
    run(&["journal", "install"], 0);
    rusqlite::Connection::open(dir.path().join("target.db"))
        .expect("the target")
        .execute_batch("INSERT INTO orders VALUES (40, 900, 'active'); UPDATE orders SET cents = 1400 WHERE id = 1;")
        .expect("the application's writes on the target");
    run(&["fence", "on"], 0);
    run(&["replay"], 0);
    let rows: Vec<(i64, String)> = c
        .query("SELECT id, dollars FROM orders ORDER BY id", &[])
        .expect("the source")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        rows,
        [
            (1, "14.00".to_string()),
            (2, "7.50".to_string()),
            (3, "20.00".to_string()),
            (40, "9.00".to_string())
        ]
    );
    let next: i64 = c
        .query_one(
            "INSERT INTO orders (dollars, status) VALUES ('1.00', 'A') RETURNING id",
            &[],
        )
        .expect("the application's insert, switched back")
        .get(0);
    assert!(next > 40, "the source hands out id {next} again");
}

/// Sync keeps a PostgreSQL identity key's sequence past the ids it copies,
/// as load does.
#[test]
fn sync_leaves_an_identity_key_past_the_ids_it_copies() {
    let Some(m) = OrdersOnServer::new("identity_sync", 20) else {
        return;
    };
    let mut c = m.db.client();
    identity_key(&mut c);
    m.run(&["load"], 0);
    rusqlite::Connection::open(m.path().join("source.db"))
        .expect("the source")
        .execute_batch("INSERT INTO orders VALUES (70, '1.00', 'A'), (71, '2.00', 'C');")
        .expect("new source rows");
    m.run(&["sync"], 0);
    let id = next_id(&mut c);
    assert!(id > 71, "the first new id {id} collides with a synced id");
}

/// A change feed applied into a PostgreSQL identity key moves its sequence
/// past the ids the feed wrote, as load, sync and replay do.
#[test]
fn apply_of_a_feed_leaves_an_identity_key_past_the_ids_it_wrote() {
    let Some(m) = OrdersOnServer::new("identity_feed", 5) else {
        return;
    };
    let mut c = m.db.client();
    identity_key(&mut c);
    m.run(&["load"], 0);
    let line = serde_json::json!({
        "feed": "upstream", "delivery": "d1", "position": 1, "table": "orders",
        "op": "upsert", "key": {"id": 900}, "row": {"id": 900, "cents": 100, "status": "active"}
    });
    std::fs::write(m.path().join("feed.jsonl"), format!("{line}\n")).expect("the feed");
    m.run(&["apply", "--feed", "feed.jsonl", "--into", "target"], 0);
    let id = next_id(&mut c);
    assert!(
        id > 900,
        "the first new id {id} is not past the id the feed wrote"
    );
}
