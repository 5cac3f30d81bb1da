//! The read-only requests: DescribeTransactions and ListTransactions (Kafka's
//! `handleDescribeTransactions` and `listTransactionStates`).

use strata_proto::ErrorCode;

use super::{ListFilter, ListedTxn, TransactionCoordinator, TxnDescription, TxnListing};
use crate::records::{self, TxnState};

impl TransactionCoordinator {
    /// DescribeTransactions for one transactional id: `Ok(None)` when it is unknown
    /// (answer TRANSACTIONAL_ID_NOT_FOUND, code 105), `Err` with NOT_COORDINATOR,
    /// COORDINATOR_LOAD_IN_PROGRESS or INVALID_REQUEST (empty id).
    pub fn describe(&self, transactional_id: &str) -> Result<Option<TxnDescription>, ErrorCode> {
        if transactional_id.is_empty() {
            return Err(ErrorCode::InvalidRequest);
        }
        let part = match self.partitions.get(&self.partition_for(transactional_id)) {
            None => return Err(ErrorCode::NotCoordinator),
            Some(p) if p.loading => return Err(ErrorCode::CoordinatorLoadInProgress),
            Some(p) => p,
        };
        Ok(part.txns.get(transactional_id).map(|t| {
            let m = &t.meta;
            TxnDescription {
                transactional_id: m.transactional_id.clone(),
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                state: m.state,
                transaction_timeout_ms: m.txn_timeout_ms,
                transaction_start_time_ms: m.txn_start_ms,
                topics: records::group_by_topic(&m.partitions),
            }
        }))
    }

    /// ListTransactions over every partition led here (Kafka's `listTransactionStates`):
    /// COORDINATOR_LOAD_IN_PROGRESS while any partition is loading. A transaction
    /// matches when its producer id and state are among the filters (if given) and it
    /// started more than `duration_ms` before `now` (if non-negative).
    pub fn list(&self, filter: &ListFilter, now: i64) -> Result<TxnListing, ErrorCode> {
        if self.partitions.values().any(|p| p.loading) {
            return Err(ErrorCode::CoordinatorLoadInProgress);
        }
        let mut listing = TxnListing::default();
        let mut states = Vec::new();
        for name in &filter.states {
            match TxnState::from_name(name) {
                Some(s) => states.push(s),
                None => listing.unknown_state_filters.push(name.clone()),
            }
        }
        let mut txns: Vec<ListedTxn> = self
            .partitions
            .values()
            .flat_map(|p| p.txns.values().map(|t| &t.meta))
            .filter(|m| m.state != TxnState::Dead)
            .filter(|m| {
                filter.producer_ids.is_empty() || filter.producer_ids.contains(&m.producer_id)
            })
            .filter(|m| filter.states.is_empty() || states.contains(&m.state))
            .filter(|m| {
                filter.duration_ms < 0 || now.saturating_sub(m.txn_start_ms) > filter.duration_ms
            })
            .map(|m| ListedTxn {
                transactional_id: m.transactional_id.clone(),
                producer_id: m.producer_id,
                state: m.state,
            })
            .collect();
        txns.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        listing.transactions = txns;
        Ok(listing)
    }
}
