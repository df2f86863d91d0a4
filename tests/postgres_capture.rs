//! The PostgreSQL journal against a real server: writes from other
//! connections (a replica session among them) journaled with images equal
//! to scans of the table, key changes, sixteen concurrent writers replayed
//! by an oracle independent of the tool, the digest, TRUNCATE, the proof,
//! stale triggers and the lock-bounded install.
//!
//! Each test makes its own database (`cutover_t_…`) and drops it at the end.
//! The server is `CUTOVER_TEST_PG` (a URL to an administrative database),
//! else `postgres://root@127.0.0.1:5432/postgres`, else the same as user
//! `postgres`. Without a server the tests say so and pass, except under CI
//! (`CI` set), where a missing server is a failure.

mod support;

use cutover::db::JournalLogExt;
use support::Seam;

use std::collections::BTreeMap;
use support::postgres::{Client, Error, TestDb, Transaction};

use anyhow::Result;
use cutover::db::control::identity::Identity;
use cutover::db::postgres::Postgres;
use cutover::db::{Access, JournalEntry, JournalId};
use cutover::value::{Row, Value, key_json};

type Db = cutover::db::Db;

/// A table of every kind the tests journal.
const ITEMS: &str = "CREATE TABLE items (
    id bigint PRIMARY KEY, amount numeric(12,2), free numeric, note text,
    data bytea, at timestamptz, flag boolean, n bigint);
 INSERT INTO items VALUES
    (1, 12.50, 12.50, 'one', '\\x00ff', '2024-02-29 23:59:59.123456+00', true, 9223372036854775807),
    (2, -0.01, 'NaN', '', ''::bytea, '1999-12-31 00:00:00+05', false, -9223372036854775808),
    (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL);";

/// Runs `f` in one write transaction of `db`, committed when it returns `Ok`.
fn write<T>(db: &Db, f: impl FnOnce() -> Result<T>) -> Result<T> {
    db.write(f)
}

const ITEM_COLS: [&str; 8] = ["id", "amount", "free", "note", "data", "at", "flag", "n"];

/// Installs the journal on one table as `journal install` does: identity,
/// image, triggers and proof in one transaction.
fn install(db: &Db, table: &str, cols: &[&str]) -> Result<usize> {
    write(db, || {
        if db.identity().get()?.is_none() {
            db.identity()
                .set(&JournalId::from_stored("0123456789abcdef"), &[table])?;
        }
        db.capture().image_for(table, table, cols)?;
        let n = db.install_journal(table, table, cols, 1)?;
        db.prove_journal(table, table, cols, 1)?;
        Ok(n)
    })
}

/// Every row of a table, by key.
fn rows_of(db: &Db, table: &str, cols: &[&str]) -> Result<BTreeMap<String, Row>> {
    let sql = db.rows().table_sql(table, cols, 1, None);
    let mut out = BTreeMap::new();
    let mut err = None;
    db.rows().scan_into(&sql, None, 64, &mut |b| {
        for r in 0..b.rows() {
            let row = b.values(r, b.width());
            if out.insert(key_of(&row), row).is_some() {
                err = Some("a key twice in a scan");
            }
        }
        Ok(true)
    })?;
    assert!(err.is_none());
    Ok(out)
}

fn key_of(row: &[Value]) -> String {
    key_json(&row[..1]).to_string()
}

/// The row under key `id`, as a scan reads it.
fn row(db: &Db, table: &str, cols: &[&str], id: i64) -> Result<Option<Row>> {
    let sql = db.rows().table_sql(table, cols, 1, None);
    db.rows().get_row(&sql, &[Value::Integer(id)])
}

/// Every entry after `after`, read in pages of `page`; seqs strictly rising.
fn entries(db: &Db, after: i64, page: usize) -> Result<Vec<JournalEntry>> {
    let mut out: Vec<JournalEntry> = Vec::new();
    let mut from = after;
    loop {
        let p = db.journal_page(from, i64::MAX, page)?;
        for e in &p {
            assert!(e.seq > from, "seq {} after {from}", e.seq);
            from = e.seq;
        }
        let done = p.len() < page;
        out.extend(p);
        if done {
            return Ok(out);
        }
    }
}

/// Replays entries in order onto `rows`, checking each before-image is the
/// row there: the oracle, with no code of the tool.
fn replay(rows: &mut BTreeMap<String, Row>, entries: &[JournalEntry]) {
    for e in entries {
        if let Some(old) = &e.old {
            let had = rows.remove(&key_of(old));
            assert_eq!(
                had.as_ref(),
                Some(old),
                "seq {} ({}): before-image",
                e.seq,
                e.op
            );
        }
        if let Some(new) = &e.new {
            let was = rows.insert(key_of(new), new.clone());
            assert!(was.is_none(), "seq {} ({}): key already there", e.seq, e.op);
        }
        match e.op.as_str() {
            "insert" => assert!(e.old.is_none() && e.new.is_some()),
            "update" => assert!(e.old.is_some() && e.new.is_some()),
            "delete" => assert!(e.old.is_some() && e.new.is_none()),
            other => panic!("op {other}"),
        }
    }
}

fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

#[test]
fn writes_from_other_connections_are_journaled_exactly() -> Result<()> {
    let Some(t) = TestDb::new("writes_from_other_connections_are_journaled_exactly") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut app = t.client();
    app.batch_execute(ITEMS)?;
    assert!(install(&db, "items", &ITEM_COLS)? > 0);
    assert!(db.identity().installed()?);
    assert_eq!(db.journal_triggers("items")?, 4);
    assert!(
        db.stale_journal_triggers("items", "items", &ITEM_COLS, 1)?
            .is_empty()
    );
    // Installing again changes nothing.
    assert_eq!(install(&db, "items", &ITEM_COLS)?, 0);
    assert_eq!(
        db.journal().journal_extent().map(|e| (e.entries, e.last))?,
        (0, 0)
    );
    let start = rows_of(&db, "items", &ITEM_COLS)?;

    app.batch_execute(
        "INSERT INTO items VALUES
            (4, 0.10, -0.000, '', '', '2024-01-01 00:00:00.000001+00', false, 0),
            (5, 99999999.99, 123456789012345678901234567890.123456789, 'é ''x''', '\\x000102', 'infinity', true, 1)",
    )?;
    let page = db.journal_page(0, i64::MAX, 100)?;
    assert_eq!(page.len(), 2);
    for (e, id) in page.iter().zip([4, 5]) {
        assert_eq!(e.op.as_str(), "insert");
        assert!(e.old.is_none());
        assert_eq!(e.new, row(&db, "items", &ITEM_COLS, id)?);
    }
    let four = page[0].new.clone().unwrap_or_default();
    assert_eq!(four[2], text("0.000"), "NUMERIC keeps its scale");
    assert_eq!(four[3], text(""), "empty text is not NULL");
    assert_eq!(four[4], Value::Blob(Vec::new()), "empty bytea is not NULL");
    assert_eq!(four[5], text("2024-01-01 00:00:00.000001+00"));
    assert_eq!(
        page[1].new.as_ref().map(|r| r[2].clone()),
        Some(text("123456789012345678901234567890.123456789"))
    );

    // An update in one transaction with a delete; NULLs in and out.
    let before_1 = row(&db, "items", &ITEM_COLS, 1)?;
    let before_3 = row(&db, "items", &ITEM_COLS, 3)?;
    app.batch_execute(
        "BEGIN; UPDATE items SET amount = NULL, note = NULL, data = '\\x', flag = NULL WHERE id = 1;
         UPDATE items SET amount = 0, note = '', free = 1e-20 WHERE id = 3;
         DELETE FROM items WHERE id = 2; COMMIT",
    )?;
    let (_, last) = db.journal().journal_extent().map(|e| (e.entries, e.last))?;
    let page = db.journal_page(page[1].seq, last, 100)?;
    assert_eq!(
        page.iter().map(|e| e.op.as_str()).collect::<Vec<_>>(),
        ["update", "update", "delete"]
    );
    assert_eq!(page[0].old, before_1);
    assert_eq!(page[0].new, row(&db, "items", &ITEM_COLS, 1)?);
    assert_eq!(page[1].old, before_3);
    assert_eq!(page[1].new, row(&db, "items", &ITEM_COLS, 3)?);
    assert_eq!(
        page[2].old.as_ref().map(|r| r[2].clone()),
        Some(text("NaN"))
    );
    assert!(row(&db, "items", &ITEM_COLS, 2)?.is_none());

    // A replica session (superuser) does not skip the journal.
    let mut replica = t.client();
    replica.batch_execute(
        "SET session_replication_role = replica;
         INSERT INTO items VALUES (6, 1.00, 2, 'replica', '\\xff', now(), true, 6);
         UPDATE items SET note = 'via replica' WHERE id = 5;
         DELETE FROM items WHERE id = 4;",
    )?;
    let all = entries(&db, 0, 3)?;
    assert_eq!(all.len(), 8);
    assert_eq!(all[5].new, row(&db, "items", &ITEM_COLS, 6)?);
    assert_eq!(all[6].new, row(&db, "items", &ITEM_COLS, 5)?);
    // The journal replayed on the starting rows is the table now.
    let mut oracle = start;
    replay(&mut oracle, &all);
    assert_eq!(oracle, rows_of(&db, "items", &ITEM_COLS)?);

    let counts: Vec<(String, String, i64)> = db
        .journal()
        .journal_counts(cutover::db::SeqRange::ALL)?
        .into_iter()
        .map(|c| (c.tbl, c.op.as_str().to_string(), c.entries))
        .collect();
    assert_eq!(
        counts,
        vec![
            ("items".to_string(), "delete".to_string(), 2),
            ("items".to_string(), "insert".to_string(), 3),
            ("items".to_string(), "update".to_string(), 3),
        ]
    );
    assert_eq!(db.journal().count_between(0, all[3].seq)?, 4);
    assert_eq!(
        db.journal_pending_counts(all[1].seq, all[4].seq)?,
        vec![("delete".to_string(), 1), ("update".to_string(), 2)]
    );
    assert_eq!(db.journal().last_journaled("items")?, Some(all[7].seq));
    assert_eq!(db.journal().last_journaled("other")?, None);
    Ok(())
}

