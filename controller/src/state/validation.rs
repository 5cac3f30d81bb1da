//! The checks a command passes before it changes anything: topic names and configs,
//! dynamic broker configs, and replica assignments and reassignment targets.

use std::collections::BTreeMap;

use strata_proto::TopicConfig;

use super::records::ClusterMetadata;
use crate::error::Rejection;
use crate::types::BrokerId;

/// The broker configs that can change while brokers run (the rest are `strata serve`
/// flags), as Kafka's dynamic broker configs: per broker, or as the cluster-wide default.
/// Each has a Strata counterpart the brokers apply without a restart.
pub const DYNAMIC_BROKER_CONFIGS: &[&str] = &[
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "log.cleaner.threads",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.backoff.ms",
];

/// The largest number of log cleaner threads a broker may be told to run.
pub const MAX_CLEANER_THREADS: u64 = 64;

/// Checks one dynamic broker config's value.
fn check_dynamic(k: &str, v: &str) -> Result<(), String> {
    let whole = |what: &str, min: u64, max: u64| match v.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(()),
        _ if max == u64::MAX => Err(format!("{k} is {what} (at least {min}), not '{v}'")),
        _ => Err(format!("{k} is {what} from {min} to {max}, not '{v}'")),
    };
    match k {
        "leader.replication.throttled.rate" | "follower.replication.throttled.rate" => v
            .parse::<u64>()
            .map(|_| ())
            .map_err(|_| format!("{k} is a rate in bytes per second, not '{v}'")),
        "log.cleaner.threads" => whole("a thread count", 1, MAX_CLEANER_THREADS),
        // Kafka's type is a double (its default, Double.MAX_VALUE, means no cap); 0 is
        // no cap too, as `--log-cleaner-io-max-bytes-per-second 0`.
        "log.cleaner.io.max.bytes.per.second" => match v.trim().parse::<f64>() {
            Ok(r) if r >= 0.0 && !r.is_nan() => Ok(()),
            _ => Err(format!(
                "{k} is a rate in bytes per second (0 for no cap), not '{v}'"
            )),
        },
        "log.cleaner.dedupe.buffer.size" => whole("a size in bytes", 1 << 20, u64::MAX),
        "log.cleaner.backoff.ms" => whole("a time in milliseconds", 0, u64::MAX),
        _ => Err(format!(
            "broker config '{k}' cannot change while the broker runs (the dynamic ones are \
             {}); pass it to `strata serve`",
            DYNAMIC_BROKER_CONFIGS.join(", ")
        )),
    }
}

/// Checks dynamic broker configs: known keys, and values of each key's type.
pub fn validate_broker_configs(
    resource: &str,
    configs: &BTreeMap<String, String>,
) -> Result<(), Rejection> {
    if !resource.is_empty() && !resource.parse::<BrokerId>().is_ok_and(|id| id >= 0) {
        return Err(Rejection::InvalidConfig {
            reason: format!("'{resource}' is not a broker id (or \"\" for every broker)"),
        });
    }
    for (k, v) in configs {
        check_dynamic(k, v).map_err(|reason| Rejection::InvalidConfig { reason })?;
    }
    Ok(())
}

/// Kafka's rules for topic names (Topic.validate): 1..=249 characters of
/// `[a-zA-Z0-9._-]`, and not "." or "..". The one implementation is strata-proto's
/// ([`strata_proto::validate_topic_name`]), which the broker also uses.
pub fn validate_topic_name(name: &str) -> Result<(), Rejection> {
    strata_proto::validate_topic_name(name).map_err(|e| Rejection::InvalidTopicName {
        name: e.name,
        reason: e.reason.to_string(),
    })
}

/// Validates topic config overrides with strata-proto's rules.
pub fn validate_configs(configs: &BTreeMap<String, String>) -> Result<TopicConfig, Rejection> {
    TopicConfig::resolve(configs).map_err(|e| Rejection::InvalidConfig {
        reason: e.to_string(),
    })
}

impl ClusterMetadata {
    pub(super) fn validate_assignment(
        &self,
        assignment: &[Vec<BrokerId>],
    ) -> Result<(), Rejection> {
        let bad = |reason: String| Err(Rejection::InvalidReplicaAssignment { reason });
        let Some(first) = assignment.first() else {
            return bad("no partitions".into());
        };
        for (i, replicas) in assignment.iter().enumerate() {
            if replicas.is_empty() {
                return bad(format!("partition {i} has no replicas"));
            }
            if replicas.len() != first.len() {
                return bad(format!(
                    "partition {i} has {} replicas, partition 0 has {}",
                    replicas.len(),
                    first.len()
                ));
            }
            for (j, r) in replicas.iter().enumerate() {
                if replicas[..j].contains(r) {
                    return bad(format!("partition {i} names broker {r} twice"));
                }
                if !self.brokers.contains_key(r) {
                    return bad(format!("partition {i} names unregistered broker {r}"));
                }
            }
        }
        Ok(())
    }
}

/// A reassignment's target: replicas named once each, every one registered.
pub(super) fn validate_target(
    target: &[BrokerId],
    registered: &impl Fn(BrokerId) -> bool,
) -> Result<(), Rejection> {
    let bad = |reason: String| Err(Rejection::InvalidReplicaAssignment { reason });
    if target.is_empty() {
        return bad("the target replica list is empty".into());
    }
    for (i, r) in target.iter().enumerate() {
        if target[..i].contains(r) {
            return bad(format!("the target names broker {r} twice"));
        }
        if !registered(*r) {
            return bad(format!(
                "the target names broker {r}, which is not registered"
            ));
        }
    }
    Ok(())
}
