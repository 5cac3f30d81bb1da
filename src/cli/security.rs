//! `strata serve`'s listener and security flags: `--listeners`, `--advertised-listeners`,
//! TLS files, and how client certificates become principals.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use serde::{Deserialize, Serialize};
use strata_auth::{Mechanism, TokenValidator, ValidatorConfig};
use strata_broker::listener::{
    ListenerConfig, SecurityProtocol, parse_listener_list, resolve_listeners,
};
use strata_broker::security::SaslConfig;
use strata_broker::tls::{ClientAuth, TlsFiles};

// Also read from the --config file, flattened into `ServeArgs` (see there): the same
// keys at the top level of the file; an unset setting is left out when serialized.
#[derive(Args, Serialize, Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "kebab-case")]
pub struct SecurityArgs {
    /// Kafka listeners as PROTOCOL://HOST:PORT,... with PROTOCOL one of PLAINTEXT, SSL,
    /// SASL_PLAINTEXT, SASL_SSL, e.g. PLAINTEXT://127.0.0.1:9092,SSL://0.0.0.0:9094
    /// (Kafka's listeners). With --kafka-addr, that is the PLAINTEXT listener
    /// [default: PLAINTEXT://127.0.0.1:9092]
    #[arg(long, env = "STRATA_LISTENERS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listeners: Option<String>,
    /// What clients of each listener are told to connect to, PROTOCOL://HOST:PORT,...
    /// (Kafka's advertised.listeners); required for a listener binding 0.0.0.0
    /// [default: each listener's bound address]
    #[arg(long, env = "STRATA_ADVERTISED_LISTENERS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertised_listeners: Option<String>,
    /// The listener other brokers and this broker's own clients use (Kafka's
    /// inter.broker.listener.name) [default: PLAINTEXT if there is one, else the first]
    #[arg(long, env = "STRATA_INTER_BROKER_LISTENER_NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inter_broker_listener_name: Option<String>,
    /// The TLS certificate chain of SSL and SASL_SSL listeners, PEM (reloaded on SIGHUP
    /// and when the file changes)
    #[arg(long, env = "STRATA_TLS_CERT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// The TLS private key, PEM
    #[arg(long, env = "STRATA_TLS_KEY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates that sign client certificates, PEM: SSL listeners then require
    /// a client certificate, whose subject is the principal
    #[arg(long, env = "STRATA_TLS_CLIENT_CA")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_ca: Option<PathBuf>,
    /// Whether SSL listeners require client certificates: required, requested or none
    /// (Kafka's ssl.client.auth) [default: required with --tls-client-ca, else none]
    #[arg(long, env = "STRATA_TLS_CLIENT_AUTH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_client_auth: Option<String>,
    /// How a client certificate's subject becomes a user name (Kafka's
    /// ssl.principal.mapping.rules), e.g. 'RULE:^CN=([^,]*),.*$/$1/,DEFAULT'
    /// [default: DEFAULT, the whole distinguished name]
    #[arg(long, env = "STRATA_SSL_PRINCIPAL_MAPPING_RULES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssl_principal_mapping_rules: Option<String>,
    /// SASL mechanisms SASL listeners offer, from SCRAM-SHA-512, SCRAM-SHA-256, PLAIN and
    /// OAUTHBEARER (Kafka's sasl.enabled.mechanisms) [default: SCRAM-SHA-512,SCRAM-SHA-256]
    #[arg(long, env = "STRATA_SASL_MECHANISMS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_mechanisms: Option<String>,
    /// The longest a SASL session lasts before the client must re-authenticate, e.g.
    /// 1h; a connection that has not re-authenticated by then is closed at its next
    /// request (Kafka's connections.max.reauth.ms, KIP-368) [default: none; an
    /// OAUTHBEARER token's expiry still ends its session]
    #[arg(long, env = "STRATA_CONNECTIONS_MAX_REAUTH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections_max_reauth: Option<String>,
    /// OAUTHBEARER: a JWKS file (RFC 7517) with the issuer's public keys (RS256/384/512,
    /// ES256/384); tokens must be signed by one of them
    #[arg(long, env = "STRATA_OAUTHBEARER_JWKS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauthbearer_jwks: Option<PathBuf>,
    /// OAUTHBEARER: the issuer's public key as PEM, instead of --oauthbearer-jwks
    #[arg(long, env = "STRATA_OAUTHBEARER_PUBLIC_KEY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauthbearer_public_key: Option<PathBuf>,
    /// OAUTHBEARER: accept unsigned (alg none) tokens, as Kafka's default unsecured
    /// validator: for development and tests only, since anyone can mint one for any user
    #[arg(long, env = "STRATA_OAUTHBEARER_UNSECURED")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauthbearer_unsecured: Option<bool>,
    /// OAUTHBEARER: the `iss` tokens must carry
    #[arg(long, env = "STRATA_OAUTHBEARER_EXPECTED_ISSUER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauthbearer_expected_issuer: Option<String>,
    /// OAUTHBEARER: audiences, comma-separated; a token's `aud` must name one
    #[arg(long, env = "STRATA_OAUTHBEARER_EXPECTED_AUDIENCE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauthbearer_expected_audience: Option<String>,
    /// OAUTHBEARER: the claim naming the principal [default: sub]
    #[arg(long, env = "STRATA_OAUTHBEARER_SUB_CLAIM_NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauthbearer_sub_claim_name: Option<String>,
    /// NAME:PASSWORD of a SCRAM user (SCRAM-SHA-512 and -256) created at start if no
    /// user of that name exists, so a new cluster has a first (super) user
    #[arg(long, env = "STRATA_BOOTSTRAP_USER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_user: Option<String>,
    /// ACL authorization: on or off. With it on, a request no ACL allows is refused
    /// (Kafka's authorizer.class.name) [default: off]
    #[arg(long, env = "STRATA_AUTHORIZER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorizer: Option<String>,
    /// Principals allowed everything, separated by ; or , (Kafka's super.users), e.g.
    /// User:admin;User:broker
    #[arg(long, env = "STRATA_SUPER_USERS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub super_users: Option<String>,
    /// With the authorizer on, allow requests on resources no ACL names (Kafka's
    /// allow.everyone.if.no.acl.found) [default: false]
    #[arg(long, env = "STRATA_ALLOW_EVERYONE_IF_NO_ACL_FOUND")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_everyone_if_no_acl_found: Option<bool>,
    /// CA certificates this broker trusts when it connects to other brokers over TLS
    /// (the inter-broker listener; the gateway's connections), PEM [default:
    /// --tls-client-ca]
    #[arg(long, env = "STRATA_TLS_CA")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// NAME:PASSWORD this broker authenticates as on a SASL inter-broker listener (a
    /// super user, or one with ClusterAction on the cluster)
    #[arg(long, env = "STRATA_INTER_BROKER_USER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inter_broker_user: Option<String>,
    /// The SASL mechanism of --inter-broker-user [default: SCRAM-SHA-512]
    #[arg(long, env = "STRATA_INTER_BROKER_SASL_MECHANISM")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inter_broker_sasl_mechanism: Option<String>,
    /// Mutual TLS on the controller quorum's port: voters and brokers present
    /// --tls-cert, and only certificates --tls-ca signed may vote, register or read the
    /// metadata. Give every node the same value [default: false]
    #[arg(long, env = "STRATA_CONTROLLER_TLS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_tls: Option<bool>,
    /// Serve the HTTP address (REST gateway, /metrics) over TLS with --tls-cert
    /// (reloaded as the Kafka listeners' is); clients are not asked for certificates
    /// [default: false]
    #[arg(long, env = "STRATA_HTTP_TLS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_tls: Option<bool>,
    /// Whether HTTPS clients present a certificate --tls-client-ca signed: required,
    /// requested or none. A verified certificate's subject, mapped by
    /// --ssl-principal-mapping-rules, is the principal of calls that send no
    /// Authorization header [default: none]
    #[arg(long, env = "STRATA_HTTP_CLIENT_AUTH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_client_auth: Option<String>,
}

