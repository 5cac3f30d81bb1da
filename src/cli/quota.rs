//! `strata quota`: client quotas with Kafka's DescribeClientQuotas and AlterClientQuotas
//! (KIP-546), as `kafka-configs.sh --entity-type users|clients` does.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_proto::ErrorCode;

use super::client::{ClientArgs, parse_key_value};
use super::wire::Conn;

#[derive(Args, Debug)]
pub struct QuotaArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: QuotaCommand,
}

/// Which entity: a user and/or a client id, each named or the default.
#[derive(Args, Debug, Clone)]
pub struct EntityArgs {
    /// A user (the principal's name, e.g. alice for User:alice)
    #[arg(long, conflicts_with = "default_user")]
    pub user: Option<String>,
    /// Every user without a quota of their own (each user its own budget)
    #[arg(long)]
    pub default_user: bool,
    /// A client id
    #[arg(long, conflicts_with = "default_client_id")]
    pub client_id: Option<String>,
    /// Every client id without a quota of its own
    #[arg(long)]
    pub default_client_id: bool,
}

impl EntityArgs {
    fn components(&self) -> Vec<(&'static str, Option<String>, bool)> {
        let mut out = Vec::new();
        if self.user.is_some() || self.default_user {
            out.push(("user", self.user.clone(), self.default_user));
        }
        if self.client_id.is_some() || self.default_client_id {
            out.push(("client-id", self.client_id.clone(), self.default_client_id));
        }
        out
    }
}

#[derive(Subcommand, Debug)]
pub enum QuotaCommand {
    /// Set or remove quotas of one entity.
    Set {
        #[command(flatten)]
        entity: EntityArgs,
        /// producer_byte_rate=BYTES, consumer_byte_rate=BYTES or request_percentage=PCT
        /// (repeatable)
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        set: Vec<(String, String)>,
        /// A quota key to remove (repeatable)
        #[arg(long)]
        remove: Vec<String>,
    },
    /// The quotas of the entities matching (all, without flags).
    Describe {
        #[command(flatten)]
        entity: EntityArgs,
    },
}

fn error(code: i16, message: Option<StrBytes>) -> String {
    let name = ErrorCode::from_code(code).map_or(format!("error {code}"), |e| format!("{e:?}"));
    match message {
        Some(m) => format!("{name}: {m}"),
        None => name,
    }
}

pub fn run(args: QuotaArgs) -> anyhow::Result<()> {
    let c = &args.client;
    let addr = c.bootstrap.split(',').next().unwrap_or(&c.bootstrap);
    let mut conn = Conn::open(addr, c)?;
    match args.command {
        QuotaCommand::Set {
            entity,
            set,
            remove,
        } => {
            let components = entity.components();
            if components.is_empty() {
                bail!(
                    "name the entity: --user U or --default-user, and/or --client-id C or --default-client-id"
                );
            }
            if set.is_empty() && remove.is_empty() {
                bail!("nothing to do: give --set KEY=VALUE or --remove KEY");
            }
            let mut e = EntryData::default();
            e.entity = components
                .iter()
                .map(|(t, name, _)| {
                    let mut d = EntityData::default();
                    d.entity_type = StrBytes::from_static_str(t);
                    d.entity_name = name.clone().map(StrBytes::from_string);
                    d
                })
                .collect();
            for (k, v) in &set {
                let value: f64 = v
                    .parse()
                    .with_context(|| format!("--set {k}={v}: '{v}' is not a number"))?;
                let mut op = OpData::default();
                op.key = StrBytes::from_string(k.clone());
                op.value = value;
                e.ops.push(op);
            }
            for k in &remove {
                let mut op = OpData::default();
                op.key = StrBytes::from_string(k.clone());
                op.remove = true;
                e.ops.push(op);
            }
            let v = conn
                .version(ApiKey::AlterClientQuotas, 0..=1)
                .context("the broker does not serve AlterClientQuotas (KIP-546)")?;
            let mut req = AlterClientQuotasRequest::default();
            req.entries = vec![e];
            let r: AlterClientQuotasResponse = conn.call(ApiKey::AlterClientQuotas, v, &req)?;
            for e in r.entries {
                if e.error_code != 0 {
                    bail!("{}", error(e.error_code, e.error_message));
                }
            }
            outln!("quotas set");
        }
        QuotaCommand::Describe { entity } => {
            let v = conn
                .version(ApiKey::DescribeClientQuotas, 0..=1)
                .context("the broker does not serve DescribeClientQuotas (KIP-546)")?;
            let mut req = DescribeClientQuotasRequest::default();
            req.components = entity
                .components()
                .into_iter()
                .map(|(t, name, default)| {
                    let mut d = ComponentData::default();
                    d.entity_type = StrBytes::from_static_str(t);
                    // 0 exact, 1 default.
                    d.match_type = if default { 1 } else { 0 };
                    d._match = name.map(StrBytes::from_string);
                    d
                })
                .collect();
            let r: DescribeClientQuotasResponse =
                conn.call(ApiKey::DescribeClientQuotas, v, &req)?;
            if r.error_code != 0 {
                bail!("{}", error(r.error_code, r.error_message));
            }
            let entries = r.entries.unwrap_or_default();
            if entries.is_empty() {
                outln!("no quotas");
            }
            for e in entries {
                let who: Vec<String> = e
                    .entity
                    .iter()
                    .map(|d| {
                        format!(
                            "{}={}",
                            d.entity_type,
                            d.entity_name.as_deref().unwrap_or("<default>")
                        )
                    })
                    .collect();
                let values: Vec<String> = e
                    .values
                    .iter()
                    .map(|v| format!("{}={}", v.key, v.value))
                    .collect();
                outln!("{}\t{}", who.join(","), values.join(","));
            }
        }
    }
    Ok(())
}
