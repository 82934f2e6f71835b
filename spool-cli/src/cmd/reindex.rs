//! `spool reindex`: makes a catalog whole from its store
//! ([`spool_service::reindex`]): every valid pack under the store's prefix
//! that the catalog has no row for is indexed; nothing else is written.

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use serde_json::json;

use crate::exit::{coded, ExitCode};
use crate::source::{runtime, CatalogArgs};
use spool_service::prefix_record;

/// Arguments of `spool reindex`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: CatalogArgs,
    /// The store [env: SPOOL_STORE] (destination.store): `s3://BUCKET[/PREFIX]`,
    /// `gs://...`, `az://...`, `file:///ABS/PATH`. Default under the spool
    /// root: `file://ROOT/.store`.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Count what would be indexed; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// One JSON object with the counts and the objects refused.
    #[arg(long)]
    pub json: bool,
    /// Record this catalog as the one the store prefix serves, over a
    /// record naming another (that catalog lost for good), before indexing.
    #[arg(long, conflicts_with = "dry_run")]
    pub take_over: bool,
}

/// The long help of this command (with examples).
pub const LONG_ABOUT: &str = "\
Make a catalog whole from its object store: list every object under the
store's prefix, validate each one named like a pack (<32 hex digits>.pack)
as the pack its name says (header, every record, footer, trailer,
SHA-256), and each pack in an object named like a bundle likewise, and
index the valid ones the catalog has no row for.

The store prefix's record must name this catalog (spool sweep's help): a
reindex into another catalog is refused, having written nothing. A catalog
lost for good and rebuilt under another spelling takes the prefix over
with --take-over. On a prefix no service recorded yet, a reindex records
this catalog.

For a catalog that lost rows: a part a single unreplicated ClickHouse
server never fsynced before a power loss, a dropped table, a restored
backup. It never writes a second row for a pack the catalog has, never
indexes an object that is not a valid pack (each is named, with why), and
never changes the store. A row it writes carries the pack's key,
checksums, size and record count; where the pack came from (host, pid,
rank directory) is not in the object, so it says `unknown`. Running it
again is harmless: what it indexed is skipped. Refused with lease.scope =
catalog (stop the publisher, set lease.scope = node for the run).

Catalog and store resolve as for `spool run` and `spool cat`. An SQLite
catalog whose file is missing (a lost embedded .catalog.db) is created and
filled from the store (its directory must exist); --dry-run never creates
one.

Bundles (<32 hex digits>.bundle) are walked with ranged reads, from their
end by the packs' trailers and, past a damaged trailer, from their start by
the packs' framing: every intact pack in them is indexed. An object named
like a bundle but over 1 GiB (more than spool ever writes in one) is
reported, not read.

Examples:
  spool reindex --spool-root /var/lib/spool --dry-run
  spool reindex --catalog 'clickhouse://ch1:8123/spool' --store s3://bucket/packs --json";

/// Opens the catalog to index into, creating an SQLite catalog whose file
/// is missing (the one rebuild that needs no server: an embedded
/// `.catalog.db` lost with its rows); its directory must exist. Each
/// request is bounded by `catalog.request_timeout`, as the service's are.
fn open_catalog_to_write(
    cfg: &spool_service::config::Config,
) -> Result<std::sync::Arc<dyn spool_catalog::Catalog>> {
    let url = cfg.catalog_open_url()?;
    if let spool_catalog::CatalogUrl::Sqlite { path, .. } = spool_catalog::CatalogUrl::parse(&url)?
    {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if !path.is_file() && !dir.is_some_and(std::path::Path::is_dir) {
            return Err(coded(
                ExitCode::Usage,
                format!(
                    "the SQLite catalog {} does not exist and neither does its directory {}: \
                     spool reindex creates a lost catalog file, not directories; create the \
                     directory (mkdir -p) or fix --catalog / SPOOL_CATALOG / destination.catalog",
                    path.display(),
                    dir.map_or_else(|| "(none)".into(), |d| d.display().to_string()),
                ),
            ));
        }
        if !path.is_file() {
            tracing::warn!(
                "the SQLite catalog {} is missing: creating it and indexing every valid pack of \
                 the store into it",
                path.display()
            );
        }
    }
    Ok(spool_catalog::open_with_timeout(
        &url,
        spool_service::config::keys::CATALOG_REQUEST_TIMEOUT.get(cfg),
    )?)
}

/// Runs `spool reindex`.
pub fn run(args: Args, config_file: Option<&std::path::Path>) -> Result<ExitCode> {
    let cfg = args.target.config(args.store.as_deref(), config_file)?;
    if cfg.lease_scope() == spool_catalog::LeaseScope::Catalog {
        return Err(coded(
            ExitCode::Usage,
            "lease.scope is `catalog`: nothing may be indexed without the catalog's lease, which \
             the single publisher holds; stop it and run `spool reindex` with lease.scope = node \
             (SPOOL_LEASE_SCOPE=node), then start the publisher again",
        ));
    }
    let store = cfg.open_store()?;
    let catalog = if args.dry_run {
        cfg.open_catalog_to_read()?
    } else {
        open_catalog_to_write(&cfg)?
    };
    let store_id = cfg
        .destination()
        .map(|d| d.store_id)
        .map_err(|e| coded(ExitCode::Usage, e.to_string()))?;
    let identity = cfg
        .catalog_identity()
        .map_err(|e| coded(ExitCode::Usage, e.to_string()))?;
    let rt = runtime()?;
    let report = rt
        .block_on(async {
            catalog
                .ensure_schema()
                .await
                .map_err(|e| spool_service::Error::ReindexCatalog {
                    catalog: catalog.server(),
                    error: Box::new(e),
                })?;
            let request = catalog.request_timeout();
            let grace = cfg
                .upload()
                .map_err(spool_service::Error::from)?
                .orphan_grace;
            if args.take_over {
                prefix_record::take_over(&store, &identity, &store_id, grace, request).await?;
            } else {
                match prefix_record::check(&store, &identity, request).await {
                    Ok(_) => {}
                    Err(spool_service::Error::NoPrefixRecord { .. }) if !args.dry_run => {
                        prefix_record::settle(&store, &identity, &store_id, grace, request).await?;
                    }
                    Err(spool_service::Error::NoPrefixRecord { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            spool_service::reindex::reindex(
                catalog.as_ref(),
                &store,
                &store_id,
                None,
                args.dry_run,
                &AtomicBool::new(false),
            )
            .await
        })
        .map_err(|e| coded(ExitCode::Other, e.to_string()))?;
    let verb = if args.dry_run {
        "would index"
    } else {
        "indexed"
    };
    if args.json {
        outln!(
            "{}",
            json!({
                "listed": report.listed,
                "present": report.present,
                "inserted": report.inserted,
                "dry_run": args.dry_run,
                "other": report.other,
                "damaged": report.damaged,
                "invalid": report.invalid.iter().map(|(k, why)| json!({"key": k, "why": why})).collect::<Vec<_>>(),
            })
        );
    } else {
        outln!(
            "spool reindex: {} object(s) under {}: {} already indexed, {verb} {}, {} not named like a pack, {} not a valid pack or holding damaged packs ({} damaged pack(s))",
            report.listed,
            store.description(),
            report.present,
            report.inserted,
            report.other,
            report.invalid.len(),
            report.damaged
        );
        for (key, why) in &report.invalid {
            outln!("  not indexed: {key}: {why}");
        }
    }
    Ok(ExitCode::Ok)
}
