//! DeleteRecords (KIP-107: move a partition's log start, local and remote) and
//! DescribeLogDirs (sizes per partition, local and remote).

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, DescribeLogDirsRequest, DescribeLogDirsResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_authz::Operation;
use strata_proto::{ErrorCode, Offset};

use super::{Pending, RequestContext, authz, encode_response, ready};
use crate::broker::Broker;
use crate::partition::Partition;

/// DeleteRecords: on each partition this broker leads, moves the log start up to the
/// requested offset (-1: the high watermark), locally (whole segments below it are
/// deleted; followers follow the leader's start at their next fetch) and in the remote
/// tier (published in the partition's manifest, then the segments wholly below it
/// deleted from the bucket). Answers the new log start as the low watermark. As Kafka:
/// Delete on the topic; an offset above the high watermark is OFFSET_OUT_OF_RANGE; a
/// topic whose cleanup.policy does not include delete is POLICY_VIOLATION.
pub(super) fn delete_records(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: DeleteRecordsRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = DeleteRecordsResponse::default();
        for t in &req.topics {
            let name = t.name.0.as_str();
            let mut rt = DeleteRecordsTopicResult::default();
            rt.name = t.name.clone();
            // Checked before the topic's existence (no leak).
            let allowed = authz::topic(&broker, &ctx, Operation::Delete, name);
            for rp in &t.partitions {
                let mut r = DeleteRecordsPartitionResult::default();
                r.partition_index = rp.partition_index;
                r.low_watermark = -1;
                let result = if allowed {
                    delete_in(&broker, name, rp.partition_index, rp.offset).await
                } else {
                    Err(ErrorCode::TopicAuthorizationFailed)
                };
                match result {
                    Ok(low) => r.low_watermark = low,
                    Err(code) => r.error_code = code.code(),
                }
                rt.partitions.push(r);
            }
            resp.topics.push(rt);
        }
        encode_response(&ctx, &resp)
    })
}

/// Deletes the records of `topic`'s partition `index` below `offset`; the new log start.
async fn delete_in(
    broker: &Broker,
    topic: &str,
    index: i32,
    offset: Offset,
) -> Result<Offset, ErrorCode> {
    let state = broker.replicas.topic(topic);
    let Some(p) = state.as_ref().and_then(|t| t.partition(index)).cloned() else {
        return Err(broker.replicas.missing_partition_code(
            state.as_deref(),
            crate::replicas::TopicRef::Name(topic),
            index,
        ));
    };
    if !p.is_leader() {
        return Err(ErrorCode::NotLeaderOrFollower);
    }
    if !p.config().cleanup_policy.deletes() {
        return Err(ErrorCode::PolicyViolation);
    }
    let hw = p.high_watermark();
    let target = if offset == -1 { hw } else { offset };
    if target < 0 || target > hw {
        return Err(ErrorCode::OffsetOutOfRange);
    }
    advance_start(&p, target).await?;
    Ok(p.log_start_offset())
}

/// Moves `p`'s log start up to `target` (at most its high watermark) everywhere its
/// records are: the remote tier first, so a crash in between leaves the local start
/// below the remote one (the next retention round moves it), never records served
/// locally that the bucket no longer has; then the local log; for a one-copy topic,
/// the start over its Parquet files.
async fn advance_start(p: &Partition, target: Offset) -> Result<(), ErrorCode> {
    let log = p.log();
    if let Some(remote) = p.remote()
        && let Err(e) = remote.advance_start(target).await
    {
        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "DeleteRecords: cannot move the remote log start");
        return Err(ErrorCode::KafkaStorageError);
    }
    if log.one_copy() {
        log.set_retention_start(target);
    }
    if target > log.local_start()
        && let Err(e) = p.advance_log_start(target)
    {
        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "DeleteRecords: cannot move the local log start");
        return Err(ErrorCode::KafkaStorageError);
    }
    Ok(())
}

/// DescribeLogDirs: this broker's replicas (all, or those asked for) in two log
/// directories: the data directory, with each replica's bytes on local disk and the
/// file system's total and usable bytes; and, for tiered topics, the object store (its
/// URI as the directory), with each replica's bytes there (its remote segments, or a
/// one-copy topic's Parquet files). Describe on the cluster, as Kafka.
pub(super) fn describe_log_dirs(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: DescribeLogDirsRequest,
) -> Pending {
    let mut resp = DescribeLogDirsResponse::default();
    if let Some(code) = authz::deny_cluster(broker, &ctx, Operation::Describe) {
        resp.error_code = code.code();
        return ready(encode_response(&ctx, &resp));
    }
    let wanted = |topic: &str, index: i32| match &req.topics {
        None => true,
        Some(ts) => ts
            .iter()
            .any(|t| t.topic.0.as_str() == topic && t.partitions.contains(&index)),
    };
    let data_dir = &broker.config().data_dir;
    let mut local = DescribeLogDirsResult::default();
    local.log_dir = StrBytes::from_string(
        std::fs::canonicalize(data_dir)
            .unwrap_or_else(|_| data_dir.clone())
            .display()
            .to_string(),
    );
    (local.total_bytes, local.usable_bytes) = disk_space(data_dir);
    let mut remote = DescribeLogDirsResult::default();
    remote.log_dir = StrBytes::from_string(
        broker
            .tiering
            .tiering()
            .tables()
            .store_uri
            .clone()
            .unwrap_or_else(|| "remote".to_string()),
    );
    (remote.total_bytes, remote.usable_bytes) = (-1, -1);
    for t in broker.replicas.topics() {
        let (mut lt, mut rt) = (
            DescribeLogDirsTopic::default(),
            DescribeLogDirsTopic::default(),
        );
        lt.name = kafka_protocol::messages::TopicName(StrBytes::from_string(t.name.to_string()));
        rt.name = lt.name.clone();
        for p in t.partitions.iter().filter(|p| wanted(&t.name, p.index)) {
            let mut lp = DescribeLogDirsPartition::default();
            lp.partition_index = p.index;
            lp.partition_size = i64::try_from(p.log().local_bytes()).unwrap_or(i64::MAX);
            lt.partitions.push(lp);
            let remote_bytes = match (p.log().parquet_reads(), p.remote()) {
                (Some(files), _) if p.log().one_copy() => Some(files.bytes()),
                (_, Some(r)) => Some(r.remote_bytes()),
                _ => None,
            };
            if let Some(bytes) = remote_bytes {
                let mut rp = DescribeLogDirsPartition::default();
                rp.partition_index = p.index;
                rp.partition_size = i64::try_from(bytes).unwrap_or(i64::MAX);
                rt.partitions.push(rp);
            }
        }
        if !lt.partitions.is_empty() {
            local.topics.push(lt);
        }
        if !rt.partitions.is_empty() {
            remote.topics.push(rt);
        }
    }
    resp.results.push(local);
    if !remote.topics.is_empty() {
        resp.results.push(remote);
    }
    ready(encode_response(&ctx, &resp))
}

/// The file system's total and available bytes at `dir` (-1 each when unknown).
fn disk_space(dir: &std::path::Path) -> (i64, i64) {
    match rustix::fs::statvfs(dir) {
        Ok(s) => {
            let size =
                |blocks: u64| i64::try_from(blocks.saturating_mul(s.f_frsize)).unwrap_or(i64::MAX);
            (size(s.f_blocks), size(s.f_bavail))
        }
        Err(_) => (-1, -1),
    }
}
