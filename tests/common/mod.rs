//! Helpers for end-to-end tests: the real `strata` binary on free loopback ports.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod bucket;
pub mod cluster;
pub mod gateway;
pub mod kafka;
pub mod pki;
pub mod secure;
pub mod wire;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `strata serve` child process.
pub struct Broker {
    pub child: Child,
    pub kafka: String,
    pub http: String,
    /// The schema registry's address (a free port of its own).
    pub registry: String,
    pub data_dir: PathBuf,
    /// Every listener, PROTOCOL://HOST:PORT, as the broker printed them.
    pub listeners: Vec<String>,
    extra: Vec<String>,
    env: Vec<(String, String)>,
    /// The open-file limit (soft and hard) the child runs under, set with `prlimit`.
    nofile: Option<u64>,
}

pub fn strata_bin() -> &'static str {
    env!("CARGO_BIN_EXE_strata")
}

impl Broker {
    /// Starts `strata serve` on free ports with `data_dir`, waiting until it listens.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Broker {
        Self::start_on(data_dir, "127.0.0.1:0", extra)
    }

    /// Starts on a given Kafka address (to restart on the same port).
    pub fn start_on(data_dir: &Path, kafka_addr: &str, extra: &[&str]) -> Broker {
        Self::start_with_env(data_dir, kafka_addr, extra, &[])
    }

    /// Starts with extra environment variables (for example the AWS_* settings of an
    /// S3 server).
    pub fn start_with_env(
        data_dir: &Path,
        kafka_addr: &str,
        extra: &[&str],
        env: &[(String, String)],
    ) -> Broker {
        Self::spawn(data_dir, kafka_addr, extra, env, None)
    }

    /// Starts under an open-file limit of `nofile` (soft and hard, so the broker cannot
    /// raise it), set on the child with `prlimit`.
    pub fn start_with_nofile(data_dir: &Path, nofile: u64, extra: &[&str]) -> Broker {
        Self::spawn(data_dir, "127.0.0.1:0", extra, &[], Some(nofile))
    }

    fn spawn(
        data_dir: &Path,
        kafka_addr: &str,
        extra: &[&str],
        env: &[(String, String)],
        nofile: Option<u64>,
    ) -> Broker {
        let mut cmd = match nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}"))
                    .arg("--")
                    .arg(strata_bin());
                c
            }
            None => Command::new(strata_bin()),
        };
        let mut child = cmd
            .args(["serve", "--data-dir"])
            .arg(data_dir)
            .args(["--kafka-addr", kafka_addr, "--http-addr", "127.0.0.1:0"])
            // Each broker its own registry on a free port (the default, 8081, is one).
            .args(if extra.contains(&"--schema-registry-addr") {
                &[][..]
            } else {
                &["--schema-registry-addr", "127.0.0.1:0"][..]
            })
            // A single-node broker's own controller on a free port, unless the test
            // builds a quorum.
            .args(if extra.contains(&"--controller-addr") {
                &[][..]
            } else {
                &["--controller-addr", "127.0.0.1:0"][..]
            })
            .args(extra)
            .env(
                "STRATA_LOG",
                std::env::var("STRATA_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn strata serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                let status = child.wait();
                // Its stderr (inherited) says why; the status says how it ended.
                panic!("strata serve did not start ({e}): {status:?}, args {extra:?}")
            }
        };
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("no {k} in {line:?}"))
                .to_string()
        };
        Broker {
            child,
            kafka: field("kafka"),
            http: field("http"),
            registry: field("registry"),
            listeners: field("listeners").split(',').map(str::to_string).collect(),
            data_dir: data_dir.to_path_buf(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env.to_vec(),
            nofile,
        }
    }

    /// The HOST:PORT of the listener of `protocol` (SSL, SASL_SSL, ...).
    pub fn listener(&self, protocol: &str) -> String {
        self.listeners
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{protocol}://")))
            .unwrap_or_else(|| panic!("no {protocol} listener in {:?}", self.listeners))
            .to_string()
    }

    /// SIGKILL, no clean shutdown.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let _ = self.child.wait();
    }

    /// Restarts on the same Kafka port after a stop or kill.
    pub fn restart(&mut self) {
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let kafka = self.kafka.clone();
        // The port may linger briefly; retry binding it for a while.
        let mut last = None;
        for _ in 0..50 {
            match std::panic::catch_unwind(|| {
                Broker::spawn(&self.data_dir, &kafka, &extra, &self.env, self.nofile)
            }) {
                Ok(b) => {
                    // The old child has exited already; dropping it only reaps it.
                    drop(std::mem::replace(self, b));
                    return;
                }
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        std::panic::resume_unwind(last.unwrap());
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// GET a path of the broker's HTTP address; the body.
    pub fn http_get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&self.http).expect("connect http");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.http
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP response");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        body.to_string()
    }

    /// The value of one series in the broker's /metrics (`series` is the name with its
    /// labels, as the line starts), if it is there.
    pub fn metric(&self, series: &str) -> Option<f64> {
        self.http_get("/metrics").lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the `strata` CLI with `--bootstrap` pointing at `kafka`.
pub fn cli(kafka: &str, args: &[&str]) -> std::process::Output {
    Command::new(strata_bin())
        .args(args)
        .env("STRATA_BOOTSTRAP", kafka)
        .output()
        .expect("run strata")
}

/// The JSON the script `tests/python/{script}` prints, run with `args` (its Python
/// clients, kafka-python and pyiceberg, are installed by scripts/deps); fails the test
/// with the script's stderr when it fails.
pub fn python_json(script: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new("python3")
        .arg(format!(
            "{}/tests/python/{script}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(args)
        .output()
        .expect("python3 (scripts/deps installs kafka-python and pyiceberg)");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
