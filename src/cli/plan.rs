//! `strata plan`: the sizing figures for a workload (strata-plan's arithmetic), with and
//! without tiering, and optionally the catch-up simulation of the lagging group.
//!
//! Every input is a flag or a key of `--config FILE` (TOML, the flag's name without the
//! dashes: `events-per-sec = 1000000`, `retention = "7d"`); a flag wins over the file, and
//! what neither sets is the seed's workload (`strata_plan::Workload::default`).

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use strata_plan::sim::{SimConfig, SimResult, simulate};
use strata_plan::{DAY, Plan, Workload, human_bytes, human_secs, plan};

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// Events produced per second [default: 1000000]
    #[arg(long)]
    pub events_per_sec: Option<String>,
    /// Bytes per event [default: 1000]
    #[arg(long)]
    pub event_bytes: Option<String>,
    /// Replicas per partition [default: 3]
    #[arg(long)]
    pub replication_factor: Option<String>,
    /// How long records are kept, e.g. 7d [default: 7d]
    #[arg(long)]
    pub retention: Option<String>,
    /// How long they stay on local disk too, or `none` for no tiering [default: 1d]
    #[arg(long)]
    pub local_retention: Option<String>,
    /// Partitions the events are spread over [default: 200]
    #[arg(long)]
    pub partitions: Option<String>,
    /// Consumer groups reading everything [default: 4]
    #[arg(long)]
    pub consumer_groups: Option<String>,
    /// How many of them are --lag behind (the rest are live) [default: 1]
    #[arg(long)]
    pub lagging_groups: Option<String>,
    /// Consumers per group [default: 200]
    #[arg(long)]
    pub consumers: Option<String>,
    /// Events per second one consumer processes [default: 30000]
    #[arg(long)]
    pub consumer_rate: Option<String>,
    /// How far the lagging groups are behind, e.g. 24h; 0 for none [default: 24h]
    #[arg(long)]
    pub lag: Option<String>,
    /// Replicated write one broker takes, e.g. 150MB/s [default: 150MB/s]
    #[arg(long)]
    pub broker_write_budget: Option<String>,
    /// Consumer reads one broker serves, e.g. 500MB/s [default: 500MB/s]
    #[arg(long)]
    pub broker_read_budget: Option<String>,
    /// segment.bytes [default: 1GiB]
    #[arg(long)]
    pub segment_bytes: Option<String>,
    /// segment.ms, as a duration [default: 7d]
    #[arg(long)]
    pub segment_ms: Option<String>,
    /// Bytes per GET of a tier read (the broker's --remote-chunk) [default: 8MiB]
    #[arg(long)]
    pub chunk_bytes: Option<String>,
    /// Dollars per 1,000 PUT requests [default: 0.005]
    #[arg(long)]
    pub put_price: Option<String>,
    /// Dollars per 1,000 GET requests [default: 0.0004]
    #[arg(long)]
    pub get_price: Option<String>,
    /// Dollars per GB-month stored [default: 0.023]
    #[arg(long)]
    pub storage_price: Option<String>,
    /// PUT requests per second the bucket takes per prefix [default: 3500]
    #[arg(long)]
    pub bucket_put_limit: Option<String>,
    /// GET requests per second the bucket takes per prefix [default: 5500]
    #[arg(long)]
    pub bucket_get_limit: Option<String>,
    /// Catch-ups a month, for the month's GET cost [default: 1]
    #[arg(long)]
    pub catch_ups_per_month: Option<String>,
    /// Also run the catch-up simulation of a lagging group (strata_plan::sim)
    #[arg(long)]
    pub simulate: bool,
    /// Simulation: chunks read ahead per partition [default: 4, the cache's]
    #[arg(long)]
    pub read_ahead: Option<String>,
    /// Simulation: read-ahead budget over all readers [default: 256MiB, the cache's]
    #[arg(long)]
    pub readahead_budget: Option<String>,
    /// Simulation: read-ahead GETs in flight at once [default: 16, the cache's]
    #[arg(long)]
    pub max_inflight_prefetches: Option<String>,
    /// Simulation: median first-byte latency of a GET [default: 30ms]
    #[arg(long)]
    pub get_latency: Option<String>,
    /// Simulation: 99th percentile first-byte latency of a GET [default: 150ms]
    #[arg(long)]
    pub get_latency_p99: Option<String>,
    /// Simulation: transfer rate of one GET [default: 90MB/s]
    #[arg(long)]
    pub get_throughput: Option<String>,
    /// Simulation: seed [default: 1]
    #[arg(long)]
    pub seed: Option<String>,
    /// Read inputs from a TOML file (keys as the flags without dashes); flags win
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print one JSON object (bytes in bytes, rates per second)
    #[arg(long)]
    pub json: bool,
    /// Read today's workload from a running cluster: topics, replication and retention
    /// over Kafka (--bootstrap), produce rates and each group's lag and retention
    /// headroom from the brokers' /metrics (--http); flags given explicitly win
    #[arg(long)]
    pub from_cluster: bool,
    /// With --from-cluster: the brokers' HTTP addresses (their --http-addr),
    /// comma-separated; every broker that leads partitions should be named
    #[arg(long, env = "STRATA_HTTP", default_value = "127.0.0.1:8080")]
    pub http: String,
    /// With --from-cluster: credentials for the brokers' HTTP (--http-auth)
    #[arg(long, env = "STRATA_HTTP_AUTH")]
    pub http_auth: Option<String>,
    /// With --from-cluster: how long to measure produce rates over
    #[arg(long, default_value = "10s")]
    pub sample: String,
    /// With --from-cluster: the what-if, each topic's retention scaled by this (0.5: halved)
    #[arg(long, default_value_t = 0.5)]
    pub retention_factor: f64,
    /// With --from-cluster: only these consumer groups' outlook (repeatable) [default:
    /// every group]
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    #[command(flatten)]
    pub client: super::client::ClientArgs,
}

