//! The torture's real servers (`--store s3`, `--catalog clickhouse`):
//! moto and ClickHouse, started here like `cargo xtask servers up` does
//! unless the environment it prints is already set, and the plain HTTP the
//! oracle reads them with (moto checks no signatures, so a listing and a
//! GET need no S3 client; ClickHouse takes SQL over HTTP).

use super::Options;
use crate::servers::{self, ServerProcess};
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// Where the torture's S3 bucket and ClickHouse server are, for every run.
pub struct Remote {
    /// moto: loopback port and bucket (`--store s3`).
    pub s3: Option<(u16, String)>,
    /// ClickHouse's HTTP port (`--catalog clickhouse`).
    pub clickhouse: Option<u16>,
    /// Servers started here (stopped when the torture ends).
    _started: Vec<ServerProcess>,
}

/// The port of an `http://127.0.0.1:PORT` URL.
fn port_of(url: &str) -> Result<u16> {
    url.trim_end_matches('/')
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("{url} is not http://127.0.0.1:PORT"))
}

impl Remote {
    /// The servers `o` asks for: from the environment `cargo xtask servers
    /// up` prints (`SPOOL_TEST_S3_ENDPOINT` + `SPOOL_TEST_S3_BUCKET`,
    /// `SPOOL_TEST_CLICKHOUSE_HTTP`) when it is set, else started here.
    pub fn start(root: &Path, o: &Options) -> Result<Remote> {
        Remote::start_with(root, o, &|k: &str| std::env::var(k).ok())
    }

    /// [`Remote::start`] reading the servers' environment through `env`
    /// (CI hands in the one of the servers it started).
    pub fn start_with(
        root: &Path,
        o: &Options,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Remote> {
        let mut started = Vec::new();
        let s3 = if o.s3 {
            match (env("SPOOL_TEST_S3_ENDPOINT"), env("SPOOL_TEST_S3_BUCKET")) {
                (Some(e), Some(b)) => Some((port_of(&e)?, b)),
                _ => {
                    let p = servers::moto::start_in(root, "torture-moto").context(
                        "starting moto for --store s3 (or run `cargo xtask servers up` and \
                         export the SPOOL_TEST_S3_* it prints)",
                    )?;
                    let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
                    let e = get("SPOOL_TEST_S3_ENDPOINT").context("moto's endpoint")?;
                    let b = get("SPOOL_TEST_S3_BUCKET").context("moto's bucket")?;
                    started.push(p);
                    Some((port_of(&e)?, b))
                }
            }
        } else {
            None
        };
        let clickhouse = if o.clickhouse {
            match env("SPOOL_TEST_CLICKHOUSE_HTTP") {
                Some(u) => Some(port_of(&u)?),
                None => {
                    let p = servers::clickhouse::start_in(root, "torture-clickhouse").context(
                        "starting ClickHouse for --catalog clickhouse (or run `cargo xtask \
                         servers up` and export the SPOOL_TEST_CLICKHOUSE_* it prints)",
                    )?;
                    let u = p
                        .env
                        .iter()
                        .find(|(n, _)| n == "SPOOL_TEST_CLICKHOUSE_HTTP")
                        .map(|(_, v)| v.clone())
                        .context("ClickHouse's HTTP address")?;
                    started.push(p);
                    Some(port_of(&u)?)
                }
            }
        } else {
            None
        };
        Ok(Remote {
            s3,
            clickhouse,
            _started: started,
        })
    }
}

/// moto answers an anonymous GET of an object 403: any SigV4-shaped
/// `Authorization` will do (it checks no signature).
const S3_AUTH: &str = "Authorization: AWS4-HMAC-SHA256 \
    Credential=spool-test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\r\n";

/// One HTTP/1.0 request to `127.0.0.1:port` (the server closes after its
/// answer) with the `extra` header lines: status and body bytes.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    extra: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{extra}Content-Length: {}\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .with_context(|| format!("reading the answer to {method} {path} from 127.0.0.1:{port}"))?;
    let end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .with_context(|| format!("{method} {path} on 127.0.0.1:{port}: no HTTP head"))?;
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, out[end + 4..].to_vec()))
}

