//! Debian's `clickhouse-server` (ClickHouse 18.16) on loopback for the
//! `real_*` tests.
//!
//! Installed with apt when `/usr/sbin/clickhouse-server` is missing (CI runs
//! as root on a fresh Debian machine), configured under
//! `target/xtask/clickhouse/` (config.xml with the `<yandex>` root this
//! version wants, users.xml with a password-less `default` user limited to
//! loopback), started on two free loopback ports (HTTP, and its own native
//! `tcp_port` so it never takes 9000), and reported ready once `SELECT 1`
//! answers over HTTP. The tests read `SPOOL_TEST_CLICKHOUSE_URL`
//! (`clickhouse://127.0.0.1:PORT/default`; each test makes and drops its own
//! database) and `SPOOL_TEST_CLICKHOUSE_HTTP` (`http://127.0.0.1:PORT`).
//! [`super::ServerProcess`] stops it with SIGTERM on drop.

use super::{free_port, ServerProcess};
use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

const SERVER: &str = "/usr/sbin/clickhouse-server";

/// Installs ClickHouse if missing and starts it under `<root>/target/xtask/clickhouse`.
pub fn start(root: &Path) -> Result<ServerProcess> {
    start_on(root, "clickhouse", &[])
}

/// [`start`] with its state under `<root>/target/xtask/<name>` (the
/// torture's or the fleet's own, so it never clears the directory of a
/// server that `cargo xtask servers up` runs beside it), listening also on
/// each of `extra_hosts` (addresses of this host, e.g. a bridge's that
/// network namespaces reach), with the password-less `default` user
/// allowed from each one's /24 too.
pub fn start_on(root: &Path, name: &str, extra_hosts: &[String]) -> Result<ServerProcess> {
    install_if_missing()?;
    let http_port = free_port()?;
    let mut tcp_port = free_port()?;
    while tcp_port == http_port {
        tcp_port = free_port()?;
    }
    let (process, dir) = launch(root, name, extra_hosts, (http_port, tcp_port), "")?;
    let d = dir.display();
    // `process` is dropped (SIGTERM) if the wait fails.
    wait_ready(http_port, &dir)?;
    eprintln!(
        "xtask: clickhouse-server up on 127.0.0.1:{http_port} (native {tcp_port}), data in {d}"
    );
    Ok(process)
}

/// Writes a fresh `<root>/target/xtask/<name>/` (config.xml with
/// `extra_config` spliced into its `<yandex>`, users.xml) and starts
/// clickhouse-server on it, its pid written to `clickhouse.pid` there,
/// without waiting for it to answer. Returns the process (which also
/// stops a server restarted from the same pid file) and the directory.
pub fn launch(
    root: &Path,
    name: &str,
    extra_hosts: &[String],
    (http_port, tcp_port): (u16, u16),
    extra_config: &str,
) -> Result<(ServerProcess, PathBuf)> {
    let dir = root.join("target/xtask").join(name);
    // A previous run's data would only slow the start and may hold a
    // different schema; every run starts from nothing.
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("could not clear {}", dir.display()))?;
    }
    for sub in ["data", "tmp", "user_files", "format_schemas", "log"] {
        std::fs::create_dir_all(dir.join(sub))
            .with_context(|| format!("could not create {}", dir.join(sub).display()))?;
    }
    let d = dir.display();
    let listen: String = std::iter::once("127.0.0.1")
        .chain(extra_hosts.iter().map(String::as_str))
        .map(|h| format!("    <listen_host>{h}</listen_host>\n"))
        .collect();
    let networks: String = extra_hosts
        .iter()
        .map(|h| format!("                <ip>{h}/24</ip>\n"))
        .collect();
    let config = format!(
        r#"<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>{d}/log/clickhouse-server.log</log>
        <errorlog>{d}/log/clickhouse-server.err.log</errorlog>
        <size>10M</size>
        <count>2</count>
    </logger>
{listen}    <http_port>{http_port}</http_port>
    <tcp_port>{tcp_port}</tcp_port>
    <max_connections>256</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>100</max_concurrent_queries>
    <mark_cache_size>53687091</mark_cache_size>
    <path>{d}/data/</path>
    <tmp_path>{d}/tmp/</tmp_path>
    <user_files_path>{d}/user_files/</user_files_path>
    <format_schema_path>{d}/format_schemas/</format_schema_path>
    <users_config>{d}/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
{extra_config}</yandex>
"#
    );
    let users = format!(
        r#"<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>2000000000</max_memory_usage>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>127.0.0.1</ip>
                <ip>::1</ip>
{networks}            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
"#
    );
    std::fs::write(dir.join("config.xml"), config)?;
    std::fs::write(dir.join("users.xml"), users)?;
    let log = std::fs::File::create(dir.join("log/stdout.log"))?;
    let pid_file = dir.join("clickhouse.pid");
    let child = Command::new(SERVER)
        .arg(format!("--config-file={d}/config.xml"))
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("could not start {SERVER}"))?;
    // The server writes no pid file outside daemon mode: this one is ours
    // (and a test's that starts the server again).
    std::fs::write(&pid_file, child.id().to_string())
        .with_context(|| format!("could not write {}", pid_file.display()))?;
    let process = ServerProcess {
        name: "clickhouse",
        child,
        env: vec![
            (
                "SPOOL_TEST_CLICKHOUSE_URL".into(),
                format!("clickhouse://127.0.0.1:{http_port}/default"),
            ),
            (
                "SPOOL_TEST_CLICKHOUSE_HTTP".into(),
                format!("http://127.0.0.1:{http_port}"),
            ),
        ],
        pid_file: Some(super::PidFile {
            path: pid_file,
            program: "clickhouse-server",
        }),
    };
    Ok((process, dir))
}

/// Installs Debian's clickhouse-server when it is missing.
pub fn install_if_missing() -> Result<()> {
    crate::apt_install(&["clickhouse-server"], || Path::new(SERVER).exists())
}

/// Polls `SELECT 1` over plain HTTP until it answers `1`, failing after
/// 30 s naming the server's log directory `dir/log`.
pub fn wait_ready(port: u16, dir: &Path) -> Result<()> {
    let addr = format!("127.0.0.1:{port}");
    super::wait_until("clickhouse-server", &addr, &dir.join("log"), || {
        select_one(port).unwrap_or(false)
    })
}

fn select_one(port: u16) -> std::io::Result<bool> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(
        s,
        "GET /?query=SELECT%201 HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    // HTTP/1.0: the server closes after one unchunked answer.
    Ok(out.starts_with("HTTP/1.0 200") && out.trim_end().ends_with("\r\n\r\n1"))
}
