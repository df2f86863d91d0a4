//! The engine interfaces: what cutover asks of a database, cut by concept.
//! An engine is one type that implements all of them ([`Database`]); each
//! engine keeps one file per interface (`src/db/sqlite/<concept>.rs`).
//!
//! The cut follows what the commands need, not what SQL can do: a command
//! that reconciles asks for key-ordered [`Rows`], one that fences asks for a
//! [`Fence`], and none of them sees a statement, a pragma or a driver type.
//! The control tables are split by the run that owns them ([`AppliedSet`]
//! for replay, [`Receipts`] for feeds, [`Progress`] for load and sync), in
//! the spirit of sqlx's `Migrate`: small, each testable on its own.

use anyhow::Result;

use super::types::{
    ColumnInfo, Decision, Durability, FenceRecord, ForeignKey, ForeignKeyViolation, JournalEntry,
    JournalTable, KeyRange, Powers, ReplayVerdict, Security, SegmentDigest, SequenceMark,
    SideEffect, SyncBatch, TableForm, TableSql,
};
use crate::value::{Block, Row, Value};

/// One open connection: transactions, nested transactions for a dry run,
/// and the change token.
pub trait Connection {
    /// What messages call the database (a file's path, a URL without its
    /// password).
    fn location(&self) -> &str;
    /// Whether this process cannot write the database, whatever was asked.
    fn is_read_only(&self) -> Result<bool>;
    /// How the database commits.
    fn durability(&self) -> Result<Durability>;
    /// Opens a write transaction holding the write lock now, so what is read
    /// inside it cannot change before it commits. See [`super::Db::write`].
    fn begin_write(&self) -> Result<()>;
    /// Opens a transaction whose reads all see one snapshot, for a reader
    /// that asks many questions of one state (the gate in digest mode);
    /// ended with [`Connection::rollback`].
    fn begin_read(&self) -> Result<()>;
    fn commit(&self) -> Result<()>;
    /// Rolls back if a transaction is open; safe to call at any time.
    fn rollback(&self);
    /// Opens a nested transaction inside the open one (a dry run's batch).
    fn savepoint(&self) -> Result<()>;
    /// Keeps the nested transaction's work in the open one.
    fn release(&self) -> Result<()>;
    /// Undoes the nested transaction's work and closes it.
    fn rollback_savepoint(&self);
    /// `suspend`: until called again with `false` (or the open write
    /// transaction ends), the writes on these tables neither check nor act
    /// on a foreign key: nothing cascades, nothing is refused half-way (the
    /// rehearsal). An error, before anything is written, when the engine
    /// cannot promise it to this role. `false`: writes go as the
    /// application's would again.
    fn suspend_foreign_keys(&self, tables: &[&str], suspend: bool) -> Result<()>;
    /// The current UTC time as the control tables write it.
    fn now(&self) -> Result<String>;
    /// Damage to the database's storage that the engine's own check finds
    /// (a corrupt page), as a line that names the file and what to do; `None`
    /// when the check passes or the engine has none. Asked before a
    /// difference is blamed on a write: a damaged page reads as other rows.
    fn damage(&self) -> Result<Option<String>>;
    /// How the connection to a server is protected (TLS, where the
    /// password came from); `None` for a file.
    fn security(&self) -> Result<Option<Security>>;
}

