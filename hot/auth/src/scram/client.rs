//! The client side of SCRAM: [`ScramClient`].

use std::fmt;
use std::num::NonZeroU32;

use aws_lc_rs::constant_time;
use aws_lc_rs::rand::SecureRandom;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

use super::{
    Hash, MAX_ITERATIONS, MIN_ITERATIONS, check_iterations, malformed, random_nonce, valid_nonce,
    xor,
};
use crate::gs2::encode_saslname;
use crate::{AuthError, MAX_SASL_MESSAGE_LEN, Mechanism, bounded_utf8};

enum ClientState {
    ExpectServerFirst { password: String },
    ExpectServerFinal { server_signature: Vec<u8> },
    Complete,
    Failed,
}

impl ClientState {
    fn name(&self) -> &'static str {
        match self {
            ClientState::ExpectServerFirst { .. } => "expecting server-first",
            ClientState::ExpectServerFinal { .. } => "expecting server-final",
            ClientState::Complete => "complete",
            ClientState::Failed => "failed",
        }
    }
}

/// The client side of one SCRAM exchange (for tests and Strata's own clients).
/// Sends `n,,` (no authzid, no channel binding) as Kafka's client does. `Debug`
/// does not show the password.
pub struct ScramClient {
    mechanism: Mechanism,
    hash: Hash,
    client_nonce: String,
    client_first_bare: String,
    state: ClientState,
}

/// The GS2 header our client sends; `c=` carries its base64 (`biws`).
const CLIENT_GS2_HEADER: &str = "n,,";

impl ScramClient {
    /// A client that will authenticate `username` with `password`, using
    /// `client_nonce` (RFC 5802 `printable`, fresh per exchange; see
    /// [`ScramClient::with_random_nonce`]).
    ///
    /// # Errors
    /// [`AuthError::UnsupportedMechanism`] for a non-SCRAM mechanism,
    /// [`AuthError::Malformed`] for an empty user name or an invalid nonce.
    pub fn new(
        mechanism: Mechanism,
        username: &str,
        password: &str,
        client_nonce: &str,
    ) -> Result<Self, AuthError> {
        let hash = Hash::of(mechanism)
            .ok_or_else(|| AuthError::UnsupportedMechanism(mechanism.name().into()))?;
        if username.is_empty() || username.contains('\0') {
            return Err(malformed("invalid user name"));
        }
        if !valid_nonce(client_nonce) {
            return Err(malformed("invalid client nonce"));
        }
        Ok(ScramClient {
            mechanism,
            hash,
            client_nonce: client_nonce.to_owned(),
            client_first_bare: format!("n={},r={client_nonce}", encode_saslname(username)),
            state: ClientState::ExpectServerFirst {
                password: password.to_owned(),
            },
        })
    }

    /// A client with a random 32-character nonce.
    ///
    /// # Errors
    /// As [`ScramClient::new`], or [`AuthError::Random`].
    pub fn with_random_nonce(
        mechanism: Mechanism,
        username: &str,
        password: &str,
        rng: &dyn SecureRandom,
    ) -> Result<Self, AuthError> {
        Self::new(mechanism, username, password, &random_nonce(rng)?)
    }

    /// The mechanism of this exchange.
    #[must_use]
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The client-first message, `n,,n=<user>,r=<nonce>`.
    #[must_use]
    pub fn client_first(&self) -> Vec<u8> {
        format!("{CLIENT_GS2_HEADER}{}", self.client_first_bare).into_bytes()
    }

    fn fail<T>(&mut self, err: AuthError) -> Result<T, AuthError> {
        self.state = ClientState::Failed;
        Err(err)
    }

