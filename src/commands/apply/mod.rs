//! `cutover apply`: a change feed (src/feed/, format in docs/feed.md)
//! applied through the apply engine with the delivery contract.
//!
//! A feed is validated whole before anything is written. Then it is applied
//! one delivery at a time, each delivery one transaction with its receipt,
//! reading the file again so memory holds one delivery, never the feed.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::apply::{Applied, Applier, BatchOutcome, Change, DeliveryCheckpoint, FailedChange};
use crate::db::{Access, Receipts};
use crate::feed::{DeliveryInfo, Line, Rejection, Validated, read_lines, validate};
use crate::report::{BatchStatus, Report, Verdict};
use crate::schema;
use crate::spec::{Side, Spec};

mod render;

pub use render::render;

#[derive(Debug, Serialize, Deserialize)]
pub struct DeliveryReport {
    pub feed: String,
    pub delivery: String,
    pub positions: [i64; 2],
    pub lines: [u64; 2],
    pub status: BatchStatus,
    pub applied: u64,
    pub duplicate: u64,
    pub stale: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl DeliveryReport {
    /// A delivery's report before anything of it is counted.
    fn of(info: &DeliveryInfo, status: BatchStatus, reason: Option<String>) -> DeliveryReport {
        DeliveryReport {
            feed: info.feed.clone(),
            delivery: info.delivery.clone(),
            positions: [info.first_position, info.last_position],
            lines: [info.first_line, info.last_line],
            status,
            applied: 0,
            duplicate: 0,
            stale: 0,
            reason,
        }
    }
}

/// What `cutover apply` did, delivery by delivery. It reads back from its
/// JSON too: the drill runs apply in a child process.
#[derive(Debug, Serialize, Deserialize)]
pub struct ApplyReport {
    pub verdict: Verdict,
    pub into: String,
    pub feed_file: String,
    pub deliveries: Vec<DeliveryReport>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected_lines: Vec<Rejection>,
    pub checkpoints: BTreeMap<String, i64>,
}

impl Report for ApplyReport {
    fn holds(&self) -> bool {
        self.verdict.holds()
    }
}

/// `cutover apply --feed FILE --into source|target`.
/// Into the source, the rollback: all or nothing, as `cutover replay`
/// (docs/journal.md, "All or nothing"), every delivery a savepoint of one
/// transaction committed only when all of them applied. Holds that
/// transaction open and marks the id generators it may move; `None` into
/// the target, where each delivery commits on its own.
fn hold_whole(
    spec: &Spec,
    db: &crate::db::Db,
    engine: &Applier<'_>,
    into: Side,
) -> Result<Option<crate::apply::Sequences>> {
    if into != Side::Source {
        return Ok(None);
    }
    let sequences = crate::apply::Sequences::mark(db.catalogue(), &spec.tables, into)?;
    if !db.engine().capabilities.transactional_ddl {
        db.receipts().ensure()?;
    }
    engine.hold()?;
    Ok(Some(sequences))
}

/// The held transaction of a feed applied into the source.
struct Whole<'a, 'e> {
    spec: &'a Spec,
    db: &'a crate::db::Db,
    target: &'a crate::db::Db,
    engine: &'a Applier<'e>,
}

impl Whole<'_, '_> {
    /// Commits it when every delivery applied (then carries the id
    /// generators past the target's); otherwise rolls it back, puts the
    /// generators back and marks every applied delivery rolled back.
    fn finish(
        &self,
        sequences: crate::apply::Sequences,
        all_applied: bool,
        rep: &mut ApplyReport,
    ) -> Result<()> {
        if all_applied {
            self.engine.commit_held()?;
            return crate::replay::carry_sequences(self.spec, self.db, self.target.catalogue());
        }
        self.engine.rollback_held();
        sequences.restore(self.db.catalogue())?;
        for d in rep
            .deliveries
            .iter_mut()
            .filter(|d| d.status == BatchStatus::Applied)
        {
            d.status = BatchStatus::RolledBack;
            d.reason = Some(
                "rolled back with the rejected delivery: into the source, a feed applies whole or not at all".into(),
            );
        }
        Ok(())
    }
}

pub fn apply(spec: &Spec, path: &Path, into: Side) -> Result<ApplyReport> {
    if !path.is_file() {
        bail!("feed {} is not a readable file", path.display());
    }
    let (source, target, _) = match into {
        Side::Source => schema::open(spec, Access::Write, Access::Read)?,
        Side::Target => schema::open(spec, Access::Read, Access::Write)?,
    };
    let db = match into {
        Side::Source => &source,
        Side::Target => &target,
    };
    let mut rep = ApplyReport {
        verdict: Verdict::Fail,
        into: into.to_string(),
        feed_file: path.display().to_string(),
        deliveries: Vec::new(),
        rejected_lines: Vec::new(),
        checkpoints: BTreeMap::new(),
    };
    let infos = match validate(path, spec, 20)? {
        Validated::Deliveries(d) => d,
        Validated::Rejected(rejections) => {
            rep.rejected_lines = rejections;
            return with_checkpoints(rep, db.receipts());
        }
    };
    let engine = Applier::new(&spec.tables, db, into);
    let sequences = hold_whole(spec, db, &engine, into)?;
    let mut pending: Vec<Line> = Vec::new();
    let mut idx = 0usize;
    let mut stopped = false;
    let mut apply_delivery = |lines: &mut Vec<Line>, rep: &mut ApplyReport| -> Result<bool> {
        let info = &infos[idx];
        idx += 1;
        deliver(&engine, path, info, lines, rep)
    };
    let read = read_lines(path, spec, |l| {
        let l = l.map_err(|r| {
            anyhow::anyhow!(
                "feed {} changed while it was being applied: {r}",
                path.display()
            )
        })?;
        if pending.last().is_some_and(|p| p.delivery != l.delivery)
            && !apply_delivery(&mut pending, &mut rep)?
        {
            stopped = true;
            return Ok(false);
        }
        pending.push(l);
        Ok(true)
    })
    .and_then(|()| {
        if !stopped && !pending.is_empty() && !apply_delivery(&mut pending, &mut rep)? {
            stopped = true;
        }
        Ok(())
    });
    if let Some(sequences) = sequences {
        let whole = Whole {
            spec,
            db,
            target: &target,
            engine: &engine,
        };
        whole.finish(sequences, read.is_ok() && !stopped, &mut rep)?;
    }
    read?;
    for info in infos.iter().skip(rep.deliveries.len()) {
        rep.deliveries.push(DeliveryReport::of(
            info,
            BatchStatus::NotAttempted,
            Some("an earlier delivery was rejected; positions must stay gapless".into()),
        ));
    }
    if !stopped {
        rep.verdict = Verdict::Pass;
    }
    with_checkpoints(rep, db.receipts())
}

/// Applies one delivery, `lines` as read again, in one transaction with its
/// receipt; whether the next may follow.
fn deliver(
    engine: &Applier<'_>,
    path: &Path,
    info: &DeliveryInfo,
    lines: &mut Vec<Line>,
    rep: &mut ApplyReport,
) -> Result<bool> {
    let mut h = Sha256::new();
    for l in lines.iter() {
        h.update(l.canonical.as_bytes());
        h.update(b"\n");
    }
    if hex::encode(h.finalize()) != info.digest {
        bail!(
            "feed {} changed while it was being applied (delivery '{}'); apply it again",
            path.display(),
            info.delivery
        );
    }
    let changes: Vec<Change> = lines.iter().map(|l| l.change.clone()).collect();
    let seqs: Vec<i64> = lines.iter().map(|l| l.seq.unwrap_or(0)).collect();
    let cp = DeliveryCheckpoint {
        feed: &info.feed,
        delivery: &info.delivery,
        digest: &info.digest,
        first: info.first_position,
        last: info.last_position,
        seqs: &seqs,
    };
    let mut dr = DeliveryReport::of(info, BatchStatus::Applied, None);
    let outcome = engine.apply_batch(&changes, &cp).map_err(|e| {
        let at = e
            .downcast_ref::<FailedChange>()
            .and_then(|f| lines.get(f.index))
            .map(|l| (l.line, l.position));
        match at {
            Some((line, position)) => e.context(format!(
                "feed {}, delivery '{}', line {line}, position {position}",
                path.display(),
                info.delivery
            )),
            None => e.context(format!(
                "feed {}, delivery '{}'",
                path.display(),
                info.delivery
            )),
        }
    })?;
    let go_on = settle(&mut dr, outcome, lines, info)?;
    rep.deliveries.push(dr);
    lines.clear();
    Ok(go_on)
}

/// What a delivery's outcome makes of its report; whether the next may
/// follow.
fn settle(
    dr: &mut DeliveryReport,
    outcome: BatchOutcome,
    lines: &[Line],
    info: &DeliveryInfo,
) -> Result<bool> {
    Ok(match outcome {
        BatchOutcome::Committed(Applied {
            written,
            duplicate,
            stale,
        }) => {
            (dr.applied, dr.duplicate, dr.stale) = (written, duplicate, stale);
            true
        }
        BatchOutcome::Replayed => {
            dr.status = BatchStatus::Replayed;
            true
        }
        BatchOutcome::Refused(why) => {
            dr.status = BatchStatus::Rejected;
            dr.reason = Some(why);
            false
        }
        BatchOutcome::Conflict(c) => {
            let line = lines
                .iter()
                .find(|l| l.position == c.tag)
                .map_or(0, |l| l.line);
            dr.status = BatchStatus::Rejected;
            dr.reason = Some(format!(
                "line {line}, position {}, table '{}', key {}{}: {}; found {}, wanted {}. The whole delivery was rolled back",
                c.tag,
                c.table,
                c.key,
                c.column
                    .as_ref()
                    .map(|col| format!(", column '{col}'"))
                    .unwrap_or_default(),
                c.reason,
                c.found.as_ref().map_or("no row".into(), |f| f.to_string()),
                c.wanted.as_ref().map_or("no row".into(), |f| f.to_string()),
            ));
            false
        }
        BatchOutcome::Raced => bail!("unexpected race applying delivery '{}'", info.delivery),
    })
}

/// The report with each feed's checkpoint as the database holds it now.
fn with_checkpoints(mut rep: ApplyReport, receipts: Receipts<'_>) -> Result<ApplyReport> {
    let feeds: Vec<String> = rep.deliveries.iter().map(|d| d.feed.clone()).collect();
    for f in feeds {
        let at = receipts.checkpoint(&f)?;
        rep.checkpoints.insert(f, at);
    }
    Ok(rep)
}
