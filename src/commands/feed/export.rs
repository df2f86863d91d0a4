//! `cutover journal export`: the fenced journal, up to its boundary, as a
//! feed named after the journal's identity, written to a temporary file and
//! moved into place whole.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::{Map, Value as Json, json};

use crate::apply::row_json_of;
use crate::db::Access;
use crate::report::{self, Report};
use crate::schema;
use crate::spec::Spec;

/// What `journal export` wrote.
#[derive(Debug, Serialize)]
pub struct ExportReport {
    pub feed: String,
    pub out: String,
    pub boundary: i64,
    pub changes: i64,
    pub deliveries: u64,
    pub delivery_size: usize,
}

impl Report for ExportReport {
    fn holds(&self) -> bool {
        true
    }
}

/// `cutover journal export --out FILE`: the fenced journal as a feed.
pub fn export(spec: &Spec, out: &Path, delivery_size: usize) -> Result<ExportReport> {
    let (_, target, _) = schema::open(spec, Access::Read, Access::Read)?;
    let Some(fence) = crate::fence::read(&target)? else {
        bail!(
            "target {} is not fenced; export takes the journal at the fence's boundary. Run `cutover fence on` first",
            target.location()
        );
    };
    // The feed is named after the journal's identity, which is also the
    // name of the source's applied set: a replay and this feed's apply never
    // apply one entry twice.
    let feed = crate::journal::identity(&target)?.with_context(|| {
        format!(
            "target {} has a fence but its journal has no identity; install the journal with this version of cutover",
            target.location()
        )
    })?;
    let reader = crate::journal::Reader::new(spec, &target)?;
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    let mut w = std::io::BufWriter::new(tmp.as_file_mut());
    let (mut after, mut position, mut deliveries) = (target.journal_start()?, 0i64, 0u64);
    loop {
        let page = crate::journal::next_run(
            spec,
            &target,
            &reader,
            after,
            fence.boundary,
            delivery_size,
            crate::journal::Reading::Whole,
        )?;
        let Some(last) = page.iter().map(|e| e.seq).max() else {
            break;
        };
        after = last;
        let first = position + 1;
        let delivery = format!("{feed}:{first}-{}", position + page.len() as i64);
        deliveries += 1;
        for e in page {
            position += 1;
            let table = &spec.tables[e.table];
            // A column the entry's image did not record is left out of the
            // line: it has no value, which NULL would claim.
            let (old, new) = (
                e.before
                    .as_ref()
                    .map(|r| row_json_of(table, r, &e.unrecorded)),
                e.after
                    .as_ref()
                    .map(|r| row_json_of(table, r, &e.unrecorded)),
            );
            let named = new
                .as_ref()
                .or(old.as_ref())
                .with_context(|| format!("journal seq {} has no image", e.seq))?;
            let mut key = Map::new();
            for c in table.key_columns() {
                let part = named.get(&c.target).cloned().unwrap_or(Json::Null);
                if part.is_null() {
                    bail!(
                        "journal entry seq {} of table '{}': key column '{}' is NULL, and a feed cannot carry a record without identity; no feed was written",
                        e.seq,
                        table.name,
                        c.target
                    );
                }
                key.insert(c.target.clone(), part);
            }
            let mut line = json!({
                "feed": feed, "delivery": delivery, "position": position, "seq": e.seq,
                "table": table.name, "op": if e.op == "delete" { "delete" } else { "upsert" }, "key": key,
            });
            if let Some(n) = new {
                line["row"] = n;
            }
            // The before-image carries the replay rule; an insert's is null:
            // there must be no row, or already this one.
            line["before"] = old.unwrap_or(Json::Null);
            serde_json::to_writer(&mut w, &line)?;
            w.write_all(b"\n")?;
        }
    }
    w.flush()?;
    drop(w);
    // A temporary file is private (0600); a feed is an ordinary file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(out)
        .with_context(|| format!("writing feed {}", out.display()))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(ExportReport {
        feed,
        out: out.display().to_string(),
        boundary: fence.boundary,
        changes: position,
        deliveries,
        delivery_size,
    })
}

/// The export as text: the feed, its file and its figures.
pub fn render_export(rep: &ExportReport) -> String {
    report::pairs(&[
        ("feed", rep.feed.clone()),
        ("file", rep.out.clone()),
        ("journal_boundary", rep.boundary.to_string()),
        ("changes", rep.changes.to_string()),
        ("deliveries", rep.deliveries.to_string()),
    ])
}
