//! The write fence on a MySQL (MariaDB here) target, through the binary:
//! a MySQL → MySQL spec (two databases of the server, the spec of
//! `support::mysql::orders_spec`), the journal installed, the application
//! writing the target through the `mariadb` client as a user with
//! `SELECT, INSERT, UPDATE, DELETE` only. `fence on`, `status` and `off`;
//! every route around the fence's triggers refused or reported as a breach
//! by `fence status` and replay (exit codes, and the databases' contents);
//! a `fence on` that cannot finish leaving no trigger behind, and one killed
//! half-way found and completed by a rerun; and 16 writers racing `fence
//! on` (some moving their rows' keys with `UPDATE IGNORE`, onto keys free
//! and taken), three seeded rounds, then replay into the source.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::mysql::{AppUser, TestDb};
use support::run::{Output, cutover_in};

const SOURCE: &str = "CREATE TABLE orders (
    id BIGINT NOT NULL PRIMARY KEY,
    dollars DECIMAL(12,2) NOT NULL,
    status ENUM('A','C') NOT NULL
) ENGINE = InnoDB";

const TARGET: &str = "CREATE TABLE orders (
    id BIGINT NOT NULL PRIMARY KEY,
    cents BIGINT NOT NULL,
    status VARCHAR(10) NOT NULL
) ENGINE = InnoDB";

/// The rows both sides hold at the switch (the target as `load` would have
/// written them).
const SOURCE_ROWS: &str =
    "INSERT INTO orders VALUES (1, 12.50, 'A'), (2, 0.01, 'C'), (3, 99.99, 'A')";
const TARGET_ROWS: &str =
    "INSERT INTO orders VALUES (1, 1250, 'active'), (2, 1, 'closed'), (3, 9999, 'active')";

/// The rollback's two databases and the spec's folder.
struct Pair {
    source: TestDb,
    target: TestDb,
    dir: tempfile::TempDir,
}

impl Pair {
    /// Both databases with their rows and the spec; `target_extra` runs on
    /// the target before the journal is installed. A target column
    /// `parent` is left to the target (`default = true`) when it has one.
    fn new(test: &str, target_extra: &str) -> Option<Pair> {
        let source = TestDb::new(&format!("{test}_s"))?;
        let target = TestDb::new(&format!("{test}_t"))?;
        source.exec(SOURCE);
        source.exec(SOURCE_ROWS);
        target.exec(TARGET);
        target.exec(TARGET_ROWS);
        if !target_extra.is_empty() {
            target.exec(target_extra);
        }
        let dir = tempfile::tempdir().expect("a folder");
        std::fs::write(
            dir.path().join("spec.toml"),
            support::mysql::orders_spec(
                &source.url,
                &target.url,
                &[],
                if target_extra.contains("parent") {
                    "\n[[tables.columns]]\ntarget = \"parent\"\ndefault = true\n"
                } else {
                    ""
                },
            ),
        )
        .expect("the spec");
        Some(Pair {
            source,
            target,
            dir,
        })
    }

