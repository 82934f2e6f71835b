//! The real servers `cargo xtask test` starts, as the tests reach them:
//! moto's S3 server ([`moto`], [`s3_object_store`], [`s3_store`]) and
//! ClickHouse ([`fresh_clickhouse`]: a database of the test's own, dropped
//! afterwards).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::{BackoffConfig, ClientOptions, RetryConfig};
use spool_catalog::{CatalogUrl, ClickHouseCatalog};
use spool_upload::{ClientConfig, Store};

use crate::server_env;

/// moto's S3 server: its endpoint and the bucket xtask made.
pub struct Moto {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The test bucket.
    pub bucket: String,
}

impl Moto {
    /// The endpoint as a socket address (for a proxy in front of it).
    pub fn addr(&self) -> SocketAddr {
        self.endpoint
            .trim_start_matches("http://")
            .parse()
            .expect("moto endpoint is http://IP:PORT")
    }
}

/// moto, or `None` (skipped) when its variables are not set.
pub fn moto() -> Option<Moto> {
    let endpoint = server_env("SPOOL_TEST_S3_ENDPOINT")?;
    let bucket = server_env("SPOOL_TEST_S3_BUCKET")?;
    Some(Moto { endpoint, bucket })
}

/// The client configuration for moto: plain HTTP, object_store's own
/// retries off.
pub fn client() -> ClientConfig {
    ClientConfig {
        allow_http: true,
        client_max_retries: 0,
        request_timeout: Duration::from_secs(30),
        ..ClientConfig::default()
    }
}

/// An S3 client for moto at `endpoint` (moto itself, or a proxy in front of
/// it), with object_store's own retries off so the uploader's attempts are
/// the only ones counted.
pub fn s3_object_store(endpoint: &str, bucket: &str) -> Arc<AmazonS3> {
    let s3 = AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id("spool-test")
        .with_secret_access_key("spool-test")
        .with_allow_http(true)
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 0,
            retry_timeout: Duration::from_secs(5),
        })
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(Duration::from_secs(30))
                .with_connect_timeout(Duration::from_secs(2)),
        )
        .build()
        .expect("S3 client for moto");
    Arc::new(s3)
}

/// [`s3_object_store`] as a spool-upload [`Store`] under `prefix`.
pub fn s3_store(endpoint: &str, bucket: &str, prefix: &str) -> Store {
    Store::new(
        s3_object_store(endpoint, bucket),
        prefix,
        format!("{endpoint}/{bucket}"),
        true,
    )
    .unwrap()
}

/// A fresh database on the ClickHouse at `base` (a `clickhouse://` URL):
/// its catalog URL and an admin handle (drop it with
/// `testing_drop_database` when done, pass or fail).
pub fn fresh_clickhouse(base: &str) -> (String, ClickHouseCatalog) {
    static N: AtomicU64 = AtomicU64::new(0);
    let CatalogUrl::ClickHouse(mut t) = CatalogUrl::parse(base).expect("SPOOL_TEST_CLICKHOUSE_URL")
    else {
        panic!("SPOOL_TEST_CLICKHOUSE_URL is not a clickhouse:// URL: {base}")
    };
    t.database = format!(
        "spool_test_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        uuid::Uuid::new_v4().simple().to_string().get(..8).unwrap()
    );
    let url = format!(
        "clickhouse://{}/{}?table_prefix={}",
        t.authority(),
        t.database,
        t.table_prefix
    );
    (url, ClickHouseCatalog::new(t))
}

/// The ClickHouse URL, the S3 endpoint and the bucket of the real-server
/// tier, or `None` (after [`server_env`](crate::server_env)'s message)
/// when a test runs without them.
pub fn clickhouse_and_s3() -> Option<(String, String, String)> {
    Some((
        crate::server_env("SPOOL_TEST_CLICKHOUSE_URL")?,
        crate::server_env("SPOOL_TEST_S3_ENDPOINT")?,
        crate::server_env("SPOOL_TEST_S3_BUCKET")?,
    ))
}

/// A fresh ClickHouse database and moto, each behind a fault proxy of its
/// own ([`proxied_servers`]); the proxies run on `rt`.
pub struct Proxied {
    /// The runtime the proxies run on (also for the test's own async work).
    pub rt: tokio::runtime::Runtime,
    /// The fresh database's URL, straight to the server.
    pub url: String,
    /// The same URL through `ch_proxy`.
    pub proxied_url: String,
    /// The database's admin handle (to drop it afterwards).
    pub admin: ClickHouseCatalog,
    /// The proxy in front of ClickHouse.
    pub ch_proxy: Arc<crate::proxy::Proxy>,
    /// The proxy in front of moto.
    pub s3_proxy: Arc<crate::proxy::Proxy>,
    /// moto itself.
    pub moto: Moto,
}

