//! `strata schema`: the schema registry from the command line (Confluent's REST API, so
//! any Confluent-compatible registry): register a schema, read one back, list subjects
//! and versions, check a schema's compatibility, delete, and read or set compatibility.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

#[derive(Args, Debug)]
pub struct SchemaArgs {
    /// The registry's URL (a broker's --schema-registry-addr).
    #[arg(
        long,
        env = "STRATA_SCHEMA_REGISTRY",
        default_value = "http://127.0.0.1:8081",
        global = true
    )]
    pub registry: String,
    /// The broker's --http-auth credentials, when it has them: bearer:TOKEN or
    /// basic:USER:PASSWORD.
    #[arg(long, env = "STRATA_HTTP_AUTH", global = true, hide_env_values = true)]
    pub http_auth: Option<String>,
    #[command(subcommand)]
    pub command: SchemaCommand,
}

/// A schema given on the command line.
#[derive(Args, Debug)]
pub struct SchemaText {
    /// A file holding the schema (.avsc, .proto or .json).
    #[arg(long, conflicts_with = "schema", required_unless_present = "schema")]
    file: Option<std::path::PathBuf>,
    /// The schema itself.
    #[arg(long)]
    schema: Option<String>,
    /// AVRO, PROTOBUF or JSON (default: from the file's extension, else AVRO).
    #[arg(long = "type", value_parser = ["AVRO", "PROTOBUF", "JSON", "avro", "protobuf", "json"])]
    schema_type: Option<String>,
    /// A schema this one references, as NAME=SUBJECT:VERSION (repeat for each).
    #[arg(long = "reference", value_parser = parse_reference)]
    references: Vec<Value>,
}

#[derive(Subcommand, Debug)]
pub enum SchemaCommand {
    /// Register a schema under a subject (a new version, or the id it already has).
    Register {
        /// The subject (TopicNameStrategy: TOPIC-value or TOPIC-key).
        #[arg(long)]
        subject: String,
        #[command(flatten)]
        text: SchemaText,
    },
    /// A subject's version (with its schema), or a schema by id.
    Get {
        #[arg(long, required_unless_present = "id", conflicts_with = "id")]
        subject: Option<String>,
        /// A version number, or latest.
        #[arg(long, default_value = "latest")]
        version: String,
        /// A schema's id.
        #[arg(long)]
        id: Option<u32>,
    },
    /// Subjects, or a subject's versions with --subject.
    List {
        #[arg(long)]
        subject: Option<String>,
        /// Include soft-deleted subjects or versions.
        #[arg(long)]
        deleted: bool,
    },
    /// Whether a schema is compatible with a subject's latest version (or --version),
    /// by the subject's compatibility level; prints the reasons when it is not.
    Check {
        #[arg(long)]
        subject: String,
        /// A version number, latest, or all (every version).
        #[arg(long, default_value = "latest")]
        version: String,
        #[command(flatten)]
        text: SchemaText,
    },
    /// Delete a subject (every version) or one version: soft, or --permanent after a
    /// soft delete.
    Delete {
        #[arg(long)]
        subject: String,
        #[arg(long)]
        version: Option<String>,
        #[arg(long)]
        permanent: bool,
    },
    /// The compatibility level (global, or a subject's with --subject); --set changes it,
    /// --delete removes a subject's own level (or resets the global one).
    Config {
        #[arg(long)]
        subject: Option<String>,
        /// NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL or
        /// FULL_TRANSITIVE.
        #[arg(long, conflicts_with = "delete")]
        set: Option<String>,
        #[arg(long)]
        delete: bool,
    },
}

fn parse_reference(v: &str) -> Result<Value, String> {
    let bad =
        || format!("'{v}': expected NAME=SUBJECT:VERSION (e.g. address.proto=address-value:1)");
    let (name, rest) = v.split_once('=').ok_or_else(bad)?;
    let (subject, version) = rest.rsplit_once(':').ok_or_else(bad)?;
    let version: i32 = version.parse().map_err(|_| bad())?;
    if name.is_empty() || subject.is_empty() {
        return Err(bad());
    }
    Ok(json!({"name": name, "subject": subject, "version": version}))
}