    /// [`Pair::new`] with the journal installed.
    fn journaled(test: &str, target_extra: &str) -> Option<Pair> {
        let p = Pair::new(test, target_extra)?;
        p.run(&["journal", "install"], 0);
        Some(p)
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    #[track_caller]
    fn run(&self, args: &[&str], code: i32) -> Output {
        cutover_in(self.path(), args).expect(code)
    }

    #[track_caller]
    fn json(&self, args: &[&str], code: i32) -> serde_json::Value {
        let mut all = vec!["--format", "json"];
        all.extend_from_slice(args);
        cutover_in(self.path(), &all).expect(code).json()
    }

    /// The target's orders as the client prints them, in key order.
    fn orders(&self) -> Vec<Vec<String>> {
        self.target
            .rows("SELECT id, cents, status FROM orders ORDER BY id")
    }

    /// The source's orders in the target's form, in key order.
    fn source_orders(&self) -> Vec<Vec<String>> {
        self.source.rows(
            "SELECT id, CAST(dollars * 100 AS SIGNED),
                    CASE status WHEN 'A' THEN 'active' ELSE 'closed' END
             FROM orders ORDER BY id",
        )
    }

    /// The fence's triggers on the target, by table, as the catalogue
    /// lists them.
    fn fence_triggers(&self) -> Vec<Vec<String>> {
        self.target.rows(
            "SELECT EVENT_OBJECT_TABLE, TRIGGER_NAME, ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER
             FROM information_schema.TRIGGERS
             WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME LIKE '\\_cutover\\_fence\\_%'
             ORDER BY EVENT_OBJECT_TABLE, TRIGGER_NAME",
        )
    }

    /// The tables the fence guards: the spec's, the journal's, the fence's.
    fn guarded(&self) -> Vec<String> {
        let mut t: Vec<String> = self
            .target
            .rows(
                "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()
                 AND (TABLE_NAME REGEXP '^_cutover_journal_[0-9]+$'
                      OR TABLE_NAME IN ('_cutover_journal_id', '_cutover_journal_tables'))",
            )
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
        t.push("orders".into());
        t.push("_cutover_fence".into());
        t.sort();
        t
    }

    /// The fence rows on the target (0 when its table is not there).
    fn fence_rows(&self) -> i64 {
        let present = self.target.value(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()
             AND TABLE_NAME = '_cutover_fence'",
        );
        if present == "0" {
            return 0;
        }
        self.target
            .value("SELECT COUNT(*) FROM _cutover_fence")
            .parse()
            .unwrap()
    }

    /// The journal's entries, every image table's rows counted.
    fn journal_entries(&self, upto: Option<i64>) -> i64 {
        let tables = self.target.rows(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()
             AND TABLE_NAME REGEXP '^_cutover_journal_[0-9]+$'",
        );
        tables
            .iter()
            .map(|t| {
                let cond = upto.map_or(String::new(), |b| format!(" WHERE seq <= {b}"));
                self.target
                    .value(&format!("SELECT COUNT(*) FROM `{}`{cond}", t[0]))
                    .parse::<i64>()
                    .unwrap()
            })
            .sum()
    }
}

/// Every guarded table has the fence's three BEFORE triggers, each first
/// among its table's BEFORE triggers of its event.
fn assert_fenced(p: &Pair) {
    let triggers = p.fence_triggers();
    for t in p.guarded() {
        let mine: Vec<&Vec<String>> = triggers.iter().filter(|r| r[0] == t).collect();
        assert_eq!(mine.len(), 3, "{t}: {triggers:?}");
        for r in mine {
            assert_eq!((r[2].as_str(), r[4].as_str()), ("BEFORE", "1"), "{r:?}");
        }
    }
}

fn refused(app: &AppUser<'_>, sql: &str) -> String {
    let e = app
        .exec(sql)
        .expect_err(&format!("a fenced target took: {sql}"));
    assert!(e.contains("cutover fence"), "{sql}: {e}");
    e
}

#[test]
fn fence_on_status_and_off_on_a_mysql_target() {
    // An application trigger that runs BEFORE an update and writes a
    // table that keeps what it is given (MyISAM): the fence's must run
    // first, or a refused update would still leave its row there.
    let Some(p) = Pair::journaled(
        "fence_on_off",
        "CREATE TABLE audit (id BIGINT) ENGINE = MyISAM;
         CREATE TRIGGER orders_audit BEFORE UPDATE ON orders FOR EACH ROW
             INSERT INTO audit VALUES (NEW.id)",
    ) else {
        return;
    };
    let app = p.target.app_user();
    app.exec(
        "INSERT INTO orders VALUES (4, 400, 'active'); UPDATE orders SET cents = 2 WHERE id = 2",
    )
    .expect("the application's writes");
    assert_eq!(p.fence_triggers(), Vec::<Vec<String>>::new());
    // The application's update, and the journal's proof at install (its
    // update is rolled back; MyISAM keeps what the trigger wrote).
    let audited = p.target.value("SELECT COUNT(*) FROM audit");
    assert_ne!(audited, "0");

    let on = p.json(&["fence", "on"], 0);
    assert_eq!(on["fenced"], true, "{on:#}");
    assert_eq!(on["intact"], true, "{on:#}");
    assert_eq!(on["journal_rows"], 2, "{on:#}");
    assert!(
        on["ddl_guard"]
            .as_str()
            .is_some_and(|g| g.contains("nothing refuses a schema change")),
        "{on:#}"
    );
    assert_fenced(&p);
    assert_eq!(p.fence_rows(), 1);
    let before = p.orders();
    let entries = p.journal_entries(None);
    for sql in [
        "INSERT INTO orders VALUES (5, 1, 'active')",
        "UPDATE orders SET cents = 2 WHERE id = 1",
        "DELETE FROM orders WHERE id = 3",
        "REPLACE INTO orders VALUES (1, 7, 'active')",
        "INSERT INTO orders VALUES (1, 7, 'active') ON DUPLICATE KEY UPDATE cents = 7",
        "INSERT IGNORE INTO orders VALUES (6, 1, 'active')",
        "UPDATE orders o JOIN orders p ON p.id = o.id SET o.cents = 0",
        "DELETE o FROM orders o WHERE o.id = 2",
        "DELETE FROM _cutover_journal_tables",
        "UPDATE _cutover_fence SET boundary = 0",
        "DELETE FROM _cutover_fence",
    ] {
        refused(&app, sql);
    }
    assert_eq!(
        p.orders(),
        before,
        "nothing the application tried was written"
    );
    assert_eq!(
        p.target.value("SELECT COUNT(*) FROM audit"),
        audited,
        "the application's BEFORE trigger never ran before the fence's (nor in fence on's proof)"
    );
    assert_eq!(
        p.target.rows(
            "SELECT TRIGGER_NAME, ACTION_ORDER FROM information_schema.TRIGGERS
             WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'orders'
               AND ACTION_TIMING = 'BEFORE' AND EVENT_MANIPULATION = 'UPDATE'
             ORDER BY ACTION_ORDER"
        ),
        [["_cutover_fence_upd_orders", "1"], ["orders_audit", "2"]]
    );
    assert_eq!(p.journal_entries(None), entries);
    assert_eq!(p.fence_rows(), 1);

    let status = p.json(&["fence", "status"], 0);
    assert_eq!(
        (status["fenced"].as_bool(), status["intact"].as_bool()),
        (Some(true), Some(true)),
        "{status:#}"
    );
    assert_eq!(status["boundary"], on["boundary"]);
    // Again: nothing changes on the target.
    let again = p.json(&["fence", "on"], 0);
    assert_eq!(again["boundary"], on["boundary"], "{again:#}");
    assert_eq!(again["fingerprint"], on["fingerprint"]);

    // Replay into the source, then the fence comes off.
    p.run(&["replay"], 0);
    assert_eq!(p.source_orders(), p.orders(), "the source is the target");
    p.run(&["fence", "off"], 0);
    assert_eq!(p.fence_triggers(), Vec::<Vec<String>>::new());
    assert_eq!(p.fence_rows(), 0);
    app.exec("INSERT INTO orders VALUES (7, 700, 'active')")
        .expect("writable again");
    let off = p.json(&["fence", "status"], 0);
    assert_eq!(off["fenced"], false, "{off:#}");
}

/// A breach is what `fence status` (exit 1) and replay (exit 1, nothing
/// written to the source) say; `what` is in both.
#[track_caller]
fn assert_breached(p: &Pair, what: &[&str]) {
    let source = p.source_orders();
    let out = p.run(&["fence", "status"], 1);
    let mut want = vec!["fence breached"];
    want.extend_from_slice(what);
    out.assert_mentions(&want);
    p.run(&["replay"], 1).assert_mentions(&want);
    assert_eq!(p.source_orders(), source, "replay wrote nothing");
}

/// A fenced pair of its own for one route around the triggers.
fn fenced(test: &str, target_extra: &str) -> Option<Pair> {
    let p = Pair::journaled(test, target_extra)?;
    p.json(&["fence", "on"], 0);
    assert_fenced(&p);
    Some(p)
}

#[test]
fn load_data_is_refused_and_a_cascade_from_outside_the_spec_is_a_breach() {
    let Some(p) = Pair::journaled(
        "fence_cascade",
        "CREATE TABLE parents (id INT NOT NULL PRIMARY KEY) ENGINE = InnoDB;
         INSERT INTO parents VALUES (1), (2);
         ALTER TABLE orders ADD COLUMN parent INT NULL",
    ) else {
        return;
    };
    let app = p.target.app_user();
    // A cascading foreign key: `journal install` refuses one before
    // anything is written; added once the journal stands, its cascades
    // are what the fingerprint finds.
    p.target.exec(
        "UPDATE orders SET parent = 1 WHERE id IN (1, 2);
         ALTER TABLE orders ADD CONSTRAINT orders_parent FOREIGN KEY (parent)
             REFERENCES parents (id) ON DELETE CASCADE",
    );
    p.run(&["journal", "install"], 2).assert_mentions(&[
        "orders_parent",
        "ON DELETE CASCADE",
        "nothing was installed",
    ]);
    p.json(&["fence", "on"], 0);

    // LOAD DATA fires the triggers: refused like any insert.
    let file = p.path().join("rows.tsv");
    std::fs::write(&file, "9\t900\tactive\t\\N\n").unwrap();
    let before = p.orders();
    refused(
        &app,
        &format!(
            "LOAD DATA LOCAL INFILE '{}' INTO TABLE orders",
            file.display()
        ),
    );
    assert_eq!(p.orders(), before);
    p.run(&["fence", "status"], 0);

    // A cascade from a parent outside the spec fires no trigger.
    app.exec("DELETE FROM parents WHERE id = 1")
        .expect("the parent is not fenced");
    assert_eq!(p.orders().len(), before.len() - 2, "the cascade deleted");
    assert_breached(&p, &["the rows of table orders changed"]);
}

#[test]
fn truncate_is_a_breach() {
    let Some(p) = fenced("fence_truncate_row", "") else {
        return;
    };
    p.target.exec("TRUNCATE TABLE _cutover_fence");
    assert_breached(&p, &["fence row is gone"]);

    let Some(p) = fenced("fence_truncate", "") else {
        return;
    };
    let app = p.target.app_user();
    p.target.exec("TRUNCATE TABLE orders");
    assert_eq!(p.orders().len(), 0);
    assert_breached(&p, &["the rows of table orders changed"]);
    // Still fenced: TRUNCATE left the triggers.
    refused(&app, "INSERT INTO orders VALUES (1, 1250, 'active')");
}

#[test]
fn alter_table_is_a_breach() {
    let Some(p) = fenced("fence_alter", "") else {
        return;
    };
    // A definition the fingerprint covers (a column the spec does not map
    // would fail the spec's check first, exit 2).
    p.target.exec("ALTER TABLE orders MODIFY cents BIGINT NULL");
    assert_breached(&p, &["table orders was altered"]);
}

#[test]
fn drop_trigger_is_refused_by_the_journal_s_fence_or_a_breach() {
    let Some(p) = fenced("fence_drop_trigger", "") else {
        return;
    };
    let app = p.target.app_user();
    // The journal's trigger still writes the fenced journal, which
    // refuses; with it dropped too, a write goes through.
    p.target.exec("DROP TRIGGER `_cutover_fence_ins_orders`");
    refused(&app, "INSERT INTO orders VALUES (20, 1, 'active')");
    p.target.exec("DROP TRIGGER `_cutover_journal_1_insert`");
    app.exec("INSERT INTO orders VALUES (20, 1, 'active')")
        .expect("no trigger refuses it now");
    p.run(&["fence", "status"], 1)
        .assert_mentions(&["fence triggers missing on orders"]);
    assert_breached(&p, &["trigger _cutover_fence_ins_orders was dropped"]);
}

#[test]
fn a_rename_table_swap_is_a_breach() {
    let Some(p) = fenced("fence_rename", "") else {
        return;
    };
    let app = p.target.app_user();
    p.target.exec(
        "CREATE TABLE orders_new LIKE orders;
         INSERT INTO orders_new SELECT * FROM orders;
         RENAME TABLE orders TO orders_old, orders_new TO orders",
    );
    app.exec("INSERT INTO orders VALUES (21, 1, 'active')")
        .expect("the new table has no trigger");
    p.run(&["fence", "status"], 1)
        .assert_mentions(&["fence triggers missing on orders"]);
    assert_breached(
        &p,
        &[
            "trigger _cutover_fence_ins_orders was dropped",
            "the rows of table orders changed",
        ],
    );
    // Lifted by force wherever the triggers went.
    p.run(&["fence", "off", "--force"], 0);
    assert_eq!(p.fence_triggers().len(), 0);
}

/// Holds a read of `table` open in a transaction of the application for
/// `seconds`, so that its metadata lock keeps a `CREATE TRIGGER` waiting.
fn hold<'a>(
    s: &'a std::thread::Scope<'a, '_>,
    app: &'a AppUser<'a>,
    table: &'a str,
    seconds: u32,
) -> std::thread::ScopedJoinHandle<'a, Result<String, String>> {
    s.spawn(move || {
        app.exec(&format!(
            "START TRANSACTION; SELECT COUNT(*) FROM `{table}`; SELECT SLEEP({seconds}); COMMIT"
        ))
    })
}

