//! `spool sweep`: deletes the bundles proven spare copies
//! ([`spool_service::sweep`]).

use std::sync::atomic::AtomicBool;

use anyhow::Result;
use serde_json::json;

use crate::exit::{coded, ExitCode};
use crate::source::{runtime, CatalogArgs};

/// Arguments of `spool sweep`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: CatalogArgs,
    /// The store [env: SPOOL_STORE] (destination.store): `s3://BUCKET[/PREFIX]`,
    /// `gs://...`, `az://...`, `file:///ABS/PATH`. Default under the spool
    /// root: `file://ROOT/.store`.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// At most this many objects older than the grace are examined in
    /// this pass (the rest wait for the next).
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub limit: usize,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// One JSON object with the counts.
    #[arg(long)]
    pub json: bool,
}

/// The long help of this command (with examples).
pub const LONG_ABOUT: &str = "\
Delete the bundles proven to be spare copies. A bundle is one object
holding many small packs (upload.bundle_bytes); one that no row names
comes from a crash between its upload and the index of its rows (its
packs went up again in another bundle) or from an upload whose answer was
lost.

A bundle is deleted only when its own bytes prove it spare: its key is
exactly spool's key for a bundle, it is the destination's orphan grace
old by the store's clock, no row names it, it walks as valid spool packs,
and every pack in it has a current row naming another object that holds
that pack. A bundle holding a pack no row names is kept, whatever its
age, and reported (run `spool reindex`): a catalog that lost rows never
turns a sweep into a loss. Nothing else under the prefix is ever
deleted.

The catalog must be the one the store prefix's record names (written by
the first service that drained there; the record also holds the
destination's orphan grace): another one is refused having done nothing,
and a catalog that does not exist is refused, never created. A dry run
deletes nothing and measures ages by this host's clock.

Catalog and store resolve as for `spool reindex`.

Examples:
  spool sweep --spool-root /var/lib/spool --dry-run
  spool sweep --catalog 'clickhouse://ch1:8123/spool' --store s3://bucket/packs --json";

/// Runs `spool sweep`.
pub fn run(args: Args, config_file: Option<&std::path::Path>) -> Result<ExitCode> {
    let cfg = args.target.config(args.store.as_deref(), config_file)?;
    let identity = cfg
        .catalog_identity()
        .map_err(|e| coded(ExitCode::Usage, e.to_string()))?;
    let store = cfg.open_store()?;
    let catalog = cfg.open_catalog_to_read()?;
    let rt = runtime()?;
    let report = rt
        .block_on(spool_service::sweep::sweep(
            catalog.as_ref(),
            &store,
            &identity,
            (args.limit, args.dry_run),
            &AtomicBool::new(false),
        ))
        .map_err(|e| coded(ExitCode::Other, e.to_string()))?;
    let kept_why: Vec<_> = report
        .kept_why
        .iter()
        .map(|(key, why)| json!({"key": key, "why": why}))
        .collect();
    if args.json {
        outln!(
            "{}",
            json!({
                "listed": report.listed,
                "grace_ms": report.grace.as_millis() as u64,
                "clock": report.clock,
                "young": report.young,
                "kept": report.kept,
                "deleted": report.deleted,
                "deleted_bytes": report.deleted_bytes,
                "orphaned_bytes": report.orphaned_bytes,
                "unindexed_bundles": report.unindexed_bundles,
                "unindexed_packs": report.unindexed_packs,
                "unproven": report.unproven,
                "kept_why": kept_why,
                "foreign": report.foreign,
                "stray_packs": report.stray_packs,
                "stray_pack_bytes": report.stray_pack_bytes,
                "truncated": report.truncated,
                "dry_run": args.dry_run,
            })
        );
    } else {
        let verb = if args.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        outln!(
            "spool sweep: {} object(s) under {}: {verb} {} bundle(s) proven spare ({} bytes); \
             kept {} that rows name ({} bytes in them no row names), {} younger than {:?} (by \
             the {} clock); {} object(s) outside spool's layout and {} pack(s) alone no row \
             names ({} bytes), never deleted{}",
            report.listed,
            store.description(),
            report.deleted,
            report.deleted_bytes,
            report.kept,
            report.orphaned_bytes,
            report.young,
            report.grace,
            report.clock,
            report.foreign,
            report.stray_packs,
            report.stray_pack_bytes,
            if report.truncated {
                "; stopped at --limit, run it again for the rest"
            } else {
                ""
            }
        );
        if report.unindexed_bundles > 0 {
            outln!(
                "spool sweep: {} pack(s) in {} bundle(s) have no row here: run spool reindex",
                report.unindexed_packs,
                report.unindexed_bundles
            );
        }
        if report.unproven > 0 {
            outln!(
                "spool sweep: {} bundle(s) no row names could not be proven spare: kept",
                report.unproven
            );
        }
        for (key, why) in &report.kept_why {
            outln!("  kept {key}: {why}");
        }
    }
    Ok(ExitCode::Ok)
}
