//! The values the engine interfaces trade in: what a catalogue describes,
//! the statements of a table, control-table rows and journal entries. None of
//! them belongs to one engine.

use crate::value::{Row, Value};

/// Whether a connection will write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// A column as the catalogue describes it.
#[derive(Clone, Debug)]
pub struct ColumnInfo {
    pub name: String,
    /// The type as the engine declares it (`INTEGER`, `numeric(12,2)`, …).
    pub decl_type: String,
    /// Position in the primary key (1-based), 0 when not part of it.
    pub pk: i64,
}

/// A foreign key: `(parent table, [(column, parent column)])`.
pub type ForeignKey = (String, Vec<(String, Option<String>)>);

/// A row that breaks a foreign key: `(child table, the row's key columns
/// when they could be read, parent table)`.
pub type ForeignKeyViolation = (String, Option<Row>, String);

/// A committed sync batch: `(batch_no, rows, changed, first watermark,
/// last watermark, committed_at)`.
pub type SyncBatch = (i64, i64, i64, Value, Value, String);

/// How a database commits, in its engine's own settings (SQLite:
/// `journal_mode`, `synchronous`; PostgreSQL: `synchronous_commit`,
/// `fsync`, `wal_level`), as `(name, value)`: reported by `check`; writers
/// refuse the settings under which a crash could leave half a batch behind.
#[derive(Clone, Debug)]
pub struct Durability {
    pub settings: Vec<(&'static str, String)>,
}

/// How a connection to a server is protected, for `check`.
#[derive(Clone, Debug)]
pub struct Security {
    /// Whether and how the session is encrypted, as the server sees it,
    /// and what was checked of its certificate.
    pub transport: String,
    /// What the operator should fix (a password in the spec's URL).
    pub warnings: Vec<String>,
}

/// Where an id sequence stood: its name (as the engine quotes it), the
/// last value it handed out or was set to, and whether that value was
/// handed out (`false`: the next value is `last_value` itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceMark {
    pub name: String,
    pub last_value: i64,
    pub is_called: bool,
}

/// The row of `_cutover_fence`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenceRecord {
    pub boundary: i64,
    pub journal_rows: i64,
    pub fingerprint: String,
    /// JSON list of the fenced tables.
    pub tables: String,
    /// JSON of the fingerprint's parts.
    pub parts: String,
    pub fenced_at: String,
}

/// How a replay ended, as the source records it (`_cutover_replays`): the
/// last one of a journal says whether the rollback reconciled clean.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReplayVerdict {
    /// The journal identity replayed.
    pub journal: String,
    /// The fence's boundary the replay went up to.
    pub boundary: i64,
    /// Every entry applied and the source reconciled clean with the target.
    pub passed: bool,
    /// What failed, in a line (empty on a pass).
    pub detail: String,
    /// When the replay ended (UTC, as the control tables write times).
    pub at: String,
}

/// One journal entry with its images, in the column order of its table's
/// image (see [`JournalTable::columns`]).
#[derive(Clone, Debug)]
pub struct JournalEntry {
    pub seq: i64,
    pub img: i64,
    pub op: String,
    pub old: Option<Row>,
    pub new: Option<Row>,
}

/// A journaled table as the journal recorded it.
#[derive(Clone, Debug)]
pub struct JournalTable {
    pub img: i64,
    /// The spec's name of the table.
    pub tbl: String,
    pub target_table: String,
    /// The target columns the images hold, in order.
    pub columns: Vec<String>,
}

/// The statements for one table and one column order, written once per run
/// by the engine that runs them ([`crate::db::Rows::table_sql`]). Callers
/// read `table` and `key_len`; the texts are the engine's own.
#[derive(Clone, Debug)]
pub struct TableSql {
    pub table: String,
    pub key_len: usize,
    pub(crate) width: usize,
    pub(crate) scan: String,
    pub(crate) scan_after: String,
    pub(crate) select_by_key: String,
    pub(crate) insert: String,
    pub(crate) update: String,
    /// The update of a row whose key stays: the other columns only.
    pub(crate) update_values: Option<String>,
    /// The columns the table has, when some of the columns asked for are
    /// not its own (target-only constants): only these are written.
    pub(crate) real: Option<Vec<usize>>,
    pub(crate) delete: String,
    pub(crate) count: String,
    /// The writes that happen only on the row expected, where the engine
    /// has them ([`crate::db::ConditionalWrite`]).
    pub(crate) conditional: Option<Conditional>,
    /// Per column, whether a scan or `get_row` may read its large values
    /// as digests ([`TableSql::digesting`]); empty: none.
    pub(crate) digested: Vec<bool>,
}

/// An insert that does nothing when the key is taken, and an update and a
/// delete that do nothing unless the stored row is exactly the one given.
#[derive(Clone, Debug)]
pub(crate) struct Conditional {
    pub(crate) insert: String,
    pub(crate) update: String,
    pub(crate) delete: String,
}

impl TableSql {
    /// How many columns each row read has.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The same statements, with the large values ([`crate::value::LARGE`]
    /// bytes on) of `columns` read as their digests
    /// ([`crate::value::Digested`]) by scans and [`crate::db::Rows::get_row`]:
    /// for a reader that only compares those columns, so that it never
    /// copies a large value. An engine may still read them whole.
    pub fn digesting(mut self, columns: impl IntoIterator<Item = usize>) -> TableSql {
        self.digested = vec![false; self.width];
        for c in columns {
            if let Some(d) = self.digested.get_mut(c) {
                *d = true;
            }
        }
        self
    }

