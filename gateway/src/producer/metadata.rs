//! Where partitions lead and who the producer is: Metadata requests (refreshed when a
//! topic is unknown, old, or marked stale by a leader change), InitProducerId, and the
//! connection both go over (the in-process broker, the bootstrap address, else any
//! broker metadata named).

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, MetadataRequest, MetadataResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use strata_client::KafkaConnection;

use super::CLIENT_ID;
use super::accumulator::Batch;
use super::engine::Engine;
use crate::service::{ServiceError, codes};

const METADATA_VERSION: i16 = 9;
const INIT_PRODUCER_ID_VERSION: i16 = 4;

/// Where a topic's partitions lead, as of `fetched`.
pub(super) struct TopicMeta {
    pub(super) fetched: Instant,
    pub(super) leaders: Vec<i32>,
    pub(super) stale: bool,
}

impl Engine {
    pub(super) fn mark_stale_all(&mut self, batches: &[Batch]) {
        for b in batches {
            if let Some(m) = self.topics.get_mut(&b.topic) {
                m.stale = true;
            }
        }
    }

    /// A connection for metadata and InitProducerId: the bootstrap address, else any
    /// broker metadata named.
    async fn meta_call<Req, Resp>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp, ServiceError>
    where
        Req: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::HeaderVersion,
        Resp: kafka_protocol::protocol::Decodable + kafka_protocol::protocol::HeaderVersion,
    {
        let timeout = self.config.request_timeout;
        if let Some(conn) = self.meta_conn.as_mut() {
            match conn.call(api, version, req, timeout).await {
                Ok(r) => return Ok(r),
                Err(e) => {
                    tracing::debug!(error = %e, "gateway producer: metadata connection lost");
                    self.meta_conn = None;
                }
            }
        }
        if let Some(l) = &self.config.local {
            let mut conn =
                KafkaConnection::local(&self.config.bootstrap, l.broker.clone(), CLIENT_ID);
            match conn.call(api, version, req, timeout).await {
                Ok(r) => {
                    self.meta_conn = Some(conn);
                    return Ok(r);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "gateway producer: in-process {api:?} failed")
                }
            }
        }
        let mut addrs = vec![self.config.bootstrap.clone()];
        addrs.extend(
            self.brokers
                .values()
                .filter(|a| **a != self.config.bootstrap)
                .cloned(),
        );
        let mut last = None;
        for addr in addrs {
            match KafkaConnection::connect_with(&addr, CLIENT_ID, timeout, &self.config.security)
                .await
            {
                Ok(mut conn) => match conn.call(api, version, req, timeout).await {
                    Ok(r) => {
                        self.meta_conn = Some(conn);
                        return Ok(r);
                    }
                    Err(e) => last = Some(e.to_string()),
                },
                Err(e) => last = Some(e.to_string()),
            }
        }
        Err(ServiceError::new(
            codes::LOCAL_ALL_BROKERS_DOWN,
            format!(
                "no broker answered {api:?}: {}",
                last.unwrap_or_else(|| "no address".into())
            ),
        ))
    }

    pub(super) async fn init_producer_id(&mut self) -> Result<(), ServiceError> {
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = None;
        req.transaction_timeout_ms = i32::MAX;
        req.producer_id = kafka_protocol::messages::ProducerId(-1);
        req.producer_epoch = -1;
        let resp: InitProducerIdResponse = self
            .meta_call(ApiKey::InitProducerId, INIT_PRODUCER_ID_VERSION, &req)
            .await?;
        if resp.error_code != 0 {
            return Err(ServiceError::new(
                i32::from(resp.error_code),
                format!("InitProducerId: error {}", resp.error_code),
            ));
        }
        self.producer = Some((resp.producer_id.0, resp.producer_epoch));
        Ok(())
    }

    pub(super) async fn refresh_metadata(
        &mut self,
        topics: &[Arc<str>],
    ) -> Result<(), ServiceError> {
        let mut req = MetadataRequest::default();
        req.topics = Some(
            topics
                .iter()
                .map(|t| {
                    let mut mt = MetadataRequestTopic::default();
                    mt.name = Some(TopicName(StrBytes::from_string(t.to_string())));
                    mt
                })
                .collect(),
        );
        req.allow_auto_topic_creation = false;
        let resp: MetadataResponse = self
            .meta_call(ApiKey::Metadata, METADATA_VERSION, &req)
            .await?;
        for b in &resp.brokers {
            self.brokers
                .insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
        }
        let now = Instant::now();
        for t in &resp.topics {
            let Some(name) = t.name.as_ref() else {
                continue;
            };
            let Some(key) = topics.iter().find(|k| ***k == *name.0.as_str()) else {
                continue;
            };
            if t.error_code != 0 {
                // Unknown topic: partitions with no leader entry fail below.
                self.topics.insert(
                    key.clone(),
                    TopicMeta {
                        fetched: now,
                        leaders: Vec::new(),
                        stale: false,
                    },
                );
                continue;
            }
            let n = t
                .partitions
                .iter()
                .map(|p| p.partition_index + 1)
                .max()
                .unwrap_or(0)
                .max(0) as usize;
            let mut leaders = vec![-1; n];
            for p in &t.partitions {
                if p.partition_index >= 0 {
                    leaders[p.partition_index as usize] =
                        if p.error_code == 0 { p.leader_id.0 } else { -1 };
                }
            }
            self.topics.insert(
                key.clone(),
                TopicMeta {
                    fetched: now,
                    leaders,
                    stale: false,
                },
            );
        }
        Ok(())
    }
}
