//! The server side of SCRAM: [`ScramServer`].

use std::collections::BTreeMap;
use std::fmt;

use aws_lc_rs::constant_time;
use aws_lc_rs::rand::SecureRandom;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

use super::{Hash, ScramCredential, ScramDecoy, malformed, random_nonce, valid_nonce, xor};
use crate::gs2::{decode_saslname, parse_gs2_header};
use crate::{AuthError, MAX_SASL_MESSAGE_LEN, Mechanism, bounded_utf8};

/// What the client's first message said: whom to look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// The decoded user name (`n=`).
    pub username: String,
    /// The authzid from the GS2 header; when present it equals `username`.
    pub authzid: Option<String>,
    /// SCRAM extensions after the nonce (e.g. Kafka's `tokenauth`), unvalidated.
    pub extensions: BTreeMap<String, String>,
}

/// What the server keeps from client-first for the rest of the exchange.
struct FirstState {
    gs2_header: String,
    bare: String,
    client_nonce: String,
    username: String,
}

enum ServerState {
    ExpectClientFirst,
    ExpectCredential(FirstState),
    ExpectClientFinal {
        first: FirstState,
        server_first: String,
        nonce: String,
        /// StoredKey and ServerKey; `None` for an unknown user (decoy).
        keys: Option<(Vec<u8>, Vec<u8>)>,
    },
    Complete {
        username: String,
    },
    Failed,
}

impl ServerState {
    fn name(&self) -> &'static str {
        match self {
            ServerState::ExpectClientFirst => "expecting client-first",
            ServerState::ExpectCredential(_) => "expecting a credential lookup",
            ServerState::ExpectClientFinal { .. } => "expecting client-final",
            ServerState::Complete { .. } => "complete",
            ServerState::Failed => "failed",
        }
    }
}

/// The server side of one SCRAM exchange (sans-IO: bytes in, bytes out). Any
/// error, or a call out of order, moves it to a failed state for good.
pub struct ScramServer {
    mechanism: Mechanism,
    hash: Hash,
    server_nonce: String,
    state: ServerState,
}

impl ScramServer {
    /// A server for `mechanism` that will append `server_nonce` to the client's
    /// nonce. The nonce must be RFC 5802 `printable` (no comma) and fresh per
    /// exchange; see [`ScramServer::with_random_nonce`].
    ///
    /// # Errors
    /// [`AuthError::UnsupportedMechanism`] for a non-SCRAM mechanism,
    /// [`AuthError::Malformed`] for an invalid nonce.
    pub fn new(mechanism: Mechanism, server_nonce: &str) -> Result<Self, AuthError> {
        let hash = Hash::of(mechanism)
            .ok_or_else(|| AuthError::UnsupportedMechanism(mechanism.name().into()))?;
        if !valid_nonce(server_nonce) || server_nonce.len() > 256 {
            return Err(malformed("invalid server nonce"));
        }
        Ok(ScramServer {
            mechanism,
            hash,
            server_nonce: server_nonce.to_owned(),
            state: ServerState::ExpectClientFirst,
        })
    }

    /// A server with a random 32-character nonce. Pass
    /// `&aws_lc_rs::rand::SystemRandom::new()` outside tests.
    ///
    /// # Errors
    /// As [`ScramServer::new`], or [`AuthError::Random`].
    pub fn with_random_nonce(
        mechanism: Mechanism,
        rng: &dyn SecureRandom,
    ) -> Result<Self, AuthError> {
        Self::new(mechanism, &random_nonce(rng)?)
    }

    /// The mechanism of this exchange.
    #[must_use]
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    fn fail<T>(&mut self, err: AuthError) -> Result<T, AuthError> {
        self.state = ServerState::Failed;
        Err(err)
    }

    fn illegal<T>(&mut self, state: &ServerState) -> Result<T, AuthError> {
        self.fail(AuthError::IllegalState(state.name()))
    }

    /// Step 1: parses client-first (RFC 5802 §7 `client-first-message`).
    ///
    /// # Errors
    /// [`AuthError::TooLarge`], [`AuthError::Malformed`] (grammar, escapes, authzid
    /// different from the user name), [`AuthError::Unsupported`] (channel binding,
    /// `m=` mandatory extensions, `tokenauth=true`), [`AuthError::IllegalState`].
    pub fn handle_client_first(&mut self, message: &[u8]) -> Result<ClientFirst, AuthError> {
        let state = std::mem::replace(&mut self.state, ServerState::Failed);
        if !matches!(state, ServerState::ExpectClientFirst) {
            return self.illegal(&state);
        }
        match parse_client_first(message) {
            Ok((first_state, first)) => {
                self.state = ServerState::ExpectCredential(first_state);
                Ok(first)
            }
            Err(e) => self.fail(e),
        }
    }

