//! Bridges foyer's metrics (through its `mixtrics` registry trait) to the
//! `metrics` facade, so foyer's own counters reach `/metrics` next to ours.
//!
//! Among them is the one that says the disk tier is not keeping up:
//! `foyer_storage_inner_op_total{op="queue_channel_overflow"}` (and
//! `op="buffer_overflow"`) count chunks that foyer dropped instead of writing to
//! disk because its write queue was full.

use std::borrow::Cow;

use metrics::{Counter, Gauge, Histogram, Label};
use mixtrics::metrics::{
    BoxedCounter, BoxedCounterVec, BoxedGauge, BoxedGaugeVec, BoxedHistogram, BoxedHistogramVec,
    CounterOps, CounterVecOps, GaugeOps, GaugeVecOps, HistogramOps, HistogramVecOps, RegistryOps,
};

/// A mixtrics registry that registers into the global `metrics` recorder.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MetricsFacadeRegistry;

#[derive(Debug)]
struct Family {
    name: Cow<'static, str>,
    label_names: &'static [&'static str],
}

impl Family {
    fn labels(&self, values: &[Cow<'static, str>]) -> Vec<Label> {
        self.label_names
            .iter()
            .zip(values)
            .map(|(k, v)| Label::new(*k, v.clone()))
            .collect()
    }
}

#[derive(Debug)]
struct FacadeCounter(Counter);
#[derive(Debug)]
struct FacadeGauge(Gauge);
#[derive(Debug)]
struct FacadeHistogram(Histogram);

impl CounterOps for FacadeCounter {
    fn increase(&self, val: u64) {
        self.0.increment(val);
    }
}

impl GaugeOps for FacadeGauge {
    fn increase(&self, val: u64) {
        self.0.increment(val as f64);
    }

    fn decrease(&self, val: u64) {
        self.0.decrement(val as f64);
    }

    fn absolute(&self, val: u64) {
        self.0.set(val as f64);
    }
}

impl HistogramOps for FacadeHistogram {
    fn record(&self, val: f64) {
        self.0.record(val);
    }
}

impl CounterVecOps for Family {
    fn counter(&self, labels: &[Cow<'static, str>]) -> BoxedCounter {
        Box::new(FacadeCounter(metrics::counter!(
            self.name.clone(),
            self.labels(labels)
        )))
    }
}

impl GaugeVecOps for Family {
    fn gauge(&self, labels: &[Cow<'static, str>]) -> BoxedGauge {
        Box::new(FacadeGauge(metrics::gauge!(
            self.name.clone(),
            self.labels(labels)
        )))
    }
}

impl HistogramVecOps for Family {
    fn histogram(&self, labels: &[Cow<'static, str>]) -> BoxedHistogram {
        Box::new(FacadeHistogram(metrics::histogram!(
            self.name.clone(),
            self.labels(labels)
        )))
    }
}

impl RegistryOps for MetricsFacadeRegistry {
    fn register_counter_vec(
        &self,
        name: Cow<'static, str>,
        desc: Cow<'static, str>,
        label_names: &'static [&'static str],
    ) -> BoxedCounterVec {
        metrics::describe_counter!(name.clone(), desc);
        Box::new(Family { name, label_names })
    }

    fn register_gauge_vec(
        &self,
        name: Cow<'static, str>,
        desc: Cow<'static, str>,
        label_names: &'static [&'static str],
    ) -> BoxedGaugeVec {
        metrics::describe_gauge!(name.clone(), desc);
        Box::new(Family { name, label_names })
    }

    fn register_histogram_vec(
        &self,
        name: Cow<'static, str>,
        desc: Cow<'static, str>,
        label_names: &'static [&'static str],
    ) -> BoxedHistogramVec {
        metrics::describe_histogram!(name.clone(), desc);
        Box::new(Family { name, label_names })
    }

    fn register_histogram_vec_with_buckets(
        &self,
        name: Cow<'static, str>,
        desc: Cow<'static, str>,
        label_names: &'static [&'static str],
        // Buckets are the exporter's business with the `metrics` facade.
        _buckets: Vec<f64>,
    ) -> BoxedHistogramVec {
        self.register_histogram_vec(name, desc, label_names)
    }
}
