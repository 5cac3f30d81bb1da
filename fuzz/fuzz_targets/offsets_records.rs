//! hot/group's `__consumer_offsets` record formats and the coordinator's replay of them
//! (what a broker does when it becomes a group coordinator and loads the partition).
//!
//! Input: records, each `flags: u8` (bit 0: has a value; no value is a tombstone),
//! `key_len: u16`, key, and with a value `value_len: u16`, value (big-endian). Every
//! record goes through `decode_record` (and what decodes must re-encode to the same
//! record), then all of them, in order, through `GroupCoordinator::replay` into one
//! coordinator, which then ends the load and runs: invariants hold, every group
//! describes and lists, restored members heartbeat, sessions expire, and the records
//! compaction would keep (the latest of each key) replay into a second coordinator with
//! the same offsets.
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
    // Compaction (the offsets topic is compacted): the latest record of each key, in
    // log order, replays to the same committed offsets as the whole log, when every
    // record decodes. (One that does not, the loader skips; the cleaner keeps it if it is
    // its key's latest, and drops the earlier values of that key: only what the broker
    // itself wrote is in this topic, and it writes only records that decode.)
    let all_decode = recs.iter().all(|(k, v)| decode_record(k, *v).is_ok());
    let mut last = std::collections::HashMap::new();
    for (i, (key, _)) in recs.iter().enumerate() {
        last.insert(*key, i);
    }
    let mut compacted = GroupCoordinator::new(GroupConfig::default());
    for (i, (key, value)) in recs.iter().enumerate() {
        if last[key] == i {
            let _ = compacted.replay(key, *value);
        }
    }
    compacted.loaded(NOW);
    for (group, list) in offsets.iter().filter(|_| all_decode) {
        assert_eq!(
            &compacted.offsets(group),
            list,
            "offsets of {group:?} after compaction"
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