#[test]
fn a_fence_on_that_cannot_finish_leaves_no_trigger_behind() {
    let Some(p) = Pair::journaled("fence_partway", "") else {
        return;
    };
    let app = p.target.app_user();
    let before = p.orders();
    let out = std::thread::scope(|s| {
        let holder = hold(s, &app, "_cutover_journal_tables", 8);
        std::thread::sleep(Duration::from_millis(500));
        let out = cutover_in(p.path(), &["fence", "on"])
            .env("CUTOVER_LOCK_TIMEOUT_MS", "1000")
            .expect(2);
        holder.join().unwrap().expect("the holder's transaction");
        out
    });
    out.assert_mentions(&[
        "_cutover_journal_tables",
        "metadata lock",
        "connection",
        &app.name,
        "the fence was not installed; the target is unchanged",
    ]);
    assert_eq!(p.fence_triggers(), Vec::<Vec<String>>::new(), "{out}");
    assert_eq!(p.fence_rows(), 0);
    app.exec("UPDATE orders SET cents = 5 WHERE id = 1")
        .expect("the target is writable");
    assert_ne!(p.orders(), before);
    p.json(&["fence", "on"], 0);
    assert_fenced(&p);
}

#[test]
fn a_fence_on_killed_half_way_is_found_and_completed_by_a_rerun() {
    let Some(p) = Pair::journaled("fence_killed", "") else {
        return;
    };
    let app = p.target.app_user();
    std::thread::scope(|s| {
        let holder = hold(s, &app, "_cutover_journal_tables", 10);
        std::thread::sleep(Duration::from_millis(500));
        let mut child = cutover_in(p.path(), &["fence", "on"])
            .env("CUTOVER_LOCK_TIMEOUT_MS", "5000")
            .spawn();
        let start = Instant::now();
        while !p
            .fence_triggers()
            .iter()
            .any(|r| r[1] == "_cutover_fence_del_orders")
        {
            assert!(start.elapsed() < Duration::from_secs(8), "no trigger made");
            std::thread::sleep(Duration::from_millis(50));
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reaping fence on");
        holder.join().unwrap().expect("the holder's transaction");
    });
    assert_eq!(p.fence_rows(), 0, "killed before its row");
    assert!(!p.fence_triggers().is_empty());
    refused(&app, "INSERT INTO orders VALUES (8, 1, 'active')");
    p.run(&["fence", "status"], 1).assert_mentions(&[
        "fence breached",
        "still has fence triggers but the fence row is gone",
        "`cutover fence on` completes it",
    ]);
    p.run(&["fence", "off"], 1)
        .assert_mentions(&["fence breached", "fence row is gone"]);
    p.json(&["fence", "on"], 0);
    assert_fenced(&p);
    assert_eq!(p.fence_rows(), 1);
    p.run(&["fence", "status"], 0);
}

/// What one writer committed, in order, and whether it saw the fence
/// refuse it.
#[derive(Default)]
struct Writer {
    /// The rows it owns now, by key, each with the cents it last committed.
    rows: BTreeMap<i64, i64>,
    refused: bool,
    /// Every row written, as the journal must hold it: `(op, id, cents)`
    /// (a key move is an update whose image is under the new key).
    writes: Vec<(String, i64, i64)>,
    /// Writes that committed after `fence on` returned.
    late: usize,
    /// Key moves by `UPDATE IGNORE` the server made, and those it skipped
    /// on a duplicate key.
    moved: usize,
    skipped: usize,
}

/// Where a key move by `UPDATE IGNORE` goes.
#[derive(Clone, Copy, Debug)]
enum MoveTo {
    /// A key no one has used.
    Free,
    /// A row of a writer that never moves its rows, or one of the rows
    /// there at the switch: taken.
    Others,
    /// A key of the writer's own inserts so far: its row, or left free by
    /// an update's turn, a refused insert or a row moved away.
    OwnPast,
    /// Another row of the writer's own: taken.
    OwnRow,
}

impl MoveTo {
    const ROTATION: [MoveTo; 4] = [
        MoveTo::Free,
        MoveTo::Others,
        MoveTo::OwnPast,
        MoveTo::OwnRow,
    ];

    /// The key that a writer whose keys are `base + n` moves its `row` onto
    /// at its `n`th statement, and the kind of key it is (with no other row
    /// of its own, a row of the switch); `pick` chooses among candidates.
    fn key(
        self,
        row: i64,
        owned: &[i64],
        settled: &Mutex<Vec<i64>>,
        base: i64,
        n: i64,
        pick: usize,
    ) -> (MoveTo, i64) {
        let switch = (MoveTo::Others, 1 + (pick % 3) as i64);
        let free = (MoveTo::Free, base + 500_000 + n);
        let to = match self {
            MoveTo::Free => free,
            MoveTo::Others => {
                let settled = settled.lock().unwrap();
                match settled.len() {
                    0 => switch,
                    len => (MoveTo::Others, settled[pick % len]),
                }
            }
            MoveTo::OwnPast => (MoveTo::OwnPast, base + 1 + pick as i64 % n),
            MoveTo::OwnRow => {
                let others: Vec<i64> = owned.iter().copied().filter(|&r| r != row).collect();
                match others.len() {
                    0 => switch,
                    len => (MoveTo::OwnRow, others[pick % len]),
                }
            }
        };
        // Onto itself a move would be a plain update.
        if to.1 == row { free } else { to }
    }
}

/// 16 application writers as the non-root user, each its own `mariadb`
/// client per transaction (an insert of a key of its own, or an update of
/// one of its rows), writing until the fence refuses them; `fence on` runs
/// in the middle. Every third writer also moves its rows' keys with
/// MariaDB's `UPDATE IGNORE`, onto keys free or taken, and learns from
/// `ROW_COUNT()` whether the move was made: a move the server skips on a
/// duplicate key still fires MariaDB's `AFTER UPDATE` triggers, and the
/// journal must not hold it. A move's target is only ever a key of the
/// mover's own, a row of a writer that never moves, or a row of the
/// switch, so no two movers wait for each other's rows (no deadlock), and
/// no move takes a key some writer will still insert.
fn race(p: &Pair, seed: u64) -> (serde_json::Value, Vec<Writer>) {
    let app = p.target.app_user();
    let fenced = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    // Keys of committed rows of the writers that never move theirs: taken
    // for as long as the race runs.
    let settled: Mutex<Vec<i64>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..16u64)
            .map(|w| {
                let (app, fenced, stop, settled) = (&app, &fenced, &stop, &settled);
                s.spawn(move || writer(w, seed, app, fenced, stop, settled))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300 + seed % 700));
        let on = cutover_in(p.path(), &["--format", "json", "fence", "on"])
            .env("CUTOVER_LOCK_TIMEOUT_MS", "10000")
            .expect(0)
            .json();
        fenced.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::SeqCst);
        let writers = writers.into_iter().map(|h| h.join().unwrap()).collect();
        (on, writers)
    })
}

