//! `strata group list`: every group with its state, protocol type and member count.

use anyhow::bail;

use super::broker::{LIST_GROUPS, broker_supports, is_unsupported};
use crate::cli::client::{ClientArgs, admin};

pub(super) fn list(c: &ClientArgs) -> anyhow::Result<()> {
    let client = admin(c)?;
    let groups = client
        .inner()
        .fetch_group_list(None, c.timeout)
        .map_err(|e| {
            if is_unsupported(&e) {
                anyhow::anyhow!(
                    "the broker at {} does not support listing groups (ListGroups/DescribeGroups: {e}); \
                     `strata group describe GROUP --topic TOPIC` still shows a group's offsets",
                    c.bootstrap
                )
            } else {
                c.explain(e, "ListGroups")
            }
        })?;
    let mut rows: Vec<(String, String, String, usize)> = groups
        .groups()
        .iter()
        .map(|g| {
            (
                g.name().to_string(),
                g.state().to_string(),
                g.protocol_type().to_string(),
                g.members().len(),
            )
        })
        .collect();
    rows.sort();
    if rows.is_empty() {
        if broker_supports(c, LIST_GROUPS) == Some(false) {
            bail!(
                "the broker at {} does not support listing groups (no ListGroups in its ApiVersions); \
                 `strata group describe GROUP --topic TOPIC` still shows a group's offsets",
                c.bootstrap
            );
        }
        eprintln!("no consumer groups");
        return Ok(());
    }
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(5);
    outln!(
        "{:<w$}  {:<20}  {:<13}  MEMBERS",
        "GROUP",
        "STATE",
        "PROTOCOL-TYPE"
    );
    for (name, state, ptype, members) in rows {
        let state = if state.is_empty() { "-".into() } else { state };
        let ptype = if ptype.is_empty() { "-".into() } else { ptype };
        outln!("{name:<w$}  {state:<20}  {ptype:<13}  {members}");
    }
    Ok(())
}
