use super::*;
use std::collections::BTreeMap;

use crate::MAX_SASL_MESSAGE_LEN;
use aws_lc_rs::rand::SystemRandom;
use proptest::prelude::*;

const SHA256: Mechanism = Mechanism::ScramSha256;
const SHA512: Mechanism = Mechanism::ScramSha512;

// RFC 7677 §3 test vector.
const RFC_CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const RFC_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn decoy() -> ScramDecoy {
    ScramDecoy::new(b"0123456789abcdef0123456789abcdef", 4096).unwrap()
}

fn rfc_credential() -> ScramCredential {
    ScramCredential::new(SHA256, "pencil", &B64.decode(RFC_SALT).unwrap(), 4096).unwrap()
}

fn bad(mechanism: Mechanism) -> AuthError {
    AuthError::BadCredentials { mechanism }
}

#[test]
fn rfc7677_client() {
    let mut client = ScramClient::new(SHA256, "user", "pencil", RFC_CLIENT_NONCE).unwrap();
    assert_eq!(client.client_first(), RFC_CLIENT_FIRST.as_bytes());
    let client_final = client
        .handle_server_first(RFC_SERVER_FIRST.as_bytes())
        .unwrap();
    assert_eq!(String::from_utf8(client_final).unwrap(), RFC_CLIENT_FINAL);
    client
        .handle_server_final(RFC_SERVER_FINAL.as_bytes())
        .unwrap();
    assert!(client.is_complete());
}

#[test]
fn rfc7677_server() {
    let mut server = ScramServer::new(SHA256, RFC_SERVER_NONCE).unwrap();
    let first = server
        .handle_client_first(RFC_CLIENT_FIRST.as_bytes())
        .unwrap();
    assert_eq!(
        first,
        ClientFirst {
            username: "user".into(),
            authzid: None,
            extensions: BTreeMap::new()
        }
    );
    assert_eq!(server.authenticated_username(), None);
    let server_first = server
        .server_first(Some(&rfc_credential()), &decoy())
        .unwrap();
    assert_eq!(String::from_utf8(server_first).unwrap(), RFC_SERVER_FIRST);
    let server_final = server
        .handle_client_final(RFC_CLIENT_FINAL.as_bytes())
        .unwrap();
    assert_eq!(String::from_utf8(server_final).unwrap(), RFC_SERVER_FINAL);
    assert_eq!(server.authenticated_username(), Some("user"));
    assert!(server.is_complete());
    // Nothing more is accepted after completion.
    assert!(matches!(
        server.handle_client_final(RFC_CLIENT_FINAL.as_bytes()),
        Err(AuthError::IllegalState(_))
    ));
}

/// Runs a full exchange; returns the server's verdict at client-final and the
/// client's verdict on server-final.
fn exchange(
    mechanism: Mechanism,
    username: &str,
    password: &str,
    stored: Option<&ScramCredential>,
) -> (Result<String, AuthError>, Result<(), AuthError>) {
    let rng = SystemRandom::new();
    let mut client = ScramClient::with_random_nonce(mechanism, username, password, &rng).unwrap();
    let mut server = ScramServer::with_random_nonce(mechanism, &rng).unwrap();
    let first = server.handle_client_first(&client.client_first()).unwrap();
    assert_eq!(first.username, username);
    let server_first = server.server_first(stored, &decoy()).unwrap();
    let client_final = client.handle_server_first(&server_first).unwrap();
    match server.handle_client_final(&client_final) {
        Ok(server_final) => {
            let user = server.authenticated_username().unwrap().to_owned();
            (Ok(user), client.handle_server_final(&server_final))
        }
        Err(e) => (Err(e), Ok(())),
    }
}

#[test]
fn round_trip_both_mechanisms() {
    let rng = SystemRandom::new();
    for mechanism in [SHA256, SHA512] {
        let stored = ScramCredential::generate(mechanism, "s3cret", 4096, &rng).unwrap();
        assert_eq!(stored.salt().len(), SALT_LEN);
        let (server, client) = exchange(mechanism, "alice", "s3cret", Some(&stored));
        assert_eq!(server.unwrap(), "alice");
        client.unwrap();
    }
}

#[test]
fn names_with_commas_and_equals_are_escaped() {
    let rng = SystemRandom::new();
    let stored = ScramCredential::generate(SHA512, "pw", 4096, &rng).unwrap();
    let client = ScramClient::new(SHA512, "a,b=c", "pw", "nonce").unwrap();
    assert_eq!(client.client_first(), b"n,,n=a=2Cb=3Dc,r=nonce");
    let (server, _) = exchange(SHA512, "a,b=c", "pw", Some(&stored));
    assert_eq!(server.unwrap(), "a,b=c");
}