#[test]
fn a_key_change_is_an_update_from_the_old_key_to_the_new() -> Result<()> {
    let Some(t) = TestDb::new("a_key_change_is_an_update_from_the_old_key_to_the_new") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut app = t.client();
    app.batch_execute(ITEMS)?;
    install(&db, "items", &ITEM_COLS)?;
    let start = rows_of(&db, "items", &ITEM_COLS)?;
    let one = row(&db, "items", &ITEM_COLS, 1)?;
    app.batch_execute("UPDATE items SET id = 100 WHERE id = 1")?;
    let page = db.journal_page(0, i64::MAX, 10)?;
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].op.as_str(), "update");
    assert_eq!(page[0].old, one);
    assert_eq!(
        page[0].new.as_ref().map(|r| r[0].clone()),
        Some(Value::Integer(100))
    );
    assert_eq!(page[0].new, row(&db, "items", &ITEM_COLS, 100)?);
    // Every key moved by one statement, and a key freed then taken again.
    app.batch_execute(
        "UPDATE items SET id = id + 1000;
         DELETE FROM items WHERE id = 1002; INSERT INTO items (id, note) VALUES (1002, 'again');
         UPDATE items SET id = 7 WHERE id = 1003; UPDATE items SET id = 1003 WHERE id = 7",
    )?;
    let all = entries(&db, 0, 2)?;
    let mut oracle = start;
    replay(&mut oracle, &all);
    assert_eq!(oracle, rows_of(&db, "items", &ITEM_COLS)?);
    assert_eq!(all.len(), 1 + 3 + 2 + 2);
    Ok(())
}

/// A small generator, so the test needs no crate and replays the same.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One random write; how many rows it changed.
fn random_write(c: &mut Transaction<'_>, r: &mut Rng) -> Result<u64, Error> {
    let id = r.below(300) as i64;
    let amount = match r.below(5) {
        0 => None,
        _ => Some(format!("{}.{:02}", r.below(1_000_000), r.below(100))),
    };
    let note = match r.below(4) {
        0 => None,
        1 => Some(String::new()),
        _ => Some(format!("n{}'\"\\{}", r.below(1000), r.below(7))),
    };
    let data: Option<Vec<u8>> = match r.below(4) {
        0 => None,
        1 => Some(Vec::new()),
        _ => Some((0..r.below(12)).map(|_| r.below(256) as u8).collect()),
    };
    let micros = r.below(4_000_000_000_000_000) as i64;
    let flag = r.below(2) == 0;
    let set = "amount = $2::text::numeric, note = $3, data = $4, at = timestamptz 'epoch' + $5 * interval '1 microsecond', flag = $6";
    match r.below(10) {
        0..=3 => c.execute(
            "INSERT INTO acct (id, amount, note, data, at, flag) VALUES ($1, $2::text::numeric, $3, $4, timestamptz 'epoch' + $5 * interval '1 microsecond', $6)
             ON CONFLICT (id) DO NOTHING",
            &[&id, &amount, &note, &data, &(micros as f64), &flag],
        ),
        4..=6 => c.execute(
            format!("UPDATE acct SET {set} WHERE id = $1").as_str(),
            &[&id, &amount, &note, &data, &(micros as f64), &flag],
        ),
        7 => {
            let to = r.below(300) as i64;
            c.execute(
                "UPDATE acct SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM acct WHERE id = $2)",
                &[&id, &to],
            )
        }
        8 if r.below(2) == 0 => c.execute(
            "UPDATE acct SET note = coalesce(note, '') || '.' WHERE id BETWEEN $1 AND $1 + 5",
            &[&id],
        ),
        8 => c.execute(
            "INSERT INTO acct (id, note) VALUES ($1, 'upsert') ON CONFLICT (id) DO UPDATE SET note = acct.note || '+'",
            &[&id],
        ),
        _ => c.execute("DELETE FROM acct WHERE id = $1", &[&id]),
    }
}