impl PlanArgs {
    /// Every valued input by its flag name, for the TOML file.
    fn inputs(&mut self) -> Vec<(&'static str, &mut Option<String>)> {
        vec![
            ("events-per-sec", &mut self.events_per_sec),
            ("event-bytes", &mut self.event_bytes),
            ("replication-factor", &mut self.replication_factor),
            ("retention", &mut self.retention),
            ("local-retention", &mut self.local_retention),
            ("partitions", &mut self.partitions),
            ("consumer-groups", &mut self.consumer_groups),
            ("lagging-groups", &mut self.lagging_groups),
            ("consumers", &mut self.consumers),
            ("consumer-rate", &mut self.consumer_rate),
            ("lag", &mut self.lag),
            ("broker-write-budget", &mut self.broker_write_budget),
            ("broker-read-budget", &mut self.broker_read_budget),
            ("segment-bytes", &mut self.segment_bytes),
            ("segment-ms", &mut self.segment_ms),
            ("chunk-bytes", &mut self.chunk_bytes),
            ("put-price", &mut self.put_price),
            ("get-price", &mut self.get_price),
            ("storage-price", &mut self.storage_price),
            ("bucket-put-limit", &mut self.bucket_put_limit),
            ("bucket-get-limit", &mut self.bucket_get_limit),
            ("catch-ups-per-month", &mut self.catch_ups_per_month),
            ("read-ahead", &mut self.read_ahead),
            ("readahead-budget", &mut self.readahead_budget),
            ("max-inflight-prefetches", &mut self.max_inflight_prefetches),
            ("get-latency", &mut self.get_latency),
            ("get-latency-p99", &mut self.get_latency_p99),
            ("get-throughput", &mut self.get_throughput),
            ("seed", &mut self.seed),
        ]
    }

    /// Fills what the flags left unset from `--config`.
    fn merge_file(&mut self) -> anyhow::Result<()> {
        let Some(path) = self.config.clone() else {
            return Ok(());
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("--config {}: cannot read it", path.display()))?;
        let table: toml::Table = text
            .parse()
            .with_context(|| format!("--config {}: not TOML", path.display()))?;
        let mut inputs = self.inputs();
        for (key, value) in table {
            let Some((_, slot)) = inputs.iter_mut().find(|(k, _)| *k == key) else {
                let known: Vec<&str> = inputs.iter().map(|(k, _)| *k).collect();
                bail!(
                    "--config {}: unknown key '{key}' (the keys are the flags' names: {})",
                    path.display(),
                    known.join(", ")
                );
            };
            if slot.is_none() {
                let v = match value {
                    toml::Value::String(s) => s,
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Float(f) => f.to_string(),
                    other => bail!(
                        "--config {}: '{key}' must be a number or a string, not {}",
                        path.display(),
                        other.type_str()
                    ),
                };
                **slot = Some(v);
            }
        }
        Ok(())
    }
}

