//! `consume`: a topic read from the beginning, every partition assigned, as fast as the
//! broker serves it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::client::{Quiet, base_config, partitions, progress};
use crate::cpu::CpuMeter;
use crate::report::mb_per_s;
use crate::{ConsumeArgs, Report};

pub(crate) fn consume(a: &ConsumeArgs) -> anyhow::Result<Report> {
    let b = &a.broker;
    let mut config = base_config(b);
    config
        // librdkafka's assign() needs a group handle; we never subscribe or commit, so no
        // group forms (and brokers without group APIs are never asked about one).
        .set("group.id", "strata-benches")
        .set("isolation.level", &a.isolation)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest");
    let consumer: BaseConsumer<Quiet> = config
        .create_with_context(Quiet::default())
        .context("cannot create the consumer")?;
    let parts = partitions(consumer.client(), b)?;
    let mut assignment = TopicPartitionList::new();
    let mut available = 0u64;
    // Partitions still to read up to the end they had at the start.
    let mut open: BTreeMap<i32, i64> = BTreeMap::new();
    for p in 0..parts {
        let (low, high) = consumer
            .fetch_watermarks(&b.topic, p, b.timeout)
            .with_context(|| format!("ListOffsets of partition {p}"))?;
        available += (high - low).max(0) as u64;
        if high > low {
            open.insert(p, high);
        }
        assignment
            .add_partition_offset(&b.topic, p, Offset::Beginning)
            .context("bad partition list")?;
    }
    let target = a.records.map_or(available, |n| n.min(available));
    let bar = progress(b, target, "records");
    let cpu = CpuMeter::start(b.broker_pid)?;
    let t0 = Instant::now();
    consumer.assign(&assignment).context("assign")?;
    let mut records = 0u64;
    let mut bytes = 0u64;
    let mut last_progress = Instant::now();
    let mut last_draw = t0;
    while records < target && !open.is_empty() {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                records += 1;
                bytes += (m.payload_len() + m.key().map_or(0, <[u8]>::len)) as u64;
                if open
                    .get(&m.partition())
                    .is_some_and(|end| m.offset() + 1 >= *end)
                {
                    open.remove(&m.partition());
                }
                last_progress = Instant::now();
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                open.remove(&p);
                last_progress = Instant::now();
            }
            Some(Err(e)) => eprintln!("warning: {e}"),
            None => {}
        }
        if last_progress.elapsed() > b.timeout {
            bail!(
                "no records for {:?} after {records} of {target} (last error: {})",
                b.timeout,
                consumer.context().last_error()
            );
        }
        if last_draw.elapsed() >= Duration::from_millis(250) {
            last_draw = Instant::now();
            bar.set_position(records);
            bar.set_message(format!(
                "{:.1} MB/s",
                mb_per_s(bytes, t0.elapsed().as_secs_f64())
            ));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let (cpu_s, cpu_per_gb) = cpu.finish(bytes)?;
    let mut settings = BTreeMap::new();
    settings.insert("partitions".into(), parts.to_string());
    settings.insert("available".into(), available.to_string());
    settings.insert("isolation".into(), a.isolation.clone());
    Ok(Report {
        broker_cpu_seconds: cpu_s,
        broker_cpu_s_per_gb: cpu_per_gb,
        ..Report::new(
            "consume",
            Some(b.topic.clone()),
            records,
            bytes,
            secs,
            settings,
        )
    })
}
