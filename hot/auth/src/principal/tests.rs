use super::*;
use proptest::prelude::*;
use rcgen::string::{BmpString, Ia5String, PrintableString, TeletexString, UniversalString};
use rcgen::{CertificateParams, DistinguishedName, DnType, DnValue, KeyPair};

fn cert_with(subject: &[(DnType, DnValue)]) -> Vec<u8> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    let mut dn = DistinguishedName::new();
    for (ty, value) in subject {
        dn.push(ty.clone(), value.clone());
    }
    params.distinguished_name = dn;
    let key = KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

fn utf8(s: &str) -> DnValue {
    DnValue::Utf8String(s.into())
}

const UID: &[u64] = &[0, 9, 2342, 19200300, 100, 1, 1];
const DC: &[u64] = &[0, 9, 2342, 19200300, 100, 1, 25];
const EMAIL: &[u64] = &[1, 2, 840, 113549, 1, 9, 1];

#[test]
fn subject_in_reverse_order() {
    let der = cert_with(&[
        (
            DnType::CountryName,
            DnValue::PrintableString(PrintableString::try_from("US").unwrap()),
        ),
        (DnType::StateOrProvinceName, utf8("CA")),
        (DnType::LocalityName, utf8("Palo Alto")),
        (DnType::OrganizationName, utf8("Example")),
        (DnType::OrganizationalUnitName, utf8("eng")),
        (DnType::CommonName, utf8("client1")),
    ]);
    assert_eq!(
        subject_dn(&der).unwrap(),
        "CN=client1,OU=eng,O=Example,L=Palo Alto,ST=CA,C=US"
    );
}

#[test]
fn keywords_and_oids() {
    let der = cert_with(&[
        (
            DnType::CustomDnType(DC.to_vec()),
            DnValue::Ia5String(Ia5String::try_from("example").unwrap()),
        ),
        (DnType::CustomDnType(vec![2, 5, 4, 9]), utf8("1 Main St")),
        (DnType::CustomDnType(UID.to_vec()), utf8("jdoe")),
        (
            DnType::CustomDnType(EMAIL.to_vec()),
            DnValue::Ia5String(Ia5String::try_from("a@b.c").unwrap()),
        ),
        (DnType::CommonName, utf8("John")),
    ]);
    // EMAILADDRESS is not an RFC 2253 keyword in Java: dotted OID and DER hex.
    assert_eq!(
        subject_dn(&der).unwrap(),
        "CN=John,1.2.840.113549.1.9.1=#16056140622e63,UID=jdoe,STREET=1 Main St,DC=example"
    );
}

#[test]
fn string_types() {
    let der = cert_with(&[
        (
            DnType::OrganizationName,
            DnValue::TeletexString(TeletexString::try_from("T61").unwrap()),
        ),
        (
            DnType::OrganizationalUnitName,
            DnValue::BmpString(BmpString::try_from("B\u{e9}mp").unwrap()),
        ),
        (
            DnType::LocalityName,
            DnValue::UniversalString(UniversalString::try_from("U").unwrap()),
        ),
        (DnType::CommonName, utf8("\u{fc}ber")),
    ]);
    // UniversalString is not one of Java's DER string types: hex.
    assert_eq!(
        subject_dn(&der).unwrap(),
        "CN=\u{fc}ber,L=#1c0400000055,OU=B\u{e9}mp,O=T61"
    );
}

#[test]
fn escaping_as_java() {
    let cases = [
        ("Smith, John", r"CN=Smith\, John"),
        (" lead", r"CN=\ lead"),
        ("trail  ", r"CN=trail\ \ "),
        ("#hash", r"CN=\#hash"),
        ("mid#hash", r"CN=mid\#hash"),
        ("a=b", r"CN=a\=b"),
        ("q\"<>;+\\", r#"CN=q\"\<\>\;\+\\"#),
        ("nul\0x", r"CN=nul\00x"),
        ("  ", r"CN=\ \ "),
    ];
    for (value, expected) in cases {
        let der = cert_with(&[(DnType::CommonName, utf8(value))]);
        assert_eq!(subject_dn(&der).unwrap(), expected, "{value:?}");
    }
}

/// DER TLV with a short or long length.
fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    if content.len() < 128 {
        out.push(content.len() as u8);
    } else {
        out.extend([0x82, (content.len() >> 8) as u8, content.len() as u8]);
    }
    out.extend_from_slice(content);
    out
}

