//! A run's destination as the oracle reads it: the servers (`--store s3`,
//! `--catalog clickhouse`: moto and ClickHouse, from the environment `cargo
//! xtask servers up` prints, which `cargo xtask torture` sets when it starts
//! them), the store (a `file://` directory, or moto through object_store)
//! and the catalog (through spool-catalog, as `spool ls` reads it).

use anyhow::{bail, Context, Result};
use futures::TryStreamExt;
use object_store::{path::Path as Key, ObjectStore, ObjectStoreExt};
use spool_catalog::{CatalogUrl, ClickHouseCatalog, LeaseRecord, PackRow};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::Options;

/// The runtime the oracle's store and catalog reads run on (any thread of
/// the torture may block on it).
fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime for the torture's reads")
    })
}

/// Where the torture's S3 bucket and ClickHouse server are, for every run.
pub struct Remote {
    /// moto: endpoint (`http://127.0.0.1:PORT`) and bucket (`--store s3`).
    pub s3: Option<(String, String)>,
    /// ClickHouse's HTTP port (`--catalog clickhouse`).
    pub clickhouse: Option<u16>,
}

impl Remote {
    /// The servers `o` asks for, from the environment `cargo xtask servers
    /// up` prints (`SPOOL_TEST_S3_ENDPOINT` + `SPOOL_TEST_S3_BUCKET`,
    /// `SPOOL_TEST_CLICKHOUSE_HTTP`).
    pub fn from_env(o: &Options) -> Result<Remote> {
        let env = |k: &str| {
            std::env::var(k).with_context(|| {
                format!(
                    "{k} is not set: run the torture through `cargo xtask torture`, which starts \
                     the servers, or export what `cargo xtask servers up` prints"
                )
            })
        };
        let s3 = match o.s3 {
            true => Some((env("SPOOL_TEST_S3_ENDPOINT")?, env("SPOOL_TEST_S3_BUCKET")?)),
            false => None,
        };
        let clickhouse = match o.clickhouse {
            true => Some(crate::port_of(&env("SPOOL_TEST_CLICKHOUSE_HTTP")?)?),
            false => None,
        };
        Ok(Remote { s3, clickhouse })
    }
}

/// Where a run's store is, as the oracle reads it.
#[derive(Clone)]
pub enum StoreAt {
    /// A `file://` store's directory.
    File(PathBuf),
    /// moto (direct, not through a proxy) and the run's prefix.
    S3 {
        /// The client.
        store: Arc<dyn ObjectStore>,
        /// The run's prefix in the bucket.
        prefix: String,
    },
}

impl StoreAt {
    /// moto's bucket at `endpoint`, under `prefix/`.
    pub fn s3(endpoint: &str, bucket: &str, prefix: &str) -> StoreAt {
        StoreAt::S3 {
            store: spool_tests::servers::s3_object_store(endpoint, bucket),
            prefix: prefix.to_string(),
        }
    }

    /// Every object: its key (relative to the store's root) and bytes.
    pub fn objects(&self) -> Result<Vec<(String, Vec<u8>)>> {
        match self {
            StoreAt::File(dir) => {
                let mut files = Vec::new();
                crate::walk_files(dir, &mut files);
                Ok(files
                    .into_iter()
                    .map(|f| {
                        let key = f.strip_prefix(dir).unwrap_or(&f).display().to_string();
                        (key, std::fs::read(&f).unwrap_or_default())
                    })
                    .collect())
            }
            StoreAt::S3 { store, prefix } => rt().block_on(async {
                let listed: Vec<_> = store
                    .list(Some(&Key::from(prefix.as_str())))
                    .try_collect()
                    .await
                    .with_context(|| format!("listing {prefix}/ on moto"))?;
                let mut out = Vec::new();
                for meta in listed {
                    let bytes = store
                        .get(&meta.location)
                        .await
                        .with_context(|| format!("reading {} from moto", meta.location))?
                        .bytes()
                        .await
                        .with_context(|| format!("reading {} from moto", meta.location))?;
                    out.push((meta.location.to_string(), bytes.to_vec()));
                }
                Ok(out)
            }),
        }
    }

    /// Runs the sweep (`spool sweep`'s library call) over this store
    /// against `catalog`, as the catalog the daemons spelled `daemons_url`
    /// (the prefix record names that spelling), once the youngest object is
    /// the destination's grace old (every service of the run is stopped);
    /// `None` for a `file://` store, which never bundles.
    pub fn sweep(
        &self,
        catalog: &Catalog,
        daemons_url: &str,
    ) -> Result<Option<spool_service::sweep::SweepReport>> {
        let StoreAt::S3 { store, prefix } = self else {
            return Ok(None);
        };
        let store = spool_upload::Store::new(store.clone(), prefix, "moto", true)?;
        // requests bounded as the daemons' are (the record's grace is four
        // of them)
        let sweeping = spool_catalog::open_with_timeout(
            &catalog.url,
            Duration::from_millis(crate::CATALOG_REQUEST_TIMEOUT_MS),
        )
        .with_context(|| format!("opening the catalog {}", catalog.url))?;
        let destination = spool_service::config::destination(daemons_url, "s3://unused", "default")
            .context("the daemons' destination")?;
        let identity = spool_service::prefix_record::CatalogIdentity::of(
            &destination,
            &spool_lock::host_name(),
        );
        let report = rt()
            .block_on(async {
                let Some(record) = spool_service::prefix_record::read(&store).await? else {
                    return Ok(spool_service::sweep::SweepReport::default());
                };
                let youngest = store
                    .object_store()
                    .list(Some(store.prefix()))
                    .try_fold(std::time::UNIX_EPOCH, |t, m| async move {
                        Ok(t.max(std::time::SystemTime::from(m.last_modified)))
                    })
                    .await
                    .map_err(|e| spool_service::Error::SweepStore {
                        store: store.description().to_string(),
                        key: store.prefix().to_string(),
                        error: e.into(),
                    })?;
                let ready = youngest + record.orphan_grace() + Duration::from_millis(500);
                if let Ok(wait) = ready.duration_since(std::time::SystemTime::now()) {
                    tokio::time::sleep(wait).await;
                }
                spool_service::sweep::sweep(
                    sweeping.as_ref(),
                    &store,
                    &identity,
                    (usize::MAX, false),
                    &std::sync::atomic::AtomicBool::new(false),
                )
                .await
            })
            .context("sweeping the run's store")?;
        Ok(Some(report))
    }

