//! The fence: makes the target read-only for every writer, in every process,
//! while the rollback runs.
//!
//! `PRAGMA query_only` is per connection and fences nothing. On SQLite the
//! fence is a set of `BEFORE INSERT/UPDATE/DELETE` triggers that abort, on
//! every journaled table and on the journal itself, installed in one
//! `BEGIN IMMEDIATE` transaction together with the fence row: the journal
//! boundary and a fingerprint. That transaction waits for a writer in flight,
//! so nothing lands between boundary and fence, and a crash leaves a whole
//! fence or none.
//!
//! Triggers cannot stop `DROP TRIGGER`, `ALTER TABLE` or a connection with
//! triggers disabled. The fingerprint (schema of the fenced tables and
//! triggers, journal size and digest) and the target's change token let replay
//! notice that before and after every batch and stop with "fence breached".
//!
//! Its parts: [`fingerprint`] (what the fence protects, as hashed into its
//! record), [`record`] (the fence row and the copy of it the source keeps),
//! [`breach`] (whether the target still matches its fence), [`sentry`]
//! (replay's watch over the fence while it writes), [`verdict`] (how the
//! last replay ended, which `fence off` and `status` go by) and [`set`]
//! (the fence put on, proven from another connection, and taken off).

use anyhow::Result;

use crate::db::Capture;

pub mod breach;
pub mod fingerprint;
pub mod record;
pub mod sentry;
pub mod set;
pub mod verdict;

pub use breach::orphaned;
pub use fingerprint::Fingerprint;
pub use record::{Copy, FenceRow, copy_missing, copy_of, keep_copy_or_say, read};
pub use sentry::{Posted, Sentry};
pub use set::{Before, install, lift, stand, take_off};
pub use verdict::{ACCEPTED, ReplayEnd, record_replay, replay_not_passed};

pub const FENCE_TABLE: &str = "_cutover_fence";

/// The format of the fingerprints `fence on` writes now. Format 1 (a fence
/// set before the record was covered; its `parts` carry no `version`) hashes
/// the schema, the rows and the journal; format 2 hashes the same parts and
/// the fence record itself (boundary, entries, tables, time); format 3 is
/// format 2 with each table's rows read as the table holds them (every
/// column, in the table's order) rather than as the spec maps them, so that
/// a change of the spec is no breach. docs/journal.md gives each byte for
/// byte; a fence is checked in the format it was set in.
pub const FORMAT: u32 = 3;

/// The journal's own tables, which the fence guards like the data: its
/// image tables, its identity and its column lists.
pub fn journal_tables(target: &dyn Capture) -> Result<Vec<String>> {
    let mut out = target.journal_image_tables()?;
    out.extend([
        "_cutover_journal_id".to_string(),
        "_cutover_journal_tables".to_string(),
    ]);
    Ok(out)
}

pub fn message(table: &str) -> String {
    format!(
        "cutover fence: table {table} is read-only while the migration rolls back; lift it only with `cutover fence off`"
    )
}
