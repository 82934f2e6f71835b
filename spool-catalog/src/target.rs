//! Catalog URLs: which backend, where, under which names.

use crate::error::{Error, Result};
use std::path::PathBuf;

/// The table prefix when the URL names none.
pub const DEFAULT_TABLE_PREFIX: &str = "spool_";

/// ClickHouse's HTTP port when the URL names none.
pub const DEFAULT_CLICKHOUSE_PORT: u16 = 8123;

/// A parsed catalog URL.
#[derive(Clone, PartialEq, Eq)]
pub enum CatalogUrl {
    /// `clickhouse://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]...]/DATABASE[?table_prefix=P&user=U&password=W&async_insert=1&cluster=NAME&insert_quorum=N]`
    ClickHouse(ClickHouseTarget),
    /// `sqlite:///ABS/PATH.db[?table_prefix=P]`
    Sqlite {
        /// Absolute path of the database file.
        path: PathBuf,
        /// Prefix of every table name.
        table_prefix: String,
    },
    /// `memory://` (a fresh catalog) or `memory://NAME` (one catalog per
    /// name per process): the fake, only with the `testing` feature.
    Memory {
        /// The shared instance's name; `None` for a fresh one.
        name: Option<String>,
    },
}

/// Most replicas one URL may name.
pub const MAX_REPLICAS: usize = 16;

/// Where a ClickHouse catalog lives.
#[derive(Clone, PartialEq, Eq)]
pub struct ClickHouseTarget {
    /// The servers (host name or address, HTTP port), in the URL's order:
    /// one, or several replicas of one cluster, tried in turn when one
    /// refuses, stalls or answers that it cannot serve (the catalog's
    /// failover).
    pub hosts: Vec<(String, u16)>,
    /// Database holding the tables.
    pub database: String,
    /// Prefix of every table name.
    pub table_prefix: String,
    /// User (ClickHouse's `default` when `None`).
    pub user: Option<String>,
    /// Password.
    pub password: Option<String>,
    /// URL parameter `async_insert=1` (default off): unfenced index inserts
    /// run with the server settings `async_insert=1,
    /// wait_for_async_insert=1`, so the server batches many small inserts
    /// into one part and still answers only once the rows are written.
    /// Servers before 22.1 do not have these settings: the catalog refuses
    /// them at connect ([`crate::Error::NotSupportedByServer`]).
    pub async_insert: bool,
    /// URL parameter `cluster=NAME` (or the configuration's
    /// `catalog.cluster`): the tables are `Replicated*MergeTree` created
    /// `ON CLUSTER NAME`, inserts wait for a quorum of replicas and reads
    /// that decide a lease claim are sequentially consistent. `None`: one
    /// server.
    pub cluster: Option<String>,
    /// URL parameter `insert_quorum=N` (default 2 with a cluster, refused
    /// without one): how many replicas must have a row before an insert
    /// returns. A pack leaves the spool only once its row is confirmed.
    pub insert_quorum: u32,
}

/// The quorum of a clustered catalog unless the URL says otherwise: two
/// replicas, a majority of the recommended three.
pub const DEFAULT_INSERT_QUORUM: u32 = 2;

impl std::fmt::Debug for ClickHouseTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("ClickHouseTarget")
            .field("hosts", &self.hosts)
            .field("database", &self.database)
            .field("table_prefix", &self.table_prefix)
            .field("user", &self.user)
            .field("async_insert", &self.async_insert)
            .field("cluster", &self.cluster)
            .field("insert_quorum", &self.insert_quorum)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CatalogUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl ClickHouseTarget {
    /// `clickhouse://HOST:PORT[,HOST:PORT...]/DATABASE?table_prefix=P`: the
    /// catalog as messages and the catalog key name it (credentials
    /// removed; one host reads as it always did).
    pub fn redacted(&self) -> String {
        format!(
            "clickhouse://{}/{}?table_prefix={}",
            self.authority(),
            self.database,
            self.table_prefix
        )
    }

    /// `HOST:PORT[,HOST:PORT...]`, in the URL's order.
    pub fn authority(&self) -> String {
        let all: Vec<String> = self.hosts.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        all.join(",")
    }

    /// The HTTP endpoint of each server, in the URL's order.
    pub fn http_urls(&self) -> Vec<String> {
        self.hosts
            .iter()
            .map(|(h, p)| format!("http://{h}:{p}"))
            .collect()
    }
}

