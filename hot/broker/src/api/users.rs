//! SCRAM users (KIP-554): DescribeUserScramCredentials and AlterUserScramCredentials.
//!
//! The client sends the salted password (Hi(password, salt, i)), never the password; the
//! broker derives StoredKey and ServerKey from it and the controller stores those.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_auth::{Mechanism, ScramCredential};
use strata_controller::{
    ScramCredentialRecord, ScramDeletion, ScramUpsertion, SecurityChange, SecurityOutcome,
};
use strata_proto::ErrorCode;

use super::{Pending, RequestContext, encode_response, msg, ready};
use crate::broker::Broker;

/// KIP-554's mechanism codes.
fn mechanism(code: i8) -> Option<Mechanism> {
    match code {
        1 => Some(Mechanism::ScramSha256),
        2 => Some(Mechanism::ScramSha512),
        _ => None,
    }
}

fn mechanism_code(name: &str) -> i8 {
    match name {
        "SCRAM-SHA-256" => 1,
        "SCRAM-SHA-512" => 2,
        _ => 0,
    }
}

pub(super) fn describe(
    broker: &Arc<Broker>,
    ctx: RequestContext,
    req: DescribeUserScramCredentialsRequest,
) -> Pending {
    let md = broker.cluster();
    let scram = &md.security.scram;
    let mut resp = DescribeUserScramCredentialsResponse::default();
    if let Some(denied) =
        super::authz::deny_cluster(broker, &ctx, strata_authz::Operation::Describe)
    {
        resp.error_code = denied.code();
        resp.error_message = msg("not authorized to describe users (Describe on the cluster)");
        return ready(encode_response(&ctx, &resp));
    }
    let info = |user: &str, creds: &BTreeMap<String, ScramCredentialRecord>| {
        let mut r = DescribeUserScramCredentialsResult::default();
        r.user = StrBytes::from_string(user.to_string());
        r.credential_infos = creds
            .iter()
            .map(|(m, c)| {
                let mut i = CredentialInfo::default();
                i.mechanism = mechanism_code(m);
                i.iterations = c.iterations as i32;
                i
            })
            .collect();
        r
    };
    resp.results = match &req.users {
        // Null or empty: every user.
        None => scram.iter().map(|(u, c)| info(u, c)).collect(),
        Some(users) if users.is_empty() => scram.iter().map(|(u, c)| info(u, c)).collect(),
        Some(users) => {
            let mut count: HashMap<&str, usize> = HashMap::new();
            for u in users {
                *count.entry(u.name.as_str()).or_default() += 1;
            }
            let mut seen = std::collections::HashSet::new();
            users
                .iter()
                .filter(|u| seen.insert(u.name.as_str()))
                .map(|u| {
                    let name = u.name.as_str();
                    if count[name] > 1 {
                        let mut r = DescribeUserScramCredentialsResult::default();
                        r.user = u.name.clone();
                        r.error_code = ErrorCode::DuplicateResource.code();
                        r.error_message = msg(format!("user {name} is named more than once"));
                        r
                    } else if let Some(c) = scram.get(name) {
                        info(name, c)
                    } else {
                        let mut r = DescribeUserScramCredentialsResult::default();
                        r.user = u.name.clone();
                        r.error_code = ErrorCode::ResourceNotFound.code();
                        r.error_message = msg(format!(
                            "attempt to describe a user credential that does not exist: {name}"
                        ));
                        r
                    }
                })
                .collect()
        }
    };
    ready(encode_response(&ctx, &resp))
}