    /// Handles server-first and returns client-final (with the proof).
    ///
    /// # Errors
    /// [`AuthError::Malformed`] for bad grammar or a nonce that does not extend ours,
    /// [`AuthError::ServerAuthentication`] for an iteration count outside
    /// [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`] (below is insecure, above is a way to
    /// make us burn CPU), [`AuthError::Unsupported`] for `m=`,
    /// [`AuthError::IllegalState`].
    pub fn handle_server_first(&mut self, message: &[u8]) -> Result<Vec<u8>, AuthError> {
        let password = match std::mem::replace(&mut self.state, ClientState::Failed) {
            ClientState::ExpectServerFirst { password } => password,
            other => return self.fail(AuthError::IllegalState(other.name())),
        };
        let parsed = match parse_server_first(message, &self.client_nonce) {
            Ok(parsed) => parsed,
            Err(e) => {
                crate::wipe(password);
                return self.fail(e);
            }
        };
        let keys = self.hash.keys(&password, &parsed.salt, parsed.iterations);
        crate::wipe(password);
        let without_proof = format!("c={},r={}", B64.encode(CLIENT_GS2_HEADER), parsed.nonce);
        let auth_message = format!("{},{},{without_proof}", self.client_first_bare, parsed.text);
        let client_signature = self.hash.hmac(&keys.stored_key, auth_message.as_bytes());
        let proof = xor(&keys.client_key, &client_signature);
        self.state = ClientState::ExpectServerFinal {
            server_signature: self.hash.hmac(&keys.server_key, auth_message.as_bytes()),
        };
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Handles server-final: checks the server's signature (constant time), which
    /// proves the server knows our credential.
    ///
    /// # Errors
    /// [`AuthError::ServerAuthentication`] for `e=` or a wrong signature,
    /// [`AuthError::Malformed`], [`AuthError::IllegalState`].
    pub fn handle_server_final(&mut self, message: &[u8]) -> Result<(), AuthError> {
        let expected = match std::mem::replace(&mut self.state, ClientState::Failed) {
            ClientState::ExpectServerFinal { server_signature } => server_signature,
            other => return self.fail(AuthError::IllegalState(other.name())),
        };
        let text = match bounded_utf8(message, MAX_SASL_MESSAGE_LEN) {
            Ok(text) => text,
            Err(e) => return self.fail(e),
        };
        let first = text.split(',').next().unwrap_or_default();
        if let Some(error) = first.strip_prefix("e=") {
            let shown: String = error.chars().take(64).collect();
            return self.fail(AuthError::ServerAuthentication(format!(
                "server sent error {shown:?}"
            )));
        }
        let Some(Ok(signature)) = first.strip_prefix("v=").map(|v| B64.decode(v)) else {
            return self.fail(malformed("server-final has no valid verifier"));
        };
        if constant_time::verify_slices_are_equal(&signature, &expected).is_err() {
            return self.fail(AuthError::ServerAuthentication(
                "invalid server signature".into(),
            ));
        }
        self.state = ClientState::Complete;
        Ok(())
    }

    /// Whether the server has been verified.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        matches!(self.state, ClientState::Complete)
    }
}

impl Drop for ScramClient {
    fn drop(&mut self) {
        if let ClientState::ExpectServerFirst { password } = &mut self.state {
            crate::wipe(std::mem::take(password));
        }
    }
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("client_first_bare", &self.client_first_bare)
            .field("state", &self.state.name())
            .finish_non_exhaustive()
    }
}

struct ServerFirst<'a> {
    text: &'a str,
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: NonZeroU32,
}

fn parse_server_first<'a>(
    message: &'a [u8],
    client_nonce: &str,
) -> Result<ServerFirst<'a>, AuthError> {
    let text = bounded_utf8(message, MAX_SASL_MESSAGE_LEN)?;
    let mut attrs = text.split(',');
    let first = attrs.next().unwrap_or_default();
    if first.starts_with("m=") {
        return Err(AuthError::Unsupported(
            "Mandatory SCRAM extensions (m=) are not supported".into(),
        ));
    }
    let nonce = first
        .strip_prefix("r=")
        .ok_or_else(|| malformed("server-first has no nonce"))?;
    // RFC 5802 §5.1: the server's nonce is ours with its own part appended.
    if !valid_nonce(nonce) || nonce.len() <= client_nonce.len() || !nonce.starts_with(client_nonce)
    {
        return Err(malformed("server nonce does not extend the client nonce"));
    }
    let salt = attrs
        .next()
        .and_then(|a| a.strip_prefix("s="))
        .and_then(|s| B64.decode(s).ok())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| malformed("server-first has no valid salt"))?;
    let iterations = attrs
        .next()
        .and_then(|a| a.strip_prefix("i="))
        .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|i| i.parse::<u32>().ok())
        .ok_or_else(|| malformed("server-first has no valid iteration count"))?;
    let iterations = check_iterations(iterations).map_err(|_| {
        AuthError::ServerAuthentication(format!(
            "server requested {iterations} iterations, outside {MIN_ITERATIONS}..={MAX_ITERATIONS}"
        ))
    })?;
    Ok(ServerFirst {
        text,
        nonce,
        salt,
        iterations,
    })
}
