//! The journal's entries in the order that replays them: runs that are
//! always a whole prefix of the journal in `seq` order, cut by count and,
//! for replay, by their images' bytes, with a nested write SQLite journaled
//! before the one that fired it put back in causal order; and those runs
//! read ahead on a thread of their own.

use anyhow::Result;

use super::{Entry, Reader};
use crate::db::{Access, Db};
use crate::spec::{Side, Spec};

/// How [`next_run`] reads each entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// Every image whole, runs cut by count only (a feed's deliveries).
    Whole,
    /// For replay: runs cut by their images' bytes too ([`RUN_BYTES`]),
    /// and the large values of before-images outside the key read as
    /// their digests, since replay only compares them with the source.
    Replay,
}

/// The images' bytes after which replay's run of the journal ends: with
/// large values a run is a short one, so that the run being applied and
/// the one read ahead hold little beside them.
pub const RUN_BYTES: usize = 16 << 20;

/// The next run of journal entries after `after` (at most `boundary`), in
/// the order that replays them: at most about `limit`, always a whole prefix
/// of the journal in `seq` order, so that the applied set stays a prefix.
///
/// SQLite fires the newest trigger of an event first. When an application
/// trigger created after the journal's rewrites the row it fires on (a
/// "touch updated_at"), the nested write is journaled before the write that
/// fired it: `(B→C)` then `(A→B)`. Such a pair is put back in causal order —
/// only when the images prove it (the second ends where the first begins,
/// and the first does not end where the second begins).
pub fn next_run(
    spec: &Spec,
    target: &Db,
    reader: &Reader,
    after: i64,
    boundary: i64,
    limit: usize,
    reading: Reading,
) -> Result<Vec<Entry>> {
    let bytes = match reading {
        Reading::Whole => usize::MAX,
        Reading::Replay => RUN_BYTES,
    };
    run_within(spec, target, reader, after, boundary, limit, bytes, reading)
}

#[allow(
    clippy::too_many_arguments,
    reason = "next_run's arguments, and the bytes that cut the run"
)]
fn run_within(
    spec: &Spec,
    target: &Db,
    reader: &Reader,
    after: i64,
    boundary: i64,
    limit: usize,
    bytes: usize,
    reading: Reading,
) -> Result<Vec<Entry>> {
    const LOOKAHEAD: usize = 8;
    let compared = |img: i64, col: usize, after_image: bool| {
        reading == Reading::Replay && !after_image && reader.outside_key(img, col)
    };
    let shape = crate::db::RunShape {
        limit: limit + LOOKAHEAD,
        bytes,
        digest: &compared,
    };
    let crate::db::Run {
        entries: mut page,
        more,
    } = target.journal().journal_run(after, boundary, &shape)?;
    // Entries read whole; any after them are only looked at.
    let within = page.len();
    if more && within < limit + LOOKAHEAD {
        // Cut by its bytes: the next few entries, every large value read
        // as its digest, show whether the last one is the first of a pair
        // to put in causal order.
        let last = page.last().map_or(after, |e| e.seq);
        let looked = |_: i64, _: usize, _: bool| true;
        let ahead = crate::db::RunShape {
            limit: LOOKAHEAD,
            bytes: usize::MAX,
            digest: &looked,
        };
        page.extend(
            target
                .journal()
                .journal_run(last, boundary, &ahead)?
                .entries,
        );
    }
    let complete = !more;
    let mut run: Vec<Entry> = page
        .into_iter()
        .map(|e| reader.entry(spec, target, e))
        .collect::<Result<_>>()?;
    causal_order(&mut run);
    if complete && run.len() <= limit {
        return Ok(run);
    }
    let seqs: Vec<i64> = run.iter().map(|e| e.seq).collect();
    let cut = prefix_cut(&seqs, limit.min(within));
    if cut > within {
        // A pair to put in causal order straddles the entries read whole:
        // those up to the end of the pair, read whole.
        return run_within(
            spec,
            target,
            reader,
            after,
            boundary,
            cut,
            usize::MAX,
            reading,
        );
    }
    run.truncate(cut);
    Ok(run)
}

