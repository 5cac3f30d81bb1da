//! `strata topic create|list|describe|delete|alter`: topic administration over the Kafka
//! admin APIs (CreateTopics, Metadata, DescribeConfigs, DeleteTopics, AlterConfigs,
//! CreatePartitions), so it works against any Kafka broker.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use futures::executor::block_on;
use rdkafka::admin::{
    AdminClient, ConfigEntry, ConfigSource, NewPartitions, NewTopic, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::types::RDKafkaErrorCode;

use super::client::{CliContext, ClientArgs, admin, admin_options, parse_key_value};

#[derive(Args, Debug)]
pub struct TopicArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: TopicCommand,
}

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        /// Number of partitions [default: the broker's num.partitions]
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        partitions: Option<i32>,
        /// Replicas per partition [default: the broker's default.replication.factor]
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        replication_factor: Option<i32>,
        /// A topic config override, e.g. retention.ms=86400000 (repeatable)
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
    },
    /// List the topics.
    List,
    /// Show a topic's partitions (leader, replicas, ISR) and configs.
    Describe {
        name: String,
        /// A Strata broker's HTTP address (its --http-addr), for the cleaner's state of
        /// a compacted topic's partitions hosted there and a Parquet topic's Iceberg
        /// table.
        #[arg(long, env = "STRATA_HTTP", default_value = "127.0.0.1:8080")]
        http: String,
        /// That broker's --http-auth credentials, if it has them.
        #[arg(long, env = "STRATA_HTTP_AUTH", hide_env_values = true)]
        http_auth: Option<String>,
    },
    /// The busiest partitions and their hottest keys (Strata brokers): produce and fetch
    /// rates over the last 5 s and each partition's most frequent keys, sampled, from
    /// the HTTP address of every broker given (each reports the partitions it leads).
    Hot {
        /// How many partitions to list.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        top: u64,
        /// How many keys to show per partition.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=32))]
        keys: u64,
        /// Only this topic's partitions.
        #[arg(long)]
        topic: Option<String>,
        /// The brokers' HTTP addresses (their --http-addr), comma-separated: give every
        /// broker's to see the whole cluster.
        #[arg(
            long,
            env = "STRATA_HTTP",
            default_value = "127.0.0.1:8080",
            value_delimiter = ','
        )]
        http: Vec<String>,
        /// The brokers' --http-auth credentials, if they have them.
        #[arg(long, env = "STRATA_HTTP_AUTH", hide_env_values = true)]
        http_auth: Option<String>,
        /// Print the JSON the brokers answered (merged, sorted) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Delete a topic and its data.
    Delete { name: String },
    /// Recreate a topic from the object store: its id, partitions and configs come from
    /// the bucket's catalog, and its offsets continue after what the bucket holds
    /// (Strata brokers only: a broker whose data dir was lost, or a new cluster pointed
    /// at the bucket).
    Recover { name: String },
    /// Move a topic to more partitions without breaking any key's order: creates NEW
    /// (default T.pN), closes T for writes (its producers get POLICY_VIOLATION naming
    /// NEW), prints each old partition's end (the cutover markers), opens NEW, and waits
    /// (progress bar) until each --group has read T to the markers: then that group's
    /// consumers switch to NEW from its start. Run again to resume.
    Repartition {
        name: String,
        /// The new partition count
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        partitions: i32,
        /// The new topic's name [default: NAME.pPARTITIONS]
        #[arg(long)]
        to: Option<String>,
        /// A consumer group of NAME to wait for (repeatable)
        #[arg(long = "group")]
        groups: Vec<String>,
    },
    /// Change a topic's config overrides or grow its partitions.
    Alter {
        name: String,
        /// Set a config override (repeatable); other overrides are kept.
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        set: Vec<(String, String)>,
        /// Remove a config override, going back to the default (repeatable).
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
        /// Grow the topic to this many partitions (partitions can only be added).
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        partitions: Option<i32>,
    },
}

