//! Journal entries read as changes of the spec's tables: each image (the
//! columns one `journal install` recorded) mapped to the spec's columns by
//! name now or by a name they had (`was`); entries of an image the spec
//! cannot read refused with the columns that differ.

use anyhow::{Context, Result, bail};

use crate::db::{Db, Op};
use crate::spec::Spec;

/// Reads journal entries as changes of the spec's tables: each image put in
/// the spec's column order (key columns first), whatever order the journal
/// recorded its columns in.
pub struct Reader {
    /// Per image id: the spec table index, per spec column its position in
    /// the image (`None`: the image did not record it), and the spec columns
    /// it did not record.
    images: std::collections::HashMap<i64, Image>,
    /// Images that cannot be read under the spec (a key column missing, or
    /// columns the spec does not map): their entries are refused.
    refused: std::collections::HashSet<i64>,
    /// Spec columns, as (table index, target name), that some image did not
    /// record: the table gained them after the image's `journal install`.
    unjournaled: Vec<(usize, String)>,
    /// Per image id, the positions in the image of the spec's key columns.
    keys: std::collections::HashMap<i64, Vec<usize>>,
}

/// Whether a column an image recorded is spec column `c`: by its name now
/// or by a name it had before (`was`).
fn names(c: &crate::spec::Column, recorded: &str) -> bool {
    c.target == recorded || c.was.iter().any(|w| w == recorded)
}

/// How one image's entries read as rows of a spec table.
struct Image {
    table: usize,
    order: Vec<Option<usize>>,
    unrecorded: Vec<usize>,
}

/// One journal entry of a spec table, in canonical (target) form.
pub struct Entry {
    pub seq: i64,
    pub table: usize,
    pub op: crate::db::Op,
    pub before: Option<crate::value::Row>,
    pub after: Option<crate::value::Row>,
    /// The spec columns (by index) the entry's image did not record: the
    /// table gained them after that image's `journal install`. Their places
    /// in `before` and `after` hold NULL, which stands for no value at all
    /// (see [`crate::apply::Change::unrecorded`]).
    pub unrecorded: Vec<usize>,
}

impl Entry {
    /// Whether an image holds a large value whole ([`Value::Large`]).
    ///
    /// [`Value::Large`]: crate::value::Value::Large
    pub fn holds_large(&self) -> bool {
        [&self.before, &self.after]
            .into_iter()
            .flatten()
            .flatten()
            .any(|v| matches!(v, crate::value::Value::Large(_)))
    }
}

impl Reader {
    pub fn new(spec: &Spec, target: &Db) -> Result<Reader> {
        let mut images = std::collections::HashMap::new();
        let mut keys = std::collections::HashMap::new();
        let mut refused = std::collections::HashSet::new();
        let mut unjournaled: Vec<(usize, String)> = Vec::new();
        for jt in target.identity().images()? {
            let Some(ti) = spec.tables.iter().position(|t| t.name == jt.tbl) else {
                continue;
            };
            let t = &spec.tables[ti];
            // Each spec column by its name now, else by a name it had.
            let order: Vec<Option<usize>> = t
                .columns
                .iter()
                .map(|c| {
                    jt.columns
                        .iter()
                        .position(|x| *x == c.target)
                        .or_else(|| jt.columns.iter().position(|x| names(c, x)))
                })
                .collect();
            // A recorded column the spec no longer maps is left out when the
            // table dropped it since, or the spec leaves it to the target
            // (`default = true`, as before a drop): it is carried back no
            // more than the target keeps it.
            let now = target.catalogue().table_columns(&t.target_table)?;
            let unmapped: Vec<&String> = jt
                .columns
                .iter()
                .filter(|x| {
                    !t.columns.iter().any(|c| names(c, x)) && !t.target_defaults.contains(x)
                })
                .collect();
            let extra = unmapped.iter().any(|x| now.iter().any(|c| c.name == **x));
            // A column added to the table after this image was installed
            // has no value in its entries; a key column always has one. A
            // recorded column gone from the table while a spec column is
            // missing from the image is a rename the spec does not name
            // (`was`): never read as a drop and an add.
            let missing = order.iter().any(Option::is_none);
            if extra
                || (missing && !unmapped.is_empty())
                || order[..t.key_len].iter().any(Option::is_none)
            {
                // Entries of this image are refused when read, with the
                // columns that differ.
                refused.insert(jt.img);
            }
            for (c, at) in t.columns.iter().zip(&order) {
                let col = (ti, c.target.clone());
                if at.is_none() && !unjournaled.contains(&col) {
                    unjournaled.push(col);
                }
            }
            keys.insert(
                jt.img,
                order[..t.key_len].iter().flatten().copied().collect(),
            );
            let unrecorded = (0..order.len()).filter(|&i| order[i].is_none()).collect();
            images.insert(
                jt.img,
                Image {
                    table: ti,
                    order,
                    unrecorded,
                },
            );
        }
        Ok(Reader {
            images,
            refused,
            unjournaled,
            keys,
        })
    }