/// Writer `w` of [`race`]: writes until `stop`, or until the fence refuses
/// it once `fenced` is set.
fn writer(
    w: u64,
    seed: u64,
    app: &AppUser<'_>,
    fenced: &AtomicBool,
    stop: &AtomicBool,
    settled: &Mutex<Vec<i64>>,
) -> Writer {
    let mut me = Writer::default();
    let mover = w.is_multiple_of(3);
    let base = 1_000_000 * (w as i64 + 1);
    let mut n = 0i64;
    // Each mover's moves go through every kind of target in turn, a free
    // key first: a mover that moves twice before the fence has had one
    // move made and one skipped.
    let mut moves = 0usize;
    let mut x = seed ^ (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let id = base + n;
        let owned: Vec<i64> = me.rows.keys().copied().collect();
        // A mover's statements: half key moves, a quarter each updates and
        // inserts; the others', a third updates.
        let (update, key_move) = match (owned.is_empty(), mover) {
            (true, _) => (false, false),
            (false, true) => (x % 4 == 2, x % 4 < 2),
            (false, false) => (x.is_multiple_of(3), false),
        };
        // An update's value is new to its row: no update leaves a row as it
        // was.
        let cents = if update || key_move {
            7 * n + w as i64
        } else {
            (x % 100_000) as i64
        };
        let row = owned.get((x as usize / 3) % owned.len().max(1)).copied();
        let target = key_move.then(|| {
            let kind = MoveTo::ROTATION[moves % 4];
            moves += 1;
            let row = row.expect("a row to move");
            kind.key(row, &owned, settled, base, n, (x >> 17) as usize)
        });
        // Every fourth writer's inserts are transactions that stay open a
        // while (an insert, a pause, an update of the row): writers in
        // flight when the fence goes on, which it must wait for.
        let long = w.is_multiple_of(4) && !update && !key_move;
        let sql = if let Some((_, to)) = target {
            // ROW_COUNT() is the session's, and each call is a session of
            // its own: asked in the same call, it says whether the move
            // was made.
            format!(
                "UPDATE IGNORE orders SET id = {to}, cents = {cents} WHERE id = {};
                 SELECT ROW_COUNT()",
                row.unwrap()
            )
        } else if update {
            format!(
                "UPDATE orders SET cents = {cents} WHERE id = {}",
                row.unwrap()
            )
        } else if long {
            format!(
                "START TRANSACTION; INSERT INTO orders VALUES ({id}, {cents}, 'active');
                 DO SLEEP(0.05); UPDATE orders SET cents = {} WHERE id = {id}; COMMIT",
                cents + 1
            )
        } else {
            format!("INSERT INTO orders VALUES ({id}, {cents}, 'active')")
        };
        let after = fenced.load(Ordering::SeqCst);
        match app.exec(&sql) {
            Ok(out) => {
                if let Some((kind, to)) = target {
                    let row = row.unwrap();
                    let made = match out.trim() {
                        "1" => true,
                        "0" => false,
                        other => panic!("writer {w}: {sql}: ROW_COUNT() {other:?}"),
                    };
                    // What the writer knows of the key it moved onto,
                    // against what the server did.
                    let free = match kind {
                        MoveTo::Free => true,
                        MoveTo::Others | MoveTo::OwnRow => false,
                        MoveTo::OwnPast => !me.rows.contains_key(&to),
                    };
                    assert_eq!(made, free, "writer {w}: {sql} ({kind:?})");
                    if made {
                        me.rows.remove(&row);
                        me.rows.insert(to, cents);
                        me.writes.push(("update".into(), to, cents));
                        me.moved += 1;
                    } else {
                        me.skipped += 1;
                    }
                } else if update {
                    let row = row.unwrap();
                    me.rows.insert(row, cents);
                    me.writes.push(("update".into(), row, cents));
                } else {
                    me.writes.push(("insert".into(), id, cents));
                    if long {
                        me.rows.insert(id, cents + 1);
                        me.writes.push(("update".into(), id, cents + 1));
                    } else {
                        me.rows.insert(id, cents);
                    }
                    if !mover {
                        settled.lock().unwrap().push(id);
                    }
                }
                if after {
                    me.late += 1;
                }
            }
            Err(e) if e.contains("cutover fence") => {
                me.refused = true;
                if after {
                    break;
                }
            }
            Err(e) => panic!("writer {w}: {sql}: {e}"),
        }
    }
    me
}

