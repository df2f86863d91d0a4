//! The journal's identity in the target (`_cutover_journal_id`): the random
//! id a cutover attempt's journal goes by, the spec's tables it journals,
//! and the seq its entries come after.

use anyhow::Result;

use super::{Control, P, Set, int, text};
use crate::db::{JournalId, JournalTable};

/// The journal's identity and the spec's tables it journals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub id: JournalId,
    /// The spec's names of the journaled tables.
    pub tables: Vec<String>,
}

/// The journal's identity, on one target connection.
#[derive(Clone, Copy)]
pub struct JournalIdentity<'a>(pub(crate) Control<'a>);

impl JournalIdentity<'_> {
    /// The journal's identity, as the source's applied set names it.
    pub fn id(&self) -> Result<Option<JournalId>> {
        Ok(self.get()?.map(|i| i.id))
    }

    /// The identity and its tables, once a journal was installed.
    pub fn get(&self) -> Result<Option<Identity>> {
        if !self.0.has("_cutover_journal_id")? {
            return Ok(None);
        }
        self.0
            .one(
                "SELECT journal, tables FROM {{schema}}._cutover_journal_id WHERE id = 1",
                &[],
            )?
            .map(|r| {
                Ok(Identity {
                    id: JournalId::from_stored(&text(&r, 0)?),
                    tables: serde_json::from_str(&text(&r, 1)?)?,
                })
            })
            .transpose()
    }

    /// Gives the journal an identity (a fresh one), making the target's
    /// control tables first.
    pub fn set(&self, id: &JournalId, tables: &[&str]) -> Result<()> {
        self.0.ensure(Set::Target)?;
        self.0.exec(
            "INSERT INTO {{schema}}._cutover_journal_id (id, journal, tables) VALUES (1, :journal, :tables)",
            &[
                ("journal", P::Text(id.stored())),
                ("tables", P::Text(&serde_json::to_string(tables)?)),
            ],
        )?;
        Ok(())
    }

    /// Gives the journal a new identity whose entries come after `after_seq`.
    pub fn renew(&self, id: &JournalId, after_seq: i64) -> Result<()> {
        self.0.exec(
            "UPDATE {{schema}}._cutover_journal_id SET journal = :journal, after_seq = :after,
               installed_at = {now} WHERE id = 1",
            &[
                ("journal", P::Text(id.stored())),
                ("after", P::Int(after_seq)),
            ],
        )?;
        Ok(())
    }

    /// Records the spec's tables under the journal's identity.
    pub fn set_tables(&self, tables: &[&str]) -> Result<()> {
        self.0.exec(
            "UPDATE {{schema}}._cutover_journal_id SET tables = :tables WHERE id = 1",
            &[("tables", P::Text(&serde_json::to_string(tables)?))],
        )?;
        Ok(())
    }

    /// Whether the journal is installed: its list of entries
    /// (`_cutover_journal`, over every image table) is there.
    pub fn installed(&self) -> Result<bool> {
        self.0.has("_cutover_journal")
    }

    /// Every journaled table and column list the journal records
    /// (`_cutover_journal_tables`), in image order.
    pub fn images(&self) -> Result<Vec<JournalTable>> {
        if !self.0.has("_cutover_journal_tables")? {
            return Ok(Vec::new());
        }
        self.0
            .query(
                "SELECT img, tbl, target_table, columns FROM {{schema}}._cutover_journal_tables ORDER BY img",
                &[],
            )?
            .iter()
            .map(|r| {
                Ok(JournalTable {
                    img: int(r, 0)?,
                    tbl: text(r, 1)?,
                    target_table: text(r, 2)?,
                    columns: serde_json::from_str(&text(r, 3)?)?,
                })
            })
            .collect()
    }

    /// The seq the current identity's entries come after (0: all of them).
    pub fn start(&self) -> Result<i64> {
        if !self.0.has("_cutover_journal_id")? {
            return Ok(0);
        }
        self.0
            .one(
                "SELECT after_seq FROM {{schema}}._cutover_journal_id WHERE id = 1",
                &[],
            )?
            .map_or(Ok(0), |r| int(&r, 0))
    }
}
