//! Where packs go: an object store and a key prefix, chosen by URL or
//! handed in.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use object_store::path::Path;
use object_store::ObjectStore;

use crate::config::ClientConfig;
use crate::error::{Error, Result};
#[cfg(test)]
use crate::local::LocalCounters;
use crate::local::LocalDir;

/// A destination for packs: an `ObjectStore`, the key prefix under which
/// packs go, and whether the store honours `PutMode::Create`.
#[derive(Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    prefix: Path,
    description: String,
    conditional_create: bool,
    /// A `file://` store's fast path (`None` for every other store, and for
    /// a store handed in with [`Store::new`]).
    local: Option<Arc<LocalDir>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("store", &self.description)
            .field("prefix", &self.prefix.as_ref())
            .field("conditional_create", &self.conditional_create)
            .field("local_fast_path", &self.local.is_some())
            .finish()
    }
}

impl Store {
    /// Wraps a store handed in by the caller. `prefix` may be empty.
    /// `conditional_create`: whether the store honours `PutMode::Create`
    /// (object_store's S3, GCS, Azure, local and in-memory stores all do;
    /// some S3-compatible servers do not).
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        prefix: &str,
        description: impl Into<String>,
        conditional_create: bool,
    ) -> Result<Store> {
        let prefix = Path::parse(prefix.trim_matches('/')).map_err(|e| Error::InvalidUrl {
            url: description_or(prefix),
            reason: format!("bad key prefix {prefix:?}: {e}"),
        })?;
        Ok(Store {
            inner,
            prefix,
            description: description.into(),
            conditional_create,
            local: None,
        })
    }

    /// Builds the store a URL names:
    ///
    /// - `s3://BUCKET[/PREFIX]`: endpoint, region and credentials from the
    ///   `AWS_*` variables `AmazonS3Builder::from_env` reads (`AWS_ENDPOINT`,
    ///   `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    ///   `AWS_ALLOW_HTTP`, ...). Feature `aws`. S3 checks every body's
    ///   SHA-256 server-side: the signed payload's `x-amz-content-sha256`,
    ///   or, with `AWS_UNSIGNED_PAYLOAD` or `AWS_SKIP_SIGNATURE` set, an
    ///   `x-amz-checksum-sha256` (object_store's `Checksum::SHA256`; an
    ///   `AWS_CHECKSUM_ALGORITHM` the operator set wins).
    /// - `gs://BUCKET[/PREFIX]`: the `GOOGLE_*` variables
    ///   `GoogleCloudStorageBuilder::from_env` reads (`GOOGLE_SERVICE_ACCOUNT`
    ///   or `GOOGLE_SERVICE_ACCOUNT_KEY`, else application-default or
    ///   instance credentials; `GOOGLE_BASE_URL` for an emulator, as the
    ///   real-server tests do). Feature `gcp`.
    /// - `az://CONTAINER[/PREFIX]`: `AZURE_*` variables. Feature `azure`.
    /// - `file:///ABS/PATH`: a local directory (created if missing, the new
    ///   directories fsynced). The uploader writes it through its own fast
    ///   path (the `local` module: `copy_file_range` into a staging file,
    ///   verified, fsynced, published with `renameat2(RENAME_NOREPLACE)`, the
    ///   directory fsynced): an upload returns only after the object and its
    ///   directory entries are on disk, so the service may delete the pack
    ///   from the spool at once. Reads (HEAD, GET, list) and any other write
    ///   go through object_store's `LocalFileSystem` with `with_fsync(true)`.
    /// - `memory://`: a fresh in-memory store (each call a new, empty one).
    ///
    /// The HTTP client of the cloud backends gets `client`'s retry and
    /// timeout settings.
    pub fn from_url(url: &str, client: &ClientConfig) -> Result<Store> {
        let bad = |reason: &str| Error::InvalidUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        let scheme = parsed.scheme().to_string();
        let key_prefix = parsed.path().trim_matches('/').to_string();
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad(
                "query strings and fragments are not used; leave them out",
            ));
        }
        match scheme.as_str() {
            "memory" => {
                let store = Arc::new(object_store::memory::InMemory::new());
                let prefix = format!(
                    "{}{}",
                    parsed.host_str().unwrap_or(""),
                    if key_prefix.is_empty() {
                        String::new()
                    } else {
                        format!("/{key_prefix}")
                    }
                );
                Store::new(store, &prefix, url, true)
            }
            "file" => {
                if parsed.host_str().is_some_and(|h| !h.is_empty()) {
                    return Err(bad(
                        "a file URL names a local absolute path: file:///ABS/PATH",
                    ));
                }
                // Percent-decoded: `file:///data/my%20spool` is `/data/my spool`.
                let dir = parsed.to_file_path().map_err(|()| {
                    bad("a file URL names a local absolute path: file:///ABS/PATH")
                })?;
                if !dir.is_absolute() || parsed.path() == "/" {
                    return Err(bad("a file URL names an absolute directory other than /"));
                }
                create_dir_all_durable(&dir)
                    .map_err(|(path, source)| Error::LocalDir { path, source })?;
                // fsync on: a PUT returns only once the object and the
                // directory entries leading to it are on disk, because the
                // service deletes the pack from the spool right after
                // (invariant 1).
                let store = Arc::new(
                    object_store::local::LocalFileSystem::new_with_prefix(&dir)
                        .map_err(|source| Error::StoreConfig {
                            url: url.to_string(),
                            source: Box::new(source),
                        })?
                        .with_fsync(true),
                );
                let mut s = Store::new(store.clone(), "", url, true)?;
                s.local = Some(Arc::new(LocalDir::new(store)));
                Ok(s)
            }
            "s3" | "gs" | "az" => {
                if parsed.host_str().is_none_or(|h| h.is_empty()) {
                    return Err(bad("the bucket (or container) name is missing"));
                }
                let store = cloud(&scheme, url, client)?;
                Store::new(store, &key_prefix, url, true)
            }
            other => Err(bad(&format!("unknown scheme {other:?}"))),
        }
    }

    /// The object store.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// The key prefix (may be empty).
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// What the store is, for messages (its URL, or the caller's name).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// What the `file://` fast path did so far (`None` for any other
    /// store): objects published, fsyncs, staging files removed.
    #[cfg(test)]
    pub(crate) fn local_counters(&self) -> Option<LocalCounters> {
        self.local.as_ref().map(|l| l.counters())
    }

    pub(crate) fn local(&self) -> Option<&Arc<LocalDir>> {
        self.local.as_ref()
    }

    /// Whether single PUTs use `PutMode::Create`.
    pub fn conditional_create(&self) -> bool {
        self.conditional_create
    }
}

