//! SASL on a connection (KIP-43, KIP-152, KIP-368): SaslHandshake, then SaslAuthenticate
//! frames, with PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER from strata-auth.
//!
//! On a SASL listener a connection answers ApiVersions (so the client learns the
//! versions) and the two SASL APIs, and nothing else, until it is authenticated: any
//! other request first closes it. A failed authentication is answered (the client sees
//! its error) and the connection closed. Once authenticated, a connection whose session
//! lifetime has passed (the token's expiry, or --connections-max-reauth) is closed at
//! its next request unless the client re-authenticated first (KIP-368): the same
//! mechanism, the same principal.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_auth::{AuthError, Mechanism, ScramCredential, ScramDecoy, ScramServer};
use strata_proto::ErrorCode;

use super::{Frame, RequestContext, encode_response};
use crate::broker::Broker;
use crate::listener::SecurityProtocol;
use crate::server::Connection;

/// The secret behind the salts SCRAM shows for users that do not exist (one per
/// broker process; see [`ScramDecoy`]).
fn decoy() -> &'static ScramDecoy {
    static DECOY: OnceLock<ScramDecoy> = OnceLock::new();
    DECOY.get_or_init(|| {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        ScramDecoy::generate(&rng)
            .or_else(|_| ScramDecoy::new(&[0x5a; 32], strata_auth::scram::MIN_ITERATIONS))
            .expect("a constant 32-byte secret and the minimum iterations are valid")
    })
}

/// A user's stored credential for a SCRAM mechanism, from the cluster metadata.
pub(crate) fn scram_credential(
    broker: &Broker,
    user: &str,
    mechanism: Mechanism,
) -> Option<ScramCredential> {
    let md = broker.cluster();
    let r = md.security.scram_credential(user, mechanism.name())?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let decoded = (
        b64.decode(&r.salt),
        b64.decode(&r.stored_key),
        b64.decode(&r.server_key),
    );
    match decoded {
        (Ok(salt), Ok(stored), Ok(server)) => {
            ScramCredential::from_parts(mechanism, salt, r.iterations, stored, server).ok()
        }
        _ => None,
    }
}

enum Exchange {
    Plain,
    /// Waiting for client-first.
    ScramFirst(Box<ScramServer>),
    /// server-first sent; waiting for client-final.
    ScramFinal(Box<ScramServer>),
    OAuth,
}

enum State {
    /// Waiting for SaslHandshake.
    Handshake,
    /// SaslHandshake chose the mechanism; SaslAuthenticate frames carry the exchange.
    Authenticating(Mechanism, Exchange),
    /// Authenticated (possibly re-authenticating next).
    Done,
}

/// One connection's SASL state.
pub(crate) struct SaslSession {
    state: State,
    /// The principal and mechanism of the first successful authentication (a
    /// re-authentication must keep both).
    authenticated: Option<(String, Mechanism)>,
    /// When the session ends (KIP-368); `None` for never.
    expires_at: Option<Instant>,
}

/// What the connection does with a request.
pub(crate) enum Verdict {
    /// Not a SASL request, and allowed: dispatch it.
    Pass,
    /// A SASL request, answered.
    Answer(Option<Frame>),
    /// Answered, then the connection closes (a failed authentication).
    AnswerAndClose(Option<Frame>),
    /// Closed without an answer.
    Close(String),
}

impl SaslSession {
    pub(crate) fn new() -> SaslSession {
        SaslSession {
            state: State::Handshake,
            authenticated: None,
            expires_at: None,
        }
    }

    /// The principal once authenticated.
    pub(crate) fn principal(&self) -> Option<&str> {
        self.authenticated.as_ref().map(|(p, _)| p.as_str())
    }

    /// Looks at a request before it is dispatched: answers the SASL APIs, refuses what
    /// may not come before authentication or after the session expired.
    pub(crate) fn on_request(
        &mut self,
        broker: &Broker,
        conn: &Connection,
        frame: &bytes::Bytes,
    ) -> Verdict {
        use kafka_protocol::messages::ApiKey;
        let key = match frame.get(0..2) {
            Some(k) => i16::from_be_bytes([k[0], k[1]]),
            None => return Verdict::Close("a frame without an API key".into()),
        };
        let api = ApiKey::try_from(key).ok();
        match api {
            Some(ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) => {
                match super::parse_request(frame.clone()) {
                    Ok((head, req)) => {
                        let ctx = RequestContext::new(head, conn);
                        match req {
                            super::Request::SaslHandshake(r) => self.handshake(broker, &ctx, r),
                            super::Request::SaslAuthenticate(r) => {
                                self.authenticate(broker, &ctx, r)
                            }
                            _ => Verdict::Close("unexpected request".into()),
                        }
                    }
                    Err(e) => Verdict::Close(e.to_string()),
                }
            }
            Some(ApiKey::ApiVersions) => Verdict::Pass,
            _ if self.authenticated.is_none() || !matches!(self.state, State::Done) => {
                crate::audit::authentication_failed(
                    conn.peer,
                    conn.listener,
                    "SASL",
                    None,
                    &format!("API key {key} before authentication"),
                );
                Verdict::Close(format!(
                    "API key {key} before SASL authentication (a SASL listener answers ApiVersions, SaslHandshake and SaslAuthenticate first)"
                ))
            }
            _ => match self.expires_at {
                Some(t) if Instant::now() >= t => {
                    metrics::counter!("strata_sasl_sessions_expired_total").increment(1);
                    Verdict::Close(
                        "the SASL session expired and the client did not re-authenticate (KIP-368)"
                            .into(),
                    )
                }
                _ => Verdict::Pass,
            },
        }
    }

