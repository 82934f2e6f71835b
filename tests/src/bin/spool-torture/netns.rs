//! `cargo xtask torture --lease-netns [--seed S] [--minutes M]`: two
//! "nodes" in network namespaces share one catalog lease (`lease_scope =
//! catalog`) on one ClickHouse, and the holder's link is cut and
//! stalled on a seeded schedule (RELIABILITY.md "Two nodes,
//! one lease").
//!
//! Topology (root only; skipped with a message otherwise): a bridge
//! `spb<pid>` on the host with `10.213.X.1/24`, and per node a namespace
//! `spool-<pid>-<i>` joined to it by a veth pair (`spv<pid>h<i>` on the
//! bridge, `spv<pid>n<i>` inside with `10.213.X.(2+i)`). A ClickHouse of the
//! run's own listens on 127.0.0.1 and the bridge address; both nodes spell
//! the catalog URL with the bridge address, so they compute one catalog key
//! and compete for one lease name. The store is a shared `file://`
//! directory. Each node has its own spool root, one `spool run` daemon
//! inside its namespace (TTL 5 s), and sink-only producers
//! (`spool produce`, the `spool` that ships) started through the run, whose dead
//! directories its daemon adopts, uploads and indexes — under the lease.
//!
//! Faults, each a seeded window of TTL + 1..4 s on the current holder:
//! - a **cut**: the node's interface down (its connects fail at once);
//! - a **stall**: its bridge port disabled (`bridge link set ... state 0`):
//!   carrier up, every frame dropped, so requests in flight hang and their
//!   retransmissions arrive after the restore. (`tc ... netem` would do the
//!   same, but the kernel here has no netem.)
//!
//! A daemon that latches (exit 7: a foreign lease outlived 2 × TTL — a
//! deposed holder, or the standby, which in catalog scope is a second
//! publisher) is counted and restarted.
//!
//! **On replicas** (`--replicas`, CI's `ci-lease-netns-replicas`): the
//! catalog is ZooKeeper and [`REPLICAS`] ClickHouse replicas of one shard
//! (`xtask servers clickhouse --listen ADDR --replicas 3`), tables
//! `ReplicatedReplacingMergeTree ON CLUSTER`, the nodes' URL naming every
//! replica (the client fails over) and a row or claim confirmed on a
//! quorum of 2. Besides the nodes' link faults, one replica at a time is,
//! for a seeded window of 4..8 s:
//! - **killed** (SIGKILL), and started again once its ZooKeeper session
//!   lapsed (when 18.16 refuses to attach a small table whose local parts
//!   the kill left unlike ZooKeeper's, started once more with
//!   `force_restore_data`, as an operator would: [`Replica::watch`]);
//! - **partitioned away** (SIGSTOP, then SIGCONT): its sockets accept and
//!   never answer, its ZooKeeper session lapses, its peers cannot fetch
//!   from it, and when it comes back it is behind. (A replica cut off
//!   from its peers while a client still reaches it would need a
//!   namespace per replica; a stopped one is cut off from every side at
//!   once, and comes back lagging, which is what a claim's read must not
//!   be fooled by.)
//!
//! The oracle reads the claims and rows once every replica holds the same
//! raw rows.
//!
//! **Oracle**, from ClickHouse's own clock: (1) claims of different
//! holdings (lease ids) never overlap by more than the clock's resolution;
//! (2) every index row (raw, before merges) was written inside a claim of
//! its own node's daemon and outside every other node's claim — the fence
//! (the rows carry no term; `indexed_at_ms` is the server clock of the
//! fenced `INSERT ... SELECT`, the claims' `acquired_at_ms`/`expires_at_ms`
//! are the same clock); (3) a node whose link failed wrote no row later than
//! its last claim's expiry; (4) every pack a producer reported is in the
//! store with its checksum and indexed exactly once as read; nothing is left
//! under either root.

use crate::destination::{self, Catalog};
use crate::{pack_checksum, walk_files, Rng};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The lease TTL of both daemons (whole seconds).
const TTL_S: u64 = 5;
/// The fence margin `LeaseConfig::new` picks for a 5 s TTL.
const FENCE_MARGIN_MS: u64 = 2_000;
/// The catalog clock's resolution: the allowed overlap of two holdings.
const CLOCK_MS: u64 = 1_000;
/// Nodes.
const NODES: usize = 2;
/// Replicas of the replicated variant.
pub const REPLICAS: usize = 3;

/// What a pass measured.
#[derive(Debug, Default, Clone)]
pub struct NetnsFigures {
    /// Link cuts (interface down).
    pub cuts: u64,
    /// Link stalls (bridge port disabled).
    pub stalls: u64,
    /// Changes of holding node between consecutive held claims.
    pub handovers: u64,
    /// Daemons that latched (exit 7) and were restarted.
    pub latches: u64,
    /// Packs reported by producers (all found, indexed once).
    pub packs: u64,
    /// Index rows written (raw, before merges).
    pub rows: u64,
    /// Rows or claims that broke the lease (must be 0).
    pub overlaps: u64,
    /// Longest time from a fault's start to the faulted node's last row
    /// in that window, ms (bound: TTL).
    pub longest_write_after_fault_ms: u64,
    /// Replicas killed (and started again).
    pub replica_kills: u64,
    /// Replicas partitioned away (stopped, then continued).
    pub replica_stalls: u64,
    /// Killed replicas 18.16 refused to start on their parts, started
    /// again with `flags/force_restore_data` ([`Replica::watch`]).
    pub replica_restores: u64,
}

