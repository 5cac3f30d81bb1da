//! OAUTHBEARER (RFC 7628) as Kafka's `OAuthBearerSaslServer` runs it, with token
//! validation in the style of KIP-768 (`sasl.oauthbearer.expected.issuer`,
//! `.expected.audience`, `.clock.skew.seconds`, `.sub.claim.name`,
//! `.scope.claim.name`, `.jwks.endpoint.url` pointing at a file).
//!
//! The client's single message ([`ClientInitialResponse`]) carries a bearer token;
//! [`TokenValidator::authenticate`] parses it, validates the token and returns the
//! principal and the token's expiry (the broker's KIP-368 session lifetime).
//!
//! Tokens are JWS compact serializations (RFC 7515 §7.1). The validator is either
//! *unsecured* (only `alg: none`, Kafka's default `OAuthBearerUnsecuredValidator`
//! for development) or holds public keys from a JWKS document (RFC 7517) or PEM,
//! and then accepts only RS256/RS384/RS512/ES256/ES384 signatures. HMAC (`HS*`)
//! algorithms are not implemented at all, which rules out the classic confusion of
//! using a public RSA key as an HMAC secret.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Map, Value};

use crate::gs2::{encode_saslname, parse_gs2_header};
use crate::{AuthError, MAX_SASL_MESSAGE_LEN, bounded_utf8};

mod jwk;

pub use jwk::JwkSet;
use jwk::JwsAlg;

/// The longest token accepted (64 KiB); real JWTs are a few KiB.
pub const MAX_TOKEN_LEN: usize = 64 * 1024;
/// The longest client initial response accepted: a maximal token plus room for the
/// GS2 header and extensions.
pub const MAX_CLIENT_RESPONSE_LEN: usize = MAX_TOKEN_LEN + MAX_SASL_MESSAGE_LEN;
/// KIP-768's default `sasl.oauthbearer.clock.skew.seconds` (30 s).
pub const DEFAULT_CLOCK_SKEW_MS: i64 = 30_000;

/// RFC 7628 §3.1 `kvsep`.
const KVSEP: char = '\x01';

fn malformed(msg: &str) -> AuthError {
    AuthError::Malformed(format!("Invalid OAUTHBEARER client first message: {msg}"))
}

fn invalid(msg: impl Into<String>) -> AuthError {
    AuthError::InvalidToken(msg.into())
}

/// The client's initial response (RFC 7628 §3.1): GS2 header, then `\x01`-separated
/// `key=value` pairs with the required `auth=Bearer <token>`; the other pairs are
/// SASL extensions (KIP-342). `Debug` does not show the token.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientInitialResponse {
    authzid: Option<String>,
    token: String,
    extensions: BTreeMap<String, String>,
}

/// Kafka's `OAuthBearerClientInitialResponse` KEY pattern: `[A-Za-z]+`.
fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphabetic())
}