    /// Whether column `c`'s large values are read as digests.
    #[inline]
    pub(crate) fn digests(&self, c: usize) -> bool {
        self.digested.get(c).copied().unwrap_or(false)
    }

    /// The values of `row` from column `from` on that the table has (all of
    /// them, unless some are target-only constants).
    pub(crate) fn written<'r>(
        &'r self,
        row: &'r [Value],
        from: usize,
    ) -> impl Iterator<Item = &'r Value> {
        row.iter()
            .enumerate()
            .skip(from)
            .filter(|(i, _)| self.real.as_ref().is_none_or(|r| r.contains(i)))
            .map(|(_, v)| v)
    }

    /// The block columns an insert binds, in order.
    pub(crate) fn written_columns(&self) -> Vec<usize> {
        self.real
            .clone()
            .unwrap_or_else(|| (0..self.width).collect())
    }
}

/// A range of keys in cutover's key order ([`crate::value::CellRef::sql_cmp`]):
/// the keys from `from` on (all of them without it) up to but excluding
/// `before` (to the end without it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyRange {
    pub from: Option<Row>,
    pub before: Option<Row>,
}

/// How one column's canonical value is made from the value stored, as an
/// engine can compute it itself: the forward transforms of the spec (see
/// `crate::transform::Transform`) and the checks it can run.
#[derive(Clone, Debug, PartialEq)]
pub enum CellForm {
    /// The value as stored.
    Copy,
    /// Decimal text, an integer or a real, to integer minor units at this scale.
    DecimalToMinor(u32),
    /// Text codes to words; anything else is invalid.
    Map(Vec<(String, String)>),
    /// A constant in place of a column the table does not have.
    Constant(Value),
}

/// One column of a [`TableForm`].
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnForm {
    pub form: CellForm,
    /// Check: the canonical value is an integer.
    pub integer: bool,
    /// Check: the canonical value is an integer of at least this.
    pub min: Option<i64>,
    /// Check: the canonical value is one of these texts.
    pub values: Option<Vec<String>>,
}

/// A table's canonical form as an engine computes it: one [`ColumnForm`]
/// per column of its [`TableSql`], the money columns whose integer values
/// are summed, and the column those sums are grouped by.
#[derive(Clone, Debug, PartialEq)]
pub struct TableForm {
    pub columns: Vec<ColumnForm>,
    pub money: Vec<usize>,
    pub currency: Option<usize>,
}

/// The money sums of a segment's rows holding one currency value.
#[derive(Clone, Debug, PartialEq)]
pub struct MoneyGroup {
    /// The canonical currency value (NULL without a currency column).
    pub currency: Value,
    /// Per money column of the [`TableForm`]: how many rows hold an
    /// integer there, and their sum.
    pub sums: Vec<(u64, i128)>,
}

/// What an engine says of the canonical rows of a key range.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SegmentDigest {
    pub rows: u64,
    /// Rows that are invalid or not canonical (a note in the merge).
    pub notes: u64,
    /// A digest of the set of canonical rows, each value with its kind and
    /// column (keys are unique, so the set is the range's content).
    pub digest: Vec<u8>,
    pub money: Vec<MoneyGroup>,
}

/// Something a source database does by itself when a row of a table is
/// written: what replay must either let happen or switch off.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SideEffect {
    /// The table whose writes set it off (the source table's name).
    pub table: String,
    pub kind: SideEffectKind,
    /// The trigger's, rule's or foreign key's name.
    pub name: String,
    /// When it acts, in the engine's words (`BEFORE INSERT OR UPDATE FOR
    /// EACH ROW`, `ON DELETE CASCADE from rental (customer_id)`).
    pub when: String,
    /// The columns of the written row it sets; `None` when the engine
    /// cannot tell (a trigger in C or another language).
    pub writes: Option<Vec<String>>,
    /// An insert rule that sends the row into another table (a partition
    /// of an inheritance tree): the row is then read back through `table`.
    pub routes: bool,
    /// Whether it acts at all when the application writes (a disabled
    /// trigger never does, and replay leaves it so).
    pub enabled: bool,
    /// For a foreign-key action: the table whose rows it changes, its
    /// columns, and the referenced columns of `table`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<ForeignKeyAction>,
}

/// What a side effect is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SideEffectKind {
    Trigger,
    Rule,
    ForeignKeyAction,
}

impl std::fmt::Display for SideEffectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SideEffectKind::Trigger => "trigger",
            SideEffectKind::Rule => "rule",
            SideEffectKind::ForeignKeyAction => "foreign-key action",
        })
    }
}

/// A foreign key whose action (`CASCADE`, `SET NULL`, `SET DEFAULT`) changes
/// rows of `child` when a row of the referenced table is deleted or its
/// referenced columns change.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ForeignKeyAction {
    pub child: String,
    pub columns: Vec<String>,
    pub parent_columns: Vec<String>,
    /// Whether it acts on a delete, and on an update of the referenced columns.
    pub on_delete: bool,
    pub on_update: bool,
}

pub use crate::spec::Decision;

/// What the connection's role can do about side effects while it writes.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Powers {
    /// The role's name, for messages.
    pub role: String,
    /// It can switch off every trigger, rule and foreign-key action of the
    /// engine for its own session (PostgreSQL: `session_replication_role`).
    pub session_off: bool,
    /// The tables whose triggers and rules it may switch on and off for its
    /// own transaction (PostgreSQL: the tables it owns).
    pub owns: Vec<String>,
    /// The engine cannot switch a trigger off for one connection at all
    /// (SQLite): its triggers fire, its foreign-key actions never do.
    pub triggers_always_fire: bool,
}
