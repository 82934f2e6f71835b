//! TEMPORARY stand-in for spool-lock's API while it is being written on
//! the `lock` branch (same names and shapes); removed when it lands on main.
//! Real flocks on `<dir>/.owner.lock`, no directory lock, no atfork.
#![allow(missing_docs, dead_code)]

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

pub const LOCK_FILE_NAME: &str = ".owner.lock";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: Option<u32>,
    pub host: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "pid {pid} on host {}", self.host),
            None => write!(f, "pid unknown on host {}", self.host),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("spool directory {} is owned by {holder} (it holds {}/.owner.lock)", dir.display(), dir.display())]
    OwnedByOther { dir: PathBuf, holder: Holder },
    #[error("spool directory {} is not locked by this process", dir.display())]
    NotHeldByCaller { dir: PathBuf },
    #[error("unknown lock mode {value:?}")]
    UnknownMode { value: String },
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl Error {
    pub fn is_owned_by_another(&self) -> bool {
        matches!(self, Error::OwnedByOther { .. })
    }
    pub fn is_shared_filesystem(&self) -> bool {
        false
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockMode {
    #[default]
    Take,
    HeldByCaller,
}

impl FromStr for LockMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "take" => Ok(LockMode::Take),
            "held_by_caller" => Ok(LockMode::HeldByCaller),
            o => Err(Error::UnknownMode { value: o.into() }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    pub allow_shared_filesystem: bool,
    pub staging_max_age: Duration,
}
impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            allow_shared_filesystem: false,
            staging_max_age: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purpose {
    Claim,
    Adopting,
    Blocked(String),
    Unknown(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRecord {
    pub host: String,
    pub pid: Option<u32>,
    pub purpose: Purpose,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerStatus {
    pub held: bool,
    pub record: Option<OwnerRecord>,
    pub lock_file_replaced: bool,
    pub lock_file_present: bool,
}

impl OwnerStatus {
    pub fn holder(&self) -> Holder {
        match &self.record {
            Some(r) => Holder {
                pid: r.pid,
                host: r.host.clone(),
            },
            None => Holder {
                pid: None,
                host: "unknown".into(),
            },
        }
    }
}

fn held_set() -> &'static Mutex<Vec<PathBuf>> {
    static S: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    &S
}

fn host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

fn parse_record(s: &str) -> Option<OwnerRecord> {
    let mut host = None;
    let mut pid = None;
    let mut purpose = Purpose::Claim;
    for line in s.lines() {
        if let Some(v) = line.strip_prefix("host: ") {
            host = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("pid: ") {
            pid = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("purpose: ") {
            purpose = match v.trim() {
                "claim" => Purpose::Claim,
                "adopting" => Purpose::Adopting,
                o => match o.strip_prefix("blocked:") {
                    Some(w) => Purpose::Blocked(w.trim().into()),
                    None => Purpose::Unknown(o.into()),
                },
            };
        }
    }
    Some(OwnerRecord {
        host: host?,
        pid,
        purpose,
    })
}

fn render(p: &Purpose) -> String {
    let purpose = match p {
        Purpose::Claim => "claim".to_string(),
        Purpose::Adopting => "adopting".to_string(),
        Purpose::Blocked(w) => format!("blocked: {w}"),
        Purpose::Unknown(u) => u.clone(),
    };
    format!(
        "host: {}\npid: {}\npurpose: {purpose}\n",
        host(),
        std::process::id()
    )
}

#[derive(Debug)]
pub struct Claim {
    dir: PathBuf,
    file: Option<File>,
}

impl Claim {
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn mark_blocked(&self, why: &str) -> Result<(), Error> {
        let mut f = self.file.as_ref().expect("held");
        f.set_len(0).ok();
        use std::io::Seek;
        f.seek(std::io::SeekFrom::Start(0)).ok();
        f.write_all(render(&Purpose::Blocked(why.into())).as_bytes())
            .map_err(|e| Error::Io {
                op: "write",
                path: self.dir.clone(),
                source: e,
            })
    }
    pub fn release(mut self) -> Result<(), Error> {
        self.unregister();
        self.file.take();
        Ok(())
    }
    pub fn release_and_remove_if_empty(mut self) -> Result<bool, Error> {
        self.unregister();
        let only_lock = std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.flatten()
                    .all(|e| e.file_name() == LOCK_FILE_NAME || e.path().is_dir())
            })
            .unwrap_or(false);
        if only_lock {
            let _ = std::fs::remove_file(self.dir.join(LOCK_FILE_NAME));
            for e in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
                let _ = std::fs::remove_dir(e.path());
            }
            let _ = std::fs::remove_dir(&self.dir);
        }
        self.file.take();
        Ok(only_lock)
    }
    fn unregister(&self) {
        let mut s = held_set().lock().unwrap();
        if let Some(i) = s.iter().position(|d| d == &self.dir) {
            s.remove(i);
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(f) = self.file.take() {
            // keep until exit
            std::mem::forget(f);
        }
    }
}

fn take(dir: &Path, purpose: Purpose, create: bool) -> Result<Claim, Error> {
    let io = |op, e| Error::Io {
        op,
        path: dir.to_path_buf(),
        source: e,
    };
    if create && !dir.exists() {
        std::fs::create_dir(dir).map_err(|e| io("create", e))?;
    }
    let canon = dir.canonicalize().map_err(|e| io("canonicalize", e))?;
    if held_set().lock().unwrap().contains(&canon) {
        return Err(Error::OwnedByOther {
            dir: dir.into(),
            holder: Holder {
                pid: Some(std::process::id()),
                host: host(),
            },
        });
    }
    let path = dir.join(LOCK_FILE_NAME);
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| io("open", e))?;
    if f.try_lock().is_err() {
        let st = read_owner(dir)?;
        return Err(Error::OwnedByOther {
            dir: dir.into(),
            holder: st.holder(),
        });
    }
    f.set_len(0).map_err(|e| io("truncate", e))?;
    f.write_all(render(&purpose).as_bytes())
        .map_err(|e| io("write", e))?;
    held_set().lock().unwrap().push(canon.clone());
    Ok(Claim {
        dir: canon,
        file: Some(f),
    })
}

pub fn acquire(dir: &Path, _opts: &LockOptions) -> Result<Claim, Error> {
    take(dir, Purpose::Claim, true)
}
pub fn try_adopt(dir: &Path, _opts: &LockOptions) -> Result<Claim, Error> {
    take(dir, Purpose::Adopting, false)
}
pub fn verify_held_by_caller(dir: &Path, _opts: &LockOptions) -> Result<(), Error> {
    if held_by_this_process(dir)? {
        return Ok(());
    }
    let st = read_owner(dir)?;
    if st.held {
        return Err(Error::OwnedByOther {
            dir: dir.into(),
            holder: st.holder(),
        });
    }
    Err(Error::NotHeldByCaller { dir: dir.into() })
}
pub fn held_by_this_process(dir: &Path) -> Result<bool, Error> {
    let canon = match dir.canonicalize() {
        Ok(c) => c,
        Err(_) => return Ok(false),
    };
    Ok(held_set().lock().unwrap().contains(&canon))
}
pub fn read_owner(dir: &Path) -> Result<OwnerStatus, Error> {
    let path = dir.join(LOCK_FILE_NAME);
    let mut f = match File::open(&path) {
        Ok(f) => f,
        Err(_) => {
            return Ok(OwnerStatus {
                held: false,
                record: None,
                lock_file_replaced: false,
                lock_file_present: false,
            })
        }
    };
    let mut s = String::new();
    let _ = f.read_to_string(&mut s);
    let held = match f.try_lock_shared() {
        Ok(()) => {
            let _ = f.unlock();
            false
        }
        Err(_) => true,
    };
    Ok(OwnerStatus {
        held,
        record: parse_record(&s),
        lock_file_replaced: false,
        lock_file_present: true,
    })
}
pub fn check_node_local(_path: &Path, _allow: bool) -> Result<(), Error> {
    Ok(())
}
pub fn is_nested_spool(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(LOCK_FILE_NAME)).is_ok()
}
