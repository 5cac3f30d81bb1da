//! `strata acl`: add, list and remove ACLs with Kafka's CreateAcls, DescribeAcls and
//! DeleteAcls, as `kafka-acls.sh` does; it works against any Kafka broker.

use anyhow::{Context, bail};
use clap::{ArgGroup, Args, Subcommand};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_authz::{Operation, PatternType, Permission, ResourceType};
use strata_proto::ErrorCode;

use super::client::ClientArgs;
use super::wire::Conn;

#[derive(Args, Debug)]
pub struct AclArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: AclCommand,
}

/// The resource an ACL is on.
#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("resource").args(["topic", "group", "cluster", "transactional_id"])))]
pub struct ResourceArgs {
    /// A topic (or with --prefixed, every topic whose name starts with this)
    #[arg(long)]
    pub topic: Option<String>,
    /// A consumer group
    #[arg(long)]
    pub group: Option<String>,
    /// The cluster
    #[arg(long)]
    pub cluster: bool,
    /// A transactional.id
    #[arg(long)]
    pub transactional_id: Option<String>,
    /// The name is a prefix (KIP-290), not a literal name
    #[arg(long)]
    pub prefixed: bool,
}

impl ResourceArgs {
    fn resource(&self) -> Option<(ResourceType, String)> {
        if let Some(t) = &self.topic {
            Some((ResourceType::Topic, t.clone()))
        } else if let Some(g) = &self.group {
            Some((ResourceType::Group, g.clone()))
        } else if let Some(t) = &self.transactional_id {
            Some((ResourceType::TransactionalId, t.clone()))
        } else if self.cluster {
            Some((
                ResourceType::Cluster,
                strata_authz::CLUSTER_NAME.to_string(),
            ))
        } else {
            None
        }
    }

    fn pattern(&self) -> PatternType {
        if self.prefixed {
            PatternType::Prefixed
        } else {
            PatternType::Literal
        }
    }
}

/// One ACL: who, allowed or denied, what, on what.
#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("permission").args(["allow", "deny"]).required(true)))]
pub struct AclSpec {
    /// Allow this principal (User:NAME, or User:* for everyone)
    #[arg(long, value_name = "PRINCIPAL")]
    pub allow: Option<String>,
    /// Deny this principal (a Deny wins over every Allow)
    #[arg(long, value_name = "PRINCIPAL")]
    pub deny: Option<String>,
    /// Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs,
    /// IdempotentWrite, ClusterAction or All
    #[arg(long)]
    pub operation: String,
    /// The client address it applies to
    #[arg(long, default_value = "*")]
    pub host: String,
    #[command(flatten)]
    pub resource: ResourceArgs,
}

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Add an ACL.
    Add(AclSpec),
    /// List ACLs (all, or those on one resource or of one principal).
    List {
        #[command(flatten)]
        resource: ResourceArgs,
        /// Only this principal's
        #[arg(long)]
        principal: Option<String>,
    },
    /// Remove an ACL (the same flags as add).
    Remove(AclSpec),
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

struct Parsed {
    principal: String,
    permission: Permission,
    operation: Operation,
    resource_type: ResourceType,
    name: String,
    pattern: PatternType,
    host: String,
}

fn parse(spec: &AclSpec) -> anyhow::Result<Parsed> {
    let (principal, permission) = match (&spec.allow, &spec.deny) {
        (Some(p), None) => (p.clone(), Permission::Allow),
        (None, Some(p)) => (p.clone(), Permission::Deny),
        _ => bail!("give one of --allow PRINCIPAL or --deny PRINCIPAL"),
    };
    strata_authz::Principal::new(principal.clone())
        .map_err(|e| anyhow::anyhow!("{principal}: {e} (use User:NAME)"))?;
    let operation: Operation = spec
        .operation
        .parse()
        .map_err(|e| anyhow::anyhow!("--operation {}: {e}", spec.operation))?;
    let (resource_type, name) = spec
        .resource
        .resource()
        .context("name the resource: --topic T, --group G, --cluster or --transactional-id ID")?;
    if spec.resource.prefixed && resource_type == ResourceType::Cluster {
        bail!("--prefixed does not apply to --cluster");
    }
    Ok(Parsed {
        principal,
        permission,
        operation,
        resource_type,
        name,
        pattern: spec.resource.pattern(),
        host: spec.host.clone(),
    })
}