/// Kafka's VALUE pattern `[\x21-\x7E \t\r\n]+` (RFC 7628 allows empty; Kafka not).
fn valid_value(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) || matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// Kafka's token pattern `[-_.a-zA-Z0-9]+`: the JWS compact alphabet.
fn valid_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl ClientInitialResponse {
    /// Builds a response (the client side), checking what [`parse`] would check.
    ///
    /// [`parse`]: ClientInitialResponse::parse
    ///
    /// # Errors
    /// [`AuthError::Malformed`] for a token or extension that could not be sent.
    pub fn new(
        token: &str,
        authzid: Option<&str>,
        extensions: BTreeMap<String, String>,
    ) -> Result<Self, AuthError> {
        if !valid_token(token) {
            return Err(malformed("invalid token characters"));
        }
        if authzid.is_some_and(str::is_empty) {
            return Err(malformed("empty authzid"));
        }
        for (k, v) in &extensions {
            if !valid_key(k) || !valid_value(v) || k == "auth" {
                return Err(malformed("invalid extension"));
            }
        }
        Ok(ClientInitialResponse {
            authzid: authzid.map(str::to_owned),
            token: token.to_owned(),
            extensions,
        })
    }

    /// Parses the client's message.
    ///
    /// # Errors
    /// [`AuthError::TooLarge`] over [`MAX_CLIENT_RESPONSE_LEN`];
    /// [`AuthError::Unsupported`] for channel binding; otherwise
    /// [`AuthError::Malformed`].
    pub fn parse(message: &[u8]) -> Result<Self, AuthError> {
        let text = bounded_utf8(message, MAX_CLIENT_RESPONSE_LEN)?;
        let gs2 = parse_gs2_header(text)?;
        // client-resp = gs2-header kvsep *kvpair kvsep; kvpair = key "=" value kvsep
        let body = gs2
            .rest
            .strip_prefix(KVSEP)
            .and_then(|b| b.strip_suffix(KVSEP))
            .ok_or_else(|| malformed("bad framing"))?;
        let mut auth = None;
        let mut extensions = BTreeMap::new();
        if !body.is_empty() {
            let pairs = body
                .strip_suffix(KVSEP)
                .ok_or_else(|| malformed("bad framing"))?;
            for pair in pairs.split(KVSEP) {
                let (key, value) = pair
                    .split_once('=')
                    .filter(|(k, v)| valid_key(k) && valid_value(v))
                    .ok_or_else(|| malformed("invalid key/value pair"))?;
                let duplicate = if key == "auth" {
                    auth.replace(value).is_some()
                } else {
                    extensions
                        .insert(key.to_owned(), value.to_owned())
                        .is_some()
                };
                if duplicate {
                    return Err(malformed("duplicate key"));
                }
            }
        }
        let auth = auth.ok_or_else(|| malformed("'auth' not specified"))?;
        // Kafka's AUTH_PATTERN: `(?<scheme>\w+)[ ]+(?<token>[-_.a-zA-Z0-9]+)`, with the
        // scheme compared case-insensitively (RFC 6750 §2.1 "Bearer").
        let (scheme, token) = auth
            .split_once(' ')
            .ok_or_else(|| malformed("invalid 'auth' format"))?;
        let token = token.trim_start_matches(' ');
        if !valid_token(token) {
            return Err(malformed("invalid 'auth' format"));
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(malformed("invalid scheme"));
        }
        Ok(ClientInitialResponse {
            authzid: gs2.authzid,
            token: token.to_owned(),
            extensions,
        })
    }

    /// Encodes the message: `n,[a=<authzid>],\x01auth=Bearer <token>\x01[k=v\x01]*\x01`.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let authz = self
            .authzid
            .as_deref()
            .map(|a| format!("a={}", encode_saslname(a)))
            .unwrap_or_default();
        let mut out = format!("n,{authz},{KVSEP}auth=Bearer {}{KVSEP}", self.token);
        for (k, v) in &self.extensions {
            out.push_str(&format!("{k}={v}{KVSEP}"));
        }
        out.push(KVSEP);
        out.into_bytes()
    }

    /// The authzid of the GS2 header, if any.
    #[must_use]
    pub fn authzid(&self) -> Option<&str> {
        self.authzid.as_deref()
    }

    /// The bearer token.
    #[must_use]
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The SASL extensions (every pair except `auth`).
    #[must_use]
    pub fn extensions(&self) -> &BTreeMap<String, String> {
        &self.extensions
    }
}

impl fmt::Debug for ClientInitialResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientInitialResponse")
            .field("authzid", &self.authzid)
            .field("token", &"<redacted>")
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// The server's error challenge after a failed validation (RFC 7628 §3.2.2):
/// `{"status":"invalid_token"}` (or `insufficient_scope`). The client must answer
/// with a single `\x01` ([`is_error_ack`]), after which the server fails the
/// exchange. Kafka does the same; a broker may also fail SaslAuthenticate at once.
#[must_use]
pub fn error_challenge(error: &AuthError) -> Vec<u8> {
    let status = match error {
        AuthError::InsufficientScope(_) => "insufficient_scope",
        _ => "invalid_token",
    };
    serde_json::json!({ "status": status })
        .to_string()
        .into_bytes()
}

