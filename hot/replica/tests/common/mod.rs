//! Helpers shared by the replica tests.
#![allow(dead_code, clippy::unwrap_used)]

use strata_log::{EpochEntry, LeaderEpochCache};
use strata_replica::{Command, EpochLog, PartitionState};

/// A log model with these offsets and epochs.
pub fn epoch_log(start: i64, end: i64, epochs: &[(i32, i64)]) -> EpochLog {
    EpochLog {
        log_start_offset: start,
        log_end_offset: end,
        epochs: LeaderEpochCache::from_entries(
            epochs
                .iter()
                .map(|&(epoch, start_offset)| EpochEntry {
                    epoch,
                    start_offset,
                })
                .collect(),
        )
        .unwrap(),
    }
}

pub fn state(
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    replicas: &[i32],
    isr: &[i32],
) -> PartitionState {
    PartitionState {
        leader,
        leader_epoch,
        partition_epoch,
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
    }
}

/// The HWM a batch of commands advanced to, if any.
pub fn advanced(commands: &[Command]) -> Option<i64> {
    commands.iter().rev().find_map(|c| match c {
        Command::HighWatermarkAdvanced(h) => Some(*h),
        _ => None,
    })
}

/// The AlterPartition request among the commands, if any.
pub fn alter(commands: &[Command]) -> Option<strata_replica::AlterPartitionRequest> {
    commands.iter().find_map(|c| match c {
        Command::AlterPartition(r) => Some(r.clone()),
        _ => None,
    })
}
