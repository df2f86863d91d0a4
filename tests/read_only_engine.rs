//! What a source-only engine costs: `Reading` implements the read side
//! alone (`Connection`, `Catalogue`, `Rows`: the methods without a default,
//! each handed to a SQLite database here, or refused where it would write),
//! and nothing of the write side. Opened with `Db::read_only`, it is a source
//! the gate reconciles exactly as it reconciles the same file opened by the
//! SQLite engine, and everything that would write it is refused before a
//! row changes.

mod support;

use anyhow::{Result, bail};
use cutover::db::transaction::Step;
use cutover::db::{
    Access, BatchInsert, Catalogue, ColumnInfo, Connection, Count, Db, Facts, ForeignKey,
    ForeignKeyViolation, Generated, Holding, OwnTriggers, RowWrite, Rows, SchemaPart, SequenceMark,
    TableSql,
};
use cutover::spec::Side;
use cutover::value::{Block, Row, Value};

use support::Dir;

/// A source-only engine, reading a database through another connection.
struct Reading(Db);

fn read_only<T>() -> Result<T> {
    bail!("this engine only reads")
}

impl Connection for Reading {
    fn facts(&self) -> Result<Facts> {
        self.0.connection().facts()
    }

    fn transaction(&self, step: Step) -> Result<()> {
        match step {
            Step::BeginRead | Step::Rollback => self.0.connection().transaction(step),
            _ => read_only(),
        }
    }

    fn suspend_foreign_keys(&self, _tables: &[&str], _suspend: bool) -> Result<()> {
        read_only()
    }

    fn damage(&self) -> Result<Option<String>> {
        self.0.connection().damage()
    }

    fn await_other_runs(&self, _tables: &[&str], _waiting: &mut dyn FnMut(&str)) -> Result<()> {
        Ok(())
    }
}

impl Catalogue for Reading {
    fn table_columns(&self, table: &str) -> Result<Vec<ColumnInfo>> {
        self.0.catalogue().table_columns(table)
    }

    fn generated_columns(&self, table: &str) -> Result<Vec<Generated>> {
        self.0.catalogue().generated_columns(table)
    }

    fn tables(&self, own: bool) -> Result<Vec<String>> {
        self.0.catalogue().tables(own)
    }

    fn key_is_unique(&self, table: &str, key: &[&str]) -> Result<bool> {
        self.0.catalogue().key_is_unique(table, key)
    }

    fn foreign_keys(&self, table: &str) -> Result<Vec<ForeignKey>> {
        self.0.catalogue().foreign_keys(table)
    }

    fn foreign_key_violations(
        &self,
        table: &str,
        key_names: &[&str],
    ) -> Result<Vec<ForeignKeyViolation>> {
        self.0.catalogue().foreign_key_violations(table, key_names)
    }

    fn schema_of(&self, tables: &[&str]) -> Result<Vec<SchemaPart>> {
        self.0.catalogue().schema_of(tables)
    }

    fn raise_sequence(&self, _table: &str, _to: i64) -> Result<()> {
        read_only()
    }

    fn sequence_marks(&self, tables: &[&str]) -> Result<Vec<SequenceMark>> {
        self.0.catalogue().sequence_marks(tables)
    }

    fn restore_sequences(&self, _marks: &[SequenceMark]) -> Result<Vec<String>> {
        read_only()
    }

    fn add_column(&self, _table: &str, _from: &ColumnInfo) -> Result<()> {
        read_only()
    }

    fn own_triggers(&self, table: &str) -> Result<OwnTriggers> {
        self.0.catalogue().own_triggers(table)
    }

    fn holding<'a>(&'a self, sql: &TableSql, server: bool) -> Result<Holding<'a>> {
        self.0.catalogue().holding(sql, server)
    }
}

