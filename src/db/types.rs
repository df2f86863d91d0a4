//! The values the engine interfaces trade in: what a catalogue describes,
//! the statements of a table, control-table rows and journal entries. None of
//! them belongs to one engine.

use crate::value::{ColumnKind, Row, Value};

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
    /// The type as the engine declares it (`INTEGER`, `numeric(12,2)`, …),
    /// for messages and the source schema sync records.
    pub decl_type: String,
    /// What the column holds, in engine-neutral terms.
    pub kind: ColumnKind,
    /// Position in the primary key (1-based), 0 when not part of it.
    pub pk: i64,
    /// The labels of a column that holds a set of them (MySQL's `SET`), in
    /// declaration order: what `set_to_array` needs.
    pub labels: Option<Vec<String>>,
    /// Why cutover does not read the column's values (MySQL's spatial
    /// types): `init` leaves such a column out instead of refusing the
    /// table; every other command refuses it where it is mapped.
    pub unread: Option<String>,
    /// The bound its declared type puts on the values it stores, as far as
    /// `check` compares it with the other side's ([`crate::hazards`]).
    pub limit: Limit,
    /// An insert must give it a value: NOT NULL, with no default, not
    /// generated, not an identity, AUTO_INCREMENT or rowid key.
    pub required: bool,
}

/// The bound a column's declared type puts on what it stores exactly,
/// where `check` compares it with the column on the other side of the
/// migration. `None` is no bound compared: text and binary values by their
/// byte size, floats, dates, booleans, an unbounded `numeric`, and SQLite's
/// columns but for INTEGER affinity's 64 bits (SQLite stores what it is
/// given).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Limit {
    #[default]
    None,
    /// Integers from `min` to `max` (`smallint`, `INT UNSIGNED`, …).
    Integer { min: i128, max: i128 },
    /// At most `precision` digits, `scale` of them after the point
    /// (`numeric(p,s)`, `DECIMAL(p,s)`); `unsigned`: none below zero.
    Digits {
        precision: u32,
        scale: u32,
        unsigned: bool,
    },
    /// At most `length` characters (`varchar(n)`, `char(n)`); `padded`: a
    /// shorter text is stored padded with spaces (PostgreSQL's `char(n)`),
    /// `cut`: trailing spaces are dropped (MySQL's `CHAR(n)`).
    Chars {
        length: u32,
        padded: bool,
        cut: bool,
    },
    /// A time of day or an instant keeping `fraction` digits of a second;
    /// `years`: the first and last year it holds, where that is narrower
    /// than 1000 to 9999 (MySQL's `TIMESTAMP`, 1970 to 2038).
    Time {
        fraction: u32,
        years: Option<(i32, i32)>,
    },
    /// One of these labels (MySQL's `ENUM`, a PostgreSQL enum type).
    Members(Vec<String>),
}

/// A generated column of a table: computed by the database, never written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    pub name: String,
    /// Stored (`true`) or computed as it is read (SQLite's `VIRTUAL`).
    pub stored: bool,
}

impl Generated {
    /// `stored` or `virtual`, as messages say it.
    pub fn kind(&self) -> &'static str {
        if self.stored { "stored" } else { "virtual" }
    }
}

/// One part of a schema as the catalogue defines it: a table's columns, an
/// index, a trigger, a constraint, by a name that says which.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SchemaPart {
    pub name: String,
    pub definition: String,
}

/// A write tried through the fence from another connection: which, and
/// the rows it wrote or the refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// `insert`, `update`, `delete` (or `truncate`).
    pub write: &'static str,
    pub outcome: Result<usize, String>,
}

/// A page of the journal ([`crate::db::JournalLog::journal_run`]).
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub entries: Vec<JournalEntry>,
    /// The page was cut: more entries may follow before its end.
    pub more: bool,
}

/// A journal whose proof failed: the index of its table among those
/// proved, and why.
#[derive(Debug)]
pub struct Unproven {
    pub table: usize,
    pub error: anyhow::Error,
}

