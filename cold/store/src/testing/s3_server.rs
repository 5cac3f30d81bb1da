//! A real S3 server (s3s-fs) on a loopback port, for tests.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::backend::{ObjectBackend, open_url_with_env};
use crate::error::Result;

/// The server's access key.
pub const ACCESS_KEY: &str = "strata-test-access";
/// The server's secret key.
pub const SECRET_KEY: &str = "strata-test-secret";
/// The region clients sign for (s3s-fs accepts any).
pub const REGION: &str = "us-east-1";
/// The bucket [`S3Server::start`] creates.
pub const BUCKET: &str = "strata-test";

/// An s3s-fs process serving a temporary directory on `127.0.0.1`, with authentication
/// on and one bucket, killed when dropped.
///
/// s3s-fs is installed by `scripts/deps` (`cargo install s3s-fs --features binary`); it
/// is found through `$S3S_FS`, then `$PATH`, then `~/.cargo/bin`. Buckets are directories
/// under its root, so [`create_bucket`](Self::create_bucket) makes one without an S3
/// client; the crate's own tests check with aws-sdk-s3 that the server sees them.
#[derive(Debug)]
pub struct S3Server {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    paused: bool,
}

impl S3Server {
    /// The s3s-fs binary, if installed.
    pub fn binary() -> Option<PathBuf> {
        installed_binary("s3s-fs", "S3S_FS")
    }

    /// Starts a server on a free port with bucket [`BUCKET`], and waits until it accepts
    /// connections.
    pub fn start() -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("strata-s3s-").tempdir()?;
        std::fs::create_dir_all(dir.path().join("data").join(BUCKET))?;
        let mut server = Self {
            dir,
            port: 0,
            child: None,
            paused: false,
        };
        let mut last = None;
        // Another process may take the port between our probe and the server's bind.
        for _ in 0..5 {
            server.port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
                .local_addr()?
                .port();
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("s3s-fs did not start")))
    }

    fn spawn(&mut self) -> io::Result<()> {
        let binary = Self::binary().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "s3s-fs not found: run scripts/deps (cargo install s3s-fs --features binary)",
            )
        })?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let mut child = Command::new(binary)
            .arg("--host")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--access-key")
            .arg(ACCESS_KEY)
            .arg("--secret-key")
            .arg(SECRET_KEY)
            .arg(self.root())
            .env("RUST_LOG", "s3s_fs=info,s3s=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "s3s-fs exited with {status} on port {}: {}",
                    self.port,
                    self.log()
                )));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                self.child = Some(child);
                self.paused = false;
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "s3s-fs did not listen within 15 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bucket [`start`](Self::start) created.
    pub fn bucket(&self) -> &str {
        BUCKET
    }

    /// `s3://BUCKET/PREFIX`, for `--object-store`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{}", prefix.trim_matches('/'))
    }

    /// The `AWS_*` variables that point a client (object_store, aws-sdk-s3, the strata
    /// binary) at this server.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// A backend for `s3://BUCKET/PREFIX` on this server, opened the way
    /// `--object-store` is, from [`url`](Self::url) and [`env`](Self::env).
    pub fn store(&self, prefix: &str) -> Result<ObjectBackend> {
        open_url_with_env(&self.url(prefix), self.env())
    }

    /// The server's data directory (one subdirectory per bucket).
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("s3s-fs.log")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Creates another bucket.
    pub fn create_bucket(&self, name: &str) -> io::Result<()> {
        std::fs::create_dir_all(self.root().join(name))
    }

    /// Multipart uploads started and neither completed nor aborted (s3s-fs keeps one
    /// `.upload-{id}.json` per upload in its root).
    pub fn pending_multipart_uploads(&self) -> usize {
        count_prefixed(&self.root(), ".upload-")
    }

    /// Stored parts not yet assembled or discarded.
    pub fn pending_parts(&self) -> usize {
        count_prefixed(&self.root(), ".upload_id-")
    }

    /// Whether the process is running (paused counts).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL: the server dies at once, mid-request if need be.
    pub fn stop(&mut self) {
        self.kill();
    }

    /// SIGSTOP: the server keeps its port and accepts connections in the kernel but
    /// answers nothing, like a hung server or a network partition.
    pub fn pause(&mut self) -> io::Result<()> {
        self.signal(rustix::process::Signal::STOP)?;
        self.paused = true;
        // The signal is sent, not yet taken: on a loaded machine the server may answer
        // one more request before it stops. Wait until the kernel shows it stopped.
        if let Some(child) = &self.child {
            let stat = format!("/proc/{}/stat", child.id());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while std::time::Instant::now() < deadline {
                let stopped = std::fs::read_to_string(&stat).is_ok_and(|s| {
                    // "pid (comm) STATE ...": the state follows the last ')'.
                    s.rsplit_once(')')
                        .is_some_and(|(_, rest)| rest.trim_start().starts_with(['T', 't']))
                });
                if stopped {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        Ok(())
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&mut self) -> io::Result<()> {
        self.signal(rustix::process::Signal::CONT)?;
        self.paused = false;
        Ok(())
    }

    /// Kills the server (if running) and starts it again on the same port and directory.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        let mut last = None;
        // The old socket may linger for a moment.
        for _ in 0..20 {
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(last.unwrap_or_else(|| io::Error::other("s3s-fs did not restart")))
    }

    fn signal(&self, sig: rustix::process::Signal) -> io::Result<()> {
        let child = self
            .child
            .as_ref()
            .ok_or_else(|| io::Error::other("s3s-fs is not running"))?;
        let pid = i32::try_from(child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| io::Error::other("bad pid"))?;
        rustix::process::kill_process(pid, sig).map_err(io::Error::from)
    }
}

fn count_prefixed(dir: &Path, prefix: &str) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A program `scripts/deps` installs with `cargo install`: `$env_var` if set, else the
/// first `name` on `$PATH`, in `$CARGO_HOME/bin` or in `~/.cargo/bin`.
pub fn installed_binary(name: &str, env_var: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env_var) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}