/// Whether `message` is the client's `kvsep` reply to an error challenge
/// (RFC 7628 §3.2.3).
#[must_use]
pub fn is_error_ack(message: &[u8]) -> bool {
    message == [0x01]
}

/// What claims a [`TokenValidator`] requires (KIP-768's broker settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorConfig {
    /// The claim holding the principal name (`sasl.oauthbearer.sub.claim.name`,
    /// default `sub`); it must be a non-empty string.
    pub principal_claim: String,
    /// The claim holding the scopes, a space-separated string or an array of strings
    /// (`sasl.oauthbearer.scope.claim.name`, default `scope`).
    pub scope_claim: String,
    /// Allowed clock difference for `exp`, `nbf` and `iat` (default 30 s).
    pub clock_skew_ms: i64,
    /// If set, `iss` must equal it.
    pub expected_issuer: Option<String>,
    /// If non-empty, `aud` (a string or an array) must contain one of these.
    pub expected_audience: Vec<String>,
    /// Scopes the token must all have (Kafka's unsecured validator's
    /// `unsecuredValidatorRequiredScope`).
    pub required_scopes: Vec<String>,
}

impl Default for ValidatorConfig {
    fn default() -> Self {
        ValidatorConfig {
            principal_claim: "sub".into(),
            scope_claim: "scope".into(),
            clock_skew_ms: DEFAULT_CLOCK_SKEW_MS,
            expected_issuer: None,
            expected_audience: Vec::new(),
            required_scopes: Vec::new(),
        }
    }
}

/// A token that passed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedToken {
    /// The principal name (the configured claim).
    pub principal: String,
    /// `exp` in milliseconds since the epoch: when the session must re-authenticate
    /// (KIP-368 `session_lifetime_ms` = this minus now).
    pub expires_at_ms: i64,
    /// `iat` in milliseconds, if present.
    pub issued_at_ms: Option<i64>,
    /// The token's scopes.
    pub scopes: BTreeSet<String>,
    /// The client's SASL extensions (filled by [`TokenValidator::authenticate`]).
    pub extensions: BTreeMap<String, String>,
}

/// Validates bearer tokens: unsecured (`alg: none` only) or against a [`JwkSet`].
#[derive(Debug, Clone)]
pub struct TokenValidator {
    config: ValidatorConfig,
    /// `None`: unsecured.
    keys: Option<JwkSet>,
}

impl TokenValidator {
    /// Kafka's unsecured validator: accepts only unsigned `alg: none` tokens. For
    /// development and tests; anyone can mint such tokens for any principal.
    #[must_use]
    pub fn unsecured(config: ValidatorConfig) -> Self {
        TokenValidator { config, keys: None }
    }

    /// Signed tokens checked against `keys`.
    #[must_use]
    pub fn with_keys(keys: JwkSet, config: ValidatorConfig) -> Self {
        TokenValidator {
            config,
            keys: Some(keys),
        }
    }

    /// Signed tokens checked against a JWKS document (the broker reads the file).
    ///
    /// # Errors
    /// As [`JwkSet::from_jwks`].
    pub fn from_jwks(jwks: &str, config: ValidatorConfig) -> Result<Self, AuthError> {
        Ok(Self::with_keys(JwkSet::from_jwks(jwks)?, config))
    }

    /// Signed tokens checked against PEM public keys.
    ///
    /// # Errors
    /// As [`JwkSet::from_pem`].
    pub fn from_pem(pem: &str, config: ValidatorConfig) -> Result<Self, AuthError> {
        Ok(Self::with_keys(JwkSet::from_pem(pem)?, config))
    }

    /// The claim requirements.
    #[must_use]
    pub fn config(&self) -> &ValidatorConfig {
        &self.config
    }

    /// Whether this validator accepts unsigned tokens.
    #[must_use]
    pub fn is_unsecured(&self) -> bool {
        self.keys.is_none()
    }

