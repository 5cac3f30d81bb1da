//! What the group and transaction coordinators share. Each keeps the state of the
//! partitions of its internal topic (`__consumer_offsets`, `__transaction_state`) that
//! this broker leads: loaded from the partition's log when it becomes leader, unloaded
//! when it stops leading, and written by appending to the partition as its leader and
//! waiting for the in-sync replicas before the change takes effect.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata_log::{Clock, LogError};
use strata_proto::batch::build::{NewRecord, batch};
use strata_proto::{Compression, ErrorCode, Offset};

use crate::partition::Partition;
use crate::replicas::ReplicaManager;

/// How long a coordinator's append waits for the in-sync replicas.
const APPEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The partitions of an internal topic a coordinator unloads and loads now.
#[derive(Debug, Default)]
pub(crate) struct Loads {
    /// Loaded, but no longer led here in the epoch they were loaded in (a newer epoch
    /// is loaded again).
    pub unload: Vec<i32>,
    /// Led here and not loaded in this epoch: (index, leader epoch, partition). Only
    /// once the high-water mark covers the log: what the previous leader acknowledged
    /// is committed here too.
    pub load: Vec<(i32, i32, Arc<Partition>)>,
}

/// What to unload and load of `topic`, given what is loaded (index, epoch).
pub(crate) fn loads(replicas: &ReplicaManager, topic: &str, loaded: &[(i32, i32)]) -> Loads {
    let led = replicas.led_partitions(topic);
    let unload = loaded
        .iter()
        .filter(|(p, epoch)| led.get(p) != Some(epoch))
        .map(|(p, _)| *p)
        .collect();
    let mut load = Vec::new();
    for (&index, &epoch) in &led {
        if loaded.iter().any(|&(p, e)| p == index && e == epoch) {
            continue;
        }
        let Some(p) = replicas.partition(topic, index) else {
            continue;
        };
        if p.high_watermark() < p.log().log_end() {
            continue;
        }
        load.push((index, epoch, p));
    }
    Loads { unload, load }
}

/// Reads a coordinator partition's local log from its start up to `end`, one read of
/// up to 1 MiB at a time: `on_read` gets each read's bytes (whole batches) and the
/// offset it started at.
pub(crate) fn read_log(
    p: &Partition,
    end: Offset,
    mut on_read: impl FnMut(&[u8], Offset),
) -> Result<(), LogError> {
    let mut at = p.log().local_start();
    while at < end {
        let r = p.read_local(at, 1 << 20)?;
        if r.data.is_empty() || r.next_offset <= at {
            break;
        }
        on_read(&r.data, at);
        at = r.next_offset;
    }
    Ok(())
}

/// Appends `records` (key, value or tombstone) as one batch to `p` as its leader and
/// waits (up to 5 s) for the in-sync replicas: the offset of the first record, or the
/// append's error (`Err(LogError)`) or the wait's code (`Ok(Err(code))`).
pub(crate) async fn append_and_wait(
    p: &Partition,
    clock: &dyn Clock,
    records: Vec<(Bytes, Option<Bytes>)>,
) -> Result<Result<Offset, ErrorCode>, LogError> {
    let now = clock.now_ms();
    let recs: Vec<NewRecord> = records
        .into_iter()
        .map(|(k, v)| NewRecord {
            key: Some(k),
            value: v,
            headers: vec![],
            timestamp: now,
        })
        .collect();
    let mut b = batch(&recs, Compression::None, None).to_vec();
    let (info, epoch) = p.append(&mut b)?;
    let deadline = tokio::time::Instant::now() + APPEND_TIMEOUT;
    Ok(
        match p.wait_acked(info.last_offset + 1, epoch, deadline).await {
            ErrorCode::None => Ok(info.first_offset),
            code => Err(code),
        },
    )
}

/// Waits (up to `timeout`) until `loaded` holds, waking the loader (`wake`) and
/// looking again each time it says it loaded something (`loads`): a coordinator's
/// request for a partition led here that is still loading.
pub(crate) async fn await_load(
    loads: &tokio::sync::Notify,
    loaded: impl Fn() -> bool,
    wake: impl Fn(),
    timeout: Duration,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let notified = loads.notified();
        if loaded() {
            return;
        }
        wake();
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return;
        }
    }
}