pub fn run(args: TopicArgs) -> anyhow::Result<()> {
    let c = &args.client;
    match args.command {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => create(c, &name, partitions, replication_factor, &configs),
        TopicCommand::List => list(c),
        TopicCommand::Describe {
            name,
            http,
            http_auth,
        } => describe(c, &name, &http, http_auth.as_deref()),
        TopicCommand::Hot {
            top,
            keys,
            topic,
            http,
            http_auth,
            json,
        } => hot(
            top,
            keys,
            topic.as_deref(),
            &http,
            http_auth.as_deref(),
            json,
        ),
        TopicCommand::Delete { name } => delete(c, &name),
        TopicCommand::Recover { name } => recover(c, &name),
        TopicCommand::Alter {
            name,
            set,
            delete,
            partitions,
        } => alter(c, &name, &set, &delete, partitions),
        TopicCommand::Repartition {
            name,
            partitions,
            to,
            groups,
        } => super::repartition::run(c, &name, partitions, to, &groups),
    }
}

/// Words for an admin error code, naming the flag or the likely cause where we know it.
fn admin_error(what: &str, topic: &str, code: RDKafkaErrorCode) -> anyhow::Error {
    use RDKafkaErrorCode as E;
    let hint = match code {
        E::TopicAlreadyExists => format!("topic '{topic}' already exists"),
        E::UnknownTopicOrPartition => format!("topic '{topic}' does not exist"),
        E::InvalidConfig => format!("the broker rejected a config key or value ({code})"),
        E::InvalidPartitions => format!("the broker rejected --partitions ({code})"),
        E::InvalidReplicationFactor => {
            format!("the broker rejected --replication-factor ({code})")
        }
        E::InvalidTopic => format!(
            "'{topic}' is not a valid topic name: a name is 1 to 249 characters of [a-zA-Z0-9._-], and not '.' or '..' ({code})"
        ),
        E::PolicyViolation | E::TopicAuthorizationFailed | E::ClusterAuthorizationFailed => {
            format!("not allowed ({code})")
        }
        _ => code.to_string(),
    };
    anyhow::anyhow!("cannot {what} topic '{topic}': {hint}")
}

/// The partition count of `name`, or an error saying it does not exist. Asks for every
/// topic's metadata: a single-topic request may auto-create the topic on brokers that
/// allow that, which a read-only look must never do.
fn partition_count(
    c: &ClientArgs,
    client: &AdminClient<CliContext>,
    name: &str,
) -> anyhow::Result<usize> {
    let md = c.metadata(client.inner(), None)?;
    md.topics()
        .iter()
        .find(|t| t.name() == name)
        .map(|t| t.partitions().len())
        .with_context(|| format!("topic '{name}' does not exist"))
}

fn create(
    c: &ClientArgs,
    name: &str,
    partitions: Option<i32>,
    replication_factor: Option<i32>,
    configs: &[(String, String)],
) -> anyhow::Result<()> {
    // Said here, before any broker is asked, in the words of the rule; a broker still
    // refuses what this lets through (reserved names are Strata's and Kafka's).
    if let Err(e) = strata_proto::validate_topic_name(name) {
        bail!(
            "cannot create topic '{name}': {}: a name is 1 to 249 characters of [a-zA-Z0-9._-], and not '.' or '..'",
            e.reason
        );
    }
    note_deprecated(configs.iter().map(|(k, _)| k.as_str()));
    let client = admin(c)?;
    // -1 asks the broker for its defaults (CreateTopics v4+, KIP-464).
    let mut topic = NewTopic::new(
        name,
        partitions.unwrap_or(-1),
        TopicReplication::Fixed(replication_factor.unwrap_or(-1)),
    );
    for (k, v) in configs {
        topic = topic.set(k, v);
    }
    let results = block_on(client.create_topics([&topic], &admin_options(c)))
        .map_err(|e| c.explain(e, "CreateTopics"))?;
    for r in results {
        if let Err((_, code)) = r {
            // The rdkafka binding drops the broker's reason: ask for it again, validating
            // only, over the wire client.
            if matches!(
                code,
                RDKafkaErrorCode::InvalidConfig | RDKafkaErrorCode::InvalidTopic
            ) && let Ok(Some(why)) = create_refusal(c, name, configs)
            {
                bail!("cannot create topic '{name}': {why}");
            }
            return Err(admin_error("create", name, code));
        }
    }
    let n = partition_count(c, &client, name)
        .map(|n| format!(" with {n} partitions"))
        .unwrap_or_default();
    outln!("created topic '{name}'{n}");
    Ok(())
}