/// The SASL flags.
struct SaslSettings {
    mechanisms: Option<String>,
    max_reauth: Option<String>,
    jwks: Option<PathBuf>,
    public_key: Option<PathBuf>,
    unsecured: bool,
    issuer: Option<String>,
    audience: Option<String>,
    sub_claim: Option<String>,
}

fn sasl_config(s: SaslSettings) -> anyhow::Result<SaslConfig> {
    let mut config = SaslConfig::default();
    if let Some(v) = &s.mechanisms {
        let mut mechanisms = Vec::new();
        for m in v.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            let m: Mechanism = m
                .parse()
                .map_err(|e| anyhow::anyhow!("--sasl-mechanisms: {e}"))?;
            if !mechanisms.contains(&m) {
                mechanisms.push(m);
            }
        }
        if mechanisms.is_empty() {
            bail!(
                "--sasl-mechanisms is empty: give at least one of SCRAM-SHA-512, SCRAM-SHA-256, PLAIN, OAUTHBEARER"
            );
        }
        config.mechanisms = mechanisms;
    }
    if let Some(v) = &s.max_reauth {
        let d = humantime::parse_duration(v).with_context(|| {
            format!("--connections-max-reauth '{v}': expected a duration such as 1h")
        })?;
        if d < std::time::Duration::from_secs(1) {
            bail!("--connections-max-reauth '{v}' must be at least 1s");
        }
        config.max_reauth = Some(d);
    }
    let validator = ValidatorConfig {
        principal_claim: s.sub_claim.clone().unwrap_or_else(|| "sub".into()),
        expected_issuer: s.issuer.clone(),
        expected_audience: s
            .audience
            .as_deref()
            .map(|a| {
                a.split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        ..ValidatorConfig::default()
    };
    let oauth_on = config.mechanisms.contains(&Mechanism::OAuthBearer);
    let read = |flag: &str, p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("{flag} {}: cannot read", p.display()))
    };
    let chosen = [s.jwks.is_some(), s.public_key.is_some(), s.unsecured]
        .iter()
        .filter(|x| **x)
        .count();
    if chosen > 1 {
        bail!(
            "give one of --oauthbearer-jwks, --oauthbearer-public-key and --oauthbearer-unsecured"
        );
    }
    let token_validator = if let Some(p) = &s.jwks {
        Some(
            TokenValidator::from_jwks(&read("--oauthbearer-jwks", p)?, validator)
                .with_context(|| format!("--oauthbearer-jwks {}", p.display()))?,
        )
    } else if let Some(p) = &s.public_key {
        Some(
            TokenValidator::from_pem(&read("--oauthbearer-public-key", p)?, validator)
                .with_context(|| format!("--oauthbearer-public-key {}", p.display()))?,
        )
    } else if s.unsecured {
        Some(TokenValidator::unsecured(validator))
    } else {
        None
    };
    match (oauth_on, token_validator) {
        (true, None) => bail!(
            "--sasl-mechanisms has OAUTHBEARER: also give --oauthbearer-jwks FILE or --oauthbearer-public-key FILE (or --oauthbearer-unsecured true for development)"
        ),
        (false, Some(_)) => {
            bail!("OAUTHBEARER settings are given but --sasl-mechanisms does not list OAUTHBEARER")
        }
        (_, v) => config.oauth = v.map(std::sync::Arc::new),
    }
    Ok(config)
}