impl NetnsFigures {
    /// One line for the log and RELIABILITY.md.
    pub fn line(&self) -> String {
        format!(
            "cuts {} stalls {} replica_kills {} replica_stalls {} replica_restores {} handovers {} \
             latches {} packs {} rows {} overlaps {} longest_write_after_fault {} ms",
            self.cuts,
            self.stalls,
            self.replica_kills,
            self.replica_stalls,
            self.replica_restores,
            self.handovers,
            self.latches,
            self.packs,
            self.rows,
            self.overlaps,
            self.longest_write_after_fault_ms
        )
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs an iproute2 `tool` (`ip`, `bridge`) with `args`; fails with its
/// stderr when it does.
fn iproute2(tool: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(tool)
        .args(args)
        .output()
        .with_context(|| format!("running {tool} (iproute2)"))?;
    if !out.status.success() {
        bail!(
            "`{tool} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    iproute2("ip", args)
}

/// Sets bridge port `dev`'s STP state (`0` disabled: every frame dropped;
/// `3` forwarding).
fn bridge_port(dev: &str, state: &str) -> Result<()> {
    iproute2("bridge", &["link", "set", "dev", dev, "state", state])
}

/// The namespaces, veths and bridge of one pass; removed on drop (also on
/// failure), after the processes in them are killed.
struct Net {
    bridge: String,
    namespaces: Vec<String>,
    /// Host-side veth (bridge port) per node.
    ports: Vec<String>,
    /// Namespace-side veth per node.
    inner: Vec<String>,
    /// The bridge's address (ClickHouse listens there).
    host_addr: String,
}

impl Net {
    fn tag(pid: u32) -> String {
        (pid % 10_000_000).to_string()
    }

    /// Deletes what a killed earlier pass left (its pid is gone).
    fn sweep_stale() {
        let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
            return;
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            let Some(rest) = name.strip_prefix("spool-") else {
                continue;
            };
            let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = ip(&["netns", "del", name]);
                let _ = ip(&["link", "del", &format!("spb{}", Net::tag(pid))]);
            }
        }
    }

    fn up() -> Result<Net> {
        Net::sweep_stale();
        let pid = std::process::id();
        let t = Net::tag(pid);
        let x = 1 + pid % 250;
        let mut net = Net {
            bridge: format!("spb{t}"),
            namespaces: Vec::new(),
            ports: Vec::new(),
            inner: Vec::new(),
            host_addr: format!("10.213.{x}.1"),
        };
        ip(&["link", "add", &net.bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.host_addr),
            "dev",
            &net.bridge,
        ])?;
        ip(&["link", "set", &net.bridge, "up"])?;
        for i in 0..NODES {
            let ns = format!("spool-{pid}-{i}");
            let (h, n) = (format!("spv{t}h{i}"), format!("spv{t}n{i}"));
            ip(&["netns", "add", &ns])?;
            net.namespaces.push(ns.clone());
            ip(&["link", "add", &h, "type", "veth", "peer", "name", &n])?;
            net.ports.push(h.clone());
            net.inner.push(n.clone());
            ip(&["link", "set", &h, "master", &net.bridge])?;
            ip(&["link", "set", &h, "up"])?;
            ip(&["link", "set", &n, "netns", &ns])?;
            let addr = format!("10.213.{x}.{}/24", 2 + i);
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &n])?;
            ip(&["-n", &ns, "link", "set", &n, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// Sets node `i`'s interface inside its namespace `up` or `down`.
    fn inner_link(&self, i: usize, state: &str) -> Result<()> {
        ip(&[
            "-n",
            &self.namespaces[i],
            "link",
            "set",
            &self.inner[i],
            state,
        ])
    }

    /// Cuts (`stall = false`) or stalls node `i`'s link.
    fn fail(&self, i: usize, stall: bool) -> Result<()> {
        if stall {
            bridge_port(&self.ports[i], "0")
        } else {
            self.inner_link(i, "down")
        }
    }

    /// Restores node `i`'s link (both ways). After a cut the bridge port
    /// has no carrier until the kernel's link watch sees the inner end up
    /// (asynchronously, up to a second later), and a port without carrier
    /// refuses any state but disabled (`ENETDOWN`, "Network is down"): so
    /// the port is re-enabled once its carrier is back.
    fn restore(&self, i: usize) -> Result<()> {
        self.inner_link(i, "up")?;
        let port = &self.ports[i];
        let operstate = format!("/sys/class/net/{port}/operstate");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&operstate).map(|s| s.trim() != "up")? {
            if Instant::now() > deadline {
                bail!("bridge port {port} has no carrier 10 s after node {i}'s link came up");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bridge_port(port, "3")
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("torture --lease-netns: could not delete namespace {ns}: {e:#}");
            }
        }
        // deleting a namespace deletes its veth ends, and so their peers
        if let Err(e) = ip(&["link", "del", &self.bridge]) {
            eprintln!(
                "torture --lease-netns: could not delete bridge {}: {e:#}",
                self.bridge
            );
        }
    }
}

/// A ClickHouse of the pass's own, listening on 127.0.0.1 and the
/// bridge's address: `$SPOOL_TORTURE_XTASK servers clickhouse --listen
/// ADDR [--replicas N]` (xtask installs and starts it as for `servers up`,
/// and stops it and removes its state once its stdin closes: on drop, or
/// when this process dies).
struct OwnClickHouse {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The HTTP port of each server (one, or one per replica).
    ports: Vec<u16>,
    /// Replicated: the cluster's name and each replica's `config.xml`.
    cluster: Option<(String, Vec<PathBuf>)>,
}

impl OwnClickHouse {
    fn start(listen: &str, replicas: Option<usize>) -> Result<OwnClickHouse> {
        let xtask = std::env::var_os("SPOOL_TORTURE_XTASK").context(
            "SPOOL_TORTURE_XTASK is not set: run the two-node pass through `cargo xtask torture \
             --lease-netns`, which starts its ClickHouse",
        )?;
        let mut cmd = Command::new(&xtask);
        cmd.args(["servers", "clickhouse", "--listen", listen]);
        if let Some(n) = replicas {
            cmd.args(["--replicas", &n.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {xtask:?} servers clickhouse"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().context("xtask's stdout")?;
        let mut vars = BTreeMap::new();
        let wanted: &[&str] = match replicas {
            None => &["SPOOL_TEST_CLICKHOUSE_HTTP"],
            Some(_) => &[
                "SPOOL_TEST_CLICKHOUSE_REPLICAS",
                "SPOOL_TEST_CLICKHOUSE_CLUSTER",
                "SPOOL_TEST_CLICKHOUSE_REPLICA_CONFIGS",
            ],
        };
        for line in BufReader::new(stdout).lines() {
            let line = line.context("reading xtask servers clickhouse")?;
            if let Some((k, v)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) {
                vars.insert(k.to_string(), v.trim_matches('\'').to_string());
            }
            if wanted.iter().all(|w| vars.contains_key(*w)) {
                break;
            }
        }
        let var = |k: &str| {
            vars.get(k)
                .cloned()
                .with_context(|| format!("xtask servers clickhouse printed no {k}"))
        };
        let (ports, cluster) = match replicas {
            None => (
                vec![crate::port_of(&var("SPOOL_TEST_CLICKHOUSE_HTTP")?)?],
                None,
            ),
            Some(_) => {
                // clickhouse://127.0.0.1:P1,127.0.0.1:P2,.../default
                let url = var("SPOOL_TEST_CLICKHOUSE_REPLICAS")?;
                let hosts = url
                    .strip_prefix("clickhouse://")
                    .and_then(|r| r.split('/').next())
                    .with_context(|| format!("no hosts in {url}"))?;
                let ports = hosts
                    .split(',')
                    .map(crate::port_of)
                    .collect::<Result<Vec<u16>>>()?;
                let configs = var("SPOOL_TEST_CLICKHOUSE_REPLICA_CONFIGS")?
                    .split(',')
                    .map(PathBuf::from)
                    .collect();
                (
                    ports,
                    Some((var("SPOOL_TEST_CLICKHOUSE_CLUSTER")?, configs)),
                )
            }
        };
        Ok(OwnClickHouse {
            child,
            stdin,
            ports,
            cluster,
        })
    }
}

impl Drop for OwnClickHouse {
    fn drop(&mut self) {
        drop(self.stdin.take()); // xtask stops the server and removes its state
        let until = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child killed (SIGKILL) and reaped on drop.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One replica of the replicated variant: its `config.xml` (its pid is in
/// `clickhouse.pid` beside it), and the server this pass started again
/// after killing it (xtask stops whatever the pid file names).
struct Replica {
    config: PathBuf,
    restarted: Option<Kid>,
}

impl Replica {
    fn dir(&self) -> &Path {
        self.config.parent().unwrap_or(Path::new("."))
    }

    fn pid(&self) -> Result<i32> {
        let file = self.dir().join("clickhouse.pid");
        std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("{} holds no pid", file.display()))
    }

    fn signal(&self, sig: nix::sys::signal::Signal) -> Result<()> {
        let pid = self.pid()?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)
            .with_context(|| format!("sending {sig} to replica pid {pid}"))
    }

    /// Kills the replica (SIGKILL), reaping it if this pass started it.
    fn kill(&mut self) -> Result<()> {
        self.signal(nix::sys::signal::Signal::SIGKILL)?;
        drop(self.restarted.take());
        Ok(())
    }

    /// Fails, naming the replica's log and its last error, when its
    /// server is gone (no process, or a zombie) while nothing here
    /// stopped it.
    fn check_running(&self) -> Result<()> {
        let pid = self.pid()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
        if matches!(state, None | Some('Z' | 'X')) {
            bail!(
                "replica {} (pid {pid}) is not running; its log ends: {}",
                self.dir().display(),
                self.last_error()
            );
        }
        Ok(())
    }

    /// The last `<Error>` line of the replica's error log.
    fn last_error(&self) -> String {
        let log = self.dir().join("log/clickhouse-server.err.log");
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .rev()
            .find(|l| l.contains("<Error>"))
            .unwrap_or("(no error logged)")
            .chars()
            .take(400)
            .collect()
    }

    /// Watches the server this pass started again: still running (or
    /// none), `Ok(false)`. Exited because 18.16 would not attach a table
    /// whose local parts "don't look like the set of parts in ZooKeeper"
    /// (a part the kill left on disk that never reached ZooKeeper, so
    /// never confirmed, outweighs a small table's rows): started again
    /// with `flags/force_restore_data`, as ClickHouse's replication docs
    /// tell an operator (the server detaches those parts and fetches from
    /// its peers), `Ok(true)`. Any other exit fails, naming its log.
    fn watch(&mut self) -> Result<bool> {
        let Some(kid) = self.restarted.as_mut() else {
            return Ok(false);
        };
        let Some(status) = kid.0.try_wait()? else {
            return Ok(false);
        };
        let last = self.last_error();
        if !last.contains("look like the set of parts in ZooKeeper") {
            bail!(
                "replica {} exited {status} after it was started again; its log ends: {last}",
                self.dir().display()
            );
        }
        let flags = self.dir().join("data/flags");
        std::fs::create_dir_all(&flags)?;
        std::fs::write(flags.join("force_restore_data"), "")?;
        self.start_again()?;
        Ok(true)
    }

    /// Starts the killed replica again on its config and data, its pid in
    /// the pid file.
    fn start_again(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir().join("log/stdout.log"))?;
        let child = Command::new("/usr/sbin/clickhouse-server")
            .arg(format!("--config-file={}", self.config.display()))
            .current_dir(self.dir())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting a killed replica again")?;
        std::fs::write(self.dir().join("clickhouse.pid"), child.id().to_string())?;
        // a server this pass started before, killed since: reaped here
        self.restarted = Some(Kid(child));
        Ok(())
    }
}

/// What is done to a replica in a fault window.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ReplicaFault {
    Kill,
    Stall,
}

/// One claim of the lease log.
#[derive(Debug, Clone)]
struct Claim {
    term: u64,
    lease_id: String,
    holder: String,
    acquired: u64,
    expires: u64,
    /// Where it ends: its expiry, or the append of a higher term.
    end: u64,
}

/// One node: its root, its daemon, its producers.
struct Node {
    root: PathBuf,
    daemon: Option<Kid>,
    daemon_starts: u64,
    producers: Vec<(Kid, PathBuf)>,
    /// Daemon pids ever run here.
    pids: BTreeSet<u32>,
}

/// The pass's state.
struct Pass {
    dir: PathBuf,
    bin: PathBuf,
    store_dir: PathBuf,
    catalog: String,
    /// The catalog as the oracle reads it (from the host, on 127.0.0.1).
    catalog_read: Catalog,
    /// Each server's HTTP port on 127.0.0.1 (one, or one per replica).
    ports: Vec<u16>,
    /// The replicas, in the replicated variant.
    replicas: Vec<Replica>,
    env: Vec<(String, String)>,
    nodes: Vec<Node>,
    figures: NetnsFigures,
    problems: Vec<String>,
    produced: u64,
    // keep last: dropped after the processes (fields drop in order)
    net: Net,
}

impl Pass {
    fn dest(&self, i: usize) -> Vec<String> {
        vec![
            "--spool-root".into(),
            self.nodes[i].root.display().to_string(),
            "--store".into(),
            format!("file://{}", self.store_dir.display()),
            "--catalog".into(),
            self.catalog.clone(),
        ]
    }

    fn spawn_daemon(&mut self, i: usize) -> Result<()> {
        let n = self.nodes[i].daemon_starts;
        let log = std::fs::File::create(self.dir.join(format!("daemon-{i}-{n}.log")))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.net.namespaces[i]])
            .arg(&self.bin)
            .arg("run")
            .args(self.dest(i))
            .args(["--lease-ttl", &TTL_S.to_string(), "--poll-interval", "0.2"])
            .args(["--recheck-interval", "0.5", "--max-backoff", "1"])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting a daemon in its namespace")?;
        // `ip netns exec` execs the command: the pid is the daemon's
        self.nodes[i].pids.insert(child.id());
        self.nodes[i].daemon = Some(Kid(child));
        self.nodes[i].daemon_starts += 1;
        Ok(())
    }

    fn spawn_producer(&mut self, i: usize, rng: &mut Rng) -> Result<()> {
        let out = self.dir.join(format!("producer-{}.out", self.produced));
        self.produced += 1;
        let child = Command::new(&self.bin)
            .arg("produce")
            .args(self.dest(i))
            .args(["--packs", &(2 + rng.below(4)).to_string()])
            .args(["--records", &(4 + rng.below(8)).to_string()])
            .args(["--pack-bytes", &(1024 + rng.below(8 * 1024)).to_string()])
            .args(["--pack-interval", &format!("{:.3}", rng.between(0.02, 0.2))])
            .args(["--print-sha256", "--timeout", "20"])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out)?)
            .stderr(Stdio::null())
            .spawn()
            .context("starting a producer")?;
        self.nodes[i].producers.push((Kid(child), out));
        Ok(())
    }

