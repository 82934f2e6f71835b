//! What the ClickHouse server itself says, over its HTTP interface: the
//! run's database, `system.events` counters, active parts per partition
//! (`system.parts`), and the rows of a table as stored (without `FINAL`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use spool_catalog::CatalogUrl;

/// The `system.events` counters a fleet run reads (those 18.16 has; a
/// counter the server never bumped is absent, and reads as 0).
pub const EVENTS: &[&str] = &[
    "Query",
    "InsertQuery",
    "SelectQuery",
    "InsertedRows",
    "FailedQuery",
    "FailedInsertQuery",
    "DelayedInserts",
    "RejectedInserts",
    "Merge",
];

/// The ClickHouse server a catalog URL names first, and the other
/// replicas it names (a replicated catalog: `clickhouse://H1,H2,H3/db`).
/// Statements and counters go to the first (where the engines' inserts
/// go while it answers); the run's database is made and dropped on each.
#[derive(Debug, Clone)]
pub struct Server {
    host: String,
    port: u16,
    replicas: Vec<(String, u16)>,
}

impl Server {
    /// The servers of a `clickhouse://HOST:PORT[,HOST:PORT...]/...` URL.
    pub fn from_url(url: &str) -> Result<Server> {
        match CatalogUrl::parse(url)? {
            CatalogUrl::ClickHouse(t) => {
                let mut hosts = t.hosts.into_iter();
                let (host, port) = hosts
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("{url} names no host"))?;
                Ok(Server {
                    host,
                    port,
                    replicas: hosts.collect(),
                })
            }
            _ => bail!("{url} is not a clickhouse:// URL"),
        }
    }

    /// `clickhouse://HOST:PORT[,HOST:PORT...]/DATABASE`.
    pub fn catalog_url(&self, database: &str) -> String {
        let hosts: Vec<String> = std::iter::once((&self.host, self.port))
            .chain(self.replicas.iter().map(|(h, p)| (h, *p)))
            .map(|(h, p)| format!("{h}:{p}"))
            .collect();
        format!("clickhouse://{}/{database}", hosts.join(","))
    }

    /// Runs `sql` on the first server and on each other replica.
    pub fn on_each(&self, sql: &str, within: Duration) -> Result<()> {
        self.query_within(sql, within)?;
        for (host, port) in &self.replicas {
            let replica = Server {
                host: host.clone(),
                port: *port,
                replicas: Vec::new(),
            };
            replica.query_within(sql, within)?;
        }
        Ok(())
    }

    /// Runs one statement; returns the answer's body (TSV). Tried three
    /// times, 0.5 s apart: a loaded server may reset a connection.
    pub fn query(&self, sql: &str) -> Result<String> {
        let mut tries = 0;
        loop {
            match self.query_within(sql, Duration::from_secs(60)) {
                Err(e) if tries < 2 => {
                    tries += 1;
                    eprintln!("spool-fleet: retrying ({e:#})");
                    std::thread::sleep(Duration::from_millis(500));
                }
                r => return r,
            }
        }
    }

    /// One try of [`Server::query`], waiting at most `within` for the answer.
    pub fn query_within(&self, sql: &str, within: Duration) -> Result<String> {
        let addr = format!("{}:{}", self.host, self.port);
        let mut s = TcpStream::connect(&addr).with_context(|| format!("connecting to {addr}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(within))?;
        write!(
            s,
            "POST / HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{sql}",
            sql.len()
        )?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
            bail!("ClickHouse {addr} refused {sql:?}: {}", body.trim());
        }
        Ok(body.to_string())
    }

    /// The counters of [`EVENTS`].
    pub fn events(&self) -> Result<BTreeMap<String, u64>> {
        let list = EVENTS
            .iter()
            .map(|e| format!("'{e}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let body = self.query(&format!(
            "SELECT event, value FROM system.events WHERE event IN ({list})"
        ))?;
        Ok(body
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once('\t')?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect())
    }

    /// Active parts of each (table, partition) of `database`.
    pub fn parts(&self, database: &str) -> Result<Vec<(String, String, u64)>> {
        let body = self.query(&format!(
            "SELECT table, partition, count() FROM system.parts WHERE database = '{database}' AND active GROUP BY table, partition"
        ))?;
        Ok(body
            .lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                Some((
                    f.next()?.into(),
                    f.next()?.into(),
                    f.next()?.trim().parse().ok()?,
                ))
            })
            .collect())
    }

    /// `count()` and `uniqExact(column)` of a table as stored (no `FINAL`).
    pub fn rows(&self, table: &str, column: &str) -> Result<(u64, u64)> {
        let body = self.query(&format!("SELECT count(), uniqExact({column}) FROM {table}"))?;
        let mut f = body.trim().split('\t').map(|v| v.parse::<u64>());
        match (f.next(), f.next()) {
            (Some(Ok(a)), Some(Ok(b))) => Ok((a, b)),
            _ => bail!("unreadable answer to counting {table}: {body:?}"),
        }
    }

    /// The server's version.
    pub fn version(&self) -> Result<String> {
        Ok(self.query("SELECT version()")?.trim().to_string())
    }
}