    fn handshake(
        &mut self,
        broker: &Broker,
        ctx: &RequestContext,
        req: SaslHandshakeRequest,
    ) -> Verdict {
        let sasl = &broker.config.security.sasl;
        let mut resp = SaslHandshakeResponse::default();
        resp.mechanisms = sasl
            .mechanisms
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect();
        let asked = req.mechanism.to_string();
        let reauth = matches!(self.state, State::Done);
        if !matches!(self.state, State::Handshake | State::Done) {
            resp.error_code = ErrorCode::IllegalSaslState.code();
            return Verdict::AnswerAndClose(encode_response(ctx, &resp));
        }
        let Some(mechanism) = asked
            .parse::<Mechanism>()
            .ok()
            .filter(|m| sasl.mechanisms.contains(m))
        else {
            resp.error_code = ErrorCode::UnsupportedSaslMechanism.code();
            crate::audit::authentication_failed(
                ctx.peer,
                ctx.listener,
                &asked,
                None,
                "mechanism not enabled",
            );
            return Verdict::AnswerAndClose(encode_response(ctx, &resp));
        };
        if reauth && self.authenticated.as_ref().map(|(_, m)| *m) != Some(mechanism) {
            // KIP-368: re-authentication keeps the mechanism.
            resp.error_code = ErrorCode::IllegalSaslState.code();
            return Verdict::AnswerAndClose(encode_response(ctx, &resp));
        }
        let exchange = match mechanism {
            Mechanism::Plain => Exchange::Plain,
            Mechanism::OAuthBearer => Exchange::OAuth,
            scram => {
                let rng = aws_lc_rs::rand::SystemRandom::new();
                match ScramServer::with_random_nonce(scram, &rng) {
                    Ok(s) => Exchange::ScramFirst(Box::new(s)),
                    Err(_) => {
                        resp.error_code = ErrorCode::IllegalSaslState.code();
                        return Verdict::AnswerAndClose(encode_response(ctx, &resp));
                    }
                }
            }
        };
        self.state = State::Authenticating(mechanism, exchange);
        Verdict::Answer(encode_response(ctx, &resp))
    }

    fn authenticate(
        &mut self,
        broker: &Broker,
        ctx: &RequestContext,
        req: SaslAuthenticateRequest,
    ) -> Verdict {
        let mut resp = SaslAuthenticateResponse::default();
        let State::Authenticating(mechanism, exchange) =
            std::mem::replace(&mut self.state, State::Handshake)
        else {
            resp.error_code = ErrorCode::IllegalSaslState.code();
            resp.error_message = Some(StrBytes::from_static_str(
                "SaslAuthenticate without a SaslHandshake first",
            ));
            return Verdict::AnswerAndClose(encode_response(ctx, &resp));
        };
        let token = req.auth_bytes.as_ref();
        let step: Result<Step, AuthError> = match exchange {
            Exchange::Plain => strata_auth::PlainCredentials::parse(token).and_then(|c| {
                // Users are stored as SCRAM credentials; either one checks a password.
                let stored = scram_credential(broker, c.username(), Mechanism::ScramSha512)
                    .or_else(|| scram_credential(broker, c.username(), Mechanism::ScramSha256));
                c.verify(stored.as_ref())?;
                Ok(Step::Done {
                    user: c.username().to_string(),
                    reply: Vec::new(),
                    expires_at_ms: None,
                })
            }),
            Exchange::ScramFirst(mut server) => {
                server.handle_client_first(token).and_then(|first| {
                    let stored = scram_credential(broker, &first.username, mechanism);
                    let reply = server.server_first(stored.as_ref(), decoy())?;
                    Ok(Step::More {
                        reply,
                        exchange: Exchange::ScramFinal(server),
                    })
                })
            }
            Exchange::ScramFinal(mut server) => {
                server.handle_client_final(token).and_then(|reply| {
                    let user = server
                        .authenticated_username()
                        .ok_or(AuthError::IllegalState("not complete"))?
                        .to_string();
                    Ok(Step::Done {
                        user,
                        reply,
                        expires_at_ms: None,
                    })
                })
            }
            Exchange::OAuth => oauth(broker, token),
        };
        match step {
            Ok(Step::More { reply, exchange }) => {
                self.state = State::Authenticating(mechanism, exchange);
                resp.auth_bytes = reply.into();
                Verdict::Answer(encode_response(ctx, &resp))
            }
            Ok(Step::Done {
                user,
                reply,
                expires_at_ms,
            }) => self.succeed(broker, ctx, mechanism, user, reply, expires_at_ms),
            Err(e) => self.fail(ctx, mechanism, e),
        }
    }