/// What the database says about its tables.
pub trait Catalogue {
    /// Columns of a table in declaration order; empty when there is no such table.
    fn table_columns(&self, table: &str) -> Result<Vec<ColumnInfo>>;
    /// The generated columns of a table: `(name, "virtual" | "stored")`.
    fn generated_columns(&self, table: &str) -> Result<Vec<(String, &'static str)>>;
    /// The user tables, for messages that list what is there.
    fn user_tables(&self) -> Result<Vec<String>>;
    /// Whether the table enforces uniqueness of exactly these columns (its
    /// primary key, or a unique index): then an insert that collides can be
    /// trusted to fail rather than to add a second row.
    fn key_is_unique(&self, table: &str, key: &[&str]) -> Result<bool>;
    /// The foreign keys a table declares, in declaration order.
    fn foreign_keys(&self, table: &str) -> Result<Vec<ForeignKey>>;
    /// Rows of `table` that break a foreign key, with their key columns
    /// `key_names` read when the row can be found.
    fn foreign_key_violations(
        &self,
        table: &str,
        key_names: &[&str],
    ) -> Result<Vec<ForeignKeyViolation>>;
    /// The definition of the given tables and of the control tables: every
    /// table, index and trigger, as `(name, definition)` in name order.
    fn schema_of(&self, tables: &[&str]) -> Result<Vec<(String, String)>>;
    /// The id generator's high-water mark of a table, if it has one: on
    /// PostgreSQL the first column's (by position) that a sequence feeds.
    fn sequence(&self, table: &str) -> Result<Option<i64>>;
    /// Moves every id generator that feeds a column of the table so that
    /// its next value is past the largest value of each column it feeds,
    /// and the table's own (the one [`Catalogue::sequence`] reports) past
    /// `to` as well, so it never hands out an id either database already
    /// used. A generator already past is left alone; nothing for a table
    /// without one.
    fn raise_sequence(&self, table: &str, to: i64) -> Result<()>;
    /// Where every id generator feeding a column of these tables stands, for
    /// [`Catalogue::restore_sequences`]. Empty where the generators are
    /// transactional (SQLite's `sqlite_sequence`): a rollback restores them.
    fn sequence_marks(&self, tables: &[&str]) -> Result<Vec<SequenceMark>>;
    /// Puts back each generator of `marks` that stands elsewhere now (a
    /// rolled-back run moved it: PostgreSQL never undoes `nextval` or
    /// `setval`); returns the names of those it put back.
    fn restore_sequences(&self, marks: &[SequenceMark]) -> Result<Vec<String>>;
}

/// Inserts rows straight from blocks.
pub trait BatchInsert {
    /// Inserts one row; `Ok(false)` when a row with the same primary key or
    /// unique key is already there (the caller decides what that means).
    fn insert(&mut self, block: &Block, row: usize) -> Result<bool>;
}

/// Writes one row of a table only if the row stored under its key is
/// exactly the one expected: replay's per-entry write, one statement
/// instead of a read and a write.
pub trait ConditionalWrite {
    /// Writes `after` (`None`: deletes) under the key of the rows given, in
    /// one statement, only if the row stored there is exactly `before`, each
    /// value of the same storage class and bytes (`None`: no row holds the
    /// key). `true`: written; `false`: nothing was written (the row is
    /// another, the database refused or swallowed the write, or the change
    /// moves the key, which this write does not do), and the transaction
    /// goes on.
    fn write_if(&mut self, before: Option<&[Value]>, after: Option<&[Value]>) -> Result<bool>;
}

/// Rows: key-ordered scans and keyed writes. Key order is the engine-neutral
/// order of [`crate::value::CellRef::sql_cmp`], whatever a column's collation.
pub trait Rows {
    /// The statements of `table` reading `columns` in this order, the first
    /// `key_len` the key; scans go in key order, or in the order of column
    /// `first` then the key (sync's watermark). An empty name is a column the
    /// table does not have (a target-only constant): it reads as NULL and is
    /// never written.
    fn table_sql(
        &self,
        table: &str,
        columns: &[&str],
        key_len: usize,
        first: Option<usize>,
    ) -> TableSql;
    fn row_count(&self, sql: &TableSql) -> Result<i64>;
    /// Streams the table in key order (optionally only keys after `after`),
    /// handing rows out in blocks of `block_rows` until `sink` returns `false`.
    /// A scan ordered by a column `first` takes one value as `after`: only
    /// the rows whose `first` is at or past it, in the engine-neutral order.
    fn scan_into(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        block_rows: usize,
        sink: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()>;
    /// The SHA-256 of every row a scan of `sql` returns, as
    /// [`crate::db::Db::digest_rows`] computes it, where the engine reads
    /// each value in place instead of copying the rows into blocks (a
    /// large value is then never copied whole); `None`: the engine has no
    /// such read, and the blocks are hashed.
    fn rows_digest(&self, _sql: &TableSql) -> Result<Option<String>> {
        Ok(None)
    }
    /// The row stored under `key`, if any; a key held by two rows is an error.
    fn get_row(&self, sql: &TableSql, key: &[Value]) -> Result<Option<Row>>;
    /// Inserts a row; returns how many rows the statement inserted (0 when
    /// a trigger swallowed it).
    fn insert_row(&self, sql: &TableSql, row: &[Value]) -> Result<usize>;
    /// A prepared insert for a run of rows from [`Block`]s.
    fn inserter<'a>(&'a self, sql: &TableSql) -> Result<Box<dyn BatchInsert + 'a>>;
    /// Inserts every row of `blocks` in one go, where the engine has a way
    /// faster than row by row (PostgreSQL's binary COPY): `Some(rows)` when
    /// all went in; `None` when it has no such way, or when a row's key was
    /// already there — then nothing was written, the transaction goes on,
    /// and the caller inserts row by row.
    fn bulk_insert(&self, sql: &TableSql, blocks: &[Block]) -> Result<Option<u64>>;
    /// Rewrites the row stored under `old_key` (which differs from the row's
    /// own key when the key changed).
    fn update_row(&self, sql: &TableSql, old_key: &[Value], row: &[Value]) -> Result<usize>;
    fn delete_row(&self, sql: &TableSql, key: &[Value]) -> Result<usize>;
    /// The conditional writes of a table, through statements prepared on
    /// first use and then held ([`ConditionalWrite`]); `None`: the engine
    /// has no such write (or the table none), and the caller reads each row
    /// first.
    fn conditional_writer<'a>(&'a self, _sql: &TableSql) -> Option<Box<dyn ConditionalWrite + 'a>> {
        None
    }
    /// Deletes every row of a table (load `--replace`).
    fn clear_table(&self, table: &str) -> Result<usize>;
    /// The largest integer in a column.
    fn max_integer(&self, table: &str, column: &str) -> Result<Option<i64>>;
    /// Sets columns `names` of the row under `key`.
    fn set_columns(
        &self,
        table: &str,
        key_names: &[&str],
        key: &[Value],
        names: &[&str],
        values: &[Value],
    ) -> Result<usize>;
    /// The engine's [`Digests`], when it can compute them.
    fn digests(&self) -> Option<&dyn Digests> {
        None
    }
}

