//! `commits`: consumer-group offset commits from several clients, with commit latency.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::client::{Quiet, base_config, partitions};
use crate::report::latency_of;
use crate::{CommitArgs, Report};

pub(crate) fn commits(a: &CommitArgs) -> anyhow::Result<Report> {
    let b = &a.broker;
    let probe: BaseConsumer<Quiet> = base_config(b)
        .set("group.id", format!("{}-probe", a.group))
        .create_with_context(Quiet::default())
        .context("cannot create a client")?;
    let parts = partitions(probe.client(), b)?;
    drop(probe);
    let latency = Mutex::new(Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?);
    let done = AtomicU64::new(0);
    let errors = AtomicU64::new(0);
    let first_error: Mutex<Option<String>> = Mutex::new(None);
    let t0 = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let mut handles = Vec::new();
        for i in 0..a.clients {
            let (latency, done, errors, first_error) = (&latency, &done, &errors, &first_error);
            let c: BaseConsumer<Quiet> = base_config(b)
                .set("group.id", format!("{}-{i}", a.group))
                .set("enable.auto.commit", "false")
                .create_with_context(Quiet::default())
                .context("cannot create a committer")?;
            let topic = b.topic.clone();
            let duration = a.duration;
            handles.push(scope.spawn(move || {
                let mut offset = 0i64;
                let mut local =
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("static bounds");
                while t0.elapsed() < duration {
                    offset += 1;
                    let mut tpl = TopicPartitionList::new();
                    let p = (offset % i64::from(parts)) as i32;
                    if tpl
                        .add_partition_offset(&topic, p, Offset::Offset(offset))
                        .is_err()
                    {
                        continue;
                    }
                    let started = Instant::now();
                    match c.commit(&tpl, rdkafka::consumer::CommitMode::Sync) {
                        Ok(()) => {
                            local.saturating_record(started.elapsed().as_micros() as u64);
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            if let Ok(mut g) = first_error.lock() {
                                g.get_or_insert_with(|| e.to_string());
                            }
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
                if let Ok(mut h) = latency.lock() {
                    let _ = h.add(&local);
                }
            }));
        }
        for h in handles {
            let _ = h.join();
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    if n == 0 {
        let e = first_error
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .unwrap_or_default();
        bail!("no commit succeeded: {e}");
    }
    let latency = latency.lock().ok().and_then(|h| latency_of(&h));
    let mut settings = BTreeMap::new();
    settings.insert("clients".into(), a.clients.to_string());
    settings.insert("partitions".into(), parts.to_string());
    Ok(Report {
        latency,
        errors: errors.load(Ordering::Relaxed),
        ..Report::new("commits", Some(b.topic.clone()), n, 0, secs, settings)
    })
}
