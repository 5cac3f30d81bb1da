//! Several `strata serve` processes on 127.0.0.1, 127.0.0.2, ... forming one cluster,
//! and a TCP proxy that can cut a link.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::Broker;

/// A free port on `ip` for a broker's fixed address, one no other test in this process
/// was given and one the kernel never hands out itself.
///
/// A port bound and released from the ephemeral range can be taken again before the
/// broker binds it: by another test's `127.0.0.1:0` listener or by the local end of any
/// outgoing connection, and the broker then exits at start-up with "address in use".
/// So ports come from below the kernel's ephemeral range, walked from a per-process
/// random start, and each is checked free before it is handed out.
pub fn free_port(ip: &str) -> u16 {
    use std::sync::atomic::AtomicU32;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u32, ephemeral_low.max(12_000));
    let span = high - low;
    let _ = NEXT.compare_exchange(
        0,
        1 + std::process::id().wrapping_mul(7919) % span,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..span {
        let port = low + NEXT.fetch_add(1, Ordering::SeqCst) % span;
        if TcpListener::bind((ip, port as u16)).is_ok() {
            return port as u16;
        }
    }
    panic!("no free port on {ip} between {low} and {high}")
}

/// A partition as a client's metadata shows it: (leader, replicas, ISR).
pub type PartitionView = (i32, Vec<i32>, Vec<i32>);

/// One broker's fixed addresses.
#[derive(Clone, Debug)]
pub struct Node {
    pub id: i32,
    pub ip: String,
    pub kafka: String,
    pub controller: String,
}

/// A cluster of brokers; broker `i` (id i+1) listens on 127.0.0.(i+1).
pub struct Cluster {
    pub nodes: Vec<Node>,
    pub brokers: Vec<Broker>,
    pub voters: String,
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// `n` brokers, the first `voters` of which are controller voters, with `extra`
    /// flags for every broker.
    pub fn start(n: usize, voters: usize, extra: &[&str]) -> Cluster {
        Self::start_with(Self::plan(n), voters, extra, |_| Vec::new())
    }

    /// Addresses for `n` brokers.
    pub fn plan(n: usize) -> Vec<Node> {
        (1..=n)
            .map(|id| {
                let ip = format!("127.0.0.{id}");
                Node {
                    id: id as i32,
                    kafka: format!("{ip}:{}", free_port(&ip)),
                    controller: format!("{ip}:{}", free_port(&ip)),
                    ip,
                }
            })
            .collect()
    }