    /// Step 2: the server-first message for the looked-up credential, or (with
    /// `None`, an unknown user) a decoy built from `decoy`, so that the reply has
    /// the same shape; the exchange then fails at step 3 with the same
    /// [`AuthError::BadCredentials`] a wrong password gets.
    ///
    /// # Errors
    /// [`AuthError::IllegalState`]; [`AuthError::InvalidCredential`] if the
    /// credential is for the other SCRAM mechanism.
    pub fn server_first(
        &mut self,
        credential: Option<&ScramCredential>,
        decoy: &ScramDecoy,
    ) -> Result<Vec<u8>, AuthError> {
        let first = match std::mem::replace(&mut self.state, ServerState::Failed) {
            ServerState::ExpectCredential(first) => first,
            other => return self.illegal(&other),
        };
        let (salt, iterations, keys) = match credential {
            Some(c) if c.mechanism != self.mechanism => {
                return self.fail(AuthError::InvalidCredential(format!(
                    "credential is for {}, not {}",
                    c.mechanism, self.mechanism
                )));
            }
            Some(c) => (
                c.salt.clone(),
                c.iterations,
                Some((c.stored_key.clone(), c.server_key.clone())),
            ),
            None => (
                decoy.salt(self.mechanism, &first.username),
                decoy.iterations,
                None,
            ),
        };
        let nonce = format!("{}{}", first.client_nonce, self.server_nonce);
        let server_first = format!("r={nonce},s={},i={iterations}", B64.encode(salt));
        let out = server_first.clone().into_bytes();
        self.state = ServerState::ExpectClientFinal {
            first,
            server_first,
            nonce,
            keys,
        };
        Ok(out)
    }

    /// Step 3: verifies client-final (RFC 5802 §7 `client-final-message`) and returns
    /// the server-final message `v=<ServerSignature>`.
    ///
    /// # Errors
    /// [`AuthError::BadCredentials`] for a wrong proof or an unknown user;
    /// [`AuthError::Malformed`] for bad grammar, a `c=` that is not the GS2 header,
    /// or a nonce that is not the combined nonce; [`AuthError::TooLarge`];
    /// [`AuthError::IllegalState`].
    pub fn handle_client_final(&mut self, message: &[u8]) -> Result<Vec<u8>, AuthError> {
        let (first, server_first, nonce, keys) =
            match std::mem::replace(&mut self.state, ServerState::Failed) {
                ServerState::ExpectClientFinal {
                    first,
                    server_first,
                    nonce,
                    keys,
                } => (first, server_first, nonce, keys),
                other => return self.illegal(&other),
            };
        let proof = match parse_client_final(message, &first.gs2_header, &nonce, self.hash) {
            Ok(parsed) => parsed,
            Err(e) => return self.fail(e),
        };
        // AuthMessage := client-first-message-bare + "," + server-first-message + ","
        //                + client-final-message-without-proof   (RFC 5802 §3)
        let auth_message = format!("{},{},{}", first.bare, server_first, proof.without_proof);
        let bad = AuthError::BadCredentials {
            mechanism: self.mechanism,
        };
        let Some((stored_key, server_key)) = keys else {
            // Unknown user: do the same work against a key no proof matches, then fail
            // exactly like a wrong password.
            let decoy_key = vec![0u8; self.hash.len()];
            let signature = self.hash.hmac(&decoy_key, auth_message.as_bytes());
            let computed = self.hash.h(&xor(&proof.proof, &signature));
            let _ = constant_time::verify_slices_are_equal(&computed, &decoy_key);
            return self.fail(bad);
        };
        // ClientKey := ClientProof XOR HMAC(StoredKey, AuthMessage); valid iff
        // H(ClientKey) == StoredKey (RFC 5802 §3), compared in constant time.
        let client_signature = self.hash.hmac(&stored_key, auth_message.as_bytes());
        let computed = self.hash.h(&xor(&proof.proof, &client_signature));
        if constant_time::verify_slices_are_equal(&computed, &stored_key).is_err() {
            return self.fail(bad);
        }
        let server_signature = self.hash.hmac(&server_key, auth_message.as_bytes());
        self.state = ServerState::Complete {
            username: first.username,
        };
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }

    /// The authenticated user name, once client-final has been verified.
    #[must_use]
    pub fn authenticated_username(&self) -> Option<&str> {
        match &self.state {
            ServerState::Complete { username } => Some(username),
            _ => None,
        }
    }