/// Database names and table prefixes go into SQL text unquoted-safe: only
/// ASCII letters, digits and `_` are accepted.
fn check_ident(url: &str, what: &str, value: &str, may_be_empty: bool) -> Result<()> {
    let ok = (may_be_empty || !value.is_empty())
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !value.as_bytes().first().is_some_and(u8::is_ascii_digit);
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidUrl {
            url: url.to_string(),
            reason: format!(
                "{what} {value:?} must be ASCII letters, digits and '_' (not starting with a digit, at most 64)"
            ),
        })
    }
}

impl CatalogUrl {
    /// Parses a catalog URL. Unknown query parameters are refused, so a
    /// typo never silently falls back to a default.
    pub fn parse(input: &str) -> Result<CatalogUrl> {
        let (first, others) = split_hosts(input)?;
        let parsed = url::Url::parse(&first).map_err(|e| Error::InvalidUrl {
            url: crate::redact::mask_url(input),
            reason: format!(
                "{e}; expected clickhouse://HOST:PORT/DATABASE, sqlite:///ABS/PATH.db or memory://"
            ),
        })?;
        let shown = crate::redact::mask_url(input);
        let invalid = |reason: String| Error::InvalidUrl {
            url: shown.clone(),
            reason,
        };
        let mut table_prefix = DEFAULT_TABLE_PREFIX.to_string();
        let mut user = (!parsed.username().is_empty()).then(|| decode(parsed.username()));
        let mut password = parsed.password().map(decode);
        let mut async_insert = false;
        let mut cluster = None;
        let mut insert_quorum = None;
        for (k, v) in parsed.query_pairs() {
            match k.as_ref() {
                "table_prefix" => table_prefix = v.into_owned(),
                "async_insert" if parsed.scheme() == "clickhouse" => {
                    async_insert = match v.as_ref() {
                        "1" | "true" => true,
                        "0" | "false" => false,
                        other => {
                            return Err(invalid(format!(
                                "async_insert={other:?}: expected 1, true, 0 or false"
                            )))
                        }
                    }
                }
                "cluster" if parsed.scheme() == "clickhouse" => {
                    check_ident(&shown, "cluster", &v, false)?;
                    cluster = Some(v.into_owned());
                }
                "insert_quorum" if parsed.scheme() == "clickhouse" => {
                    insert_quorum = Some(v.parse::<u32>().ok().filter(|q| (1..=MAX_REPLICAS as u32).contains(q)).ok_or_else(|| {
                        invalid(format!("insert_quorum={v:?}: expected a number of replicas from 1 to {MAX_REPLICAS}"))
                    })?);
                }
                "user" if parsed.scheme() == "clickhouse" => user = Some(v.into_owned()),
                "password" if parsed.scheme() == "clickhouse" => password = Some(v.into_owned()),
                other => {
                    return Err(invalid(format!(
                        "unknown parameter {other:?} (known: table_prefix{})",
                        if parsed.scheme() == "clickhouse" {
                            ", user, password, async_insert, cluster, insert_quorum"
                        } else {
                            ""
                        }
                    )))
                }
            }
        }
        check_ident(&shown, "table_prefix", &table_prefix, true)?;
        match parsed.scheme() {
            "clickhouse" => {
                let host = parsed
                    .host_str()
                    .filter(|h| !h.is_empty())
                    .ok_or_else(|| invalid("no host".into()))?
                    .to_string();
                let port = parsed.port().unwrap_or(DEFAULT_CLICKHOUSE_PORT);
                let mut hosts = vec![(host, port)];
                for other in &others {
                    let u = url::Url::parse(&format!("clickhouse://{other}/"))
                        .ok()
                        .filter(|u| u.host_str().is_some_and(|h| !h.is_empty()))
                        .ok_or_else(|| {
                            invalid(format!("replica {other:?} is not HOST or HOST:PORT"))
                        })?;
                    let h = (
                        u.host_str().unwrap_or_default().to_string(),
                        u.port().unwrap_or(DEFAULT_CLICKHOUSE_PORT),
                    );
                    if hosts.contains(&h) {
                        return Err(invalid(format!("replica {}:{} is named twice", h.0, h.1)));
                    }
                    hosts.push(h);
                }
                let insert_quorum = match (&cluster, insert_quorum) {
                    (Some(_), q) => q.unwrap_or(DEFAULT_INSERT_QUORUM),
                    (None, None) => 1,
                    (None, Some(_)) => {
                        return Err(invalid(
                            "insert_quorum needs a cluster (cluster=NAME, or catalog.cluster)"
                                .into(),
                        ))
                    }
                };
                let database = parsed.path().trim_start_matches('/');
                let database = if database.is_empty() {
                    "default"
                } else {
                    database
                };
                check_ident(&shown, "database", database, false)?;
                Ok(CatalogUrl::ClickHouse(ClickHouseTarget {
                    hosts,
                    database: database.to_string(),
                    table_prefix,
                    user,
                    password,
                    async_insert,
                    cluster,
                    insert_quorum,
                }))
            }
            _ if !others.is_empty() => Err(invalid(
                "only a clickhouse:// URL may name several hosts".into(),
            )),
            "sqlite" => {
                if parsed.host_str().is_some_and(|h| !h.is_empty()) {
                    return Err(invalid(
                        "a SQLite catalog is a local file: sqlite:///ABS/PATH.db (three slashes)"
                            .into(),
                    ));
                }
                // Percent-decoded only: a `+` in a path is a `+` (form
                // decoding, as for the credentials, would make it a space).
                let path = percent_encoding::percent_decode_str(parsed.path())
                    .decode_utf8()
                    .map_err(|_| invalid("the SQLite path is not UTF-8 once decoded".into()))?;
                let path = PathBuf::from(path.as_ref());
                if !path.is_absolute() || path.as_os_str().len() <= 1 {
                    return Err(invalid("the SQLite path must be absolute".into()));
                }
                Ok(CatalogUrl::Sqlite { path, table_prefix })
            }
            "memory" => {
                let name = parsed
                    .host_str()
                    .filter(|h| !h.is_empty())
                    .map(str::to_string);
                Ok(CatalogUrl::Memory { name })
            }
            other => Err(invalid(format!(
                "unknown scheme {other:?}; expected clickhouse, sqlite or memory"
            ))),
        }
    }