    /// Starts planned brokers; `per_node` adds flags for one broker (and may replace
    /// its --controller-voters).
    pub fn start_with(
        nodes: Vec<Node>,
        voters: usize,
        extra: &[&str],
        per_node: impl Fn(&Node) -> Vec<String> + Sync,
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let voter_list = nodes[..voters]
            .iter()
            .map(|n| format!("{}@{}", n.id, n.controller))
            .collect::<Vec<_>>()
            .join(",");
        // Brokers block in start-up until a controller quorum answers: start them all
        // at once.
        let brokers: Vec<Broker> = std::thread::scope(|s| {
            let handles: Vec<_> = nodes
                .iter()
                .map(|node| {
                    let data = dir.path().join(format!("n{}", node.id));
                    let args = broker_args(node, dir.path(), &voter_list, extra, per_node(node));
                    let kafka = node.kafka.clone();
                    s.spawn(move || {
                        let a: Vec<&str> = args.iter().map(String::as_str).collect();
                        Broker::start_on(&data, &kafka, &a)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        Cluster {
            nodes,
            brokers,
            voters: voter_list,
            dir,
        }
    }

    /// Starts one more broker (not a voter) with the cluster's voters and bucket.
    pub fn add(&mut self, node: Node, extra: &[&str]) {
        let data = self.dir.path().join(format!("n{}", node.id));
        let args = broker_args(&node, self.dir.path(), &self.voters, extra, Vec::new());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        self.brokers.push(Broker::start_on(&data, &node.kafka, &a));
        self.nodes.push(node);
    }

    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.kafka.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn broker(&mut self, id: i32) -> &mut Broker {
        &mut self.brokers[(id - 1) as usize]
    }

    /// Partition metadata as a client sees it: (leader, replicas, isr) by partition.
    pub fn partitions(&self, topic: &str) -> Option<Vec<PartitionView>> {
        metadata(&self.bootstrap(), topic)
    }

    /// Waits until `check` holds for the topic's partitions.
    pub fn wait_for(
        &self,
        topic: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&[PartitionView]) -> bool,
    ) -> Vec<PartitionView> {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(p) = self.partitions(topic) {
                if check(&p) {
                    return p;
                }
                last = Some(p);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what} on {topic}; last metadata {last:?}");
    }
}

/// A broker's flags: its id and controller address, the voters (unless `own` names
/// them), the shared bucket, then `extra` and `own`.
fn broker_args(
    node: &Node,
    dir: &std::path::Path,
    voters: &str,
    extra: &[&str],
    own: Vec<String>,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--node-id".into(),
        node.id.to_string(),
        "--controller-addr".into(),
        node.controller.clone(),
        "--object-store".into(),
        format!("file://{}", dir.join("cold").display()),
    ];
    // A broker may be told another way to reach the voters (a proxy).
    if !own.iter().any(|a| a == "--controller-voters") {
        args.extend(["--controller-voters".into(), voters.to_string()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(own);
    args
}

/// (leader, replicas, isr) by partition, from any reachable broker in `bootstrap`.
pub fn metadata(bootstrap: &str, topic: &str) -> Option<Vec<PartitionView>> {
    let c: BaseConsumer = super::kafka::client_config(bootstrap, &[("socket.timeout.ms", "2000")])
        .create()
        .ok()?;
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(3)).ok()?;
    let t = md.topics().iter().find(|t| t.name() == topic)?;
    if t.error().is_some() {
        return None;
    }
    let mut parts: Vec<_> = t
        .partitions()
        .iter()
        .map(|p| (p.id(), p.leader(), p.replicas().to_vec(), p.isr().to_vec()))
        .collect();
    parts.sort_by_key(|p| p.0);
    Some(parts.into_iter().map(|(_, l, r, i)| (l, r, i)).collect())
}

/// A TCP proxy from a local port to `target` whose link can be cut (every connection
/// closed, new ones refused) and healed.
pub struct FaultProxy {
    pub addr: String,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl FaultProxy {
    pub fn start(listen_ip: &str, target: &str) -> FaultProxy {
        let listener = TcpListener::bind((listen_ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        listener.set_nonblocking(true).unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let target = target.to_string();
        {
            let (cut, stop, conns) = (cut.clone(), stop.clone(), conns.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (client, _) = match listener.accept() {
                        Ok(c) => c,
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                    };
                    if cut.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(&target) else {
                        continue;
                    };
                    client.set_nonblocking(false).unwrap();
                    let pairs = [
                        (client.try_clone().unwrap(), server.try_clone().unwrap()),
                        (server.try_clone().unwrap(), client.try_clone().unwrap()),
                    ];
                    {
                        let mut c = conns.lock().unwrap();
                        c.push(client);
                        c.push(server);
                    }
                    for (mut from, mut to) in pairs {
                        std::thread::spawn(move || {
                            let _ = std::io::copy(&mut from, &mut to);
                            let _ = to.shutdown(Shutdown::Both);
                            let _ = from.shutdown(Shutdown::Both);
                        });
                    }
                }
            });
        }
        FaultProxy {
            addr,
            cut,
            conns,
            stop,
        }
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.cut();
    }
}

/// SIGSTOP / SIGCONT a broker process.
pub fn signal(b: &Broker, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &b.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} failed");
}
