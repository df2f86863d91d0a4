//! A run of journal entries made into the changes replay writes: each
//! entry a change addressed by the key its row had before, both images in
//! the source's form; and a batch's changes with those of records touched
//! more than once folded into their net effect.

use crate::apply::{Change, Rule};
use crate::spec::Spec;
use crate::value::Row;

/// Turns one journal entry into a change in canonical form, addressed by
/// the key the row had before it (a key change moves it from there), with
/// both images in the source's form: made on the journal's reading thread,
/// so the applying one only writes.
pub fn to_change(spec: &Spec, e: crate::journal::Entry) -> Change {
    let t = &spec.tables[e.table];
    let k = t.key_len;
    let at = e
        .before
        .as_ref()
        .or(e.after.as_ref())
        .map(|r| r[..k].to_vec())
        .unwrap_or_default();
    let form = |r: &Option<crate::value::Row>| {
        r.as_ref()
            .map(|r| crate::apply::source_form(t, r, &e.unrecorded))
            .transpose()
    };
    let source_images = match (form(&e.before), form(&e.after)) {
        (Ok(b), Ok(a)) => Some((b, a)),
        // The applying thread meets the same refusal and reports it.
        _ => None,
    };
    Change {
        table: e.table,
        key: at,
        rule: Rule::Expect {
            before: e.before,
            revision: None,
        },
        after: e.after,
        tag: e.seq,
        source_images,
        entries: 1,
        unrecorded: e.unrecorded,
    }
}

/// A batch's changes with each write whose row cannot go back to the
/// source (`stuck`: the spec's checks, the reverse transform or the source
/// column refuse it) merged into the same record's next write in the batch,
/// which starts from that row: the row the application wrote for a moment
/// and then set right (a currency put back, a fraction of a second cut) is
/// never written, and the merged write goes from the row before it to the
/// row after the next one, at the next one's place. Only where both writes
/// leave the row under the key it had (an insert, or an update that keeps
/// its key: no other write can come between them at that key), and where no
/// trigger or rule of the source acts on the table (`fires`), which would
/// fire once less. A stuck write left without such a next write in the
/// batch stays, and the write refuses it (docs/journal.md, "Journal order").
pub fn bridge(
    spec: &Spec,
    changes: Vec<Change>,
    fires: &[bool],
    stuck: &mut dyn FnMut(&Change) -> anyhow::Result<bool>,
) -> anyhow::Result<Vec<Change>> {
    use std::collections::HashMap;
    if touched_once(spec, &changes) {
        return Ok(changes);
    }
    // How many writes of each record are still to come.
    let mut ahead: HashMap<Vec<u8>, usize> = HashMap::new();
    for c in &changes {
        *ahead.entry(key_of(spec, c, &c.key)).or_default() += 1;
    }
    let mut out: Vec<Option<Change>> = Vec::with_capacity(changes.len());
    // Per record, the stuck write waiting for its next one.
    let mut waiting: HashMap<Vec<u8>, usize> = HashMap::new();
    for mut c in changes {
        let id = key_of(spec, &c, &c.key);
        // In place: an update that keeps its key, or an insert.
        let in_place = matches!(c.rule, Rule::Expect { revision: None, .. })
            && c.after.as_ref().is_some_and(|a| key_of(spec, &c, a) == id);
        if let Some(p) = waiting.remove(&id)
            && in_place
            && let Some(prev) = out[p].take_if(|prev| {
                prev.unrecorded == c.unrecorded
                    && crate::apply::same_recorded(
                        before_of(&c).as_ref(),
                        prev.after.as_ref(),
                        &c.unrecorded,
                    )
            })
        {
            c = Change {
                rule: Rule::Expect {
                    before: before_of(&prev),
                    revision: None,
                },
                entries: prev.entries + c.entries,
                source_images: None,
                ..c
            };
        }
        let left = ahead.get_mut(&id).map_or(0, |n| {
            *n -= 1;
            *n
        });
        let quiet = !fires.get(c.table).copied().unwrap_or(true);
        if left > 0 && in_place && quiet && stuck(&c)? {
            waiting.insert(id, out.len());
        }
        out.push(Some(c));
    }
    Ok(out.into_iter().flatten().collect())
}