    /// Reaps exited daemons: a latch (exit 7) is counted and restarted,
    /// anything else is a problem (and restarted too, to go on).
    /// [`Replica::watch`] for each replica, counting restores.
    fn watch_replicas(&mut self) -> Result<()> {
        for r in &mut self.replicas {
            if r.watch()? {
                self.figures.replica_restores += 1;
            }
        }
        Ok(())
    }

    fn reap(&mut self) -> Result<()> {
        for i in 0..NODES {
            let status = match self.nodes[i].daemon.as_mut() {
                Some(k) => k.0.try_wait()?,
                None => None,
            };
            if let Some(st) = status {
                self.nodes[i].daemon = None;
                if st.code() == Some(7) {
                    self.figures.latches += 1;
                } else {
                    self.problems.push(format!(
                        "node {i}'s daemon exited {st} (see {}/daemon-{i}-{}.log)",
                        self.dir.display(),
                        self.nodes[i].daemon_starts - 1
                    ));
                }
                self.spawn_daemon(i)?;
            }
        }
        Ok(())
    }

    /// Every claim of the lease both nodes compete for (`lease_scope =
    /// catalog`: its name is the catalog key, the directory under each
    /// node's root), by term.
    fn claims(&self) -> Result<Vec<Claim>> {
        let key = crate::read_dir(&self.nodes[0].root)
            .into_iter()
            .find_map(|d| {
                let name = d.file_name()?.to_str()?.to_string();
                spool_core::layout::is_catalog_key(&name).then_some(name)
            });
        let Some(key) = key else {
            return Ok(Vec::new()); // nothing started there yet
        };
        let log = self
            .catalog_read
            .lease_log(&spool_catalog::catalog_lease_name(&key))?;
        Ok(log
            .into_iter()
            .map(|r| Claim {
                term: r.term,
                lease_id: r.lease_id.to_string(),
                holder: r.holder,
                acquired: r.acquired_at_ms,
                expires: r.expires_at_ms,
                end: r.expires_at_ms,
            })
            .collect())
    }