/// A plain number (underscores and commas allowed as separators).
fn number(flag: &str, v: &str) -> anyhow::Result<f64> {
    let cleaned: String = v
        .trim()
        .trim_start_matches('$')
        .chars()
        .filter(|c| *c != '_' && *c != ',')
        .collect();
    let n: f64 = cleaned
        .parse()
        .with_context(|| format!("--{flag} '{v}': expected a number"))?;
    if !n.is_finite() {
        bail!("--{flag} '{v}': expected a finite number");
    }
    Ok(n)
}

fn count(flag: &str, v: &str) -> anyhow::Result<u32> {
    v.trim()
        .parse()
        .with_context(|| format!("--{flag} '{v}': expected a whole number"))
}

fn seconds(flag: &str, v: &str) -> anyhow::Result<f64> {
    let t = v.trim();
    if t == "0" {
        return Ok(0.0);
    }
    humantime::parse_duration(t)
        .map(|d| d.as_secs_f64())
        .with_context(|| format!("--{flag} '{v}': expected a duration such as 7d, 24h or 30ms"))
}

/// A size or a rate (`150MB/s`), decimal or binary units.
fn bytes(flag: &str, v: &str) -> anyhow::Result<f64> {
    super::serve::parse_bytes(&format!("--{flag}"), v.trim().trim_end_matches("/s"))
        .map(|b| b as f64)
}

fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref()
}

/// The workload the inputs describe, over `base` (the seed's, or today's with
/// --from-cluster).
pub(super) fn workload(a: &PlanArgs, base: Workload) -> anyhow::Result<Workload> {
    let mut w = base;
    if let Some(v) = given(&a.events_per_sec) {
        w.events_per_sec = number("events-per-sec", v)?;
    }
    if let Some(v) = given(&a.event_bytes) {
        w.event_bytes = bytes("event-bytes", v)?;
    }
    if let Some(v) = given(&a.replication_factor) {
        w.replication_factor = count("replication-factor", v)?;
    }
    if let Some(v) = given(&a.retention) {
        w.retention_secs = seconds("retention", v)?;
    }
    if let Some(v) = given(&a.local_retention) {
        w.local_retention_secs = match v.trim() {
            "none" | "off" => None,
            v => Some(seconds("local-retention", v)?),
        };
    }
    if let Some(v) = given(&a.partitions) {
        w.partitions = count("partitions", v)?;
    }
    if let Some(v) = given(&a.consumer_groups) {
        w.consumer_groups = count("consumer-groups", v)?;
    }
    if let Some(v) = given(&a.lagging_groups) {
        w.lagging_groups = count("lagging-groups", v)?;
    } else {
        w.lagging_groups = w.lagging_groups.min(w.consumer_groups);
    }
    if let Some(v) = given(&a.consumers) {
        w.consumers = count("consumers", v)?;
    }
    if let Some(v) = given(&a.consumer_rate) {
        w.consumer_rate = number("consumer-rate", v)?;
    }
    if let Some(v) = given(&a.lag) {
        w.lag_secs = seconds("lag", v)?;
    }
    if let Some(v) = given(&a.broker_write_budget) {
        w.broker_write_budget = bytes("broker-write-budget", v)?;
    }
    if let Some(v) = given(&a.broker_read_budget) {
        w.broker_read_budget = bytes("broker-read-budget", v)?;
    }
    if let Some(v) = given(&a.segment_bytes) {
        w.segment_bytes = bytes("segment-bytes", v)?;
    }
    if let Some(v) = given(&a.segment_ms) {
        w.segment_secs = seconds("segment-ms", v)?;
    }
    if let Some(v) = given(&a.chunk_bytes) {
        w.chunk_bytes = bytes("chunk-bytes", v)?;
    }
    if let Some(v) = given(&a.put_price) {
        w.prices.put_per_1000 = number("put-price", v)?;
    }
    if let Some(v) = given(&a.get_price) {
        w.prices.get_per_1000 = number("get-price", v)?;
    }
    if let Some(v) = given(&a.storage_price) {
        w.prices.storage_per_gb_month = number("storage-price", v)?;
    }
    if let Some(v) = given(&a.bucket_put_limit) {
        w.bucket_put_limit = number("bucket-put-limit", v)?;
    }
    if let Some(v) = given(&a.bucket_get_limit) {
        w.bucket_get_limit = number("bucket-get-limit", v)?;
    }
    if let Some(v) = given(&a.catch_ups_per_month) {
        w.catch_ups_per_month = number("catch-ups-per-month", v)?;
    }
    let (base, per_segment) = manifest_sizes();
    w.layout.manifest_base_bytes = base;
    w.layout.manifest_bytes_per_segment = per_segment;
    w.validate().map_err(|e| anyhow::anyhow!("--{e}"))?;
    Ok(w)
}