/// Digests computed inside the database: a table's canonical rows (its
/// values through a [`TableForm`]) hashed and summed per key range, so that
/// the gate compares digests instead of rows and reads rows only where the
/// digests differ. An engine offers it through [`Rows::digests`].
pub trait Digests {
    /// Why the engine cannot digest this table in this form (a type or a
    /// transform it cannot compute exactly, a key that is not unique and
    /// NOT NULL), or `None` when it can.
    fn digest_refusal(&self, sql: &TableSql, form: &TableForm) -> Result<Option<String>>;
    /// About how many rows the table holds (the server's statistics; 0
    /// when it has none), to size the first key ranges.
    fn estimate_rows(&self, sql: &TableSql) -> Result<u64>;
    /// Up to `parts - 1` keys, in key order, that split the rows of `range`
    /// into `parts` runs of nearly equal size. For a whole large table the
    /// keys may come from a sample of it: they still cut it, less evenly.
    fn split_keys(&self, sql: &TableSql, range: &KeyRange, parts: usize) -> Result<Vec<Row>>;
    /// The count, notes, digest and money sums of the rows of each part of
    /// `range` cut at `bounds` (in key order, inside it): `bounds.len() + 1`
    /// segments, each from its lower bound up to but excluding the next
    /// (as [`KeyRange`]), in one pass.
    fn digest_ranges(
        &self,
        sql: &TableSql,
        form: &TableForm,
        range: &KeyRange,
        bounds: &[Row],
    ) -> Result<Vec<SegmentDigest>>;
    /// Streams the rows of `range` in key order, as [`Rows::scan_into`].
    fn scan_range(
        &self,
        sql: &TableSql,
        range: &KeyRange,
        block_rows: usize,
        sink: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()>;
}

/// The source's record of journal entries replayed into it
/// (`_cutover_applied`, per journal identity, as runs of entries that never
/// overlap: one per replay batch, one per entry a feed applies), the
/// columns replay keeps for rows it deletes (`_cutover_kept`), the copy of
/// the target's fence record (`_cutover_fences`) and each replay's verdict
/// (`_cutover_replays`).
pub trait AppliedSet {
    /// Creates the tables; an applied set from a cutover that recorded no
    /// journal identity is refused, one from before runs gains their columns.
    fn ensure_applied_table(&self) -> Result<()>;
    /// `(entries, last seq applied)` of a journal; zeros when absent.
    fn applied_progress(&self, journal: &str) -> Result<(i64, i64)>;
    /// The last seq of a journal applied; 0 before the first.
    fn applied_last(&self, journal: &str) -> Result<i64>;
    /// Whether journal entry `seq` was applied. Called per change inside a
    /// batch, after [`AppliedSet::ensure_applied_table`].
    fn is_applied(&self, journal: &str, seq: i64) -> Result<bool>;
    /// Records each of a delivery's entries as applied at `at`, a run of
    /// one, skipping those already recorded; returns how many were new.
    fn record_applied(
        &self,
        journal: &str,
        seqs: &[i64],
        delivery: &str,
        at: &str,
    ) -> Result<usize>;
    /// Records a batch's entries (every journal entry from the least of
    /// `seqs` to the greatest) as one run; returns how many were new: all,
    /// or none when the run meets one already recorded.
    fn record_applied_all(&self, journal: &str, seqs: &[i64], delivery: &str) -> Result<usize>;
    /// Keeps the columns of a row the spec does not carry, as replay deletes
    /// it (`row` is a JSON object of those columns).
    fn keep_columns(&self, journal: &str, tbl: &str, key: &str, row: &str, seq: i64) -> Result<()>;
    /// Takes back the kept columns of a key that replay inserts again.
    fn take_kept_columns(&self, journal: &str, tbl: &str, key: &str) -> Result<Option<String>>;
    /// Keeps a copy of the target's fence record of `journal` (making its
    /// table first); a copy of the same fence (same `fenced_at`) already
    /// kept is replaced and counts again.
    fn record_fence_copy(&self, journal: &str, fence: &FenceRecord) -> Result<()>;
    /// The latest copy of `journal`'s fence record not yet lifted; `None`
    /// when none is kept (or the tables were never made).
    fn fence_copy(&self, journal: &str) -> Result<Option<FenceRecord>>;
    /// Marks every copy of `journal`'s fence record lifted at `at`.
    fn lift_fence_copy(&self, journal: &str, at: &str) -> Result<()>;
    /// Records how a replay ended (making its table first).
    fn record_replay_verdict(&self, verdict: &ReplayVerdict) -> Result<()>;
    /// The last replay verdict of `journal`, if a replay recorded one.
    fn last_replay_verdict(&self, journal: &str) -> Result<Option<ReplayVerdict>>;
}

/// A feed's receipts (`_cutover_deliveries`) and the revision evidence of
/// its records (`_cutover_revisions`), in the database the feed applies to.
pub trait Receipts {
    fn ensure_apply_tables(&self) -> Result<()>;
    /// The digest of a committed delivery, if there is one.
    fn receipt_digest(&self, feed: &str, delivery: &str) -> Result<Option<String>>;
    /// A feed's checkpoint: the last position committed, 0 before the first.
    fn feed_checkpoint(&self, feed: &str) -> Result<i64>;
    #[allow(
        clippy::too_many_arguments,
        reason = "one receipt row, column by column"
    )]
    fn insert_receipt(
        &self,
        feed: &str,
        delivery: &str,
        digest: &str,
        first: i64,
        last: i64,
        written: u64,
        duplicate: u64,
        stale: u64,
    ) -> Result<()>;
    /// The evidence row of one revision of a record: `(kind, row JSON)`.
    fn evidence(
        &self,
        tbl: &str,
        key: &str,
        revision: i64,
    ) -> Result<Option<(String, Option<String>)>>;
    /// The newest tombstone revision of a record, if it was deleted.
    fn tombstone(&self, tbl: &str, key: &str) -> Result<Option<i64>>;
    #[allow(
        clippy::too_many_arguments,
        reason = "one evidence row, column by column"
    )]
    fn record_evidence(
        &self,
        tbl: &str,
        key: &str,
        revision: i64,
        kind: &str,
        row: Option<&str>,
        delivery: &str,
        position: i64,
    ) -> Result<()>;
}

