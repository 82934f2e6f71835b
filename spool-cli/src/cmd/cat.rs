//! `spool cat PACK_ID`: reads a pack back and writes it (or its records)
//! out, as [`LONG_ABOUT`] says. The read-back and its checks are the
//! library's [`spool_service::fetch::fetch_pack`] (Python's `spool.fetch`
//! too), into a temporary file (beside `--out`, or in the temp directory);
//! only a pack that passed is written. `--out` replaces only a regular file
//! (by a rename); a device or FIFO is written into; a symlink, directory or
//! socket is refused before anything is fetched ([`OutPath`]).

use std::io::{IsTerminal, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use spool_core::pack::{PackId, PackReader};
use spool_service::fetch::fetch_pack;
use spool_service::Error;

use crate::exit::{coded, ExitCode};
use crate::source::{runtime, CatalogArgs};

/// Arguments of `spool cat`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pack's id: 32 lowercase hex digits (as `spool ls` prints it).
    pub pack_id: String,
    #[command(flatten)]
    pub target: CatalogArgs,
    /// The store [env: SPOOL_STORE] (destination.store): `s3://BUCKET[/PREFIX]`,
    /// `gs://...`, `az://...`, `file:///ABS/PATH`. Default under the spool
    /// root: `file://ROOT/.store`.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Write the pack to FILE (atomically: a temporary file beside it,
    /// renamed once the checksum matched) instead of stdout. A device or
    /// FIFO is written into, never replaced; a symlink or directory is
    /// refused.
    #[arg(long, value_name = "FILE", conflicts_with = "records")]
    pub out: Option<PathBuf>,
    /// Print the pack's records, one per line, instead of the raw pack:
    /// verbatim when every record is UTF-8 text without line breaks, else
    /// refused (use --hex or --json).
    #[arg(long)]
    pub records: bool,
    /// With --records: each record as lowercase hex.
    #[arg(long, requires = "records", conflicts_with = "json")]
    pub hex: bool,
    /// With --records: one JSON object per record, `{"index", "bytes",
    /// "text"}` for UTF-8 records or `{"index", "bytes", "hex"}` otherwise.
    #[arg(long, requires = "records")]
    pub json: bool,
}

/// The long help of this command (with examples).
pub const LONG_ABOUT: &str = "\
Read one pack back from the catalog and the object store, check it, and
write it out.

The catalog row gives the object key; the object is fetched from the store
into a temporary file and checked with the pack format's own validation
(header, every record, footer, trailer, SHA-256) and against the catalog's
checksum and size. Only a pack that passes is written: to --out FILE (by
renaming the temporary file into place), or to stdout. A pack that fails
exits 9 and writes nothing. Raw packs are binary: without --out, stdout
must not be a terminal.

With --records the records are printed one per line instead: as text when
every record is UTF-8 without line breaks (otherwise refused before
anything is printed), as hex with --hex, or as JSON lines with --json.

Catalog and store resolve as for `spool run`: --catalog URL and --store
URL, else SPOOL_CATALOG and SPOOL_STORE, else destination.catalog and
destination.store in the config file (--config FILE, $SPOOL_CONFIG or
./spool.toml), else the embedded sqlite:///ROOT/.catalog.db and
file:///ROOT/.store under the spool root (--spool-root ROOT, SPOOL_ROOT,
spool.root). The store client's settings (client.*) come from there too.

Examples:
  spool cat 0192f0c4a1b27e3d9c0a5b6d7e8f9a0b --spool-root /var/lib/spool --out pack.bin
  spool cat 0192f0c4a1b27e3d9c0a5b6d7e8f9a0b --spool-root /var/lib/spool --records
  spool cat 0192f0c4a1b27e3d9c0a5b6d7e8f9a0b --catalog 'clickhouse://ch1:8123/spool' \\
      --store s3://bucket/packs --records --json";

