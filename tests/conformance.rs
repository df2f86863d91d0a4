//! The engine interfaces' conformance suite: one contract per interface of
//! `src/db/interfaces.rs`, written once against `cutover::db::Db` and run on
//! every engine (a SQLite file, a PostgreSQL database made and dropped per
//! test; `support::conformance`). Each asserts what the interface's doc
//! comments, docs/journal.md and docs/engines.md promise, with real rows;
//! where engines may differ it goes by what the engine offers (a `None`
//! conditional writer, empty sequence marks, a NaN it cannot store), held
//! against what its `Profile` documents, never by its name.
//!
//! The engines' own particulars (PostgreSQL's types, locks, roles, COPY)
//! stay in `tests/postgres_*.rs`; the commands over these interfaces in the
//! scenario files.

mod support;

use cutover::db::{CatalogueExt, JournalLogExt, RowsExt};
use support::Seam;

use anyhow::Result;
use cutover::db::control::identity::Identity;
use cutover::db::control::progress::{LoadCheckpoint, NewBatch, SeenColumn};
use cutover::db::control::receipts::{Evidence, EvidenceKind, Receipt, Revision};
use cutover::db::transaction::Step;
use cutover::db::{
    CellForm, ColumnForm, Count, Decision, FenceRecord, ForeignKey, ForeignKeyViolation, Generated,
    JournalId, KeyRange, Probe, ReplayVerdict, SeqRange, SideEffectKind, TableForm, TableSql,
};
use cutover::value::{Block, ColumnKind, Row, Value};
use support::conformance::{Subject, conformance};

conformance! {
    connection_contract,
    catalogue_columns_come_in_declaration_order_with_their_place_in_the_key,
    catalogue_uniqueness_is_the_key_or_a_unique_index_in_any_order,
    catalogue_foreign_keys_come_in_declaration_order,
    catalogue_generated_columns_are_named_stored,
    catalogue_the_rows_breaking_a_foreign_key_are_found,
    catalogue_what_a_row_cannot_hold_is_said_without_writing_it,
    catalogue_lists_the_users_tables_and_their_triggers,
    catalogue_schema_text_is_in_name_order_and_moves_with_the_schema,
    sequences_contract,
    rows_are_scanned_in_key_order_in_blocks,
    rows_are_scanned_by_a_watermark_then_the_key,
    rows_keyed_reads_match_the_key_exactly,
    rows_writes_count_and_values_come_back_exactly,
    rows_columns_outside_the_spec_are_read_and_written_by_key,
    rows_absent_and_generated_columns_are_never_written,
    rows_an_insert_a_trigger_swallows_wrote_no_row,
    rows_a_table_emptied_counts_every_row,
    batch_insert_contract,
    conditional_write_contract,
    digests_contract,
    applied_set_contract,
    receipts_contract,
    progress_contract,
    journal_contract,
    fence_contract,
    fixtures_contract,
    side_effects_contract,
}

/// Columns `names` of the row under `key` (`key_names`), read as a scan
/// reads them: the spec's way to read columns it does not carry.
fn get_columns(
    db: &(impl cutover::db::Rows + ?Sized),
    table: &str,
    key_names: &[&str],
    key: &[Value],
    names: &[&str],
) -> Result<Option<Vec<Value>>> {
    let columns: Vec<&str> = key_names.iter().chain(names).copied().collect();
    let sql = db.table_sql(table, &columns, key_names.len(), None);
    Ok(db
        .get_row(&sql, key)?
        .map(|mut r| r.split_off(key_names.len())))
}

/// A source column of `kind`, as another engine's catalogue would
/// describe it.
fn column(name: &str, kind: ColumnKind) -> cutover::db::ColumnInfo {
    cutover::db::ColumnInfo {
        name: name.to_string(),
        decl_type: String::new(),
        kind,
        pk: 0,
        labels: None,
        unread: None,
        limit: cutover::db::Limit::None,
        required: false,
    }
}

/// The application's triggers on a table, by name (not cutover's own).
fn triggers(db: &cutover::db::Db, table: &str) -> Result<Vec<String>> {
    Ok(db
        .side_effects()
        .side_effects(table)?
        .into_iter()
        .filter(|e| e.kind == SideEffectKind::Trigger)
        .map(|e| e.name)
        .collect())
}

fn int(i: i64) -> Value {
    Value::Integer(i)
}

fn text(t: &str) -> Value {
    Value::Text(t.to_string())
}

/// Values equal as stored: reals by their bits (`-0.0`, NaN).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Real(x), Value::Real(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// Whether a time is the control tables' text (`2024-03-15T13:45:00.123Z`).
fn is_utc_text(t: &str) -> bool {
    t.len() == 24 && &t[4..5] == "-" && &t[10..11] == "T" && &t[19..20] == "." && t.ends_with('Z')
}

/// `rows` as one block of their width.
fn block_of(rows: &[Row]) -> Block {
    let width = rows.first().map_or(0, Vec::len);
    let mut b = Block::new(width, rows.len());
    for r in rows {
        for v in r {
            b.push(v.as_cell());
        }
    }
    b
}

/// Every row a scan hands out, and the size of each block.
fn scan(
    s: &Subject,
    sql: &TableSql,
    after: Option<&[Value]>,
    block: usize,
) -> Result<(Vec<Row>, Vec<usize>)> {
    let (mut rows, mut sizes) = (Vec::new(), Vec::new());
    s.db.rows().scan_into(sql, after, block, &mut |b| {
        sizes.push(b.rows());
        rows.extend((0..b.rows()).map(|i| b.values(i, b.width())));
        Ok(true)
    })?;
    Ok((rows, sizes))
}

/// Every row of a table read through the tool, in key order.
fn all(s: &Subject, sql: &TableSql) -> Result<Vec<Row>> {
    Ok(scan(s, sql, None, 64)?.0)
}

/// Runs `f` inside one write transaction of `s.db`.
fn write<T>(s: &Subject, f: impl FnOnce() -> Result<T>) -> Result<T> {
    s.db.write(f)
}

// ---------------------------------------------------------------------------
// Connection