/// Runs one ClickHouse statement over HTTP; fails with its answer.
pub fn clickhouse(port: u16, sql: &str) -> Result<String> {
    let (status, body) = http(port, "POST", "/", "", sql.as_bytes())?;
    let text = String::from_utf8_lossy(&body).to_string();
    if status != 200 {
        bail!("ClickHouse on 127.0.0.1:{port} answered {status} to `{sql}`: {text}");
    }
    Ok(text)
}

/// Percent-encodes a query value.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The text of every `<tag>...</tag>` in `xml`.
fn tags<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        rest = &rest[i + open.len()..];
        let Some(j) = rest.find(&close) else { break };
        out.push(&rest[..j]);
        rest = &rest[j + close.len()..];
    }
    out
}

/// Every key under `prefix/` in moto's `bucket` (ListObjectsV2, paged).
pub fn s3_keys(port: u16, bucket: &str, prefix: &str) -> Result<Vec<String>> {
    let mut keys = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut path = format!("/{bucket}?list-type=2&prefix={}%2F", encode(prefix));
        if let Some(t) = &token {
            path.push_str(&format!("&continuation-token={}", encode(t)));
        }
        let (status, body) = http(port, "GET", &path, S3_AUTH, b"")?;
        let xml = String::from_utf8_lossy(&body).to_string();
        if status != 200 {
            bail!("listing s3://{bucket}/{prefix}/ on moto (127.0.0.1:{port}) answered {status}: {xml}");
        }
        keys.extend(tags(&xml, "Key").into_iter().map(str::to_string));
        let truncated = tags(&xml, "IsTruncated").first() == Some(&"true");
        token = tags(&xml, "NextContinuationToken")
            .first()
            .map(|t| t.to_string());
        if !truncated || token.is_none() {
            return Ok(keys);
        }
    }
}

/// An object's bytes (`None` if it is not there).
pub fn s3_get(port: u16, bucket: &str, key: &str) -> Result<Option<Vec<u8>>> {
    let path = format!("/{bucket}/{}", key_path(key));
    match http(port, "GET", &path, S3_AUTH, b"")? {
        (200, body) => Ok(Some(body)),
        (404, _) => Ok(None),
        (status, body) => bail!(
            "GET s3://{bucket}/{key} on moto (127.0.0.1:{port}) answered {status}: {}",
            String::from_utf8_lossy(&body)
        ),
    }
}

/// Whether an object is there (a HEAD).
pub fn s3_exists(port: u16, bucket: &str, key: &str) -> Result<bool> {
    let path = format!("/{bucket}/{}", key_path(key));
    Ok(http(port, "HEAD", &path, S3_AUTH, b"")?.0 == 200)
}

/// A key as a path: each segment percent-encoded (`date=` has a `=`).
fn key_path(key: &str) -> String {
    key.split('/').map(encode).collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_are_read() {
        let xml = "<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>a/v1/x.pack</Key></Contents>\
                   <Contents><Key>a/v1/y.pack</Key></Contents><NextContinuationToken>t+1</NextContinuationToken></ListBucketResult>";
        assert_eq!(tags(xml, "Key"), ["a/v1/x.pack", "a/v1/y.pack"]);
        assert_eq!(tags(xml, "IsTruncated"), ["true"]);
        assert_eq!(encode("t+1/="), "t%2B1%2F%3D");
        assert_eq!(
            key_path("p/v1/date=2026-12-01/a.pack"),
            "p/v1/date%3D2026-12-01/a.pack"
        );
        assert_eq!(port_of("http://127.0.0.1:4567").unwrap(), 4567);
    }
}
