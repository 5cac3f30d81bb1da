//! An Iceberg REST catalog client (the Iceberg REST catalog OpenAPI specification,
//! <https://iceberg.apache.org/spec/#iceberg-rest-catalog>), for users who run Polaris,
//! Nessie, Lakekeeper, Gravitino or Glue's REST endpoint.
//!
//! The catalog holds each table's metadata pointer and writes the metadata JSON; Strata
//! writes the manifests and manifest lists (under the table's location, which must be in
//! the broker's bucket) and points the manifests at its Parquet files where they are.
//! A commit is `POST .../tables/{table}` with requirements (the table's UUID, the `main`
//! branch's snapshot as loaded, the schema as loaded) and updates (`add-snapshot`,
//! `set-snapshot-ref`, `remove-snapshots`, `add-schema`, ...): the catalog applies it
//! atomically or answers 409, which is [`IcebergError::CommitConflict`] as for the
//! file-system catalog. An answer that leaves the outcome unknown (a 5xx, a lost
//! connection) is an error; the next round reloads the table and its snapshot summaries
//! say what was committed, so nothing is added twice.
//!
//! Only what Strata uses is here: `GET /v1/config`, create and load namespaces' tables,
//! and commit. Namespaces are created (each level) when a table is first created.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{Mutex, OnceCell};

use crate::error::{IcebergError, Result};
use crate::metadata::TableMetadata;

/// How to reach a REST catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestConfig {
    /// The catalog's base URI, without `/v1` (`http://127.0.0.1:8181`,
    /// `https://polaris.example.com/api/catalog`).
    pub uri: String,
    /// The warehouse to ask `/v1/config` for, when the catalog serves several
    /// (Polaris: the catalog's name; Lakekeeper: the warehouse's).
    pub warehouse: Option<String>,
    /// The namespace (its levels) the topics' tables go in. One per cluster: a table
    /// records the cluster that created it, and another cluster's is refused.
    pub namespace: Vec<String>,
    /// A bearer token sent with every request.
    pub token: Option<String>,
}

/// A table as the catalog answers it: its metadata and where that is.
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    pub metadata_location: String,
    pub metadata: TableMetadata,
}

/// A client of one REST catalog. Cheap to share (`Arc`); requests time out after
/// [`REQUEST_TIMEOUT`].
#[derive(Debug)]
pub struct RestCatalog {
    config: RestConfig,
    http: reqwest::Client,
    /// `{uri}/v1/{prefix}`: the prefix from `/v1/config`'s overrides, asked once.
    base: OnceCell<String>,
    /// Namespaces known to exist.
    namespaces: Mutex<BTreeSet<Vec<String>>>,
}

