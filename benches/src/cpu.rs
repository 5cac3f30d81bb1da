//! The broker's CPU time over a run, from /proc/PID/stat.

use anyhow::Context;

/// Clock ticks per second for /proc/PID/stat's utime and stime. `getconf` rather than
/// sysconf(3) because the workspace forbids unsafe code; 100 is the value on every Linux
/// we know of.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .with_context(|| format!("--broker-pid {pid}: cannot read {path}"))?;
    parse_cpu_ticks(&stat).with_context(|| format!("--broker-pid {pid}: cannot parse {path}"))
}

/// Fields 14 and 15 of /proc/PID/stat. The command name (field 2) is in parentheses and
/// may hold spaces and parentheses itself, so count from the last ')'.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, so index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Measures a broker's CPU time over a run.
pub(crate) struct CpuMeter {
    pid: Option<u32>,
    start: u64,
}

impl CpuMeter {
    pub(crate) fn start(pid: Option<u32>) -> anyhow::Result<CpuMeter> {
        let start = match pid {
            Some(p) => cpu_ticks(p)?,
            None => 0,
        };
        Ok(CpuMeter { pid, start })
    }

    /// CPU seconds used since start, and per GB of `bytes`.
    pub(crate) fn finish(&self, bytes: u64) -> anyhow::Result<(Option<f64>, Option<f64>)> {
        let Some(pid) = self.pid else {
            return Ok((None, None));
        };
        let secs = cpu_ticks(pid)?.saturating_sub(self.start) as f64 / clock_ticks();
        let per_gb = (bytes > 0).then(|| secs / (bytes as f64 / 1e9));
        Ok((Some(secs), per_gb))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn proc_stat_with_awkward_names() {
        // Fields: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
        // cmajflt utime stime ...
        let stat = "42 (str ata) x) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(parse_cpu_ticks("garbage"), None);
        let own = cpu_ticks(std::process::id()).unwrap();
        assert!(own < u64::MAX);
    }
}