/// Runs `spool cat`.
pub fn run(args: Args, config_file: Option<&std::path::Path>) -> Result<ExitCode> {
    let id = PackId::from_hex(&args.pack_id).map_err(|_| {
        coded(
            ExitCode::Usage,
            format!(
                "{:?} is not a pack id: a pack id is 32 lowercase hex digits (see `spool ls`)",
                args.pack_id
            ),
        )
    })?;
    if args.out.is_none() && !args.records && std::io::stdout().is_terminal() {
        return Err(coded(
            ExitCode::Usage,
            "refusing to write a binary pack to a terminal: give --out FILE, redirect stdout, \
             or print its records with --records",
        ));
    }
    let out = match &args.out {
        Some(path) => Some(OutPath::check(path)?),
        None => None,
    };
    let cfg = args.target.config(args.store.as_deref(), config_file)?;
    let store = cfg.open_store()?;
    let catalog = cfg.open_catalog_to_read()?;

    let rt = runtime()?;
    let hex_id = id.to_hex();
    // Where the temporary copy goes: beside --out (so the rename is
    // atomic), else the temp directory.
    let temp_dir = match &out {
        Some(OutPath::Replace(out)) => match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
        Some(OutPath::WriteInto(_)) | None => std::env::temp_dir(),
    };
    let mut temp = tempfile::Builder::new()
        .prefix(".spool-cat-")
        .suffix(".partial")
        .tempfile_in(&temp_dir)
        .with_context(|| format!("cannot create a temporary file in {}", temp_dir.display()))?;

    // The one library read-back (also Python's `spool.fetch`): row, object,
    // validation, the row's checksum and size.
    let fetched = rt.block_on(fetch_pack(catalog.as_ref(), &store, id, temp.as_file_mut()));
    let summary = match fetched {
        Ok(f) => f.summary,
        Err(e @ (Error::PackNotIndexed { .. } | Error::PackNotInStore { .. })) => {
            return Err(coded(ExitCode::Other, e.to_string()))
        }
        Err(e @ Error::PackMismatch { .. }) => {
            return Err(coded(
                ExitCode::Checksum,
                format!(
                    "{e}; nothing was written{}",
                    match &out {
                        Some(o) => format!(" to {}", o.path().display()),
                        None => String::new(),
                    }
                ),
            ))
        }
        Err(e) => return Err(e.into()),
    };
    temp.as_file_mut().sync_all().context("fsync")?;
    let sha = hex::encode(summary.sha256);

    if args.records {
        temp.as_file_mut().seek(SeekFrom::Start(0))?;
        print_records(temp.as_file(), &args)?;
    } else if let Some(out) = &out {
        match out {
            OutPath::Replace(out) => {
                temp.persist(out).map_err(|e| e.error).with_context(|| {
                    format!("cannot move the checked pack into {}", out.display())
                })?;
                sync_parent(out);
            }
            OutPath::WriteInto(out) => {
                temp.as_file_mut().seek(SeekFrom::Start(0))?;
                let mut dest = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                    .open(out)
                    .with_context(|| format!("cannot open {} to write into", out.display()))?;
                std::io::copy(temp.as_file_mut(), &mut dest).with_context(|| {
                    format!("cannot write the checked pack into {}", out.display())
                })?;
            }
        }
        let out = out.path();
        eprintln!(
            "wrote pack {hex_id} ({} bytes, {} records, sha256 {sha}) to {}",
            summary.bytes,
            summary.records,
            out.display()
        );
    } else {
        temp.as_file_mut().seek(SeekFrom::Start(0))?;
        let mut stdout = std::io::stdout().lock();
        std::io::copy(temp.as_file_mut(), &mut stdout).map_err(crate::exit::stdout_error)?;
        stdout.flush().map_err(crate::exit::stdout_error)?;
    }
    Ok(ExitCode::Ok)
}

/// Where `--out` writes, decided before anything is fetched.
enum OutPath {
    /// A regular file, or nothing yet: replaced by a rename.
    Replace(PathBuf),
    /// A character or block device, or a FIFO: written into, never
    /// replaced (`--out /dev/null` must not turn the system's device into
    /// a file).
    WriteInto(PathBuf),
}

impl OutPath {
    /// What is at `path` decides; a symlink (never followed: it may point
    /// anywhere), a directory or a socket is refused, exit 2.
    fn check(path: &Path) -> Result<OutPath> {
        use std::os::unix::fs::FileTypeExt;
        let meta = match std::fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(OutPath::Replace(path.to_path_buf()))
            }
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("cannot look at --out {}", path.display())))
            }
        };
        let ft = meta.file_type();
        if ft.is_file() {
            Ok(OutPath::Replace(path.to_path_buf()))
        } else if ft.is_char_device() || ft.is_block_device() || ft.is_fifo() {
            Ok(OutPath::WriteInto(path.to_path_buf()))
        } else {
            let what = if ft.is_symlink() {
                "a symlink (spool does not follow it: give the path it points to)"
            } else if ft.is_dir() {
                "a directory (give a file name inside it)"
            } else {
                "a socket"
            };
            Err(coded(
                ExitCode::Usage,
                format!(
                    "--out {} is {what}; nothing was fetched or written",
                    path.display()
                ),
            ))
        }
    }

    fn path(&self) -> &Path {
        match self {
            OutPath::Replace(p) | OutPath::WriteInto(p) => p,
        }
    }
}

fn sync_parent(path: &Path) {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if let Ok(d) = std::fs::File::open(parent) {
        let _ = d.sync_all();
    }
}

/// Whether a record prints verbatim as one line of text.
fn is_text(record: &[u8]) -> bool {
    std::str::from_utf8(record).is_ok_and(|s| !s.contains(['\n', '\r']))
}

/// Prints the records of a checked pack: text (refused, before anything is
/// printed, if any record is not a line of text), hex, or JSON lines.
fn print_records(file: &std::fs::File, args: &Args) -> Result<()> {
    let reader = |f: &std::fs::File| -> Result<PackReader<std::io::BufReader<std::fs::File>>> {
        let mut f = f.try_clone()?;
        f.seek(SeekFrom::Start(0))?;
        Ok(PackReader::new(std::io::BufReader::new(f))?)
    };
    if !args.hex && !args.json {
        let mut buf = Vec::new();
        let mut r = reader(file)?;
        let mut index = 0u64;
        while r.next_record_into(&mut buf)? {
            if !is_text(&buf) {
                return Err(coded(
                    ExitCode::Usage,
                    format!(
                        "record {index} ({} bytes) is binary (not UTF-8, or holds a line break): \
                         print the records with --records --hex or --records --json",
                        buf.len()
                    ),
                ));
            }
            index += 1;
        }
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut r = reader(file)?;
    let mut buf = Vec::new();
    let mut index = 0u64;
    while r.next_record_into(&mut buf)? {
        if args.json {
            let v = match std::str::from_utf8(&buf) {
                Ok(text) => serde_json::json!({"index": index, "bytes": buf.len(), "text": text}),
                Err(_) => {
                    serde_json::json!({"index": index, "bytes": buf.len(), "hex": hex::encode(&buf)})
                }
            };
            writeln!(out, "{v}").map_err(crate::exit::stdout_error)?;
        } else if args.hex {
            writeln!(out, "{}", hex::encode(&buf)).map_err(crate::exit::stdout_error)?;
        } else {
            out.write_all(&buf)?;
            out.write_all(b"\n")?;
        }
        index += 1;
    }
    out.flush().map_err(crate::exit::stdout_error)?;
    Ok(())
}