#[test]
fn sixteen_writers_racing_fence_on_lose_nothing_and_none_commits_after_it() {
    for (round, seed) in [0x51A7u64, 0xC0FFEE, 0x7E57_0001].into_iter().enumerate() {
        let Some(p) = Pair::journaled(&format!("fence_race_{round}"), "") else {
            return;
        };
        let (on, writers) = race(&p, seed);
        let boundary = on["boundary"].as_i64().expect("a boundary");
        let late: usize = writers.iter().map(|w| w.late).sum();
        assert_eq!(late, 0, "round {round}: writes committed after fence on");
        assert!(
            writers.iter().all(|w| w.refused),
            "round {round}: every writer ran into the fence"
        );
        let moved: usize = writers.iter().map(|w| w.moved).sum();
        let skipped: usize = writers.iter().map(|w| w.skipped).sum();
        assert!(
            moved > 0 && skipped > 0,
            "round {round}: key moves made ({moved}) and skipped ({skipped})"
        );
        // The target holds exactly what the writers say they committed:
        // each row under the key it was last moved to, with the cents of
        // its last write.
        let mut expected: BTreeMap<i64, i64> = [(1, 1250), (2, 1), (3, 9999)].into_iter().collect();
        for w in &writers {
            for (id, cents) in &w.rows {
                assert!(
                    expected.insert(*id, *cents).is_none(),
                    "round {round}: {id} owned twice"
                );
            }
        }
        let writes: i64 = writers.iter().map(|w| w.writes.len() as i64).sum();
        eprintln!(
            "round {round}: {writes} writes committed by 16 writers ({moved} key moves made, \
             {skipped} skipped), boundary {boundary}"
        );
        assert!(writes > 16, "round {round}: the writers wrote ({writes})");
        let rows = p.orders();
        let got: BTreeMap<i64, i64> = rows
            .iter()
            .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap()))
            .collect();
        assert_eq!(
            got, expected,
            "round {round}: the rows committed are the rows there"
        );
        // Every committed write is journaled at or below the boundary, and
        // nothing past it; a skipped move not at all.
        assert_eq!(
            p.journal_entries(Some(boundary)),
            writes,
            "round {round}: every committed write journaled at or below {boundary}"
        );
        assert_eq!(p.journal_entries(None), writes, "round {round}");
        // Entry for entry: the op, the key and the cents each writer says
        // it committed (the image's columns in the spec's order: id, cents,
        // status; an update's n1 is the key it ended under).
        let mut journaled: Vec<(String, i64, i64)> = p
            .target
            .rows(&format!(
                "SELECT op, n1, n2 FROM _cutover_journal_1 WHERE seq <= {boundary}"
            ))
            .into_iter()
            .map(|r| (r[0].clone(), r[1].parse().unwrap(), r[2].parse().unwrap()))
            .collect();
        let mut reported: Vec<(String, i64, i64)> =
            writers.iter().flat_map(|w| w.writes.clone()).collect();
        journaled.sort();
        reported.sort();
        assert_eq!(
            journaled, reported,
            "round {round}: the journal is what committed"
        );
        assert_eq!(on["journal_rows"], writes, "round {round}: {on:#}");
        p.run(&["fence", "status"], 0);
        // Replay into the source: it ends as the target.
        p.run(&["replay"], 0);
        assert_eq!(p.source_orders(), rows, "round {round}");
        p.run(&["fence", "off"], 0);
    }
}