    fn succeed(
        &mut self,
        broker: &Broker,
        ctx: &RequestContext,
        mechanism: Mechanism,
        user: String,
        reply: Vec<u8>,
        expires_at_ms: Option<i64>,
    ) -> Verdict {
        let mut resp = SaslAuthenticateResponse::default();
        let principal = format!("User:{user}");
        if let Some((before, _)) = &self.authenticated
            && *before != principal
        {
            // KIP-368: a re-authentication may not change who the connection is.
            resp.error_code = ErrorCode::SaslAuthenticationFailed.code();
            resp.error_message = Some(StrBytes::from_string(format!(
                "re-authentication as {principal} on a connection authenticated as {before}: the principal may not change"
            )));
            crate::audit::authentication_failed(
                ctx.peer,
                ctx.listener,
                mechanism.name(),
                Some(&principal),
                "re-authentication changed the principal",
            );
            return Verdict::AnswerAndClose(encode_response(ctx, &resp));
        }
        // The session lasts until the token expires or connections.max.reauth.ms,
        // whichever is first (KIP-368).
        let now_ms = now_ms();
        let by_token =
            expires_at_ms.map(|e| Duration::from_millis(e.saturating_sub(now_ms).max(0) as u64));
        let lifetime = match (by_token, broker.config.security.sasl.max_reauth) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.expires_at = lifetime.map(|l| Instant::now() + l);
        resp.session_lifetime_ms =
            lifetime.map_or(0, |l| l.as_millis().min(i64::MAX as u128) as i64);
        resp.auth_bytes = reply.into();
        self.authenticated = Some((principal.clone(), mechanism));
        self.state = State::Done;
        metrics::counter!("strata_sasl_authentications_total", "mechanism" => mechanism.name())
            .increment(1);
        tracing::debug!(peer = %ctx.peer, principal, mechanism = mechanism.name(), "authenticated");
        Verdict::Answer(encode_response(ctx, &resp))
    }

    fn fail(&mut self, ctx: &RequestContext, mechanism: Mechanism, e: AuthError) -> Verdict {
        let mut resp = SaslAuthenticateResponse::default();
        resp.error_code = e.kafka_error_code();
        resp.error_message = Some(StrBytes::from_string(e.to_string()));
        crate::audit::authentication_failed(
            ctx.peer,
            ctx.listener,
            mechanism.name(),
            None,
            &e.to_string(),
        );
        Verdict::AnswerAndClose(encode_response(ctx, &resp))
    }
}

enum Step {
    /// The exchange goes on: answer `reply`, keep `exchange`.
    More { reply: Vec<u8>, exchange: Exchange },
    /// Authenticated as `user`.
    Done {
        user: String,
        reply: Vec<u8>,
        expires_at_ms: Option<i64>,
    },
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn oauth(broker: &Broker, token: &[u8]) -> Result<Step, AuthError> {
    let Some(validator) = &broker.config.security.sasl.oauth else {
        return Err(AuthError::UnsupportedMechanism("OAUTHBEARER".into()));
    };
    let valid = validator.authenticate(token, now_ms())?;
    Ok(Step::Done {
        user: valid.principal,
        reply: Vec::new(),
        expires_at_ms: Some(valid.expires_at_ms),
    })
}

/// SaslHandshake or SaslAuthenticate on a listener without SASL (or out of place):
/// Kafka answers ILLEGAL_SASL_STATE.
pub(crate) fn not_a_sasl_listener(
    ctx: &RequestContext,
    listener: SecurityProtocol,
) -> Option<Frame> {
    use kafka_protocol::messages::ApiKey;
    let text = format!("the {listener} listener does not use SASL");
    if ctx.api == ApiKey::SaslHandshake {
        let mut resp = SaslHandshakeResponse::default();
        resp.error_code = ErrorCode::IllegalSaslState.code();
        encode_response(ctx, &resp)
    } else {
        let mut resp = SaslAuthenticateResponse::default();
        resp.error_code = ErrorCode::IllegalSaslState.code();
        resp.error_message = Some(StrBytes::from_string(text));
        encode_response(ctx, &resp)
    }
}
