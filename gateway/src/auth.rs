//! Who calls the gateway: `--http-auth` identities (bearer tokens and basic users), each
//! mapped to the Kafka principal its calls run as, and the [`Caller`] a request carries
//! once authenticated.
//!
//! `--http-auth` is a comma-separated list of entries, each `bearer:TOKEN` or
//! `basic:USER:PASSWORD`, optionally followed by `=User:NAME`, the principal:
//! `basic:alice:pw` acts as `User:alice`, `bearer:TOKEN=User:svc` as `User:svc`, and a
//! bearer token without one as [`BEARER_PRINCIPAL`]. Without `--http-auth` every call is
//! [`ANONYMOUS`], as a Kafka client of a PLAINTEXT listener.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::digest::{SHA256, digest};
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

use crate::error::ApiError;
use crate::util;

/// The principal of calls when the gateway authenticates nobody (Kafka's
/// `KafkaPrincipal.ANONYMOUS`).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// The principal of a bearer token that names none.
pub const BEARER_PRINCIPAL: &str = "User:http";

/// Marks the principal an entry maps to: `...=User:NAME`.
const PRINCIPAL_MARK: &str = "=User:";

/// The credentials of one identity.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `Authorization: Bearer TOKEN`.
    Bearer(String),
    /// `Authorization: Basic base64(USER:PASS)`.
    Basic { user: String, password: String },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        match self {
            Credentials::Bearer(_) => f.write_str("Bearer(***)"),
            Credentials::Basic { user, .. } => write!(f, "Basic({user}:***)"),
        }
    }
}

impl Credentials {
    /// The principal these credentials act as when the entry names none.
    fn default_principal(&self) -> String {
        match self {
            Credentials::Bearer(_) => BEARER_PRINCIPAL.to_string(),
            Credentials::Basic { user, .. } => format!("User:{user}"),
        }
    }

    fn header_value(&self) -> String {
        match self {
            Credentials::Bearer(token) => format!("Bearer {token}"),
            Credentials::Basic { user, password } => {
                format!(
                    "Basic {}",
                    util::b64(format!("{user}:{password}").as_bytes())
                )
            }
        }
    }
}

/// One identity the gateway accepts, and the Kafka principal its calls run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub credentials: Credentials,
    /// `User:NAME`.
    pub principal: String,
}

/// Who may call the gateway (`--http-auth`).
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// One bearer token, acting as [`BEARER_PRINCIPAL`].
    Bearer(String),
    /// One basic user, acting as `User:USER`.
    Basic { user: String, password: String },
    /// Several identities, or any mapped to a principal of its own.
    Identities(Vec<Identity>),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        match self {
            Auth::Bearer(_) => f.write_str("Bearer(***)"),
            Auth::Basic { user, .. } => write!(f, "Basic({user}:***)"),
            Auth::Identities(ids) => f
                .debug_list()
                .entries(
                    ids.iter()
                        .map(|i| format!("{:?}={}", i.credentials, i.principal)),
                )
                .finish(),
        }
    }
}

/// How an error names entry `n` (from 1) of `--http-auth`: by its scheme and user,
/// never its secret.
fn label(n: usize, entry: &str) -> String {
    if entry.starts_with("bearer:") {
        "entry 'bearer:***'".to_string()
    } else if let Some(rest) = entry.strip_prefix("basic:") {
        // Without a second colon the one word may be a password given without its user.
        match rest.split_once(':') {
            Some((user, _)) => format!("entry 'basic:{user}:***'"),
            None => "entry 'basic:***'".to_string(),
        }
    } else {
        format!("entry {n}")
    }
}