/// How long a request to the catalog may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl RestCatalog {
    pub fn new(config: RestConfig) -> Result<RestCatalog> {
        let uri = config.uri.trim_end_matches('/');
        if !(uri.starts_with("http://") || uri.starts_with("https://")) {
            return Err(IcebergError::Catalog {
                uri: config.uri.clone(),
                reason: "the REST catalog URI must start with http:// or https://".to_string(),
            });
        }
        if config.namespace.is_empty() || config.namespace.iter().any(String::is_empty) {
            return Err(IcebergError::Catalog {
                uri: config.uri.clone(),
                reason: format!(
                    "namespace {:?}: give one or more non-empty levels",
                    config.namespace
                ),
            });
        }
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| IcebergError::Catalog {
                uri: config.uri.clone(),
                reason: e.to_string(),
            })?;
        Ok(RestCatalog {
            config: RestConfig {
                uri: uri.to_string(),
                ..config
            },
            http,
            base: OnceCell::new(),
            namespaces: Mutex::new(BTreeSet::new()),
        })
    }

    pub fn config(&self) -> &RestConfig {
        &self.config
    }

    /// How a table is named for people: `{namespace}.{table} at {uri}`.
    pub fn describe(&self, namespace: &[String], table: &str) -> String {
        format!(
            "{}.{} in the Iceberg REST catalog {}",
            namespace.join("."),
            table,
            self.config.uri
        )
    }

    /// `{uri}/v1/{prefix}`, from `GET /v1/config` (once).
    async fn base(&self) -> Result<&str> {
        self.base
            .get_or_try_init(|| async {
                let mut url = parse_url(&join_url(&self.config.uri, &["v1", "config"])?)?;
                if let Some(w) = &self.config.warehouse {
                    url.query_pairs_mut().append_pair("warehouse", w);
                }
                let url = String::from(url);
                let answer = self.send(reqwest::Method::GET, &url, None).await?;
                let config = answer.ok_json(&url)?;
                let prefix = config["overrides"]["prefix"]
                    .as_str()
                    .or_else(|| config["defaults"]["prefix"].as_str())
                    .unwrap_or("");
                base_url(&self.config.uri, prefix)
            })
            .await
            .map(String::as_str)
    }

    async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
    ) -> Result<Answer> {
        let mut request = self.http.request(method, url);
        if let Some(token) = &self.config.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(body)?);
        }
        let response = request.send().await.map_err(|e| IcebergError::Catalog {
            uri: url.to_string(),
            reason: format!("{e}: is the catalog up and --iceberg-catalog-uri right?"),
        })?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(|e| IcebergError::Catalog {
            uri: url.to_string(),
            reason: format!("reading the answer: {e}"),
        })?;
        Ok(Answer { status, body })
    }

    /// A namespace as one path segment: its levels joined by 0x1F (the spec's
    /// separator).
    fn namespace_segment(namespace: &[String]) -> String {
        namespace.join("\u{1f}")
    }

    fn table_url(base: &str, namespace: &[String], table: &str) -> Result<String> {
        join_url(
            base,
            &[
                "namespaces",
                &Self::namespace_segment(namespace),
                "tables",
                table,
            ],
        )
    }

    /// The table, or `None` when the catalog has no such table (or namespace).
    pub(crate) async fn load(&self, namespace: &[String], table: &str) -> Result<Option<Loaded>> {
        let url = Self::table_url(self.base().await?, namespace, table)?;
        let answer = self.send(reqwest::Method::GET, &url, None).await?;
        if answer.status == 404 {
            return Ok(None);
        }
        answer.loaded(&url).map(Some)
    }

    /// Creates every level of `namespace` the catalog lacks.
    async fn ensure_namespace(&self, namespace: &[String]) -> Result<()> {
        let mut known = self.namespaces.lock().await;
        if known.contains(namespace) {
            return Ok(());
        }
        let url = join_url(self.base().await?, &["namespaces"])?;
        for depth in 1..=namespace.len() {
            let level = &namespace[..depth];
            if known.contains(level) {
                continue;
            }
            let body = json!({"namespace": level, "properties": {}});
            let answer = self.send(reqwest::Method::POST, &url, Some(&body)).await?;
            // 409: it exists already.
            if answer.status != 409 {
                answer.ok_json(&url)?;
            }
            known.insert(level.to_vec());
        }
        Ok(())
    }

    /// Creates the table from a `CreateTableRequest` body;
    /// [`IcebergError::TableExists`] when the catalog has it already.
    pub(crate) async fn create(
        &self,
        namespace: &[String],
        table: &str,
        request: &Value,
    ) -> Result<Loaded> {
        self.ensure_namespace(namespace).await?;
        let url = join_url(
            self.base().await?,
            &["namespaces", &Self::namespace_segment(namespace), "tables"],
        )?;
        let answer = self
            .send(reqwest::Method::POST, &url, Some(request))
            .await?;
        if answer.status == 409 {
            return Err(IcebergError::TableExists {
                table: table.to_string(),
            });
        }
        answer.loaded(&url)
    }

    /// Commits `updates` to the table if `requirements` hold;
    /// [`IcebergError::CommitConflict`] (409) when they do not: reload and try again.
    pub(crate) async fn commit(
        &self,
        namespace: &[String],
        table: &str,
        version: u64,
        requirements: Vec<Value>,
        updates: Vec<Value>,
    ) -> Result<Loaded> {
        let url = Self::table_url(self.base().await?, namespace, table)?;
        let body = json!({
            "identifier": {"namespace": namespace, "name": table},
            "requirements": requirements,
            "updates": updates,
        });
        let answer = self.send(reqwest::Method::POST, &url, Some(&body)).await?;
        if answer.status == 409 {
            return Err(IcebergError::CommitConflict {
                table: table.to_string(),
                version,
            });
        }
        answer.loaded(&url)
    }
}

/// A catalog's answer.
struct Answer {
    status: u16,
    body: Bytes,
}