/// A foreign key a table declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignKey {
    /// The constraint's name, where the engine names it (not SQLite).
    pub name: Option<String>,
    pub parent: String,
    /// Each column with the parent column it refers to (`None`: the
    /// parent's primary key column at its position).
    pub columns: Vec<(String, Option<String>)>,
    /// Whether a write transaction of cutover's may leave the key
    /// unchecked until its commit ([`crate::db::Step::DeferForeignKeys`]):
    /// a PostgreSQL key declared `DEFERRABLE`; every key on SQLite, whose
    /// connections cutover opens without enforcing foreign keys; no key on
    /// MySQL, which defers none.
    pub deferrable: bool,
}

/// Why a column could not store a value exactly ([`crate::db::Catalogue::holding`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unfit {
    pub column: String,
    /// The whole reason, naming the column, the table and the limit.
    pub why: String,
}

/// What one table's statements can write there exactly, read from the
/// catalogue once ([`crate::db::Catalogue::holding`]): each row is then
/// asked what its columns would not store as written, and replay asks it
/// of every row it writes; and the table's CHECK constraints, which only a
/// write judges.
pub struct Holding<'a> {
    check: Box<RowCheck<'a>>,
    checks: Vec<String>,
}

/// A check of one row.
type RowCheck<'a> = dyn Fn(&[Value]) -> anyhow::Result<Option<Unfit>> + 'a;

impl<'a> Holding<'a> {
    pub fn new(
        check: impl Fn(&[Value]) -> anyhow::Result<Option<Unfit>> + 'a,
        checks: Vec<String>,
    ) -> Holding<'a> {
        Holding {
            check: Box::new(check),
            checks,
        }
    }

    /// Why the table could not store `row` (in the columns of its
    /// statements, in the form it would be written) exactly; `None` when
    /// every value fits as far as the catalogue tells.
    pub fn unfit(&self, row: &[Value]) -> anyhow::Result<Option<Unfit>> {
        (self.check)(row)
    }

    /// The table's CHECK constraints, each as `name: clause` (on SQLite,
    /// which keeps them only in a table's definition and names few, one
    /// line saying the definition holds some).
    pub fn checks(&self) -> &[String] {
        &self.checks
    }
}

/// A row that breaks a foreign key.
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignKeyViolation {
    pub child: String,
    /// The row's key columns, when the row could be found.
    pub key: Option<Row>,
    pub parent: String,
    /// The foreign key's name, where the engine reports it (MySQL).
    pub constraint: Option<String>,
}

/// How a database commits, in its engine's own settings (SQLite:
/// `journal_mode`, `synchronous`; PostgreSQL: `synchronous_commit`,
/// `fsync`, `wal_level`), as `(name, value)`: reported by `check`; writers
/// refuse the settings under which a crash could leave half a batch behind.
#[derive(Clone, Debug)]
pub struct Durability {
    pub settings: Vec<(&'static str, String)>,
}

/// What a connection says of the database it reaches ([`crate::db::Connection::facts`]).
#[derive(Clone, Debug)]
pub struct Facts {
    /// Whether this process cannot write the database, whatever was asked
    /// (a file it may not write, a standby server).
    pub read_only: bool,
    /// How the database commits.
    pub durability: Durability,
    /// How the connection to a server is protected (TLS, where the
    /// password came from); `None` for a file.
    pub security: Option<Security>,
    /// What identifies the database for a change ticket's report, as
    /// `(name, value)`: the engine and its version, and on a server the
    /// server's own identity (PostgreSQL: `system_identifier`, the
    /// database); a fact the role may not read says so as its value.
    pub identity: Vec<(String, String)>,
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

/// Where an id generator stood: its name (as the engine quotes it), the
/// last value it handed out or was set to, and whether that value was
/// handed out (`false`: the next value is `last_value` itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceMark {
    pub name: String,
    pub last_value: i64,
    pub is_called: bool,
    /// The table whose column it feeds (the first asked for, when it feeds
    /// several).
    pub table: String,
    /// Whether it is that table's own id generator: on PostgreSQL the one
    /// feeding its first column (by position) that a sequence feeds; on
    /// SQLite its `AUTOINCREMENT` counter.
    pub own: bool,
    /// Whether a rollback puts it back by itself (SQLite's counters are
    /// rows): then [`crate::db::Catalogue::restore_sequences`] leaves it.
    pub transactional: bool,
}

impl SequenceMark {
    /// The high-water mark of the generator: the last value it handed out,
    /// if it handed out any.
    pub fn high_water(&self) -> Option<i64> {
        self.is_called.then_some(self.last_value)
    }
}

/// The row of `_cutover_fence`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenceRecord {
    pub boundary: i64,
    pub journal_rows: i64,
    pub fingerprint: String,
    /// The fenced tables.
    pub tables: Vec<String>,
    /// The fingerprint's parts, as the JSON text recorded: kept as text,
    /// since the copy in the source is compared with it byte for byte.
    pub parts: String,
    pub fenced_at: String,
}