#[test]
fn sixteen_concurrent_writers_replay_to_the_final_table() -> Result<()> {
    let Some(t) = TestDb::new("sixteen_concurrent_writers_replay_to_the_final_table") else {
        return Ok(());
    };
    let cols = ["id", "amount", "note", "data", "at", "flag"];
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    t.client().batch_execute(
        "CREATE TABLE acct (id bigint PRIMARY KEY, amount numeric(14,2), note text, data bytea, at timestamptz, flag boolean);
         INSERT INTO acct SELECT g, g * 1.25, 'start ' || g, decode(lpad(to_hex(g), 4, '0'), 'hex'),
                                timestamptz '2024-01-01' + g * interval '1.5 second', g % 2 = 0
         FROM generate_series(0, 299, 2) g;",
    )?;
    install(&db, "acct", &cols)?;
    let start = rows_of(&db, "acct", &cols)?;
    let threads: Vec<_> = (0..16u64)
        .map(|n| {
            let url = t.url.clone();
            std::thread::spawn(move || -> Result<u64> {
                let mut c = Client::connect(&url)?;
                let mut r =
                    Rng(0x9E37_79B9_7F4A_7C15 ^ (n + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
                let mut committed = 0;
                for _ in 0..60 {
                    let mut tx = c.transaction()?;
                    let mut changed = 0;
                    let mut failed = false;
                    for _ in 0..1 + r.below(3) {
                        match random_write(&mut tx, &mut r) {
                            Ok(k) => changed += k,
                            // Deadlocks and collisions: the transaction is lost.
                            Err(_) => {
                                failed = true;
                                break;
                            }
                        }
                    }
                    if failed || r.below(8) == 0 {
                        tx.rollback()?;
                    } else if tx.commit().is_ok() {
                        committed += changed;
                    }
                }
                Ok(committed)
            })
        })
        .collect();
    let mut committed = 0;
    for h in threads {
        committed += h.join().expect("a writer panicked")?;
    }
    assert!(committed > 300, "only {committed} changes committed");
    let all = entries(&db, 0, 97)?;
    assert_eq!(all.len() as u64, committed, "entries lost or doubled");
    assert_eq!(
        db.journal()
            .journal_extent()
            .map(|e| (e.entries, e.last))?
            .0 as u64,
        committed
    );
    let mut oracle = start;
    replay(&mut oracle, &all);
    assert_eq!(oracle, rows_of(&db, "acct", &cols)?);
    Ok(())
}

#[test]
fn the_digest_changes_when_an_entry_is_tampered_with() -> Result<()> {
    let Some(t) = TestDb::new("the_digest_changes_when_an_entry_is_tampered_with") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut app = t.client();
    app.batch_execute(ITEMS)?;
    let empty = db.journal().journal_digest()?;
    install(&db, "items", &ITEM_COLS)?;
    app.batch_execute(
        "UPDATE items SET free = 12.50 WHERE id = 3; DELETE FROM items WHERE id = 2;
         INSERT INTO items (id, data) VALUES (9, '\\x01')",
    )?;
    let d = db.journal().journal_digest()?;
    assert_ne!(d, empty);
    assert_eq!(db.journal().journal_digest()?, d, "the digest is stable");
    let img = db.journal_tables()?[0].img;
    let j = format!("_cutover_journal_{img}");
    // NUMERIC 12.5 is equal to 12.50, but not the same value.
    app.batch_execute(&format!("UPDATE {j} SET n3 = 12.5 WHERE op = 'update'"))?;
    assert_ne!(db.journal().journal_digest()?, d);
    app.batch_execute(&format!("UPDATE {j} SET n3 = 12.50 WHERE op = 'update'"))?;
    assert_eq!(db.journal().journal_digest()?, d);
    app.batch_execute(&format!("CREATE TABLE saved AS SELECT * FROM {j}"))?;
    for tamper in [
        format!("UPDATE {j} SET n5 = '\\x0100' WHERE op = 'insert'"),
        format!("UPDATE {j} SET o4 = NULL WHERE op = 'delete'"),
        // An image the op does not read is still the journal's.
        format!("UPDATE {j} SET o1 = 1 WHERE op = 'insert'"),
        format!("UPDATE {j} SET op = 'update' WHERE op = 'delete'"),
        format!("UPDATE {j} SET xid = '1' WHERE op = 'insert'"),
        format!("UPDATE {j} SET seq = seq + 100 WHERE op = 'insert'"),
        format!("DELETE FROM {j} WHERE op = 'delete'"),
    ] {
        app.batch_execute(&tamper)?;
        assert_ne!(db.journal().journal_digest()?, d, "{tamper}");
        app.batch_execute(&format!(
            "DELETE FROM {j}; INSERT INTO {j} SELECT * FROM saved"
        ))?;
        assert_eq!(db.journal().journal_digest()?, d, "restored after {tamper}");
    }
    Ok(())
}

#[test]
fn truncate_journals_every_row_as_a_delete_in_read_committed_only() -> Result<()> {
    let Some(t) = TestDb::new("truncate_journals_every_row_as_a_delete_in_read_committed_only")
    else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut app = t.client();
    app.batch_execute(ITEMS)?;
    install(&db, "items", &ITEM_COLS)?;
    let start = rows_of(&db, "items", &ITEM_COLS)?;
    // Under snapshot isolation TRUNCATE could remove rows the snapshot does
    // not see: refused, nothing changed.
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        let err = app
            .batch_execute(&format!("BEGIN ISOLATION LEVEL {level}; TRUNCATE items"))
            .expect_err("TRUNCATE under snapshot isolation");
        app.batch_execute("ROLLBACK")?;
        let msg = format!("{:?}", err);
        assert!(msg.contains("TRUNCATE of items refused"), "{msg}");
    }
    assert_eq!(rows_of(&db, "items", &ITEM_COLS)?, start);
    assert_eq!(
        db.journal().journal_extent().map(|e| (e.entries, e.last))?,
        (0, 0)
    );
    app.batch_execute("INSERT INTO items (id, note) VALUES (10, 'new'); TRUNCATE items")?;
    assert!(rows_of(&db, "items", &ITEM_COLS)?.is_empty());
    let all = entries(&db, 0, 100)?;
    assert_eq!(all.len(), 5);
    assert!(all[1..].iter().all(|e| e.op.as_str() == "delete"));
    let mut oracle = start;
    replay(&mut oracle, &all);
    assert!(oracle.is_empty());
    Ok(())
}

#[test]
fn the_proof_writes_through_the_triggers_and_leaves_nothing() -> Result<()> {
    let Some(t) = TestDb::new("the_proof_writes_through_the_triggers_and_leaves_nothing") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut app = t.client();
    app.batch_execute(ITEMS)?;
    app.batch_execute(
        "CREATE TABLE empty (id int PRIMARY KEY, v numeric(5,1));
         CREATE TABLE child (id int PRIMARY KEY, item bigint REFERENCES items (id));
         INSERT INTO child VALUES (1, 1);",
    )?;
    install(&db, "items", &ITEM_COLS)?;
    install(&db, "empty", &["id", "v"])?;
    let before = rows_of(&db, "items", &ITEM_COLS)?;
    // Outside a transaction, and inside one, the proof is rolled back.
    db.prove_journal("items", "items", &ITEM_COLS, 1)?;
    write(&db, || db.prove_journal("items", "items", &ITEM_COLS, 1))?;
    db.prove_journal("empty", "empty", &["id", "v"], 1)?;
    assert_eq!(
        db.journal()
            .journal_extent()
            .map(|e| (e.entries, e.last))?
            .0,
        0
    );
    assert_eq!(rows_of(&db, "items", &ITEM_COLS)?, before);
    assert_eq!(
        app.query_one("SELECT count(*) FROM child", &[])?
            .get::<_, i64>(0),
        1
    );
    // A function that journals the wrong image is caught.
    let img = db.journal_tables()?[0].img;
    let body: String = app
        .query_one(
            "SELECT prosrc FROM pg_proc WHERE proname = $1",
            &[&format!("_cutover_journal_{img}_update")],
        )?
        .get(0);
    let broken = body.replacen("NEW.\"note\"", "NULL", 1);
    assert_ne!(broken, body);
    app.batch_execute(&format!(
        "CREATE OR REPLACE FUNCTION _cutover_journal_{img}_update() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $cutover${broken}$cutover$"
    ))?;
    let err = db
        .prove_journal("items", "items", &ITEM_COLS, 1)
        .expect_err("a wrong image");
    assert!(format!("{err:#}").contains("update"), "{err:#}");
    let stale = db.stale_journal_triggers("items", "items", &ITEM_COLS, 1)?;
    assert_eq!(
        stale,
        ["_cutover_journal_update (differs from what the spec needs)"]
    );
    assert!(install(&db, "items", &ITEM_COLS)? > 0);
    db.prove_journal("items", "items", &ITEM_COLS, 1)?;
    Ok(())
}

#[test]
fn stale_triggers_are_named_and_installed_again() -> Result<()> {
    let Some(t) = TestDb::new("stale_triggers_are_named_and_installed_again") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut app = t.client();
    app.batch_execute(ITEMS)?;
    let stale = db.stale_journal_triggers("items", "items", &ITEM_COLS, 1)?;
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(stale[0].starts_with("(no journal image"));
    install(&db, "items", &ITEM_COLS)?;
    let cases = [
        (
            "ALTER TABLE items DISABLE TRIGGER _cutover_journal_update",
            "_cutover_journal_update (disabled)",
        ),
        (
            "ALTER TABLE items ENABLE TRIGGER _cutover_journal_delete",
            "_cutover_journal_delete (enabled only outside replica sessions)",
        ),
        (
            "ALTER TABLE items ENABLE REPLICA TRIGGER _cutover_journal_insert",
            "_cutover_journal_insert (enabled only in replica sessions)",
        ),
        (
            "DROP TRIGGER _cutover_journal_truncate ON items",
            "_cutover_journal_truncate (missing)",
        ),
        (
            "DROP TRIGGER _cutover_journal_insert ON items;
             CREATE TRIGGER _cutover_journal_insert AFTER INSERT ON items FOR EACH ROW WHEN (NEW.id > 0)
               EXECUTE FUNCTION _cutover_journal_1_insert();
             ALTER TABLE items ENABLE ALWAYS TRIGGER _cutover_journal_insert",
            "_cutover_journal_insert (differs from what the spec needs)",
        ),
        (
            "DROP TRIGGER _cutover_journal_update ON items;
             CREATE TRIGGER _cutover_journal_update AFTER UPDATE OF note ON items FOR EACH ROW
               EXECUTE FUNCTION _cutover_journal_1_update();
             ALTER TABLE items ENABLE ALWAYS TRIGGER _cutover_journal_update",
            "_cutover_journal_update (differs from what the spec needs)",
        ),
    ];
    for (sql, want) in cases {
        app.batch_execute(sql)?;
        assert_eq!(
            db.stale_journal_triggers("items", "items", &ITEM_COLS, 1)?,
            [want],
            "{sql}"
        );
        assert_eq!(install(&db, "items", &ITEM_COLS)?, 1, "{sql}");
        assert!(
            db.stale_journal_triggers("items", "items", &ITEM_COLS, 1)?
                .is_empty()
        );
    }
    // A disabled trigger journals nothing: what `stale` is there to catch.
    app.batch_execute(
        "ALTER TABLE items DISABLE TRIGGER _cutover_journal_insert; INSERT INTO items (id) VALUES (50)",
    )?;
    assert_eq!(
        db.journal()
            .journal_extent()
            .map(|e| (e.entries, e.last))?
            .0,
        0
    );
    install(&db, "items", &ITEM_COLS)?;
    // A column whose type changed no longer fits its image.
    app.batch_execute("ALTER TABLE items ALTER COLUMN amount TYPE numeric(14,3)")?;
    let stale = db.stale_journal_triggers("items", "items", &ITEM_COLS, 1)?;
    assert_eq!(
        stale,
        ["(column amount is numeric(14,3) but its journal image holds numeric(12,2))"]
    );
    let err = install(&db, "items", &ITEM_COLS).expect_err("an image of the old types");
    assert!(format!("{err:#}").contains("numeric(14,3)"), "{err:#}");
    // Removing leaves the entries and no function behind.
    write(&db, || db.capture().remove_journal("items"))?;
    assert_eq!(db.journal_triggers("items")?, 0);
    let left: i64 = app
        .query_one(
            "SELECT count(*) FROM pg_proc WHERE proname LIKE '\\_cutover\\_journal\\_%'",
            &[],
        )?
        .get(0);
    assert_eq!(left, 0);
    Ok(())
}

#[test]
fn a_locked_table_is_named_with_the_sessions_holding_it() -> Result<()> {
    let Some(t) = TestDb::new("a_locked_table_is_named_with_the_sessions_holding_it") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut app = t.client();
    app.batch_execute(ITEMS)?;
    let mut holder = t.client();
    holder.batch_execute(
        "SET application_name = 'busy app'; BEGIN; INSERT INTO items (id) VALUES (77)",
    )?;
    let pid: i32 = holder.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    let began = std::time::Instant::now();
    let err = install(&db, "items", &ITEM_COLS).expect_err("the table is locked");
    let msg = format!("{err:#}");
    assert!(msg.contains(&format!("pid {pid}")), "{msg}");
    assert!(msg.contains("busy app"), "{msg}");
    assert!(msg.contains("RowExclusiveLock"), "{msg}");
    assert!(began.elapsed() >= std::time::Duration::from_secs(5));
    // Nothing was left behind: not the image, not the identity.
    assert!(!db.identity().installed()?);
    assert!(db.identity().get()?.is_none());
    holder.batch_execute("COMMIT")?;
    // The install's transaction goes on with the session's lock_timeout.
    db.fixtures().execute_script("SET lock_timeout = '7s'")?;
    write(&db, || {
        db.capture().image_for("items", "items", &ITEM_COLS)?;
        db.install_journal("items", "items", &ITEM_COLS, 1)?;
        db.fixtures().execute_script(
            "DO $$ BEGIN IF current_setting('lock_timeout') <> '7s' THEN
               RAISE EXCEPTION 'lock_timeout is %', current_setting('lock_timeout'); END IF; END $$",
        )
    })?;
    assert!(
        db.stale_journal_triggers("items", "items", &ITEM_COLS, 1)?
            .is_empty()
    );
    Ok(())
}

#[test]
fn identity_and_column_lists() -> Result<()> {
    let Some(t) = TestDb::new("identity_and_column_lists") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut app = t.client();
    app.batch_execute(ITEMS)?;
    assert!(db.identity().get()?.is_none());
    assert_eq!(db.identity().start()?, 0);
    assert!(db.journal_tables()?.is_empty());
    assert_eq!(
        db.journal().journal_extent().map(|e| (e.entries, e.last))?,
        (0, 0)
    );
    assert!(
        db.journal()
            .journal_counts(cutover::db::SeqRange::ALL)?
            .is_empty()
    );
    install(&db, "items", &ITEM_COLS)?;
    assert_eq!(
        db.identity().get()?,
        Some(Identity {
            id: JournalId::from_stored("0123456789abcdef"),
            tables: vec!["items".to_string()]
        })
    );
    app.batch_execute("UPDATE items SET note = 'x' WHERE id = 1")?;
    // Fewer columns: a second image of the same table.
    install(&db, "items", &["id", "note"])?;
    let tables = db.journal_tables()?;
    assert_eq!(tables.len(), 2);
    assert_eq!(tables[1].columns, ["id", "note"]);
    assert_eq!(
        db.capture().journal_image_tables()?,
        [
            format!("_cutover_journal_{}", tables[0].img),
            format!("_cutover_journal_{}", tables[1].img)
        ]
    );
    app.batch_execute("UPDATE items SET note = 'y' WHERE id = 1")?;
    let all = entries(&db, 0, 10)?;
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].img, tables[0].img);
    assert_eq!(all[1].img, tables[1].img);
    assert_eq!(all[1].new, Some(vec![Value::Integer(1), text("y")]));
    // The old image's triggers are gone from the table; its entries stay.
    assert!(
        db.stale_journal_triggers("items", "items", &ITEM_COLS, 1)?
            .len()
            == 4
    );
    write(&db, || {
        db.identity()
            .renew(&JournalId::from_stored("fedcba9876543210"), all[1].seq)?;
        db.identity().set_tables(&["items", "more"])
    })?;
    assert_eq!(db.identity().start()?, all[1].seq);
    assert_eq!(
        db.identity().get()?,
        Some(Identity {
            id: JournalId::from_stored("fedcba9876543210"),
            tables: vec!["items".to_string(), "more".to_string()]
        })
    );
    // A second identity is refused.
    assert!(
        write(&db, || db
            .identity()
            .set(&JournalId::from_stored("x"), &["items"]))
        .is_err()
    );
    Ok(())
}

