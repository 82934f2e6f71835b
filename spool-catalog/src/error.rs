//! The one error type of spool-catalog.
//!
//! Every message names the catalog (its URL with credentials removed, or the
//! SQLite path), the purpose of the statement that failed, and what to do.
//! [`Error::is_retryable`] classifies: an unreachable server, a timeout, a
//! 5xx without a ClickHouse exception, and the server-side codes that mean
//! "busy, try later" are retryable; authentication, schema mismatch, an
//! unknown setting, syntax and every other exception are not.

use std::time::Duration;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every way a catalog operation can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The catalog URL could not be understood.
    #[error("invalid catalog URL {url}: {reason}")]
    InvalidUrl {
        /// The URL as given, credentials removed.
        url: String,
        /// What is wrong with it and what is expected.
        reason: String,
    },

    /// The URL names a backend this build does not have.
    #[error("catalog {url}: {reason}")]
    BackendNotBuilt {
        /// The URL as given, credentials removed.
        url: String,
        /// What is missing (a cargo feature, the test seams).
        reason: String,
    },

    /// The server could not be reached (refused, reset, DNS): retryable.
    #[error("catalog {server} is unreachable while trying to {purpose}: {detail}; check that the server runs and the host and port are right (will retry)")]
    Unreachable {
        /// The server, credentials removed.
        server: String,
        /// What the statement was for.
        purpose: &'static str,
        /// The transport's own words.
        detail: String,
    },

    /// No answer within the request timeout: retryable.
    #[error(
        "catalog {server} did not answer within {after:?} while trying to {purpose} (will retry)"
    )]
    Timeout {
        /// The server, credentials removed.
        server: String,
        /// What the statement was for.
        purpose: &'static str,
        /// The timeout that ran out.
        after: Duration,
    },

    /// The server refused the credentials.
    #[error("catalog {server} refused the credentials while trying to {purpose}: {message}; set user= and password= in the catalog URL")]
    Auth {
        /// The server, credentials removed.
        server: String,
        /// What the statement was for.
        purpose: &'static str,
        /// The server's message.
        message: String,
    },

    /// The server does not know a setting the statement uses (an older or
    /// differently configured server).
    #[error("catalog {server} does not know a setting used to {purpose}: {message}; this ClickHouse version is not supported by this spool (see spool-catalog's crate docs, ClickHouse versions)")]
    UnknownSetting {
        /// The server, credentials removed.
        server: String,
        /// What the statement was for.
        purpose: &'static str,
        /// The server's message.
        message: String,
    },

    /// The catalog URL asks for a feature this server's version lacks
    /// (`async_insert=1` before ClickHouse 22.1). Refused at connect, before
    /// anything is read or written.
    #[error("catalog {server} runs ClickHouse {version}, which has no {feature} (added in {since}); remove {knob} from the catalog URL, or upgrade the server")]
    NotSupportedByServer {
        /// The server, credentials removed.
        server: String,
        /// The version the server reported (`SELECT version()`).
        version: String,
        /// The URL knob that asks for it, as spelled in the URL.
        knob: &'static str,
        /// What the knob needs from the server.
        feature: &'static str,
        /// The first server version that has it.
        since: &'static str,
    },

    /// The tables exist but do not have the columns this version expects.
    #[error("catalog {server}: {detail}; refusing to read or write it. Point spool at another database or table_prefix, or migrate the tables by hand")]
    SchemaMismatch {
        /// The server, credentials removed.
        server: String,
        /// Which table and columns differ.
        detail: String,
    },

    /// The catalog is set to a cluster (`catalog.cluster`) but a table of
    /// it is not replicated: its inserts would have no quorum to wait for.
    #[error("catalog {server}: table {table} is {engine}, not replicated, while catalog.cluster is set to {cluster}; move a one-server catalog to a cluster as the README's \"Replicated catalog\" says, or unset catalog.cluster")]
    NotReplicated {
        /// The server, credentials removed.
        server: String,
        /// The table, prefixed.
        table: String,
        /// Its engine (`system.tables.engine`).
        engine: String,
        /// The configured cluster.
        cluster: String,
    },

    /// A table of the catalog is replicated but `catalog.cluster` is not
    /// set: this spool would insert without a quorum and decide lease
    /// claims on reads that need not see the other replicas' claims.
    #[error("catalog {server}: table {table} is {engine}, replicated, but catalog.cluster is not set; set catalog.cluster (or cluster= in the catalog URL) to the cluster the tables live on, as every spool of this catalog does, or point this spool at another database or table_prefix")]
    ReplicatedWithoutCluster {
        /// The server, credentials removed.
        server: String,
        /// The table, prefixed.
        table: String,
        /// Its engine (`system.tables.engine`).
        engine: String,
    },

    /// The configured cluster is not in the server's `system.clusters`.
    #[error("catalog {server}: the cluster {cluster} (catalog.cluster) is not in the server's system.clusters; name a cluster of the servers' <remote_servers>")]
    UnknownCluster {
        /// The server, credentials removed.
        server: String,
        /// The configured cluster.
        cluster: String,
    },

    /// `insert_quorum` is not a majority of the cluster's replicas: two
    /// claimants could each see a quorum without the other's claim.
    #[error("catalog {server}: insert_quorum={insert_quorum} is not a majority of the {replicas} replicas of cluster {cluster} (it must be more than {replicas}/2); raise insert_quorum in the catalog URL to at least {majority}")]
    QuorumBelowMajority {
        /// The server, credentials removed.
        server: String,
        /// The configured cluster.
        cluster: String,
        /// The configured quorum.
        insert_quorum: u32,
        /// Replicas of the cluster's largest shard (`system.clusters`).
        replicas: u32,
        /// The smallest majority, `replicas / 2 + 1`.
        majority: u32,
    },

    /// `insert_quorum` is more than the cluster has replicas: no insert
    /// could ever be confirmed.
    #[error("catalog {server}: insert_quorum={insert_quorum} is more than the {replicas} replicas of cluster {cluster}; no insert could reach it. Lower insert_quorum in the catalog URL to at most {replicas}")]
    QuorumAboveReplicas {
        /// The server, credentials removed.
        server: String,
        /// The configured cluster.
        cluster: String,
        /// The configured quorum.
        insert_quorum: u32,
        /// Replicas of the cluster's largest shard (`system.clusters`).
        replicas: u32,
    },

    /// The schema-version row names a version this build cannot read.
    #[error("catalog {server} has schema version {found}, this spool reads version {expected}; {advice}")]
    SchemaVersion {
        /// The server, credentials removed.
        server: String,
        /// The version found in the schema-version table.
        found: u32,
        /// The version this build writes and reads.
        expected: u32,
        /// What to do.
        advice: &'static str,
    },

    /// A catalog opened to read only ([`open_existing`](crate::open_existing))
    /// is not there: its database, file or tables are missing (a typo in the
    /// URL's database or `table_prefix`, or nothing was ever indexed there).
    /// Nothing was created.
    #[error("catalog {server} does not exist: {missing} (nothing was created); check the URL's database and table_prefix, or index into it first (a service, `spool run --once`, or `spool reindex`)")]
    NoCatalog {
        /// The server (or file), credentials removed.
        server: String,
        /// What is missing.
        missing: String,
    },

    /// The server answered with an error this crate does not single out.
    #[error("catalog {server} failed to {purpose}: {message}{}", if *retryable { " (will retry)" } else { "" })]
    Server {
        /// The server, credentials removed.
        server: String,
        /// What the statement was for.
        purpose: &'static str,
        /// The ClickHouse exception code, when the answer carried one.
        code: Option<u32>,
        /// The server's message.
        message: String,
        /// Whether trying again may succeed.
        retryable: bool,
    },

    /// A fenced index insert inserted nothing: the lease is not (or no
    /// longer safely) ours.
    #[error("catalog {server}: the index insert for {packs} pack(s) was fenced off: lease {name:?} (lease_id {lease_id}) is no longer held by this process with at least {margin:?} to run; nothing was indexed. Acquire the lease again before indexing")]
    Fenced {
        /// The server, credentials removed.
        server: String,
        /// The lease name.
        name: String,
        /// The lease id of the guard that was refused.
        lease_id: uuid::Uuid,
        /// The fence margin that was required.
        margin: Duration,
        /// How many packs the insert carried.
        packs: usize,
    },

    /// A row handed to `index` is malformed.
    #[error("pack row {pack_id:?} is invalid: {reason}")]
    InvalidRow {
        /// The row's pack id as given.
        pack_id: String,
        /// What is wrong.
        reason: String,
    },

    /// A lease configuration breaks the safety margin.
    #[error("invalid lease configuration: {0}")]
    InvalidConfig(String),

    /// The lease keeper's task panicked (a bug): the lease is let go and
    /// reported as `task_failed`.
    #[error("the lease keeper's task panicked: {0}")]
    LeaseTaskPanicked(String),

    /// This implementation of the `Catalog` trait does not provide the
    /// operation (a wrapper that does not forward it): nothing was read,
    /// and nothing may be concluded from it.
    #[error("catalog {server} cannot {purpose}: this implementation of the Catalog trait does not provide it (a wrapper that does not forward it); nothing was read")]
    Unsupported {
        /// The server, credentials removed.
        server: String,
        /// What the call was for.
        purpose: &'static str,
    },

    /// The catalog answered something this crate cannot read.
    #[error("catalog {server} answered unreadably while trying to {purpose}: {detail}")]
    Protocol {
        /// The server, credentials removed.
        server: String,
        /// What the statement was for.
        purpose: &'static str,
        /// What was wrong.
        detail: String,
    },

    /// SQLite failed.
    #[cfg(feature = "sqlite")]
    #[error("SQLite catalog {path} failed to {purpose}: {source}{}", if sqlite_retryable(source) { " (busy; will retry)" } else { "" })]
    Sqlite {
        /// The database file.
        path: String,
        /// What the statement was for.
        purpose: &'static str,
        /// rusqlite's error.
        #[source]
        source: rusqlite::Error,
    },
}

#[cfg(feature = "sqlite")]
fn sqlite_retryable(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

impl Error {
    /// Whether trying the same operation again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Unreachable { .. } | Error::Timeout { .. } => true,
            Error::Server { retryable, .. } => *retryable,
            #[cfg(feature = "sqlite")]
            Error::Sqlite { source, .. } => sqlite_retryable(source),
            _ => false,
        }
    }
}
