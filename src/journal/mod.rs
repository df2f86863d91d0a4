//! The journal: triggers on every target table of the spec that record each
//! change, with its before- and after-image as native values, under one
//! global sequence (`_cutover_journal`), in commit order; and the journal's
//! identity, which the source's applied set is kept under. It is what a
//! rollback replays.
//!
//! Its parts: [`install`] (the triggers put on and proven, under the
//! journal's identity), [`drift`] (how the target differs from what the
//! spec and the journal expect), [`reader`] (an entry's images read as rows
//! of the spec's tables) and [`runs`] (the entries in the order that
//! replays them, read ahead on a thread of their own).

use crate::db::{Db, JournalId};

pub mod drift;
pub mod install;
pub mod reader;
pub mod runs;

pub use drift::{Drift, Since, drift, installed, stale};
pub use reader::{Entry, Reader};
pub use runs::{RUN_BYTES, Reading, RunsAhead, next_run};

/// A spec table as the journal records it, its target columns `columns`
/// (the table's [`crate::spec::Table::target_names`]).
pub fn journaled<'a>(
    t: &'a crate::spec::Table,
    columns: &'a [&'a str],
) -> crate::db::Journaled<'a> {
    crate::db::Journaled {
        name: &t.name,
        table: &t.target_table,
        columns,
        key_len: t.key_len,
    }
}

/// A fresh journal identity: 16 hex digits from the clock, the process and
/// the target's path, hashed.
pub fn new_identity(target: &Db) -> JournalId {
    JournalId::from_stored(&fresh_id(target))
}

fn fresh_id(target: &Db) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.update(now.as_nanos().to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(target.location().as_bytes());
    hex::encode(&h.finalize()[..8])
}