fn atv(oid: &[u8], value: Vec<u8>) -> Vec<u8> {
    tlv(0x30, &[tlv(0x06, oid), value].concat())
}

const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];
const OID_DC: &[u8] = &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19];
const OID_UID: &[u8] = &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01];

#[test]
fn multi_valued_rdn_and_non_string_values() {
    let name = tlv(
        0x30,
        &[
            tlv(0x31, &atv(OID_DC, tlv(0x16, b"com"))),
            tlv(0x31, &atv(OID_DC, tlv(0x16, b"example"))),
            tlv(
                0x31,
                &[atv(OID_CN, tlv(0x0c, b"a")), atv(OID_UID, tlv(0x0c, b"b"))].concat(),
            ),
            tlv(0x31, &atv(OID_O, tlv(0x13, b"Org"))),
            // CN whose value is an INTEGER: keyword, but hex.
            tlv(0x31, &atv(OID_CN, tlv(0x02, &[0x05]))),
            // A long value, to exercise the long-form length.
            tlv(0x31, &atv(&[0x2a, 0x03], tlv(0x0c, &[b'x'; 130]))),
        ]
        .concat(),
    );
    let long_hex = format!("0c8182{}", "78".repeat(130));
    assert_eq!(
        name_to_rfc2253(&name).unwrap(),
        format!("1.2.3=#{long_hex},CN=#020105,O=Org,CN=a+UID=b,DC=example,DC=com")
    );
    assert_eq!(name_to_rfc2253(&tlv(0x30, &[])).unwrap(), "");
    assert!(name_to_rfc2253(&[0x30, 0x05]).is_err());
    assert!(name_to_rfc2253(&[name.clone(), vec![0]].concat()).is_err());
}

#[test]
fn bad_certificates() {
    assert!(matches!(
        subject_dn(b"not a certificate"),
        Err(AuthError::InvalidCertificate(_))
    ));
    let mut der = cert_with(&[(DnType::CommonName, utf8("x"))]);
    der.push(0);
    assert!(subject_dn(&der).is_err());
}

const KAFKA_DOC_RULES: &str = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT";

#[test]
fn kafka_documentation_examples() {
    let rules = PrincipalMappingRules::parse(KAFKA_DOC_RULES).unwrap();
    assert_eq!(
        rules.apply("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"),
        "serviceuser"
    );
    assert_eq!(
        rules.apply("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"),
        "adminuser@admin"
    );
    assert_eq!(rules.apply("CN=kafka-server1, OU=KAFKA"), "kafka");
    assert_eq!(rules.apply("OU=nothing"), "OU=nothing");
}

/// Kafka's `SslPrincipalMapperTest.testSslPrincipalMapper`.
#[test]
fn kafka_mapper_test() {
    let rules = PrincipalMappingRules::parse(
        &[
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
            "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
            "DEFAULT",
        ]
        .join(", "),
    )
    .unwrap();
    assert_eq!(rules.apply("CN=Duke,OU=ServiceUsers,O=Org,C=US"), "duke");
    assert_eq!(
        rules.apply("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US"),
        "duke@sme"
    );
    assert_eq!(rules.apply("cn=duke,ou=sme,dc=mycp,dc=com"), "DUKE@SME");
    assert_eq!(
        rules.apply("cN=duke,OU=JavaSoft,O=Sun Microsystems"),
        "DUKE"
    );
    assert_eq!(
        rules.apply("OU=JavaSoft,O=Sun Microsystems,C=US"),
        "OU=JavaSoft,O=Sun Microsystems,C=US"
    );
}