    /// Whether the exchange completed successfully.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        matches!(self.state, ServerState::Complete { .. })
    }
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramServer")
            .field("mechanism", &self.mechanism)
            .field("state", &self.state.name())
            .finish_non_exhaustive()
    }
}

fn parse_client_first(message: &[u8]) -> Result<(FirstState, ClientFirst), AuthError> {
    let text = bounded_utf8(message, MAX_SASL_MESSAGE_LEN)?;
    let gs2 = parse_gs2_header(text)?;
    let bare = gs2.rest;
    let mut attrs = bare.split(',');
    let first_attr = attrs.next().unwrap_or_default();
    if first_attr.starts_with("m=") {
        // RFC 5802 §5.1: a server that does not understand a mandatory extension
        // must fail the exchange.
        return Err(AuthError::Unsupported(
            "Mandatory SCRAM extensions (m=) are not supported".into(),
        ));
    }
    let username = first_attr
        .strip_prefix("n=")
        .ok_or_else(|| malformed("client-first has no user name"))?;
    let username = decode_saslname(username)?;
    if username.is_empty() {
        return Err(malformed("empty user name"));
    }
    let client_nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or_else(|| malformed("client-first has no nonce"))?;
    if !valid_nonce(client_nonce) {
        return Err(malformed("invalid client nonce"));
    }
    let mut extensions = BTreeMap::new();
    for attr in attrs {
        let (key, value) = attr
            .split_once('=')
            .filter(|(k, _)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric()))
            .ok_or_else(|| malformed("invalid extension"))?;
        if extensions
            .insert(key.to_owned(), value.to_owned())
            .is_some()
        {
            return Err(malformed("duplicate extension"));
        }
    }
    // Kafka's ScramExtensions.tokenAuthenticated(): delegation-token authentication.
    // Strata has no delegation tokens, so a token id must not be taken for a user.
    if extensions
        .get("tokenauth")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    {
        return Err(AuthError::Unsupported(
            "Delegation token authentication (tokenauth) is not supported".into(),
        ));
    }
    // Kafka's ScramSaslServer: an authzid must be the user itself (no impersonation).
    if gs2.authzid.as_ref().is_some_and(|a| *a != username) {
        return Err(AuthError::Malformed(
            "Authentication failed: Client requested an authorization id that is different from username"
                .into(),
        ));
    }
    let state = FirstState {
        gs2_header: gs2.header.to_owned(),
        bare: bare.to_owned(),
        client_nonce: client_nonce.to_owned(),
        username: username.clone(),
    };
    Ok((
        state,
        ClientFirst {
            username,
            authzid: gs2.authzid,
            extensions,
        },
    ))
}

struct ClientFinal<'a> {
    without_proof: &'a str,
    proof: Vec<u8>,
}

fn parse_client_final<'a>(
    message: &'a [u8],
    gs2_header: &str,
    nonce: &str,
    hash: Hash,
) -> Result<ClientFinal<'a>, AuthError> {
    let text = bounded_utf8(message, MAX_SASL_MESSAGE_LEN)?;
    // client-final-message = client-final-message-without-proof "," proof, and no
    // attribute value before the proof can contain a comma.
    let (without_proof, proof) = text
        .rsplit_once(",p=")
        .ok_or_else(|| malformed("client-final has no proof"))?;
    let mut attrs = without_proof.split(',');
    let cbind = attrs
        .next()
        .and_then(|a| a.strip_prefix("c="))
        .ok_or_else(|| malformed("client-final has no channel binding"))?;
    // Without channel binding, cbind-input is the GS2 header itself (RFC 5802 §7).
    let cbind = B64
        .decode(cbind)
        .map_err(|_| malformed("channel binding is not base64"))?;
    if cbind != gs2_header.as_bytes() {
        return Err(malformed("channel binding does not match the GS2 header"));
    }
    let final_nonce = attrs
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or_else(|| malformed("client-final has no nonce"))?;
    if final_nonce != nonce {
        // Kafka's text for the same check.
        return Err(AuthError::Malformed(
            "Invalid client nonce in the final client message.".into(),
        ));
    }
    for attr in attrs {
        if attr.split_once('=').is_none_or(|(k, _)| k.is_empty()) {
            return Err(malformed("invalid extension"));
        }
    }
    let proof = B64
        .decode(proof)
        .map_err(|_| malformed("proof is not base64"))?;
    if proof.len() != hash.len() {
        return Err(malformed("proof has the wrong length"));
    }
    Ok(ClientFinal {
        without_proof,
        proof,
    })
}