impl Answer {
    /// The body of a 2xx answer as JSON (`null` when empty), or the catalog's error.
    fn ok_json(&self, url: &str) -> Result<Value> {
        if !(200..300).contains(&self.status) {
            // The spec's ErrorModel: {"error": {"message", "type", "code"}}.
            let message = serde_json::from_slice::<Value>(&self.body)
                .ok()
                .and_then(|v| {
                    let e = &v["error"];
                    let message = e["message"].as_str()?;
                    Some(match e["type"].as_str() {
                        Some(t) => format!("{t}: {message}"),
                        None => message.to_string(),
                    })
                })
                .unwrap_or_else(|| {
                    String::from_utf8_lossy(&self.body[..self.body.len().min(512)]).into_owned()
                });
            let hint = match self.status {
                401 | 403 => " (check --iceberg-catalog-token and the catalog's grants)",
                _ => "",
            };
            return Err(IcebergError::Catalog {
                uri: url.to_string(),
                reason: format!("HTTP {}: {message}{hint}", self.status),
            });
        }
        if self.body.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&self.body).map_err(|e| IcebergError::Catalog {
            uri: url.to_string(),
            reason: format!("not JSON: {e}"),
        })
    }

    /// A `LoadTableResult`.
    fn loaded(&self, url: &str) -> Result<Loaded> {
        let mut v = self.ok_json(url)?;
        let bad = |reason: String| IcebergError::Catalog {
            uri: url.to_string(),
            reason,
        };
        let metadata_location = v["metadata-location"]
            .as_str()
            .ok_or_else(|| bad("the answer has no metadata-location".to_string()))?
            .to_string();
        let metadata = serde_json::from_value(v["metadata"].take())
            .map_err(|e| bad(format!("its table metadata: {e}")))?;
        Ok(Loaded {
            metadata_location,
            metadata,
        })
    }
}

fn parse_url(url: &str) -> Result<reqwest::Url> {
    reqwest::Url::parse(url).map_err(|e| IcebergError::Catalog {
        uri: url.to_string(),
        reason: format!("not a URL: {e}"),
    })
}

/// `base` with `segments` appended, each percent-encoded as one path segment (the url
/// crate's encoding, as reqwest sends it).
fn join_url(base: &str, segments: &[&str]) -> Result<String> {
    let mut url = parse_url(base)?;
    url.path_segments_mut()
        .map_err(|()| IcebergError::Catalog {
            uri: base.to_string(),
            reason: "not a URL paths can be added to".to_string(),
        })?
        .pop_if_empty()
        .extend(segments);
    Ok(url.into())
}

/// `{uri}/v1/{prefix}`: the catalog's base for a prefix from `/v1/config` (its
/// `/`-separated segments kept as segments).
fn base_url(uri: &str, prefix: &str) -> Result<String> {
    let mut segments = vec!["v1"];
    segments.extend(prefix.split('/').filter(|s| !s.is_empty()));
    join_url(uri, &segments)
}

/// The metadata version a metadata file's name carries: `v{N}.metadata.json` or
/// `{N:05}-{uuid}.metadata.json` (Java's and iceberg-rust's catalogs); 0 when neither.
pub(crate) fn version_of(metadata_location: &str) -> u64 {
    let name = metadata_location.rsplit('/').next().unwrap_or("");
    let Some(stem) = name.strip_suffix(".metadata.json") else {
        return 0;
    };
    let digits = stem.strip_prefix('v').unwrap_or(stem);
    let digits: String = digits.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_encoded_for_paths() {
        let ns = |levels: &[&str]| levels.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            RestCatalog::table_url("http://c/v1", &ns(&["strata"]), "orders").unwrap(),
            "http://c/v1/namespaces/strata/tables/orders"
        );
        assert_eq!(
            RestCatalog::table_url("http://c/v1", &ns(&["strata", "dead_letters"]), "a b/c")
                .unwrap(),
            "http://c/v1/namespaces/strata%1Fdead_letters/tables/a%20b%2Fc"
        );
        assert_eq!(
            base_url("http://c/api/", "/warehouses/w 1/").unwrap(),
            "http://c/api/v1/warehouses/w%201"
        );
    }

    #[test]
    fn versions_come_from_metadata_file_names() {
        assert_eq!(version_of("file:///w/t/metadata/v12.metadata.json"), 12);
        assert_eq!(
            version_of(
                "s3://b/t/metadata/00003-7e3b1c6e-2f1a-4b7e-9a57-0c7f3c5d9e21.metadata.json"
            ),
            3
        );
        assert_eq!(version_of("s3://b/t/metadata/custom.json"), 0);
    }

    #[test]
    fn a_catalog_needs_an_http_uri_and_a_namespace() {
        let config = |uri: &str, ns: &[&str]| RestConfig {
            uri: uri.to_string(),
            warehouse: None,
            namespace: ns.iter().map(|s| s.to_string()).collect(),
            token: None,
        };
        assert!(RestCatalog::new(config("http://127.0.0.1:8181/", &["strata"])).is_ok());
        let e = RestCatalog::new(config("127.0.0.1:8181", &["strata"])).unwrap_err();
        assert!(e.to_string().contains("http://"), "{e}");
        let e = RestCatalog::new(config("http://c", &[])).unwrap_err();
        assert!(e.to_string().contains("namespace"), "{e}");
    }
}