/// A batch's changes in journal order, but for the records that order
/// cannot write one by one: those whose keys the target passed through
/// two rows at once (two keys swapped in one `UPDATE` under a deferrable
/// key, a key moved onto one whose row moves away later). Only such a
/// group is folded into its net effect: each key goes from the row it held
/// before the batch to the row it holds after, written in place where it
/// holds one before and after. Every other change is written as the
/// application wrote it, so a source trigger left to fire fires once per
/// journaled write and a UNIQUE value passed through a temporary one
/// (`a → tmp`, `b → a`, `tmp → b`) is never taken twice at once
/// (docs/journal.md, "Journal order").
///
/// The rows each change removes and adds are followed as a set, in seq
/// order: a change removes its before-image (a row present at the start of
/// the batch, unless an earlier change added it) and adds its after-image.
/// The fold is made only where that proves one row per key at the start
/// and at the end.
pub fn fold(spec: &Spec, changes: Vec<Change>, fires: &[bool]) -> Vec<Change> {
    use std::collections::HashMap;
    if touched_once(spec, &changes) {
        return changes;
    }
    // The keys each change touches.
    let keys = keys_touched(spec, &changes);
    let mut touched: HashMap<&[u8], usize> = HashMap::new();
    for k in keys.iter().flatten() {
        *touched.entry(k.as_slice()).or_default() += 1;
    }
    if touched.values().all(|&n| n == 1) {
        return changes;
    }
    // Groups of changes linked by the keys they share (union-find, each
    // group's root its first change).
    let groups = groups(changes.len(), &keys);
    let mut out: Vec<Option<Vec<Change>>> = (0..changes.len()).map(|_| None).collect();
    for (lead, members) in &groups {
        if members.len() < 2 || !needs_fold(spec, &changes, members, fires) {
            continue;
        }
        let Some(mut folded) = fold_group(spec, &changes, &keys, members) else {
            continue;
        };
        if let Some(f) = folded.first_mut() {
            f.entries = members.iter().map(|&i| changes[i].entries).sum();
        }
        let last = members.iter().copied().max().unwrap_or(*lead);
        let arrive = folded
            .iter()
            .position(|c| c.after.is_some())
            .unwrap_or(folded.len());
        let arrivals = folded.split_off(arrive);
        for &i in members {
            out[i] = Some(Vec::new());
        }
        out[*lead] = Some(folded);
        out[last].get_or_insert_with(Vec::new).extend(arrivals);
    }
    changes
        .into_iter()
        .zip(out)
        .flat_map(|(c, f)| f.unwrap_or_else(|| vec![c]))
        .collect()
}

/// A record's identity: its table and key.
fn key_of(spec: &Spec, c: &Change, r: &Row) -> Vec<u8> {
    let k = spec.tables[c.table].key_len;
    let mut id = c.table.to_le_bytes().to_vec();
    id.extend(crate::value::key_json(&r[..k]).to_string().into_bytes());
    id
}

/// The row a change expects to find.
fn before_of(c: &Change) -> Option<Row> {
    match &c.rule {
        Rule::Expect { before, .. } => before.clone(),
        _ => None,
    }
}

/// Whether no record is touched twice, as far as a hash of each key says.
fn touched_once(spec: &Spec, changes: &[Change]) -> bool {
    // Most batches touch each record once: found without allocating, by a
    // hash of each key a change touches; only a repeated hash (a record
    // touched twice, or a collision) goes on to the exact comparison below.
    let hash = |table: usize, key: &[crate::value::Value]| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        table.hash(&mut h);
        for v in key {
            match v.as_cell() {
                crate::value::CellRef::Null => 0u8.hash(&mut h),
                crate::value::CellRef::Integer(i) => (1u8, i).hash(&mut h),
                crate::value::CellRef::Real(r) => (2u8, r.to_bits()).hash(&mut h),
                crate::value::CellRef::Text(t) => (3u8, t).hash(&mut h),
                crate::value::CellRef::Blob(b) => (4u8, b).hash(&mut h),
                crate::value::CellRef::Digested(d) => (5u8, d.len, d.sha256).hash(&mut h),
            }
        }
        h.finish()
    };
    let mut seen: std::collections::HashSet<u64> =
        std::collections::HashSet::with_capacity(changes.len() * 2);
    let mut repeated = false;
    for c in changes {
        let k = spec.tables[c.table].key_len;
        let from = hash(c.table, &c.key[..k.min(c.key.len())]);
        repeated |= !seen.insert(from);
        if let Some(a) = &c.after {
            let to = hash(c.table, &a[..k]);
            repeated |= to != from && !seen.insert(to);
        }
        if repeated {
            break;
        }
    }
    !repeated
}

