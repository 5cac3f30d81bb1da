//! `strata user`: SCRAM users (KIP-554's DescribeUserScramCredentials and
//! AlterUserScramCredentials), as `kafka-configs.sh --alter --add-config
//! 'SCRAM-SHA-512=[password=...]' --entity-type users` does. The password is salted and
//! iterated here; only the salted password goes to the broker.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_auth::Mechanism;
use strata_proto::ErrorCode;

use super::client::ClientArgs;
use super::wire::Conn;

#[derive(Args, Debug)]
pub struct UserArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: UserCommand,
}

#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Create a user, or set a new password (one SCRAM mechanism at a time).
    Create {
        name: String,
        /// SCRAM-SHA-512 or SCRAM-SHA-256
        #[arg(long, default_value = "SCRAM-SHA-512")]
        mechanism: String,
        #[arg(long, env = "STRATA_USER_PASSWORD")]
        password: String,
        /// PBKDF2 iterations, 4096 to 16384
        #[arg(long, default_value_t = 4096)]
        iterations: u32,
    },
    /// Every user and its SCRAM mechanisms (never a password or key).
    List,
    /// Delete a user's credentials (every mechanism, or only --mechanism).
    Delete {
        name: String,
        #[arg(long)]
        mechanism: Option<String>,
    },
}

fn code_of(m: Mechanism) -> i8 {
    match m {
        Mechanism::ScramSha256 => 1,
        _ => 2,
    }
}

fn scram(name: &str) -> anyhow::Result<Mechanism> {
    let m: Mechanism = name
        .parse()
        .map_err(|e| anyhow::anyhow!("--mechanism: {e}"))?;
    if !m.is_scram() {
        bail!(
            "--mechanism {name}: users are stored for SCRAM-SHA-512 or SCRAM-SHA-256 (PLAIN checks passwords against them)"
        );
    }
    Ok(m)
}

fn error(code: i16, message: Option<StrBytes>) -> String {
    let name = ErrorCode::from_code(code).map_or(format!("error {code}"), |e| format!("{e:?}"));
    match message {
        Some(m) => format!("{name}: {m}"),
        None => name,
    }
}

fn connect(c: &ClientArgs) -> anyhow::Result<Conn> {
    let addr = c.bootstrap.split(',').next().unwrap_or(&c.bootstrap);
    Conn::open(addr, c)
}

pub fn run(args: UserArgs) -> anyhow::Result<()> {
    let c = &args.client;
    match args.command {
        UserCommand::Create {
            name,
            mechanism,
            password,
            iterations,
        } => {
            let m = scram(&mechanism)?;
            if password.is_empty() {
                bail!("--password is empty");
            }
            let rng = aws_lc_rs::rand::SystemRandom::new();
            let salted = salted_password(m, &password, iterations, &rng)?;
            let mut up = ScramCredentialUpsertion::default();
            up.name = StrBytes::from_string(name.clone());
            up.mechanism = code_of(m);
            up.iterations = iterations as i32;
            up.salt = salted.0.into();
            up.salted_password = salted.1.into();
            let mut req = AlterUserScramCredentialsRequest::default();
            req.upsertions = vec![up];
            alter(c, req)?;
            outln!("user {name}: {} credential set", m.name());
        }
        UserCommand::Delete { name, mechanism } => {
            let mechanisms = match mechanism {
                Some(m) => vec![scram(&m)?],
                None => {
                    // The mechanisms the user has.
                    let found = describe(c, Some(&name))?;
                    let Some((_, ms)) = found.into_iter().next() else {
                        bail!("user {name} does not exist");
                    };
                    ms.into_iter().map(|(m, _)| m).collect()
                }
            };
            let mut req = AlterUserScramCredentialsRequest::default();
            req.deletions = mechanisms
                .iter()
                .map(|m| {
                    let mut d = ScramCredentialDeletion::default();
                    d.name = StrBytes::from_string(name.clone());
                    d.mechanism = code_of(*m);
                    d
                })
                .collect();
            alter(c, req)?;
            outln!("user {name}: deleted");
        }
        UserCommand::List => {
            let users = describe(c, None)?;
            if users.is_empty() {
                outln!("no users");
            }
            for (name, mechanisms) in users {
                let m: Vec<String> = mechanisms
                    .iter()
                    .map(|(m, i)| format!("{}(iterations={i})", m.name()))
                    .collect();
                outln!("{name}\t{}", m.join(", "));
            }
        }
    }
    Ok(())
}

/// A fresh salt and Hi(password, salt, iterations) (RFC 5802), as Kafka's tools send.
fn salted_password(
    m: Mechanism,
    password: &str,
    iterations: u32,
    rng: &aws_lc_rs::rand::SystemRandom,
) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    use aws_lc_rs::rand::SecureRandom;
    if !(4096..=16384).contains(&iterations) {
        bail!("--iterations {iterations} must be between 4096 and 16384");
    }
    let mut salt = vec![0u8; 32];
    rng.fill(&mut salt)
        .map_err(|_| anyhow::anyhow!("no randomness for the salt"))?;
    let (alg, len) = match m {
        Mechanism::ScramSha256 => (aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA256, 32),
        _ => (aws_lc_rs::pbkdf2::PBKDF2_HMAC_SHA512, 64),
    };
    let mut out = vec![0u8; len];
    let n = std::num::NonZeroU32::new(iterations).context("iterations must not be zero")?;
    aws_lc_rs::pbkdf2::derive(alg, n, &salt, password.as_bytes(), &mut out);
    Ok((salt, out))
}

fn alter(c: &ClientArgs, req: AlterUserScramCredentialsRequest) -> anyhow::Result<()> {
    let mut conn = connect(c)?;
    let v = conn
        .version(ApiKey::AlterUserScramCredentials, 0..=0)
        .context("the broker does not serve AlterUserScramCredentials (KIP-554)")?;
    let r: AlterUserScramCredentialsResponse =
        conn.call(ApiKey::AlterUserScramCredentials, v, &req)?;
    for res in r.results {
        if res.error_code != 0 {
            bail!(
                "user {}: {}",
                res.user,
                error(res.error_code, res.error_message)
            );
        }
    }
    Ok(())
}

type Users = Vec<(String, Vec<(Mechanism, i32)>)>;

fn describe(c: &ClientArgs, user: Option<&str>) -> anyhow::Result<Users> {
    let mut conn = connect(c)?;
    let v = conn
        .version(ApiKey::DescribeUserScramCredentials, 0..=0)
        .context("the broker does not serve DescribeUserScramCredentials (KIP-554)")?;
    let mut req = DescribeUserScramCredentialsRequest::default();
    req.users = user.map(|u| {
        let mut n = UserName::default();
        n.name = StrBytes::from_string(u.to_string());
        vec![n]
    });
    let r: DescribeUserScramCredentialsResponse =
        conn.call(ApiKey::DescribeUserScramCredentials, v, &req)?;
    if r.error_code != 0 {
        bail!("{}", error(r.error_code, r.error_message));
    }
    let mut out = Vec::new();
    for res in r.results {
        if res.error_code == ErrorCode::ResourceNotFound.code() {
            continue;
        }
        if res.error_code != 0 {
            bail!(
                "user {}: {}",
                res.user,
                error(res.error_code, res.error_message)
            );
        }
        let ms = res
            .credential_infos
            .iter()
            .map(|i| {
                let m = if i.mechanism == 1 {
                    Mechanism::ScramSha256
                } else {
                    Mechanism::ScramSha512
                };
                (m, i.iterations)
            })
            .collect();
        out.push((res.user.to_string(), ms));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