/// Where to cut a run whose entries have `seqs` (in the order they
/// replay): the longest cut of at most `cap` entries whose seqs are the
/// smallest ones, so that the applied set stays a prefix of the journal;
/// failing that (a pair put in causal order straddles `cap`), the shortest
/// longer one.
fn prefix_cut(seqs: &[i64], cap: usize) -> usize {
    let mut sorted = seqs.to_vec();
    sorted.sort_unstable();
    let mut max = i64::MIN;
    let mut best = None;
    for (k, &seq) in seqs.iter().enumerate() {
        max = max.max(seq);
        let valid = max == sorted[k];
        if valid && (k < cap || best.is_none()) {
            best = Some(k + 1);
        }
        if valid && k + 1 >= cap {
            break;
        }
    }
    best.unwrap_or(seqs.len())
}

/// Puts each pair of entries of one row that the journal holds out of the
/// order they happened in (the second's after-image is the first's
/// before-image) in that order.
fn causal_order(run: &mut [Entry]) {
    let mut swapped = true;
    while swapped {
        swapped = false;
        for i in 0..run.len().saturating_sub(1) {
            let (a, b) = (&run[i], &run[i + 1]);
            if a.table == b.table
                && a.unrecorded == b.unrecorded
                && a.before.is_some()
                && b.after == a.before
                && a.after != b.before
            {
                run.swap(i, i + 1);
                swapped = true;
            }
        }
    }
}

/// The runs a [`RunsAhead`] thread reads, each entry with its seq.
type Runs<T> = std::sync::mpsc::Receiver<Result<Vec<(i64, T)>>>;

/// The runs of [`next_run`], read ahead on their own thread over a second
/// connection to the target, so that reading the journal overlaps with
/// applying the run before.
pub struct RunsAhead<'scope, 'env, T> {
    scope: &'scope std::thread::Scope<'scope, 'env>,
    spec: &'env Spec,
    boundary: i64,
    limit: usize,
    /// What the thread makes of each entry, beside its seq.
    map: fn(&Spec, Entry) -> T,
    /// The seq the next run from the thread comes after.
    from: i64,
    runs: Runs<T>,
    /// Runs handed back once applied, freed on the reading thread.
    spent: std::sync::mpsc::Sender<Vec<T>>,
}