/// Bytes of an empty manifest snapshot and what each segment adds, from strata-tier's
/// own encoding.
fn manifest_sizes() -> (f64, f64) {
    use strata_tier::manifest::{Manifest, ManifestOp, RemoteSegment};
    const N: usize = 1_000;
    let empty = Manifest::new().encode_snapshot().len() as f64;
    let mut m = Manifest::new();
    for i in 0..N as i64 {
        let s = RemoteSegment {
            base_offset: i * 1_000,
            next_offset: (i + 1) * 1_000,
            size_bytes: 1 << 30,
            max_timestamp: 1_700_000_000_000 + i,
            leader_epoch: 1,
            id: uuid::Uuid::from_u128(i as u128 + 1),
            has_producer_state: true,
            has_leader_epochs: true,
            has_txn_index: false,
            committed_at_ms: 1_700_000_000_000 + i,
        };
        if m.apply(&ManifestOp::Add(s)).is_err() {
            break;
        }
    }
    let full = m.encode_snapshot().len() as f64;
    (empty, (full - empty) / m.len().max(1) as f64)
}

/// About two minutes of the model's stepping.
const MAX_SIM_STEPS: f64 = 200e6;

/// The simulation's inputs: the workload's lagging group, the cache's and the bucket's
/// behaviour.
fn sim_config(a: &PlanArgs, w: &Workload, p: &Plan) -> anyhow::Result<SimConfig> {
    let read_ahead = given(&a.read_ahead).map_or(Ok(4), |v| count("read-ahead", v))?;
    let budget = given(&a.readahead_budget)
        .map_or(Ok(256.0 * 1048576.0), |v| bytes("readahead-budget", v))?;
    let inflight = given(&a.max_inflight_prefetches)
        .map_or(Ok(16), |v| count("max-inflight-prefetches", v))?;
    let median = given(&a.get_latency).map_or(Ok(0.030), |v| seconds("get-latency", v))?;
    let p99 = given(&a.get_latency_p99).map_or(Ok(0.150), |v| seconds("get-latency-p99", v))?;
    let throughput = given(&a.get_throughput).map_or(Ok(90e6), |v| bytes("get-throughput", v))?;
    let seed = match given(&a.seed) {
        Some(v) => v
            .trim()
            .parse()
            .with_context(|| format!("--seed '{v}': expected a whole number"))?,
        None => 1,
    };
    if p99 < median {
        bail!("--get-latency-p99 must be at least --get-latency");
    }
    if read_ahead > 256 {
        bail!("--read-ahead {read_ahead}: at most 256 chunks");
    }
    if w.partitions > 100_000 {
        bail!(
            "--simulate models each partition: at most 100000 (--partitions {})",
            w.partitions
        );
    }
    // The model takes a step per chunk read from the bucket and per 64 chunks read from
    // local disk: refuse a run that would take minutes of stepping.
    if let Some(c) = &p.catch_up {
        let span = c.seconds.unwrap_or(30.0 * DAY);
        let read = c.drain_events_per_sec * w.event_bytes * span;
        let steps =
            c.tier_bytes / w.chunk_bytes + (read - c.tier_bytes).max(0.0) / (64.0 * w.chunk_bytes);
        if steps > MAX_SIM_STEPS {
            bail!(
                "--simulate would step through {steps:.0} chunks (over {MAX_SIM_STEPS:.0}): \
                 raise --chunk-bytes or shorten --lag"
            );
        }
    }
    Ok(SimConfig {
        partitions: w.partitions,
        // Each broker leads its share of the partitions with its own cache.
        brokers: p.brokers,
        consumers: w.consumers,
        events_per_sec: w.events_per_sec,
        event_bytes: w.event_bytes,
        lag_secs: w.lag_secs.min(w.retention_secs),
        local_retention_secs: w.local_retention_secs.unwrap_or(w.retention_secs),
        consumer_bytes_per_sec: w.consumer_rate * w.event_bytes,
        chunk_bytes: w.chunk_bytes,
        read_ahead,
        readahead_budget_bytes: budget,
        get_latency_median_secs: median,
        get_latency_p99_secs: p99,
        get_bytes_per_sec: throughput,
        bucket_get_limit: w.bucket_get_limit * f64::from(w.partitions),
        max_inflight_prefetches: inflight,
        seed,
        // Ten times the plan's drain, or 30 days for one that never drains.
        max_secs: p
            .catch_up_seconds
            .map_or(30.0 * DAY, |s| (s * 10.0).max(60.0)),
    })
}