/// The identities of the records each change touches: its key, and the
/// key it moves to.
fn keys_touched(spec: &Spec, changes: &[Change]) -> Vec<Vec<Vec<u8>>> {
    changes
        .iter()
        .map(|c| {
            let mut ks = vec![{
                let k = spec.tables[c.table].key_len;
                let mut id = c.table.to_le_bytes().to_vec();
                id.extend(
                    crate::value::key_json(&c.key[..k.min(c.key.len())])
                        .to_string()
                        .into_bytes(),
                );
                id
            }];
            if let Some(a) = &c.after {
                let to = key_of(spec, c, a);
                if to != ks[0] {
                    ks.push(to);
                }
            }
            ks
        })
        .collect()
}

/// The groups of `n` changes linked by the keys they share, by their first
/// change.
fn groups(n: usize, keys: &[Vec<Vec<u8>>]) -> std::collections::HashMap<usize, Vec<usize>> {
    use std::collections::HashMap;
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    let mut first: HashMap<&[u8], usize> = HashMap::new();
    for (i, ks) in keys.iter().enumerate() {
        for k in ks {
            match first.get(k.as_slice()) {
                Some(&j) => {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    parent[a.max(b)] = a.min(b);
                }
                None => {
                    first.insert(k.as_slice(), i);
                }
            }
        }
    }
    let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..n {
        groups.entry(root(&mut parent, i)).or_default().push(i);
    }
    groups
}

/// The net effect of a group of changes, in the order to write it; `None`
/// when the rows it removes and adds do not prove one row per key at the
/// start and at the end.
fn fold_group(
    spec: &Spec,
    changes: &[Change],
    keys: &[Vec<Vec<u8>>],
    members: &[usize],
) -> Option<Vec<Change>> {
    let (start, now) = rows_through(spec, changes, members)?;
    let unrecorded = &changes[members[0]].unrecorded;
    // Every key the group touched, in the order first touched.
    let mut order: Vec<(&[u8], usize)> = Vec::new();
    for &i in members {
        for k in &keys[i] {
            if !order.iter().any(|o| o.0 == k.as_slice()) {
                order.push((k.as_slice(), i));
            }
        }
    }
    let mut folded: Vec<Change> = Vec::new();
    for (k, i) in order {
        let pre = start.iter().find(|s| s.0 == k);
        let post = now.iter().find(|n| n.0 == k).map(|n| n.1.clone());
        let c = &changes[pre.map_or(i, |p| p.2)];
        let t = &spec.tables[c.table];
        let key = match (pre, &post) {
            (Some(p), _) => p.1[..t.key_len].to_vec(),
            (None, Some(a)) => a[..t.key_len].to_vec(),
            // Added and removed again within the batch: the source must
            // not hold it, as at the start.
            (None, None) => {
                let x = &changes[i];
                let r = before_of(x).or_else(|| x.after.clone()).unwrap_or_default();
                if key_of(spec, x, &r) == k {
                    r[..t.key_len].to_vec()
                } else {
                    x.after
                        .as_ref()
                        .map_or_else(Vec::new, |a| a[..t.key_len].to_vec())
                }
            }
        };
        folded.push(Change {
            table: c.table,
            key,
            rule: Rule::Expect {
                before: pre.map(|p| p.1.clone()),
                revision: None,
            },
            after: post,
            tag: c.tag,
            source_images: None,
            entries: 0,
            unrecorded: unrecorded.clone(),
        });
    }
    // Rows leave where the group's first change stood and arrive where
    // its last one did: a change of another record between them (the
    // delete of a row whose UNIQUE value arrives here, a child of a row
    // written here) keeps its place between the two. Deletes, then
    // rewrites in place, then inserts.
    folded.sort_by_key(|c| match (&c.rule, &c.after) {
        (_, None) => 0,
        (
            Rule::Expect {
                before: Some(_), ..
            },
            Some(_),
        ) => 1,
        _ => 2,
    });
    Some(folded)
}

