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
    use std::io::{Read, Write};
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(catalog_url).expect("catalog URL") else {
        panic!("not a clickhouse:// URL: {catalog_url}")
    };
    let (host, port) = t.hosts[0].clone();
    let mut s = std::net::TcpStream::connect((host.as_str(), port))
        .unwrap_or_else(|e| panic!("connect {host}:{port}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST / HTTP/1.0\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{sql}",
        sql.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    assert!(head.starts_with("HTTP/1.0 200"), "{sql}: {out}");
    body.to_string()
}