pub fn run(args: AclArgs) -> anyhow::Result<()> {
    let c = &args.client;
    let mut conn = connect(c)?;
    match args.command {
        AclCommand::Add(spec) => {
            let p = parse(&spec)?;
            let v = conn
                .version(ApiKey::CreateAcls, 1..=3)
                .context("the broker does not serve CreateAcls v1+")?;
            let mut a = AclCreation::default();
            a.resource_type = p.resource_type.code();
            a.resource_name = StrBytes::from_string(p.name.clone());
            a.resource_pattern_type = p.pattern.code();
            a.principal = StrBytes::from_string(p.principal.clone());
            a.host = StrBytes::from_string(p.host.clone());
            a.operation = p.operation.code();
            a.permission_type = p.permission.code();
            let mut req = CreateAclsRequest::default();
            req.creations = vec![a];
            let r: CreateAclsResponse = conn.call(ApiKey::CreateAcls, v, &req)?;
            for res in r.results {
                if res.error_code != 0 {
                    bail!("{}", error(res.error_code, res.error_message));
                }
            }
            outln!(
                "added: {} {} {} on {} {}{} from {}",
                p.permission,
                p.principal,
                p.operation,
                p.resource_type,
                p.name,
                if p.pattern == PatternType::Prefixed {
                    " (prefixed)"
                } else {
                    ""
                },
                p.host
            );
        }
        AclCommand::Remove(spec) => {
            let p = parse(&spec)?;
            let v = conn
                .version(ApiKey::DeleteAcls, 1..=3)
                .context("the broker does not serve DeleteAcls v1+")?;
            let mut f = DeleteAclsFilter::default();
            f.resource_type_filter = p.resource_type.code();
            f.resource_name_filter = Some(StrBytes::from_string(p.name.clone()));
            f.pattern_type_filter = p.pattern.code();
            f.principal_filter = Some(StrBytes::from_string(p.principal.clone()));
            f.host_filter = Some(StrBytes::from_string(p.host.clone()));
            f.operation = p.operation.code();
            f.permission_type = p.permission.code();
            let mut req = DeleteAclsRequest::default();
            req.filters = vec![f];
            let r: DeleteAclsResponse = conn.call(ApiKey::DeleteAcls, v, &req)?;
            let mut removed = 0;
            for res in r.filter_results {
                if res.error_code != 0 {
                    bail!("{}", error(res.error_code, res.error_message));
                }
                removed += res.matching_acls.len();
            }
            if removed == 0 {
                bail!("no such ACL");
            }
            outln!("removed {removed} ACL(s)");
        }
        AclCommand::List {
            resource,
            principal,
        } => {
            let v = conn
                .version(ApiKey::DescribeAcls, 1..=3)
                .context("the broker does not serve DescribeAcls v1+")?;
            let mut req = DescribeAclsRequest::default();
            // Null is "any"; the defaults are empty strings, which match nothing.
            req.resource_name_filter = None;
            req.host_filter = None;
            match resource.resource() {
                Some((t, n)) => {
                    req.resource_type_filter = t.code();
                    req.resource_name_filter = Some(StrBytes::from_string(n));
                    req.pattern_type_filter = if resource.prefixed {
                        PatternType::Prefixed.code()
                    } else {
                        // Every ACL that applies to the name: literal, `*` and prefixes.
                        PatternType::Match.code()
                    };
                }
                None => {
                    req.resource_type_filter = ResourceType::Any.code();
                    req.pattern_type_filter = PatternType::Any.code();
                }
            }
            req.principal_filter = principal.map(StrBytes::from_string);
            req.operation = Operation::Any.code();
            req.permission_type = Permission::Any.code();
            let r: DescribeAclsResponse = conn.call(ApiKey::DescribeAcls, v, &req)?;
            if r.error_code != 0 {
                bail!("{}", error(r.error_code, r.error_message));
            }
            if r.resources.is_empty() {
                outln!("no ACLs");
            }
            for res in r.resources {
                let rt = ResourceType::from_code(res.resource_type)
                    .map_or(res.resource_type.to_string(), |t| t.to_string());
                let pt = PatternType::from_code(res.pattern_type)
                    .map_or(res.pattern_type.to_string(), |t| t.to_string());
                for a in res.acls {
                    let op = Operation::from_code(a.operation)
                        .map_or(a.operation.to_string(), |o| o.to_string());
                    let perm = Permission::from_code(a.permission_type)
                        .map_or(a.permission_type.to_string(), |p| p.to_string());
                    outln!(
                        "{rt}:{pt}:{}\t{perm}\t{}\t{op}\t{}",
                        res.resource_name,
                        a.principal,
                        a.host
                    );
                }
            }
        }
    }
    Ok(())
}