#[test]
fn other_types_are_journaled_as_a_scan_reads_them() -> Result<()> {
    let Some(t) = TestDb::new("other_types_are_journaled_as_a_scan_reads_them") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut app = t.client();
    app.batch_execute(
        "CREATE TYPE mood AS ENUM ('sad', 'ok');
         CREATE DOMAIN money2 AS numeric(10,2) NOT NULL CHECK (VALUE > -1000);
         CREATE DOMAIN code AS char(4);
         CREATE TABLE odd (k text PRIMARY KEY, m money2, c code, e mood, f4 real, f8 float8,
                           d date, ts timestamp(3), j jsonb, u uuid, a int[], i interval, s smallint);",
    )?;
    let cols = [
        "k", "m", "c", "e", "f4", "f8", "d", "ts", "j", "u", "a", "i", "s",
    ];
    install(&db, "odd", &cols)?;
    app.batch_execute(
        "INSERT INTO odd VALUES
           ('b', 1.5, 'ab', 'ok', 0.1, 0.30000000000000004, '2024-02-29', '2024-01-01 10:00:00.5',
            '{\"b\": [1, 2.50], \"a\": null}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,NULL,3}', '1 day 02:03:04', -32768),
           ('a', -999.99, NULL, NULL, 'NaN', '-Infinity', 'infinity', '-infinity', 'null', NULL, '{}', '-1 mon', NULL);
         UPDATE odd SET k = 'c', f8 = '-0'::float8 WHERE k = 'a';
         UPDATE odd SET k = 'é' WHERE k = 'b';",
    )?;
    let all = entries(&db, 0, 10)?;
    assert_eq!(all.len(), 4);
    let sql = db.rows().table_sql("odd", &cols, 1, None);
    for (e, key) in all[2..].iter().zip(["c", "é"]) {
        // Debug forms: NaN is not equal to itself, and -0.0 is equal to 0.0.
        assert_eq!(
            format!("{:?}", e.new),
            format!("{:?}", db.rows().get_row(&sql, &[text(key)])?),
            "{key}"
        );
    }
    // The images hold the base types of domains, not the domains: a NULL
    // image of a NOT NULL domain is no error.
    let held: String = app
        .query_one(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = '_cutover_journal_1'::regclass AND attname = 'o2'",
            &[],
        )?
        .get(0);
    assert_eq!(held, "numeric(10,2)");
    assert_eq!(
        all[0].new.as_ref().map(|r| r[2].clone()),
        Some(text("ab  "))
    );
    Ok(())
}