/// Transactions are all or nothing and unseen by other connections until
/// they commit; a savepoint undoes only its own part; `rollback` is safe at
/// any time; the clock is the control tables' UTC text; messages name the
/// database without a password.
fn connection_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    s.exec("CREATE TABLE conn_t (id integer PRIMARY KEY, v text)");
    let sql = db.rows().table_sql("conn_t", &["id", "v"], 1, None);
    let other = s.open();
    let other_sql = other.rows().table_sql("conn_t", &["id", "v"], 1, None);

    assert!(!db.location().is_empty());
    let facts = db.connection().facts()?;
    assert!(!facts.read_only, "a database opened to write");
    assert!(!facts.durability.settings.is_empty());
    assert_eq!(
        db.connection().damage()?,
        None,
        "a healthy database has no damage"
    );
    let now = db.control().now()?;
    assert!(is_utc_text(&now), "{now}");
    // A file has no connection to protect; a server's has one to describe.
    let file = std::path::Path::new(db.location()).is_file();
    assert_eq!(facts.security.is_none(), file, "{}", db.location());

    // A rollback is safe outside a transaction, and twice.
    db.connection().transaction(Step::Rollback)?;
    db.connection().transaction(Step::Rollback)?;

    // Uncommitted work is invisible elsewhere, then visible at once.
    let tx = db.begin_write()?;
    assert_eq!(db.rows().insert_row(&sql, &[int(1), text("a")])?, 1);
    assert_eq!(db.rows().count_rows(&sql)?, 1, "its own write, inside");
    assert_eq!(
        other.rows().count_rows(&other_sql)?,
        0,
        "another connection, before the commit"
    );
    tx.commit()?;
    assert_eq!(
        other.rows().count_rows(&other_sql)?,
        1,
        "another connection, after the commit"
    );

    // Rolled back: gone, for this connection and the others.
    let tx = db.begin_write()?;
    db.rows().insert_row(&sql, &[int(2), text("b")])?;
    db.rows()
        .update_row(&sql, &[int(1)], &[int(1), text("changed")])?;
    tx.rollback();
    assert_eq!(all(s, &sql)?, [vec![int(1), text("a")]]);
    assert_eq!(
        other.rows().get_row(&other_sql, &[int(1)])?,
        Some(vec![int(1), text("a")])
    );

    // Db::write: committed on Ok, rolled back whole on Err.
    let failed: Result<()> = db.write(|| {
        db.rows().insert_row(&sql, &[int(3), text("c")])?;
        anyhow::bail!("the caller's error")
    });
    assert!(failed.is_err());
    assert_eq!(db.rows().count_rows(&sql)?, 1);

    // A savepoint undoes its own part only; a released one is kept.
    let tx = db.begin_write()?;
    db.rows().insert_row(&sql, &[int(4), text("kept")])?;
    let sp = db.savepoint()?;
    db.rows().insert_row(&sql, &[int(5), text("undone")])?;
    sp.rollback();
    let sp = db.savepoint()?;
    db.rows().insert_row(&sql, &[int(6), text("released")])?;
    sp.release()?;
    tx.commit()?;
    let ids: Vec<Value> = all(s, &sql)?.into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(ids, [int(1), int(4), int(6)]);

    // A read transaction ends with rollback, and reads in it work.
    let tx = db.begin_read()?;
    assert_eq!(db.rows().count_rows(&sql)?, 3);
    tx.rollback();

    // Foreign keys suspended for a write transaction: a parent deleted
    // under its child neither cascades nor is refused.
    s.exec(
        "CREATE TABLE conn_parent (id integer PRIMARY KEY);
         CREATE TABLE conn_child (id integer PRIMARY KEY,
             parent integer REFERENCES conn_parent (id) ON DELETE CASCADE);
         INSERT INTO conn_parent VALUES (1);
         INSERT INTO conn_child VALUES (10, 1);",
    );
    let parent = db.rows().table_sql("conn_parent", &["id"], 1, None);
    let child = db
        .rows()
        .table_sql("conn_child", &["id", "parent"], 1, None);
    let tx = db.begin_write()?;
    db.connection()
        .suspend_foreign_keys(&["conn_parent", "conn_child"], true)?;
    assert_eq!(db.rows().delete_row(&parent, &[int(1)])?, 1);
    assert_eq!(db.rows().count_rows(&child)?, 1, "nothing cascades");
    db.connection()
        .suspend_foreign_keys(&["conn_parent", "conn_child"], false)?;
    tx.rollback();
    assert_eq!(db.rows().count_rows(&parent)?, 1);

    // A password in the URL never shows.
    if let Some(db) = s.open_with_password("s3cret-pw") {
        assert!(!db.location().contains("s3cret-pw"), "{}", db.location());
        assert!(db.location().contains("***"), "{}", db.location());
        let sec = db
            .connection()
            .facts()?
            .security
            .expect("a server's connection");
        assert!(
            !sec.warnings.is_empty(),
            "a password in the URL is warned of"
        );
        assert!(
            sec.warnings.iter().all(|w| !w.contains("s3cret-pw")),
            "{:?}",
            sec.warnings
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Catalogue

/// `cat_parent` keyed by (b, a) with a unique `note`, `cat_child` referring
/// to it and to `cat_other` (which has a CHECK) with a generated column,
/// and `cat_trig` with an application trigger.
fn cat_tables(s: &Subject) {
    s.exec(&format!(
        "CREATE TABLE cat_other (id integer PRIMARY KEY, CONSTRAINT cat_other_positive CHECK (id > 0));
         CREATE TABLE cat_parent (a {key} NOT NULL, b integer NOT NULL, note {key}, PRIMARY KEY (b, a));
         CREATE UNIQUE INDEX cat_parent_note ON cat_parent (note);
         CREATE TABLE cat_child (id integer PRIMARY KEY, pa {key}, pb integer, other integer,
             g integer GENERATED ALWAYS AS (other * 2) STORED,
             FOREIGN KEY (pb, pa) REFERENCES cat_parent (b, a),
             FOREIGN KEY (other) REFERENCES cat_other (id));
         CREATE TABLE cat_trig (id integer PRIMARY KEY, v text);
         {}",
        (s.profile.swallowing_trigger)("cat_trig", "cat_swallow"),
        key = s.profile.key_text
    ));
}

/// Columns in declaration order with their place in the primary key; none
/// for a table that is not there.
fn catalogue_columns_come_in_declaration_order_with_their_place_in_the_key(
    s: &Subject,
) -> Result<()> {
    let db = &s.db;
    cat_tables(s);
    let cols = db.catalogue().table_columns("cat_parent")?;
    let described: Vec<(String, String, i64)> = cols
        .iter()
        .map(|c| (c.name.clone(), c.decl_type.to_lowercase(), c.pk))
        .collect();
    assert_eq!(
        described,
        [
            ("a", s.profile.key_text, 2),
            ("b", s.profile.integer_declared, 1),
            ("note", s.profile.key_text, 0)
        ]
        .map(|(n, t, pk)| (n.to_string(), t.to_string(), pk))
    );
    assert!(db.catalogue().table_columns("cat_nowhere")?.is_empty());

    Ok(())
}

/// Uniqueness by the key or a unique index, whatever the order of the
/// columns asked; never by part of a key or more than one.
fn catalogue_uniqueness_is_the_key_or_a_unique_index_in_any_order(s: &Subject) -> Result<()> {
    let db = &s.db;
    cat_tables(s);
    assert!(db.catalogue().key_is_unique("cat_parent", &["a", "b"])?);
    assert!(db.catalogue().key_is_unique("cat_parent", &["b", "a"])?);
    assert!(
        db.catalogue().key_is_unique("cat_parent", &["note"])?,
        "a unique index"
    );
    assert!(
        !db.catalogue().key_is_unique("cat_parent", &["b"])?,
        "part of the key"
    );
    assert!(
        !db.catalogue()
            .key_is_unique("cat_parent", &["a", "b", "note"])?,
        "more than a key"
    );
    assert!(!db.catalogue().key_is_unique("cat_trig", &["v"])?);

    Ok(())
}

/// Foreign keys in declaration order: the parent and the column pairs (the
/// name and whether a key defers are the engine's: none on SQLite, every
/// key on MySQL named).
fn catalogue_foreign_keys_come_in_declaration_order(s: &Subject) -> Result<()> {
    let db = &s.db;
    cat_tables(s);
    let fk = |parent: &str, pairs: &[(&str, &str)]| {
        (
            parent.to_string(),
            pairs
                .iter()
                .map(|(c, p)| (c.to_string(), Some(p.to_string())))
                .collect::<Vec<_>>(),
        )
    };
    let found: Vec<_> = db
        .catalogue()
        .foreign_keys("cat_child")?
        .into_iter()
        .map(|k: ForeignKey| (k.parent, k.columns))
        .collect();
    assert_eq!(
        found,
        [
            fk("cat_parent", &[("pb", "b"), ("pa", "a")]),
            fk("cat_other", &[("other", "id")])
        ]
    );
    assert!(db.catalogue().foreign_keys("cat_parent")?.is_empty());

    Ok(())
}

/// Generated columns, stored ones said so.
fn catalogue_generated_columns_are_named_stored(s: &Subject) -> Result<()> {
    let db = &s.db;
    cat_tables(s);
    assert_eq!(
        db.catalogue().generated_columns("cat_child")?,
        [Generated {
            name: "g".to_string(),
            stored: true
        }]
    );
    assert!(db.catalogue().generated_columns("cat_parent")?.is_empty());

    Ok(())
}

/// A child without its parent, written as the rehearsal writes (foreign
/// keys suspended), is found by its key.
fn catalogue_the_rows_breaking_a_foreign_key_are_found(s: &Subject) -> Result<()> {
    let db = &s.db;
    cat_tables(s);
    s.exec("INSERT INTO cat_parent VALUES ('x', 1, NULL); INSERT INTO cat_other VALUES (5)");
    let child = db
        .rows()
        .table_sql("cat_child", &["id", "pa", "pb", "other"], 1, None);
    write(s, || {
        db.connection().suspend_foreign_keys(&["cat_child"], true)?;
        db.rows()
            .insert_row(&child, &[int(7), text("y"), int(1), int(5)])?;
        db.rows()
            .insert_row(&child, &[int(8), text("x"), int(1), int(5)])?;
        Ok(())
    })?;
    let found = db
        .catalogue()
        .foreign_key_violations("cat_child", &["id"])?;
    // The foreign key's name is the engine's (MySQL's `cat_child_ibfk_1`),
    // where it reports one.
    let constraint = found.first().and_then(|v| v.constraint.clone());
    assert!(constraint.is_none() || s.name == "mysql", "{constraint:?}");
    assert_eq!(
        found,
        [ForeignKeyViolation {
            child: "cat_child".to_string(),
            key: Some(vec![int(7)]),
            parent: "cat_parent".to_string(),
            constraint,
        }]
    );
    assert!(
        db.catalogue()
            .foreign_key_violations("cat_parent", &["b", "a"])?
            .is_empty()
    );

    Ok(())
}

/// Whether a row's values fit its columns, asked without writing: a NULL
/// in a NOT NULL column named; a CHECK, which only a write judges, named.
fn catalogue_what_a_row_cannot_hold_is_said_without_writing_it(s: &Subject) -> Result<()> {
    let db = &s.db;
    cat_tables(s);
    let parent = db
        .rows()
        .table_sql("cat_parent", &["b", "a", "note"], 2, None);
    let before = db.rows().count_rows(&parent)?;
    let holding = db.catalogue().holding(&parent, true)?;
    assert_eq!(
        holding.unfit(&[int(2), text("z"), Value::Null])?,
        None,
        "a row that fits"
    );
    assert_eq!(
        holding.checks(),
        [] as [String; 0],
        "cat_parent has no CHECK"
    );
    let unfit = holding
        .unfit(&[Value::Null, text("z"), text("n")])?
        .expect("a NULL in the NOT NULL column b");
    assert_eq!(unfit.column, "b");
    assert!(
        unfit.why.contains("cat_parent") && unfit.why.contains("NULL"),
        "{}",
        unfit.why
    );
    assert_eq!(db.rows().count_rows(&parent)?, before, "nothing written");
    // A CHECK constraint, which only a write judges, is named (SQLite keeps
    // no names: its definition is said to hold some).
    let other = db.rows().table_sql("cat_other", &["id"], 1, None);
    let checks = db.catalogue().holding(&other, false)?.checks().to_vec();
    assert!(
        checks.len() == 1
            && (checks[0].contains("cat_other_positive")
                || checks[0] == "CHECK constraints in the table's definition"),
        "{checks:?}"
    );

    Ok(())
}

/// The user's tables without cutover's, and an application trigger.
fn catalogue_lists_the_users_tables_and_their_triggers(s: &Subject) -> Result<()> {
    let db = &s.db;
    cat_tables(s);
    write(s, || db.progress().ensure_control_tables())?;
    assert_eq!(
        db.catalogue().tables(false)?,
        ["cat_child", "cat_other", "cat_parent", "cat_trig"]
    );
    assert_eq!(triggers(db, "cat_trig")?, ["cat_swallow"]);
    assert!(triggers(db, "cat_parent")?.is_empty());

    Ok(())
}

/// The schema of the tables asked for and of cutover's own (made here), in
/// name order, changed when a column is added.
fn catalogue_schema_text_is_in_name_order_and_moves_with_the_schema(s: &Subject) -> Result<()> {
    let db = &s.db;
    cat_tables(s);
    write(s, || db.progress().ensure_control_tables())?;
    let schema = db.catalogue().schema_of(&["cat_parent"])?;
    let names: Vec<&String> = schema.iter().map(|p| &p.name).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "in name order");
    assert!(
        schema.iter().any(|p| p.definition.contains("note")),
        "the table's definition: {schema:?}"
    );
    assert!(
        schema.iter().any(|p| p.name.contains("_cutover_fence")),
        "cutover's own tables: {schema:?}"
    );
    assert!(
        !schema.iter().any(|p| p.name.contains("cat_trig")),
        "only the tables asked for: {schema:?}"
    );
    s.exec("ALTER TABLE cat_parent ADD COLUMN extra integer");
    assert_ne!(
        db.catalogue().schema_of(&["cat_parent"])?,
        schema,
        "a column added"
    );
    Ok(())
}

/// The id generator of a table: its high-water mark, raised past a value
/// and past the ids its column holds, never lowered; and where a rollback
/// does not put it back, marks that do.
fn sequences_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    s.exec(&format!(
        "CREATE TABLE seq_ids (id {}, note text);
         CREATE TABLE seq_plain (id integer PRIMARY KEY);
         INSERT INTO seq_ids (note) VALUES ('a'), ('b'), ('c');",
        s.profile.generated_id
    ));
    let next_id = || s.int("INSERT INTO seq_ids (note) VALUES ('next') RETURNING id");
    assert_eq!(db.catalogue().sequence("seq_ids")?, Some(3));
    assert_eq!(
        db.catalogue().sequence("seq_plain")?,
        None,
        "a table without a generator"
    );

    write(s, || db.catalogue().raise_sequence("seq_ids", 10))?;
    assert_eq!(db.catalogue().sequence("seq_ids")?, Some(10));
    write(s, || db.catalogue().raise_sequence("seq_ids", 5))?;
    assert_eq!(
        db.catalogue().sequence("seq_ids")?,
        Some(10),
        "never lowered"
    );
    assert_eq!(next_id(), 11);
    write(s, || db.catalogue().raise_sequence("seq_plain", 10))?;
    assert_eq!(db.catalogue().sequence("seq_plain")?, None);

    // An id written past the generator by hand: raised past it.
    s.exec("INSERT INTO seq_ids (id, note) VALUES (50, 'by hand')");
    write(s, || db.catalogue().raise_sequence("seq_ids", 0))?;
    assert_eq!(db.catalogue().sequence("seq_ids")?, Some(50));
    assert_eq!(next_id(), 51);

    // A generator moved in a transaction rolled back stands where it
    // stood, by the rollback itself or by its marks.
    let marks = db.catalogue().sequence_marks(&["seq_ids", "seq_plain"])?;
    let tx = db.begin_write()?;
    db.catalogue().raise_sequence("seq_ids", 1000)?;
    assert_eq!(db.catalogue().sequence("seq_ids")?, Some(1000));
    tx.rollback();
    let moved = db.catalogue().restore_sequences(&marks)?;
    assert_eq!(db.catalogue().sequence("seq_ids")?, Some(51));
    // A generator a rollback puts back by itself (SQLite's counters are
    // rows) is left alone; the others were moved by the raise.
    let named: Vec<String> = marks
        .iter()
        .filter(|m| !m.transactional)
        .map(|m| m.name.clone())
        .collect();
    assert_eq!(moved, named, "the marks put back are those that moved");
    let own: Vec<&str> = marks
        .iter()
        .filter(|m| m.own)
        .map(|m| m.table.as_str())
        .collect();
    assert_eq!(own, ["seq_ids"], "each table's own generator marked");
    assert!(
        db.catalogue().restore_sequences(&marks)?.is_empty(),
        "nothing moved since"
    );
    assert_eq!(next_id(), 52);
    Ok(())
}