impl FenceRecord {
    /// The fenced tables as the record holds them, a JSON list.
    pub fn tables_json(&self) -> String {
        serde_json::Value::from(self.tables.clone()).to_string()
    }
}

/// A journal's identity: the name the source's applied set keeps the
/// journal's entries under (`journal-<id>`, the name of the journal's
/// feed too), made of the random id the target records
/// (`_cutover_journal_id`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct JournalId(String);

impl JournalId {
    const PREFIX: &'static str = "journal-";

    /// The identity of the id a target records.
    pub fn from_stored(id: &str) -> JournalId {
        JournalId(format!("{}{id}", Self::PREFIX))
    }

    /// The id as the target records it.
    pub fn stored(&self) -> &str {
        self.0.strip_prefix(Self::PREFIX).unwrap_or(&self.0)
    }

    /// The name the applied set and the journal's feed go by.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for JournalId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a replay ended, as the source records it (`_cutover_replays`): the
/// last one of a journal says whether the rollback reconciled clean.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReplayVerdict {
    /// The journal identity replayed.
    pub journal: JournalId,
    /// The fence's boundary the replay went up to.
    pub boundary: i64,
    /// Every entry applied and the source reconciled clean with the target.
    pub passed: bool,
    /// What failed, in a line (empty on a pass).
    pub detail: String,
    /// When the replay ended (UTC, as the control tables write times).
    pub at: String,
}

/// What a journal entry records: a row inserted, updated or deleted.
/// Declared in byte order of the names, which is the order they sort in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Delete,
    Insert,
    Update,
}

impl Op {
    /// The op as the journal writes it (`insert`, `update`, `delete`).
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }

    /// The op a journal's text names; `None` for any other text (a
    /// damaged journal).
    pub fn parse(text: &str) -> Option<Op> {
        match text {
            "insert" => Some(Op::Insert),
            "update" => Some(Op::Update),
            "delete" => Some(Op::Delete),
            _ => None,
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One journal entry with its images, in the column order of its table's
/// image (see [`JournalTable::columns`]).
#[derive(Clone, Debug)]
pub struct JournalEntry {
    pub seq: i64,
    pub img: i64,
    pub op: Op,
    pub old: Option<Row>,
    pub new: Option<Row>,
}

/// The journal's entries counted: how many, and the last seq.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extent {
    pub entries: i64,
    /// 0 when there is none.
    pub last: i64,
}

/// The entries of one spec table and op in a range of the journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalCount {
    /// The spec's name of the table.
    pub tbl: String,
    pub op: Op,
    pub entries: i64,
    /// The last seq among them.
    pub last: i64,
}

/// Entries with `after < seq <= upto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqRange {
    pub after: i64,
    pub upto: i64,
}

impl SeqRange {
    /// The whole journal.
    pub const ALL: SeqRange = SeqRange {
        after: i64::MIN,
        upto: i64::MAX,
    };
}

/// A spec table as the journal records it on the target: the spec's name
/// of it, the target table, the target columns its images hold (the first
/// `key_len` the key).
#[derive(Clone, Copy, Debug)]
pub struct Journaled<'a> {
    pub name: &'a str,
    pub table: &'a str,
    pub columns: &'a [&'a str],
    pub key_len: usize,
}

/// How many of cutover's own triggers a table has: the journal's and the
/// fence's (those that would refuse a write).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnTriggers {
    pub journal: usize,
    pub fence: usize,
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
    /// The column names asked for, in order (empty: a column the table
    /// does not have).
    pub(crate) columns: Vec<String>,
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
    /// What the engine that wrote the statements knows of them (its plan,
    /// or why the table could not be described), carried with them so
    /// that every use finds it without a lookup; `None` for an engine
    /// that keeps none.
    pub(crate) plan: Option<PlanHandle>,
}