/// `create_dir_all`, then fsyncs every directory it created and the first
/// one that already existed (whose entry list changed), deepest first, so a
/// new store root survives a power loss. The error names the directory.
fn create_dir_all_durable(
    dir: &std::path::Path,
) -> std::result::Result<(), (PathBuf, std::io::Error)> {
    let mut first_existing = dir;
    while !first_existing.exists() {
        match first_existing.parent() {
            Some(p) => first_existing = p,
            None => break,
        }
    }
    if first_existing == dir {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| (dir.to_path_buf(), e))?;
    let mut d = dir;
    loop {
        std::fs::File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|e| (d.to_path_buf(), e))?;
        if d == first_existing {
            return Ok(());
        }
        match d.parent() {
            Some(p) => d = p,
            None => return Ok(()),
        }
    }
}

fn description_or(s: &str) -> String {
    s.to_string()
}

#[cfg(any(feature = "aws", feature = "gcp", feature = "azure"))]
fn client_options(c: &ClientConfig) -> (object_store::ClientOptions, object_store::RetryConfig) {
    let options = object_store::ClientOptions::new()
        .with_timeout(c.request_timeout)
        .with_connect_timeout(c.connect_timeout)
        .with_allow_http(c.allow_http);
    let retry = object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: c.client_backoff_initial,
            max_backoff: c.client_backoff_max,
            base: 2.0,
        },
        max_retries: c.client_max_retries,
        retry_timeout: c.client_retry_timeout,
    };
    (options, retry)
}

