//! Three ClickHouse 18.16 replicas of one shard and a ZooKeeper on
//! loopback: the replicated catalog of the `real_replicated` tests.
//!
//! ZooKeeper (`zookeeper.rs`) is waited for first (an 18.16 server started
//! before it answers may die of SIGSEGV in `zkutil::ZooKeeper::createImpl`
//! after answering `SELECT 1`); then the three servers (`clickhouse.rs`'s
//! `launch`, under `target/xtask/clickhouse-rN/`) start at once, each ready
//! once it reads `system.zookeeper`. Each
//! replica's config adds the cluster [`CLUSTER`] (one shard, the three
//! native ports, `internal_replication`), its `shard`/`replica` macros,
//! its own `interserver_http_port` on 127.0.0.1, the ZooKeeper node (3 s
//! sessions, so a killed replica counts as gone within seconds), the
//! `ON CLUSTER` DDL queue, and small background pools (2 threads each).
//!
//! Environment for the tests: `SPOOL_TEST_CLICKHOUSE_REPLICAS`
//! (`clickhouse://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/default`),
//! `SPOOL_TEST_CLICKHOUSE_CLUSTER`, and
//! `SPOOL_TEST_CLICKHOUSE_REPLICA_CONFIGS` (the three `config.xml` paths,
//! comma-separated; each server's pid is in `clickhouse.pid` beside its
//! config), so a test can kill a replica and start it again.

use super::clickhouse::{install_if_missing, launch, wait_ready};
use super::zookeeper;
use super::{free_port, ServerProcess};
use anyhow::Result;
use std::path::Path;

/// The cluster's name in every replica's `<remote_servers>`.
pub const CLUSTER: &str = "spool_test";

/// How many replicas the tests' group runs.
pub const REPLICAS: usize = 3;

/// Starts ZooKeeper and [`REPLICAS`] replicas, and waits for all of them.
pub fn start(root: &Path) -> Result<Vec<ServerProcess>> {
    start_named(root, REPLICAS, "", &[])
}

/// [`start`] with `replicas` replicas of the one shard (the fleet
/// simulator's `--replicas N`), every state directory's name prefixed by
/// `prefix` (`<prefix>zookeeper`, `<prefix>clickhouse-rN`: a torture
/// pass's own, beside the group `cargo xtask servers up` runs) and each
/// replica listening also on `extra_hosts` (a bridge's address that
/// network namespaces reach; ZooKeeper and the replicas' own traffic stay
/// on loopback).
pub fn start_named(
    root: &Path,
    replicas: usize,
    prefix: &str,
    extra_hosts: &[String],
) -> Result<Vec<ServerProcess>> {
    let began = std::time::Instant::now();
    install_if_missing()?;
    let zk = zookeeper::launch(root, &format!("{prefix}zookeeper"))?;
    zookeeper::wait(root, &format!("{prefix}zookeeper"), zk.port)?;
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < 3 * replicas {
        let p = free_port()?;
        if !ports.contains(&p) && p != zk.port {
            ports.push(p);
        }
    }
    let (http, rest) = ports.split_at(replicas);
    let (tcp, inter) = rest.split_at(replicas);
    let shard: String = tcp
        .iter()
        .map(|p| format!("<replica><host>127.0.0.1</host><port>{p}</port></replica>"))
        .collect();
    let mut processes = vec![zk.process];
    let mut configs = Vec::new();
    for i in 0..replicas {
        let extra = format!(
            "    <interserver_http_port>{}</interserver_http_port>\n    <interserver_http_host>127.0.0.1</interserver_http_host>\n    <zookeeper><node><host>127.0.0.1</host><port>{}</port></node><session_timeout_ms>3000</session_timeout_ms></zookeeper>\n    <remote_servers><{CLUSTER}><shard><internal_replication>true</internal_replication>{shard}</shard></{CLUSTER}></remote_servers>\n    <macros><shard>01</shard><replica>r{}</replica></macros>\n    <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>\n    <background_pool_size>2</background_pool_size>\n    <background_schedule_pool_size>2</background_schedule_pool_size>\n",
            inter[i],
            zk.port,
            i + 1
        );
        let (mut process, dir) = launch(
            root,
            &format!("{prefix}clickhouse-r{}", i + 1),
            extra_hosts,
            (http[i], tcp[i]),
            &extra,
        )?;
        process.name = "clickhouse replica";
        process.env.clear();
        processes.push(process);
        configs.push(dir.join("config.xml").display().to_string());
    }
    let hosts: Vec<String> = http.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    for (i, port) in http.iter().enumerate() {
        let dir = root.join(format!("target/xtask/{prefix}clickhouse-r{}", i + 1));
        wait_ready(*port, &dir)?;
        let sql = b"SELECT count() FROM system.zookeeper WHERE path = '/'";
        super::wait_until("system.zookeeper", &hosts[i], &dir.join("log"), || {
            matches!(super::http(*port, "POST", "/", "", sql), Ok((200, _)))
        })?;
    }
    processes[0].env.extend(
        [
            (
                "SPOOL_TEST_CLICKHOUSE_REPLICAS",
                format!("clickhouse://{}/default", hosts.join(",")),
            ),
            ("SPOOL_TEST_CLICKHOUSE_CLUSTER", CLUSTER.into()),
            ("SPOOL_TEST_CLICKHOUSE_REPLICA_CONFIGS", configs.join(",")),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    eprintln!(
        "xtask: ZooKeeper on 127.0.0.1:{} and {replicas} ClickHouse replicas of cluster {CLUSTER} on {}, up in {:.1} s",
        zk.port,
        hosts.join(", "),
        began.elapsed().as_secs_f64()
    );
    Ok(processes)
}