#[test]
fn wrong_password_and_unknown_user_fail_alike() {
    let rng = SystemRandom::new();
    for mechanism in [SHA256, SHA512] {
        let stored = ScramCredential::generate(mechanism, "right", 4096, &rng).unwrap();
        let (wrong, _) = exchange(mechanism, "alice", "wrong", Some(&stored));
        let (unknown, _) = exchange(mechanism, "mallory", "whatever", None);
        assert_eq!(wrong.unwrap_err(), bad(mechanism));
        assert_eq!(unknown.unwrap_err(), bad(mechanism));
    }
}

#[test]
fn unknown_user_server_first_looks_real_and_is_stable() {
    let first_for = |user: &str| {
        let mut server = ScramServer::new(SHA256, "SNONCE").unwrap();
        let msg = format!("n,,n={user},r=CNONCE");
        server.handle_client_first(msg.as_bytes()).unwrap();
        String::from_utf8(server.server_first(None, &decoy()).unwrap()).unwrap()
    };
    let a = first_for("ghost");
    assert_eq!(a, first_for("ghost"), "decoy salt must be stable per user");
    assert_ne!(a, first_for("phantom"));
    let salt = a.split(",s=").nth(1).unwrap().split(',').next().unwrap();
    assert_eq!(B64.decode(salt).unwrap().len(), SALT_LEN);
    assert!(a.starts_with("r=CNONCESNONCE,s=") && a.ends_with(",i=4096"));
    // A different decoy secret gives different salts.
    let other = ScramDecoy::new(&[7; 32], 4096).unwrap();
    let mut server = ScramServer::new(SHA256, "SNONCE").unwrap();
    server.handle_client_first(b"n,,n=ghost,r=CNONCE").unwrap();
    assert_ne!(
        String::from_utf8(server.server_first(None, &other).unwrap()).unwrap(),
        a
    );
}

fn server_at_final() -> ScramServer {
    let mut server = ScramServer::new(SHA256, RFC_SERVER_NONCE).unwrap();
    server
        .handle_client_first(RFC_CLIENT_FIRST.as_bytes())
        .unwrap();
    server
        .server_first(Some(&rfc_credential()), &decoy())
        .unwrap();
    server
}