/// The listeners and security settings, resolved and validated.
#[derive(Debug, Clone)]
pub struct Security {
    pub listeners: Vec<ListenerConfig>,
    pub inter_broker_listener: SecurityProtocol,
    pub tls: Option<TlsFiles>,
    pub principal_mapping: Option<strata_auth::PrincipalMappingRules>,
    pub sasl: strata_broker::security::SaslConfig,
    /// A SCRAM user to create at start if absent: (name, password).
    pub bootstrap_user: Option<(String, String)>,
    /// `None`: authorization off.
    pub authorizer: Option<strata_authz::AuthorizerConfig>,
    /// How this broker's own connections to the inter-broker listener authenticate.
    pub inter_broker_client: strata_client::ClientSecurity,
    /// The same as librdkafka settings (the gateway's consumers and admin client).
    pub inter_broker_properties: Vec<(String, String)>,
    /// Mutual TLS on the controller's RPC port (and this node's calls to it).
    pub controller_tls: Option<strata_controller::RpcTls>,
    /// TLS on the HTTP address.
    pub http_tls: bool,
    /// Client certificates on the HTTP address (with `http_tls`).
    pub http_client_auth: ClientAuth,
}

impl Security {
    /// `kafka_addr` and `advertised_kafka_addr` are the older flags: a PLAINTEXT
    /// listener, alone or next to --listeners' others.
    pub fn resolve(
        args: SecurityArgs,
        kafka_addr: Option<SocketAddr>,
        advertised_kafka_addr: Option<(String, u16)>,
    ) -> anyhow::Result<Security> {
        let listeners = args.listeners;
        let advertised = args.advertised_listeners;
        let mut listed = match &listeners {
            Some(v) => parse_listener_list("--listeners", v).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        };
        let mut advertised = match &advertised {
            Some(v) => {
                parse_listener_list("--advertised-listeners", v).map_err(anyhow::Error::msg)?
            }
            None => Vec::new(),
        };
        let has_plaintext = listed
            .iter()
            .any(|l| l.protocol == SecurityProtocol::Plaintext);
        if let Some(addr) = kafka_addr {
            if has_plaintext {
                bail!(
                    "--kafka-addr {addr} and --listeners both give a PLAINTEXT listener: give it once (in --listeners)"
                );
            }
            listed.insert(
                0,
                strata_broker::listener::ListenerAddr {
                    protocol: SecurityProtocol::Plaintext,
                    host: addr.ip().to_string(),
                    port: addr.port(),
                },
            );
        } else if listed.is_empty() {
            listed.push(strata_broker::listener::ListenerAddr {
                protocol: SecurityProtocol::Plaintext,
                host: "127.0.0.1".into(),
                port: 9092,
            });
        }
        if let Some((host, port)) = advertised_kafka_addr {
            if advertised
                .iter()
                .any(|a| a.protocol == SecurityProtocol::Plaintext)
            {
                bail!(
                    "--advertised-kafka-addr and --advertised-listeners both advertise PLAINTEXT: give it once (in --advertised-listeners)"
                );
            }
            advertised.push(strata_broker::listener::ListenerAddr {
                protocol: SecurityProtocol::Plaintext,
                host,
                port,
            });
        }
        let listeners = resolve_listeners(&listed, &advertised).map_err(|e| {
            // The older flags' own wording, for a setup that only uses them.
            if listeners.is_none() && e.contains("binds every interface") {
                anyhow::anyhow!(
                    "--kafka-addr {} binds every interface: also give --advertised-kafka-addr HOST:PORT, the address clients should connect to",
                    listed[0].host.clone() + ":" + &listed[0].port.to_string()
                )
            } else {
                anyhow::Error::msg(e)
            }
        })?;
        let inter_broker_listener = match args.inter_broker_listener_name {
            Some(v) => {
                let p: SecurityProtocol = v
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--inter-broker-listener-name: {e}"))?;
                if !listeners.iter().any(|l| l.protocol == p) {
                    bail!("--inter-broker-listener-name {p} is not among --listeners");
                }
                p
            }
            None => listeners
                .iter()
                .map(|l| l.protocol)
                .find(|p| *p == SecurityProtocol::Plaintext)
                .unwrap_or(listeners[0].protocol),
        };

        let cert = args.tls_cert;
        let key = args.tls_key;
        let client_ca = args.tls_client_ca;
        let client_auth = match args.tls_client_auth {
            Some(v) => v
                .parse::<ClientAuth>()
                .map_err(|e| anyhow::anyhow!("--tls-client-auth {e}"))?,
            None if client_ca.is_some() => ClientAuth::Required,
            None => ClientAuth::None,
        };
        let http_tls = args.http_tls.unwrap_or(false);
        let http_client_auth = match args.http_client_auth {
            Some(v) => v
                .parse::<ClientAuth>()
                .map_err(|e| anyhow::anyhow!("--http-client-auth {e}"))?,
            None => ClientAuth::None,
        };
        if http_client_auth != ClientAuth::None {
            if !http_tls {
                bail!("--http-client-auth {http_client_auth} needs --http-tls true");
            }
            if client_ca.is_none() {
                bail!(
                    "--http-client-auth {http_client_auth} needs --tls-client-ca FILE, the CA that signs client certificates"
                );
            }
        }
        let controller_wants_tls = args.controller_tls.unwrap_or(false);
        let needs_tls = listeners.iter().any(|l| l.protocol.uses_tls()) || http_tls;
        let tls = match (cert, key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                client_ca,
                client_auth,
            }),
            (None, None) if needs_tls => {
                bail!(
                    "an SSL or SASL_SSL listener (or --http-tls) needs --tls-cert FILE and --tls-key FILE (PEM)"
                )
            }
            (None, None) => {
                if client_ca.is_some() {
                    bail!(
                        "--tls-client-ca is given but no listener uses TLS: add an SSL listener to --listeners"
                    );
                }
                None
            }
            (Some(_), None) => bail!("--tls-cert is given without --tls-key"),
            (None, Some(_)) => bail!("--tls-key is given without --tls-cert"),
        };
        if tls.is_some() && !needs_tls && !controller_wants_tls {
            bail!(
                "--tls-cert is given but nothing uses TLS: add SSL://HOST:PORT or SASL_SSL://HOST:PORT to --listeners, or --http-tls true, or --controller-tls true"
            );
        }
        if let Some(t) = &tls
            && t.client_auth != ClientAuth::None
            && t.client_ca.is_none()
        {
            bail!(
                "--tls-client-auth {} needs --tls-client-ca FILE",
                t.client_auth
            );
        }
        let principal_mapping = match args.ssl_principal_mapping_rules {
            Some(v) => Some(
                strata_auth::PrincipalMappingRules::parse(&v)
                    .with_context(|| format!("--ssl-principal-mapping-rules '{v}'"))?,
            ),
            None => None,
        };
        let sasl = sasl_config(SaslSettings {
            mechanisms: args.sasl_mechanisms,
            max_reauth: args.connections_max_reauth,
            jwks: args.oauthbearer_jwks,
            public_key: args.oauthbearer_public_key,
            unsecured: args.oauthbearer_unsecured.unwrap_or(false),
            issuer: args.oauthbearer_expected_issuer,
            audience: args.oauthbearer_expected_audience,
            sub_claim: args.oauthbearer_sub_claim_name,
        })?;
        if !listeners.iter().any(|l| l.protocol.uses_sasl())
            && (sasl.oauth.is_some() || sasl.mechanisms != SaslConfig::default().mechanisms)
        {
            bail!(
                "SASL settings are given but no listener uses SASL: add SASL_PLAINTEXT://HOST:PORT or SASL_SSL://HOST:PORT to --listeners"
            );
        }
        let bootstrap_user = match args.bootstrap_user {
            Some(v) => {
                let (name, password) = v
                    .split_once(':')
                    .with_context(|| "--bootstrap-user must be NAME:PASSWORD".to_string())?;
                if name.is_empty() || password.is_empty() {
                    bail!("--bootstrap-user must be NAME:PASSWORD with neither empty");
                }
                Some((name.to_string(), password.to_string()))
            }
            None => None,
        };
        let super_users = args.super_users;
        let allow_everyone = args.allow_everyone_if_no_acl_found;
        let authorizer = match args.authorizer.as_deref() {
            None | Some("off") => {
                if super_users.is_some() || allow_everyone.is_some() {
                    bail!(
                        "--super-users and --allow-everyone-if-no-acl-found need --authorizer on"
                    );
                }
                None
            }
            Some("on") => {
                let text = super_users.unwrap_or_default().replace(',', ";");
                let super_users = strata_authz::AuthorizerConfig::parse_super_users(&text)
                    .map_err(|e| anyhow::anyhow!("--super-users '{text}': {e}"))?;
                Some(strata_authz::AuthorizerConfig {
                    super_users,
                    allow_everyone_if_no_acl_found: allow_everyone.unwrap_or(false),
                })
            }
            Some(other) => bail!("--authorizer '{other}': use on or off"),
        };
        let tls_ca = args.tls_ca;
        let controller_tls = match args.controller_tls {
            Some(true) => Some(controller_tls(tls.as_ref(), tls_ca.clone())?),
            _ => None,
        };
        let (inter_broker_client, inter_broker_properties) = inter_broker_client(
            inter_broker_listener,
            tls.as_ref(),
            tls_ca,
            args.inter_broker_user,
            args.inter_broker_sasl_mechanism,
        )?;
        Ok(Security {
            listeners,
            inter_broker_listener,
            tls,
            principal_mapping,
            sasl,
            bootstrap_user,
            authorizer,
            inter_broker_client,
            inter_broker_properties,
            controller_tls,
            http_tls,
            http_client_auth,
        })
    }
}

