//! `cutover journal export`: the fenced journal, up to its boundary, as a
//! feed named after the journal's identity, written to a temporary file and
//! moved into place whole.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::db::Access;
use crate::feed::entry_line;
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
    let Some(fence) = crate::fence::read(target.fence_records())? else {
        bail!(
            "target {} is not fenced; export takes the journal at the fence's boundary. Run `cutover fence on` first",
            target.location()
        );
    };
    // The feed is named after the journal's identity, which is also the
    // name of the source's applied set: a replay and this feed's apply never
    // apply one entry twice.
    let feed = target.identity().id()?
        .with_context(|| {
            format!(
                "target {} has a fence but its journal has no identity; install the journal with this version of cutover",
                target.location()
            )
        })?
        .to_string();
    let reader = crate::journal::Reader::new(spec, &target)?;
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    let mut w = std::io::BufWriter::new(tmp.as_file_mut());
    let (mut after, mut position, mut deliveries) = (target.identity().start()?, 0i64, 0u64);
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
            let line = entry_line(spec, &feed, &delivery, position, e)?;
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