/// A role of its own for one test; dropped with the test's database, which
/// goes first (a role that owns objects cannot be dropped).
struct Role {
    admin: String,
    db: String,
    name: String,
}

impl Role {
    fn new(t: &TestDb, suffix: &str) -> Result<Role> {
        let name = format!("{}_{suffix}", t.name);
        let mut c = Client::connect(&t.admin)?;
        c.batch_execute(&format!("CREATE ROLE {name} LOGIN"))?;
        Ok(Role {
            admin: t.admin.clone(),
            db: t.name.clone(),
            name,
        })
    }

    /// The test database's URL as this role.
    fn url(&self, t: &TestDb) -> String {
        let (_, rest) = t.url.split_once('@').expect("a URL with a user");
        format!("postgres://{}@{rest}", self.name)
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.admin) {
            // Two statements: DROP DATABASE cannot run in the implicit
            // transaction of a multi-statement query.
            let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.db));
            let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {}", self.name));
        }
    }
}

#[test]
fn a_role_that_may_only_write_the_table_is_journaled() -> Result<()> {
    let Some(t) = TestDb::new("a_role_that_may_only_write_the_table_is_journaled") else {
        return Ok(());
    };
    let role = Role::new(&t, "app")?;
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut admin = t.client();
    admin.batch_execute(ITEMS)?;
    admin.batch_execute(&format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON items TO {}",
        role.name
    ))?;
    install(&db, "items", &ITEM_COLS)?;
    let start = rows_of(&db, "items", &ITEM_COLS)?;
    let mut app = Client::connect(&role.url(&t))?;
    app.batch_execute(
        "INSERT INTO items (id, note) VALUES (20, 'by app'); UPDATE items SET id = 21 WHERE id = 20; DELETE FROM items WHERE id = 1",
    )?;
    // The app cannot touch the journal itself.
    assert!(app.batch_execute("DELETE FROM _cutover_journal_1").is_err());
    let all = entries(&db, 0, 10)?;
    assert_eq!(all.len(), 3);
    let mut oracle = start;
    replay(&mut oracle, &all);
    assert_eq!(oracle, rows_of(&db, "items", &ITEM_COLS)?);
    Ok(())
}