// ---------------------------------------------------------------------------
// Rows

/// `rows_k`: seven rows keyed by a text and an integer whose orders differ
/// by engine (case, accents, a NULL), and the table's statements.
fn rows_k(s: &Subject) -> Result<TableSql> {
    let db = &s.db;
    s.exec(&format!(
        "CREATE TABLE rows_k (k {text}, n bigint, v {text}, r {real}, b {blob}, w bigint);
         INSERT INTO rows_k VALUES
             ('z', 1, 'z1', NULL, NULL, 3),
             ('a', 10, 'a10', NULL, NULL, 1),
             ('é', 1, 'e1', NULL, NULL, 2),
             (NULL, 1, 'null', NULL, NULL, 2),
             ('B', 1, 'B1', NULL, NULL, 1),
             ('a', 2, 'a2', NULL, NULL, 3),
             ('a', -5, 'a-5', NULL, NULL, 2);",
        text = s.profile.text_not_by_bytes,
        real = s.profile.real,
        blob = s.profile.blob
    ));
    let sql = db.rows().table_sql("rows_k", &ROWS_K, 2, None);
    assert_eq!(
        (sql.table.as_str(), sql.key_len, sql.width()),
        ("rows_k", 2, 6)
    );
    assert_eq!(db.rows().count_rows(&sql)?, 7);
    Ok(sql)
}

const ROWS_K: [&str; 6] = ["k", "n", "v", "r", "b", "w"];

/// The column `v` of each row, which names it.
fn names(rows: &[Row]) -> Vec<Value> {
    rows.iter().map(|r| r[2].clone()).collect()
}

/// Scans go in key order (NULL, then text by its bytes, numbers by value)
/// in blocks of at most the size asked, resume after a key, and stop when
/// the sink says so.
fn rows_are_scanned_in_key_order_in_blocks(s: &Subject) -> Result<()> {
    let db = &s.db;
    let sql = rows_k(s)?;
    let order = ["null", "B1", "a-5", "a2", "a10", "z1", "e1"].map(text);
    let (rows, sizes) = scan(s, &sql, None, 3)?;
    assert_eq!(
        names(&rows),
        order,
        "NULL, then text by its bytes, numbers by value"
    );
    assert_eq!(sizes, [3, 3, 1], "blocks of at most 3 rows");
    assert_eq!(rows[0][0], Value::Null);

    // Resumed after a key: only the keys past it.
    let (rows, _) = scan(s, &sql, Some(&[text("a"), int(2)]), 2)?;
    assert_eq!(names(&rows), order[4..]);
    // The sink stops the scan.
    let mut blocks = 0;
    db.rows().scan_into(&sql, None, 2, &mut |_| {
        blocks += 1;
        Ok(false)
    })?;
    assert_eq!(blocks, 1);

    Ok(())
}

/// A scan ordered by a column first (sync's watermark, integer or text by
/// its bytes), then the key, resumes at the watermark, not after it.
fn rows_are_scanned_by_a_watermark_then_the_key(s: &Subject) -> Result<()> {
    let db = &s.db;
    rows_k(s)?;
    let cols = ROWS_K;
    // Ordered by a watermark column first, then the key; resumed at (not
    // after) a watermark.
    let by_w = db.rows().table_sql("rows_k", &cols, 2, Some(5));
    let (rows, _) = scan(s, &by_w, None, 10)?;
    assert_eq!(
        names(&rows),
        ["B1", "a10", "null", "a-5", "e1", "a2", "z1"].map(text)
    );
    let (rows, _) = scan(s, &by_w, Some(&[int(2)]), 10)?;
    assert_eq!(names(&rows), ["null", "a-5", "e1", "a2", "z1"].map(text));
    // A text watermark goes by its bytes too.
    let by_v = db.rows().table_sql("rows_k", &cols, 2, Some(2));
    let (rows, _) = scan(s, &by_v, None, 10)?;
    assert_eq!(
        names(&rows),
        ["B1", "a-5", "a10", "a2", "e1", "null", "z1"].map(text)
    );
    let (rows, _) = scan(s, &by_v, Some(&[text("a2")]), 10)?;
    assert_eq!(names(&rows), ["a2", "e1", "null", "z1"].map(text));

    Ok(())
}

/// A keyed read, write or delete matches the key exactly (never by case),
/// and a key two rows hold is an error.
fn rows_keyed_reads_match_the_key_exactly(s: &Subject) -> Result<()> {
    let db = &s.db;
    let sql = rows_k(s)?;
    // Keyed reads match exactly.
    assert_eq!(
        db.rows().get_row(&sql, &[text("a"), int(10)])?,
        Some(vec![
            text("a"),
            int(10),
            text("a10"),
            Value::Null,
            Value::Null,
            int(1)
        ])
    );
    assert_eq!(
        db.rows().get_row(&sql, &[text("A"), int(10)])?,
        None,
        "not by case"
    );
    let other_case = [
        text("A"),
        int(10),
        text("A10"),
        Value::Null,
        Value::Null,
        int(1),
    ];
    assert_eq!(
        db.rows().update_row(&sql, &other_case[..2], &other_case)?,
        0
    );
    assert_eq!(db.rows().delete_row(&sql, &other_case[..2])?, 0);
    assert_eq!(
        get_columns(db.rows(), "rows_k", &["k", "n"], &other_case[..2], &["v"])?,
        None
    );
    assert_eq!(db.rows().get_row(&sql, &[text("a"), int(11)])?, None);
    s.exec("INSERT INTO rows_k VALUES ('twice', 1, 'one', NULL, NULL, 0), ('twice', 1, 'two', NULL, NULL, 0)");
    assert!(
        db.rows().get_row(&sql, &[text("twice"), int(1)]).is_err(),
        "a key held by two rows is an error"
    );
    s.exec("DELETE FROM rows_k WHERE k = 'twice'");

    Ok(())
}

/// Writes say how many rows they wrote, values come back exactly (the
/// extremes of an integer, any text, reals to the bit, bytes), and a
/// change of key moves the row.
fn rows_writes_count_and_values_come_back_exactly(s: &Subject) -> Result<()> {
    let db = &s.db;
    let sql = rows_k(s)?;
    // Writes say how many rows they wrote, and values come back exactly.
    let row = vec![
        text("new"),
        int(i64::MIN),
        text("snowman ☃ and \u{1F600}"),
        Value::Real(0.1 + 0.2),
        Value::Blob(vec![0, 255, 1, 0]),
        int(i64::MAX),
    ];
    let key = &row[..2];
    assert_eq!(db.rows().insert_row(&sql, &row)?, 1);
    assert_eq!(db.rows().get_row(&sql, key)?, Some(row.clone()));
    for r in [1e300, -5e-324, f64::INFINITY, -2.5] {
        let mut changed = row.clone();
        changed[3] = Value::Real(r);
        if r.is_infinite() && !s.profile.infinity {
            assert!(
                db.rows().update_row(&sql, key, &changed).is_err(),
                "{r:?} refused where the engine stores none"
            );
            continue;
        }
        assert_eq!(db.rows().update_row(&sql, key, &changed)?, 1);
        let back = db.rows().get_row(&sql, key)?.expect("the row");
        assert!(
            same(&back[3], &Value::Real(r)),
            "{r:?} came back as {:?}",
            back[3]
        );
    }
    let mut moved = row.clone();
    moved[1] = int(7);
    assert_eq!(
        db.rows().update_row(&sql, key, &moved)?,
        1,
        "a change of key"
    );
    assert_eq!(db.rows().get_row(&sql, key)?, None);
    assert_eq!(db.rows().get_row(&sql, &moved[..2])?, Some(moved.clone()));
    assert_eq!(
        db.rows().update_row(&sql, key, &row)?,
        0,
        "no row under the old key"
    );
    assert_eq!(db.rows().delete_row(&sql, &moved[..2])?, 1);
    assert_eq!(db.rows().delete_row(&sql, &moved[..2])?, 0);
    assert_eq!(db.rows().count_rows(&sql)?, 7);

    Ok(())
}

/// Columns the spec does not carry are read and written by key through
/// statements of their own.
fn rows_columns_outside_the_spec_are_read_and_written_by_key(s: &Subject) -> Result<()> {
    let db = &s.db;
    rows_k(s)?;
    // Columns outside the spec, by key.
    assert_eq!(
        get_columns(
            db.rows(),
            "rows_k",
            &["k", "n"],
            &[text("z"), int(1)],
            &["w", "v"]
        )?,
        Some(vec![int(3), text("z1")])
    );
    assert_eq!(
        get_columns(
            db.rows(),
            "rows_k",
            &["k", "n"],
            &[text("y"), int(1)],
            &["w"]
        )?,
        None
    );
    assert_eq!(
        db.rows().update_row(
            &db.rows()
                .table_sql("rows_k", &["k", "n", "w", "v"], 2, None),
            &[text("z"), int(1)],
            &[text("z"), int(1), int(9), text("z!")]
        )?,
        1
    );
    assert_eq!(
        get_columns(
            db.rows(),
            "rows_k",
            &["k", "n"],
            &[text("z"), int(1)],
            &["v", "w"]
        )?,
        Some(vec![text("z!"), int(9)])
    );
    assert_eq!(db.rows().max_integer("rows_k", "w")?, Some(9));

    Ok(())
}

