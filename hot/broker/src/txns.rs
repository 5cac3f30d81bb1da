//! The broker's side of transactions (KIP-98): one [`TransactionCoordinator`] (strata-txn)
//! for the partitions of `__transaction_state` this broker leads, loaded from their logs
//! when it becomes leader and unloaded when it stops leading. What the coordinator asks
//! for is done here: its records are appended to their partition (acks=all) before the
//! transition they persist takes effect, and its markers are written to every partition
//! a transaction added — by this broker when it leads the partition, else with
//! WriteTxnMarkers to the leader — retried until they land or the coordinator moves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_log::Clock;
use strata_proto::ErrorCode;
use strata_proto::control::{Marker, MarkerKind};
use strata_txn::{
    Action, Outcome, Reply, SendMarkers, TransactionCoordinator, TxnConfig, TxnWrite, WriteTicket,
};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::error::ApiError;
use crate::groups::Groups;
use crate::kafka_client::KafkaConnection;
use crate::replicas::ReplicaManager;

pub const TXN_TOPIC: &str = strata_txn::TRANSACTION_STATE_TOPIC;

/// The longest an EndTxn answer waits for its transaction's markers (see
/// `Broker::spawn_txn_write`); past it, it is answered (the Prepare record decided the
/// outcome) and the markers go on in the background.
const END_TXN_WAIT: Duration = Duration::from_secs(1);

/// Producer ids are reserved from the controller in blocks, as Kafka's ProducerIdManager
/// does.
const PRODUCER_ID_BLOCK: i64 = 1000;

/// The transaction coordinator service (Kafka's `TransactionCoordinator`): the
/// coordinator of the `__transaction_state` partitions led here, what waits on it, and
/// the producer ids this broker hands out.
pub struct Txns {
    replicas: Arc<ReplicaManager>,
    /// Transactional offset commits end in the group coordinator.
    groups: Arc<Groups>,
    clock: Arc<dyn Clock>,
    config: Arc<BrokerConfig>,
    /// The block of producer ids being handed out: (next, end).
    producer_ids: tokio::sync::Mutex<(i64, i64)>,
    coordinator: Mutex<TransactionCoordinator>,
    /// The `__transaction_state` partitions loaded, with the leader epoch they were
    /// loaded in (the coordinator epoch of their markers).
    loaded: Mutex<HashMap<i32, i32>>,
    /// Requests waiting for the write their answer depends on.
    waiters: Mutex<HashMap<WriteTicket, oneshot::Sender<Option<Reply>>>>,
    /// Wakes the loader at once after a metadata change.
    wake: tokio::sync::Notify,
    /// Told whenever partitions were loaded.
    loads: tokio::sync::Notify,
}

impl std::fmt::Debug for Txns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Txns")
            .field(
                "loaded",
                &*self.loaded.lock().unwrap_or_else(|e| e.into_inner()),
            )
            .finish_non_exhaustive()
    }
}

impl Txns {
    pub fn new(
        replicas: Arc<ReplicaManager>,
        groups: Arc<Groups>,
        clock: Arc<dyn Clock>,
        config: Arc<BrokerConfig>,
    ) -> Txns {
        let txn_config = TxnConfig {
            transaction_max_timeout_ms: config
                .transaction_max_timeout
                .as_millis()
                .min(i32::MAX as u128) as i32,
            transactional_id_expiration_ms: config.transactional_id_expiration.as_millis() as i64,
            txn_state_partitions: config.transaction_state_partitions,
        };
        Txns {
            replicas,
            groups,
            clock,
            config,
            producer_ids: tokio::sync::Mutex::new((0, 0)),
            coordinator: Mutex::new(TransactionCoordinator::new(txn_config)),
            loaded: Mutex::new(HashMap::new()),
            waiters: Mutex::new(HashMap::new()),
            wake: tokio::sync::Notify::new(),
            loads: tokio::sync::Notify::new(),
        }
    }

    /// Runs `f` on the coordinator.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut TransactionCoordinator) -> T) -> T {
        f(&mut self.coordinator.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Has the loader look at leadership now (after a metadata change).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    fn is_loaded(&self, partition: i32) -> bool {
        self.loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&partition)
    }