    /// `url` with the cluster `cluster` (the configuration's
    /// `catalog.cluster`) as its `cluster=` parameter, for opening the
    /// catalog; the catalog key keeps hashing `url` as spelled, so setting
    /// the cluster in the configuration moves no spool directory. Refused
    /// for a catalog that is not ClickHouse, and when the URL names
    /// another cluster.
    pub fn with_cluster(url: &str, cluster: &str) -> Result<String> {
        let invalid = |reason: String| Error::InvalidUrl {
            url: crate::redact::mask_url(url),
            reason,
        };
        match CatalogUrl::parse(url)? {
            CatalogUrl::ClickHouse(t) => match t.cluster.as_deref() {
                Some(c) if c == cluster => Ok(url.to_string()),
                Some(c) => Err(invalid(format!(
                    "the URL names the cluster {c:?} and catalog.cluster {cluster:?}; name one"
                ))),
                None => {
                    check_ident(&crate::redact::mask_url(url), "cluster", cluster, false)?;
                    let (base, fragment) = url.split_once('#').map_or((url, ""), |(b, f)| (b, f));
                    let sep = if base.contains('?') { '&' } else { '?' };
                    let fragment = if fragment.is_empty() {
                        String::new()
                    } else {
                        format!("#{fragment}")
                    };
                    Ok(format!("{base}{sep}cluster={cluster}{fragment}"))
                }
            },
            _ => Err(invalid(format!(
                "catalog.cluster {cluster:?} needs a clickhouse:// catalog"
            ))),
        }
    }