    /// The node whose daemon wrote this holder string (`host:pid:dir`).
    fn node_of_holder(&self, holder: &str) -> Option<usize> {
        let dir = holder.splitn(3, ':').nth(2)?;
        (0..NODES).find(|&i| Path::new(dir).starts_with(&self.nodes[i].root))
    }

    /// The node holding the lease now (the sole, live head claim).
    fn holder_now(&self) -> Result<Option<usize>> {
        let claims = self.claims()?;
        let Some(top) = claims.last().map(|c| c.term) else {
            return Ok(None);
        };
        let head: Vec<&Claim> = claims.iter().filter(|c| c.term == top).collect();
        Ok(match head.as_slice() {
            [c] if c.expires > now_ms() => self.node_of_holder(&c.holder),
            _ => None,
        })
    }

    fn backlog(&self, i: usize) -> usize {
        let mut files = Vec::new();
        walk_files(&self.nodes[i].root, &mut files);
        files
            .iter()
            .filter(|f| !f.to_string_lossy().ends_with(".owner.lock"))
            .count()
    }
}

/// Why the pass cannot run here (not root, no iproute2, no network
/// namespaces), or `None` when it can.
pub fn unavailable() -> Option<String> {
    let uid = nix::unistd::geteuid();
    if !uid.is_root() {
        return Some(format!(
            "network namespaces need root (effective uid {uid}); run as root (CI does)"
        ));
    }
    if !Path::new("/proc/self/ns/net").exists() {
        return Some("this kernel has no network namespaces (/proc/self/ns/net)".into());
    }
    for tool in ["ip", "bridge"] {
        let ok = Command::new(tool)
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Some(format!(
                "`{tool}` (iproute2) is not installed: apt-get install iproute2"
            ));
        }
    }
    None
}

