use super::*;
use std::sync::OnceLock;

use aws_lc_rs::encoding::{AsDer, PublicKeyX509Der};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
    RSA_PKCS1_SHA256, RSA_PKCS1_SHA512, RsaKeyPair, RsaSignatureEncoding,
};
use proptest::prelude::*;
use serde_json::json;
use x509_parser::prelude::FromDer;

const NOW_MS: i64 = 1_700_000_000_000;
const NOW_S: i64 = NOW_MS / 1000;

fn b64url(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn rsa_key() -> &'static RsaKeyPair {
    static KEY: OnceLock<RsaKeyPair> = OnceLock::new();
    KEY.get_or_init(|| RsaKeyPair::generate(KeySize::Rsa2048).unwrap())
}

fn rsa_key_2() -> &'static RsaKeyPair {
    static KEY: OnceLock<RsaKeyPair> = OnceLock::new();
    KEY.get_or_init(|| RsaKeyPair::generate(KeySize::Rsa2048).unwrap())
}

fn ec_key() -> &'static EcdsaKeyPair {
    static KEY: OnceLock<EcdsaKeyPair> = OnceLock::new();
    KEY.get_or_init(|| EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap())
}

fn ec384_key() -> &'static EcdsaKeyPair {
    static KEY: OnceLock<EcdsaKeyPair> = OnceLock::new();
    KEY.get_or_init(|| EcdsaKeyPair::generate(&ECDSA_P384_SHA384_FIXED_SIGNING).unwrap())
}

/// A JWS over `header.claims`, signed by `sign`.
fn jws(header: &Value, claims: &Value, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
    let input = format!(
        "{}.{}",
        b64url(header.to_string()),
        b64url(claims.to_string())
    );
    let sig = sign(input.as_bytes());
    format!("{input}.{}", b64url(sig))
}

fn rsa_sign(
    key: &'static RsaKeyPair,
    enc: &'static RsaSignatureEncoding,
) -> impl Fn(&[u8]) -> Vec<u8> {
    move |input| {
        let mut sig = vec![0; key.public_modulus_len()];
        key.sign(enc, &SystemRandom::new(), input, &mut sig)
            .unwrap();
        sig
    }
}

fn ec_sign(key: &'static EcdsaKeyPair) -> impl Fn(&[u8]) -> Vec<u8> {
    move |input| {
        key.sign(&SystemRandom::new(), input)
            .unwrap()
            .as_ref()
            .to_vec()
    }
}

fn rs256(kid: Option<&str>, claims: &Value) -> String {
    let header = match kid {
        Some(kid) => json!({"alg": "RS256", "typ": "JWT", "kid": kid}),
        None => json!({"alg": "RS256"}),
    };
    jws(&header, claims, rsa_sign(rsa_key(), &RSA_PKCS1_SHA256))
}

fn es256(kid: Option<&str>, claims: &Value) -> String {
    let header = match kid {
        Some(kid) => json!({"alg": "ES256", "kid": kid}),
        None => json!({"alg": "ES256"}),
    };
    jws(&header, claims, ec_sign(ec_key()))
}

fn strip_zeros(b: &[u8]) -> &[u8] {
    let i = b.iter().position(|&x| x != 0).unwrap_or(b.len());
    &b[i..]
}

fn rsa_jwk(key: &RsaKeyPair, kid: &str) -> Value {
    let (_, pk) =
        x509_parser::public_key::RSAPublicKey::from_der(key.public_key().as_ref()).unwrap();
    json!({"kty": "RSA", "kid": kid, "use": "sig",
           "n": b64url(strip_zeros(pk.modulus)), "e": b64url(strip_zeros(pk.exponent))})
}

fn ec_jwk(key: &EcdsaKeyPair, crv: &str, kid: &str) -> Value {
    let p = key.public_key().as_ref();
    let len = (p.len() - 1) / 2;
    json!({"kty": "EC", "crv": crv, "kid": kid,
           "x": b64url(&p[1..1 + len]), "y": b64url(&p[1 + len..])})
}

