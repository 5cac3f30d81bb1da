//! Security as one service ([`Security`]): who a client is (TLS certificates, SASL
//! credentials from the metadata), what it may do (the ACL authorizer, cached per metadata
//! version) and how much (client quotas). Handlers ask it; the listener and the SASL
//! exchange (in the API layer) authenticate through it.
//!
//! The ACLs live in the cluster metadata; the authorizer built over them is cached per
//! metadata version (rebuilt only when the metadata changes), so a check is an atomic
//! load and the strata-authz lookup (about 150-250 ns with 10,000 ACLs). With the
//! authorizer off (the default), everything is allowed, as Kafka without an authorizer.

pub mod quotas;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use base64::Engine as _;
use strata_auth::{Mechanism, ScramCredential};
use strata_authz::{Authorizer, Operation, ResourceType};
use strata_controller::{ScramCredentialRecord, SecurityChange, SecurityOutcome};
use strata_proto::ErrorCode;

use crate::metadata::MetadataCache;
use quotas::{Mute, Quotas};

/// The principal of this broker's own requests (the REST gateway's local link, the
/// coordinators): never authorized against ACLs nor throttled.
pub const INTERNAL: &str = "User:strata-internal";

/// What SASL listeners offer.
#[derive(Clone, Debug)]
pub struct SaslConfig {
    /// Enabled mechanisms (Kafka's sasl.enabled.mechanisms).
    pub mechanisms: Vec<Mechanism>,
    /// How OAUTHBEARER tokens are validated; `None` when OAUTHBEARER is off.
    pub oauth: Option<Arc<strata_auth::TokenValidator>>,
    /// Kafka's connections.max.reauth.ms: the longest a SASL session lasts before the
    /// client must re-authenticate; `None` for no limit (a token's own expiry still
    /// applies).
    pub max_reauth: Option<Duration>,
}

impl Default for SaslConfig {
    fn default() -> Self {
        SaslConfig {
            mechanisms: vec![Mechanism::ScramSha512, Mechanism::ScramSha256],
            oauth: None,
            max_reauth: None,
        }
    }
}

/// Security settings shared by every listener.
#[derive(Clone, Debug, Default)]
pub struct SecurityConfig {
    /// Kafka's ssl.principal.mapping.rules: how a client certificate's subject becomes a
    /// user name. `None` is Kafka's `DEFAULT`: the whole distinguished name.
    pub principal_mapping: Option<strata_auth::PrincipalMappingRules>,
    /// What SASL listeners offer.
    pub sasl: SaslConfig,
    /// ACL authorization (super users, allow.everyone.if.no.acl.found); `None` is off:
    /// every request is allowed, as Kafka without an authorizer.
    pub authorizer: Option<strata_authz::AuthorizerConfig>,
}

impl SecurityConfig {
    /// The principal (`User:NAME`) of a client certificate on an SSL listener.
    pub fn certificate_principal(&self, cert_der: &[u8]) -> Result<String, String> {
        let dn = strata_auth::subject_dn(cert_der)
            .map_err(|e| format!("cannot read the client certificate's subject: {e}"))?;
        // As Kafka: a subject no rule matches fails the authentication.
        let name = match &self.principal_mapping {
            Some(rules) => rules.map(&dn).map_err(|e| e.to_string())?,
            None => dn,
        };
        Ok(format!("User:{name}"))
    }
}

/// The authorizer of the current metadata version.
#[derive(Debug, Default)]
struct AuthzCache {
    current: ArcSwapOption<(u64, Arc<Authorizer>)>,
}

/// Authentication, authorization and quotas over the current metadata.
#[derive(Debug)]
pub struct Security {
    config: SecurityConfig,
    metadata: Arc<MetadataCache>,
    authz: AuthzCache,
    quotas: Quotas,
}

impl Security {
    pub fn new(config: SecurityConfig, metadata: Arc<MetadataCache>) -> Security {
        Security {
            config,
            metadata,
            authz: AuthzCache::default(),
            quotas: Quotas::default(),
        }
    }

    pub fn config(&self) -> &SecurityConfig {
        &self.config
    }

    /// The authorizer over the current metadata's ACLs, or `None` when authorization
    /// is off.
    pub fn authorizer(&self) -> Option<Arc<Authorizer>> {
        let config = self.config.authorizer.as_ref()?;
        let md = self.metadata.current();
        if let Some(c) = &*self.authz.current.load()
            && c.0 == md.version
        {
            return Some(c.1.clone());
        }
        let a = Arc::new(Authorizer::new(config.clone(), md.security.acls.clone()));
        self.authz
            .current
            .store(Some(Arc::new((md.version, a.clone()))));
        Some(a)
    }

    /// Whether an authorizer is on.
    pub fn authorizer_enabled(&self) -> bool {
        self.config.authorizer.is_some()
    }