/// The CreateTopics config that asks a Strata broker to recover the topic from its
/// object store instead of creating a new one.
pub const RECOVER_CONFIG: &str = "strata.recover.from.object.store";

fn recover(c: &ClientArgs, name: &str) -> anyhow::Result<()> {
    let client = admin(c)?;
    let topic = NewTopic::new(name, -1, TopicReplication::Fixed(-1)).set(RECOVER_CONFIG, "true");
    let results = block_on(client.create_topics([&topic], &admin_options(c)))
        .map_err(|e| c.explain(e, "CreateTopics"))?;
    for r in results {
        if let Err((_, code)) = r {
            let hint = match code {
                RDKafkaErrorCode::UnknownTopicOrPartition => {
                    format!(
                        "the broker's object store has no topic '{name}' (check --object-store on the broker)"
                    )
                }
                RDKafkaErrorCode::InvalidConfig => {
                    "the broker cannot recover topics (not a Strata broker, or no object store)"
                        .to_string()
                }
                other => return Err(admin_error("recover", name, other)),
            };
            anyhow::bail!("cannot recover topic '{name}': {hint}");
        }
    }
    let n = partition_count(c, &client, name)
        .map(|n| format!(" with {n} partitions"))
        .unwrap_or_default();
    outln!("recovered topic '{name}'{n} from the object store");
    Ok(())
}

fn list(c: &ClientArgs) -> anyhow::Result<()> {
    let client = admin(c)?;
    let md = c.metadata(client.inner(), None)?;
    let mut names: Vec<&str> = md.topics().iter().map(|t| t.name()).collect();
    names.sort_unstable();
    for n in names {
        outln!("{n}");
    }
    Ok(())
}