fn jwks() -> String {
    json!({"keys": [rsa_jwk(rsa_key(), "rsa1"), ec_jwk(ec_key(), "P-256", "ec1")]}).to_string()
}

fn claims() -> Value {
    json!({"sub": "alice", "exp": NOW_S + 3600, "iat": NOW_S - 10, "iss": "https://idp",
           "aud": ["kafka", "other"], "scope": "read write"})
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

fn validator(config: ValidatorConfig) -> TokenValidator {
    TokenValidator::from_jwks(&jwks(), config).unwrap()
}

fn strict() -> ValidatorConfig {
    ValidatorConfig {
        expected_issuer: Some("https://idp".into()),
        expected_audience: vec!["kafka".into()],
        ..ValidatorConfig::default()
    }
}

fn invalid_token(result: Result<ValidatedToken, AuthError>) -> String {
    match result {
        Err(AuthError::InvalidToken(m)) => m,
        other => panic!("expected InvalidToken, got {other:?}"),
    }
}

#[test]
fn unsecured_round_trip() {
    let v = TokenValidator::unsecured(ValidatorConfig::default());
    assert!(v.is_unsecured());
    let extra = json!({"scope": ["a", "b"]});
    let token = unsecured_token("alice", NOW_S + 60, extra.as_object().unwrap());
    assert!(token.ends_with('.'));
    let t = v.validate(&token, NOW_MS).unwrap();
    assert_eq!(t.principal, "alice");
    assert_eq!(t.expires_at_ms, (NOW_S + 60) * 1000);
    assert_eq!(t.scopes, BTreeSet::from(["a".into(), "b".into()]));
    // A signed token is not accepted by the unsecured validator.
    assert!(v.validate(&rs256(None, &claims()), NOW_MS).is_err());
    // Nor an alg-none token with a signature.
    assert!(v.validate(&format!("{token}AAAA"), NOW_MS).is_err());
}

#[test]
fn authenticate_returns_principal_expiry_and_extensions() {
    let v = validator(strict());
    let token = rs256(Some("rsa1"), &claims());
    let ext = BTreeMap::from([("traceId".to_string(), "abc 123".to_string())]);
    let msg = ClientInitialResponse::new(&token, None, ext.clone())
        .unwrap()
        .to_bytes();
    let t = v.authenticate(&msg, NOW_MS).unwrap();
    assert_eq!(t.principal, "alice");
    assert_eq!(t.expires_at_ms, (NOW_S + 3600) * 1000);
    assert_eq!(t.issued_at_ms, Some((NOW_S - 10) * 1000));
    assert_eq!(t.scopes, BTreeSet::from(["read".into(), "write".into()]));
    assert_eq!(t.extensions, ext);

    // authzid must be the principal (Kafka's rule).
    let ok = ClientInitialResponse::new(&token, Some("alice"), BTreeMap::new()).unwrap();
    v.authenticate(&ok.to_bytes(), NOW_MS).unwrap();
    let other = ClientInitialResponse::new(&token, Some("admin"), BTreeMap::new()).unwrap();
    assert!(matches!(
        v.authenticate(&other.to_bytes(), NOW_MS),
        Err(AuthError::Malformed(m)) if m.contains("authorization id")
    ));
}

#[test]
fn client_response_wire_format() {
    let r = ClientInitialResponse::parse(b"n,,\x01auth=Bearer abc.def.\x01\x01").unwrap();
    assert_eq!(r.token(), "abc.def.");
    assert_eq!(r.authzid(), None);
    assert!(r.extensions().is_empty());
    let r = ClientInitialResponse::parse(
        b"n,a=a=2Cb,\x01auth=bearer   tok\x01logicalCluster=lc-1\x01traceId=x y\x01\x01",
    )
    .unwrap();
    assert_eq!(r.authzid(), Some("a,b"));
    assert_eq!(r.token(), "tok");
    assert_eq!(r.extensions().len(), 2);
    assert_eq!(r.extensions()["traceId"], "x y");
    assert_eq!(
        ClientInitialResponse::parse(&r.to_bytes()).unwrap(),
        r,
        "to_bytes round-trips"
    );
    assert!(!format!("{r:?}").contains("tok\""), "{r:?}");
}

#[test]
fn client_response_rejections() {
    for msg in [
        &b""[..],
        b"n,,",
        b"n,,\x01",
        b"n,,\x01\x01",                                   // no auth
        b"n,,\x01auth=Bearer x\x01",                      // missing final kvsep
        b"n,,auth=Bearer x\x01\x01",                      // missing first kvsep
        b"n,,\x01auth=Basic x\x01\x01",                   // wrong scheme
        b"n,,\x01auth=Bearer\x01\x01",                    // no token
        b"n,,\x01auth=Bearer x y\x01\x01",                // space in token
        b"n,,\x01auth=Bearer x\x01auth=Bearer y\x01\x01", // duplicate
        b"n,,\x01auth=Bearer x\x01k1=v\x01\x01",          // key not alphabetic
        b"n,,\x01auth=Bearer x\x01k=\x01\x01",            // empty value
        b"n,,\x01auth=Bearer x\x01k=\x02\x01\x01",        // control char
        b"n,,\x01auth=Bearer x\x01\x01\x01",              // empty pair
        b"n,a=,\x01auth=Bearer x\x01\x01",                // empty authzid
        b"x,,\x01auth=Bearer x\x01\x01",
        b"n,,\x01auth=Bearer \xff\x01\x01",
    ] {
        let result = ClientInitialResponse::parse(msg);
        assert!(
            matches!(result, Err(AuthError::Malformed(_))),
            "{:?}: {result:?}",
            String::from_utf8_lossy(msg)
        );
    }
    assert!(matches!(
        ClientInitialResponse::parse(b"y,,\x01auth=Bearer x\x01\x01"),
        Err(AuthError::Unsupported(_))
    ));
    let mut big = b"n,,\x01auth=Bearer ".to_vec();
    big.resize(MAX_CLIENT_RESPONSE_LEN + 1, b'a');
    assert!(matches!(
        ClientInitialResponse::parse(&big),
        Err(AuthError::TooLarge { .. })
    ));
    assert!(ClientInitialResponse::new("a b", None, BTreeMap::new()).is_err());
    let bad_ext = BTreeMap::from([("auth".to_string(), "x".to_string())]);
    assert!(ClientInitialResponse::new("t", None, bad_ext).is_err());
}

#[test]
fn signed_tokens_verify() {
    let v = validator(strict());
    assert_eq!(
        v.validate(&rs256(Some("rsa1"), &claims()), NOW_MS)
            .unwrap()
            .principal,
        "alice"
    );
    assert_eq!(
        v.validate(&es256(Some("ec1"), &claims()), NOW_MS)
            .unwrap()
            .principal,
        "alice"
    );
    // No kid: the set's only key of the right type is used.
    v.validate(&rs256(None, &claims()), NOW_MS).unwrap();
    v.validate(&es256(None, &claims()), NOW_MS).unwrap();
    // RS512 with the same RSA key.
    let rs512 = jws(
        &json!({"alg": "RS512", "kid": "rsa1"}),
        &claims(),
        rsa_sign(rsa_key(), &RSA_PKCS1_SHA512),
    );
    v.validate(&rs512, NOW_MS).unwrap();
}

#[test]
fn es384_keys() {
    let set = json!({"keys": [ec_jwk(ec384_key(), "P-384", "k384")]}).to_string();
    let v = TokenValidator::from_jwks(&set, ValidatorConfig::default()).unwrap();
    let token = jws(&json!({"alg": "ES384"}), &claims(), ec_sign(ec384_key()));
    v.validate(&token, NOW_MS).unwrap();
    // ES256 against a P-384 key: no fitting key.
    invalid_token(v.validate(&es256(None, &claims()), NOW_MS));
}

#[test]
fn bad_signature() {
    let v = validator(strict());
    let token = rs256(Some("rsa1"), &claims());
    // Swap the payload for another principal's, keeping the signature.
    let forged_payload = b64url(with(claims(), "sub", "admin".into()).to_string());
    let parts: Vec<&str> = token.split('.').collect();
    let forged = format!("{}.{forged_payload}.{}", parts[0], parts[2]);
    assert!(invalid_token(v.validate(&forged, NOW_MS)).contains("signature"));
    // A token signed by another RSA key, claiming our kid.
    let other = jws(
        &json!({"alg": "RS256", "kid": "rsa1"}),
        &claims(),
        rsa_sign(rsa_key_2(), &RSA_PKCS1_SHA256),
    );
    assert!(invalid_token(v.validate(&other, NOW_MS)).contains("signature"));
    // Truncated signature.
    let short = &token[..token.len() - 4];
    invalid_token(v.validate(short, NOW_MS));
}

#[test]
fn key_selection() {
    let v = validator(strict());
    assert!(invalid_token(v.validate(&rs256(Some("nope"), &claims()), NOW_MS)).contains("kid"));
    // A kid naming a key of the wrong type.
    invalid_token(v.validate(&rs256(Some("ec1"), &claims()), NOW_MS));
    // Two RSA keys and no kid in the token: ambiguous.
    let two = json!({"keys": [rsa_jwk(rsa_key(), "a"), rsa_jwk(rsa_key_2(), "b")]}).to_string();
    let v2 = TokenValidator::from_jwks(&two, ValidatorConfig::default()).unwrap();
    assert!(invalid_token(v2.validate(&rs256(None, &claims()), NOW_MS)).contains("2 keys"));
    v2.validate(&rs256(Some("a"), &claims()), NOW_MS).unwrap();
    // A key restricted to RS512 is not used for RS256.
    let mut jwk = rsa_jwk(rsa_key(), "r");
    jwk["alg"] = "RS512".into();
    let v3 = TokenValidator::from_jwks(
        &json!({"keys": [jwk]}).to_string(),
        ValidatorConfig::default(),
    )
    .unwrap();
    invalid_token(v3.validate(&rs256(Some("r"), &claims()), NOW_MS));
}

#[test]
fn alg_none_and_alg_confusion_rejected_under_jwks() {
    let v = validator(ValidatorConfig::default());
    let none = unsecured_token("alice", NOW_S + 60, &Map::new());
    assert!(invalid_token(v.validate(&none, NOW_MS)).contains("alg"));
    // HS256 with the RSA public key as the HMAC secret: the classic confusion.
    let secret = rsa_key().public_key().as_ref().to_vec();
    let hs = jws(
        &json!({"alg": "HS256", "kid": "rsa1"}),
        &claims(),
        |input| {
            let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &secret);
            aws_lc_rs::hmac::sign(&key, input).as_ref().to_vec()
        },
    );
    assert!(invalid_token(v.validate(&hs, NOW_MS)).contains("unsupported alg"));
    for alg in ["PS256", "EdDSA", "none ", "rs256"] {
        let t = jws(&json!({"alg": alg}), &claims(), |_| vec![1, 2, 3]);
        invalid_token(v.validate(&t, NOW_MS));
    }
    let crit = jws(
        &json!({"alg": "RS256", "kid": "rsa1", "crit": ["exp"]}),
        &claims(),
        rsa_sign(rsa_key(), &RSA_PKCS1_SHA256),
    );
    assert!(invalid_token(v.validate(&crit, NOW_MS)).contains("critical"));
}