/// This node's certificate chain and key.
fn identity(
    files: &TlsFiles,
) -> anyhow::Result<(
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
)> {
    Ok((
        strata_broker::tls::read_certs("--tls-cert", &files.cert)?,
        strata_broker::tls::read_key("--tls-key", &files.key)?,
    ))
}

/// The controller port's mutual TLS: this node's certificate both ways, peers'
/// certificates verified against --tls-ca (or --tls-client-ca).
fn controller_tls(
    tls: Option<&TlsFiles>,
    ca: Option<PathBuf>,
) -> anyhow::Result<strata_controller::RpcTls> {
    let files =
        tls.context("--controller-tls needs --tls-cert and --tls-key (this node's certificate)")?;
    let ca = ca.or_else(|| files.client_ca.clone()).context(
        "--controller-tls needs --tls-ca FILE, the CA that signs every node's certificate",
    )?;
    let roots = std::sync::Arc::new(strata_broker::tls::read_roots("--tls-ca", &ca)?);
    let provider = strata_broker::tls::provider();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots.clone(),
        provider.clone(),
    )
    .build()
    .with_context(|| format!("--tls-ca {}", ca.display()))?;
    let (chain, key) = identity(files)?;
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .context("--tls-cert/--tls-key for the controller port")?;
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots.as_ref().clone())
        .with_client_auth_cert(chain, key)
        .context("--tls-cert/--tls-key as the controller client certificate")?;
    Ok(strata_controller::RpcTls {
        server: std::sync::Arc::new(server),
        client: std::sync::Arc::new(client),
    })
}