fn ids(v: &[i32]) -> String {
    v.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// The topic's configs (DescribeConfigs), sorted by name.
pub(crate) fn describe_configs(
    c: &ClientArgs,
    client: &AdminClient<CliContext>,
    name: &str,
) -> anyhow::Result<Vec<ConfigEntry>> {
    let results =
        block_on(client.describe_configs([&ResourceSpecifier::Topic(name)], &admin_options(c)))
            .map_err(|e| c.explain(e, "DescribeConfigs"))?;
    let mut entries = Vec::new();
    for r in results {
        match r {
            Ok(res) => entries.extend(res.entries),
            Err(code) => return Err(admin_error("describe the configs of", name, code)),
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// An override set on the topic itself (as opposed to a default or a broker setting).
fn is_topic_override(e: &ConfigEntry) -> bool {
    e.source == ConfigSource::DynamicTopic
}

fn describe(c: &ClientArgs, name: &str, http: &str, http_auth: Option<&str>) -> anyhow::Result<()> {
    let client = admin(c)?;
    let md = c.metadata(client.inner(), None)?;
    let topic = md
        .topics()
        .iter()
        .find(|t| t.name() == name)
        .with_context(|| format!("topic '{name}' does not exist"))?;
    let parts = topic.partitions();
    let rf = parts.first().map_or(0, |p| p.replicas().len());
    outln!(
        "topic {name}  partitions {}  replication-factor {rf}",
        parts.len()
    );
    outln!(
        "  {:>9}  {:>6}  {:<12}  {:<12}  {:<16}  error",
        "partition",
        "leader",
        "replicas",
        "isr",
        "state"
    );
    let mut parts: Vec<_> = parts.iter().collect();
    parts.sort_by_key(|p| p.id());
    let (mut under, mut offline) = (0, 0);
    for p in parts {
        let err = p
            .error()
            .map(|e| RDKafkaErrorCode::from(e).to_string())
            .unwrap_or_else(|| "-".into());
        // Kafka's --under-replicated-partitions / --unavailable-partitions views.
        let storage_error = p
            .error()
            .is_some_and(|e| RDKafkaErrorCode::from(e) == RDKafkaErrorCode::KafkaStorageError);
        let state = if p.leader() < 0 {
            offline += 1;
            "OFFLINE"
        } else if storage_error {
            // The leader's replica cannot be opened (see its log).
            offline += 1;
            "STORAGE-ERROR"
        } else if p.isr().len() < p.replicas().len() {
            under += 1;
            "UNDER-REPLICATED"
        } else {
            "in-sync"
        };
        outln!(
            "  {:>9}  {:>6}  {:<12}  {:<12}  {state:<16}  {err}",
            p.id(),
            p.leader(),
            ids(p.replicas()),
            ids(p.isr())
        );
    }
    if under + offline > 0 {
        outln!(
            "  {under} under-replicated and {offline} offline partition(s): a replica is down or behind; \
             it rejoins the ISR once it has caught up"
        );
    }
    let entries = describe_configs(c, &client, name)?;
    outln!("configs (* = set on this topic; others show where the value comes from):");
    for e in &entries {
        let value = match (&e.value, e.is_sensitive) {
            (_, true) => "(sensitive)".to_string(),
            (Some(v), _) => v.clone(),
            (None, _) => "(null)".to_string(),
        };
        let (mark, source) = if is_topic_override(e) {
            ("*", String::new())
        } else {
            let s = match e.source {
                ConfigSource::Default => "default",
                ConfigSource::StaticBroker => "broker config",
                ConfigSource::DynamicBroker => "broker override",
                ConfigSource::DynamicDefaultBroker => "cluster-wide override",
                ConfigSource::DynamicTopic | ConfigSource::Unknown => "unknown",
            };
            (" ", format!("  ({s})"))
        };
        outln!("  {mark} {} = {value}{source}", e.name);
    }
    let compacted = entries.iter().any(|e| {
        e.name == "cleanup.policy" && e.value.as_deref().is_some_and(|v| v.contains("compact"))
    });
    if compacted {
        print_cleaner(name, http, http_auth);
    }
    let parquet = entries
        .iter()
        .any(|e| e.name == "parquet.enable" && e.value.as_deref() == Some("true"));
    if parquet {
        print_iceberg_table(name, http, http_auth);
    }
    Ok(())
}

/// Where a parquet.enable topic's Iceberg table is, from a Strata broker's
/// `/v1/tier/status` (the broker knows its bucket and cluster id).
fn print_iceberg_table(name: &str, http: &str, http_auth: Option<&str>) {
    let status = super::tier::Http::with(http, http_auth).and_then(|h| {
        let body = h.get("/v1/tier/status")?;
        Ok(serde_json::from_str::<serde_json::Value>(&body)?)
    });
    if let Ok(v) = &status {
        for p in v["partitions"].as_array().into_iter().flatten() {
            if p["topic"] == name
                && let Some(line) = super::tier::parquet_failure(p)
            {
                outln!("partition {}: {line}", p["partition"]);
            }
        }
    }
    match status {
        Ok(v) => match v["iceberg_tables"][name].as_str() {
            Some(location) => outln!(
                "iceberg table: {location} (metadata/version-hint.text names the current metadata)"
            ),
            None => outln!(
                "iceberg table: none published by the broker at {http} (it hosts none of the topic's partitions, or --iceberg-commit-interval is 0)"
            ),
        },
        Err(e) => outln!("iceberg table: not known ({e:#}); give a Strata broker's --http address"),
    }
}

/// The cleaner's state of a compacted topic's partitions, from a Strata broker's
/// `/v1/cleaner/status` (Kafka has no API for it; the same figures are on /metrics). A
/// broker that cannot be asked (not Strata, or not at --http) is a note, not an error.
fn print_cleaner(name: &str, http: &str, http_auth: Option<&str>) {
    let status = super::tier::Http::with(http, http_auth).and_then(|h| {
        let body = h.get("/v1/cleaner/status")?;
        let v: serde_json::Value = serde_json::from_str(&body)?;
        Ok((h.addr().to_string(), v))
    });
    let (addr, v) = match status {
        Ok(x) => x,
        Err(e) => {
            outln!("cleaner: not known ({e:#}); give a Strata broker's --http address");
            return;
        }
    };
    let parts: Vec<&serde_json::Value> = v["partitions"]
        .as_array()
        .map(|a| a.iter().filter(|p| p["topic"] == name).collect())
        .unwrap_or_default();
    if parts.is_empty() {
        outln!("cleaner: broker {addr} hosts none of its partitions");
        return;
    }
    outln!("cleaner (partitions hosted by the broker at {addr}):");
    outln!(
        "  {:>9}  {:>6}  {:>12}  {:>12}  {:>10}  {:>9}  {:>6}  {:>8}",
        "partition",
        "dirty",
        "cleaned-to",
        "uncleanable",
        "reclaimed",
        "lag",
        "passes",
        "breaches"
    );
    for p in parts {
        outln!(
            "  {:>9}  {:>5.1}%  {:>12}  {:>12}  {:>10}  {:>8.1}s  {:>6}  {:>8}",
            p["partition"],
            p["dirty_ratio"].as_f64().unwrap_or(0.0) * 100.0,
            p["cleaned_offset"],
            p["uncleanable_offset"],
            p["reclaimed_bytes"],
            p["lag_seconds"].as_f64().unwrap_or(0.0),
            p["passes"],
            p["max_compaction_lag_breaches"],
        );
    }
}

fn delete(c: &ClientArgs, name: &str) -> anyhow::Result<()> {
    let client = admin(c)?;
    let results = block_on(client.delete_topics(&[name], &admin_options(c)))
        .map_err(|e| c.explain(e, "DeleteTopics"))?;
    for r in results {
        if let Err((_, code)) = r {
            return Err(admin_error("delete", name, code));
        }
    }
    outln!("deleted topic '{name}'");
    Ok(())
}

/// The override set after applying `--set` and `--delete` to `current`.
fn merge_overrides(
    current: BTreeMap<String, String>,
    set: &[(String, String)],
    delete: &[String],
) -> BTreeMap<String, String> {
    let mut merged = current;
    for k in delete {
        merged.remove(k);
    }
    for (k, v) in set {
        merged.insert(k.clone(), v.clone());
    }
    merged
}

pub(crate) fn alter(
    c: &ClientArgs,
    name: &str,
    set: &[(String, String)],
    delete: &[String],
    partitions: Option<i32>,
) -> anyhow::Result<()> {
    if set.is_empty() && delete.is_empty() && partitions.is_none() {
        bail!("nothing to change: give --set KEY=VALUE, --delete KEY or --partitions N");
    }
    if let Some((k, _)) = set.iter().find(|(k, _)| delete.contains(k)) {
        bail!("--set and --delete both name '{k}': give one");
    }
    let client = admin(c)?;
    let current_partitions = partition_count(c, &client, name)?;
    if let Some(n) = partitions
        && (n as usize) < current_partitions
    {
        bail!(
            "--partitions {n}: topic '{name}' already has {current_partitions} partitions, \
             and partitions can only be added"
        );
    }

    if !set.is_empty() || !delete.is_empty() {
        // rdkafka has no IncrementalAlterConfigs, and AlterConfigs replaces a topic's
        // whole override set, so read the overrides, merge the change in, and write the
        // result back. Another admin altering the same topic in between would be
        // overwritten; that window is as wide as two admin round trips.
        let entries = describe_configs(c, &client, name)?;
        let mut current = BTreeMap::new();
        for e in entries.iter().filter(|e| is_topic_override(e)) {
            match &e.value {
                Some(v) => {
                    current.insert(e.name.clone(), v.clone());
                }
                // Brokers hide sensitive values; writing the set back without them would
                // delete them.
                None => bail!(
                    "topic '{name}' has an override of '{}' whose value the broker does not \
                     show, so it cannot be kept through AlterConfigs; not changing anything",
                    e.name
                ),
            }
        }
        for k in delete {
            if !current.contains_key(k) {
                eprintln!("note: '{k}' has no override on topic '{name}'; nothing to delete");
            }
        }
        let merged = merge_overrides(current, set, delete);
        alter_configs(c, name, &merged)?;
        for (k, v) in set {
            outln!("topic '{name}': set {k}={v}");
        }
        for k in delete {
            outln!("topic '{name}': removed the override of {k}");
        }
    }

    if let Some(n) = partitions {
        if n as usize == current_partitions {
            outln!("topic '{name}' already has {n} partitions");
        } else {
            let grow = NewPartitions::new(name, n as usize);
            let results = block_on(client.create_partitions([&grow], &admin_options(c)))
                .map_err(|e| c.explain(e, "CreatePartitions"))?;
            for r in results {
                if let Err((_, code)) = r {
                    return Err(admin_error("add partitions to", name, code));
                }
            }
            outln!("topic '{name}': partitions {current_partitions} -> {n}");
        }
    }
    Ok(())
}

/// Why the broker refuses to create topic `name` with `configs`: a validate-only
/// CreateTopics over the wire client, for the error message the rdkafka binding drops.
fn create_refusal(
    c: &ClientArgs,
    name: &str,
    configs: &[(String, String)],
) -> anyhow::Result<Option<String>> {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let addr = c.bootstrap.split(',').next().unwrap_or(&c.bootstrap);
    let mut conn = super::wire::Conn::open(addr, c)?;
    let v = conn
        .version(ApiKey::CreateTopics, 4..=7)
        .context("the broker does not serve CreateTopics v4+")?;
    let mut topic = CreatableTopic::default();
    topic.name = TopicName(StrBytes::from_string(name.to_string()));
    topic.num_partitions = -1;
    topic.replication_factor = -1;
    topic.configs = configs
        .iter()
        .map(|(k, val)| {
            let mut e = CreatableTopicConfig::default();
            e.name = StrBytes::from_string(k.clone());
            e.value = Some(StrBytes::from_string(val.clone()));
            e
        })
        .collect();
    let mut req = CreateTopicsRequest::default();
    req.topics = vec![topic];
    req.validate_only = true;
    req.timeout_ms = 30_000;
    let r: CreateTopicsResponse = conn.call(ApiKey::CreateTopics, v, &req)?;
    Ok(r.topics
        .into_iter()
        .find(|t| t.error_code != 0)
        .and_then(|t| t.error_message.map(|m| m.to_string())))
}

/// AlterConfigs of topic `name` to exactly `configs`, over the wire client: the rdkafka
/// binding reports every resource of an AlterConfigs answer as altered, whatever its
/// error code, so a refused change would print as done.
/// Says on stderr which of `keys` Kafka deprecated (3.x) and removed (4.0): the broker
/// takes them, and they do nothing.
fn note_deprecated<'a>(keys: impl Iterator<Item = &'a str>) {
    for k in keys.filter(|k| strata_proto::config::DEPRECATED_NO_OPS.contains(k)) {
        eprintln!(
            "note: {k} is deprecated (Kafka 3.x; removed in 4.0): it is accepted and has no effect"
        );
    }
}

fn alter_configs(
    c: &ClientArgs,
    name: &str,
    configs: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    note_deprecated(configs.keys().map(String::as_str));
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse, ApiKey};
    use kafka_protocol::protocol::StrBytes;

    let addr = c.bootstrap.split(',').next().unwrap_or(&c.bootstrap);
    let mut conn = super::wire::Conn::open(addr, c)?;
    let v = conn
        .version(ApiKey::AlterConfigs, 0..=2)
        .context("the broker does not serve AlterConfigs")?;
    let mut resource = AlterConfigsResource::default();
    resource.resource_type = 2; // TOPIC
    resource.resource_name = StrBytes::from_string(name.to_string());
    resource.configs = configs
        .iter()
        .map(|(k, val)| {
            let mut e = AlterableConfig::default();
            e.name = StrBytes::from_string(k.clone());
            e.value = Some(StrBytes::from_string(val.clone()));
            e
        })
        .collect();
    let mut req = AlterConfigsRequest::default();
    req.resources = vec![resource];
    let r: AlterConfigsResponse = conn.call(ApiKey::AlterConfigs, v, &req)?;
    for res in r.responses {
        if res.error_code != 0 {
            let code = kafka_protocol::error::ResponseError::try_from_code(res.error_code)
                .map_or(format!("error {}", res.error_code), |e| format!("{e:?}"));
            match res.error_message {
                Some(m) => bail!("cannot alter the configs of topic '{name}': {code}: {m}"),
                None => bail!("cannot alter the configs of topic '{name}': {code}"),
            }
        }
    }
    Ok(())
}

/// `strata topic hot`: asks every broker for its busiest partitions, merges, sorts by
/// produce rate (then fetch rate) and prints the first `top`.
fn hot(
    top: u64,
    keys: u64,
    topic: Option<&str>,
    http: &[String],
    http_auth: Option<&str>,
    json: bool,
) -> anyhow::Result<()> {
    let mut rows: Vec<serde_json::Value> = Vec::new();
    for addr in http {
        let h = super::tier::Http::with(addr, http_auth)?;
        let mut path = format!("/v1/partitions/hot?top={top}&keys={keys}");
        if let Some(t) = topic {
            path.push_str("&topic=");
            path.push_str(&percent_encode(t));
        }
        let body = h.get(&path)?;
        let answer: Vec<serde_json::Value> = serde_json::from_str(&body)
            .with_context(|| format!("{addr}{path}: not the JSON a Strata broker answers"))?;
        rows.extend(answer);
    }
    let rate = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    rows.sort_by(|a, b| {
        let key = |v: &serde_json::Value| {
            (
                rate(v, "produce_bytes_per_sec"),
                rate(v, "fetch_bytes_per_sec"),
            )
        };
        key(b)
            .partial_cmp(&key(a))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    rows.truncate(top as usize);
    if json {
        outln!("{}", serde_json::Value::Array(rows));
        return Ok(());
    }
    outln!(
        "{:<24} {:>9} {:>12} {:>11} {:>10}  HOT KEYS (share of sampled keyed records)",
        "TOPIC",
        "PARTITION",
        "PRODUCE MB/s",
        "RECORDS/s",
        "FETCH MB/s"
    );
    for r in &rows {
        let hot: Vec<String> = r["hot_keys"]
            .as_array()
            .map(|keys| {
                keys.iter()
                    .map(|k| {
                        format!(
                            "{} {:.0}%",
                            k["key"].as_str().unwrap_or(""),
                            k["share"].as_f64().unwrap_or(0.0) * 100.0
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        outln!(
            "{:<24} {:>9} {:>12.2} {:>11.0} {:>10.2}  {}",
            r["topic"].as_str().unwrap_or(""),
            r["partition"],
            rate(r, "produce_bytes_per_sec") / 1e6,
            rate(r, "produce_records_per_sec"),
            rate(r, "fetch_bytes_per_sec") / 1e6,
            hot.join(", ")
        );
    }
    Ok(())
}

/// A query-string value: everything but unreserved characters percent-encoded.
fn percent_encode(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_other_overrides() {
        let current = BTreeMap::from([
            ("segment.bytes".to_string(), "1048576".to_string()),
            ("segment.ms".to_string(), "1000".to_string()),
        ]);
        let merged = merge_overrides(
            current,
            &[("retention.ms".into(), "1000".into())],
            &["segment.ms".into()],
        );
        assert_eq!(
            merged,
            BTreeMap::from([
                ("retention.ms".to_string(), "1000".to_string()),
                ("segment.bytes".to_string(), "1048576".to_string()),
            ])
        );
    }
}