    /// Hands out a new producer id (InitProducerId; in Kafka too, the transaction
    /// coordinator's ProducerIdManager hands them out).
    pub(crate) async fn next_producer_id(&self) -> Result<i64, ApiError> {
        let mut g = self.producer_ids.lock().await;
        if g.0 >= g.1 {
            let first = self
                .replicas
                .controller()
                .allocate_producer_ids(PRODUCER_ID_BLOCK)
                .await?;
            *g = (first, first + PRODUCER_ID_BLOCK);
        }
        let id = g.0;
        g.0 += 1;
        Ok(id)
    }

    /// The Kafka address of broker `id`, if it is registered and not fenced.
    fn unfenced_addr(&self, id: i32) -> Option<String> {
        self.replicas
            .cluster()
            .broker(id)
            .filter(|b| !b.fenced)
            .map(|b| format!("{}:{}", b.host, b.port))
    }

    /// The `__transaction_state` partition of `transactional_id`, creating the topic on
    /// first use; waits (bounded) for its load when it is led here.
    pub(crate) async fn txn_partition_for(
        self: &Arc<Self>,
        transactional_id: &str,
    ) -> Result<i32, ApiError> {
        // Compacted: the latest state of each transactional id is what counts.
        let count = self
            .replicas
            .internal_topic_partitions(TXN_TOPIC, self.config.transaction_state_partitions)
            .await?;
        let partition = strata_txn::partition_for(transactional_id, count);
        let led_here = self
            .replicas
            .cluster()
            .topic(TXN_TOPIC)
            .and_then(|t| t.partition(partition))
            .is_some_and(|p| p.leader == self.replicas.node_id());
        if led_here {
            crate::coordinator::await_load(
                &self.loads,
                || self.is_loaded(partition),
                || self.wake(),
                Duration::from_secs(5),
            )
            .await;
        }
        Ok(partition)
    }

    /// Carries out a coordinator outcome: the answer now, or its write and then the
    /// answer the write leads to (`from_reply`); `failed` when the write's answer never
    /// comes (the coordinator moved).
    pub(crate) async fn txn_request<T>(
        self: &Arc<Self>,
        outcome: Outcome<T>,
        from_reply: impl FnOnce(Reply) -> Option<T>,
        failed: T,
    ) -> T {
        match outcome {
            Outcome::Reply(t) => t,
            Outcome::Write(w) => {
                let (tx, rx) = oneshot::channel();
                self.waiters
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(w.ticket, tx);
                self.spawn_txn_write(w, None);
                match rx.await {
                    Ok(Some(r)) => from_reply(r).unwrap_or(failed),
                    _ => failed,
                }
            }
        }
    }

    /// Does what the coordinator asked for, each in its own task.
    pub(crate) fn run_txn_actions(self: &Arc<Self>, actions: Vec<Action>) {
        self.run_txn_actions_then(actions, None);
    }

    /// [`Self::run_txn_actions`]; `completed` is told when the transaction's markers
    /// are all written and its Complete record is (or is dropped when they are
    /// abandoned).
    fn run_txn_actions_then(
        self: &Arc<Self>,
        actions: Vec<Action>,
        mut completed: Option<oneshot::Sender<()>>,
    ) {
        for a in actions {
            match a {
                Action::Write(w) => self.spawn_txn_write(w, None),
                Action::SendMarkers(s) => {
                    let b = self.clone();
                    let done = completed.take();
                    tokio::spawn(async move { b.send_markers(s, done).await });
                }
            }
        }
    }