/// [`Proxied`] servers, or `None` (skipped) when their variables are not set.
pub fn proxied_servers() -> Option<Proxied> {
    let moto = moto()?;
    let base = server_env("SPOOL_TEST_CLICKHOUSE_URL")?;
    let (url, admin) = fresh_clickhouse(&base);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the proxies");
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&url).expect("a ClickHouse URL") else {
        unreachable!("fresh_clickhouse makes ClickHouse URLs")
    };
    let server = format!("{}:{}", t.hosts[0].0, t.hosts[0].1);
    let ch_addr: SocketAddr = server.parse().expect("ClickHouse at IP:PORT");
    let (ch_proxy, s3_proxy) = rt.block_on(async {
        (
            Arc::new(crate::proxy::Proxy::start(ch_addr).await.expect("proxy")),
            Arc::new(
                crate::proxy::Proxy::start(moto.addr())
                    .await
                    .expect("proxy"),
            ),
        )
    });
    let proxied_url = url.replace(&server, &ch_proxy.addr().to_string());
    Some(Proxied {
        rt,
        url,
        proxied_url,
        admin,
        ch_proxy,
        s3_proxy,
        moto,
    })
}

/// Runs `sql` on the first server of a `clickhouse://` catalog URL over
/// plain HTTP (its own connection, HTTP/1.0, 30 s bound) and returns the
/// answer's body; panics, naming the statement, on anything but 200.
pub fn clickhouse_sql(catalog_url: &str, sql: &str) -> String {
    match try_clickhouse_sql(catalog_url, sql) {
        Ok((200, body)) => body,
        Ok((status, body)) => panic!("{sql}: HTTP {status}: {body}"),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// [`clickhouse_sql`] without the panic: the HTTP status and the body.
pub fn try_clickhouse_sql(catalog_url: &str, sql: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(catalog_url).expect("catalog URL") else {
        panic!("not a clickhouse:// URL: {catalog_url}")
    };
    let (host, port) = t.hosts[0].clone();
    let mut s = std::net::TcpStream::connect((host.as_str(), port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "POST / HTTP/1.0\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{sql}",
        sql.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

/// The replicated ClickHouse of the real-server tier (xtask's
/// `servers/replicas.rs`): three replicas of one shard, which a test may
/// kill, start again, stall and resume. Tests that do must run one at a
/// time (a `serial` module): the replicas are shared.
pub struct Replicas {
    /// `clickhouse://H1:P1,H2:P2,H3:P3/default`.
    pub url: String,
    /// The cluster's name.
    pub cluster: String,
    configs: Vec<std::path::PathBuf>,
    /// When each replica was last killed by [`Replicas::kill`].
    killed_at: std::sync::Mutex<Vec<Option<std::time::Instant>>>,
}

/// A replica's ZooKeeper session (xtask's `servers/replicas.rs`): a killed
/// replica counts as active that long, and one started again before it
/// lapses cannot take its place.
pub const REPLICA_SESSION: Duration = Duration::from_secs(3);

/// The replicated ClickHouse, or `None` (after [`server_env`]'s message).
pub fn replicas() -> Option<Replicas> {
    let configs: Vec<std::path::PathBuf> = server_env("SPOOL_TEST_CLICKHOUSE_REPLICA_CONFIGS")?
        .split(',')
        .map(Into::into)
        .collect();
    Some(Replicas {
        url: server_env("SPOOL_TEST_CLICKHOUSE_REPLICAS")?,
        cluster: server_env("SPOOL_TEST_CLICKHOUSE_CLUSTER")?,
        killed_at: std::sync::Mutex::new(vec![None; configs.len()]),
        configs,
    })
}

impl Replicas {
    /// A fresh database on the cluster: its catalog URL (every replica,
    /// `cluster=` set) and an admin handle (drop it with
    /// `testing_drop_database`, which drops it on every replica).
    pub fn fresh(&self) -> (String, ClickHouseCatalog) {
        let (url, _) = fresh_clickhouse(&self.url);
        let url = format!("{url}&cluster={}", self.cluster);
        let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(&url).expect("replicated URL") else {
            unreachable!()
        };
        (url, ClickHouseCatalog::new(t))
    }

    /// How many replicas there are.
    pub fn len(&self) -> usize {
        self.configs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.configs.is_empty()
    }

    /// The URL of replica `i` alone (`clickhouse://HOST:PORT/DB...`) for a
    /// catalog `url` of all of them.
    pub fn only(&self, url: &str, i: usize) -> String {
        let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(url).expect("replicated URL") else {
            unreachable!()
        };
        let (h, p) = &t.hosts[i];
        url.replacen(&t.authority(), &format!("{h}:{p}"), 1)
    }

    fn pid(&self, i: usize) -> Option<i32> {
        let file = self.configs[i].with_file_name("clickhouse.pid");
        let pid: i32 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        String::from_utf8_lossy(&cmd)
            .contains("clickhouse-server")
            .then_some(pid)
    }

    fn signal(&self, i: usize, sig: nix::sys::signal::Signal) {
        if let Some(pid) = self.pid(i) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }

    /// SIGKILLs replica `i` and waits until it is gone.
    pub fn kill(&self, i: usize) {
        self.signal(i, nix::sys::signal::Signal::SIGKILL);
        self.killed_at.lock().unwrap()[i] = Some(std::time::Instant::now());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.pid(i).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "replica {i} outlived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGSTOPs replica `i`: it keeps its connections and answers nothing.
    pub fn stall(&self, i: usize) {
        self.signal(i, nix::sys::signal::Signal::SIGSTOP);
    }

    /// SIGCONTs replica `i`.
    pub fn resume(&self, i: usize) {
        self.signal(i, nix::sys::signal::Signal::SIGCONT);
    }

    /// Starts replica `i` again from its config (unless it runs) and waits
    /// (30 s) until its replicated tables are writable, see every peer
    /// active and have nothing left to fetch (so every other replica must
    /// be up too).
    pub fn restart(&self, i: usize) {
        self.start_if_dead(i);
        self.wait_healthy(i);
    }

    /// Starts replica `i` again from its config unless it runs, without
    /// waiting for it (after its killed session lapsed,
    /// [`REPLICA_SESSION`]).
    pub fn start(&self, i: usize) {
        self.start_if_dead(i);
    }

    /// Whether replica `i` answers that its replicated tables are
    /// writable, see every peer active and have nothing left to fetch.
    pub fn is_healthy(&self, i: usize) -> bool {
        let url = self.only(&format!("{}?table_prefix=x", self.url), i);
        let unhealthy = try_clickhouse_sql(
            &url,
            "SELECT count() FROM system.replicas WHERE is_readonly OR active_replicas < total_replicas OR queue_size > 0 FORMAT TSV",
        );
        matches!(unhealthy, Ok((200, ref n)) if n.trim() == "0")
    }

    fn start_if_dead(&self, i: usize) {
        if self.pid(i).is_some() {
            return;
        }
        // its old session must lapse first (and a second for ZooKeeper)
        if let Some(at) = self.killed_at.lock().unwrap()[i] {
            let ready = at + REPLICA_SESSION + Duration::from_secs(1);
            std::thread::sleep(ready.saturating_duration_since(std::time::Instant::now()));
        }
        let config = &self.configs[i];
        let dir = config.parent().expect("config directory");
        let log = std::fs::File::create(dir.join("log/restarted.log")).expect("log");
        use std::os::unix::process::CommandExt;
        // Never waited for here: it outlives this process by design.
        #[allow(clippy::zombie_processes)]
        let child = std::process::Command::new("/usr/sbin/clickhouse-server")
            // its own process group: it outlives this test process (the
            // runner ends a test's group), xtask stops it at the end
            .process_group(0)
            .arg(format!("--config-file={}", config.display()))
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start clickhouse-server");
        // where xtask finds it to stop it at the end of the run
        std::fs::write(dir.join("clickhouse.pid"), child.id().to_string()).expect("pid file");
    }

    fn wait_healthy(&self, i: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if self.is_healthy(i) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "replica {i} did not come back healthy within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every replica running and not stopped: what a test leaves behind
    /// (call it at its end, and from a guard's drop).
    pub fn heal(&self) {
        for i in 0..self.len() {
            self.resume(i);
            self.start_if_dead(i);
        }
        for i in 0..self.len() {
            self.wait_healthy(i);
        }
    }
}
