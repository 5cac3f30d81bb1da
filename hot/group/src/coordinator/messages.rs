//! The coordinator's request and response types: JoinGroup and SyncGroup with their
//! answers (immediate or deferred as a [`Completion`]), and DescribeGroups' answer.

use bytes::Bytes;
use strata_proto::ErrorCode;

/// A JoinGroup request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinGroup {
    /// The group.
    pub group_id: String,
    /// The member id; empty for a member joining for the first time.
    pub member_id: String,
    /// The static instance id (KIP-345).
    pub group_instance_id: Option<String>,
    /// The protocol type (`"consumer"`).
    pub protocol_type: String,
    /// Supported protocols in preference order, with their metadata.
    pub protocols: Vec<(String, Bytes)>,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout (for JoinGroup v0, pass the session timeout).
    pub rebalance_timeout_ms: i32,
    /// The client id.
    pub client_id: String,
    /// The client host.
    pub client_host: String,
    /// Request version >= 4 (KIP-394): a new member first gets `MEMBER_ID_REQUIRED`.
    pub require_known_member_id: bool,
}

/// One member as the leader sees it in its JoinGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member id.
    pub member_id: String,
    /// The static instance id.
    pub group_instance_id: Option<String>,
    /// The member's metadata for the selected protocol.
    pub metadata: Bytes,
}

/// A JoinGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinResponse {
    /// The error (`None` on success).
    pub error: ErrorCode,
    /// The generation (-1 on error).
    pub generation_id: i32,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The selected protocol.
    pub protocol_name: Option<String>,
    /// The leader's member id (empty on error).
    pub leader: String,
    /// The member's id (the newly assigned one with `MEMBER_ID_REQUIRED`).
    pub member_id: String,
    /// Every member's metadata: only in the leader's response.
    pub members: Vec<MemberInfo>,
}

impl JoinResponse {
    pub(super) fn error(error: ErrorCode, member_id: &str) -> Self {
        JoinResponse {
            error,
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }
}

/// A SyncGroup request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncGroup {
    /// The group.
    pub group_id: String,
    /// The generation the member joined.
    pub generation_id: i32,
    /// The member id.
    pub member_id: String,
    /// The static instance id.
    pub group_instance_id: Option<String>,
    /// The protocol type (v5+), checked against the group's.
    pub protocol_type: Option<String>,
    /// The protocol name (v5+), checked against the group's.
    pub protocol_name: Option<String>,
    /// The leader's assignment (empty for followers).
    pub assignments: Vec<(String, Bytes)>,
}

/// A SyncGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncResponse {
    /// The error (`None` on success).
    pub error: ErrorCode,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The selected protocol.
    pub protocol_name: Option<String>,
    /// This member's assignment.
    pub assignment: Bytes,
}

impl SyncResponse {
    pub(super) fn error(error: ErrorCode) -> Self {
        SyncResponse {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// A deferred answer to a parked JoinGroup or SyncGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The answer to the JoinGroup parked under this ticket.
    Join(u64, JoinResponse),
    /// The answer to the SyncGroup parked under this ticket.
    Sync(u64, SyncResponse),
}

impl Completion {
    /// The ticket this completion answers.
    pub fn ticket(&self) -> u64 {
        match self {
            Completion::Join(t, _) | Completion::Sync(t, _) => *t,
        }
    }
}

/// One member in a DescribeGroups answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberDescription {
    /// The member id.
    pub member_id: String,
    /// The static instance id.
    pub group_instance_id: Option<String>,
    /// The client id.
    pub client_id: String,
    /// The client host.
    pub client_host: String,
    /// The member's metadata for the selected protocol (empty before one is selected).
    pub metadata: Bytes,
    /// The member's current assignment.
    pub assignment: Bytes,
}

/// A DescribeGroups answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    /// Kafka's state name.
    pub state: &'static str,
    /// The protocol type (`""` when none).
    pub protocol_type: String,
    /// The selected protocol (`""` when none).
    pub protocol: String,
    /// The current generation.
    pub generation_id: i32,
    /// The leader's member id, if any.
    pub leader: Option<String>,
    /// The members.
    pub members: Vec<MemberDescription>,
}