#[test]
fn time_claims() {
    let v = validator(ValidatorConfig::default());
    let expired = rs256(None, &with(claims(), "exp", (NOW_S - 60).into()));
    assert_eq!(
        v.validate(&expired, NOW_MS),
        Err(AuthError::ExpiredToken {
            expired_at_ms: (NOW_S - 60) * 1000,
            now_ms: NOW_MS
        })
    );
    // Within the default 30 s skew.
    let recent = rs256(None, &with(claims(), "exp", (NOW_S - 10).into()));
    v.validate(&recent, NOW_MS).unwrap();
    let no_skew = validator(ValidatorConfig {
        clock_skew_ms: 0,
        ..ValidatorConfig::default()
    });
    assert!(matches!(
        no_skew.validate(&recent, NOW_MS),
        Err(AuthError::ExpiredToken { .. })
    ));
    // Fractional NumericDate.
    let frac = rs256(None, &with(claims(), "exp", json!(NOW_S as f64 + 100.5)));
    assert_eq!(
        v.validate(&frac, NOW_MS).unwrap().expires_at_ms,
        NOW_MS + 100_500
    );
    let mut no_exp = claims();
    no_exp.as_object_mut().unwrap().remove("exp");
    assert!(invalid_token(v.validate(&rs256(None, &no_exp), NOW_MS)).contains("exp"));
    let bad_exp = rs256(None, &with(claims(), "exp", "tomorrow".into()));
    invalid_token(v.validate(&bad_exp, NOW_MS));

    let future_nbf = rs256(None, &with(claims(), "nbf", (NOW_S + 120).into()));
    assert!(invalid_token(v.validate(&future_nbf, NOW_MS)).contains("not valid before"));
    let near_nbf = rs256(None, &with(claims(), "nbf", (NOW_S + 20).into()));
    v.validate(&near_nbf, NOW_MS).unwrap();
    let future_iat = rs256(None, &with(claims(), "iat", (NOW_S + 120).into()));
    assert!(invalid_token(v.validate(&future_iat, NOW_MS)).contains("future"));
}

