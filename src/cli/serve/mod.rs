//! `strata serve`: the broker process.
//!
//! Every flag can also be set as STRATA_<FLAG> (for example STRATA_DATA_DIR) and in a
//! TOML file given with --config, whose keys are the flag names (`data-dir = "..."`).
//! Precedence: flag, then environment, then file, then default.

mod args;
mod config;
mod file;
mod parse;
mod wiring;

pub use args::ServeArgs;
pub use config::ServeConfig;
pub use parse::parse_bytes;
pub use wiring::run;

#[cfg(test)]
mod tests;