/// A write made through the client: its output, or its error.
type Route<'a> = Box<dyn Fn() -> Result<String, String> + 'a>;

/// The change token replay checks before each batch moves across every
/// commit, by another connection, that could change a fenced table: a
/// write, a cascade from a parent outside the spec, `TRUNCATE`, `ALTER
/// TABLE`, `DROP TRIGGER`, a `RENAME TABLE` swap, `LOAD DATA`.
#[test]
fn the_change_token_moves_across_every_route_around_the_triggers() {
    let Some(p) = Pair::new(
        "fence_token",
        "CREATE TABLE parents (id INT NOT NULL PRIMARY KEY) ENGINE = InnoDB;
         INSERT INTO parents VALUES (1), (2), (3);
         ALTER TABLE orders ADD COLUMN parent INT NULL,
             ADD CONSTRAINT orders_parent FOREIGN KEY (parent) REFERENCES parents (id)
             ON DELETE CASCADE;
         UPDATE orders SET parent = id;
         CREATE TRIGGER orders_touch BEFORE UPDATE ON orders FOR EACH ROW SET NEW.cents = NEW.cents",
    ) else {
        return;
    };
    let db = cutover::db::Db::open(
        &cutover::spec::Location::Server(p.target.url.clone()),
        cutover::db::Access::Read,
        cutover::spec::Side::Target,
    )
    .expect("opening the target");
    let app = p.target.app_user();
    let file = p.path().join("rows.tsv");
    std::fs::write(&file, "30\t1\tactive\t\\N\n").unwrap();
    let load = format!(
        "LOAD DATA LOCAL INFILE '{}' INTO TABLE orders",
        file.display()
    );
    let routes: [(&str, Route<'_>); 7] = [
        (
            "an update",
            Box::new(|| app.exec("UPDATE orders SET cents = 5 WHERE id = 3")),
        ),
        (
            "a cascade",
            Box::new(|| app.exec("DELETE FROM parents WHERE id = 1")),
        ),
        ("LOAD DATA", Box::new(|| app.exec(&load))),
        (
            "ALTER TABLE",
            Box::new(|| {
                p.target
                    .try_exec("ALTER TABLE orders MODIFY cents BIGINT NULL")
            }),
        ),
        (
            "DROP TRIGGER",
            Box::new(|| p.target.try_exec("DROP TRIGGER orders_touch")),
        ),
        (
            "a RENAME TABLE swap",
            Box::new(|| {
                p.target.try_exec(
                    "CREATE TABLE orders_new LIKE orders;
                     RENAME TABLE orders TO orders_old, orders_new TO orders",
                )
            }),
        ),
        (
            "TRUNCATE",
            Box::new(|| p.target.try_exec("TRUNCATE TABLE orders_old")),
        ),
    ];
    for (what, route) in routes {
        let before = cutover::db::Fence::change_token(db.fence()).expect("a token");
        route().unwrap_or_else(|e| panic!("{what}: {e}"));
        let after = cutover::db::Fence::change_token(db.fence()).expect("a token");
        assert_ne!(before, after, "{what} left the change token still");
    }
}

#[test]
fn two_fence_ons_started_together_set_one_fence() {
    let Some(p) = Pair::journaled("fence_two", "") else {
        return;
    };
    let outs: Vec<Output> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    cutover_in(p.path(), &["--format", "json", "fence", "on"])
                        .env("CUTOVER_BUSY_TIMEOUT_MS", "30000")
                        .output()
                })
            })
            .collect();
        runs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for out in &outs {
        assert_eq!(out.code, Some(0), "{out}");
    }
    let same_boundary: Vec<bool> = outs
        .iter()
        .map(|o| o.json()["boundary"] == outs[0].json()["boundary"])
        .collect();
    assert_eq!(same_boundary, [true, true], "one fence, one boundary");
    assert_eq!(p.fence_rows(), 1);
    assert_fenced(&p);
    p.run(&["fence", "status"], 0);
}