/// Runs a pass of `secs` seconds of faults with `seed`; fails if a rule
/// broke (after printing the seed and the command). Skips (Ok, `None`),
/// saying why, when [`unavailable`], and fails then under
/// `SPOOL_REQUIRE_ALL=1` ([`spool_tests::required`]), as CI sets.
pub fn lease_netns(
    bin: &Path,
    seed: u64,
    secs: f64,
    replicas: Option<usize>,
) -> Result<Option<NetnsFigures>> {
    if let Some(why) = unavailable() {
        eprintln!("torture --lease-netns: SKIPPED: {why}");
        spool_tests::required(
            false,
            "root, iproute2 and network namespaces (torture --lease-netns)",
        );
        return Ok(None);
    }
    let on = replicas.map_or("one ClickHouse".to_string(), |n| format!("{n} replicas"));
    eprintln!("torture --lease-netns: seed {seed}, {secs} s of faults, on {on}");
    let net = Net::up().context("setting up the namespaces (root, iproute2)")?;
    let work = crate::target_dir()?.join(format!("xtask/lease-netns-{seed}"));
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(work.join("bin"))?;
    let own_bin = work.join("bin/spool");
    std::fs::copy(bin, &own_bin).with_context(|| format!("copying {} (built?)", bin.display()))?;
    let ch = OwnClickHouse::start(&net.host_addr, replicas)?;
    let db = format!("lease_netns_{seed}");
    // the nodes reach every server on the bridge's address, the oracle on
    // loopback; replicated, both URLs name every replica and the cluster
    let hosts = |addr: &str| {
        ch.ports
            .iter()
            .map(|p| format!("{addr}:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let cluster = ch
        .cluster
        .as_ref()
        .map(|(c, _)| format!("?cluster={c}"))
        .unwrap_or_default();
    let store_dir = work.join("store");
    std::fs::create_dir_all(&store_dir)?;
    let mut nodes = Vec::new();
    for i in 0..NODES {
        let r = work.join(format!("node{i}/spool"));
        std::fs::create_dir_all(&r)?;
        nodes.push(Node {
            root: r,
            daemon: None,
            daemon_starts: 0,
            producers: Vec::new(),
            pids: BTreeSet::new(),
        });
    }
    let mut pass = Pass {
        catalog: format!("clickhouse://{}/{db}{cluster}", hosts(&net.host_addr)),
        catalog_read: Catalog::open(&format!(
            "clickhouse://{}/{db}{cluster}",
            hosts("127.0.0.1")
        ))?,
        dir: work.clone(),
        bin: own_bin,
        store_dir,
        ports: ch.ports.clone(),
        replicas: ch
            .cluster
            .iter()
            .flat_map(|(_, configs)| configs)
            .map(|c| Replica {
                config: c.clone(),
                restarted: None,
            })
            .collect(),
        env: vec![
            ("RUST_LOG".into(), "warn".into()),
            ("SPOOL_LEASE_SCOPE".into(), "catalog".into()),
            (
                "SPOOL_STAGING_MAX_AGE".into(),
                crate::STAGING_MAX_AGE.into(),
            ),
            (
                "SPOOL_STOP_FLUSH_TIMEOUT".into(),
                crate::STOP_FLUSH_TIMEOUT.into(),
            ),
            (
                "SPOOL_CLIENT_REQUEST_TIMEOUT".into(),
                crate::CLIENT_REQUEST_TIMEOUT.into(),
            ),
            (
                "SPOOL_CATALOG_REQUEST_TIMEOUT".into(),
                crate::CATALOG_REQUEST_TIMEOUT.into(),
            ),
        ],
        nodes,
        figures: NetnsFigures::default(),
        problems: Vec::new(),
        produced: 0,
        net,
    };
    let result = drive(&mut pass, seed, secs);
    // the processes first (their namespaces go when `pass` drops); a
    // replica stopped when a failure cut the schedule short goes on, so
    // xtask's SIGTERM stops it
    for n in &mut pass.nodes {
        n.daemon = None;
        n.producers.clear();
    }
    for r in &pass.replicas {
        let _ = r.signal(nix::sys::signal::Signal::SIGCONT);
    }
    let restarted: Vec<Kid> = pass
        .replicas
        .iter_mut()
        .filter_map(|r| r.restarted.take())
        .collect();
    let figures = pass.figures.clone();
    let problems = std::mem::take(&mut pass.problems);
    if result.is_err() || !problems.is_empty() {
        // the replicas' state goes with xtask: their logs stay with the run
        for (i, r) in pass.replicas.iter().enumerate() {
            keep_logs(&r.dir().join("log"), &work.join(format!("replica{i}-log")));
        }
    }
    drop(pass);
    // xtask stops the servers the pid files name (restarted ones too),
    // then this pass reaps the ones it started
    drop(ch);
    drop(restarted);
    result.with_context(|| format!("the run's files are in {}", work.display()))?;
    eprintln!("torture --lease-netns: {}", figures.line());
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("torture --lease-netns: FAIL: {p}");
        }
        bail!(
            "torture --lease-netns: seed {seed} broke {} rule(s); reproduce with \
             `cargo xtask torture --lease-netns{} --seed {seed} --minutes {:.2}`; the run's files are in {}",
            problems.len(),
            if replicas.is_some() { " --replicas" } else { "" },
            secs / 60.0,
            work.display()
        );
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(Some(figures))
}

/// Copies the files of `from` into `to` (best effort: a failing pass's
/// post-mortem).
fn keep_logs(from: &Path, to: &Path) {
    let _ = std::fs::create_dir_all(to);
    for e in std::fs::read_dir(from).into_iter().flatten().flatten() {
        let _ = std::fs::copy(e.path(), to.join(e.file_name()));
    }
}

/// The schedule, the drain and the oracle.
fn drive(p: &mut Pass, seed: u64, secs: f64) -> Result<()> {
    let mut rng = Rng(seed);
    for i in 0..NODES {
        p.spawn_daemon(i)?;
    }
    // (node, start ms, end ms) of every fault window
    let mut windows: Vec<(usize, u64, u64)> = Vec::new();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut next_producer = Instant::now();
    let mut fault: Option<(usize, Instant)> = None;
    let mut next_fault = Instant::now() + Duration::from_secs_f64(rng.between(2.0, 4.0));
    // one replica at a time (a quorum of 2 of 3 stays): (replica, what, until)
    let mut rfault: Option<(usize, ReplicaFault, Instant)> = None;
    let mut next_rfault = Instant::now() + Duration::from_secs_f64(rng.between(3.0, 6.0));
    while Instant::now() < end || fault.is_some() || rfault.is_some() {
        p.reap()?;
        p.watch_replicas()?;
        let now = Instant::now();
        match rfault {
            Some((r, what, until)) if now >= until => {
                match what {
                    ReplicaFault::Kill => p.replicas[r].start_again()?,
                    ReplicaFault::Stall => {
                        p.replicas[r].signal(nix::sys::signal::Signal::SIGCONT)?
                    }
                }
                rfault = None;
                next_rfault = now + Duration::from_secs_f64(rng.between(2.0, 5.0));
            }
            None if !p.replicas.is_empty() && now >= next_rfault && now < end => {
                let r = rng.below(p.replicas.len() as u64) as usize;
                let what = if rng.chance(0.5) {
                    p.replicas[r].kill()?;
                    p.figures.replica_kills += 1;
                    ReplicaFault::Kill
                } else {
                    p.replicas[r].signal(nix::sys::signal::Signal::SIGSTOP)?;
                    p.figures.replica_stalls += 1;
                    ReplicaFault::Stall
                };
                // longer than the replicas' ZooKeeper session (3 s): a
                // killed one starts again only once its session lapsed
                let len = rng.between(4.0, 8.0);
                rfault = Some((r, what, now + Duration::from_secs_f64(len)));
            }
            _ => {}
        }
        if now >= next_producer && now < end {
            let i = rng.below(NODES as u64) as usize;
            p.spawn_producer(i, &mut rng)?;
            next_producer = now + Duration::from_secs_f64(rng.between(0.3, 1.2));
        }
        match fault {
            Some((i, until)) if now >= until => {
                p.net.restore(i)?;
                if let Some(w) = windows.last_mut() {
                    w.2 = now_ms();
                }
                fault = None;
                next_fault = now + Duration::from_secs_f64(rng.between(2.0, 5.0));
            }
            None if now >= next_fault && now < end => {
                if let Some(i) = p.holder_now()? {
                    let stall = rng.chance(0.5);
                    p.net.fail(i, stall)?;
                    if stall {
                        p.figures.stalls += 1;
                    } else {
                        p.figures.cuts += 1;
                    }
                    let len = TTL_S as f64 + rng.between(1.0, 4.0);
                    windows.push((i, now_ms(), u64::MAX));
                    fault = Some((i, now + Duration::from_secs_f64(len)));
                } else {
                    next_fault = now + Duration::from_millis(500);
                }
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // drain: producers done, daemons stopped (they release), then each
    // node's `spool run --once` in turn
    for n in &mut p.nodes {
        for (k, _) in &mut n.producers {
            let _ = k.0.wait();
        }
    }
    for i in 0..NODES {
        if let Some(k) = &p.nodes[i].daemon {
            let _ = Command::new("kill")
                .args(["-TERM", &k.0.id().to_string()])
                .status();
        }
    }
    let until = Instant::now() + Duration::from_secs(20);
    for i in 0..NODES {
        if let Some(mut k) = p.nodes[i].daemon.take() {
            while k.0.try_wait()?.is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
            }
            match k.0.try_wait()? {
                Some(st) if st.success() => {}
                Some(st) if st.code() == Some(7) => p.figures.latches += 1,
                st => p.problems.push(format!("node {i}'s daemon's stop: {st:?}")),
            }
        }
    }
    for i in 0..NODES {
        let out = Command::new("ip")
            .args(["netns", "exec", &p.net.namespaces[i]])
            .arg(&p.bin)
            .args(["run", "--once", "--timeout", "60"])
            .args(p.dest(i))
            .args(["--lease-ttl", &TTL_S.to_string(), "--poll-interval", "0.2"])
            .args(["--recheck-interval", "0.5", "--max-backoff", "1"])
            .envs(p.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .context("running the final spool run --once")?;
        if !out.status.success() {
            p.problems.push(format!(
                "node {i}'s final `spool run --once` exited {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    oracle(p, &windows)
}

/// Waits (up to 120 s) until every replica holds the same raw rows of
/// the packs and lease tables (the oracle reads one replica's raw rows);
/// one server: at once. Fails at once, naming its log, when a replica's
/// server is gone.
fn converge(p: &mut Pass) -> Result<()> {
    if p.ports.len() < 2 {
        return Ok(());
    }
    let packs = destination::packs_table(p.catalog_read.url())?;
    let lease = packs.replace("packs`", "lease`");
    let sql = format!(
        "SELECT (SELECT count() FROM {packs}), (SELECT count() FROM {lease}) FORMAT TabSeparated"
    );
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let counts: Vec<String> = p
            .ports
            .iter()
            .map(|&port| {
                destination::clickhouse_text(port, &sql).unwrap_or_else(|e| format!("{e:#}"))
            })
            .collect();
        if counts.windows(2).all(|w| w[0] == w[1]) {
            return Ok(());
        }
        p.watch_replicas()?;
        for r in &p.replicas {
            r.check_running()?;
        }
        if Instant::now() > until {
            bail!("the replicas did not converge within 120 s: {counts:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn oracle(p: &mut Pass, windows: &[(usize, u64, u64)]) -> Result<()> {
    converge(p)?;
    // what the producers reported, by node
    let mut reported: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for (i, n) in p.nodes.iter().enumerate() {
        for (_, out) in &n.producers {
            for l in std::fs::read_to_string(out).unwrap_or_default().lines() {
                let mut w = l.split_whitespace();
                if let (Some(id), Some(sha)) = (w.next(), w.next()) {
                    reported.insert(id.into(), (sha.into(), i));
                }
            }
        }
    }
    p.figures.packs = reported.len() as u64;
    let claims = p.claims()?;
    let packs = destination::packs_table(p.catalog_read.url())?;
    // for a failing pass's post-mortem (the directory is kept then; the
    // database goes with ClickHouse)
    let mut record = String::from("# fault windows: node from_ms to_ms\n");
    for (node, from, to) in windows {
        record.push_str(&format!("{node} {from} {to}\n"));
    }
    record.push_str("# claims: term lease_id holder acquired_ms expires_ms\n");
    for c in &claims {
        record.push_str(&format!(
            "{} {} {} {} {}\n",
            c.term, c.lease_id, c.holder, c.acquired, c.expires
        ));
    }
    let rows_ms = destination::clickhouse_text(
        p.ports[0],
        &format!("SELECT indexed_at_ms, count() FROM {packs} GROUP BY indexed_at_ms ORDER BY indexed_at_ms FORMAT TabSeparated"),
    )?;
    record.push_str("# rows: indexed_at_ms count\n");
    record.push_str(&rows_ms);
    std::fs::write(p.dir.join("oracle.txt"), record)?;
    // held claims: the sole claim at its term, not a tombstone
    let mut per_term: BTreeMap<u64, Vec<&Claim>> = BTreeMap::new();
    for c in &claims {
        per_term.entry(c.term).or_default().push(c);
    }
    // a claim ends at its expiry or when a higher term is appended (a
    // renewal, a successor, a release's tombstone), whichever is first:
    // the fence reads the head only
    let superseded = |term: u64| {
        claims
            .iter()
            .filter(|c| c.term > term)
            .map(|c| c.acquired)
            .min()
            .unwrap_or(u64::MAX)
    };
    // A contested term (two claims at one term): at most one claimant read
    // its claim back alone (sequential reads see every quorum-confirmed
    // claim), and it held the term until the other's claim landed, within
    // the clock's second. Each claim of a contested term is a candidate
    // holding; rows of two nodes inside one contested term are a breach.
    let mut contested_terms = BTreeSet::new();
    let ended: Vec<Claim> = per_term
        .values()
        .flat_map(|v| {
            if v.len() > 1 {
                contested_terms.insert(v[0].term);
            }
            v.iter()
                .filter(|c| c.expires > c.acquired)
                .map(|c| Claim {
                    end: c.expires.min(superseded(c.term)),
                    ..(*c).clone()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let held: Vec<(&Claim, Option<usize>)> = ended
        .iter()
        .map(|c| (c, p.node_of_holder(&c.holder)))
        .collect();
    let contested = |c: &Claim| contested_terms.contains(&c.term);
    // the nodes with rows in each contested term's candidate holdings
    let mut contested_rows: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut overlaps = 0;
    // (1) holdings never overlap
    for (a, _) in &held {
        for (b, _) in &held {
            let one_contest = a.term == b.term && contested(a);
            if a.lease_id < b.lease_id
                && !one_contest
                && a.acquired.max(b.acquired) + CLOCK_MS < a.end.min(b.end)
            {
                overlaps += 1;
                problems.push(format!(
                    "claims overlap: term {} ({}) [{}, {}] and term {} ({}) [{}, {}]",
                    a.term,
                    a.holder,
                    a.acquired,
                    a.expires,
                    b.term,
                    b.holder,
                    b.acquired,
                    b.expires
                ));
            }
        }
    }
    let mut handovers = 0;
    for w in held.windows(2) {
        if w[0].1 != w[1].1 {
            handovers += 1;
        }
    }
    p.figures.handovers = handovers;
    // (2) every raw row inside its node's claim, outside the others'
    let rows = destination::clickhouse_text(
        p.ports[0],
        &format!("SELECT pack_id, indexed_at_ms FROM {packs} FORMAT TabSeparated"),
    )?;
    let mut nrows = 0;
    let mut last_row: Vec<Vec<u64>> = vec![Vec::new(); NODES];
    for l in rows.lines() {
        let mut f = l.split('\t');
        let (Some(id), Some(t)) = (f.next(), f.next()) else {
            continue;
        };
        let t: u64 = t.parse()?;
        nrows += 1;
        let Some((_, node)) = reported.get(id) else {
            problems.push(format!("row of pack {id} that no producer reported"));
            continue;
        };
        last_row[*node].push(t);
        let owns = |c: &Claim| {
            c.acquired <= t && t <= c.end + CLOCK_MS && t + FENCE_MARGIN_MS < c.expires + CLOCK_MS
        };
        let own = held.iter().any(|(c, n)| *n == Some(*node) && owns(c));
        for (c, _) in held
            .iter()
            .filter(|(c, n)| *n == Some(*node) && contested(c) && owns(c))
        {
            contested_rows.entry(c.term).or_default().insert(*node);
        }
        let foreign: Vec<&Claim> = held
            .iter()
            .filter(|(c, n)| {
                *n != Some(*node) && !contested(c) && c.acquired + CLOCK_MS <= t && t < c.end
            })
            .map(|(c, _)| *c)
            .collect();
        if !own || !foreign.is_empty() {
            overlaps += 1;
            problems.push(format!(
                "pack {id} of node {node} indexed at {t} ms {}{}",
                if own {
                    ""
                } else {
                    "outside every claim of its node's daemon; "
                },
                foreign
                    .iter()
                    .map(|c| format!(
                        "while term {} of {} held [{}, {}]",
                        c.term, c.holder, c.acquired, c.expires
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    for (term, nodes) in &contested_rows {
        if nodes.len() > 1 {
            overlaps += 1;
            problems.push(format!(
                "nodes {nodes:?} both indexed in contested term {term}: only one claimant can have read its claim back alone"
            ));
        }
    }
    p.figures.rows = nrows;
    // (3) a faulted node's last write in its window, from the window's
    // start. A row's clock is the second it was written in (floored), so
    // only a row stamped a whole second before the restore was certainly
    // written inside the window; one stamped later may be the node's first
    // write after its link came back.
    for &(node, from, to) in windows {
        if let Some(t) = last_row[node]
            .iter()
            .filter(|&&t| t >= from && t.saturating_add(CLOCK_MS) <= to)
            .max()
        {
            let after = t - from;
            p.figures.longest_write_after_fault_ms =
                p.figures.longest_write_after_fault_ms.max(after);
            if after > TTL_S * 1000 + CLOCK_MS {
                problems.push(format!(
                    "node {node} indexed at {t} ms (the catalog's second), {after} ms after its link \
                     failed at {from} ms (restored at {to} ms; bound: TTL {TTL_S} s + 1 s)"
                ));
            }
        }
    }
    // (4) every reported pack: in the store with its checksum, indexed once
    let mut as_read: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for row in p.catalog_read.rows()? {
        as_read
            .entry(row.pack_id)
            .or_default()
            .push((row.sha256, row.object_key));
    }
    for (id, (sha, node)) in &reported {
        match as_read.get(id).map(Vec::as_slice) {
            None | Some([]) => problems.push(format!("pack {id} of node {node} is not indexed")),
            Some([(s, key)]) => {
                if s != sha {
                    problems.push(format!(
                        "pack {id} is indexed with sha256 {s}, reported {sha}"
                    ));
                }
                let bytes = std::fs::read(p.store_dir.join(key)).unwrap_or_default();
                if pack_checksum(&bytes).as_deref() != Some(sha.as_str()) {
                    problems.push(format!(
                        "pack {id}'s object {key} is missing or not its checksum {sha}"
                    ));
                }
            }
            Some(more) => {
                problems.push(format!("pack {id} is indexed {} times as read", more.len()))
            }
        }
    }
    for i in 0..NODES {
        let left = p.backlog(i);
        if left > 0 {
            problems.push(format!(
                "node {i} left {left} file(s) under {}",
                p.nodes[i].root.display()
            ));
        }
    }
    p.figures.overlaps = overlaps;
    p.problems.extend(problems);
    Ok(())
}
