//! Every committed offset of a group over the wire protocol: FindCoordinator, then
//! OffsetFetch with topics = null (which librdkafka's Rust binding does not expose).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::cli::client::ClientArgs;
use crate::cli::wire::Conn;

/// What one attempt at reading every committed offset of a group came to.
enum AllCommitted {
    Done(Option<BTreeMap<(String, i32), i64>>),
    /// The coordinator moved, is loading or is not there yet: ask again.
    Retry(String),
}

fn retriable_code(code: i16) -> bool {
    use strata_proto::ErrorCode as E;
    [
        E::NotCoordinator,
        E::CoordinatorLoadInProgress,
        E::CoordinatorNotAvailable,
    ]
    .iter()
    .any(|e| e.code() == code)
}

fn code_name(code: i16) -> String {
    strata_proto::ErrorCode::from_code(code)
        .map_or_else(|| format!("error {code}"), |e| e.to_string())
}

/// Every committed offset of the group (None: the broker cannot list them, OffsetFetch
/// below v2), from its coordinator: OffsetFetch with topics = null, as Kafka's
/// kafka-consumer-groups.sh lists a group's offsets. Retried within --timeout while the
/// coordinator moves or loads.
pub(super) fn committed_all(
    c: &ClientArgs,
    group: &str,
) -> anyhow::Result<Option<BTreeMap<(String, i32), i64>>> {
    let deadline = Instant::now() + c.timeout;
    let mut errors = Vec::new();
    let mut boot = None;
    for addr in c.bootstrap.split(',') {
        match Conn::open(addr, c) {
            Ok(conn) => {
                boot = Some(conn);
                break;
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    let Some(mut boot) = boot else {
        bail!(
            "cannot reach a broker for OffsetFetch ({}): {}",
            errors.join("; "),
            c.what_to_check()
        );
    };
    loop {
        match committed_all_once(c, &mut boot, group)? {
            AllCommitted::Done(r) => return Ok(r),
            AllCommitted::Retry(why) if Instant::now() < deadline => {
                tracing::debug!("retrying OffsetFetch: {why}");
                std::thread::sleep(Duration::from_millis(200));
            }
            AllCommitted::Retry(why) => bail!(
                "cannot read the committed offsets of group '{group}' within {} (--timeout): {why}",
                humantime::format_duration(c.timeout)
            ),
        }
    }
}

fn committed_all_once(
    c: &ClientArgs,
    boot: &mut Conn,
    group: &str,
) -> anyhow::Result<AllCommitted> {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
    use kafka_protocol::messages::{
        ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, OffsetFetchRequest,
        OffsetFetchResponse,
    };
    use kafka_protocol::protocol::StrBytes;

    // The group's coordinator (v0-3 name one key, v4+ a list of them).
    let key = StrBytes::from_string(group.to_string());
    let (code, host, port) = if let Some(v) = boot.version(ApiKey::FindCoordinator, 0..=3) {
        let mut req = FindCoordinatorRequest::default();
        req.key = key;
        let r: FindCoordinatorResponse = boot.call(ApiKey::FindCoordinator, v, &req)?;
        (r.error_code, r.host.to_string(), r.port)
    } else if let Some(v) = boot.version(ApiKey::FindCoordinator, 4..=6) {
        let mut req = FindCoordinatorRequest::default();
        req.coordinator_keys = vec![key];
        let r: FindCoordinatorResponse = boot.call(ApiKey::FindCoordinator, v, &req)?;
        let co = r
            .coordinators
            .into_iter()
            .next()
            .context("FindCoordinator: an answer without a coordinator")?;
        (co.error_code, co.host.to_string(), co.port)
    } else {
        bail!("the broker does not support FindCoordinator");
    };
    if retriable_code(code) {
        return Ok(AllCommitted::Retry(format!(
            "FindCoordinator: {}",
            code_name(code)
        )));
    }
    if code != 0 {
        bail!(
            "cannot find the coordinator of group '{group}': {}",
            code_name(code)
        );
    }
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut co =
        Conn::open(&addr, c).with_context(|| format!("the coordinator of group '{group}'"))?;

    // topics = null: all of them (v2+; v8+ per group, the request's own group and topics
    // fields then left at their defaults, as v8 has none).
    let Some(v) = co.version(ApiKey::OffsetFetch, 2..=9) else {
        return Ok(AllCommitted::Done(None));
    };
    let mut req = OffsetFetchRequest::default();
    let gid = GroupId(StrBytes::from_string(group.to_string()));
    if v >= 8 {
        let mut g = OffsetFetchRequestGroup::default();
        g.group_id = gid;
        g.topics = None;
        req.groups = vec![g];
    } else {
        req.group_id = gid;
        req.topics = None;
    }
    let r: OffsetFetchResponse = co.call(ApiKey::OffsetFetch, v, &req)?;
    let mut out = BTreeMap::new();
    let mut add = |topic: &str, partition: i32, offset: i64, code: i16| -> anyhow::Result<()> {
        if code != 0 {
            bail!(
                "cannot read the committed offset of {topic}-{partition}: {}",
                code_name(code)
            );
        }
        if offset >= 0 {
            out.insert((topic.to_string(), partition), offset);
        }
        Ok(())
    };
    let code = if v >= 8 {
        let g = r
            .groups
            .into_iter()
            .find(|g| g.group_id.as_str() == group)
            .context("OffsetFetch: an answer without the group")?;
        if g.error_code == 0 {
            for t in &g.topics {
                for p in &t.partitions {
                    add(
                        t.name.as_str(),
                        p.partition_index,
                        p.committed_offset,
                        p.error_code,
                    )?;
                }
            }
        }
        g.error_code
    } else {
        if r.error_code == 0 {
            for t in &r.topics {
                for p in &t.partitions {
                    add(
                        t.name.as_str(),
                        p.partition_index,
                        p.committed_offset,
                        p.error_code,
                    )?;
                }
            }
        }
        r.error_code
    };
    if retriable_code(code) {
        return Ok(AllCommitted::Retry(format!(
            "OffsetFetch: {}",
            code_name(code)
        )));
    }
    if code != 0 {
        bail!(
            "cannot read the committed offsets of group '{group}': {}",
            code_name(code)
        );
    }
    Ok(AllCommitted::Done(Some(out)))
}