/// A column the table does not have (an empty name) reads as NULL and is
/// never written; a generated column is read, never written.
fn rows_absent_and_generated_columns_are_never_written(s: &Subject) -> Result<()> {
    let db = &s.db;
    s.exec(
        "CREATE TABLE rows_g (id integer PRIMARY KEY, v integer,
             g integer GENERATED ALWAYS AS (v * 2) STORED)",
    );
    let g = db
        .rows()
        .table_sql("rows_g", &["id", "", "v", "g"], 1, None);
    assert_eq!(
        db.rows()
            .insert_row(&g, &[int(1), text("ignored"), int(21), int(0)])?,
        1
    );
    assert_eq!(all(s, &g)?, [vec![int(1), Value::Null, int(21), int(42)]]);
    assert_eq!(
        db.rows()
            .update_row(&g, &[int(1)], &[int(1), text("x"), int(5), int(0)])?,
        1
    );
    assert_eq!(all(s, &g)?, [vec![int(1), Value::Null, int(5), int(10)]]);
    assert_eq!(db.rows().max_integer("rows_g", "g")?, Some(10));

    Ok(())
}

/// An insert a trigger swallows wrote no row, where the engine lets a
/// trigger swallow one; a key taken is an error.
fn rows_an_insert_a_trigger_swallows_wrote_no_row(s: &Subject) -> Result<()> {
    let db = &s.db;
    s.exec(&format!(
        "CREATE TABLE rows_t (id integer PRIMARY KEY, v text); {}",
        (s.profile.swallowing_trigger)("rows_t", "rows_swallow")
    ));
    let t = db.rows().table_sql("rows_t", &["id", "v"], 1, None);
    assert_eq!(
        db.rows().insert_row(&t, &[int(1), text("swallow")])?,
        usize::from(!s.profile.swallows)
    );
    assert_eq!(db.rows().insert_row(&t, &[int(2), text("kept")])?, 1);
    assert!(
        db.rows().insert_row(&t, &[int(2), text("again")]).is_err(),
        "a key taken"
    );
    assert_eq!(db.rows().max_integer("rows_t", "id")?, Some(2));

    Ok(())
}

/// Emptied: every row, counted.
fn rows_a_table_emptied_counts_every_row(s: &Subject) -> Result<()> {
    let db = &s.db;
    let sql = rows_k(s)?;
    assert_eq!(write(s, || db.rows().clear_table(&sql))?, 7);
    assert_eq!(db.rows().count_rows(&sql)?, 0);
    assert_eq!(all(s, &sql)?, Vec::<Row>::new());
    assert_eq!(db.rows().max_integer("rows_k", "w")?, None);
    Ok(())
}

/// Row-by-row inserts from blocks skip a key already there and go on; a
/// bulk insert, where the engine has one, writes all or (a key taken)
/// nothing and leaves the transaction usable.
fn batch_insert_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    s.exec(&format!(
        "CREATE TABLE bi (id integer PRIMARY KEY, code {} UNIQUE, v text NOT NULL)",
        s.profile.key_text
    ));
    let sql = db.rows().table_sql("bi", &["id", "code", "v"], 1, None);
    let rows = |ids: &[(i64, &str)]| {
        ids.iter()
            .map(|(i, c)| vec![int(*i), text(c), text(&format!("v{i}"))])
            .collect::<Vec<Row>>()
    };

    let first = block_of(&rows(&[(1, "a"), (2, "b"), (3, "c")]));
    write(s, || {
        let mut ins = db.rows().inserter(&sql)?;
        assert!(ins.insert(&first, 0)?);
        assert!(ins.insert(&first, 2)?);
        assert!(!ins.insert(&first, 0)?, "the same key again");
        let clash = block_of(&rows(&[(9, "a")]));
        assert!(!ins.insert(&clash, 0)?, "a unique key taken");
        Ok(())
    })?;
    assert_eq!(all(s, &sql)?, rows(&[(1, "a"), (3, "c")]));

    let fresh = [
        block_of(&rows(&[(10, "j"), (11, "k")])),
        block_of(&rows(&[(12, "l")])),
    ];
    let colliding = [block_of(&rows(&[(20, "t"), (3, "again")]))];
    write(s, || {
        match db.rows().bulk_insert(&sql, &fresh)? {
            Some(n) => assert_eq!(n, 3, "every row of every block"),
            None => {
                assert_eq!(
                    db.rows().count_rows(&sql)?,
                    2,
                    "no fast way: nothing written"
                );
                let mut ins = db.rows().inserter(&sql)?;
                for b in &fresh {
                    for r in 0..b.rows() {
                        assert!(ins.insert(b, r)?);
                    }
                }
            }
        }
        assert_eq!(
            db.rows().bulk_insert(&sql, &colliding)?,
            None,
            "a key already there"
        );
        // Nothing of it was written, and the transaction goes on.
        assert_eq!(db.rows().get_row(&sql, &[int(20)])?, None);
        assert_eq!(
            db.rows()
                .insert_row(&sql, &[int(21), text("u"), text("v21")])?,
            1
        );
        Ok(())
    })?;
    let ids: Vec<Value> = all(s, &sql)?.into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(ids, [1, 3, 10, 11, 12, 21].map(int));
    assert_eq!(s.profile.bulk_insert, {
        let probe = [block_of(&rows(&[(30, "x")]))];
        let r = db.write(|| db.rows().bulk_insert(&sql, &probe))?;
        r.is_some()
    });
    Ok(())
}