pub(super) fn alter(
    broker: Arc<Broker>,
    ctx: RequestContext,
    req: AlterUserScramCredentialsRequest,
) -> Pending {
    Box::pin(async move {
        let mut resp = AlterUserScramCredentialsResponse::default();
        let users: Vec<String> = req
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(req.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        let result = |user: &str, code: ErrorCode, message: Option<String>| {
            let mut r = AlterUserScramCredentialsResult::default();
            r.user = StrBytes::from_string(user.to_string());
            r.error_code = code.code();
            r.error_message = message.map(StrBytes::from_string);
            r
        };
        if super::authz::deny_cluster(&broker, &ctx, strata_authz::Operation::Alter).is_some() {
            let mut seen = std::collections::HashSet::new();
            resp.results = users
                .iter()
                .filter(|u| seen.insert(u.as_str()))
                .map(|u| {
                    result(
                        u,
                        ErrorCode::ClusterAuthorizationFailed,
                        Some("not authorized to alter users (Alter on the cluster)".into()),
                    )
                })
                .collect();
            return encode_response(&ctx, &resp);
        }
        // Kafka's checks: a user named twice is refused whole; then per entry the
        // mechanism, the name, and the credential's acceptability.
        let mut count: HashMap<&str, usize> = HashMap::new();
        for u in &users {
            *count.entry(u.as_str()).or_default() += 1;
        }
        let mut errors: BTreeMap<String, (ErrorCode, String)> = BTreeMap::new();
        for u in &users {
            if count[u.as_str()] > 1 {
                errors.insert(
                    u.clone(),
                    (
                        ErrorCode::DuplicateResource,
                        format!("user {u} is named more than once in one request"),
                    ),
                );
            } else if u.is_empty() {
                errors.insert(
                    u.clone(),
                    (
                        ErrorCode::UnacceptableCredential,
                        "the user name is empty".into(),
                    ),
                );
            }
        }
        let mut deletions = Vec::new();
        for d in &req.deletions {
            let user = d.name.to_string();
            if errors.contains_key(&user) {
                continue;
            }
            match mechanism(d.mechanism) {
                Some(m) => deletions.push(ScramDeletion {
                    user,
                    mechanism: m.name().to_string(),
                }),
                None => {
                    errors.insert(
                        user,
                        (
                            ErrorCode::UnsupportedSaslMechanism,
                            format!("unknown SCRAM mechanism code {}", d.mechanism),
                        ),
                    );
                }
            }
        }
        let mut upsertions = Vec::new();
        for u in &req.upsertions {
            let user = u.name.to_string();
            if errors.contains_key(&user) {
                continue;
            }
            let Some(m) = mechanism(u.mechanism) else {
                errors.insert(
                    user,
                    (
                        ErrorCode::UnsupportedSaslMechanism,
                        format!("unknown SCRAM mechanism code {}", u.mechanism),
                    ),
                );
                continue;
            };
            let credential = u32::try_from(u.iterations)
                .map_err(|_| format!("iterations {} is negative", u.iterations))
                .and_then(|i| {
                    ScramCredential::from_salted_password(m, &u.salted_password, &u.salt, i)
                        .map_err(|e| e.to_string())
                });
            match credential {
                Ok(c) => upsertions.push(ScramUpsertion {
                    user,
                    mechanism: m.name().to_string(),
                    credential: crate::security::scram_record(&c),
                }),
                Err(e) => {
                    errors.insert(user, (ErrorCode::UnacceptableCredential, e));
                }
            }
        }
        let mut outcome: BTreeMap<String, Option<String>> = BTreeMap::new();
        if !deletions.is_empty() || !upsertions.is_empty() {
            let change = SecurityChange::AlterScram {
                upsertions,
                deletions,
                only_if_absent: false,
            };
            match broker.security.change(change).await {
                Ok(SecurityOutcome::Scram(results)) => {
                    for r in results {
                        // One error per user is enough; the first one wins.
                        let e = outcome.entry(r.user).or_default();
                        if e.is_none() {
                            *e = r.error;
                        }
                    }
                }
                Ok(other) => {
                    tracing::error!(?other, "unexpected answer to AlterScram");
                }
                Err((code, message)) => {
                    for u in &users {
                        errors.entry(u.clone()).or_insert((code, message.clone()));
                    }
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        resp.results = users
            .iter()
            .filter(|u| seen.insert(u.as_str()))
            .map(|u| match errors.get(u) {
                Some((code, m)) => result(u, *code, Some(m.clone())),
                None => match outcome.get(u).cloned().flatten() {
                    Some(e) => result(u, ErrorCode::ResourceNotFound, Some(e)),
                    None => result(u, ErrorCode::None, None),
                },
            })
            .collect();
        encode_response(&ctx, &resp)
    })
}
