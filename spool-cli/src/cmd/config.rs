//! `spool config show [--json]`: the effective configuration, each key with
//! its value (secrets masked) and where it came from (flag, environment,
//! file, default), plus what it derives: the destination's database, table
//! prefix and catalog key, and which store credentials the environment
//! holds (secret ones only as "set").

use anyhow::Result;
use serde_json::json;

use crate::config::{mask_url, ConfigFlags, PLAIN_ENV, SECRET_ENV};
use crate::exit::ExitCode;

/// Arguments of `spool config`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

/// `spool config` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// Print the effective configuration and where each value came from.
    Show(ShowArgs),
}

/// Arguments of `spool config show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub config: ConfigFlags,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `spool config`.
pub fn run(args: Args, config_file: Option<&std::path::Path>) -> Result<ExitCode> {
    let Sub::Show(args) = args.command;
    let cfg = crate::config::load(config_file, &args.config)?;
    let destination = cfg.destination().ok();
    let key = destination.as_ref().and_then(|d| d.catalog_key().ok());
    let env: Vec<(String, String)> = PLAIN_ENV
        .iter()
        .filter_map(|v| std::env::var(v).ok().map(|x| (v.to_string(), mask_url(&x))))
        .chain(
            SECRET_ENV
                .iter()
                .filter(|v| std::env::var_os(v).is_some())
                .map(|v| (v.to_string(), "**** (set)".to_string())),
        )
        .collect();
    if args.json {
        let keys: Vec<_> = cfg
            .entries()
            .map(|e| {
                json!({
                    "key": e.key.name,
                    "value": e.value.as_ref().map(|v| v.to_string()),
                    "source": e.source.to_string(),
                    "env": e.key.env,
                    "flag": e.key.flag,
                    "help": e.key.help,
                })
            })
            .collect();
        let out = json!({
            "file": cfg.file,
            "keys": keys,
            "derived": {
                "database": destination.as_ref().map(|d| d.database.clone()),
                "table_prefix": destination.as_ref().map(|d| d.table_prefix.clone()),
                "catalog_key": key,
                "key_dir": cfg.key_dir().ok().map(|(_, d)| d),
            },
            "store_environment": env.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        });
        outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::Ok);
    }
    match &cfg.file {
        Some(f) => outln!("# config file: {}", f.display()),
        None => outln!("# config file: none (--config, SPOOL_CONFIG or ./spool.toml)"),
    }
    let rows: Vec<(String, String, String)> = cfg
        .entries()
        .map(|e| {
            (
                e.key.name.to_string(),
                e.value
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "(unset)".into()),
                e.source.to_string(),
            )
        })
        .collect();
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(3);
    let w1 = rows
        .iter()
        .map(|r| r.1.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    outln!("{:w0$}  {:w1$}  SOURCE", "KEY", "VALUE");
    for (k, v, s) in &rows {
        outln!("{k:w0$}  {v:w1$}  {s}");
    }
    if let Some(d) = &destination {
        outln!();
        outln!("# derived");
        outln!("database      {}", d.database);
        outln!("table_prefix  {}", d.table_prefix);
        if let Some(k) = &key {
            outln!("catalog_key   {k}");
        }
        if let Ok((_, dir)) = cfg.key_dir() {
            outln!("key_dir       {}", dir.display());
        }
    }
    if !env.is_empty() {
        outln!();
        outln!("# store environment");
        for (k, v) in &env {
            outln!("{k}={v}");
        }
    }
    Ok(ExitCode::Ok)
}