/// One entry of `--http-auth`: its credentials and the principal it names, if any.
fn parse_entry(entry: &str) -> Result<(Credentials, Option<String>), String> {
    let (creds, principal) = match entry.find(PRINCIPAL_MARK) {
        Some(at) => (&entry[..at], Some(&entry[at + 1..])),
        None => (entry, None),
    };
    let credentials = if let Some(token) = creds.strip_prefix("bearer:") {
        if token.is_empty() {
            return Err("bearer: needs a token (bearer:TOKEN)".into());
        }
        Credentials::Bearer(token.to_string())
    } else if let Some(rest) = creds.strip_prefix("basic:") {
        let (user, password) = rest
            .split_once(':')
            .ok_or("basic: needs a user and a password (basic:USER:PASSWORD)")?;
        if user.is_empty() || password.is_empty() {
            return Err("basic: needs a user and a password (basic:USER:PASSWORD)".into());
        }
        Credentials::Basic {
            user: user.to_string(),
            password: password.to_string(),
        }
    } else {
        return Err(
            "expected bearer:TOKEN or basic:USER:PASSWORD, optionally followed by =User:NAME"
                .into(),
        );
    };
    let principal = match principal {
        None => None,
        Some(p) => {
            let name = p.strip_prefix("User:").unwrap_or_default();
            if name.is_empty() || name == "*" {
                return Err("the principal must be User:NAME (not empty, not User:*)".into());
            }
            Some(p.to_string())
        }
    };
    Ok((credentials, principal))
}

impl std::str::FromStr for Auth {
    type Err = String;

    /// Comma-separated `bearer:TOKEN` or `basic:USER:PASSWORD` entries, each optionally
    /// `=User:NAME`. One entry that names no principal parses as [`Auth::Bearer`] or
    /// [`Auth::Basic`], anything else as [`Auth::Identities`]. Errors name the entry
    /// (`entry 'basic:alice:***': ...`) and never show a secret.
    fn from_str(s: &str) -> Result<Auth, String> {
        let entries: Vec<&str> = s.split(',').map(str::trim).collect();
        let several = entries.len() > 1;
        let mut ids: Vec<Identity> = Vec::with_capacity(entries.len());
        let mut mapped = false;
        for (n, entry) in entries.iter().enumerate() {
            if entry.is_empty() {
                return Err(format!("entry {} is empty", n + 1));
            }
            // The label reads the credentials only, not a principal after them.
            let creds = entry.find(PRINCIPAL_MARK).map_or(*entry, |at| &entry[..at]);
            let (credentials, principal) =
                parse_entry(entry).map_err(|e| format!("{}: {e}", label(n + 1, creds)))?;
            let same = |i: &Identity| match (&i.credentials, &credentials) {
                (Credentials::Bearer(a), Credentials::Bearer(b)) => a == b,
                (Credentials::Basic { user: a, .. }, Credentials::Basic { user: b, .. }) => a == b,
                _ => false,
            };
            if ids.iter().any(same) {
                return Err(format!(
                    "{}: given twice (a user or a token may appear once)",
                    label(n + 1, creds)
                ));
            }
            mapped |= principal.is_some();
            ids.push(Identity {
                principal: principal.unwrap_or_else(|| credentials.default_principal()),
                credentials,
            });
        }
        if !several && !mapped {
            return Ok(match ids.pop() {
                Some(Identity {
                    credentials: Credentials::Bearer(token),
                    ..
                }) => Auth::Bearer(token),
                Some(Identity {
                    credentials: Credentials::Basic { user, password },
                    ..
                }) => Auth::Basic { user, password },
                None => return Err("no entry".into()),
            });
        }
        Ok(Auth::Identities(ids))
    }
}

impl Auth {
    /// Every identity, with its principal.
    pub fn identities(&self) -> Vec<Identity> {
        self.each().into_iter().map(Cow::into_owned).collect()
    }