#[test]
fn issuer_audience_principal_scope() {
    let v = validator(strict());
    let wrong_iss = rs256(None, &with(claims(), "iss", "https://evil".into()));
    assert!(invalid_token(v.validate(&wrong_iss, NOW_MS)).contains("issuer"));
    let mut no_iss = claims();
    no_iss.as_object_mut().unwrap().remove("iss");
    invalid_token(v.validate(&rs256(None, &no_iss), NOW_MS));

    let wrong_aud = rs256(None, &with(claims(), "aud", json!(["web"])));
    assert!(invalid_token(v.validate(&wrong_aud, NOW_MS)).contains("audience"));
    let str_aud = rs256(None, &with(claims(), "aud", "kafka".into()));
    v.validate(&str_aud, NOW_MS).unwrap();
    let mut no_aud = claims();
    no_aud.as_object_mut().unwrap().remove("aud");
    invalid_token(v.validate(&rs256(None, &no_aud), NOW_MS));
    let bad_aud = rs256(None, &with(claims(), "aud", json!([1])));
    invalid_token(v.validate(&bad_aud, NOW_MS));

    let custom = validator(ValidatorConfig {
        principal_claim: "client_id".into(),
        ..ValidatorConfig::default()
    });
    let with_client = rs256(None, &with(claims(), "client_id", "svc-1".into()));
    assert_eq!(
        custom.validate(&with_client, NOW_MS).unwrap().principal,
        "svc-1"
    );
    invalid_token(custom.validate(&rs256(None, &claims()), NOW_MS));
    for bad_sub in [json!(""), json!(42), json!(null)] {
        invalid_token(v.validate(&rs256(None, &with(claims(), "sub", bad_sub)), NOW_MS));
    }

    let needs = validator(ValidatorConfig {
        required_scopes: vec!["read".into(), "admin".into()],
        ..ValidatorConfig::default()
    });
    let err = needs.validate(&rs256(None, &claims()), NOW_MS).unwrap_err();
    assert_eq!(err, AuthError::InsufficientScope("admin".into()));
    assert_eq!(error_challenge(&err), br#"{"status":"insufficient_scope"}"#);
    let admin = rs256(None, &with(claims(), "scope", json!(["read", "admin"])));
    needs.validate(&admin, NOW_MS).unwrap();
    let bad_scope = rs256(None, &with(claims(), "scope", json!(7)));
    invalid_token(v.validate(&bad_scope, NOW_MS));
}

#[test]
fn malformed_tokens() {
    let v = validator(ValidatorConfig::default());
    let u = TokenValidator::unsecured(ValidatorConfig::default());
    let header = b64url(r#"{"alg":"none"}"#);
    let payload = b64url(claims().to_string());
    for token in [
        String::new(),
        "a.b".into(),
        "a.b.c.d".into(),
        "!!!.x.".into(),
        format!("{header}.!!!."),
        format!("{}.{payload}.", b64url("not json")),
        format!("{header}.{}.", b64url("[1,2]")),
        format!("{}.{payload}.", b64url(r#"{"typ":"JWT"}"#)),
        format!("{}.{payload}.", b64url(r#"{"alg":5}"#)),
        format!("{header}=.{payload}."),
    ] {
        invalid_token(u.validate(&token, NOW_MS));
        invalid_token(v.validate(&token, NOW_MS));
    }
    let huge = "a".repeat(MAX_TOKEN_LEN + 1);
    assert!(matches!(
        v.validate(&huge, NOW_MS),
        Err(AuthError::TooLarge { .. })
    ));
    let kid_number = jws(&json!({"alg": "RS256", "kid": 5}), &claims(), |_| vec![0]);
    invalid_token(v.validate(&kid_number, NOW_MS));
}

#[test]
fn error_challenge_and_ack() {
    assert_eq!(
        error_challenge(&AuthError::InvalidToken("x".into())),
        br#"{"status":"invalid_token"}"#
    );
    assert!(is_error_ack(b"\x01"));
    assert!(!is_error_ack(b"\x01\x01"));
}

#[test]
fn jwks_parsing() {
    let skipped = json!({"keys": [
        {"kty": "oct", "k": "c2VjcmV0"},
        {"kty": "OKP", "crv": "Ed25519", "x": "AAAA"},
        {"kty": "EC", "crv": "P-521", "x": "AA", "y": "AA"},
        {"kty": "RSA", "use": "enc", "n": "AA", "e": "AQAB"},
        {"kty": "RSA", "alg": "PS256", "n": "AA", "e": "AQAB"},
        rsa_jwk(rsa_key(), "ok"),
    ]});
    let set = JwkSet::from_jwks(&skipped.to_string()).unwrap();
    assert_eq!(set.len(), 1);
    assert!(!set.is_empty());
    assert!(format!("{set:?}").contains("RSA(ok)"));

    for bad in [
        "not json".to_string(),
        json!({"keys": []}).to_string(),
        json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}).to_string(),
        json!({"keys": [{"kid": "no-kty"}]}).to_string(),
        json!({"keys": [{"kty": "RSA", "n": "!!", "e": "AQAB"}]}).to_string(),
        json!({"keys": [{"kty": "RSA", "e": "AQAB"}]}).to_string(),
        // 1024-bit modulus: too small.
        json!({"keys": [{"kty": "RSA", "n": b64url([0xc1u8; 128]), "e": "AQAB"}]}).to_string(),
        json!({"keys": [{"kty": "EC", "crv": "P-256", "x": b64url([1u8; 32]), "y": b64url([2u8; 32])}]})
            .to_string(),
        json!({"keys": [{"kty": "EC", "crv": "P-256", "x": b64url([1u8; 31]), "y": b64url([2u8; 32])}]})
            .to_string(),
        json!({"keys": [with(rsa_jwk(rsa_key(), "x"), "alg", "ES256".into())]}).to_string(),
    ] {
        assert!(
            matches!(JwkSet::from_jwks(&bad), Err(AuthError::InvalidKey(_))),
            "{bad}"
        );
    }
    // Padded base64url in key material is tolerated.
    let mut padded = rsa_jwk(rsa_key(), "p");
    padded["e"] = "AQAB".into();
    JwkSet::from_jwks(&json!({"keys": [padded]}).to_string()).unwrap();
}

#[test]
fn pem_keys() {
    let spki = |der: PublicKeyX509Der<'_>| der_to_pem("PUBLIC KEY", der.as_ref());
    let ec_pem = spki(ec_key().public_key().as_der().unwrap());
    let rsa_pem = spki(rsa_key().public_key().as_der().unwrap());
    let v = TokenValidator::from_pem(&ec_pem, ValidatorConfig::default()).unwrap();
    v.validate(&es256(None, &claims()), NOW_MS).unwrap();
    // A kid in the token falls back to the kid-less PEM key.
    v.validate(&es256(Some("whatever"), &claims()), NOW_MS)
        .unwrap();
    invalid_token(v.validate(&rs256(None, &claims()), NOW_MS));

    let both = format!("{rsa_pem}{ec_pem}");
    let v = TokenValidator::from_pem(&both, ValidatorConfig::default()).unwrap();
    v.validate(&rs256(None, &claims()), NOW_MS).unwrap();
    v.validate(&es256(None, &claims()), NOW_MS).unwrap();

    let pkcs1 = der_to_pem("RSA PUBLIC KEY", rsa_key().public_key().as_ref());
    let v = TokenValidator::from_pem(&pkcs1, ValidatorConfig::default()).unwrap();
    v.validate(&rs256(None, &claims()), NOW_MS).unwrap();

    let p384 = spki(ec384_key().public_key().as_der().unwrap());
    let v = TokenValidator::from_pem(&p384, ValidatorConfig::default()).unwrap();
    let token = jws(&json!({"alg": "ES384"}), &claims(), ec_sign(ec384_key()));
    v.validate(&token, NOW_MS).unwrap();

    for bad in [
        String::new(),
        "garbage".to_string(),
        der_to_pem("PRIVATE KEY", b"xx"),
        der_to_pem("PUBLIC KEY", b"not der"),
        der_to_pem("CERTIFICATE", b"not der"),
    ] {
        assert!(
            matches!(JwkSet::from_pem(&bad), Err(AuthError::InvalidKey(_))),
            "{bad}"
        );
    }
}

#[test]
fn certificate_pem_key() {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["idp.example".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let v = TokenValidator::from_pem(&cert.pem(), ValidatorConfig::default()).unwrap();
    let signer =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &key.serialize_der()).unwrap();
    let input = format!(
        "{}.{}",
        b64url(json!({"alg": "ES256"}).to_string()),
        b64url(claims().to_string())
    );
    let sig = signer.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
    let token = format!("{input}.{}", b64url(sig.as_ref()));
    assert_eq!(v.validate(&token, NOW_MS).unwrap().principal, "alice");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn authenticate_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = TokenValidator::unsecured(ValidatorConfig::default()).authenticate(&bytes, NOW_MS);
        let _ = ClientInitialResponse::parse(&bytes);
    }

    #[test]
    fn validate_never_panics(
        header in "[ -~]{0,40}",
        payload in "[ -~]{0,80}",
        sig in "[A-Za-z0-9_-]{0,90}",
        raw in "[A-Za-z0-9_.=-]{0,120}",
    ) {
        let v = validator(strict());
        let u = TokenValidator::unsecured(ValidatorConfig::default());
        let token = format!("{}.{}.{sig}", b64url(&header), b64url(&payload));
        let _ = v.validate(&token, NOW_MS);
        let _ = u.validate(&token, NOW_MS);
        let _ = v.validate(&raw, NOW_MS);
        let _ = u.validate(&raw, i64::MIN);
        let _ = u.validate(&raw, i64::MAX);
    }

    #[test]
    fn claims_never_panic(exp in any::<f64>(), nbf in any::<i64>(), now in any::<i64>()) {
        let u = TokenValidator::unsecured(ValidatorConfig { clock_skew_ms: i64::MAX, ..ValidatorConfig::default() });
        let extra = json!({"exp": exp, "nbf": nbf, "iat": nbf});
        let token = unsecured_token("a", 0, extra.as_object().unwrap());
        let _ = u.validate(&token, now);
    }

    #[test]
    fn key_loading_never_panics(text in "[ -~\n]{0,200}") {
        let _ = JwkSet::from_jwks(&text);
        let _ = JwkSet::from_pem(&text);
        let pem = format!("-----BEGIN PUBLIC KEY-----\n{text}\n-----END PUBLIC KEY-----\n");
        let _ = JwkSet::from_pem(&pem);
    }
}
