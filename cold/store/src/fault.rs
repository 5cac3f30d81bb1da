//! [`FaultStore`]: injects failures, delays and truncated bodies, controlled at run time
//! through a [`FaultHandle`]. For tests, here and in other crates.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{ErrorKind, Op, Result, StoreError};
use crate::store::{
    BlobStore, FileMode, MultipartUpload, ObjectMeta, PartId, PutMode, PutResult, ReadResult,
    UploadConfig,
};

/// One injected failure rule: which calls it hits and what they return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    kind: ErrorKind,
    op: Option<Op>,
    prefix: Option<String>,
    skip: u64,
    times: u64,
    after_call: bool,
}

impl Fault {
    /// Fails the next matching call with `kind` (once; see [`times`](Self::times)).
    pub fn new(kind: ErrorKind) -> Self {
        Self {
            kind,
            op: None,
            prefix: None,
            skip: 0,
            times: 1,
            after_call: false,
        }
    }

    /// Only calls of this operation (for example [`Op::PutPart`]).
    pub fn op(mut self, op: Op) -> Self {
        self.op = Some(op);
        self
    }

    /// Only keys starting with `prefix`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Fails `n` matching calls.
    pub fn times(mut self, n: u64) -> Self {
        self.times = n;
        self
    }

    /// Lets the first `n` matching calls through first: `skip(2)` on [`Op::PutPart`]
    /// fails the third part.
    pub fn skip(mut self, n: u64) -> Self {
        self.skip = n;
        self
    }

    /// Lets the call reach the store and replaces its answer with the error: a request
    /// that was applied but whose response was lost (the ambiguous timeout).
    pub fn after_call(mut self) -> Self {
        self.after_call = true;
        self
    }

    fn matches(&self, op: Op, path: &str) -> bool {
        self.op.is_none_or(|o| o == op)
            && self.prefix.as_deref().is_none_or(|p| path.starts_with(p))
    }
}

/// Faults drawn at random for every call, reproducibly from a seed: a steady error
/// rate rather than "the next N calls", for soak-style tests through the retry wrapper.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomFaults {
    /// Seeds the draws.
    pub seed: u64,
    /// The probability that a call fails.
    pub error_rate: f64,
    /// The kinds a failing call fails with, drawn uniformly.
    pub kinds: Vec<ErrorKind>,
    /// The probability that a Timeout or Transient failure happens after the call
    /// reached the store (the request was applied, the answer lost).
    pub after_call_rate: f64,
    /// The probability that a GET body is cut short (by 1 to 1000 bytes).
    pub truncate_rate: f64,
}

impl RandomFaults {
    /// The retriable faults of a flaky S3: throttling, transient errors and timeouts,
    /// half of them after the request was applied, and torn GET bodies.
    pub fn flaky(seed: u64, error_rate: f64) -> Self {
        Self {
            seed,
            error_rate,
            kinds: vec![
                ErrorKind::Throttled,
                ErrorKind::Transient,
                ErrorKind::Timeout,
            ],
            after_call_rate: 0.5,
            truncate_rate: error_rate / 2.0,
        }
    }
}

#[derive(Debug)]
struct Random {
    config: RandomFaults,
    state: u64,
}

impl Random {
    /// A uniform draw in [0, 1) (xorshift64*).
    fn draw(&mut self) -> f64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        (self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Debug, Default)]
struct State {
    random: Option<Random>,
    faults: Vec<Fault>,
    delays: Vec<(Option<Op>, Duration)>,
    /// (bytes cut off, how many more GET bodies to cut)
    truncate: Option<(u64, u64)>,
    calls: HashMap<Op, u64>,
    injected: u64,
}

/// What to do with one call.
#[derive(Debug, Default)]
struct Plan {
    delay: Duration,
    before: Option<StoreError>,
    after: Option<StoreError>,
}

/// Controls a [`FaultStore`] while it runs. Cheap to clone; all clones control the same
/// store.
#[derive(Debug, Clone, Default)]
pub struct FaultHandle {
    state: Arc<Mutex<State>>,
}