    /// Whether the object a catalog row names is there.
    pub fn has(&self, key: &str) -> bool {
        match self {
            StoreAt::File(dir) => dir.join(key).exists(),
            StoreAt::S3 { store, .. } => {
                match rt().block_on(store.head(&Key::from(key))) {
                    Ok(_) => true,
                    Err(object_store::Error::NotFound { .. }) => false,
                    // moto may be busy: an unanswered HEAD is no evidence
                    Err(_) => true,
                }
            }
        }
    }
}

/// A run's catalog, read through spool-catalog (never through a proxy).
#[derive(Clone)]
pub struct Catalog {
    url: String,
    catalog: Arc<dyn spool_catalog::Catalog>,
}

impl Catalog {
    /// The catalog `url` names (nothing is contacted yet).
    pub fn open(url: &str) -> Result<Catalog> {
        let catalog = spool_catalog::open_with_timeout(url, Duration::from_secs(20))
            .with_context(|| format!("opening the catalog {url}"))?;
        Ok(Catalog {
            url: url.to_string(),
            catalog,
        })
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every row, as read (one per pack: `spool ls`'s read).
    pub fn rows(&self) -> Result<Vec<PackRow>> {
        rt().block_on(self.catalog.list_range(0, u64::MAX))
            .with_context(|| format!("listing the rows of {}", self.url))
    }

    /// The claim log of the lease `name`, by term.
    pub fn lease_log(&self, name: &str) -> Result<Vec<LeaseRecord>> {
        rt().block_on(self.catalog.lease_log(name))
            .with_context(|| format!("reading the lease log of {name} in {}", self.url))
    }
}

/// The ClickHouse catalog `url` names.
fn clickhouse_catalog(url: &str) -> Result<ClickHouseCatalog> {
    match CatalogUrl::parse(url).with_context(|| format!("parsing {url}"))? {
        CatalogUrl::ClickHouse(t) => Ok(ClickHouseCatalog::new(t)),
        _ => bail!("{url} is not a clickhouse:// catalog"),
    }
}

/// Drops the database of the ClickHouse catalog `url` (if it is there).
pub fn drop_database(url: &str) -> Result<()> {
    let catalog = clickhouse_catalog(url)?;
    rt().block_on(catalog.testing_drop_database())
        .with_context(|| format!("dropping the database of {url}"))
}

/// The `packs` table of the ClickHouse catalog `url`, as SQL names it
/// (`` `DATABASE`.`PREFIXpacks` ``, the names spool-catalog's URL parser
/// reads).
pub fn packs_table(url: &str) -> Result<String> {
    match CatalogUrl::parse(url).with_context(|| format!("parsing {url}"))? {
        CatalogUrl::ClickHouse(t) => Ok(format!("`{}`.`{}packs`", t.database, t.table_prefix)),
        _ => bail!("{url} is not a clickhouse:// catalog"),
    }
}

/// Runs one ClickHouse query over HTTP/1.0 (no chunked answer) and returns
/// its text (`FORMAT TabSeparated`): the raw reads spool-catalog does not
/// make (every row before merges); fails with the server's answer.
pub fn clickhouse_text(port: u16, sql: &str) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .with_context(|| format!("connecting to ClickHouse on 127.0.0.1:{port}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        s,
        "POST / HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n\r\n{sql}",
        sql.len()
    )?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .with_context(|| format!("reading ClickHouse's answer to `{sql}`"))?;
    let text = String::from_utf8_lossy(&out);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("ClickHouse on 127.0.0.1:{port}: no HTTP head"))?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        bail!("ClickHouse on 127.0.0.1:{port} answered {status} to `{sql}`: {body}");
    }
    Ok(body.to_string())
}

/// Makes the database of the ClickHouse catalog `url` afresh (dropped if
/// an earlier run left it).
pub fn fresh_database(url: &str) -> Result<()> {
    drop_database(url)?;
    let catalog = clickhouse_catalog(url)?;
    let CatalogUrl::ClickHouse(t) = CatalogUrl::parse(url)? else {
        bail!("{url} is not a clickhouse:// catalog");
    };
    rt().block_on(catalog.testing_execute(&format!("CREATE DATABASE `{}`", t.database)))
        .with_context(|| format!("creating the database of {url}"))
}