/// Whether `b`'s requests sign their payload: `x-amz-content-sha256` is
/// the body's SHA-256, which S3 verifies before it stores anything
/// (`XAmzContentSHA256Mismatch`) — unless the operator turned signing off
/// (`AWS_UNSIGNED_PAYLOAD`, `AWS_SKIP_SIGNATURE`).
#[cfg(feature = "aws")]
fn signs_payload(b: &object_store::aws::AmazonS3Builder) -> bool {
    use object_store::aws::AmazonS3ConfigKey as Key;
    let on = |key: Key| {
        b.get_config_value(&key).is_some_and(|v| {
            matches!(
                v.to_ascii_lowercase().as_str(),
                "1" | "true" | "on" | "yes" | "y"
            )
        })
    };
    !on(Key::UnsignedPayload) && !on(Key::SkipSignature)
}

fn cloud(scheme: &str, url: &str, client: &ClientConfig) -> Result<Arc<dyn ObjectStore>> {
    let config_err = |source| Error::StoreConfig {
        url: url.to_string(),
        source: Box::new(source),
    };
    let _ = (&config_err, client);
    match scheme {
        #[cfg(feature = "aws")]
        "s3" => {
            let (options, retry) = client_options(client);
            let mut b = object_store::aws::AmazonS3Builder::from_env()
                .with_url(url)
                .with_retry(retry)
                .with_client_options(options);
            if client.allow_http {
                b = b.with_allow_http(true);
            }
            // S3 checks every body once before it stores anything: a
            // signed payload (the default) by its `x-amz-content-sha256`;
            // an unsigned one by an `x-amz-checksum-sha256` we add (an
            // `AWS_CHECKSUM_ALGORITHM` the operator set wins).
            if !signs_payload(&b) && std::env::var_os("AWS_CHECKSUM_ALGORITHM").is_none() {
                b = b.with_checksum_algorithm(object_store::aws::Checksum::SHA256);
            }
            Ok(Arc::new(b.build().map_err(config_err)?))
        }
        #[cfg(feature = "gcp")]
        "gs" => {
            let (options, retry) = client_options(client);
            let b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(url)
                .with_retry(retry)
                .with_client_options(options);
            Ok(Arc::new(b.build().map_err(config_err)?))
        }
        #[cfg(feature = "azure")]
        "az" => {
            let (options, retry) = client_options(client);
            let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(url)
                .with_retry(retry)
                .with_client_options(options);
            if client.allow_http {
                b = b.with_allow_http(true);
            }
            Ok(Arc::new(b.build().map_err(config_err)?))
        }
        _ => Err(Error::BackendNotBuilt {
            url: url.to_string(),
            feature: match scheme {
                "s3" => "aws",
                "gs" => "gcp",
                _ => "azure",
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_and_file_urls() {
        let c = ClientConfig::default();
        let m = Store::from_url("memory://", &c).unwrap();
        assert_eq!(m.prefix().as_ref(), "");
        let m = Store::from_url("memory://pfx/sub", &c).unwrap();
        assert_eq!(m.prefix().as_ref(), "pfx/sub");
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}/store", dir.path().display());
        let f = Store::from_url(&url, &c).unwrap();
        assert!(dir.path().join("store").is_dir());
        assert_eq!(f.description(), url);
    }

    #[test]
    fn bad_urls_are_refused_with_the_forms_listed() {
        let c = ClientConfig::default();
        for url in [
            "ftp://x/y",
            "not a url",
            "file://host/x",
            "file:///",
            "s3:///prefix",
            "memory://?x=1",
        ] {
            let err = Store::from_url(url, &c).unwrap_err();
            assert!(matches!(err, Error::InvalidUrl { .. }), "{url}: {err}");
            assert!(err.to_string().contains("s3://BUCKET"), "{err}");
        }
    }

    #[cfg(feature = "aws")]
    #[test]
    fn s3_url_builds_with_prefix() {
        let c = ClientConfig::default();
        let s = Store::from_url("s3://bucket/some/prefix", &c).unwrap();
        assert_eq!(s.prefix().as_ref(), "some/prefix");
    }
}
