//! hot/group's `__consumer_offsets` record formats and the coordinator's replay of them
//! (what a broker does when it becomes a group coordinator and loads the partition).
//!
//! Input: records, each `flags: u8` (bit 0: has a value; no value is a tombstone),
//! `key_len: u16`, key, and with a value `value_len: u16`, value (big-endian). Every
//! record goes through `decode_record` (and what decodes must re-encode to the same
//! record), then all of them, in order, through `GroupCoordinator::replay` into one
//! coordinator, which then ends the load and runs: invariants hold, every group
//! describes and lists, restored members heartbeat, sessions expire, the persisted
//! records replay into a second coordinator with the same offsets.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_group::{
    ConsumerOffsetsRecord, GroupConfig, GroupCoordinator, decode_record, group_metadata_record,
    offset_commit_record, parse_consumer_subscription_topics,
};

const NOW: i64 = 1_700_000_000_000;

fn records(mut data: &[u8]) -> Vec<(&[u8], Option<&[u8]>)> {
    fn take<'a>(data: &mut &'a [u8]) -> Option<&'a [u8]> {
        let (len, rest) = data.split_first_chunk::<2>()?;
        let len = (u16::from_be_bytes(*len) as usize).min(rest.len());
        let (head, tail) = rest.split_at(len);
        *data = tail;
        Some(head)
    }
    let mut out = Vec::new();
    while let Some((&flags, rest)) = data.split_first() {
        data = rest;
        let Some(key) = take(&mut data) else { break };
        let value = if flags & 1 == 1 {
            take(&mut data)
        } else {
            None
        };
        out.push((key, value));
    }
    out
}

fn round_trip(r: &ConsumerOffsetsRecord) {
    let (key, value) = match r {
        ConsumerOffsetsRecord::Offset {
            group_id,
            topic,
            partition,
            value: Some(v),
        } => offset_commit_record(group_id, topic, *partition, v),
        ConsumerOffsetsRecord::Group {
            group_id,
            value: Some(v),
        } => {
            for m in &v.members {
                let _ = parse_consumer_subscription_topics(&m.subscription);
            }
            group_metadata_record(group_id, v)
        }
        _ => return,
    };
    assert_eq!(
        decode_record(&key, Some(&value)).as_ref(),
        Ok(r),
        "re-encoded record differs"
    );
}

fuzz_target!(|data: &[u8]| {
    let recs = records(data);
    let mut c = GroupCoordinator::new(GroupConfig::default());
    for (key, value) in &recs {
        if let Ok(r) = decode_record(key, *value) {
            round_trip(&r);
        }
        // A record that does not decode is skipped, as the broker's loader does.
        let _ = c.replay(key, *value);
    }
    c.loaded(NOW);
    if let Err(e) = c.check_invariants() {
        panic!("after replay: {e}");
    }

    let groups = c.list_groups();
    let mut offsets = Vec::new();
    for (group, _, _) in &groups {
        offsets.push((group.clone(), c.offsets(group)));
        let Some(d) = c.describe(group) else {
            panic!("listed group {group:?} does not describe");
        };
        for m in &d.members {
            let _ = c.heartbeat(
                NOW + 1,
                group,
                d.generation_id,
                &m.member_id,
                m.group_instance_id.as_deref(),
            );
        }
    }
    // Checkpointing: the records a coordinator would write again replay to the same state.
    let mut again = GroupCoordinator::new(GroupConfig::default());
    for (group, list) in &offsets {
        for (topic, partition, o) in list {
            let (k, v) = offset_commit_record(group, topic, *partition, o);
            again
                .replay(&k, Some(&v))
                .expect("an offset record we wrote replays");
        }
    }
    for (k, v) in c.persisted_records() {
        again
            .replay(&k, Some(&v))
            .expect("a group record we wrote replays");
    }
    for (group, list) in &offsets {
        assert_eq!(
            &again.offsets(group),
            list,
            "offsets of {group:?} after a checkpoint"
        );
    }

    let _ = c.next_deadline();
    let _ = c.take_persist();
    // Every restored session runs out: the groups rebalance and empty.
    let _ = c.tick(NOW + (i32::MAX as i64) * 4);
    let _ = c.tick(NOW + (i32::MAX as i64) * 8);
    if let Err(e) = c.check_invariants() {
        panic!("after the sessions expired: {e}");
    }
    let _ = c.take_persist();
});
