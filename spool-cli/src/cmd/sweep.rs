//! `spool sweep`: deletes the bundles no row names once they are
//! `upload.orphan_grace` old ([`spool_service::sweep`]).

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
Delete the bundles no catalog row names, once they are upload.orphan_grace
old (default 1h; SPOOL_UPLOAD_ORPHAN_GRACE).

A bundle is one object holding many small packs (upload.bundle_bytes). One
that no row names comes from a crash between its upload and the index of
its rows (its packs went up again in another bundle) or from an upload
whose answer was lost. The sweep lists the store's prefix, asks the
catalog which old bundles rows name, and deletes the others. It never
races an index: a drain indexes rows naming a bundle only within half of
the grace after uploading it, so keep the grace well above the longest
catalog outage you ride out without a restart and every host's clock
within half of it of the store's.

It also reports the bytes in kept bundles no row names any more and the
old packs alone at their own key no row names; those are never deleted.
Do not run it while `spool reindex` runs. Catalog and store resolve as for
`spool reindex`.

Examples:
  spool sweep --spool-root /var/lib/spool --dry-run
  SPOOL_UPLOAD_ORPHAN_GRACE=6h spool sweep --catalog 'clickhouse://ch1:8123/spool' --store s3://bucket/packs --json";

/// Runs `spool sweep`.
pub fn run(args: Args, config_file: Option<&std::path::Path>) -> Result<ExitCode> {
    let cfg = args.target.config(args.store.as_deref(), config_file)?;
    let grace = cfg
        .upload()
        .map_err(|e| coded(ExitCode::Usage, e.to_string()))?
        .orphan_grace;
    let store = cfg.open_store()?;
    let catalog = cfg.open_catalog_to_read()?;
    let rt = runtime()?;
    let report = rt
        .block_on(spool_service::sweep::sweep(
            catalog.as_ref(),
            &store,
            grace,
            (args.limit, args.dry_run),
            &AtomicBool::new(false),
        ))
        .map_err(|e| coded(ExitCode::Other, e.to_string()))?;
    if args.json {
        outln!(
            "{}",
            json!({
                "listed": report.listed,
                "young": report.young,
                "kept": report.kept,
                "deleted": report.deleted,
                "deleted_bytes": report.deleted_bytes,
                "orphaned_bytes": report.orphaned_bytes,
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
            "spool sweep: {} object(s) under {}: {verb} {} bundle(s) no row names ({} bytes); \
             kept {} ({} bytes in them no row names), {} younger than {:?}; {} pack(s) alone \
             that no row names ({} bytes, never deleted){}",
            report.listed,
            store.description(),
            report.deleted,
            report.deleted_bytes,
            report.kept,
            report.orphaned_bytes,
            report.young,
            grace,
            report.stray_packs,
            report.stray_pack_bytes,
            if report.truncated {
                "; stopped at --limit, run it again for the rest"
            } else {
                ""
            }
        );
    }
    Ok(ExitCode::Ok)
}