    /// Whether column `col` of image `img` is outside the key of a spec
    /// table: its values are only ever compared or written, never looked
    /// up by, so a reader that only compares them may take their large
    /// values as digests.
    pub fn outside_key(&self, img: i64, col: usize) -> bool {
        self.keys.get(&img).is_some_and(|k| !k.contains(&col))
    }

    /// Spec columns, as (table index, target column), that entries of some
    /// image of the journal carry no value for: the column was added to the
    /// table after that image's `journal install`. Replay leaves them as the
    /// source holds them (a row it inserts, to the column's default).
    pub fn unjournaled(&self) -> &[(usize, String)] {
        &self.unjournaled
    }

    /// The entry in the spec's terms.
    pub fn entry(&self, spec: &Spec, target: &Db, e: crate::db::JournalEntry) -> Result<Entry> {
        let Some(Image {
            table: ti,
            order,
            unrecorded,
        }) = self.images.get(&e.img)
        else {
            let name = target
                .identity()
                .images()?
                .into_iter()
                .find(|t| t.img == e.img)
                .map(|t| t.tbl);
            bail!(
                "journal entry seq {}: table '{}' is not in the spec; replay with the spec the journal was installed with",
                e.seq,
                name.unwrap_or_else(|| format!("image {}", e.img))
            );
        };
        let t = &spec.tables[*ti];
        if self.refused.contains(&e.img) {
            let jt = target
                .identity()
                .images()?
                .into_iter()
                .find(|x| x.img == e.img)
                .context("journal image vanished")?;
            let missing: Vec<&str> = t
                .columns
                .iter()
                .filter(|c| !jt.columns.iter().any(|x| names(c, x)))
                .map(|c| c.target.as_str())
                .collect();
            let now = target.catalogue().table_columns(&t.target_table)?;
            let extra: Vec<&str> = jt
                .columns
                .iter()
                .map(String::as_str)
                .filter(|x| {
                    !t.columns.iter().any(|c| names(c, x))
                        && !t.target_defaults.iter().any(|d| d == x)
                        && (!missing.is_empty() || now.iter().any(|c| c.name == *x))
                })
                .collect();
            bail!(
                "journal entry seq {} of table '{}' recorded the columns {} but the spec maps {}{}{}; replay with a spec that maps the columns the journal recorded (a column renamed since: its new name as target, its old one in was = [\"…\"]; a column the spec no longer maps: drop it from the target, or keep it mapped until the rollback is done)",
                e.seq,
                t.name,
                jt.columns.join(", "),
                t.target_names().join(", "),
                if missing.is_empty() {
                    String::new()
                } else {
                    format!("; not journaled: {}", missing.join(", "))
                },
                if extra.is_empty() {
                    String::new()
                } else {
                    format!("; journaled but not in the spec: {}", extra.join(", "))
                },
            );
        }
        let arrange = |r: Option<crate::value::Row>| {
            r.map(|mut row| {
                order
                    .iter()
                    .map(|i| match i {
                        Some(i) => std::mem::replace(&mut row[*i], crate::value::Value::Null),
                        None => crate::value::Value::Null,
                    })
                    .collect::<crate::value::Row>()
            })
        };
        let (before, after) = (arrange(e.old), arrange(e.new));
        match (e.op, &before, &after) {
            (Op::Insert, None, Some(_))
            | (Op::Update, Some(_), Some(_))
            | (Op::Delete, Some(_), None) => {}
            _ => bail!(
                "journal entry seq {} (table '{}', op {}): the images do not fit the op; the journal is damaged",
                e.seq,
                t.name,
                e.op
            ),
        }
        Ok(Entry {
            seq: e.seq,
            table: *ti,
            op: e.op,
            before,
            after,
            unrecorded: unrecorded.clone(),
        })
    }
}