    /// The URL with credentials removed: what messages and the catalog key
    /// name.
    pub fn redacted(&self) -> String {
        match self {
            CatalogUrl::ClickHouse(t) => t.redacted(),
            CatalogUrl::Sqlite { path, table_prefix } => {
                format!("sqlite://{}?table_prefix={table_prefix}", path.display())
            }
            CatalogUrl::Memory { name } => format!("memory://{}", name.as_deref().unwrap_or("")),
        }
    }

    /// The database (`main` for SQLite, `memory` for the fake).
    pub fn database(&self) -> &str {
        match self {
            CatalogUrl::ClickHouse(t) => &t.database,
            CatalogUrl::Sqlite { .. } => "main",
            CatalogUrl::Memory { .. } => "memory",
        }
    }

    /// The table prefix (`spool_` unless the URL says otherwise).
    pub fn table_prefix(&self) -> &str {
        match self {
            CatalogUrl::ClickHouse(t) => &t.table_prefix,
            CatalogUrl::Sqlite { table_prefix, .. } => table_prefix,
            CatalogUrl::Memory { .. } => DEFAULT_TABLE_PREFIX,
        }
    }
}

/// Splits `scheme://[userinfo@]h1[:p1],h2[:p2],.../rest` into the URL with
/// its first host only (which `url` parses) and the other hosts as
/// written. A URL with one host comes back as it is.
fn split_hosts(input: &str) -> Result<(String, Vec<String>)> {
    let Some((scheme, rest)) = input.split_once("://") else {
        return Ok((input.to_string(), Vec::new()));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    // `h1:p,u:pw@h2:p` would otherwise read as one host, h2, with the
    // credentials `h1:p,u:pw`: the list is never shortened silently.
    if userinfo.contains(',') {
        return Err(Error::InvalidUrl {
            url: crate::redact::mask_url(input),
            reason: "a ',' before the '@': credentials go once, before the first host (USER:PASSWORD@HOST:PORT,HOST:PORT/DATABASE), or in the user= and password= parameters; a ',' inside a password is written %2C".into(),
        });
    }
    let mut all = hosts.split(',');
    let first = all.next().unwrap_or_default();
    let others: Vec<String> = all.map(str::to_string).collect();
    if others.len() + 1 > MAX_REPLICAS {
        return Err(Error::InvalidUrl {
            url: crate::redact::mask_url(input),
            reason: format!("{} hosts; at most {MAX_REPLICAS}", others.len() + 1),
        });
    }
    if others.iter().any(String::is_empty) || (first.is_empty() && !others.is_empty()) {
        return Err(Error::InvalidUrl {
            url: crate::redact::mask_url(input),
            reason: "an empty host in the list (HOST:PORT,HOST:PORT,...)".into(),
        });
    }
    Ok((format!("{scheme}://{userinfo}{first}{tail}"), others))
}

fn decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clickhouse_url_with_everything() {
        let u = CatalogUrl::parse(
            "clickhouse://ch.example:9123/spooldb?table_prefix=p_&user=u&password=s%20cret",
        )
        .unwrap();
        let CatalogUrl::ClickHouse(t) = &u else {
            panic!("{u:?}")
        };
        assert_eq!(t.hosts, vec![("ch.example".to_string(), 9123)]);
        assert_eq!(t.database, "spooldb");
        assert_eq!(t.table_prefix, "p_");
        assert_eq!(t.user.as_deref(), Some("u"));
        assert_eq!(t.password.as_deref(), Some("s cret"));
        assert!(!t.async_insert, "async_insert is off unless asked for");
        assert_eq!(
            u.redacted(),
            "clickhouse://ch.example:9123/spooldb?table_prefix=p_"
        );
        assert!(!format!("{u:?} {t:?}").contains("cret"));
    }

    #[test]
    fn clickhouse_defaults_and_userinfo() {
        let u = CatalogUrl::parse("clickhouse://bob:pw@127.0.0.1").unwrap();
        let CatalogUrl::ClickHouse(t) = &u else {
            panic!()
        };
        assert_eq!((t.hosts[0].1, t.database.as_str()), (8123, "default"));
        assert_eq!((t.cluster.as_deref(), t.insert_quorum), (None, 1));
        assert_eq!(t.table_prefix, "spool_");
        assert_eq!(
            (t.user.as_deref(), t.password.as_deref()),
            (Some("bob"), Some("pw"))
        );
    }

    #[test]
    fn clickhouse_async_insert_knob() {
        for (q, want) in [("1", true), ("true", true), ("0", false), ("false", false)] {
            let u = CatalogUrl::parse(&format!("clickhouse://h/db?async_insert={q}")).unwrap();
            let CatalogUrl::ClickHouse(t) = &u else {
                panic!("{u:?}")
            };
            assert_eq!(t.async_insert, want, "{q}");
        }
        let e = CatalogUrl::parse("clickhouse://h/db?async_insert=yes")
            .unwrap_err()
            .to_string();
        assert!(e.contains("async_insert=\"yes\""), "{e}");
        let e = CatalogUrl::parse("sqlite:///x.db?async_insert=1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown parameter \"async_insert\""), "{e}");
    }

    #[test]
    fn several_replicas_a_cluster_and_its_quorum() {
        let u = CatalogUrl::parse(
            "clickhouse://u:pw@h1:8123,h2,10.0.0.3:9123/db?cluster=spool_cluster&table_prefix=p_",
        )
        .unwrap();
        let CatalogUrl::ClickHouse(t) = &u else {
            panic!("{u:?}")
        };
        assert_eq!(
            t.hosts,
            vec![
                ("h1".to_string(), 8123),
                ("h2".to_string(), 8123),
                ("10.0.0.3".to_string(), 9123)
            ]
        );
        assert_eq!(
            (
                t.user.as_deref(),
                t.password.as_deref(),
                t.database.as_str()
            ),
            (Some("u"), Some("pw"), "db")
        );
        assert_eq!(t.cluster.as_deref(), Some("spool_cluster"));
        assert_eq!(t.insert_quorum, DEFAULT_INSERT_QUORUM);
        assert_eq!(
            u.redacted(),
            "clickhouse://h1:8123,h2:8123,10.0.0.3:9123/db?table_prefix=p_"
        );
        assert_eq!(
            t.http_urls(),
            vec!["http://h1:8123", "http://h2:8123", "http://10.0.0.3:9123"]
        );
        assert!(!format!("{u:?} {t:?}").contains("pw\""));
        let u = CatalogUrl::parse("clickhouse://a,b/db?cluster=c&insert_quorum=3").unwrap();
        let CatalogUrl::ClickHouse(t) = &u else {
            panic!("{u:?}")
        };
        assert_eq!(t.insert_quorum, 3);
        // A ',' in a password, percent-encoded, is the password's.
        let u = CatalogUrl::parse("clickhouse://u:p%2Cw@h1,h2/db").unwrap();
        let CatalogUrl::ClickHouse(t) = &u else {
            panic!("{u:?}")
        };
        assert_eq!((t.password.as_deref(), t.hosts.len()), (Some("p,w"), 2));
        // One host reads as it always did (the catalog key hashes this).
        assert_eq!(
            CatalogUrl::parse("clickhouse://h:8123/db")
                .unwrap()
                .redacted(),
            "clickhouse://h:8123/db?table_prefix=spool_"
        );
        for (url, needle) in [
            ("clickhouse://h1,,h3/db", "empty host"),
            ("clickhouse://h1,/db", "empty host"),
            ("clickhouse://h1,h1:8123/db", "named twice"),
            ("clickhouse://h1,h2:x/db", "replica \"h2:x\""),
            // Credentials on a later host would swallow the hosts before it.
            (
                "clickhouse://h1:8123,u:pw@h2:8123/db",
                "credentials go once, before the first host",
            ),
            ("clickhouse://u:p,w@h/db", "written %2C"),
            ("clickhouse://h/db?insert_quorum=2", "needs a cluster"),
            (
                "clickhouse://h/db?cluster=c&insert_quorum=0",
                "insert_quorum=\"0\"",
            ),
            ("clickhouse://h/db?cluster=a-b", "cluster \"a-b\""),
            ("sqlite://a,b/x.db", "several hosts"),
        ] {
            let e = CatalogUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
        let many: Vec<String> = (0..=MAX_REPLICAS).map(|i| format!("h{i}")).collect();
        let e = CatalogUrl::parse(&format!("clickhouse://{}/db", many.join(",")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 16"), "{e}");
    }

    #[test]
    fn the_configured_cluster_joins_the_url_once() {
        assert_eq!(
            CatalogUrl::with_cluster("clickhouse://h1,h2/db", "c1").unwrap(),
            "clickhouse://h1,h2/db?cluster=c1"
        );
        assert_eq!(
            CatalogUrl::with_cluster("clickhouse://h/db?table_prefix=p_", "c1").unwrap(),
            "clickhouse://h/db?table_prefix=p_&cluster=c1"
        );
        assert_eq!(
            CatalogUrl::with_cluster("clickhouse://h/db?cluster=c1", "c1").unwrap(),
            "clickhouse://h/db?cluster=c1"
        );
        for (url, cluster, needle) in [
            ("clickhouse://h/db?cluster=c2", "c1", "name one"),
            ("sqlite:///x.db", "c1", "needs a clickhouse://"),
            ("clickhouse://u:hunter2@h/db", "a.b", "cluster \"a.b\""),
        ] {
            let e = CatalogUrl::with_cluster(url, cluster)
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle) && !e.contains("hunter2"), "{url}: {e}");
        }
    }

    #[test]
    fn sqlite_and_memory() {
        let u = CatalogUrl::parse("sqlite:///var/lib/spool/catalog.db").unwrap();
        assert_eq!(
            u,
            CatalogUrl::Sqlite {
                path: "/var/lib/spool/catalog.db".into(),
                table_prefix: "spool_".into()
            }
        );
        assert_eq!(
            CatalogUrl::parse("memory://").unwrap(),
            CatalogUrl::Memory { name: None }
        );
        assert_eq!(
            CatalogUrl::parse("memory://shared").unwrap(),
            CatalogUrl::Memory {
                name: Some("shared".into())
            }
        );
    }

    #[test]
    fn refusals_name_the_problem_without_secrets() {
        for (url, needle) in [
            (
                "clickhouse://h/db?tabel_prefix=x",
                "unknown parameter \"tabel_prefix\"",
            ),
            ("clickhouse://h/db-1", "database \"db-1\""),
            ("clickhouse://h/db?table_prefix=a;drop", "table_prefix"),
            ("sqlite://relative/path.db", "three slashes"),
            ("postgres://h/db", "unknown scheme"),
            (
                "clickhouse://u:hunter2@h/db?password=hunter2&bogus=1",
                "unknown parameter",
            ),
        ] {
            let e = CatalogUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
            assert!(!e.contains("hunter2"), "{url}: {e}");
        }
    }
}