impl<'scope, 'env, T: Send + 'scope> RunsAhead<'scope, 'env, T> {
    /// Starts reading the runs after `after`, each entry made into what
    /// `map` makes of it on the reading thread.
    pub fn start(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        spec: &'env Spec,
        after: i64,
        boundary: i64,
        limit: usize,
        map: fn(&Spec, Entry) -> T,
    ) -> Self {
        let (runs, spent) = Self::spawn(scope, spec, after, boundary, limit, map);
        RunsAhead {
            scope,
            spec,
            boundary,
            limit,
            map,
            from: after,
            runs,
            spent,
        }
    }

    fn spawn(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        spec: &'env Spec,
        mut after: i64,
        boundary: i64,
        limit: usize,
        map: fn(&Spec, Entry) -> T,
    ) -> (Runs<T>, std::sync::mpsc::Sender<Vec<T>>) {
        // Two runs ahead: one being applied, one waiting.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (spent_tx, spent) = std::sync::mpsc::channel::<Vec<T>>();
        scope.spawn(move || {
            let read = || -> Result<(Db, Reader)> {
                let target = Db::open(&spec.target, Access::Read, Side::Target)?;
                let reader = Reader::new(spec, &target)?;
                Ok((target, reader))
            };
            let (target, reader) = match read() {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let (mut sent, mut back) = (0u64, 0u64);
            loop {
                let mut large = false;
                let run = next_run(
                    spec,
                    &target,
                    &reader,
                    after,
                    boundary,
                    limit,
                    Reading::Replay,
                )
                .map(|r| {
                    large = r.iter().any(Entry::holds_large);
                    r.into_iter()
                        .map(|e| (e.seq, map(spec, e)))
                        .collect::<Vec<_>>()
                });
                let end = match &run {
                    Ok(r) if !r.is_empty() => {
                        after = r.iter().map(|(seq, _)| *seq).max().unwrap_or(after);
                        false
                    }
                    _ => true,
                };
                // The applier hung up (it stopped, or starts again elsewhere).
                if tx.send(run).is_err() || end {
                    return;
                }
                sent += 1;
                // At most the run applied since the last send: each is freed
                // here, by the thread whose allocator made it.
                while let Ok(applied) = spent.try_recv() {
                    drop(applied);
                    back += 1;
                }
                // A run holding a large value is not read past until it is
                // applied and handed back, so that the applier's writes and
                // the next large value read are never in memory together.
                // The applier hands every run back, or hangs up.
                while large && back < sent {
                    match spent.recv() {
                        Ok(applied) => {
                            drop(applied);
                            back += 1;
                        }
                        Err(_) => return,
                    }
                }
            }
        });
        (rx, spent_tx)
    }

    /// Hands back a run once applied, to be freed on the reading thread:
    /// freeing a thousand changes made there took the applying thread about
    /// a seventh of its time (glibc returns each block to the arena of the
    /// thread that allocated it, under that arena's lock).
    pub fn give_back(&self, applied: Vec<T>) {
        // The thread has stopped: the run is freed here instead.
        let _ = self.spent.send(applied);
    }

    /// Runs of up to `limit` entries from now on, the next one after
    /// `after` read again: a run widened to reach a record's next write
    /// ([`crate::replay::bridge`]), or narrowed back.
    pub fn resize(&mut self, after: i64, limit: usize) {
        self.limit = limit;
        (self.runs, self.spent) =
            Self::spawn(self.scope, self.spec, after, self.boundary, limit, self.map);
        self.from = after;
    }

    /// How many entries a run holds at most.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The run after `after`: the one read ahead when it follows the last
    /// run handed out; otherwise the thread starts again from `after` (a
    /// run to be read again, or another replay that committed first).
    pub fn next(&mut self, after: i64) -> Result<Vec<(i64, T)>> {
        if after != self.from {
            (self.runs, self.spent) = Self::spawn(
                self.scope,
                self.spec,
                after,
                self.boundary,
                self.limit,
                self.map,
            );
        }
        let run = self
            .runs
            .recv()
            .map_err(|_| anyhow::anyhow!("the journal reader stopped"))??;
        self.from = run.iter().map(|(seq, _)| *seq).max().unwrap_or(after);
        Ok(run)
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, causal_order, prefix_cut};
    use crate::db::Op;
    use crate::value::{Row, Value};

    fn row(v: i64) -> Option<Row> {
        Some(vec![Value::Integer(1), Value::Integer(v)])
    }

    fn update(seq: i64, before: i64, after: i64) -> Entry {
        Entry {
            seq,
            table: 0,
            op: Op::Update,
            before: row(before),
            after: row(after),
            unrecorded: Vec::new(),
        }
    }

    #[test]
    fn a_cut_keeps_the_run_a_prefix_of_the_journal() {
        assert_eq!(prefix_cut(&[1, 2, 3, 4], 2), 2);
        assert_eq!(prefix_cut(&[1, 2, 3], 10), 3);
        // 3 and 2 swapped into causal order: a cut between them would leave
        // seq 2 out of a run that holds 3.
        assert_eq!(prefix_cut(&[1, 3, 2, 4], 2), 1);
        // Nothing shorter keeps the prefix: the shortest longer cut.
        assert_eq!(prefix_cut(&[3, 2, 1, 4], 1), 3);
    }

    #[test]
    fn a_nested_write_journaled_first_is_put_after_the_write_that_fired_it() {
        // The application's update A→B fired a touch trigger B→C, which
        // SQLite journaled first.
        let mut run = vec![update(1, 2, 3), update(2, 1, 2)];
        causal_order(&mut run);
        assert_eq!(run.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 1]);
        // Images that do not prove it stay as the journal holds them.
        let mut plain = vec![update(1, 1, 2), update(2, 2, 3)];
        causal_order(&mut plain);
        assert_eq!(plain.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
        // A write and its undo (A→B, B→A) prove no order either.
        let mut undo = vec![update(1, 1, 2), update(2, 2, 1)];
        causal_order(&mut undo);
        assert_eq!(undo.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
    }
}