#[test]
fn tampered_nonce() {
    let msg = RFC_CLIENT_FINAL.replace("k0,p=", "k1,p=");
    let err = server_at_final()
        .handle_client_final(msg.as_bytes())
        .unwrap_err();
    assert_eq!(
        err,
        AuthError::Malformed("Invalid client nonce in the final client message.".into())
    );
    // Only the client part of the nonce.
    let msg = format!("c=biws,r={RFC_CLIENT_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
    assert!(matches!(
        server_at_final().handle_client_final(msg.as_bytes()),
        Err(AuthError::Malformed(_))
    ));
}

#[test]
fn tampered_proof() {
    let msg = RFC_CLIENT_FINAL.replace("p=dHzb", "p=dHzc");
    let mut server = server_at_final();
    assert_eq!(server.handle_client_final(msg.as_bytes()), Err(bad(SHA256)));
    assert_eq!(server.authenticated_username(), None);
    // Wrong length.
    let msg = RFC_CLIENT_FINAL.replace("p=dHzb", "p=AAAAdHzb");
    assert!(matches!(
        server_at_final().handle_client_final(msg.as_bytes()),
        Err(AuthError::Malformed(_))
    ));
}

#[test]
fn channel_binding_must_be_the_gs2_header() {
    // "eSws" is base64("y,,").
    let msg = RFC_CLIENT_FINAL.replace("c=biws", "c=eSws");
    assert!(matches!(
        server_at_final().handle_client_final(msg.as_bytes()),
        Err(AuthError::Malformed(m)) if m.contains("channel binding")
    ));
    let msg = RFC_CLIENT_FINAL.replace("c=biws,", "");
    assert!(
        server_at_final()
            .handle_client_final(msg.as_bytes())
            .is_err()
    );
}

#[test]
fn authzid_equal_to_user_is_allowed_and_bound_into_c() {
    let rng = SystemRandom::new();
    let stored = ScramCredential::generate(SHA256, "pw", 4096, &rng).unwrap();
    let mut server = ScramServer::new(SHA256, "S").unwrap();
    let first = server.handle_client_first(b"n,a=bob,n=bob,r=C").unwrap();
    assert_eq!(first.authzid.as_deref(), Some("bob"));
    let server_first = server.server_first(Some(&stored), &decoy()).unwrap();
    let server_first = String::from_utf8(server_first).unwrap();
    // Compute the proof by hand with c = base64("n,a=bob,").
    let hash = Hash::Sha256;
    let keys = hash.keys("pw", stored.salt(), NonZeroU32::new(4096).unwrap());
    let without_proof = format!("c={},r=CS", B64.encode("n,a=bob,"));
    let auth = format!("n=bob,r=C,{server_first},{without_proof}");
    let proof = xor(
        &keys.client_key,
        &hash.hmac(&keys.stored_key, auth.as_bytes()),
    );
    let msg = format!("{without_proof},p={}", B64.encode(proof));
    server.handle_client_final(msg.as_bytes()).unwrap();
    assert_eq!(server.authenticated_username(), Some("bob"));
}

fn first_err(msg: &[u8]) -> AuthError {
    let mut server = ScramServer::new(SHA512, "S").unwrap();
    let err = server.handle_client_first(msg).unwrap_err();
    // A failed exchange stays failed.
    assert!(matches!(
        server.handle_client_first(b"n,,n=a,r=b"),
        Err(AuthError::IllegalState("failed"))
    ));
    err
}

#[test]
fn client_first_rejections() {
    assert_eq!(
        first_err(b"n,a=admin,n=bob,r=C"),
        AuthError::Malformed(
            "Authentication failed: Client requested an authorization id that is different from username".into()
        )
    );
    assert!(matches!(
        first_err(b"y,,n=bob,r=C"),
        AuthError::Unsupported(_)
    ));
    assert!(matches!(
        first_err(b"p=tls-unique,,n=bob,r=C"),
        AuthError::Unsupported(_)
    ));
    assert!(matches!(
        first_err(b"n,,m=ext,n=bob,r=C"),
        AuthError::Unsupported(_)
    ));
    assert!(matches!(
        first_err(b"n,,n=bob,r=C,tokenauth=true"),
        AuthError::Unsupported(m) if m.contains("tokenauth")
    ));
    assert!(matches!(
        first_err(b"n,,n=bob,r=C,tokenauth=TRUE"),
        AuthError::Unsupported(_)
    ));
    for bad_msg in [
        &b"n,,n=b=2Xob,r=C"[..], // bad escape
        b"n,,n=bob=,r=C",        // truncated escape
        b"n,,n=b=2cob,r=C",      // lowercase escape
        b"n,,n=,r=C",            // empty name
        b"n,,r=C,n=bob",         // wrong order
        b"n,,n=bob",             // no nonce
        b"n,,n=bob,r=",          // empty nonce
        b"n,,n=bob,r=a\x7fb",    // non-printable nonce
        b"n,,n=b\0ob,r=C",       // NUL
        b"x,,n=bob,r=C",         // bad flag
        b"n,b=x,n=bob,r=C",      // bad authzid
        b"n,n=bob,r=C",          // missing header comma
        b"",
        b"n,,n=bob,r=C,=x",      // empty extension name
        b"n,,n=bob,r=C,ext",     // extension without '='
        b"n,,n=bob,r=C,a=1,a=2", // duplicate extension
        b"n,,n=bob,r=C\xff",     // not UTF-8
    ] {
        assert!(
            matches!(first_err(bad_msg), AuthError::Malformed(_)),
            "{:?}",
            String::from_utf8_lossy(bad_msg)
        );
    }
}

#[test]
fn unknown_extensions_are_returned_and_ignored() {
    let mut server = ScramServer::new(SHA256, "S").unwrap();
    let first = server
        .handle_client_first(b"n,,n=bob,r=C,tokenauth=false,foo=bar")
        .unwrap();
    assert_eq!(first.extensions.get("foo").map(String::as_str), Some("bar"));
    assert_eq!(first.username, "bob");
}

#[test]
fn oversized_input() {
    let mut msg = b"n,,n=bob,r=".to_vec();
    msg.resize(MAX_SASL_MESSAGE_LEN + 1, b'a');
    assert_eq!(
        first_err(&msg),
        AuthError::TooLarge {
            len: MAX_SASL_MESSAGE_LEN + 1,
            max: MAX_SASL_MESSAGE_LEN
        }
    );
    let mut server = server_at_final();
    assert!(matches!(
        server.handle_client_final(&vec![b'c'; MAX_SASL_MESSAGE_LEN + 1]),
        Err(AuthError::TooLarge { .. })
    ));
}

#[test]
fn out_of_order_calls() {
    let mut server = ScramServer::new(SHA256, "S").unwrap();
    assert!(matches!(
        server.server_first(None, &decoy()),
        Err(AuthError::IllegalState(_))
    ));
    let mut server = ScramServer::new(SHA256, "S").unwrap();
    assert!(matches!(
        server.handle_client_final(RFC_CLIENT_FINAL.as_bytes()),
        Err(AuthError::IllegalState(_))
    ));
    let mut client = ScramClient::new(SHA256, "user", "pencil", "n").unwrap();
    assert!(matches!(
        client.handle_server_final(RFC_SERVER_FINAL.as_bytes()),
        Err(AuthError::IllegalState(_))
    ));
}

#[test]
fn credential_for_the_other_mechanism_is_refused() {
    let mut server = ScramServer::new(SHA512, "S").unwrap();
    server
        .handle_client_first(RFC_CLIENT_FIRST.as_bytes())
        .unwrap();
    assert!(matches!(
        server.server_first(Some(&rfc_credential()), &decoy()),
        Err(AuthError::InvalidCredential(_))
    ));
}

#[test]
fn constructors_validate() {
    assert!(matches!(
        ScramServer::new(Mechanism::Plain, "S"),
        Err(AuthError::UnsupportedMechanism(_))
    ));
    assert!(ScramServer::new(SHA256, "a,b").is_err());
    assert!(ScramServer::new(SHA256, "").is_err());
    assert!(ScramClient::new(SHA256, "", "pw", "n").is_err());
    assert!(ScramClient::new(SHA256, "u", "pw", "a b").is_err());
    assert!(ScramClient::new(Mechanism::OAuthBearer, "u", "pw", "n").is_err());
    assert!(ScramDecoy::new(b"short", 4096).is_err());
    assert!(ScramDecoy::new(&[0; 32], 100).is_err());
}

#[test]
fn client_rejects_bad_server_first() {
    type Check = fn(&AuthError) -> bool;
    let cases: &[(&str, Check)] = &[
        (
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1024",
            |e| matches!(e, AuthError::ServerAuthentication(m) if m.contains("1024")),
        ),
        (
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=100000000",
            |e| matches!(e, AuthError::ServerAuthentication(_)),
        ),
        (
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=+4096",
            |e| matches!(e, AuthError::Malformed(_)),
        ),
        ("r=OTHERNONCE,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", |e| {
            matches!(e, AuthError::Malformed(_))
        }),
        (
            "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            |e| matches!(e, AuthError::Malformed(_)),
        ),
        ("r=rOprNGfwEbeRWgbNEkqOx,s=,i=4096", |e| {
            matches!(e, AuthError::Malformed(_))
        }),
        ("r=rOprNGfwEbeRWgbNEkqOx,s=!!,i=4096", |e| {
            matches!(e, AuthError::Malformed(_))
        }),
        (
            "m=x,r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            |e| matches!(e, AuthError::Unsupported(_)),
        ),
    ];
    for (msg, check) in cases {
        let mut client = ScramClient::new(SHA256, "user", "pencil", RFC_CLIENT_NONCE).unwrap();
        let err = client.handle_server_first(msg.as_bytes()).unwrap_err();
        assert!(check(&err), "{msg}: {err:?}");
    }
}

#[test]
fn client_rejects_bad_server_final() {
    let client_at_final = || {
        let mut c = ScramClient::new(SHA256, "user", "pencil", RFC_CLIENT_NONCE).unwrap();
        c.handle_server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
        c
    };
    let mut c = client_at_final();
    assert!(matches!(
        c.handle_server_final(b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
        Err(AuthError::ServerAuthentication(_))
    ));
    assert!(!c.is_complete());
    assert!(matches!(
        client_at_final().handle_server_final(b"e=invalid-proof"),
        Err(AuthError::ServerAuthentication(m)) if m.contains("invalid-proof")
    ));
    assert!(matches!(
        client_at_final().handle_server_final(b"x=1"),
        Err(AuthError::Malformed(_))
    ));
    // Extensions after the verifier are allowed.
    let msg = format!("{RFC_SERVER_FINAL},ext=1");
    client_at_final()
        .handle_server_final(msg.as_bytes())
        .unwrap();
}

#[test]
fn credential_bounds_and_verify_password() {
    let rng = SystemRandom::new();
    for (iterations, ok) in [(4095, false), (4096, true), (16384, true), (16385, false)] {
        assert_eq!(
            ScramCredential::generate(SHA256, "pw", iterations, &rng).is_ok(),
            ok,
            "{iterations}"
        );
    }
    assert!(matches!(
        ScramCredential::new(SHA256, "pw", b"", 4096),
        Err(AuthError::InvalidCredential(_))
    ));
    assert!(ScramCredential::new(Mechanism::Plain, "pw", b"s", 4096).is_err());
    let c = ScramCredential::generate(SHA512, "pw", 4096, &rng).unwrap();
    assert_eq!(c.stored_key().len(), 64);
    assert_eq!(c.server_key().len(), 64);
    assert!(c.verify_password("pw"));
    assert!(!c.verify_password("pW"));
    assert!(!c.verify_password(""));
    let rfc = rfc_credential();
    assert!(rfc.verify_password("pencil"));
}

#[test]
fn credential_serde_and_debug() {
    let c = rfc_credential();
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["mechanism"], "SCRAM-SHA-256");
    assert_eq!(json["salt"], RFC_SALT);
    assert_eq!(json["iterations"], 4096);
    let back: ScramCredential = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, c);
    let mut bad_key = json.clone();
    bad_key["stored_key"] = "AAAA".into();
    assert!(serde_json::from_value::<ScramCredential>(bad_key).is_err());
    let mut bad_iter = json.clone();
    bad_iter["iterations"] = 10.into();
    assert!(serde_json::from_value::<ScramCredential>(bad_iter).is_err());
    let mut bad_b64 = json;
    bad_b64["salt"] = "***".into();
    assert!(serde_json::from_value::<ScramCredential>(bad_b64).is_err());

    let shown = format!("{c:?}");
    assert!(!shown.contains(&B64.encode(c.stored_key())), "{shown}");
    assert!(!shown.contains(&format!("{:?}", c.stored_key())), "{shown}");
    assert!(shown.contains("redacted"));
    let client = ScramClient::new(SHA256, "user", "hunter2", "n").unwrap();
    assert!(!format!("{client:?}").contains("hunter2"));
    assert!(!format!("{:?}", decoy()).contains("0123456789abcdef"));
    assert!(format!("{:?}", server_at_final()).contains("client-final"));
}