/// The client side of the inter-broker listener: TLS trusting --tls-ca (with this
/// broker's certificate on an SSL listener, so the peer authenticates it), SASL as
/// --inter-broker-user. Also as librdkafka settings, for the gateway.
fn inter_broker_client(
    protocol: SecurityProtocol,
    tls: Option<&TlsFiles>,
    ca: Option<PathBuf>,
    user: Option<String>,
    mechanism: Option<String>,
) -> anyhow::Result<(strata_client::ClientSecurity, Vec<(String, String)>)> {
    let mut out = strata_client::ClientSecurity::default();
    let mut props = vec![(
        "security.protocol".to_string(),
        protocol.name().to_ascii_lowercase(),
    )];
    if protocol.uses_tls() {
        let files =
            tls.context("the inter-broker listener uses TLS: give --tls-cert and --tls-key")?;
        let ca = ca.or_else(|| files.client_ca.clone()).context(
            "the inter-broker listener uses TLS: give --tls-ca FILE, the CA that signs the brokers' certificates",
        )?;
        let provider = strata_broker::tls::provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(strata_broker::tls::read_roots("--tls-ca", &ca)?);
        props.push(("ssl.ca.location".into(), ca.display().to_string()));
        let config = if protocol == SecurityProtocol::Ssl {
            // Mutual TLS: this broker's own certificate is its identity.
            let (chain, key) = identity(files)?;
            props.push((
                "ssl.certificate.location".into(),
                files.cert.display().to_string(),
            ));
            props.push(("ssl.key.location".into(), files.key.display().to_string()));
            builder
                .with_client_auth_cert(chain, key)
                .context("--tls-cert/--tls-key as this broker's client certificate")?
        } else {
            builder.with_no_client_auth()
        };
        out.tls = Some(std::sync::Arc::new(config));
    }
    if protocol.uses_sasl() {
        let user = user.context(
            "the inter-broker listener uses SASL: give --inter-broker-user NAME:PASSWORD (a super user)",
        )?;
        let (name, password) = user
            .split_once(':')
            .context("--inter-broker-user must be NAME:PASSWORD")?;
        let m: Mechanism = mechanism
            .as_deref()
            .unwrap_or("SCRAM-SHA-512")
            .parse()
            .map_err(|e| anyhow::anyhow!("--inter-broker-sasl-mechanism: {e}"))?;
        if m == Mechanism::OAuthBearer {
            bail!("--inter-broker-sasl-mechanism: use SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN");
        }
        props.push(("sasl.mechanisms".into(), m.name().into()));
        props.push(("sasl.username".into(), name.into()));
        props.push(("sasl.password".into(), password.into()));
        out.sasl = Some(strata_client::SaslLogin {
            mechanism: m,
            username: name.into(),
            password: password.into(),
        });
    } else if user.is_some() {
        bail!(
            "--inter-broker-user is given but the inter-broker listener {protocol} does not use SASL"
        );
    }
    Ok((out, props))
}