/// An engine's plan of a table's statements, of the engine's own type:
/// made once, when the engine writes the statements
/// ([`TableSql::planned`]), and read back by the engine alone
/// ([`TableSql::plan_of`]).
#[derive(Clone)]
pub(crate) struct PlanHandle(std::sync::Arc<dyn std::any::Any + Send + Sync>);

/// A plan an engine made, or why the catalogue could not describe the table.
type Planned<P> = std::result::Result<std::sync::Arc<P>, String>;

impl TableSql {
    /// The statements an engine wrote with its plan of them (`built`); when
    /// the catalogue could not describe the table, the `unknown` statements,
    /// whose plan is the reason, which every use of them reports.
    pub(crate) fn planned<P: std::any::Any + Send + Sync>(
        built: anyhow::Result<(P, TableSql)>,
        unknown: impl FnOnce() -> TableSql,
    ) -> TableSql {
        let (mut sql, plan): (TableSql, Planned<P>) = match built {
            Ok((plan, sql)) => (sql, Ok(std::sync::Arc::new(plan))),
            Err(e) => (unknown(), Err(format!("{e:#}"))),
        };
        sql.plan = Some(PlanHandle(std::sync::Arc::new(plan)));
        sql
    }

    /// The plan of type `P` (the engine's own) these statements carry;
    /// an error naming `location` when the table could not be described or
    /// another engine (`engine` names this one) wrote them.
    pub(crate) fn plan_of<P: std::any::Any>(
        &self,
        engine: &str,
        location: &str,
    ) -> anyhow::Result<std::sync::Arc<P>> {
        match self
            .plan
            .as_ref()
            .and_then(|p| p.0.downcast_ref::<Planned<P>>())
        {
            Some(Ok(p)) => Ok(p.clone()),
            Some(Err(why)) => Err(anyhow::anyhow!("{location}: {why}")),
            None => anyhow::bail!(
                "{location}: the statements of table '{}' were not written by {engine}",
                self.table
            ),
        }
    }
}

impl std::fmt::Debug for PlanHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlanHandle")
    }
}

/// An insert that does nothing when the key is taken, and an update and a
/// delete that do nothing unless the stored row is exactly the one given.
#[derive(Clone, Debug)]
pub(crate) struct Conditional {
    pub(crate) insert: String,
    pub(crate) update: String,
    pub(crate) delete: String,
    /// Where the engine can set only the columns an update changes (so
    /// that a source trigger `UPDATE OF` a column fires only when the
    /// journaled write changed it, as the application's statement did):
    /// `update`'s head (`UPDATE t SET `), its assignments one by one, and
    /// its ` WHERE …` tail, the parameters numbered as in `update`.
    pub(crate) partial: Option<PartialUpdate>,
}

/// The parts of a conditional update, to set a subset of its columns.
#[derive(Clone, Debug)]
pub(crate) struct PartialUpdate {
    pub(crate) head: String,
    pub(crate) set: Vec<String>,
    pub(crate) tail: String,
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
    /// of an inheritance tree), or a trigger that does the write in
    /// another table (a view's `INSTEAD OF`, a `BEFORE INSERT` into a
    /// partition): the row is then read back through `table`.
    pub routes: bool,
    /// Whether it acts at all when the application writes (a disabled
    /// trigger never does, and replay leaves it so).
    pub enabled: bool,
    /// The columns of the row it sets to the statement's time and nothing
    /// else (MySQL's `SET NEW.created = NOW()`): an engine whose session
    /// clock replay can set ([`Powers::clock_held`]) makes it write the
    /// journal's value.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clock: Vec<String>,
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
    /// It can stop every foreign-key action for its own session, whatever
    /// the table (MySQL: `foreign_key_checks = 0`).
    pub actions_off: bool,
    /// No trigger can be switched off for one connection, yet the policy
    /// decides each as on an engine that can (MySQL): a trigger it
    /// suppresses cannot be held, and the operator lets it fire or drops it
    /// for the rollback.
    pub triggers_fixed: bool,
    /// Replay can set the statement time of its own session (MySQL's
    /// `timestamp`), so that a trigger setting a column to it writes the
    /// journal's value.
    pub clock_held: bool,
}
