//! A feed file: read line by line (memory holds a line, never the feed),
//! and validated whole before anything is written — every line valid,
//! deliveries contiguous and of one feed, positions consecutive — into the
//! deliveries it holds, each with its digest.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{Line, Rejection, parse_line};
use crate::spec::Spec;
use crate::value::key_json;

/// One delivery as found in the file.
#[derive(Clone, Debug, Serialize)]
pub struct DeliveryInfo {
    pub feed: String,
    pub delivery: String,
    pub first_position: i64,
    pub last_position: i64,
    pub first_line: u64,
    pub last_line: u64,
    pub digest: String,
}

/// Reads a feed file line by line, handing each validated line to `f`.
pub fn read_lines(
    path: &Path,
    spec: &Spec,
    mut f: impl FnMut(Result<Line, Rejection>) -> Result<bool>,
) -> Result<()> {
    let file =
        std::fs::File::open(path).with_context(|| format!("opening feed {}", path.display()))?;
    let tables: HashMap<&str, usize> = spec
        .tables
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let mut n = 0u64;
    for text in BufReader::new(file).lines() {
        n += 1;
        let text = match text {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let r = Rejection {
                    line: n,
                    position: None,
                    key: None,
                    field: None,
                    reason: "not valid UTF-8".into(),
                };
                if !f(Err(r))? {
                    return Ok(());
                }
                continue;
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("reading feed {} at line {n}", path.display()));
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        if !f(parse_line(spec, &tables, n, &text))? {
            break;
        }
    }
    Ok(())
}

/// What pass one found of a feed file.
pub enum Validated {
    /// Every line valid: the deliveries in order.
    Deliveries(Vec<DeliveryInfo>),
    /// The lines refused (at most the number asked for).
    Rejected(Vec<Rejection>),
}

/// Pass one: every line valid, deliveries contiguous and single-feed,
/// positions consecutive within a delivery.
pub fn validate(path: &Path, spec: &Spec, max_errors: usize) -> Result<Validated> {
    let mut errors = Vec::new();
    let mut found = 0usize;
    let mut deliveries: Vec<DeliveryInfo> = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut hasher = Sha256::new();
    let mut push = |errors: &mut Vec<Rejection>, r: Rejection| {
        found += 1;
        if errors.len() < max_errors {
            errors.push(r);
        }
    };
    read_lines(path, spec, |l| {
        let l = match l {
            Ok(l) => l,
            Err(r) => {
                push(&mut errors, r);
                return Ok(true);
            }
        };
        let at = |reason: String, field: &str| at(&l, reason, field);
        match deliveries.last_mut() {
            Some(d) if d.delivery == l.delivery => {
                if let Some(r) = out_of_place(d, &l) {
                    push(&mut errors, r);
                }
                d.last_position = l.position;
                d.last_line = l.line;
            }
            _ => {
                if let Some(d) = deliveries.last_mut() {
                    d.digest = hex::encode(std::mem::take(&mut hasher).finalize());
                }
                if let Some(first) = seen.insert(l.delivery.clone(), l.line) {
                    push(
                        &mut errors,
                        at(
                            format!(
                                "delivery '{}' appears twice in the file (first at line {first}); a delivery's lines must be together",
                                l.delivery
                            ),
                            "delivery",
                        ),
                    );
                }
                deliveries.push(DeliveryInfo {
                    feed: l.feed.clone(),
                    delivery: l.delivery.clone(),
                    first_position: l.position,
                    last_position: l.position,
                    first_line: l.line,
                    last_line: l.line,
                    digest: String::new(),
                });
            }
        }
        hasher.update(l.canonical.as_bytes());
        hasher.update(b"\n");
        Ok(true)
    })?;
    if let Some(d) = deliveries.last_mut() {
        d.digest = hex::encode(hasher.finalize());
    }
    if found > 0 {
        return Ok(Validated::Rejected(errors));
    }
    if deliveries.is_empty() {
        bail!("feed {} holds no changes", path.display());
    }
    Ok(Validated::Deliveries(deliveries))
}

/// A rejection of line `l`, pointing at `field`.
fn at(l: &Line, reason: String, field: &str) -> Rejection {
    Rejection {
        line: l.line,
        position: Some(l.position),
        key: Some(key_json(&l.change.key)),
        field: Some(field.into()),
        reason,
    }
}

/// What is wrong with line `l` where it continues delivery `d`: another
/// feed, or a position that does not follow.
fn out_of_place(d: &DeliveryInfo, l: &Line) -> Option<Rejection> {
    if d.feed != l.feed {
        Some(at(
            l,
            format!(
                "delivery '{}' mixes feeds '{}' and '{}'; a delivery belongs to one feed",
                l.delivery, d.feed, l.feed
            ),
            "feed",
        ))
    } else if d.last_position.checked_add(1) != Some(l.position) {
        Some(at(
            l,
            format!(
                "position {} follows {} in delivery '{}'; positions must be consecutive",
                l.position, d.last_position, l.delivery
            ),
            "position",
        ))
    } else {
        None
    }
}