/// Kafka's `testCommaWithWhitespace`.
#[test]
fn escaped_comma_in_cn() {
    let rules = PrincipalMappingRules::parse(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT").unwrap();
    assert_eq!(
        rules.apply(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz"),
        r"Tkac\, Adam"
    );
}

/// Kafka's `testValidRules` / `testInvalidRules`.
#[test]
fn valid_and_invalid_rules() {
    for rule in [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ] {
        PrincipalMappingRules::parse(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
    }
    for rule in [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ] {
        let err = PrincipalMappingRules::parse(rule).unwrap_err();
        assert!(matches!(err, AuthError::InvalidRule(_)), "{rule}: {err:?}");
    }
}

fn splits(rules: &str) -> String {
    PrincipalMappingRules::parse(rules).unwrap().to_string()
}

/// Kafka's `testRulesSplitting` ("seeing is believing").
#[test]
fn rules_splitting() {
    assert_eq!(splits(""), "[]");
    assert_eq!(splits("DEFAULT"), "[DEFAULT]");
    assert_eq!(splits("RULE://"), "[RULE:/]");
    assert_eq!(splits("RULE:/.*/"), "[RULE:/.*]");
    assert_eq!(splits("RULE:/.*/L"), "[RULE:/.*/L]");
    assert_eq!(splits("RULE://,DEFAULT"), "[RULE:/, DEFAULT]");
    assert_eq!(splits("  RULE:// ,  DEFAULT  "), "[RULE:/, DEFAULT]");
    assert_eq!(
        splits("  RULE:   /     /     ,  DEFAULT  "),
        "[RULE:   /     , DEFAULT]"
    );
    assert_eq!(
        splits("  RULE:  /     /U   ,DEFAULT  "),
        "[RULE:  /     /U, DEFAULT]"
    );
    // Spaces after the last slash are separators, not part of the rule.
    assert_eq!(
        splits("  RULE:   //     ,  DEFAULT  "),
        "[RULE:   /, DEFAULT]"
    );
    assert_eq!(
        splits("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
        "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]"
    );
    // Empty rules are ignored.
    assert_eq!(splits(",   , , ,      , , ,   "), "[]");
    assert_eq!(splits(",,RULE://,,,DEFAULT,,"), "[RULE:/, DEFAULT]");
    assert_eq!(
        splits(",  , RULE: /   /   ,,,   DEFAULT, ,   "),
        "[RULE: /   , DEFAULT]"
    );
    assert_eq!(
        splits("     ,  , RULE:   /  /  ,,,   DEFAULT, ,   "),
        "[RULE:   /  , DEFAULT]"
    );
    // Escape sequences.
    assert_eq!(
        splits(r"RULE:\/\\\(\)\n\t/\/\//"),
        r"[RULE:\/\\\(\)\n\t/\/\/]"
    );
    assert_eq!(
        splits(r"RULE:\**\/+/*/L,RULE:\/*\**/**/"),
        r"[RULE:\**\/+/*/L, RULE:\/*\**/**]"
    );
    // Rules rule. (A trailing `/L/` would leave `/` unmatched, an error, as in Kafka.)
    assert!(PrincipalMappingRules::parse("RULE:a/b/L/").is_err());
    assert_eq!(
        splits(
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"
        ),
        "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]"
    );
}

#[test]
fn newlines_separate_rules() {
    let rules = PrincipalMappingRules::parse("RULE:^CN=([^,]*),.*$/$1/L\nDEFAULT\r\n").unwrap();
    assert_eq!(rules.to_string(), "[RULE:^CN=([^,]*),.*$/$1/L, DEFAULT]");
    assert_eq!(rules.apply("CN=Bob,O=x"), "bob");
    assert_eq!(rules.apply("O=x"), "O=x");
}

#[test]
fn whole_dn_must_match_and_no_match_behaviour() {
    let rules = PrincipalMappingRules::parse("RULE:CN=([a-z]+)/$1/").unwrap();
    // The pattern occurs in the DN but does not match all of it.
    assert_eq!(rules.try_apply("CN=bob,O=x"), None);
    assert_eq!(rules.apply("CN=bob,O=x"), "CN=bob,O=x");
    assert_eq!(
        rules.map("CN=bob,O=x"),
        Err(AuthError::NoMatchingRule("CN=bob,O=x".into()))
    );
    assert_eq!(rules.apply("CN=bob"), "bob");
    assert_eq!(
        PrincipalMappingRules::default().map("CN=x").unwrap(),
        "CN=x"
    );
    assert_eq!(
        PrincipalMappingRules::parse("").unwrap().try_apply("CN=x"),
        None
    );
}

#[test]
fn replacement_semantics() {
    let apply = |rules: &str, dn: &str| PrincipalMappingRules::parse(rules).unwrap().apply(dn);
    // Java's replaceAll: an unanchored `(.*)` also matches the empty string at the end.
    assert_eq!(apply("RULE:(.*)/<$1>/", "abc"), "<abc><>");
    // $n beyond the groups is literal (Kafka's escapeLiteralBackReferences) ...
    assert_eq!(apply("RULE:^CN=(\\w+)$/$1@$2/", "CN=bob"), "bob@$2");
    // ... after Java's rule of dropping digits: $12 with one group is $1 then "2".
    assert_eq!(apply("RULE:^CN=(\\w+)$/$12/", "CN=bob"), "bob2");
    assert_eq!(apply("RULE:^CN=(\\w+)$/$0!/", "CN=bob"), "CN=bob!");
    assert_eq!(apply("RULE:^CN=(?<user>\\w+)$/${user}/U", "CN=bob"), "BOB");
    assert_eq!(apply("RULE:^CN=(\\w+)$/\\$1 $1/", "CN=bob"), "$1 bob");
    for bad in [
        "RULE:^CN=(\\w+)$/$x/",
        "RULE:^CN=(\\w+)$/${nope}/",
        "RULE:^CN=(\\w+)$/${user/",
        "RULE:^CN=\\w+$/$1/",
        "RULE:^CN=(\\w+$/$1/",
        "RULE:^CN=(\\w+)\\1$/$1/",
    ] {
        let err = PrincipalMappingRules::parse(bad).unwrap_err();
        assert!(
            matches!(&err, AuthError::InvalidRule(m) if m.contains(&bad[..10])),
            "{bad}: {err:?}"
        );
    }
}

#[test]
fn certificate_to_principal() {
    let der = cert_with(&[
        (DnType::OrganizationName, utf8("Example")),
        (DnType::OrganizationalUnitName, utf8("ServiceUsers")),
        (DnType::CommonName, utf8("svc-orders")),
    ]);
    let rules = PrincipalMappingRules::parse(KAFKA_DOC_RULES).unwrap();
    assert_eq!(rules.principal_for_certificate(&der).unwrap(), "svc-orders");
    assert!(rules.principal_for_certificate(b"junk").is_err());
}

proptest! {
    #[test]
    fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), rules in "[ -~\n]{0,60}") {
        let _ = subject_dn(&bytes);
        let _ = name_to_rfc2253(&bytes);
        if let Ok(r) = PrincipalMappingRules::parse(&rules) {
            let _ = r.apply("CN=a,O=b");
            let _ = r.apply("");
        }
    }

    #[test]
    fn rules_never_panic_on_any_dn(dn in "\\PC{0,40}") {
        let rules = PrincipalMappingRules::parse(KAFKA_DOC_RULES).unwrap();
        let _ = rules.apply(&dn);
        let r = PrincipalMappingRules::parse("RULE:(.*?)/[$1]/U").unwrap();
        let _ = r.apply(&dn);
    }
}
