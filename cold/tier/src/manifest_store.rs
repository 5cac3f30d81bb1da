//! Loading and committing a partition's manifest in object storage.
//!
//! Commits are create-only puts of `manifest/{seq:020}.delta` objects: the sequence
//! number is the fencing token. Two writers cannot both create the same sequence
//! number; the loser learns it was fenced, reloads, and stops writing until it is
//! leader again. Every [`SNAPSHOT_EVERY`] deltas the committer writes a snapshot and
//! deletes the deltas and snapshots a reader no longer needs, so a load reads one
//! snapshot and at most that many deltas, and a commit writes one small object however
//! long the history is.

use std::sync::Arc;

use bytes::Bytes;
use strata_store::{BlobStore, ErrorKind, PutMode};

use crate::error::TierError;
use crate::layout::PartitionKey;
use crate::manifest::{self, Delta, Manifest, ManifestObject, ManifestOp};

/// How many deltas a snapshot may be followed by before the next one is written.
pub const SNAPSHOT_EVERY: u64 = 256;

/// Reads the newest manifest: the newest readable snapshot and the deltas after it, in
/// sequence. Lists the partition's manifest prefix (never done on a hot path: at
/// partition open, after a fencing, and for recovery).
pub async fn load(store: &Arc<dyn BlobStore>, key: &PartitionKey) -> Result<Manifest, TierError> {
    let prefix = key.manifest_prefix();
    let mut objects: Vec<ManifestObject> = store
        .list(&prefix)
        .await?
        .iter()
        .filter_map(|m| manifest::parse_object_name(m.path.rsplit('/').next().unwrap_or("")))
        .collect();
    objects.sort();
    let mut snapshots: Vec<u64> = objects
        .iter()
        .filter_map(|o| {
            if let ManifestObject::Snapshot(s) = o {
                Some(*s)
            } else {
                None
            }
        })
        .collect();
    snapshots.sort_unstable();
    let mut deltas: Vec<u64> = objects
        .iter()
        .filter_map(|o| {
            if let ManifestObject::Delta(s) = o {
                Some(*s)
            } else {
                None
            }
        })
        .collect();
    deltas.sort_unstable();

    // The newest snapshot that reads cleanly (an older one if the newest is damaged).
    let mut base = Manifest::new();
    for &seq in snapshots.iter().rev() {
        let k = format!("{prefix}/{}", manifest::snapshot_name(seq));
        match store.get(&k).await {
            Ok(bytes) => match Manifest::decode_snapshot(&bytes) {
                Ok(m) if m.seq() == seq => {
                    base = m;
                    break;
                }
                Ok(_) | Err(_) => {
                    tracing::warn!(key = %k, "skipping an unreadable manifest snapshot")
                }
            },
            // Deleted by a concurrent compaction: an older one will do, or reload.
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let mut m = base;
    let from = m.seq();
    for seq in deltas.into_iter().filter(|s| *s > from) {
        if seq != m.seq() + 1 {
            tracing::warn!(partition = %key.prefix(), expected = m.seq() + 1, found = seq, "gap in the manifest deltas; ignoring the rest");
            break;
        }
        let k = format!("{prefix}/{}", manifest::delta_name(seq));
        let bytes = store.get(&k).await?;
        let delta = Delta::decode(&bytes)?;
        if delta.seq != seq {
            return Err(TierError::Corrupt {
                key: k,
                reason: format!("holds sequence {}", delta.seq),
            });
        }
        // A delta from a fenced leader that raced ahead (an Add under a stale epoch)
        // is skipped as a whole, as Kafka ignores a fenced leader's writes.
        let mut check = ManifestCheck::new(&m);
        match delta.ops.iter().try_for_each(|op| check.apply(op)) {
            Ok(()) => m.apply_delta(&delta)?,
            Err(crate::manifest::ManifestError::StaleEpoch { .. }) => {
                tracing::warn!(key = %k, "skipping a fenced leader's manifest delta");
                m.skip_delta(seq);
            }
            // An Add wholly below the remote start (brokers before this check could
            // re-upload a segment remote retention had just expired): it names no
            // record anyone may read, so skipping it loses nothing.
            Err(e @ crate::manifest::ManifestError::BelowStart { .. }) => {
                tracing::warn!(key = %k, error = %e, "skipping a manifest delta that adds an expired segment");
                m.skip_delta(seq);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(m)
}

/// Checks `ops` against `manifest` without copying it (a commit must not cost O(n)),
/// and returns the delta that commits them.
pub fn prepare(manifest: &Manifest, ops: Vec<ManifestOp>) -> Result<Delta, TierError> {
    if ops
        .iter()
        .any(|op| matches!(op, ManifestOp::Replace { .. }))
    {
        // A replacement is checked against the segments themselves (a compaction pass
        // commits rarely: the copy is affordable there).
        let mut copy = manifest.clone();
        for op in &ops {
            copy.apply(op)?;
        }
    } else {
        let mut check = ManifestCheck::new(manifest);
        for op in &ops {
            check.apply(op)?;
        }
    }
    Ok(Delta {
        seq: manifest.seq() + 1,
        ops,
    })
}

/// Writes `delta` with a create-only put. [`TierError::Fenced`] when its sequence number
/// exists already with other content (another leader committed it).
pub async fn put_delta(
    store: &Arc<dyn BlobStore>,
    key: &PartitionKey,
    delta: &Delta,
) -> Result<(), TierError> {
    let k = format!(
        "{}/{}",
        key.manifest_prefix(),
        manifest::delta_name(delta.seq)
    );
    let bytes = Bytes::from(delta.encode());
    match store.put(&k, bytes.clone(), PutMode::Create).await {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            // Ours, if an ambiguous earlier attempt landed; someone else's otherwise.
            match store.get(&k).await {
                Ok(existing) if existing == bytes => {}
                _ => return Err(TierError::Fenced { seq: delta.seq }),
            }
        }
        Err(e) => return Err(e.into()),
    }
    metrics::counter!("strata_tier_manifest_commits_total").increment(1);
    Ok(())
}

/// Commits `ops` as the next delta and applies them to `manifest`; compacts every
/// [`SNAPSHOT_EVERY`] deltas.
pub async fn commit(
    store: &Arc<dyn BlobStore>,
    key: &PartitionKey,
    manifest: &mut Manifest,
    ops: Vec<ManifestOp>,
) -> Result<(), TierError> {
    let delta = prepare(manifest, ops)?;
    put_delta(store, key, &delta).await?;
    manifest.apply_delta(&delta)?;
    if needs_snapshot(manifest)
        && let Err(e) = compact(store, key, manifest).await
    {
        // A missing snapshot only makes loads read more deltas.
        tracing::warn!(partition = %key.prefix(), error = %e, "manifest compaction failed");
    }
    Ok(())
}

/// Whether the manifest's sequence calls for a snapshot.
pub fn needs_snapshot(manifest: &Manifest) -> bool {
    manifest.seq().is_multiple_of(SNAPSHOT_EVERY)
}

/// Writes a snapshot at the manifest's sequence and deletes what readers no longer need:
/// deltas covered by the previous snapshot, and snapshots older than it. (The previous
/// snapshot and the deltas after it stay, so a reader that listed before this compaction
/// still finds what it listed.)
pub async fn compact(
    store: &Arc<dyn BlobStore>,
    key: &PartitionKey,
    manifest: &Manifest,
) -> Result<(), TierError> {
    write_snapshot(
        store,
        key,
        manifest.seq(),
        Bytes::from(manifest.encode_snapshot()),
    )
    .await
}

/// Writes an encoded snapshot taken at `seq` and removes what it makes unnecessary.
pub async fn write_snapshot(
    store: &Arc<dyn BlobStore>,
    key: &PartitionKey,
    seq: u64,
    snapshot: Bytes,
) -> Result<(), TierError> {
    let prefix = key.manifest_prefix();
    let k = format!("{prefix}/{}", manifest::snapshot_name(seq));
    match store.put(&k, snapshot, PutMode::Create).await {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.into()),
    }
    let keep_from = seq.saturating_sub(SNAPSHOT_EVERY);
    for m in store.list(&prefix).await? {
        let name = m.path.rsplit('/').next().unwrap_or("");
        let doomed = match manifest::parse_object_name(name) {
            Some(ManifestObject::Delta(s)) => s <= keep_from,
            Some(ManifestObject::Snapshot(s)) => s < keep_from,
            None => false,
        };
        if doomed {
            store.delete(&m.path).await?;
        }
    }
    Ok(())
}

/// Validates ops against a manifest without copying it (a commit must not cost O(n)).
struct ManifestCheck {
    end: Option<i64>,
    start: i64,
    max_epoch: i32,
}

impl ManifestCheck {
    fn new(m: &Manifest) -> Self {
        ManifestCheck {
            end: m.end_offset(),
            start: m.start_bound(),
            max_epoch: m.max_epoch(),
        }
    }

    fn apply(&mut self, op: &ManifestOp) -> Result<(), crate::manifest::ManifestError> {
        use crate::manifest::ManifestError as E;
        match op {
            ManifestOp::Add(s) => {
                if s.next_offset <= s.base_offset {
                    return Err(E::EmptySegment {
                        base: s.base_offset,
                        next: s.next_offset,
                    });
                }
                if s.leader_epoch < self.max_epoch {
                    return Err(E::StaleEpoch {
                        epoch: s.leader_epoch,
                        max_epoch: self.max_epoch,
                    });
                }
                if let Some(end) = self.end {
                    if s.base_offset != end {
                        return Err(E::NotContiguous {
                            base: s.base_offset,
                            next: s.next_offset,
                            end,
                        });
                    }
                } else if s.next_offset <= self.start {
                    return Err(E::BelowStart {
                        base: s.base_offset,
                        next: s.next_offset,
                        start: self.start,
                    });
                } else {
                    self.start = self.start.max(s.base_offset);
                }
                self.end = Some(s.next_offset);
                self.max_epoch = self.max_epoch.max(s.leader_epoch);
            }
            // Checked against a copy of the manifest instead (`prepare`).
            ManifestOp::Replace { .. } => {}
            ManifestOp::AdvanceStart { log_start_offset } => {
                self.start = self.start.max(*log_start_offset);
                // Every segment wholly below the start leaves (Manifest::apply).
                if self.end.is_some_and(|e| e <= self.start) {
                    self.end = None;
                }
            }
        }
        Ok(())
    }
}