    /// Parses a client initial response, validates its token at `now_ms`
    /// (milliseconds since the epoch), checks that an authzid (if any) is the
    /// token's principal (Kafka's rule) and returns the token with the client's
    /// extensions.
    ///
    /// # Errors
    /// As [`ClientInitialResponse::parse`] and [`TokenValidator::validate`], and
    /// [`AuthError::Malformed`] for an authzid that is not the principal.
    pub fn authenticate(&self, message: &[u8], now_ms: i64) -> Result<ValidatedToken, AuthError> {
        let response = ClientInitialResponse::parse(message)?;
        let mut token = self.validate(response.token(), now_ms)?;
        if let Some(authzid) = response.authzid()
            && authzid != token.principal
        {
            return Err(AuthError::Malformed(format!(
                "Authentication failed: Client requested an authorization id ({authzid}) that is different from the token's principal name ({})",
                token.principal
            )));
        }
        token.extensions = response.extensions;
        Ok(token)
    }

    /// Validates a token (JWS compact serialization) at `now_ms`.
    ///
    /// # Errors
    /// [`AuthError::TooLarge`] over [`MAX_TOKEN_LEN`], [`AuthError::ExpiredToken`],
    /// [`AuthError::InsufficientScope`], otherwise [`AuthError::InvalidToken`].
    pub fn validate(&self, token: &str, now_ms: i64) -> Result<ValidatedToken, AuthError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(AuthError::TooLarge {
                len: token.len(),
                max: MAX_TOKEN_LEN,
            });
        }
        let mut parts = token.split('.');
        let (Some(header_b64), Some(payload_b64), Some(sig_b64), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid("not a JWS compact serialization (three parts)"));
        };
        let header = decode_json(header_b64, "header")?;
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("the header has no alg"))?;
        // RFC 7515 §4.1.11: a recipient must reject critical extensions it does not
        // understand; we understand none.
        if header.contains_key("crit") {
            return Err(invalid("critical header parameters are not supported"));
        }
        match &self.keys {
            None => {
                // Kafka's OAuthBearerUnsecuredJws: alg none, empty signature.
                if alg != "none" || !sig_b64.is_empty() {
                    return Err(invalid("the unsecured validator accepts only alg none"));
                }
            }
            Some(keys) => {
                let jws_alg = JwsAlg::parse(alg).ok_or_else(|| {
                    invalid(format!(
                        "unsupported alg {:?}; accepted are RS256, RS384, RS512, ES256, ES384",
                        alg.chars().take(16).collect::<String>()
                    ))
                })?;
                let kid = match header.get("kid") {
                    None => None,
                    Some(Value::String(kid)) => Some(kid.as_str()),
                    Some(_) => return Err(invalid("kid is not a string")),
                };
                let key = keys.select(jws_alg, kid)?;
                let sig = URL_SAFE_NO_PAD
                    .decode(sig_b64)
                    .map_err(|_| invalid("the signature is not base64url"))?;
                // RFC 7515 §5.2: the signing input is the ASCII of header.payload.
                let signing_input = &token[..header_b64.len() + 1 + payload_b64.len()];
                if !key.key.verify(jws_alg, signing_input.as_bytes(), &sig) {
                    return Err(invalid("signature verification failed"));
                }
            }
        }
        let claims = decode_json(payload_b64, "payload")?;
        self.check_claims(&claims, now_ms)
    }

    fn check_claims(
        &self,
        claims: &Map<String, Value>,
        now_ms: i64,
    ) -> Result<ValidatedToken, AuthError> {
        let config = &self.config;
        let skew = config.clock_skew_ms.max(0);
        // RFC 7519 §4.1.4: reject at or after exp (plus the allowed skew).
        let expires_at_ms =
            numeric_date(claims, "exp")?.ok_or_else(|| invalid("the token has no exp claim"))?;
        if now_ms >= expires_at_ms.saturating_add(skew) {
            return Err(AuthError::ExpiredToken {
                expired_at_ms: expires_at_ms,
                now_ms,
            });
        }
        // RFC 7519 §4.1.5.
        if let Some(nbf) = numeric_date(claims, "nbf")?
            && nbf > now_ms.saturating_add(skew)
        {
            return Err(invalid(format!("the token is not valid before {nbf} ms")));
        }
        // Kafka's unsecured validator also rejects tokens issued in the future.
        let issued_at_ms = numeric_date(claims, "iat")?;
        if let Some(iat) = issued_at_ms
            && iat > now_ms.saturating_add(skew)
        {
            return Err(invalid(format!(
                "the token is issued in the future ({iat} ms)"
            )));
        }
        if let Some(expected) = &config.expected_issuer
            && claims.get("iss").and_then(Value::as_str) != Some(expected.as_str())
        {
            return Err(invalid("unexpected issuer"));
        }
        if !config.expected_audience.is_empty() {
            let audiences = string_or_array(claims.get("aud"), "aud")?;
            if !audiences
                .iter()
                .any(|a| config.expected_audience.contains(a))
            {
                return Err(invalid("unexpected audience"));
            }
        }
        let principal = match claims.get(&config.principal_claim) {
            Some(Value::String(p)) if !p.is_empty() => p.clone(),
            _ => {
                return Err(invalid(format!(
                    "the {} claim must be a non-empty string",
                    config.principal_claim
                )));
            }
        };
        let scopes: BTreeSet<String> = string_or_array(claims.get(&config.scope_claim), "scope")?
            .into_iter()
            .collect();
        let missing: Vec<&str> = config
            .required_scopes
            .iter()
            .filter(|s| !scopes.contains(*s))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(AuthError::InsufficientScope(missing.join(" ")));
        }
        Ok(ValidatedToken {
            principal,
            expires_at_ms,
            issued_at_ms,
            scopes,
            extensions: BTreeMap::new(),
        })
    }
}