    /// Every identity, borrowed where it can be.
    fn each(&self) -> Vec<Cow<'_, Identity>> {
        match self {
            Auth::Bearer(token) => vec![Cow::Owned(Identity {
                credentials: Credentials::Bearer(token.clone()),
                principal: BEARER_PRINCIPAL.to_string(),
            })],
            Auth::Basic { user, password } => vec![Cow::Owned(Identity {
                credentials: Credentials::Basic {
                    user: user.clone(),
                    password: password.clone(),
                },
                principal: format!("User:{user}"),
            })],
            Auth::Identities(ids) => ids.iter().map(Cow::Borrowed).collect(),
        }
    }

    /// Whether a request carries the credentials of one of these identities.
    pub fn permits(&self, headers: &HeaderMap) -> bool {
        self.principal_of(headers).is_some()
    }

    /// The principal of the identity whose credentials the request carries. Secrets
    /// are compared as SHA-256 digests in constant time, against every identity (no
    /// early exit), so timing tells neither a secret's length nor how much of it a
    /// guess got right.
    pub fn principal_of(&self, headers: &HeaderMap) -> Option<String> {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())?
            .trim();
        let (scheme, value) = given.split_once(' ').unwrap_or((given, ""));
        let value = value.trim();
        let bearer = scheme.eq_ignore_ascii_case("bearer");
        let basic = scheme.eq_ignore_ascii_case("basic");
        if !bearer && !basic {
            return None;
        }
        // Basic: USER:PASSWORD (the user may not hold a colon, RFC 7617).
        let decoded = if basic {
            util::unb64("credentials", value).ok()
        } else {
            None
        };
        let (user, secret): (&[u8], &[u8]) = match &decoded {
            Some(raw) => match raw.iter().position(|b| *b == b':') {
                Some(at) => (&raw[..at], &raw[at + 1..]),
                None => return None,
            },
            None if bearer => (&[], value.as_bytes()),
            None => return None,
        };
        let given = digest(&SHA256, secret);
        let mut found = None;
        for id in self.each() {
            let (candidate, want) = match &id.credentials {
                Credentials::Bearer(token) if bearer => (true, token.as_bytes()),
                Credentials::Basic { user: u, password } if basic => {
                    (u.as_bytes() == user, password.as_bytes())
                }
                _ => continue,
            };
            let equal =
                verify_slices_are_equal(given.as_ref(), digest(&SHA256, want).as_ref()).is_ok();
            if candidate && equal && found.is_none() {
                found = Some(id.principal.clone());
            }
        }
        found
    }

    /// The `Authorization` header value a client sends with these credentials (the
    /// first identity's, for several).
    pub fn header_value(&self) -> String {
        match self {
            Auth::Bearer(token) => Credentials::Bearer(token.clone()).header_value(),
            Auth::Basic { user, password } => Credentials::Basic {
                user: user.clone(),
                password: password.clone(),
            }
            .header_value(),
            Auth::Identities(ids) => ids
                .first()
                .map(|i| i.credentials.header_value())
                .unwrap_or_default(),
        }
    }
}

/// What the transport knows of a connection, for a server that serves the gateway over
/// TLS with client certificates: it is the listener's address type, so it reaches the
/// requests as `ConnectInfo<Peer>` (a plain listener gives `ConnectInfo<SocketAddr>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The principal (`User:NAME`) of the client's verified certificate, or why its
    /// subject maps to none; `None` without a certificate.
    pub certificate: Option<Result<String, String>>,
}

/// Who made a request: the principal it runs as and the client's address. The
/// authentication layer puts it in the request's extensions; a handler that takes it
/// on a request without one answers 401 (it never falls back to a principal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub principal: String,
    /// The client's address (0.0.0.0 when the server does not say: a router served
    /// without connect info, as in unit tests).
    pub host: IpAddr,
}

impl Caller {
    /// The caller of a request that authenticated as `principal`.
    pub fn of(principal: String, extensions: &axum::http::Extensions) -> Caller {
        Caller {
            principal,
            host: extensions
                .get::<ConnectInfo<Peer>>()
                .map(|c| c.0.addr.ip())
                .or_else(|| {
                    extensions
                        .get::<ConnectInfo<SocketAddr>>()
                        .map(|c| c.0.ip())
                })
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = axum::response::Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| axum::response::IntoResponse::into_response(unauthorized()))
    }
}