#[test]
fn an_owner_without_superuser_proves_a_referenced_row_by_its_update() -> Result<()> {
    let Some(t) = TestDb::new("an_owner_without_superuser_proves_a_referenced_row_by_its_update")
    else {
        return Ok(());
    };
    let role = Role::new(&t, "owner")?;
    t.client()
        .batch_execute(&format!("ALTER DATABASE {} OWNER TO {}", t.name, role.name))?;
    let mut owner = Client::connect(&role.url(&t))?;
    owner.batch_execute(ITEMS)?;
    owner.batch_execute(
        "CREATE TABLE child (id int PRIMARY KEY, item bigint REFERENCES items (id));
         INSERT INTO child VALUES (1, 1);",
    )?;
    let db = support::postgres::as_db(Postgres::open(
        &role.url(&t),
        Access::Write,
        cutover::spec::Side::Target,
    )?);
    install(&db, "items", &ITEM_COLS)?;
    assert_eq!(
        db.journal()
            .journal_extent()
            .map(|e| (e.entries, e.last))?
            .0,
        0
    );
    owner.batch_execute("UPDATE items SET note = 'owner' WHERE id = 1")?;
    assert_eq!(
        db.journal()
            .journal_extent()
            .map(|e| (e.entries, e.last))?
            .0,
        1
    );
    Ok(())
}

#[test]
fn an_identity_key_generated_always_is_proved() -> Result<()> {
    let Some(t) = TestDb::new("an_identity_key_generated_always_is_proved") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    let mut app = t.client();
    app.batch_execute(
        "CREATE TABLE gen (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
         INSERT INTO gen (v) VALUES ('a'), ('b');",
    )?;
    install(&db, "gen", &["id", "v"])?;
    assert_eq!(
        db.journal()
            .journal_extent()
            .map(|e| (e.entries, e.last))?
            .0,
        0
    );
    app.batch_execute("INSERT INTO gen (v) VALUES ('c')")?;
    let all = entries(&db, 0, 10)?;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].new, Some(vec![Value::Integer(3), text("c")]));
    Ok(())
}
