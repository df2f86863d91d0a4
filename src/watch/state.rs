//! What watch keeps between passes, in the domain's terms: where the file
//! is (beside the spec), the findings and their fixes, and the record of
//! the keys the journal touched, as canonical rows. The file itself is
//! [`crate::db::watch_state`].

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;
use serde_json::Value as Json;

use crate::db::watch_state::{StoredFinding, Touched, WatchState};
use crate::spec::{Spec, Table};
use crate::value::Row;

/// The state file of a spec: `<spec stem>.watch.db` beside it.
pub fn state_path(spec: &Spec) -> PathBuf {
    state_path_of(&spec.path)
}

/// The state file beside the spec file at `spec`.
pub fn state_path_of(spec: &Path) -> PathBuf {
    let stem = spec
        .file_stem()
        .map_or_else(|| "spec".into(), |s| s.to_string_lossy().into_owned());
    spec.with_file_name(format!("{stem}.watch.db"))
}

/// Opens the state file of a spec.
pub fn open(spec: &Spec) -> Result<WatchState> {
    WatchState::open(&state_path(spec))
}

/// What would set a write right: the spec, the source, or nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "what", rename_all = "snake_case")]
pub enum Fix {
    /// A change to the spec (a map entry, a column's mapping).
    Spec(String),
    /// A change to the source (a row settled, a column widened).
    Source(String),
    /// The write cannot go back; what it would take in the target.
    CannotGoBack(String),
}

impl Fix {
    fn kind(&self) -> &'static str {
        match self {
            Fix::Spec(_) => "spec",
            Fix::Source(_) => "source",
            Fix::CannotGoBack(_) => "cannot_go_back",
        }
    }

    fn text(&self) -> &str {
        match self {
            Fix::Spec(t) | Fix::Source(t) | Fix::CannotGoBack(t) => t,
        }
    }

    /// The fix in words, with what kind of fix it is.
    pub fn shown(&self) -> String {
        match self {
            Fix::Spec(t) => format!("spec change: {t}"),
            Fix::Source(t) => format!("source change: {t}"),
            Fix::CannotGoBack(t) => format!("this write cannot go back: {t}"),
        }
    }
}

/// Why a journaled write could not go back to the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A key column is NULL: the row has no identity.
    NullKey,
    /// The reverse transform or a column's checks refuse the value.
    Transform,
    /// The source column cannot store the value exactly.
    SourceColumn,
    /// The source holds the key the write brings (written there since).
    Collision,
    /// The source's row is not the one the target had before the write.
    SourceChanged,
    /// The journal's images do not follow on from each other.
    Chain,
    /// The row's parent is missing from the source.
    Parent,
    /// A foreign-key action of the source would change rows the journal
    /// does not name.
    Action,
}

impl Kind {
    fn name(self) -> String {
        crate::report::name(&self)
    }

    fn parse(s: &str) -> Kind {
        match s {
            "null_key" => Kind::NullKey,
            "transform" => Kind::Transform,
            "source_column" => Kind::SourceColumn,
            "collision" => Kind::Collision,
            "source_changed" => Kind::SourceChanged,
            "chain" => Kind::Chain,
            "action" => Kind::Action,
            _ => Kind::Parent,
        }
    }
}

/// One journaled write that cannot go back as things stand.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub seq: i64,
    pub kind: Kind,
    pub table: String,
    pub key: Json,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub reason: String,
    pub fix: Fix,
}

impl Finding {
    pub(super) fn stored(&self) -> StoredFinding {
        StoredFinding {
            seq: self.seq,
            kind: self.kind.name(),
            table: self.table.clone(),
            key: self.key.to_string(),
            column: self.column.clone(),
            value: self.value.clone(),
            reason: self.reason.clone(),
            fix_kind: self.fix.kind().to_string(),
            fix: self.fix.text().to_string(),
        }
    }

    pub(super) fn of_stored(s: StoredFinding) -> Finding {
        let fix = match s.fix_kind.as_str() {
            "spec" => Fix::Spec(s.fix),
            "source" => Fix::Source(s.fix),
            _ => Fix::CannotGoBack(s.fix),
        };
        Finding {
            seq: s.seq,
            kind: Kind::parse(&s.kind),
            table: s.table,
            key: serde_json::from_str(&s.key).unwrap_or(Json::String(s.key)),
            column: s.column,
            value: s.value,
            reason: s.reason,
            fix,
        }
    }
}

/// A key the journal touched, its rows canonical.
#[derive(Clone, Debug, PartialEq)]
pub struct Key {
    /// What the source had to hold under the key before the journal's
    /// first write to it.
    pub base: Option<Row>,
    /// The row the journal left there last.
    pub latest: Option<Row>,
    pub first_seq: i64,
    pub touches: i64,
    /// Since when `latest` stands under the key: the seq of the write
    /// that brought it there (an insert, a key moved onto it), 0 for a row
    /// there before the journal, `None` when there is none or it is not
    /// known (a record an earlier version kept).
    pub born: Option<i64>,
}

/// The record of the keys the journal touched, read and written through
/// the pass's transaction on the state file.
pub struct Record<'a> {
    pub(super) file: &'a WatchState,
}

impl Record<'_> {
    /// The key `key` (its JSON) of `table`, if the journal touched it.
    pub fn get(&self, table: &Table, key: &str) -> Result<Option<Key>> {
        let Some(t) = self.file.touched(&table.name, key)? else {
            return Ok(None);
        };
        let row = |j: Option<String>| -> Result<Option<Row>> {
            j.map(|j| crate::apply::row_from_json(table, &serde_json::from_str(&j)?))
                .transpose()
        };
        Ok(Some(Key {
            base: row(t.base)?,
            latest: row(t.latest)?,
            first_seq: t.first_seq,
            touches: t.touches,
            born: t.born,
        }))
    }

    pub fn put(&self, table: &Table, key: &str, k: &Key) -> Result<()> {
        let json = |r: &Option<Row>| {
            r.as_ref()
                .map(|r| crate::apply::row_json(table, r).to_string())
        };
        self.file.put_touched(
            &table.name,
            key,
            &Touched {
                base: json(&k.base),
                latest: json(&k.latest),
                first_seq: k.first_seq,
                touches: k.touches,
                born: k.born,
            },
        )
    }
}