impl FaultHandle {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a failure rule. Rules are tried in the order added; the first one that
    /// matches a call and has no skips left fires.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Fails the next `n` calls, whatever they are, with `kind`.
    pub fn fail_next(&self, n: u64, kind: ErrorKind) {
        self.inject(Fault::new(kind).times(n));
    }

    /// Fails the `nth` (from 1) multipart part uploaded from now on with `kind`.
    pub fn fail_part(&self, nth: u64, kind: ErrorKind) {
        self.inject(Fault::new(kind).op(Op::PutPart).skip(nth.saturating_sub(1)));
    }

    /// Delays every call of `op` (every call if `None`) by `delay` before it reaches the
    /// store, until [`clear`](Self::clear).
    pub fn delay(&self, op: Option<Op>, delay: Duration) {
        self.lock().delays.push((op, delay));
    }

    /// Cuts the last `bytes` bytes off the body of the next `times` GETs (whole or
    /// ranged), keeping the announced range: what a torn HTTP response looks like.
    /// Callers must then get an error or, through the retry wrapper, the full body.
    pub fn truncate_next_gets(&self, times: u64, bytes: u64) {
        self.lock().truncate = Some((bytes, times));
    }

    /// Draws faults at random for every call from now on (after the explicit rules).
    pub fn random(&self, config: RandomFaults) {
        let state = config.seed | 1;
        self.lock().random = Some(Random { config, state });
    }

    /// Removes every rule, delay, truncation and random fault (the counters stay).
    pub fn clear(&self) {
        let mut s = self.lock();
        s.random = None;
        s.faults.clear();
        s.delays.clear();
        s.truncate = None;
    }

    /// How many calls of `op` reached the fault layer.
    pub fn calls(&self, op: Op) -> u64 {
        self.lock().calls.get(&op).copied().unwrap_or(0)
    }

    /// How many faults (errors and truncations) were injected.
    pub fn injected(&self) -> u64 {
        self.lock().injected
    }

    /// Rules not yet used up.
    pub fn pending(&self) -> usize {
        self.lock().faults.len()
    }

    fn plan(&self, op: Op, path: &str) -> Plan {
        let mut s = self.lock();
        *s.calls.entry(op).or_default() += 1;
        let delay = s
            .delays
            .iter()
            .filter(|(o, _)| o.is_none_or(|o| o == op))
            .map(|(_, d)| *d)
            .sum();
        let mut plan = Plan {
            delay,
            ..Plan::default()
        };
        let mut fired = None;
        for (i, f) in s.faults.iter_mut().enumerate() {
            if !f.matches(op, path) {
                continue;
            }
            if f.skip > 0 {
                f.skip -= 1;
                continue;
            }
            f.times = f.times.saturating_sub(1);
            fired = Some((i, f.kind, f.after_call, f.times == 0));
            break;
        }
        if let Some((i, _, _, true)) = fired {
            s.faults.remove(i);
        }
        if fired.is_none()
            && let Some(random) = s.random.as_mut()
            && !random.config.kinds.is_empty()
            && random.draw() < random.config.error_rate
        {
            let n = random.config.kinds.len();
            let pick = ((random.draw() * n as f64) as usize).min(n - 1);
            let kind = random.config.kinds[pick];
            // A throttled request was not applied (S3 refuses before doing anything), so
            // only timeouts and transient failures strike after the call.
            let after = random.draw() < random.config.after_call_rate
                && matches!(kind, ErrorKind::Timeout | ErrorKind::Transient);
            fired = Some((0, kind, after, false));
        }
        if let Some((_, kind, after, _)) = fired {
            s.injected += 1;
            let err = StoreError::new(kind, op, path, "injected fault");
            if after {
                plan.after = Some(err);
            } else {
                plan.before = Some(err);
            }
        }
        plan
    }

    fn truncation(&self) -> Option<u64> {
        let mut s = self.lock();
        let Some((bytes, times)) = s.truncate else {
            let random = s.random.as_mut()?;
            if random.draw() >= random.config.truncate_rate {
                return None;
            }
            let cut = 1 + (random.draw() * 1000.0) as u64;
            s.injected += 1;
            return Some(cut);
        };
        s.truncate = (times > 1).then_some((bytes, times - 1));
        s.injected += 1;
        Some(bytes)
    }
}

