//! The --config file as the layer under the flags and the environment; figment merges
//! the two into one [`ServeArgs`].

use anyhow::Context;
use figment::Figment;
use figment::providers::{Format, Serialized};

use super::ServeArgs;
use crate::cli::security::SecurityArgs;

/// The --config file's format: TOML, parsed by the `toml` crate the workspace already
/// builds (figment's own "toml" feature would build a second, older one).
struct Toml;

impl Format for Toml {
    type Error = toml::de::Error;

    const NAME: &'static str = "TOML";

    fn from_str<T: serde::de::DeserializeOwned>(string: &str) -> Result<T, Self::Error> {
        toml::from_str(string)
    }
}

/// `args` (each a flag or else its environment variable: clap chose) over the --config
/// file's settings. What neither gives stays unset, for [`super::ServeConfig::resolve`]
/// to default. A key of the file that is no flag's name is an error naming the key.
pub(super) fn with_file(mut args: ServeArgs) -> anyhow::Result<ServeArgs> {
    let Some(path) = args.config.take() else {
        return Ok(args);
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("--config {}: cannot read the file", path.display()))?;
    let invalid = |e: figment::Error| {
        let errors: Vec<String> = e
            .into_iter()
            .map(|e| match e.path.is_empty() {
                true => e.kind.to_string(),
                false => format!("{}: {}", e.path.join("."), e.kind),
            })
            .collect();
        anyhow::anyhow!(
            "--config {}: invalid settings: {}",
            path.display(),
            errors.join("; ")
        )
    };
    // Merged, a later layer's key replaces an earlier one's; the flags leave out what
    // they do not set (`skip_serializing_if`), so the file's value shows through.
    let layers = Figment::from(Toml::string(&text)).merge(Serialized::defaults(args));
    // The listener and security keys are checked on their own first: read through
    // `#[serde(flatten)]`, a bad value's error would not name its key.
    layers.extract::<SecurityArgs>().map_err(invalid)?;
    let merged: ServeArgs = layers.extract().map_err(invalid)?;
    Ok(ServeArgs {
        config: Some(path),
        ..merged
    })
}