fn decode_json(part: &str, what: &str) -> Result<Map<String, Value>, AuthError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| invalid(format!("the {what} is not base64url")))?;
    serde_json::from_slice(&bytes).map_err(|_| invalid(format!("the {what} is not a JSON object")))
}

/// A NumericDate claim (RFC 7519 §2: seconds, possibly fractional) in milliseconds.
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, AuthError> {
    let Some(value) = claims.get(name) else {
        return Ok(None);
    };
    let secs = value
        .as_f64()
        .filter(|s| s.is_finite() && s.abs() < 1e13)
        .ok_or_else(|| invalid(format!("the {name} claim is not a valid NumericDate")))?;
    Ok(Some((secs * 1000.0).round() as i64))
}

/// `aud` and scope claims: a string (scopes space-separated) or an array of strings.
fn string_or_array(value: Option<&Value>, what: &str) -> Result<Vec<String>, AuthError> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::String(s)) if what == "scope" => {
            Ok(s.split_whitespace().map(str::to_owned).collect())
        }
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| invalid(format!("the {what} claim holds a non-string")))
            })
            .collect(),
        Some(_) => Err(invalid(format!(
            "the {what} claim must be a string or an array"
        ))),
    }
}

/// An unsigned (`alg: none`) token for the unsecured validator, as Kafka's
/// `OAuthBearerUnsecuredLoginCallbackHandler` makes them: claims `sub` and `exp`
/// (seconds since the epoch), overridden or extended by `extra_claims`.
#[must_use]
pub fn unsecured_token(sub: &str, exp_secs: i64, extra_claims: &Map<String, Value>) -> String {
    let mut claims = Map::new();
    claims.insert("sub".into(), sub.into());
    claims.insert("exp".into(), exp_secs.into());
    claims.extend(extra_claims.clone());
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#);
    let payload = URL_SAFE_NO_PAD.encode(Value::Object(claims).to_string());
    format!("{header}.{payload}.")
}

/// Formats a DER public key as PEM (`label` e.g. `PUBLIC KEY`); for tests and tools.
#[must_use]
pub fn der_to_pem(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests;