    /// Whether `principal` from `peer` may do `operation` on the resource: the one check
    /// behind every API and the gateway. A denial is audited as `audit_api` (`None` for
    /// what is only filtered out, as Kafka's logIfDenied).
    pub fn check(
        &self,
        principal: &str,
        peer: SocketAddr,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
        audit_api: Option<&str>,
    ) -> bool {
        if principal == INTERNAL {
            return true;
        }
        let Some(a) = self.authorizer() else {
            return true;
        };
        let decision = a.authorize(principal, peer.ip(), operation, resource_type, name);
        let ok = decision.is_allowed();
        if let (false, Some(api)) = (ok, audit_api) {
            crate::audit::authorization_denied(
                peer,
                principal,
                operation.name(),
                resource_type.name(),
                name,
                api,
                &decision.to_string(),
            );
        }
        ok
    }

    /// KIP-679's check: may `principal` do `operation` on some resource of the type?
    pub fn allowed_on_some(
        &self,
        principal: &str,
        peer: SocketAddr,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if principal == INTERNAL {
            return true;
        }
        let Some(a) = self.authorizer() else {
            return true;
        };
        a.authorize_by_resource_type(principal, peer.ip(), operation, resource_type)
    }

    /// Whether `principal` (`User:NAME`) connecting from `host` may do `operation` on the
    /// resource, by this broker's authorizer (always, with it off). For front ends that
    /// authenticate on their own (the REST gateway); a denial is audited as `api` when
    /// `audit` (not for what is only left out of an answer).
    #[allow(clippy::too_many_arguments)]
    pub fn authorize(
        &self,
        principal: &str,
        host: std::net::IpAddr,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
        api: &'static str,
        audit: bool,
    ) -> bool {
        self.check(
            principal,
            SocketAddr::new(host, 0),
            operation,
            resource_type,
            name,
            audit.then_some(api),
        )
    }

    /// The principal (`User:NAME`) of a verified client certificate, mapped by
    /// `--ssl-principal-mapping-rules` (for the HTTP address's client certificates).
    pub fn certificate_principal(&self, cert_der: &[u8]) -> Result<String, String> {
        self.config.certificate_principal(cert_der)
    }

    /// Records `value` of quota `key` for `principal` and `client_id`; the throttle
    /// time, and `mute` extended that long (see [`quotas`]).
    pub fn record_quota(
        &self,
        principal: &str,
        client_id: Option<&str>,
        mute: &Mute,
        key: strata_quota::QuotaKey,
        value: f64,
    ) -> i32 {
        if principal == INTERNAL {
            return 0;
        }
        self.quotas.record(
            &self.metadata.current(),
            principal,
            client_id,
            mute,
            key,
            value,
        )
    }

    /// How long a connection muted by its quotas waits before its next request is read.
    pub fn mute_remaining(&self, mute: &Mute) -> std::time::Duration {
        mute.remaining(self.quotas.now_ms())
    }

    /// Drops quota sensors idle for an hour (housekeeping).
    pub fn expire_quotas(&self) {
        self.quotas.expire();
    }

    /// A change to users, ACLs or quotas through the controller, then the metadata
    /// refreshed so the change is visible here when the request is answered.
    pub async fn change(
        &self,
        change: SecurityChange,
    ) -> Result<SecurityOutcome, (ErrorCode, String)> {
        let out = self
            .metadata
            .controller()
            .alter_security(change)
            .await
            .map_err(|e| {
                let e = crate::error::ApiError::from(e);
                (e.code, e.message)
            });
        let _ = self.metadata.refresh().await;
        out
    }

    /// Creates SCRAM-SHA-512 and SCRAM-SHA-256 credentials for `user` unless it has any
    /// already (`strata serve --bootstrap-user`): a new cluster gets its first user, and a
    /// restart never resets a password changed since.
    pub async fn bootstrap_user(&self, user: &str, password: &str) -> Result<(), String> {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let mut upsertions = Vec::new();
        for m in [Mechanism::ScramSha512, Mechanism::ScramSha256] {
            let c =
                ScramCredential::generate(m, password, strata_auth::scram::MIN_ITERATIONS, &rng)
                    .map_err(|e| e.to_string())?;
            upsertions.push(strata_controller::ScramUpsertion {
                user: user.to_string(),
                mechanism: m.name().to_string(),
                credential: scram_record(&c),
            });
        }
        let change = SecurityChange::AlterScram {
            upsertions,
            deletions: Vec::new(),
            only_if_absent: true,
        };
        self.change(change)
            .await
            .map(|_| ())
            .map_err(|(_, message)| message)
    }
}

/// The record the controller stores for a credential.
pub fn scram_record(c: &ScramCredential) -> ScramCredentialRecord {
    let b64 = base64::engine::general_purpose::STANDARD;
    ScramCredentialRecord {
        salt: b64.encode(c.salt()),
        iterations: c.iterations(),
        stored_key: b64.encode(c.stored_key()),
        server_key: b64.encode(c.server_key()),
    }
}