impl SchemaText {
    fn body(&self) -> anyhow::Result<Value> {
        let (text, from_ext) = match (&self.file, &self.schema) {
            (Some(f), _) => {
                let text = std::fs::read_to_string(f)
                    .with_context(|| format!("--file {}: cannot read it", f.display()))?;
                let ext = f.extension().and_then(|e| e.to_str()).unwrap_or_default();
                let ty = match ext {
                    "proto" => Some("PROTOBUF"),
                    "json" => Some("JSON"),
                    "avsc" => Some("AVRO"),
                    _ => None,
                };
                (text, ty)
            }
            (None, Some(s)) => (s.clone(), None),
            (None, None) => bail!("give the schema with --file PATH or --schema TEXT"),
        };
        let ty = self
            .schema_type
            .as_deref()
            .map(str::to_ascii_uppercase)
            .or(from_ext.map(str::to_string))
            .unwrap_or_else(|| "AVRO".into());
        let mut body = json!({"schema": text, "schemaType": ty});
        if !self.references.is_empty() {
            body["references"] = json!(self.references);
        }
        Ok(body)
    }
}

/// The registry, and the credentials to send it.
struct Registry {
    base: String,
    auth: Option<String>,
    client: reqwest::blocking::Client,
}

/// A subject or version as a path segment.
fn seg(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl Registry {
    fn new(args: &SchemaArgs) -> anyhow::Result<Registry> {
        let auth = match &args.http_auth {
            Some(v) => Some(
                v.parse::<strata_gateway::Auth>()
                    .map_err(|e| anyhow::anyhow!("--http-auth: {e}"))?
                    .header_value(),
            ),
            None => None,
        };
        let base = if args.registry.contains("://") {
            args.registry.trim_end_matches('/').to_string()
        } else {
            format!("http://{}", args.registry.trim_end_matches('/'))
        };
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .context("cannot make an HTTP client")?;
        Ok(Registry { base, auth, client })
    }

    fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .client
            .request(method, &url)
            .header("Accept", "application/vnd.schemaregistry.v1+json");
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/vnd.schemaregistry.v1+json")
                .body(b.to_string());
        }
        let resp = req.send().with_context(|| {
            format!("cannot reach the schema registry at {} (a broker's --schema-registry-addr; set --registry)", self.base)
        })?;
        let status = resp.status();
        let text = resp.text().unwrap_or_default();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
        if status.is_success() {
            return Ok(v);
        }
        if status.as_u16() == 401 {
            bail!(
                "{url}: 401: the registry requires credentials; pass the broker's --http-auth value (bearer:TOKEN or basic:USER:PASSWORD)"
            );
        }
        match (v["error_code"].as_i64(), v["message"].as_str()) {
            (Some(code), Some(m)) => bail!("the registry refused ({status}, error {code}): {m}"),
            _ => bail!("{url}: {status}: {}", text.trim()),
        }
    }
}

fn print_version(v: &Value) {
    outln!(
        "subject {}  version {}  id {}  type {}",
        v["subject"].as_str().unwrap_or("-"),
        v["version"],
        v["id"],
        v["schemaType"].as_str().unwrap_or("AVRO")
    );
    if let Some(refs) = v["references"].as_array() {
        for r in refs {
            outln!(
                "reference {} = {}:{}",
                r["name"].as_str().unwrap_or("-"),
                r["subject"].as_str().unwrap_or("-"),
                r["version"]
            );
        }
    }
    outln!("{}", v["schema"].as_str().unwrap_or_default());
}