/// The conditional write, where the engine has one: the row is written
/// only over exactly the row expected (same kinds, same bytes), never
/// moving a key, and a write that does not happen leaves the transaction
/// going on.
fn conditional_write_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    s.exec(&format!(
        "CREATE TABLE cw (id integer PRIMARY KEY, v text, n {real});
         INSERT INTO cw VALUES (1, 'one', 1.5), (2, 'two', NULL);
         CREATE TABLE cw_t (id integer PRIMARY KEY, v text); {trigger}",
        real = s.profile.real,
        trigger = (s.profile.swallowing_trigger)("cw_t", "cw_swallow")
    ));
    let sql = db.rows().table_sql("cw", &["id", "v", "n"], 1, None);
    let Some(mut w) = db.rows().conditional_writer(&sql) else {
        assert!(
            !s.profile.conditional_writes,
            "{} documents conditional writes",
            s.name
        );
        return Ok(());
    };
    assert!(s.profile.conditional_writes, "{} documents none", s.name);
    let one = vec![int(1), text("one"), Value::Real(1.5)];
    let two = vec![int(2), text("two"), Value::Null];
    let tx = db.begin_write()?;
    // Insert: only where no row holds the key.
    assert!(w.write_if(None, Some(&[int(3), text("three"), Value::Null]))?);
    assert!(!w.write_if(None, Some(&[int(1), text("clash"), Value::Null]))?);
    // Update: only over exactly the row expected.
    let changed = vec![int(1), text("uno"), Value::Real(1.5)];
    assert!(!w.write_if(
        Some(&[int(1), text("other"), Value::Real(1.5)]),
        Some(&changed)
    )?);
    assert!(
        !w.write_if(Some(&[int(1), text("one"), text("1.5")]), Some(&changed))?,
        "a text is not a real"
    );
    assert!(!w.write_if(
        Some(&[int(1), text("ONE"), Value::Real(1.5)]),
        Some(&changed)
    )?);
    assert!(w.write_if(Some(&one), Some(&changed))?);
    assert!(
        !w.write_if(Some(&one), Some(&changed))?,
        "no longer the row there"
    );
    // A change of key is not this write's.
    assert!(!w.write_if(Some(&two), Some(&[int(4), text("two"), Value::Null]))?);
    // Delete: only the row expected.
    assert!(!w.write_if(Some(&[int(2), text("two"), Value::Real(0.0)]), None)?);
    assert!(w.write_if(Some(&two), None)?);
    assert!(!w.write_if(Some(&two), None)?);
    drop(w);
    tx.commit()?;
    assert_eq!(
        all(s, &sql)?,
        [changed, vec![int(3), text("three"), Value::Null]]
    );
    // A write the database swallowed was not written (where a trigger can
    // swallow one: MySQL's writes the row as it is).
    let t = db.rows().table_sql("cw_t", &["id", "v"], 1, None);
    let Some(mut w) = db.rows().conditional_writer(&t) else {
        assert!(
            !s.profile.conditional_past_triggers,
            "{} documents conditional writes on a table with a trigger",
            s.name
        );
        assert_eq!(all(s, &t)?, [] as [Vec<Value>; 0]);
        return Ok(());
    };
    assert!(s.profile.conditional_past_triggers, "{}", s.name);
    assert_eq!(
        w.write_if(None, Some(&[int(1), text("swallow")]))?,
        !s.profile.swallows
    );
    assert!(w.write_if(None, Some(&[int(2), text("kept")]))?);
    drop(w);
    let kept = vec![int(2), text("kept")];
    match s.profile.swallows {
        true => assert_eq!(all(s, &t)?, [kept]),
        false => assert_eq!(all(s, &t)?, [vec![int(1), text("swallow")], kept]),
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Digests

/// SHA-256 of the rows [`cutover::db::Db::digest_rows`] gives for the rows
/// of `digests_contract`'s table, on every engine: a digest over values and
/// their kinds, whoever read them.
const DIGEST_OF_ROWS: &str = "96434a74dfd14b209e822b844ce9056d01dcd43c4e84d930b19f73ffcca7152c";

/// The same rows digest alike on every engine and a one-byte change does
/// not; where the engine computes digests itself, its segments count,
/// sum and digest the rows of each key range exactly, equal tables alike,
/// and only the range holding a changed row differs.
fn digests_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    let mut script = String::new();
    for t in ["dg_a", "dg_b"] {
        script.push_str(&format!(
            "CREATE TABLE {t} (id bigint PRIMARY KEY, name text NOT NULL, cents bigint);
             INSERT INTO {t} VALUES "
        ));
        let rows: Vec<String> = (1..=40)
            .map(|i| {
                let cents = if i % 10 == 0 {
                    "NULL".to_string()
                } else {
                    (i * 100).to_string()
                };
                format!("({i}, 'n{i}', {cents})")
            })
            .collect();
        script.push_str(&rows.join(", "));
        script.push_str(";\n");
    }
    script.push_str("CREATE TABLE dg_loose (id bigint, name text, cents bigint);");
    s.exec(&script);
    let cols = ["id", "name", "cents"];
    let a = db.rows().table_sql("dg_a", &cols, 1, None);
    let b = db.rows().table_sql("dg_b", &cols, 1, None);
    let digest = db.digest_rows(&a)?;
    assert_eq!(digest, db.digest_rows(&b)?);
    assert_eq!(digest, DIGEST_OF_ROWS, "the same rows on every engine");

    let form = TableForm {
        columns: vec![
            ColumnForm {
                form: CellForm::Copy,
                integer: false,
                min: None,
                values: None,
            };
            3
        ],
        money: vec![2],
        currency: None,
    };
    let digests = db.rows().digests();
    assert_eq!(
        digests.is_some(),
        s.profile.digests,
        "{} documents digests: {}",
        s.name,
        s.profile.digests
    );
    let whole = KeyRange::default();
    let before = if let Some(d) = digests {
        assert_eq!(d.digest_refusal(&a, &form)?, None);
        let loose = db.rows().table_sql("dg_loose", &cols, 1, None);
        assert!(
            d.digest_refusal(&loose, &form)?.is_some(),
            "a key not unique"
        );
        assert!(db.rows().row_count(&a, Count::Estimate)? >= 0);

        let [seg] = &d.digest_ranges(&a, &form, &whole, &[])?[..] else {
            panic!("one segment for no bounds");
        };
        assert_eq!((seg.rows, seg.notes), (40, 0));
        let sum: i128 = (1..=40).filter(|i| i % 10 != 0).map(|i| i * 100).sum();
        assert_eq!(seg.money.len(), 1);
        assert_eq!(seg.money[0].currency, Value::Null);
        assert_eq!(seg.money[0].sums, [(36, sum)]);
        assert_eq!(
            d.digest_ranges(&b, &form, &whole, &[])?,
            std::slice::from_ref(seg)
        );

        let bounds = d.split_keys(&a, &whole, 4)?;
        assert!(!bounds.is_empty() && bounds.len() <= 3, "{bounds:?}");
        assert!(bounds.iter().all(|k| k.len() == 1));
        assert!(
            bounds.windows(2).all(|w| w[0][0].sql_cmp(&w[1][0]).is_lt()),
            "{bounds:?}"
        );
        let segs = d.digest_ranges(&a, &form, &whole, &bounds)?;
        assert_eq!(segs.len(), bounds.len() + 1);
        assert_eq!(segs.iter().map(|g| g.rows).sum::<u64>(), 40);
        assert_eq!(d.digest_ranges(&b, &form, &whole, &bounds)?, segs);

        let range = KeyRange {
            from: Some(vec![int(10)]),
            before: Some(vec![int(20)]),
        };
        let mut ids = Vec::new();
        d.scan_range(&a, &range, 4, &mut |blk| {
            assert!(blk.rows() <= 4);
            ids.extend((0..blk.rows()).map(|i| blk.get(i, 0).to_value()));
            Ok(true)
        })?;
        assert_eq!(ids, (10..20).map(int).collect::<Vec<_>>());
        let inside = d.split_keys(&a, &range, 2)?;
        assert!(
            inside.iter().all(|k| k.len() == 1
                && k[0].sql_cmp(&int(10)).is_ge()
                && k[0].sql_cmp(&int(20)).is_lt()),
            "{inside:?}"
        );
        let [seg] = &d.digest_ranges(&a, &form, &range, &[])?[..] else {
            panic!("one segment");
        };
        assert_eq!(seg.rows, 10);
        Some((bounds, segs))
    } else {
        None
    };

    // One byte of one row.
    s.exec("UPDATE dg_b SET name = 'o7' WHERE id = 7");
    assert_ne!(db.digest_rows(&b)?, digest);
    if let (Some(d), Some((bounds, segs))) = (digests, before) {
        let changed = d.digest_ranges(&b, &form, &whole, &bounds)?;
        let differ: Vec<usize> = (0..segs.len()).filter(|&i| segs[i] != changed[i]).collect();
        let holding = bounds
            .iter()
            .filter(|k| k[0].sql_cmp(&int(7)).is_le())
            .count();
        assert_eq!(differ, [holding], "only the range holding id 7");
        assert_eq!(changed[holding].rows, segs[holding].rows);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// AppliedSet, Receipts, Progress: the control tables

/// The applied set's runs (`support::applied_set_contract`), the columns
/// kept for a deleted row, the source's copy of the fence record and the
/// replay's verdict.
fn applied_set_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    let (a, f) = (db.applied_set(), db.fence_records());
    let j1 = JournalId::from_stored("j1");
    assert_eq!(f.copy(&j1)?, None, "before any table is made");
    assert_eq!(f.last_verdict(&j1)?, None);
    support::applied_set_contract(&s.db)?;

    // Kept columns: kept, replaced by a later delete, taken back once.
    let note = |v: &str| -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_str(&format!(r#"{{"note":"{v}"}}"#)).expect("an object")
    };
    write(s, || {
        a.keep_columns("j1", "artist", "[1]", &note("a"), 3)?;
        a.keep_columns("j1", "artist", "[1]", &note("b"), 4)?;
        a.keep_columns("j2", "artist", "[1]", &note("c"), 4)
    })?;
    let taken = write(s, || a.take_kept_columns("j1", "artist", "[1]"))?;
    assert_eq!(taken, Some(note("b")));
    assert_eq!(
        write(s, || a.take_kept_columns("j1", "artist", "[1]"))?,
        None
    );
    assert_eq!(a.take_kept_columns("j2", "artist", "[2]")?, None);

    // The fence record's copy: the latest not lifted, field for field.
    let fence = |at: &str, boundary: i64| FenceRecord {
        boundary,
        journal_rows: boundary - 1,
        fingerprint: format!("fp-{boundary}"),
        tables: vec!["orders".to_string()],
        parts: r#"{"version":3}"#.to_string(),
        fenced_at: at.to_string(),
    };
    let j2 = JournalId::from_stored("j2");
    let first = fence("2024-03-15T13:45:00.123Z", 7);
    write(s, || f.record_copy(&j1, &first))?;
    assert_eq!(f.copy(&j1)?, Some(first.clone()));
    assert_eq!(f.copy(&j2)?, None);
    let again = FenceRecord {
        fingerprint: "fp-again".into(),
        ..first.clone()
    };
    write(s, || f.record_copy(&j1, &again))?;
    assert_eq!(f.copy(&j1)?, Some(again), "the same fence, replaced");
    let later = fence("2024-03-16T08:00:00.000Z", 9);
    write(s, || f.record_copy(&j1, &later))?;
    assert_eq!(f.copy(&j1)?, Some(later));
    write(s, || f.lift_copy(&j1))?;
    assert_eq!(f.copy(&j1)?, None, "every copy lifted");

    // The last verdict of a journal.
    let verdict = |passed: bool, at: &str| ReplayVerdict {
        journal: j1.clone(),
        boundary: 9,
        passed,
        detail: if passed {
            String::new()
        } else {
            "a conflict on 'orders' [3]".into()
        },
        at: at.to_string(),
    };
    let failed = verdict(false, "2024-03-16T08:00:01.000Z");
    write(s, || f.record_verdict(&failed))?;
    assert_eq!(f.last_verdict(&j1)?, Some(failed));
    let passed = verdict(true, "2024-03-16T08:00:02.000Z");
    write(s, || f.record_verdict(&passed))?;
    assert_eq!(f.last_verdict(&j1)?, Some(passed));
    assert_eq!(f.last_verdict(&j2)?, None);
    Ok(())
}

/// A feed's receipts (one per delivery, the checkpoint their last
/// position) and the evidence of its records' revisions.
fn receipts_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    let r = db.receipts();
    let receipt =
        |feed: &'static str, delivery: &'static str, digest: &'static str, first, last, written| {
            Receipt {
                feed,
                delivery,
                digest,
                first,
                last,
                written,
                duplicate: 0,
                stale: 0,
            }
        };
    assert_eq!(r.digest("billing", "d1")?, None);
    assert_eq!(r.checkpoint("billing")?, 0);
    write(s, || r.ensure())?;
    write(s, || r.ensure())?;
    write(s, || {
        r.insert(&Receipt {
            duplicate: 1,
            stale: 1,
            ..receipt("billing", "d1", "sha-1", 1, 10, 8)
        })?;
        r.insert(&receipt("billing", "d2", "sha-2", 11, 15, 5))?;
        r.insert(&receipt("other", "d1", "sha-3", 1, 99, 99))
    })?;
    assert_eq!(r.digest("billing", "d1")?.as_deref(), Some("sha-1"));
    assert_eq!(r.digest("other", "d1")?.as_deref(), Some("sha-3"));
    assert_eq!(r.digest("billing", "d3")?, None);
    assert_eq!(r.checkpoint("billing")?, 15);
    assert_eq!(r.checkpoint("other")?, 99);
    assert_eq!(r.checkpoint("none")?, 0);
    assert!(
        write(s, || r.insert(&receipt("billing", "d1", "sha-x", 1, 10, 0))).is_err(),
        "a delivery has one receipt"
    );
    assert_eq!(r.digest("billing", "d1")?.as_deref(), Some("sha-1"));
    // Rolled back with its transaction.
    let tx = db.begin_write()?;
    r.insert(&receipt("billing", "d3", "sha-4", 16, 20, 5))?;
    tx.rollback();
    assert_eq!(r.checkpoint("billing")?, 15);

    let rev = |key, revision| Revision {
        tbl: "inv",
        key,
        revision,
    };
    let ev = |kind, row: Option<&str>| Evidence {
        kind,
        row: row.map(str::to_string),
    };
    write(s, || {
        r.record_evidence(
            &rev("[1]", 3),
            &ev(EvidenceKind::Stale, Some(r#"{"a":1}"#)),
            "d1",
            4,
        )?;
        r.record_evidence(
            &rev("[1]", 3),
            &ev(EvidenceKind::Stale, Some(r#"{"a":2}"#)),
            "d2",
            5,
        )?;
        r.record_evidence(
            &rev("[1]", 5),
            &ev(EvidenceKind::Superseded, Some(r#"{"a":3}"#)),
            "d2",
            6,
        )?;
        r.record_evidence(&rev("[1]", 5), &ev(EvidenceKind::Tombstone, None), "d2", 7)?;
        r.record_evidence(&rev("[1]", 2), &ev(EvidenceKind::Tombstone, None), "d1", 2)
    })?;
    assert_eq!(
        r.evidence(&rev("[1]", 3))?,
        Some(ev(EvidenceKind::Stale, Some(r#"{"a":1}"#))),
        "kept as first written"
    );
    assert_eq!(
        r.evidence(&rev("[1]", 5))?,
        Some(ev(EvidenceKind::Tombstone, None)),
        "a tombstone before the other kinds"
    );
    assert_eq!(r.evidence(&rev("[1]", 4))?, None);
    assert_eq!(r.evidence(&rev("[2]", 3))?, None);
    assert_eq!(r.tombstone("inv", "[1]")?, Some(5));
    assert_eq!(r.tombstone("inv", "[2]")?, None);
    assert_eq!(r.tombstone("other", "[1]")?, None);
    Ok(())
}

/// Every kind of sync watermark, for the exactness the cursor must keep.
fn watermarks() -> Vec<Value> {
    vec![
        Value::Null,
        int(i64::MIN),
        int(i64::MAX),
        int(0),
        Value::Real(0.1),
        Value::Real(-0.0),
        Value::Real(1e300),
        Value::Real(5e-324),
        Value::Real(f64::INFINITY),
        Value::Real(f64::NEG_INFINITY),
        Value::Real(f64::NAN),
        text(""),
        text("2024-03-15 13:45:00"),
        text("1250"),
        text("é\\'\""),
        text("a\0b"),
        Value::TextBytes(vec![0xff, 0x00, b'a']),
        Value::Blob(vec![]),
        Value::Blob(vec![0, 1, 255]),
    ]
}

/// The load checkpoint and the sync cursor round trip exactly (a
/// watermark of every kind), batches are provenance in order, and the
/// source schema and evolved columns are kept per table.
fn progress_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    let p = db.progress();
    let mut heard = Vec::new();
    db.connection()
        .await_other_runs(&["orders"], &mut |w| heard.push(w.to_string()))?;
    assert!(heard.is_empty(), "no other run: {heard:?}");

    let checkpoint = |last_key: Option<&str>, rows, done| LoadCheckpoint {
        last_key: last_key.map(str::to_string),
        rows,
        done,
    };
    assert_eq!(p.load_checkpoint("artist")?, None);
    write(s, || p.ensure_control_tables())?;
    write(s, || p.ensure_control_tables())?;
    assert_eq!(p.load_checkpoint("artist")?, None);
    let partway = checkpoint(Some(r#"[500,"é"]"#), 500, false);
    write(s, || p.set_load_checkpoint("artist", &partway))?;
    assert_eq!(p.load_checkpoint("artist")?, Some(partway));
    write(s, || {
        p.set_load_checkpoint("artist", &checkpoint(None, 1000, true))
    })?;
    assert_eq!(
        p.load_checkpoint("artist")?,
        Some(checkpoint(None, 1000, true))
    );
    assert_eq!(p.load_checkpoint("album")?, None);
    let tx = db.begin_write()?;
    p.set_load_checkpoint("album", &checkpoint(Some("[1]"), 1, false))?;
    tx.rollback();
    assert_eq!(
        p.load_checkpoint("album")?,
        None,
        "rolled back with its batch"
    );

    assert_eq!(p.sync_cursor("orders")?, None);
    assert!(p.sync_batches("orders")?.is_empty());
    assert!(!p.sync_batch_seen("orders", "b1")?);
    write(s, || p.ensure_sync_tables())?;
    write(s, || p.ensure_sync_tables())?;
    assert_eq!(p.sync_cursor("orders")?, None);
    // An engine that cannot store a NaN at all (SQLite keeps a NULL in
    // its place, and so never reads one) keeps a NULL for it here too; one
    // whose real columns refuse it (MySQL) keeps it as its kind and text.
    s.exec(&format!(
        "CREATE TABLE nan_probe (id integer PRIMARY KEY, r {})",
        s.profile.real
    ));
    let probe = db.rows().table_sql("nan_probe", &["id", "r"], 1, None);
    let nan_kept = match db
        .rows()
        .insert_row(&probe, &[int(1), Value::Real(f64::NAN)])
    {
        Err(_) if !s.profile.infinity => true,
        Err(e) => return Err(e),
        Ok(_) => match db.rows().get_row(&probe, &[int(1)])?.expect("the row")[1] {
            Value::Real(r) => r.is_nan(),
            Value::Null => false,
            ref other => panic!("a NaN came back as {other:?}"),
        },
    };
    let stored = |v: &Value| match v {
        Value::Real(r) if r.is_nan() && !nan_kept => Value::Null,
        v => v.clone(),
    };
    let marks = watermarks();
    for (i, m) in marks.iter().enumerate() {
        let first = &marks[(i + 1) % marks.len()];
        let key = format!("[{i}]");
        let batch = format!("b{i}");
        write(s, || {
            p.record_sync_batch(
                "orders",
                &NewBatch {
                    batch: &batch,
                    rows: 10,
                    changed: 2,
                    first_watermark: first,
                    last_watermark: m,
                    last_key: &key,
                },
            )
        })?;
        let c = p.sync_cursor("orders")?.expect("a cursor");
        assert!(
            same(&c.last_watermark, &stored(m)),
            "watermark {m:?} came back as {:?}",
            c.last_watermark
        );
        assert_eq!(c.last_key, key);
    }
    assert!(p.sync_batch_seen("orders", "b3")?);
    assert!(!p.sync_batch_seen("orders", "b99")?);
    assert!(!p.sync_batch_seen("other", "b3")?);
    let batches = p.sync_batches("orders")?;
    assert_eq!(batches.len(), marks.len());
    for (i, b) in batches.iter().enumerate() {
        assert_eq!((b.batch_no, b.rows, b.changed), (i as i64 + 1, 10, 2));
        assert!(
            same(&b.first_watermark, &stored(&marks[(i + 1) % marks.len()])),
            "{:?}",
            b.first_watermark
        );
        assert!(
            same(&b.last_watermark, &stored(&marks[i])),
            "{:?}",
            b.last_watermark
        );
        assert!(is_utc_text(&b.committed_at), "{}", b.committed_at);
    }
    write(s, || {
        p.record_sync_batch(
            "lines",
            &NewBatch {
                batch: "b0",
                rows: 1,
                changed: 1,
                first_watermark: &Value::Null,
                last_watermark: &int(7),
                last_key: "[1]",
            },
        )
    })?;
    assert_eq!(
        p.sync_cursor("lines")?.map(|c| c.last_watermark),
        Some(int(7))
    );
    assert_eq!(
        p.sync_batches("lines")?[0].batch_no,
        1,
        "each table numbers its own"
    );

    s.exec("CREATE TABLE customer (id integer PRIMARY KEY)");
    assert!(p.recorded_source_schema("customer")?.is_empty());
    assert!(p.evolved_columns("customer")?.is_empty());
    let col = |n: &str, ty: &str| SeenColumn {
        name: n.into(),
        decl_type: ty.into(),
    };
    write(s, || {
        p.record_source_schema("customer", &[col("b", "TEXT"), col("a", "INTEGER")])
    })?;
    write(s, || {
        p.record_source_schema("customer", &[col("id", "INTEGER"), col("Name", "TEXT")])
    })?;
    assert_eq!(
        p.recorded_source_schema("customer")?,
        [col("Name", "TEXT"), col("id", "INTEGER")],
        "the last recorded, by column in byte order"
    );
    assert!(p.recorded_source_schema("other")?.is_empty());
    if !s.profile.evolves {
        return Ok(());
    }
    write(s, || {
        db.catalogue()
            .add_column("customer", &column("tier", ColumnKind::Integer))?;
        p.record_evolved("customer", "tier")?;
        db.catalogue().add_column(
            "customer",
            &column(
                "Joined On",
                ColumnKind::Text {
                    max_len: None,
                    fixed: false,
                },
            ),
        )?;
        p.record_evolved("customer", "Joined On")
    })?;
    let names: Vec<String> = db
        .catalogue()
        .table_columns("customer")?
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["id", "tier", "Joined On"]);
    let mut evolved: Vec<(String, String)> = p
        .evolved_columns("customer")?
        .into_iter()
        .map(|e| (e.source_column, e.target_column))
        .collect();
    evolved.sort();
    assert_eq!(
        evolved,
        [("Joined On", "Joined On"), ("tier", "tier")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Capture and JournalLog

const JOURNALED: [&str; 4] = ["id", "v", "r", "b"];

/// Installs the journal of spec table `items` on table `jt` as `journal
/// install` does: control tables, identity, image, triggers and their
/// proof in one transaction; how many triggers it created or replaced.
fn install(s: &Subject) -> Result<usize> {
    let db = &s.db;
    write(s, || {
        db.progress().ensure_control_tables()?;
        if db.identity().get()?.is_none() {
            db.identity()
                .set(&JournalId::from_stored("0123456789abcdef"), &["items"])?;
        }
        db.capture().image_for("items", "jt", &JOURNALED)?;
        let n = db.install_journal("items", "jt", &JOURNALED, 1)?;
        db.prove_journal("items", "jt", &JOURNALED, 1)?;
        Ok(n)
    })
}

/// The journal's triggers record every committed write, from the tool's
/// connection or another, as one entry each with the exact images before
/// and after, in ascending seqs; nothing for a write rolled back or made
/// after the journal is removed. Pages, counts, extent and digest read
/// those entries; the identity and the image describe them.
fn journal_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    s.exec(&format!(
        "CREATE TABLE jt (id integer PRIMARY KEY, v text, r {}, b {})",
        s.profile.real, s.profile.blob
    ));
    let sql = db.rows().table_sql("jt", &JOURNALED, 1, None);
    let row1 = vec![
        int(1),
        text("one"),
        Value::Real(0.1 + 0.2),
        Value::Blob(vec![0, 255]),
    ];
    let row2 = vec![int(2), Value::Null, Value::Null, Value::Null];
    write(s, || {
        db.rows().insert_row(&sql, &row1)?;
        db.rows().insert_row(&sql, &row2)
    })?;
    assert!(!db.identity().installed()?);
    assert_eq!(db.identity().get()?, None);
    assert!(db.journal_tables()?.is_empty());
    assert_eq!(
        db.journal().journal_extent().map(|e| (e.entries, e.last))?,
        (0, 0)
    );
    assert_eq!(db.identity().start()?, 0);

    assert!(install(s)? > 0, "triggers created");
    assert_eq!(install(s)?, 0, "nothing to replace");
    assert!(db.identity().installed()?);
    assert_eq!(db.journal_triggers("jt")?, db.engine().journal_triggers);
    assert!(
        db.stale_journal_triggers("items", "jt", &JOURNALED, 1)?
            .is_empty()
    );
    assert!(
        triggers(db, "jt")?.is_empty(),
        "the journal's are cutover's own"
    );
    assert_eq!(
        db.identity().get()?,
        Some(Identity {
            id: JournalId::from_stored("0123456789abcdef"),
            tables: vec!["items".to_string()]
        })
    );
    let tables = db.journal_tables()?;
    let [image] = &tables[..] else {
        panic!("one image: {tables:?}");
    };
    assert_eq!(
        (image.tbl.as_str(), image.target_table.as_str()),
        ("items", "jt")
    );
    assert_eq!(image.columns, JOURNALED);
    let img = image.img;
    assert!(
        db.capture()
            .journal_image_tables()?
            .contains(&format!("_cutover_journal_{img}")),
        "{:?}",
        db.capture().journal_image_tables()?
    );
    assert_eq!(
        db.journal()
            .journal_extent()
            .map(|e| (e.entries, e.last))?
            .0,
        0,
        "the proof left no entry"
    );
    // The first table whose proof fails, by its index.
    s.exec("CREATE TABLE jt_bare (id integer PRIMARY KEY, v text); INSERT INTO jt_bare VALUES (1, 'x')");
    let proofs = [
        support::seam::journaled("items", "jt", &JOURNALED, 1),
        support::seam::journaled("bare", "jt_bare", &["id", "v"], 1),
    ];
    let tx = db.begin_write()?;
    let proved = db.capture().prove_journals(&proofs);
    tx.rollback();
    assert_eq!(
        proved.err().map(|u| u.table),
        Some(1),
        "a table with no journal"
    );
    assert_eq!(
        db.journal()
            .journal_extent()
            .map(|e| (e.entries, e.last))?
            .0,
        0
    );
    assert_eq!(db.journal().last_journaled("items")?, None);

    // Writes through the tool, in one transaction, and through another
    // connection (a change of key).
    let row3 = vec![
        int(3),
        text("three ☃"),
        Value::Real(-1.5e-300),
        Value::Blob(vec![]),
    ];
    let row1b = vec![int(1), text("uno"), Value::Real(0.1 + 0.2), Value::Null];
    write(s, || {
        db.rows().insert_row(&sql, &row3)?;
        db.rows().update_row(&sql, &[int(1)], &row1b)?;
        db.rows().delete_row(&sql, &[int(2)])
    })?;
    let digest = db.journal().journal_digest()?;
    s.exec("UPDATE jt SET id = 4 WHERE id = 3");
    let mut row4 = row3.clone();
    row4[0] = int(4);
    assert_ne!(db.journal().journal_digest()?, digest);
    assert_eq!(
        db.journal().journal_digest()?,
        db.journal().journal_digest()?
    );

    let entries = db.journal_page(0, i64::MAX, 100)?;
    let seqs: Vec<i64> = entries.iter().map(|e| e.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "ascending seqs: {seqs:?}"
    );
    assert!(seqs[0] > 0);
    let described: Vec<(&str, Option<Row>, Option<Row>)> = entries
        .iter()
        .map(|e| (e.op.as_str(), e.old.clone(), e.new.clone()))
        .collect();
    assert_eq!(
        described,
        [
            ("insert", None, Some(row3.clone())),
            ("update", Some(row1.clone()), Some(row1b.clone())),
            ("delete", Some(row2.clone()), None),
            ("update", Some(row3.clone()), Some(row4.clone())),
        ]
    );
    assert!(entries.iter().all(|e| e.img == img));
    let last = seqs[3];

    assert_eq!(
        db.journal().journal_extent().map(|e| (e.entries, e.last))?,
        (4, last)
    );
    assert_eq!(db.journal().count_between(0, last)?, 4);
    assert_eq!(db.journal().count_between(seqs[0], seqs[2])?, 2);
    let page = |after, upto, limit| -> Result<Vec<i64>> {
        Ok(db
            .journal_page(after, upto, limit)?
            .iter()
            .map(|e| e.seq)
            .collect())
    };
    assert_eq!(page(0, i64::MAX, 2)?, seqs[..2]);
    assert_eq!(page(seqs[1], i64::MAX, 10)?, seqs[2..]);
    assert_eq!(page(0, seqs[1], 10)?, seqs[..2], "up to and including");
    assert!(page(last, i64::MAX, 10)?.is_empty());
    let counted = |v: &[(&str, i64)]| {
        v.iter()
            .map(|(o, n)| (o.to_string(), *n))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        db.journal()
            .journal_counts(SeqRange::ALL)?
            .into_iter()
            .map(|c| (c.tbl, c.op.as_str().to_string(), c.entries))
            .collect::<Vec<_>>(),
        [("delete", 1), ("insert", 1), ("update", 2)].map(|(o, n)| (
            "items".to_string(),
            o.to_string(),
            n
        ))
    );
    assert_eq!(
        db.journal_pending_counts(0, last)?,
        counted(&[("delete", 1), ("insert", 1), ("update", 2)])
    );
    assert_eq!(
        db.journal_pending_counts(seqs[1], last)?,
        counted(&[("delete", 1), ("update", 1)])
    );
    assert_eq!(db.journal().last_journaled("items")?, Some(last));
    assert_eq!(db.journal().last_journaled("other")?, None);

    // A write rolled back leaves no entry and no change to the digest.
    let digest = db.journal().journal_digest()?;
    let tx = db.begin_write()?;
    db.rows()
        .insert_row(&sql, &[int(9), text("gone"), Value::Null, Value::Null])?;
    tx.rollback();
    assert_eq!(
        db.journal().journal_extent().map(|e| (e.entries, e.last))?,
        (4, last)
    );
    assert_eq!(db.journal().journal_digest()?, digest);

    // A new identity after the entries there; the spec's tables recorded.
    write(s, || {
        db.identity()
            .renew(&JournalId::from_stored("fedcba9876543210"), last)?;
        db.identity().set_tables(&["items", "more"])
    })?;
    assert_eq!(db.identity().start()?, last);
    assert_eq!(
        db.identity().get()?,
        Some(Identity {
            id: JournalId::from_stored("fedcba9876543210"),
            tables: vec!["items".to_string(), "more".to_string()]
        })
    );
    assert!(
        write(s, || db
            .identity()
            .set(&JournalId::from_stored("another"), &["items"]))
        .is_err(),
        "one identity"
    );

    // Removed: no triggers, stale, no proof, and writes go unjournaled.
    write(s, || db.capture().remove_journal("jt"))?;
    assert_eq!(db.journal_triggers("jt")?, 0);
    assert!(
        !db.stale_journal_triggers("items", "jt", &JOURNALED, 1)?
            .is_empty()
    );
    assert!(write(s, || db.prove_journal("items", "jt", &JOURNALED, 1)).is_err());
    s.exec("DELETE FROM jt WHERE id = 4");
    assert_eq!(
        db.journal().journal_extent().map(|e| (e.entries, e.last))?,
        (4, last)
    );
    assert_eq!(db.journal_tables()?.len(), 1, "entries and images stay");
    Ok(())
}

// ---------------------------------------------------------------------------
// Fence

const REFUSED: &str = "cutover fence: table fz is read-only";
const GUARDED: &str = "cutover fence: the fence row cannot change";

/// Whether a probe was refused by the fence (another refusal, a key a
/// probe's copy of a row collides with, is the table's own).
fn fenced(probe: &Result<usize, String>) -> bool {
    probe.as_ref().is_err_and(|e| e.contains(REFUSED))
}

/// The fence refuses every write to a fenced table from any connection
/// (and the tool's own probes say so), guards its row, counts its
/// triggers, and comes off whole; the change token moves when another
/// connection changes the database.
fn fence_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    s.exec(
        "CREATE TABLE fz (id integer PRIMARY KEY, v text);
         INSERT INTO fz VALUES (1, 'a'), (2, 'b');
         CREATE TABLE fz_empty (id integer PRIMARY KEY, v text);
         CREATE TABLE fz_free (id integer PRIMARY KEY, v text);
         INSERT INTO fz_free VALUES (1, 'a');",
    );
    write(s, || db.progress().ensure_control_tables())?;
    assert_eq!(db.fence_records().row()?, None);
    assert_eq!(db.fence_triggers("fz")?, 0);
    // MySQL's token counts writes server-wide (docs/engines.md): another
    // test writing elsewhere on the shared server moves it, so stillness
    // is asked of a few pairs of reads, one of which must agree (a token
    // that moves on every read, by itself, fails).
    let still = (0..20).any(|_| {
        let a = db.fence().change_token().expect("a token");
        db.fence().change_token().expect("a token") == a
    });
    assert!(still, "nothing changed, yet the token moved on every read");

    let record = FenceRecord {
        boundary: 42,
        journal_rows: 40,
        fingerprint: "f".repeat(64),
        tables: vec!["fz".to_string()],
        parts: r#"{"version":3,"content":{"fz":"00"}}"#.into(),
        fenced_at: "2024-03-15T13:45:00.123Z".into(),
    };
    write(s, || {
        db.fence().drain_writers(&["fz"])?;
        db.fence().install_fence_triggers("fz_empty", REFUSED)?;
        db.fence().install_fence_triggers("fz", REFUSED)?;
        // Whatever goes by the fence's names is replaced, not doubled.
        db.fence().install_fence_triggers("fz", REFUSED)?;
        db.fence()
            .install_fence_guard(GUARDED, "cutover fence: no schema change")?;
        db.fence_records().set_row(&record)?;
        Ok(())
    })?;
    assert_eq!(db.fence_triggers("fz")?, 3, "insert, update and delete");
    assert_eq!(db.fence_triggers("_cutover_fence")?, 3);
    assert_eq!(db.fence_triggers("fz_free")?, 0);
    assert_eq!(
        db.fence_records().row()?,
        Some(record.clone()),
        "every field as given"
    );
    let functions = db.fence().fence_functions()?;

    // Another connection's writes are refused with the fence's message.
    for write in [
        "INSERT INTO fz VALUES (3, 'c')",
        "UPDATE fz SET v = 'x'",
        "DELETE FROM fz WHERE id = 1",
    ] {
        let refused = s.try_exec(write).expect_err(write);
        assert!(refused.contains(REFUSED), "{write}: {refused}");
    }
    s.exec("UPDATE fz_free SET v = 'free'");
    for write in [
        "UPDATE _cutover_fence SET boundary = 0",
        "DELETE FROM _cutover_fence",
        "INSERT INTO _cutover_fence (id, boundary, journal_rows, fingerprint, tables, parts, fenced_at)
         VALUES (2, 0, 0, '', '[]', '{}', '')",
    ] {
        let refused = s.try_exec(write).expect_err(write);
        assert!(refused.contains(GUARDED), "{write}: {refused}");
    }
    // So are the tool's, and its probes from another connection say so.
    let other = s.open();
    let refused = other.write(|| other.fence_records().set_row(&record));
    let refused = format!("{:#}", refused.expect_err("a write of the fence row"));
    assert!(refused.contains(GUARDED), "{refused}");
    let probes = other.fence().probe_writes("fz")?;
    let names: Vec<&str> = probes.iter().map(|p| p.write).collect();
    for n in ["insert", "update", "delete"] {
        assert!(names.contains(&n), "{names:?}");
    }
    for p in &probes {
        let refused = p.outcome.as_ref().expect_err(p.write);
        assert!(refused.contains(REFUSED), "{}: {refused}", p.write);
    }
    // An empty table: an insert is refused, an update or a delete writes
    // nothing whether refused or not.
    for Probe {
        write: n,
        outcome: r,
    } in other.fence().probe_writes("fz_empty")?
    {
        match n {
            "insert" => assert!(fenced(&r), "{n}: {r:?}"),
            _ => assert!(fenced(&r) || r == Ok(0), "{n}: {r:?}"),
        }
    }
    let free = other.fence().probe_writes("fz_free")?;
    assert!(
        !free.iter().any(|p| fenced(&p.outcome)),
        "a table without the fence is not refused by it: {free:?}"
    );
    let sql = db.rows().table_sql("fz", &["id", "v"], 1, None);
    assert_eq!(
        all(s, &sql)?,
        [vec![int(1), text("a")], vec![int(2), text("b")]]
    );
    assert_eq!(db.fence_records().row()?, Some(record.clone()));

    // Another connection changes the database: the token moves.
    let token = db.fence().change_token()?;
    s.exec("CREATE TABLE fz_new (id integer)");
    assert_ne!(db.fence().change_token()?, token);

    // Lifted as `fence off` lifts it: writable again, nothing left.
    write(s, || {
        db.fence()
            .remove_fence(&["fz", "fz_empty", "no_such_table"], None)
    })?;
    assert_eq!(db.fence_triggers("fz")?, 0);
    assert_eq!(db.fence_triggers("_cutover_fence")?, 0);
    assert_eq!(db.fence_records().row()?, None);
    s.exec("UPDATE fz SET v = 'after' WHERE id = 1");
    let lifted = other.fence().probe_writes("fz")?;
    assert!(!lifted.iter().any(|p| fenced(&p.outcome)), "{lifted:?}");
    assert_eq!(
        db.fence().fence_functions()?,
        functions,
        "fence off keeps them"
    );
    write(s, || db.fence().remove_fence(&["fz"], Some(&functions)))?;
    assert_eq!(db.fence().fence_functions()?, functions, "those kept stay");
    write(s, || db.fence().remove_fence(&["fz"], Some(&[])))?;
    assert!(db.fence().fence_functions()?.is_empty());
    Ok(())
}

// ---------------------------------------------------------------------------
// Fixtures

/// Fixture SQL runs whole; the snapshot lists every table with its rows
/// sorted, leaves out time columns, and moves with the data.
fn fixtures_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    db.fixtures().execute_script(
        "CREATE TABLE fx (id integer PRIMARY KEY, v text, made_at text, at text);
         INSERT INTO fx VALUES (2, 'b', 't1', 't2'), (1, 'a', 't1', 't2');
         CREATE TABLE fx_at (at text);
         INSERT INTO fx_at VALUES ('x');",
    )?;
    let err = db
        .fixtures()
        .execute_script("INSERT INTO fx_nowhere VALUES (1)")
        .unwrap_err();
    assert!(format!("{err:#}").contains(db.location()), "{err:#}");
    assert_eq!(s.int("SELECT count(*) FROM fx"), 2);

    let snap = db.snapshot()?;
    let names: Vec<&str> = snap.iter().map(|(n, _)| n.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    let fx = &snap.iter().find(|(n, _)| n == "fx").expect("fx").1;
    assert_eq!(fx.len(), 2);
    let mut rows = fx.clone();
    rows.sort();
    assert_eq!(*fx, rows, "rows sorted");
    assert!(fx[0].contains("\"a\"") && fx[1].contains("\"b\""), "{fx:?}");
    assert!(
        fx.iter().all(|r| !r.contains("t1") && !r.contains("t2")),
        "{fx:?}"
    );
    assert!(
        !names.contains(&"fx_at"),
        "a table of nothing but times: {names:?}"
    );

    s.exec("UPDATE fx SET made_at = 'later', at = 'later'");
    assert_eq!(db.snapshot()?, snap, "times are left out");
    s.exec("UPDATE fx SET v = 'c' WHERE id = 2");
    assert_ne!(db.snapshot()?, snap);

    write(s, || {
        db.progress().ensure_control_tables()?;
        db.progress().set_load_checkpoint(
            "fx",
            &LoadCheckpoint {
                last_key: None,
                rows: 2,
                done: true,
            },
        )
    })?;
    let snap = db.snapshot()?;
    let load = &snap
        .iter()
        .find(|(n, _)| n == "_cutover_load")
        .expect("control tables")
        .1;
    assert_eq!(load.len(), 1);
    Ok(())
}

// ---------------------------------------------------------------------------
// SideEffects

/// A table's triggers and the foreign-key actions of the tables referring
/// to it are listed (cutover's own triggers are not), with the rows an
/// action would change; holding them lets exactly those decided `Fire` act,
/// within what the role may switch off, and no other session sees it.
fn side_effects_contract(s: &Subject) -> Result<()> {
    let db = &s.db;
    s.exec(&format!(
        "CREATE TABLE se_parent (id integer PRIMARY KEY, v text);
         CREATE TABLE se_child (id integer PRIMARY KEY,
             parent integer REFERENCES se_parent (id) ON DELETE CASCADE);
         CREATE TABLE se_plain (id integer PRIMARY KEY, parent integer REFERENCES se_parent (id));
         {}
         INSERT INTO se_parent VALUES (1, 'a'), (2, 'b');
         INSERT INTO se_child VALUES (10, 1), (11, 1), (12, 2);",
        (s.profile.swallowing_trigger)("se_parent", "se_swallow")
    ));
    if s.profile.fence {
        write(s, || db.fence().install_fence_triggers("se_child", REFUSED))?;
        write(s, || db.fence().remove_fence(&["se_child"], None))?;
        write(s, || {
            db.fence().install_fence_triggers("se_parent", REFUSED)
        })?;
        let with_fence = db.side_effects().side_effects("se_parent")?;
        write(s, || db.fence().remove_fence(&["se_parent"], None))?;
        let effects = db.side_effects().side_effects("se_parent")?;
        assert_eq!(
            with_fence.iter().map(|e| &e.name).collect::<Vec<_>>(),
            effects.iter().map(|e| &e.name).collect::<Vec<_>>(),
            "the fence's triggers are cutover's own"
        );
    }
    let effects = db.side_effects().side_effects("se_parent")?;
    assert_eq!(effects.len(), 2, "{effects:?}");
    let trigger = effects
        .iter()
        .find(|e| e.kind == SideEffectKind::Trigger)
        .expect("the trigger");
    assert_eq!(
        (trigger.name.as_str(), trigger.table.as_str()),
        ("se_swallow", "se_parent")
    );
    assert!(trigger.enabled && trigger.action.is_none());
    assert!(
        trigger.when.contains("BEFORE") && trigger.when.contains("INSERT"),
        "{}",
        trigger.when
    );
    let cascade = effects
        .iter()
        .find(|e| e.kind == SideEffectKind::ForeignKeyAction)
        .expect("the foreign-key action");
    let action = cascade.action.as_ref().expect("what it changes");
    assert_eq!(action.child, "se_child");
    assert_eq!(
        (action.columns.clone(), action.parent_columns.clone()),
        (vec!["parent".to_string()], vec!["id".to_string()])
    );
    assert!(action.on_delete && !action.on_update);
    assert!(db.side_effects().side_effects("se_plain")?.is_empty());

    assert_eq!(
        db.side_effects().referencing_tables("se_parent")?,
        ["se_child", "se_plain"]
    );
    assert!(db.side_effects().referencing_tables("se_child")?.is_empty());
    assert_eq!(
        db.side_effects()
            .referencing_rows(cascade, &[int(1)], 5)?
            .len(),
        2
    );
    assert_eq!(
        db.side_effects()
            .referencing_rows(cascade, &[int(1)], 1)?
            .len(),
        1
    );
    assert!(
        db.side_effects()
            .referencing_rows(cascade, &[int(3)], 5)?
            .is_empty()
    );
    assert!(
        db.side_effects()
            .referencing_rows(trigger, &[int(1)], 5)?
            .is_empty()
    );

    let powers = db.side_effects().powers(&["se_parent", "se_child"])?;
    let parent = db.rows().table_sql("se_parent", &["id", "v"], 1, None);
    let child = db.rows().table_sql("se_child", &["id", "parent"], 1, None);
    // Decided Fire: the trigger acts on the connection's writes; the
    // foreign-key action, decided Suppress, does not.
    db.side_effects().hold_side_effects(
        &[
            (trigger.clone(), Decision::Fire),
            (cascade.clone(), Decision::Suppress),
        ],
        &powers,
    )?;
    write(s, || {
        assert_eq!(
            db.rows().insert_row(&parent, &[int(3), text("swallow")])?,
            usize::from(!s.profile.swallows)
        );
        assert_eq!(db.rows().delete_row(&parent, &[int(2)])?, 1);
        assert_eq!(
            db.rows().get_row(&child, &[int(12)])?,
            Some(vec![int(12), int(2)])
        );
        Ok(())
    })?;
    if powers.triggers_fixed {
        // No trigger can be switched off for one connection: a hold that
        // would is refused before anything is written.
        let refused = db
            .side_effects()
            .hold_side_effects(&[(trigger.clone(), Decision::Suppress)], &powers)
            .expect_err("a trigger cannot be suppressed");
        assert!(refused.to_string().contains("se_swallow"), "{refused:#}");
    } else if !powers.triggers_always_fire {
        db.side_effects()
            .hold_side_effects(&[(trigger.clone(), Decision::Suppress)], &powers)?;
        write(s, || {
            assert_eq!(
                db.rows().insert_row(&parent, &[int(4), text("swallow")])?,
                1
            );
            Ok(())
        })?;
        // Undone before the commit: the application's writes see the
        // trigger as it was.
        s.exec("INSERT INTO se_parent VALUES (5, 'swallow')");
        assert_eq!(s.int("SELECT count(*) FROM se_parent WHERE id = 5"), 0);
    }
    Ok(())
}