/// Whether a group's changes must be written by their net effect: written
/// one by one, in journal order, they would put a row under a key another
/// row still holds (the one case the target took, under a deferrable key,
/// that a source checking its key statement by statement refuses); or they
/// delete a key the source holds and insert it again (a delete and
/// re-insert in one transaction), which a source whose foreign keys are
/// checked at once refuses while other rows refer to it — folded only where
/// no trigger or rule of the source acts on the table (`fires`), since its
/// net effect (an update in place) fires other triggers than the
/// application's delete and insert did; only where the group is that
/// delete and that insert, since the net effect of more would skip values
/// the journal holds that the source may refuse (a note its CHECK does not
/// take, written and then changed again), which written one by one fail
/// the replay; and only where no write of another row of the table comes
/// between them: the update in place holds the deleted row's values until
/// the re-insert's place, so a row that took one of them in between (a
/// UNIQUE email the delete freed) would be refused.
fn needs_fold(spec: &Spec, changes: &[Change], members: &[usize], fires: &[bool]) -> bool {
    let Some((start, _)) = rows_through(spec, changes, members) else {
        return false;
    };
    let (first, last) = (members[0], members[members.len() - 1]);
    let table = changes[first].table;
    // A group's changes are all of one table: any other change of it in
    // their span writes another row.
    let alone = changes[first..=last]
        .iter()
        .filter(|c| c.table == table)
        .count()
        == members.len();
    let quiet = alone && members.len() == 2 && !fires.get(table).copied().unwrap_or(true);
    let held: Vec<Vec<u8>> = start.iter().map(|(k, _, _)| k.clone()).collect();
    let mut present: Present = start.into_iter().map(|(k, r, _)| (k, r)).collect();
    let mut freed: Vec<Vec<u8>> = Vec::new();
    for &i in members {
        let c = &changes[i];
        if let Some(b) = before_of(c)
            && let Some(p) = present.iter().position(|(_, r)| *r == b)
        {
            let (k, _) = present.remove(p);
            freed.push(k);
        }
        if let Some(a) = &c.after {
            let k = key_of(spec, c, a);
            if present.iter().any(|(taken, _)| *taken == k) {
                return true;
            }
            let inserted = before_of(c).is_none();
            if quiet && inserted && held.contains(&k) && freed.contains(&k) {
                return true;
            }
            present.push((k, a.clone()));
        }
    }
    false
}

/// Rows a batch found, by record: (identity, row, the first change naming it).
type Found = Vec<(Vec<u8>, Row, usize)>;
/// Rows present after a change, by record.
type Present = Vec<(Vec<u8>, Row)>;

/// The rows a group of changes found at the start of the batch (with the
/// first change naming each) and those present at its end, followed as a
/// set in seq order; `None` unless they prove one row per key at both.
fn rows_through(spec: &Spec, changes: &[Change], members: &[usize]) -> Option<(Found, Present)> {
    // start: the rows the batch found (key → row, first change naming
    // it); now: the rows present after each change.
    let mut start: Found = Vec::new();
    let mut now: Present = Vec::new();
    // Changes recorded with different columns (entries on both sides of
    // a `journal install` that added one) say nothing of each other's
    // missing columns: they are applied one by one.
    let unrecorded = &changes[members[0]].unrecorded;
    let mut proven = members
        .iter()
        .all(|&i| changes[i].unrecorded == *unrecorded);
    for &i in members {
        let c = &changes[i];
        if let Some(b) = before_of(c) {
            match now.iter().position(|(_, r)| *r == b) {
                Some(p) => {
                    now.remove(p);
                }
                None => {
                    let k = key_of(spec, c, &b);
                    if start.iter().any(|s| s.0 == k) {
                        proven = false;
                    }
                    start.push((k, b, i));
                }
            }
        }
        if let Some(a) = &c.after {
            now.push((key_of(spec, c, a), a.clone()));
        }
    }
    let mut ends: Vec<&[u8]> = now.iter().map(|(k, _)| k.as_slice()).collect();
    ends.sort();
    if !proven || ends.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    Some((start, now))
}