pub fn run(args: SchemaArgs) -> anyhow::Result<()> {
    use reqwest::Method;
    let r = Registry::new(&args)?;
    match args.command {
        SchemaCommand::Register { subject, text } => {
            let v = r.call(
                Method::POST,
                &format!("/subjects/{}/versions", seg(&subject)),
                Some(&text.body()?),
            )?;
            outln!("id {}", v["id"]);
        }
        SchemaCommand::Get {
            subject,
            version,
            id,
        } => match (subject, id) {
            (_, Some(id)) => {
                let v = r.call(Method::GET, &format!("/schemas/ids/{id}"), None)?;
                let used = r.call(Method::GET, &format!("/schemas/ids/{id}/versions"), None)?;
                for u in used.as_array().into_iter().flatten() {
                    outln!(
                        "subject {}  version {}",
                        u["subject"].as_str().unwrap_or("-"),
                        u["version"]
                    );
                }
                outln!(
                    "id {id}  type {}",
                    v["schemaType"].as_str().unwrap_or("AVRO")
                );
                outln!("{}", v["schema"].as_str().unwrap_or_default());
            }
            (Some(s), None) => {
                let v = r.call(
                    Method::GET,
                    &format!("/subjects/{}/versions/{}", seg(&s), seg(&version)),
                    None,
                )?;
                print_version(&v);
            }
            (None, None) => bail!("give --subject or --id"),
        },
        SchemaCommand::List { subject, deleted } => {
            let path = match &subject {
                Some(s) => format!("/subjects/{}/versions?deleted={deleted}", seg(s)),
                None => format!("/subjects?deleted={deleted}"),
            };
            for x in r
                .call(Method::GET, &path, None)?
                .as_array()
                .into_iter()
                .flatten()
            {
                match x {
                    Value::String(s) => outln!("{s}"),
                    other => outln!("{other}"),
                }
            }
        }
        SchemaCommand::Check {
            subject,
            version,
            text,
        } => {
            let path = if version == "all" {
                format!(
                    "/compatibility/subjects/{}/versions?verbose=true",
                    seg(&subject)
                )
            } else {
                format!(
                    "/compatibility/subjects/{}/versions/{}?verbose=true",
                    seg(&subject),
                    seg(&version)
                )
            };
            let v = r.call(Method::POST, &path, Some(&text.body()?))?;
            if v["is_compatible"].as_bool() == Some(true) {
                outln!("compatible");
            } else {
                for m in v["messages"].as_array().into_iter().flatten() {
                    outln!("{}", m.as_str().unwrap_or_default());
                }
                bail!("not compatible with {subject} version {version}");
            }
        }
        SchemaCommand::Delete {
            subject,
            version,
            permanent,
        } => {
            let path = match &version {
                Some(v) => format!(
                    "/subjects/{}/versions/{}?permanent={permanent}",
                    seg(&subject),
                    seg(v)
                ),
                None => format!("/subjects/{}?permanent={permanent}", seg(&subject)),
            };
            let v = r.call(Method::DELETE, &path, None)?;
            let how = if permanent {
                "permanently deleted"
            } else {
                "deleted"
            };
            match version {
                Some(_) => outln!("{how} {subject} version {v}"),
                None => outln!("{how} {subject} versions {v}"),
            }
        }
        SchemaCommand::Config {
            subject,
            set,
            delete,
        } => {
            let path = match &subject {
                Some(s) => format!("/config/{}", seg(s)),
                None => "/config".to_string(),
            };
            if let Some(level) = set {
                let v = r.call(
                    Method::PUT,
                    &path,
                    Some(&json!({"compatibility": level.to_ascii_uppercase()})),
                )?;
                outln!("{}", v["compatibility"].as_str().unwrap_or_default());
            } else if delete {
                let v = r.call(Method::DELETE, &path, None)?;
                outln!(
                    "removed (was {})",
                    v["compatibilityLevel"].as_str().unwrap_or_default()
                );
            } else {
                let q = if subject.is_some() {
                    "?defaultToGlobal=true"
                } else {
                    ""
                };
                let v = r.call(Method::GET, &format!("{path}{q}"), None)?;
                outln!("{}", v["compatibilityLevel"].as_str().unwrap_or_default());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_or_name_the_expected_form() {
        assert_eq!(
            parse_reference("address.proto=address-value:2").unwrap(),
            json!({"name": "address.proto", "subject": "address-value", "version": 2})
        );
        for bad in ["x", "x=y", "=s:1", "n=s:v", "n=:1"] {
            assert!(
                parse_reference(bad)
                    .unwrap_err()
                    .contains("NAME=SUBJECT:VERSION"),
                "{bad}"
            );
        }
    }

    #[test]
    fn subjects_are_escaped_in_paths() {
        assert_eq!(seg("orders-value"), "orders-value");
        assert_eq!(seg("a/b c"), "a%2Fb%20c");
    }
}