/// Injects faults in front of another store: errors of any kind before a call (it never
/// reaches the store) or after it (it was applied but the answer is lost), delays, and
/// GET bodies cut short, all switched at run time through [`FaultHandle`].
#[derive(Debug, Clone)]
pub struct FaultStore {
    inner: Arc<dyn BlobStore>,
    handle: FaultHandle,
}

impl FaultStore {
    /// Wraps `inner`, injecting nothing until told to.
    pub fn new(inner: Arc<dyn BlobStore>) -> Self {
        Self {
            inner,
            handle: FaultHandle::default(),
        }
    }

    /// The handle that controls this store.
    pub fn handle(&self) -> FaultHandle {
        self.handle.clone()
    }

    async fn call<T>(
        handle: &FaultHandle,
        op: Op,
        path: &str,
        fut: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let plan = handle.plan(op, path);
        if !plan.delay.is_zero() {
            tokio::time::sleep(plan.delay).await;
        }
        if let Some(e) = plan.before {
            return Err(e);
        }
        let result = fut.await;
        match plan.after {
            Some(e) => Err(e),
            None => result,
        }
    }
}

impl std::fmt::Display for FaultStore {
    /// `fault(inner)`; the alternate form (`{:#}`) is the backend alone, as users name
    /// it (`file:///dir`, `s3://bucket/prefix`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            write!(f, "{:#}", self.inner)
        } else {
            write!(f, "fault({})", self.inner)
        }
    }
}

#[async_trait]
impl BlobStore for FaultStore {
    async fn put(&self, path: &str, data: Bytes, mode: PutMode) -> Result<PutResult> {
        Self::call(
            &self.handle,
            Op::Put,
            path,
            self.inner.put(path, data, mode),
        )
        .await
    }

    async fn read(&self, path: &str, range: Option<Range<u64>>) -> Result<ReadResult> {
        let op = if range.is_some() {
            Op::GetRange
        } else {
            Op::Get
        };
        let mut r = Self::call(&self.handle, op, path, self.inner.read(path, range)).await?;
        if let Some(cut) = self.handle.truncation() {
            let keep = (r.data.len() as u64).saturating_sub(cut.max(1)) as usize;
            r.data.truncate(keep);
        }
        Ok(r)
    }

    async fn head(&self, path: &str) -> Result<ObjectMeta> {
        Self::call(&self.handle, Op::Head, path, self.inner.head(path)).await
    }

    async fn delete(&self, path: &str) -> Result<()> {
        Self::call(&self.handle, Op::Delete, path, self.inner.delete(path)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        Self::call(&self.handle, Op::List, prefix, self.inner.list(prefix)).await
    }

    async fn start_multipart(
        &self,
        path: &str,
        mode: FileMode,
        part_size: u64,
    ) -> Result<Box<dyn MultipartUpload>> {
        let inner = Self::call(
            &self.handle,
            Op::MultipartStart,
            path,
            self.inner.start_multipart(path, mode, part_size),
        )
        .await?;
        Ok(Box::new(FaultUpload {
            inner,
            handle: self.handle.clone(),
        }))
    }

    fn upload_config(&self) -> UploadConfig {
        self.inner.upload_config()
    }
}

#[derive(Debug)]
struct FaultUpload {
    inner: Box<dyn MultipartUpload>,
    handle: FaultHandle,
}

#[async_trait]
impl MultipartUpload for FaultUpload {
    fn path(&self) -> &str {
        self.inner.path()
    }

    async fn put_part(&self, index: usize, data: Bytes) -> Result<PartId> {
        FaultStore::call(
            &self.handle,
            Op::PutPart,
            self.path(),
            self.inner.put_part(index, data),
        )
        .await
    }

    async fn complete(&self, parts: Vec<PartId>) -> Result<PutResult> {
        FaultStore::call(
            &self.handle,
            Op::MultipartComplete,
            self.path(),
            self.inner.complete(parts),
        )
        .await
    }

    async fn abort(&self) -> Result<()> {
        FaultStore::call(
            &self.handle,
            Op::MultipartAbort,
            self.path(),
            self.inner.abort(),
        )
        .await
    }
}