/// The records a change touches: its key, and the key it moves to.
pub fn record_keys(spec: &Spec, c: &Change) -> Vec<(usize, String)> {
    let k = spec.tables[c.table].key_len;
    let mut out = vec![(c.table, crate::value::key_json(&c.key).to_string())];
    if let Some(a) = &c.after {
        let to = crate::value::key_json(&a[..k]).to_string();
        if to != out[0].1 {
            out.push((c.table, to));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{bridge, fold, record_keys};
    use crate::apply::{Change, Rule};
    use crate::spec::Spec;
    use crate::value::{Row, Value};

    fn spec() -> (tempfile::TempDir, Spec) {
        crate::spec::in_folder(
            "[[tables]]\nname = \"t\"\nkey = [\"id\"]\n\
             [[tables.columns]]\nsource = \"v\"\ntarget = \"v\"\n",
        )
    }

    fn row(id: i64, v: &str) -> Row {
        vec![Value::Integer(id), Value::Text(v.into())]
    }

    fn change(seq: i64, before: Option<Row>, after: Option<Row>) -> Change {
        let key = before.as_ref().or(after.as_ref()).unwrap()[..1].to_vec();
        Change {
            table: 0,
            key,
            rule: Rule::Expect {
                before,
                revision: None,
            },
            after,
            tag: seq,
            source_images: None,
            entries: 1,
            unrecorded: Vec::new(),
        }
    }

    fn before_of(c: &Change) -> Option<Row> {
        match &c.rule {
            Rule::Expect { before, .. } => before.clone(),
            _ => panic!("not a replay change"),
        }
    }

    /// A row holding `"bad"` cannot go back.
    fn bad(c: &Change) -> anyhow::Result<bool> {
        Ok(c.after
            .as_ref()
            .is_some_and(|a| a[1] == Value::Text("bad".into())))
    }

    #[test]
    fn a_row_set_right_by_the_next_write_is_merged_into_it() {
        let (_d, spec) = spec();
        let changes = vec![
            change(1, None, Some(row(1, "bad"))),
            change(2, None, Some(row(2, "x"))),
            change(3, Some(row(1, "bad")), Some(row(1, "bad"))),
            change(4, Some(row(1, "bad")), Some(row(1, "good"))),
            change(5, Some(row(2, "x")), Some(row(2, "bad"))),
        ];
        let out = bridge(&spec, changes, &[false], &mut bad).unwrap();
        let tags: Vec<i64> = out.iter().map(|c| c.tag).collect();
        assert_eq!(
            tags,
            [2, 4, 5],
            "1 and 3 merged into 4; 5 has no next write"
        );
        assert_eq!(before_of(&out[1]), None);
        assert_eq!(out[1].after, Some(row(1, "good")));
        assert_eq!(out[1].entries, 3);
    }

    #[test]
    fn a_row_is_not_merged_where_a_source_trigger_fires_or_the_chain_breaks() {
        let (_d, spec) = spec();
        let changes = || {
            vec![
                change(1, Some(row(1, "a")), Some(row(1, "bad"))),
                change(2, Some(row(1, "bad")), Some(row(1, "good"))),
            ]
        };
        let out = bridge(&spec, changes(), &[true], &mut bad).unwrap();
        assert_eq!(out.len(), 2, "a trigger of the source fires for each write");
        let broken = vec![
            change(1, Some(row(1, "a")), Some(row(1, "bad"))),
            change(2, Some(row(1, "other")), Some(row(1, "good"))),
        ];
        let out = bridge(&spec, broken, &[false], &mut bad).unwrap();
        assert_eq!(out.len(), 2, "the next write does not start from the row");
        let out = bridge(&spec, changes(), &[false], &mut bad).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(before_of(&out[0]), Some(row(1, "a")));
    }

    #[test]
    fn records_touched_once_are_left_exactly_as_they_were() {
        let (_d, spec) = spec();
        let changes = vec![
            change(1, Some(row(1, "a")), Some(row(1, "b"))),
            change(2, None, Some(row(2, "c"))),
        ];
        let out = fold(&spec, changes, &[false]);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].tag, out[1].tag), (1, 2));
        assert!(out.iter().all(|c| c.entries == 1));
    }

    #[test]
    fn a_record_updated_twice_in_a_batch_is_written_twice_in_journal_order() {
        let (_d, spec) = spec();
        let changes = vec![
            change(1, Some(row(1, "a")), Some(row(1, "b"))),
            change(2, Some(row(1, "b")), Some(row(1, "c"))),
        ];
        let out = fold(&spec, changes, &[false]);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!((out[0].tag, out[1].tag), (1, 2));
        assert_eq!(before_of(&out[0]), Some(row(1, "a")));
        assert_eq!(out[1].after, Some(row(1, "c")));
        assert!(out.iter().all(|c| c.entries == 1));
    }

    #[test]
    fn a_key_moved_onto_a_freed_one_keeps_its_order() {
        let (_d, spec) = spec();
        let changes = vec![
            change(3, Some(row(2, "x")), None),
            change(4, Some(row(3, "y")), Some(row(2, "y"))),
        ];
        let out = fold(&spec, changes, &[false]);
        let tags: Vec<i64> = out.iter().map(|c| c.tag).collect();
        assert_eq!(tags, vec![3, 4]);
        assert!(out.iter().all(|c| c.entries == 1));
    }

    #[test]
    fn a_delete_and_re_insert_is_folded_only_where_no_source_trigger_fires() {
        let (_d, spec) = spec();
        let changes = || {
            vec![
                change(1, Some(row(1, "a")), None),
                change(2, None, Some(row(1, "b"))),
            ]
        };
        // A trigger of the source acts on the table: each write its own.
        let out = fold(&spec, changes(), &[true]);
        assert_eq!(out.iter().map(|c| c.tag).collect::<Vec<_>>(), vec![1, 2]);
        // None does: one update in place, which no foreign key of the
        // source checked at once refuses.
        let out = fold(&spec, changes(), &[false]);
        let written: Vec<&Change> = out.iter().filter(|c| c.entries > 0).collect();
        assert_eq!(written.len(), 1, "{out:?}");
        assert_eq!(written[0].entries, 2);
        assert_eq!(before_of(written[0]), Some(row(1, "a")));
        assert_eq!(written[0].after, Some(row(1, "b")));
    }

    #[test]
    fn a_delete_and_re_insert_with_a_write_of_another_row_between_is_not_folded() {
        let (_d, spec) = spec();
        // Row 2 takes the value row 1's delete freed, then row 1 comes back
        // with row 2's: an update of row 1 in place at either end would
        // find the value still held.
        let changes = vec![
            change(1, Some(row(1, "a")), None),
            change(2, Some(row(2, "b")), Some(row(2, "a"))),
            change(3, None, Some(row(1, "b"))),
        ];
        let out = fold(&spec, changes, &[false]);
        assert_eq!(
            out.iter().map(|c| c.tag).collect::<Vec<_>>(),
            vec![1, 2, 3],
            "{out:?}"
        );
        assert!(out.iter().all(|c| c.entries == 1), "{out:?}");
    }

    #[test]
    fn a_delete_and_re_insert_written_again_after_is_not_folded() {
        let (_d, spec) = spec();
        // Folded, the source would never be asked to hold "long", which
        // it may refuse.
        let changes = vec![
            change(1, Some(row(1, "a")), None),
            change(2, None, Some(row(1, "long"))),
            change(3, Some(row(1, "long")), Some(row(1, "b"))),
        ];
        let out = fold(&spec, changes, &[false]);
        assert_eq!(
            out.iter().map(|c| c.tag).collect::<Vec<_>>(),
            vec![1, 2, 3],
            "{out:?}"
        );
        assert!(out.iter().all(|c| c.entries == 1), "{out:?}");
    }

    #[test]
    fn two_keys_swapped_in_one_update_are_written_by_their_net_effect() {
        let (_d, spec) = spec();
        // `UPDATE t SET id = 3 - id` under a deferrable key: row 1 moves
        // onto 2 while 2 still holds its row, which moves onto 1 after.
        let changes = vec![
            change(1, Some(row(1, "a")), Some(row(2, "a"))),
            change(2, Some(row(2, "b")), Some(row(1, "b"))),
        ];
        let out = fold(&spec, changes, &[false]);
        assert_eq!(out.iter().map(|c| c.entries).sum::<u64>(), 2, "{out:?}");
        // Written in place: key 1 from a to b, key 2 from b to a.
        let at = |k: i64| {
            out.iter()
                .find(|c| c.key == vec![Value::Integer(k)])
                .unwrap_or_else(|| panic!("no change at {k}: {out:?}"))
        };
        assert_eq!(before_of(at(1)), Some(row(1, "a")));
        assert_eq!(at(1).after, Some(row(1, "b")));
        assert_eq!(before_of(at(2)), Some(row(2, "b")));
        assert_eq!(at(2).after, Some(row(2, "a")));
    }

    #[test]
    fn a_key_change_touches_both_records() {
        let (_d, spec) = spec();
        let c = change(1, Some(row(1, "a")), Some(row(5, "a")));
        let keys = record_keys(&spec, &c);
        assert_eq!(keys, vec![(0, "[1]".to_string()), (0, "[5]".to_string())]);
    }
}