    /// Appends a coordinator record, then reports the result (and hands the answer to
    /// the request waiting for it, and runs what follows); `then` is told once it is
    /// written.
    ///
    /// EndTxn is answered once the transaction is complete (its markers written and its
    /// Complete record too), at most [`END_TXN_WAIT`] after its Prepare record (which
    /// already decides it), rather than at once: the producer's next transaction starts
    /// with AddPartitionsToTxn, which the coordinator refuses with
    /// CONCURRENT_TRANSACTIONS until the previous one is complete, and librdkafka then
    /// backs off for its retry.backoff.ms (100 ms) — most of a transaction that
    /// commits every 100 ms.
    fn spawn_txn_write(self: &Arc<Self>, w: TxnWrite, then: Option<oneshot::Sender<()>>) {
        let b = self.clone();
        tokio::spawn(async move {
            let result = b.append_txn_record(&w).await;
            if let Err(code) = result {
                tracing::debug!(transactional_id = %w.transactional_id, ?code, "transaction state write failed");
            }
            if let Some(t) = then {
                let _ = t.send(());
            }
            let now = b.clock.now_ms();
            let done = b.with(|c| c.on_write_complete(w.ticket, result, now));
            let waiter = b
                .waiters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&w.ticket);
            let ends = matches!(done.reply, Some(Reply::EndTxn(ErrorCode::None)))
                && done
                    .actions
                    .iter()
                    .any(|a| matches!(a, Action::SendMarkers(_)));
            if ends {
                let (tx, rx) = oneshot::channel();
                b.run_txn_actions_then(done.actions, Some(tx));
                let _ = tokio::time::timeout(END_TXN_WAIT, rx).await;
                if let Some(w) = waiter {
                    let _ = w.send(done.reply);
                }
            } else {
                if let Some(w) = waiter {
                    let _ = w.send(done.reply);
                }
                b.run_txn_actions(done.actions);
            }
        });
    }

    /// Appends one record to its `__transaction_state` partition as its leader, in the
    /// coordinator epoch it was asked in, and waits for the in-sync replicas.
    async fn append_txn_record(&self, w: &TxnWrite) -> Result<(), ErrorCode> {
        let p = self
            .replicas
            .partition(TXN_TOPIC, w.partition)
            .filter(|p| p.is_leader() && p.leader_epoch() == w.coordinator_epoch)
            .ok_or(ErrorCode::NotCoordinator)?;
        let records = vec![(w.key.clone(), w.value.clone())];
        crate::coordinator::append_and_wait(&p, &*self.clock, records)
            .await
            .map_err(|e| e.error_code())?
            .map(|_| ())
    }

    /// Writes a transaction's markers to every partition it added, retrying (the
    /// leaders move, brokers restart) until each is written or the coordinator no
    /// longer owns the transaction, then reports them.
    async fn send_markers(
        self: Arc<Self>,
        s: SendMarkers,
        mut completed: Option<oneshot::Sender<()>>,
    ) {
        let kind = if s.commit {
            MarkerKind::Commit
        } else {
            MarkerKind::Abort
        };
        let mut left: Vec<(String, i32)> = s.partitions.clone();
        let mut backoff = Duration::from_millis(50);
        while !left.is_empty() {
            let owned = self
                .loaded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&s.txn_partition)
                == Some(&s.coordinator_epoch);
            if !owned {
                tracing::debug!(transactional_id = %s.transactional_id, "markers abandoned: the coordinator moved");
                return;
            }
            let marker = Marker {
                kind,
                producer_id: s.producer_id,
                producer_epoch: s.producer_epoch,
                coordinator_epoch: s.coordinator_epoch,
                timestamp: self.clock.now_ms(),
            };
            // By leader, as the metadata has them now.
            let md = self.replicas.cluster();
            let mut by_leader: HashMap<i32, Vec<(String, i32)>> = HashMap::new();
            let mut done = Vec::new();
            for (t, p) in &left {
                match md.topic(t).and_then(|topic| topic.partition(*p)) {
                    // A deleted topic takes no marker (Kafka drops it the same way).
                    None if md.topic(t).is_none() => done.push((t.clone(), *p)),
                    None => {}
                    Some(part) => by_leader
                        .entry(part.leader)
                        .or_default()
                        .push((t.clone(), *p)),
                }
            }
            let mut fenced = false;
            // Every leader at once, and every partition led here at once.
            let sends = by_leader.into_iter().map(|(leader, parts)| {
                let (b, marker) = (&self, &marker);
                async move {
                    if leader == b.replicas.node_id() {
                        futures::future::join_all(parts.into_iter().map(|(t, p)| async move {
                            let code = b.write_marker_here(&t, p, marker).await;
                            (t, p, code)
                        }))
                        .await
                    } else {
                        b.write_markers_remote(leader, marker, parts).await
                    }
                }
            });
            for results in futures::future::join_all(sends).await {
                for (t, p, code) in results {
                    match code {
                        ErrorCode::None => done.push((t, p)),
                        ErrorCode::InvalidProducerEpoch
                        | ErrorCode::TransactionCoordinatorFenced => {
                            tracing::warn!(transactional_id = %s.transactional_id, topic = %t, partition = p, ?code, "marker refused; the coordinator stops sending them");
                            fenced = true;
                        }
                        code => {
                            tracing::debug!(topic = %t, partition = p, ?code, "marker not written yet; retrying")
                        }
                    }
                }
            }
            if fenced {
                return;
            }
            left.retain(|x| !done.contains(x));
            if !done.is_empty() {
                let now = self.clock.now_ms();
                if let Some(w) = self.with(|c| c.on_markers_complete(&s, &done, now)) {
                    self.spawn_txn_write(w, completed.take());
                }
            }
            if !left.is_empty() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }

    /// Appends a marker to a partition this broker leads and waits for the in-sync
    /// replicas (WriteTxnMarkers, and the coordinator's own markers).
    pub(crate) async fn write_marker_here(
        &self,
        topic: &str,
        index: i32,
        marker: &Marker,
    ) -> ErrorCode {
        let Some(p) = self.replicas.partition(topic, index) else {
            return ErrorCode::UnknownTopicOrPartition;
        };
        if !p.is_leader() {
            return ErrorCode::NotLeaderOrFollower;
        }
        let (info, epoch) = match p.append_marker(marker) {
            Ok(x) => x,
            Err(e) => return e.error_code(),
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let code = p.wait_acked(info.last_offset + 1, epoch, deadline).await;
        if code == ErrorCode::None && topic == crate::groups::OFFSETS_TOPIC {
            self.groups.complete_txn(
                index,
                marker.producer_id,
                marker.kind == MarkerKind::Commit,
                info.first_offset,
            );
        }
        code
    }

    /// WriteTxnMarkers to broker `leader` for `parts`: each partition's error code.
    async fn write_markers_remote(
        &self,
        leader: i32,
        marker: &Marker,
        parts: Vec<(String, i32)>,
    ) -> Vec<(String, i32, ErrorCode)> {
        let fail = |code: ErrorCode, parts: &[(String, i32)]| {
            parts.iter().map(|(t, p)| (t.clone(), *p, code)).collect()
        };
        let Some(addr) = self.unfenced_addr(leader) else {
            return fail(ErrorCode::NotLeaderOrFollower, &parts);
        };
        let client_id = format!("strata-txn-markers-{}", self.replicas.node_id());
        let mut conn = match KafkaConnection::connect_with(
            &addr,
            &client_id,
            Duration::from_secs(3),
            &self.config.inter_broker_client,
        )
        .await
        {
            Ok(c) => c,
            Err(_) => return fail(ErrorCode::NotLeaderOrFollower, &parts),
        };
        let mut by_topic: HashMap<String, Vec<i32>> = HashMap::new();
        for (t, p) in &parts {
            by_topic.entry(t.clone()).or_default().push(*p);
        }
        let mut m = WritableTxnMarker::default();
        m.producer_id = ProducerId(marker.producer_id);
        m.producer_epoch = marker.producer_epoch;
        m.transaction_result = marker.kind == MarkerKind::Commit;
        m.coordinator_epoch = marker.coordinator_epoch;
        m.topics = by_topic
            .into_iter()
            .map(|(t, ps)| {
                let mut wt = WritableTxnMarkerTopic::default();
                wt.name = TopicName(StrBytes::from_string(t));
                wt.partition_indexes = ps;
                wt
            })
            .collect();
        let mut req = WriteTxnMarkersRequest::default();
        req.markers = vec![m];
        let resp: WriteTxnMarkersResponse = match conn
            .call(ApiKey::WriteTxnMarkers, 1, &req, Duration::from_secs(10))
            .await
        {
            Ok(r) => r,
            Err(_) => return fail(ErrorCode::RequestTimedOut, &parts),
        };
        let mut out = Vec::new();
        for r in resp.markers {
            for t in r.topics {
                for p in t.partitions {
                    out.push((
                        t.name.0.to_string(),
                        p.partition_index,
                        ErrorCode::from_code(p.error_code).unwrap_or(ErrorCode::UnknownServerError),
                    ));
                }
            }
        }
        out
    }
}