pub fn run(mut args: PlanArgs) -> anyhow::Result<()> {
    args.merge_file()?;
    if args.from_cluster {
        return super::plan_live::run(&args);
    }
    let w = workload(&args, Workload::default())?;
    let p = plan(&w);
    let sim = if args.simulate {
        if w.lag_secs <= 0.0 || w.lagging_groups == 0 {
            bail!("--simulate models a lagging group: give --lag (and --lagging-groups 1 or more)");
        }
        let c = sim_config(&args, &w, &p)?;
        let pb = indicatif::ProgressBar::new_spinner()
            .with_message("simulating the lagging group's drain");
        pb.enable_steady_tick(std::time::Duration::from_millis(200));
        let r = simulate(&c);
        pb.finish_and_clear();
        Some((c, r))
    } else {
        None
    };
    if args.json {
        let mut v = serde_json::to_value(&p)?;
        if let (Some(o), Some((c, r))) = (v.as_object_mut(), &sim) {
            o.insert(
                "simulation".into(),
                serde_json::json!({"config": c, "result": r}),
            );
        }
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print_plan(&w, &p);
    if let Some((c, r)) = &sim {
        print_sim(&p, c, r);
    }
    Ok(())
}

/// A latency for a sentence.
fn ms(s: f64) -> String {
    format!("{:.0} ms", s * 1e3)
}

fn rate(b: f64) -> String {
    format!("{}/s", human_bytes(b))
}

fn dollars(d: f64) -> String {
    if d >= 100.0 {
        format!("${d:.0}")
    } else {
        format!("${d:.2}")
    }
}

pub(super) fn print_plan(w: &Workload, p: &Plan) {
    outln!(
        "workload: {:.0} events/s of {} B, RF {}, retention {}, local {}, {} partitions",
        w.events_per_sec,
        w.event_bytes,
        w.replication_factor,
        human_secs(w.retention_secs),
        w.local_retention_secs
            .map_or_else(|| "everything (no tiering)".to_string(), human_secs),
        w.partitions
    );
    outln!("");
    outln!("throughput");
    outln!(
        "  ingress                  {}",
        rate(p.ingress_bytes_per_sec)
    );
    outln!(
        "  replicated write         {}",
        rate(p.replicated_bytes_per_sec)
    );
    outln!(
        "  per partition            {:.0} events/s, {}",
        p.events_per_partition_per_sec,
        rate(p.bytes_per_partition_per_sec)
    );
    outln!(
        "  group parallelism cap    {} consumers (one per partition)",
        p.partition_parallelism_cap
    );
    outln!(
        "  consumer reads           {} ({} live groups, {} lagging)",
        rate(p.read_bytes_per_sec),
        w.consumer_groups - w.lagging_groups,
        w.lagging_groups
    );
    outln!("brokers");
    outln!(
        "  for writes               {} (at {} each)",
        p.brokers_for_writes,
        rate(w.broker_write_budget)
    );
    outln!(
        "  for reads                {} (at {} each)",
        p.brokers_for_reads,
        rate(w.broker_read_budget)
    );
    outln!("  needed                   {}", p.brokers);
    outln!("storage");
    outln!(
        "  raw per day              {}",
        human_bytes(p.raw_bytes_per_day)
    );
    outln!(
        "  replicated per day       {}",
        human_bytes(p.replicated_bytes_per_day)
    );
    outln!(
        "  retained (replicated)    {}",
        human_bytes(p.retained_bytes)
    );
    outln!(
        "  local disk per broker    {} with tiering, {} without",
        human_bytes(p.local_bytes_per_broker),
        human_bytes(p.local_bytes_per_broker_without_tiering)
    );
    outln!(
        "  bucket                   {} (one copy of the retention)",
        human_bytes(p.bucket_bytes)
    );
    if p.tiered {
        outln!("object store");
        outln!(
            "  per partition            a segment every {}, {:.0} segments, {:.0} objects, manifest {}",
            human_secs(p.segment_roll_secs),
            p.segments_per_partition,
            p.objects_per_partition,
            human_bytes(p.manifest_bytes_per_partition)
        );
        outln!("  objects                  {:.0}", p.objects);
        outln!(
            "  PUT                      {:.1}/s ({:.2}/s per partition prefix), {} a month",
            p.put_per_sec,
            p.put_per_sec_per_partition,
            dollars(p.put_cost_per_month)
        );
        outln!(
            "  GET while catching up    {:.1}/s ({:.2}/s per partition prefix), {:.0} per catch-up, {} a month",
            p.get_per_sec_while_catching_up,
            p.get_per_sec_per_partition_while_catching_up,
            p.gets_per_catch_up,
            dollars(p.get_cost_per_month)
        );
        outln!(
            "  storage                  {} a month",
            dollars(p.storage_cost_per_month)
        );
    }
    if let Some(c) = &p.catch_up {
        outln!("catch-up");
        outln!(
            "  backlog                  {:.0} events ({})",
            c.backlog_events,
            human_bytes(c.backlog_bytes)
        );
        outln!(
            "  drain                    {} consumers x {:.0} events/s = {:.0} events/s, {:.0} over live traffic",
            c.consumers_effective,
            w.consumer_rate,
            c.drain_events_per_sec,
            c.surplus_events_per_sec
        );
        match c.seconds {
            Some(s) => outln!("  catch-up time            {} ({s:.0} s)", human_secs(s)),
            None => outln!("  catch-up time            never"),
        }
        outln!("  {}", c.status);
    }
    if !p.notes.is_empty() {
        outln!("notes");
        for n in &p.notes {
            outln!("  - {n}");
        }
    }
}

fn print_sim(p: &Plan, c: &SimConfig, r: &SimResult) {
    outln!(
        "simulation (seed {}, {} partitions over {} brokers)",
        c.seed,
        c.partitions,
        c.brokers
    );
    outln!(
        "  tier                     {} chunks, read-ahead {}, GET {} median / {} p99 at {}",
        human_bytes(c.chunk_bytes),
        c.read_ahead,
        ms(c.get_latency_median_secs),
        ms(c.get_latency_p99_secs),
        rate(c.get_bytes_per_sec)
    );
    match r.drain_secs {
        Some(s) => outln!(
            "  drain                    {} ({s:.0} s){}",
            human_secs(s),
            p.catch_up_seconds
                .map(|a| format!(", {:.2}x the arithmetic's {}", s / a, human_secs(a)))
                .unwrap_or_default()
        ),
        None => outln!(
            "  drain                    not within {}",
            human_secs(c.max_secs)
        ),
    }
    outln!(
        "  GETs                     {} ({}), {} read ahead in time",
        r.gets,
        human_bytes(r.get_bytes),
        r.cache_hits
    );
    outln!(
        "  chunks                   {} from the tier, {} local",
        r.tier_chunks,
        r.local_chunks
    );
    outln!(
        "  consumers waiting        {:.0}% of the time",
        r.consumer_wait_fraction * 100.0
    );
}