/// How far load and sync got: the load checkpoint, the sync cursor and its
/// provenance, the source schema sync last saw and the columns it added.
pub trait Progress {
    /// Waits, bounded, until no other session of cutover writes these
    /// tables (or the load checkpoint): a killed run's session may still be
    /// ending on the server, its transaction not yet rolled back (or, killed
    /// while committing, committed). `waiting` hears, once, which sessions
    /// are waited for; an error names them when they outlast the wait.
    fn await_other_runs(&self, tables: &[&str], waiting: &mut dyn FnMut(&str)) -> Result<()>;
    /// Creates the target's control tables (journal identity, fence, load).
    fn ensure_control_tables(&self) -> Result<()>;
    fn ensure_sync_tables(&self) -> Result<()>;
    /// The load checkpoint of a table: `(last key as JSON, rows, done)`.
    fn load_checkpoint(&self, tbl: &str) -> Result<Option<(Option<String>, i64, bool)>>;
    fn set_load_checkpoint(
        &self,
        tbl: &str,
        last_key: Option<&str>,
        rows: i64,
        done: bool,
    ) -> Result<()>;
    /// The sync cursor of a table: `(last watermark, last key JSON)`.
    fn sync_cursor(&self, tbl: &str) -> Result<Option<(Value, String)>>;
    /// Records a committed sync batch, which advances the cursor.
    #[allow(
        clippy::too_many_arguments,
        reason = "one cursor row, column by column"
    )]
    fn record_sync_batch(
        &self,
        tbl: &str,
        batch: &str,
        rows: u64,
        changed: u64,
        first_watermark: &Value,
        last_watermark: &Value,
        last_key: &str,
    ) -> Result<()>;
    /// Whether a batch with this content digest was committed for a table.
    fn sync_batch_seen(&self, tbl: &str, batch: &str) -> Result<bool>;
    /// Every committed sync batch of a table (provenance).
    fn sync_batches(&self, tbl: &str) -> Result<Vec<SyncBatch>>;
    /// The source column types recorded by the last sync: `(column, type)`.
    fn recorded_source_schema(&self, tbl: &str) -> Result<Vec<(String, String)>>;
    fn record_source_schema(&self, tbl: &str, cols: &[ColumnInfo]) -> Result<()>;
    /// Columns `sync --evolve` added: `(source column, target column)`.
    fn evolved_columns(&self, tbl: &str) -> Result<Vec<(String, String)>>;
    /// Adds a column to a target table and records it as evolved.
    fn evolve_column(&self, tbl: &str, table: &str, column: &str, decl_type: &str) -> Result<()>;
}