#[test]
fn a_fence_off_that_cannot_finish_is_completed_by_a_rerun() {
    let Some(p) = Pair::journaled("fence_off_partway", "") else {
        return;
    };
    let app = p.target.app_user();
    app.exec("UPDATE orders SET cents = 3 WHERE id = 2")
        .expect("the application's write");
    p.run(&["fence", "on"], 0);
    p.run(&["replay"], 0);
    // Each DROP TRIGGER commits at once: stopped at a table whose lock it
    // cannot have, `fence off` leaves the triggers of the tables before it
    // dropped, and the fence row.
    let out = std::thread::scope(|s| {
        let holder = hold(s, &app, "_cutover_journal_tables", 8);
        std::thread::sleep(Duration::from_millis(500));
        let out = cutover_in(p.path(), &["fence", "off"])
            .env("CUTOVER_LOCK_TIMEOUT_MS", "1000")
            .expect(2);
        holder.join().unwrap().expect("the holder's transaction");
        out
    });
    out.assert_mentions(&[
        "the fence is still on",
        "_cutover_journal_tables",
        "metadata lock",
    ]);
    assert_eq!(p.fence_rows(), 1);
    let left: BTreeSet<String> = p
        .fence_triggers()
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert!(!left.contains("orders"), "{left:?}");
    assert!(left.contains("_cutover_journal_tables"), "{left:?}");
    p.run(&["fence", "status"], 1)
        .assert_mentions(&["fence breached", "fence triggers missing on"]);
    // The rerun lifts the rest.
    p.run(&["fence", "off"], 0);
    assert_eq!(p.fence_triggers(), Vec::<Vec<String>>::new());
    assert_eq!(p.fence_rows(), 0);
    app.exec("UPDATE orders SET cents = 4 WHERE id = 2")
        .expect("writable again");
}