#[test]
fn from_salted_password_matches_new() {
    let salt = B64.decode(RFC_SALT).unwrap();
    let salted = Hash::Sha256.salted_password("pencil", &salt, NonZeroU32::new(4096).unwrap());
    let c = ScramCredential::from_salted_password(SHA256, &salted, &salt, 4096).unwrap();
    assert_eq!(c, rfc_credential());
    assert!(c.verify_password("pencil"));
    assert!(ScramCredential::from_salted_password(SHA512, &salted, &salt, 4096).is_err());
    assert!(ScramCredential::from_salted_password(SHA256, &salted, &salt, 1000).is_err());
}

#[test]
fn from_parts_checks_lengths() {
    let c = rfc_credential();
    let rebuilt = ScramCredential::from_parts(
        SHA256,
        c.salt().to_vec(),
        4096,
        c.stored_key().to_vec(),
        c.server_key().to_vec(),
    )
    .unwrap();
    assert_eq!(rebuilt, c);
    assert!(
        ScramCredential::from_parts(
            SHA512,
            c.salt().to_vec(),
            4096,
            c.stored_key().to_vec(),
            c.server_key().to_vec()
        )
        .is_err()
    );
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        // Mostly-valid messages with random tails, to get past the first checks.
        (
            prop::sample::select(vec![
                "n,,n=user,r=",
                "n,a=user,n=user,r=",
                "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=",
                "r=rOprNGfwEbeRWgbNEkqO",
                "v=",
            ]),
            "[ -~]{0,80}"
        )
            .prop_map(|(prefix, tail)| format!("{prefix}{tail}").into_bytes()),
    ]
}

proptest! {
    #[test]
    fn server_handlers_never_panic(first in bytes(), last in bytes()) {
        let mut server = ScramServer::new(SHA256, RFC_SERVER_NONCE).unwrap();
        let _ = server.handle_client_first(&first);
        let _ = server.server_first(None, &decoy());
        let _ = server.handle_client_final(&last);

        let mut server = server_at_final();
        let _ = server.handle_client_final(&last);
    }

    #[test]
    fn client_handlers_never_panic(first in bytes(), last in bytes()) {
        let mut client = ScramClient::new(SHA512, "user", "pencil", RFC_CLIENT_NONCE).unwrap();
        let _ = client.handle_server_first(&first);
        let _ = client.handle_server_final(&last);
    }
}