/// Change capture, installing side: the journal's triggers and image
/// tables, its identity, and the proof that a write is journaled.
pub trait Capture {
    /// Whether the journal was installed.
    fn has_journal(&self) -> Result<bool>;
    /// The image id of spec table `name` with these target columns: the
    /// existing one when the columns are the same, else a new one. Every
    /// table's image must exist before any trigger is written.
    fn image_for(&self, name: &str, table: &str, columns: &[&str]) -> Result<i64>;
    /// Installs (or replaces, when they differ) the journal triggers on one
    /// table; returns how many were created or replaced.
    fn install_journal(
        &self,
        name: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<usize>;
    /// Writes through a table's journal triggers in a nested transaction
    /// that is always rolled back, and checks the entries they write.
    fn prove_journal(
        &self,
        name: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<()>;
    /// `prove_journal` for each of `tables` (`(name, table, columns,
    /// key_len)`), in order; the first that fails, by its index. An engine
    /// may run them in one nested transaction rolled back at the end.
    fn prove_journals(
        &self,
        tables: &[(&str, &str, Vec<&str>, usize)],
    ) -> Result<(), (usize, anyhow::Error)> {
        for (i, (name, table, columns, key_len)) in tables.iter().enumerate() {
            self.prove_journal(name, table, columns, *key_len)
                .map_err(|e| (i, e))?;
        }
        Ok(())
    }
    /// The names of a table's journal triggers that are missing, differ from
    /// what the spec needs now, or fire in the wrong order.
    fn stale_journal_triggers(
        &self,
        name: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<Vec<String>>;
    fn remove_journal(&self, table: &str) -> Result<()>;
    /// How many of a table's journal triggers exist.
    fn journal_triggers(&self, table: &str) -> Result<usize>;
    /// How many journal triggers a journaled table has on this engine.
    fn journal_triggers_per_table(&self) -> usize;
    /// The journal's own tables, which the fence guards like the journal.
    fn journal_image_tables(&self) -> Result<Vec<String>>;
    /// The journal's identity and its tables, once installed.
    fn journal_id(&self) -> Result<Option<(String, Vec<String>)>>;
    /// Gives the journal an identity (`journal` is fresh randomness).
    fn set_journal_id(&self, journal: &str, tables: &[&str]) -> Result<()>;
    /// Gives the journal a new identity whose entries come after `after_seq`.
    fn renew_journal_id(&self, journal: &str, after_seq: i64) -> Result<()>;
    /// Records the spec's tables under the journal's identity.
    fn set_journal_tables(&self, tables: &[&str]) -> Result<()>;
}

/// How much of the journal [`JournalLog::journal_run`] reads at once, and
/// how: a reader holds no more than a page, so a page of large values is a
/// short one.
pub struct RunShape<'a> {
    /// At most this many entries.
    pub limit: usize,
    /// The page ends with the entry whose images bring it to this many
    /// bytes (a page holds at least one entry, whatever its size).
    pub bytes: usize,
    /// Whether the large values ([`crate::value::LARGE`] bytes on) of
    /// image `img`, column `col` (in the image's own column order), of the
    /// before-image (`false`) or the after-image (`true`), are read as
    /// their digests: for a reader that only compares them.
    pub digest: &'a dyn Fn(i64, usize, bool) -> bool,
}

/// Change capture, reading side: the journal's entries.
pub trait JournalLog {
    /// Every journaled table (and earlier column lists of the same table).
    fn journal_tables(&self) -> Result<Vec<JournalTable>>;
    /// `(tbl, op, entries)`, in table then op order.
    fn journal_counts(&self) -> Result<Vec<(String, String, i64)>>;
    /// `(entries, max seq)`.
    fn journal_extent(&self) -> Result<(i64, i64)>;
    /// Entries with `after < seq <= upto`.
    fn journal_count_between(&self, after: i64, upto: i64) -> Result<i64>;
    /// Entries with `after < seq <= upto`, at most `limit`, in seq order.
    fn journal_page(&self, after: i64, upto: i64, limit: usize) -> Result<Vec<JournalEntry>>;
    /// Entries with `after < seq <= upto` in seq order, as `journal_page`,
    /// read to `shape`: at most `shape.limit`, fewer once their images hold
    /// `shape.bytes`, and the large values `shape.digest` names read as
    /// their digests. `true` beside them when more may follow before `upto`
    /// (the page was cut). An engine without budgets reads a plain page.
    fn journal_run(
        &self,
        after: i64,
        upto: i64,
        shape: &RunShape<'_>,
    ) -> Result<(Vec<JournalEntry>, bool)> {
        let page = self.journal_page(after, upto, shape.limit)?;
        let more = page.len() >= shape.limit;
        Ok((page, more))
    }
    /// Entries with `after < seq <= upto` counted per op.
    fn journal_pending_counts(&self, after: i64, upto: i64) -> Result<Vec<(String, i64)>>;
    /// A digest of every entry and image, exact to each value's kind.
    fn journal_digest(&self) -> Result<String>;
    /// The seq the current identity's entries come after.
    fn journal_start(&self) -> Result<i64>;
    /// The last seq journaled for spec table `name`, under any column list.
    fn last_journaled(&self, name: &str) -> Result<Option<i64>>;
}

/// The write fence: triggers that refuse every write, the guarded fence
/// row, and probes that prove it from another connection.
pub trait Fence {
    /// Called first in the write transaction that installs the fence, before
    /// anything is read: waits until no transaction is writing `tables` and
    /// keeps new writers out until the commit, so everything read afterwards
    /// includes every write committed before the fence and none after it.
    fn drain_writers(&self, tables: &[&str]) -> Result<()>;
    /// A token that changes whenever another connection, in any process,
    /// commits something that could change a fenced table: replay checks it
    /// before each batch and reads the whole fingerprint only when it moved.
    fn change_token(&self) -> Result<i64>;
    /// Installs the fence triggers on one table; whatever goes by their names
    /// is replaced, so a planted trigger cannot pass for the fence.
    fn install_fence_triggers(&self, table: &str, message: &str) -> Result<()>;
    /// Guards the fence row (`row_message`): once written it cannot be
    /// changed or deleted; and, where the engine and the role allow it,
    /// refuses every schema change to cutover's own tables (`ddl_message`)
    /// until [`Fence::remove_fence`]. What guards the schema (or why nothing
    /// can), for the report; `None` when the engine has no such guard.
    fn install_fence_guard(&self, row_message: &str, ddl_message: &str) -> Result<Option<String>>;
    /// Takes the fence off, inside the caller's write transaction: the
    /// schema guard first (it refuses changes to cutover's tables), then
    /// the fence's triggers on each of `tables` (nothing for a table that is
    /// not there) and the fence row's guard, then the row. `Some(keep)`:
    /// also drops the functions the fence's triggers call but those in
    /// `keep` (a `fence on` that could not stand puts back what it found,
    /// [`Fence::fence_functions`]).
    fn remove_fence(&self, tables: &[&str], keep_functions: Option<&[String]>) -> Result<()>;
    /// How many of a table's fence triggers exist.
    fn fence_triggers(&self, table: &str) -> Result<usize>;
    /// The fence row, if the database is fenced.
    fn fence_row(&self) -> Result<Option<FenceRecord>>;
    /// Writes the fence row, every field as given (`fenced_at` too: the
    /// fingerprint covers it).
    fn set_fence_row(&self, record: &FenceRecord) -> Result<()>;
    /// Tries an insert, an update and a delete on `table`, each in a
    /// transaction that is always rolled back: `(statement, Ok(rows
    /// written) | Err(refusal))`.
    fn probe_writes(&self, table: &str) -> Result<Vec<(&'static str, Result<usize, String>)>>;
    /// The functions the fence's triggers call that exist now, by name: a
    /// `fence on` that cannot stand drops those it created and keeps these.
    /// None on an engine whose triggers call no function of their own.
    fn fence_functions(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
}

/// What drills need of a database they built: run fixture SQL, and compare
/// the whole database before and after.
pub trait Fixtures {
    /// Runs fixture SQL (drill set-up and the application's writes).
    fn execute_script(&self, sql: &str) -> Result<()>;
    /// Every table, each as its sorted rows in a literal form, leaving out
    /// timestamp columns (`at`, `*_at`).
    fn snapshot(&self) -> Result<Vec<(String, Vec<String>)>>;
}

/// What a source does by itself when replay writes a row (its triggers,
/// rules and foreign-key actions), what this connection's role can switch
/// off, and replay's hold on them.
pub trait SideEffects {
    /// The triggers, rules and foreign-key actions (from any table) that a
    /// write to `table` sets off; not cutover's own.
    fn side_effects(&self, table: &str) -> Result<Vec<SideEffect>>;
    /// What this connection's role may switch off on `tables`.
    fn powers(&self, tables: &[&str]) -> Result<Powers>;
    /// From now on every write transaction of this connection lets exactly
    /// the side effects decided `Fire` act, within what `powers` allows;
    /// undone inside the transaction before it commits, so no other session
    /// sees a change.
    fn hold_side_effects(&self, decided: &[(SideEffect, Decision)], powers: &Powers) -> Result<()>;
    /// Up to `limit` rows (as JSON text) that a foreign-key action would
    /// change when the row of `effect.table` holding `parent` (its
    /// referenced columns, in source form) is deleted or rekeyed.
    fn referencing_rows(
        &self,
        effect: &SideEffect,
        parent: &[Value],
        limit: usize,
    ) -> Result<Vec<String>>;
    /// The tables (in this database) that declare a foreign key to `table`.
    fn referencing_tables(&self, table: &str) -> Result<Vec<String>>;
}

/// An engine: every interface, on one connection that can move to a reader
/// thread.
pub trait Database:
    Connection
    + Catalogue
    + Rows
    + AppliedSet
    + Receipts
    + Progress
    + Capture
    + JournalLog
    + Fence
    + Fixtures
    + SideEffects
    + Send
{
}