pub(crate) fn unauthorized() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::UNAUTHORIZED,
        crate::error::UNAUTHORIZED,
        "Authentication is required: send Authorization: Bearer or Basic credentials.",
    )
}

/// The caller of a request: by its `Authorization` header when `auth` is set and it
/// sends one (which must then be one of `auth`'s identities), else by its client
/// certificate ([`Peer`]), else [`ANONYMOUS`] when `auth` is None. 401 otherwise, and for
/// a certificate whose subject maps to no principal (as Kafka refuses it).
pub(crate) fn authenticate(
    auth: Option<&Auth>,
    audit: Option<&Audit>,
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
) -> Result<Caller, ApiError> {
    let certificate = extensions
        .get::<ConnectInfo<Peer>>()
        .and_then(|c| c.0.certificate.as_ref());
    let principal = match (auth, certificate) {
        (Some(a), _) if headers.contains_key(header::AUTHORIZATION) => {
            match a.principal_of(headers) {
                Some(p) => p,
                None => {
                    if let Some(audit) = audit {
                        audit.record(&failure(headers, extensions));
                    }
                    return Err(unauthorized());
                }
            }
        }
        (_, Some(Ok(principal))) => principal.clone(),
        (_, Some(Err(why))) => {
            return Err(ApiError::new(
                axum::http::StatusCode::UNAUTHORIZED,
                crate::error::UNAUTHORIZED,
                format!("The client certificate names no principal: {why}."),
            ));
        }
        (None, None) => ANONYMOUS.to_string(),
        (Some(_), None) => return Err(unauthorized()),
    };
    Ok(Caller::of(principal, extensions))
}

/// Credentials that match no `--http-auth` identity, for the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFailure {
    /// The client's address, when the server says.
    pub peer: Option<SocketAddr>,
    /// `HTTP` or `HTTPS`.
    pub listener: &'static str,
    /// The scheme: `basic`, `bearer` or `unknown`.
    pub mechanism: &'static str,
    /// The user a basic header names (never a secret).
    pub user: Option<String>,
    pub reason: &'static str,
}

/// Where authentication failures go (the broker's audit log, in `strata serve`); None in
/// [`crate::GatewayConfig`]: not audited. A request with no credentials at all is not a
/// failure (a browser sends one before it is asked for credentials).
#[derive(Clone)]
pub struct Audit(std::sync::Arc<dyn Fn(&AuthFailure) + Send + Sync>);

impl Audit {
    pub fn new(record: impl Fn(&AuthFailure) + Send + Sync + 'static) -> Audit {
        Audit(std::sync::Arc::new(record))
    }

    pub fn record(&self, failure: &AuthFailure) {
        (self.0)(failure)
    }
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Audit")
    }
}

/// What a request whose credentials match no identity tells the audit.
fn failure(headers: &HeaderMap, extensions: &axum::http::Extensions) -> AuthFailure {
    let (listener, peer) = match extensions.get::<ConnectInfo<Peer>>() {
        Some(c) => ("HTTPS", Some(c.0.addr)),
        None => (
            "HTTP",
            extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0),
        ),
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    let scheme = given.split(' ').next().unwrap_or("");
    let mechanism = if scheme.eq_ignore_ascii_case("basic") {
        "basic"
    } else if scheme.eq_ignore_ascii_case("bearer") {
        "bearer"
    } else {
        "unknown"
    };
    let user = (mechanism == "basic")
        .then(|| util::unb64("credentials", given[scheme.len()..].trim()).ok())
        .flatten()
        .and_then(|raw| {
            let at = raw.iter().position(|b| *b == b':')?;
            String::from_utf8(raw[..at].to_vec()).ok()
        });
    AuthFailure {
        peer,
        listener,
        mechanism,
        user,
        reason: "the credentials match no --http-auth identity",
    }
}