impl Rows for Reading {
    fn table_sql(
        &self,
        table: &str,
        columns: &[&str],
        key_len: usize,
        first: Option<usize>,
    ) -> TableSql {
        self.0.rows().table_sql(table, columns, key_len, first)
    }

    fn row_count(&self, sql: &TableSql, count: Count) -> Result<i64> {
        self.0.rows().row_count(sql, count)
    }

    fn scan_into(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        block_rows: usize,
        sink: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        self.0.rows().scan_into(sql, after, block_rows, sink)
    }

    fn get_row(&self, sql: &TableSql, key: &[Value]) -> Result<Option<Row>> {
        self.0.rows().get_row(sql, key)
    }

    fn write_row(&self, _sql: &TableSql, _write: RowWrite<'_>) -> Result<usize> {
        read_only()
    }

    fn inserter<'a>(&'a self, _sql: &TableSql) -> Result<Box<dyn BatchInsert + 'a>> {
        read_only()
    }

    fn bulk_insert(&self, _sql: &TableSql, _blocks: &[Block]) -> Result<Option<u64>> {
        read_only()
    }

    fn max_integer(&self, table: &str, column: &str) -> Result<Option<i64>> {
        self.0.rows().max_integer(table, column)
    }
}

/// The running example's source opened through `Reading`.
fn reading_source(d: &Dir) -> Db {
    let path = d.path().join("source.db");
    let inner = Db::open_file(&path, Access::Read, Side::Source).expect("the source");
    Db::read_only(
        Reading(inner),
        &cutover::db::engines::SQLITE,
        path.display().to_string(),
    )
}

#[test]
fn a_source_only_engine_is_reconciled_as_its_database_is() {
    let d = Dir::orders_loaded("read_only_gate");
    let spec = cutover::spec::load(&d.path().join("spec.toml")).unwrap();
    let mut target = Db::open(&spec.target, Access::Read, Side::Target).unwrap();
    let mut plain = Db::open(&spec.source, Access::Read, Side::Source).unwrap();
    let through_sqlite = cutover::reconcile::reconcile(&spec, &mut plain, &mut target, 10).unwrap();
    let mut source = reading_source(&d);
    let through_reading =
        cutover::reconcile::reconcile(&spec, &mut source, &mut target, 10).unwrap();
    assert!(through_reading.clean(), "{through_reading:?}");
    assert_eq!(
        serde_json::to_value(&through_reading.tables).unwrap(),
        serde_json::to_value(&through_sqlite.tables).unwrap()
    );
    // A difference is found through it as through the engine that writes.
    d.exec(
        "target.db",
        "UPDATE orders SET cents = cents + 1 WHERE id = 102",
    );
    let mut target = Db::open(&spec.target, Access::Read, Side::Target).unwrap();
    let found = cutover::reconcile::reconcile(&spec, &mut source, &mut target, 10).unwrap();
    assert!(!found.clean());
    assert_eq!(found.diffs_found_blocking(), 1);
}

#[test]
fn everything_that_would_write_a_source_only_engine_is_refused_and_nothing_changes() {
    let d = Dir::orders_loaded("read_only_refusals");
    let before = d.dump("source.db", "orders");
    let source = reading_source(&d);
    let refusals = [
        source
            .fixtures()
            .execute_script("DELETE FROM orders")
            .unwrap_err(),
        source.applied_set().ensure().unwrap_err(),
        source.fence().change_token().unwrap_err(),
        source.journal().journal_extent().unwrap_err(),
        source.side_effects().side_effects("orders").unwrap_err(),
        source.begin_write().err().expect("no write transaction"),
    ];
    for e in &refusals {
        let text = format!("{e:#}");
        assert!(
            text.contains("read-only") || text.contains("only reads"),
            "{text}"
        );
    }
    assert!(
        format!("{:#}", refusals[0]).contains("source.db"),
        "the refusal names the database: {:#}",
        refusals[0]
    );
    drop(source);
    assert_eq!(d.dump("source.db", "orders"), before);
}