/// The partitions of a transactional produce request whose batch starts a transaction
/// there (the partition's producer state has no ongoing transaction of that producer
/// epoch): (topic, partition, producer id, epoch). Partitions not led here are left to
/// the append, which refuses them.
pub(crate) fn unverified_partitions(
    replicas: &ReplicaManager,
    req: &kafka_protocol::messages::ProduceRequest,
) -> Vec<(String, i32, i64, i16)> {
    let mut out = Vec::new();
    for t in &req.topic_data {
        let name = t.name.0.as_str();
        for pd in &t.partition_data {
            let Some(records) = &pd.records else { continue };
            let Ok(h) = strata_proto::batch::parse_header(records) else {
                continue;
            };
            if !h.is_transactional() || h.is_control() {
                continue;
            }
            let Some(p) = replicas.partition(name, pd.index).filter(|p| p.is_leader()) else {
                continue;
            };
            let ongoing = p.producer_entry(h.producer_id).is_some_and(|e| {
                e.epoch() == h.producer_epoch && e.current_txn_first_offset().is_some()
            });
            if !ongoing {
                out.push((name.to_string(), pd.index, h.producer_id, h.producer_epoch));
            }
        }
    }
    out
}

impl Txns {
    /// Asks the coordinator of `transactional_id` whether its transaction is ongoing
    /// with every one of `parts` added (KIP-890 part 1): in this process when it is
    /// here, else with AddPartitionsToTxn v4 (verify only).
    pub(crate) async fn verify_txn_partitions(
        self: &Arc<Self>,
        transactional_id: &str,
        parts: &[(String, i32, i64, i16)],
    ) -> Result<(), ErrorCode> {
        let partition = self
            .txn_partition_for(transactional_id)
            .await
            .map_err(|e| e.code)?;
        let leader = self
            .replicas
            .cluster()
            .topic(TXN_TOPIC)
            .and_then(|t| t.partition(partition))
            .map_or(-1, |p| p.leader);
        if leader == self.replicas.node_id() {
            for (t, p, pid, epoch) in parts {
                match self.with(|c| c.verify_partition(transactional_id, *pid, *epoch, t, *p)) {
                    Ok(true) => {}
                    Ok(false) => return Err(ErrorCode::InvalidTxnState),
                    Err(code) => return Err(code),
                }
            }
            return Ok(());
        }
        use kafka_protocol::messages::add_partitions_to_txn_request::{
            AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
        };
        use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};
        let Some(addr) = self.unfenced_addr(leader) else {
            return Err(ErrorCode::CoordinatorNotAvailable);
        };
        let client_id = format!("strata-txn-verify-{}", self.replicas.node_id());
        let mut conn = KafkaConnection::connect_with(
            &addr,
            &client_id,
            Duration::from_secs(3),
            &self.config.inter_broker_client,
        )
        .await
        .map_err(|_| ErrorCode::CoordinatorNotAvailable)?;
        let mut by_topic: HashMap<&str, Vec<i32>> = HashMap::new();
        for (t, p, _, _) in parts {
            by_topic.entry(t.as_str()).or_default().push(*p);
        }
        let mut txn = AddPartitionsToTxnTransaction::default();
        txn.transactional_id = kafka_protocol::messages::TransactionalId(StrBytes::from_string(
            transactional_id.to_string(),
        ));
        txn.producer_id = ProducerId(parts[0].2);
        txn.producer_epoch = parts[0].3;
        txn.verify_only = true;
        txn.topics = by_topic
            .into_iter()
            .map(|(t, ps)| {
                let mut at = AddPartitionsToTxnTopic::default();
                at.name = TopicName(StrBytes::from_string(t.to_string()));
                at.partitions = ps;
                at
            })
            .collect();
        let mut req = AddPartitionsToTxnRequest::default();
        req.transactions = vec![txn];
        let resp: AddPartitionsToTxnResponse = conn
            .call(ApiKey::AddPartitionsToTxn, 4, &req, Duration::from_secs(10))
            .await
            .map_err(|_| ErrorCode::CoordinatorNotAvailable)?;
        if resp.error_code != 0 {
            return Err(
                ErrorCode::from_code(resp.error_code).unwrap_or(ErrorCode::UnknownServerError)
            );
        }
        for r in resp.results_by_transaction {
            for t in r.topic_results {
                for p in t.results_by_partition {
                    if p.partition_error_code != 0 {
                        return Err(ErrorCode::from_code(p.partition_error_code)
                            .unwrap_or(ErrorCode::UnknownServerError));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Reads a `__transaction_state` partition's log: its records, in log order.
fn read_txn_log(p: &crate::partition::Partition) -> Result<Vec<(Bytes, Option<Bytes>)>, ApiError> {
    let mut out = Vec::new();
    crate::coordinator::read_log(p, p.high_watermark(), |data, _| {
        for b in strata_proto::batch::batches(data) {
            let Ok(b) = b else { break };
            if b.header().is_control() {
                continue;
            }
            let Ok(records) = b.records() else {
                tracing::warn!(
                    partition = p.index,
                    offset = b.base_offset(),
                    "skipped a transaction state batch that does not decode"
                );
                continue;
            };
            for rec in records.iter() {
                let Ok(rec) = rec else { break };
                if let Some(k) = rec.key {
                    out.push((
                        Bytes::copy_from_slice(k),
                        rec.value.map(Bytes::copy_from_slice),
                    ));
                }
            }
        }
    })
    .map_err(|e| ApiError::new(e.error_code(), e.to_string()))?;
    Ok(out)
}

impl Txns {
    /// Keeps the coordinator in line with the `__transaction_state` partitions this
    /// broker leads, and ticks it (timeouts, expiry, retries); until `shutdown`.
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut interval = tokio::time::interval(Duration::from_millis(200));
        let mut reconciled = self.replicas.watch_reconciled();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = interval.tick() => {}
                _ = self.wake.notified() => {}
                // A transaction state partition may be led here now: load it at once.
                _ = reconciled.changed() => {}
            }
            let loaded: Vec<(i32, i32)> = self
                .loaded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(&p, &e)| (p, e))
                .collect();
            let loads = crate::coordinator::loads(&self.replicas, TXN_TOPIC, &loaded);
            for p in &loads.unload {
                self.with(|c| c.unload_partition(*p));
                self.loaded
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(p);
                tracing::info!(partition = p, "unloaded a transaction state partition");
            }
            let now = self.clock.now_ms();
            let mut any = false;
            for (index, epoch, p) in loads.load {
                let records = match tokio::task::spawn_blocking(move || read_txn_log(&p)).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => {
                        tracing::warn!(partition = index, error = %e.message, "cannot read a transaction state partition");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(partition = index, error = %e, "transaction state load panicked");
                        continue;
                    }
                };
                let n = records.len();
                let loaded = self.with(|c| {
                    c.load_partition(
                        index,
                        epoch,
                        records.iter().map(|(k, v)| (k.as_ref(), v.as_deref())),
                        now,
                    )
                });
                match loaded {
                    Ok(actions) => {
                        self.loaded
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(index, epoch);
                        tracing::info!(
                            partition = index,
                            epoch,
                            records = n,
                            resumed = actions.len(),
                            "loaded a transaction state partition"
                        );
                        self.run_txn_actions(actions);
                        any = true;
                    }
                    Err(e) => {
                        tracing::warn!(partition = index, error = %e, "cannot load a transaction state partition")
                    }
                }
            }
            if any {
                self.loads.notify_waiters();
            }
            let actions = self.with(|c| c.tick(now));
            self.run_txn_actions(actions);
        }
    }
}
