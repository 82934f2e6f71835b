//! The fault-scripting object store, for the fast tier: wraps any
//! `ObjectStore` (usually `InMemory`) and, per operation and key, fails,
//! stalls or delays calls, and counts them. Compiled only for tests (the
//! `testing` feature).
//!
//! ```ignore
//! let fake = FaultStore::new(Arc::new(InMemory::new()));
//! fake.script(Rule::new(Op::Put, Action::Fail(Injected::Status(503))).times(2));
//! fake.script(Rule::new(Op::PutPart, Action::Stall).key_contains("big"));
//! assert_eq!(fake.calls(Op::Put), 3);
//! ```

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};
use tokio::sync::Notify;

use crate::retryable::StatusError;

/// An operation of the store, as the fake counts and scripts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// A single PUT (`put_opts`).
    Put,
    /// Starting a multipart upload.
    CreateMultipart,
    /// One part of a multipart upload.
    PutPart,
    /// Completing a multipart upload.
    Complete,
    /// Aborting a multipart upload.
    Abort,
    /// A HEAD (`get_opts` with `head`).
    Head,
    /// A GET, ranged or whole.
    Get,
    /// A delete.
    Delete,
    /// A listing.
    List,
    /// A copy.
    Copy,
}

/// An error the fake injects, shaped as object_store reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injected {
    /// An HTTP status: 404 → `NotFound`, 401 → `Unauthenticated`, 403 →
    /// `PermissionDenied`, 409 → `AlreadyExists`, 412 → `Precondition`,
    /// anything else `Generic` with a [`StatusError`] source.
    Status(u16),
    /// Connection refused.
    ConnectionRefused,
    /// A TLS handshake failure.
    Tls,
    /// A request timeout.
    Timeout,
}

impl Injected {
    fn to_error(&self, op: Op, key: &str) -> object_store::Error {
        let path = key.to_string();
        let msg = format!("injected by FaultStore on {op:?} {key}");
        match self {
            Injected::Status(404) => object_store::Error::NotFound {
                path,
                source: msg.into(),
            },
            Injected::Status(401) => object_store::Error::Unauthenticated {
                path,
                source: msg.into(),
            },
            Injected::Status(403) => object_store::Error::PermissionDenied {
                path,
                source: msg.into(),
            },
            Injected::Status(409) => object_store::Error::AlreadyExists {
                path,
                source: msg.into(),
            },
            Injected::Status(412) => object_store::Error::Precondition {
                path,
                source: msg.into(),
            },
            Injected::Status(s) => object_store::Error::Generic {
                store: "FaultStore",
                source: Box::new(StatusError {
                    status: *s,
                    message: msg,
                }),
            },
            Injected::ConnectionRefused => object_store::Error::Generic {
                store: "FaultStore",
                source: Box::new(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    format!("connection refused ({msg})"),
                )),
            },
            Injected::Tls => object_store::Error::Generic {
                store: "FaultStore",
                source: Box::new(std::io::Error::other(format!(
                    "TLS handshake failed: invalid peer certificate: UnknownIssuer ({msg})"
                ))),
            },
            Injected::Timeout => object_store::Error::Generic {
                store: "FaultStore",
                source: Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("operation timed out ({msg})"),
                )),
            },
        }
    }
}

/// What a scripted rule does to a matching call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Fail at once with this error.
    Fail(Injected),
    /// Never answer until [`FaultStore::release_stalls`] (or the caller
    /// drops the call, as a cancel does).
    Stall,
    /// Answer (from the wrapped store) after this long.
    Delay(Duration),
}

/// One scripted fault: which calls it matches, what it does, how often.
#[derive(Debug, Clone)]
pub struct Rule {
    op: Op,
    key_contains: Option<String>,
    action: Action,
    skip: usize,
    times: Option<usize>,
}

impl Rule {
    /// Matches every call of `op`, forever.
    pub fn new(op: Op, action: Action) -> Rule {
        Rule {
            op,
            key_contains: None,
            action,
            skip: 0,
            times: None,
        }
    }

    /// Only calls on keys containing `s`.
    pub fn key_contains(mut self, s: &str) -> Rule {
        self.key_contains = Some(s.to_string());
        self
    }

    /// Lets the first `n` matching calls through untouched.
    pub fn after(mut self, n: usize) -> Rule {
        self.skip = n;
        self
    }

    /// Applies to `n` matching calls, then retires.
    pub fn times(mut self, n: usize) -> Rule {
        self.times = Some(n);
        self
    }

    fn matches(&self, op: Op, key: &str) -> bool {
        self.op == op && self.key_contains.as_deref().is_none_or(|s| key.contains(s))
    }
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    calls: HashMap<(Op, String), usize>,
    /// Transfers (PUTs and multipart uploads) in progress, and the most seen.
    transfers: usize,
    max_transfers: usize,
    /// Payload bytes in PUT and part calls in progress, and the most seen.
    bytes: u64,
    max_bytes: u64,
    /// Multipart uploads started and not yet completed or aborted.
    open_multipart: HashMap<String, usize>,
}

/// The fault-scripting store. Cheap to clone (clones share state).
#[derive(Clone)]
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<Mutex<State>>,
    unstall: Arc<Notify>,
}

impl fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

impl FaultStore {
    /// Wraps `inner`; no faults until scripted.
    pub fn new(inner: Arc<dyn ObjectStore>) -> FaultStore {
        FaultStore {
            inner,
            state: Arc::new(Mutex::new(State::default())),
            unstall: Arc::new(Notify::new()),
        }
    }

    /// The wrapped store (bypasses faults and counting).
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a rule; the first matching rule still active decides a call.
    pub fn script(&self, rule: Rule) {
        self.lock().rules.push(rule);
    }

    /// Drops every rule (calls stalled now stay stalled until released).
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// Wakes every stalled call; each then proceeds to the wrapped store.
    pub fn release_stalls(&self) {
        self.unstall.notify_waiters();
    }

    /// Calls of `op` so far, on every key.
    pub fn calls(&self, op: Op) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|((o, _), _)| *o == op)
            .map(|(_, n)| n)
            .sum()
    }

    /// Calls of `op` so far on `key`.
    pub fn calls_on(&self, op: Op, key: &Path) -> usize {
        self.lock()
            .calls
            .get(&(op, key.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// The most transfers (single PUTs plus multipart uploads) seen in
    /// progress at once.
    pub fn max_concurrent_transfers(&self) -> usize {
        self.lock().max_transfers
    }

    /// The most payload bytes seen in PUT and part calls in progress at once.
    pub fn max_bytes_in_flight(&self) -> u64 {
        self.lock().max_bytes
    }

    /// Multipart uploads started and neither completed nor aborted (parts
    /// that would be orphaned in a real store).
    pub fn open_multipart_uploads(&self) -> usize {
        self.lock().open_multipart.values().sum()
    }

    /// Counts the call and returns the fault to apply, if any.
    fn enter(&self, op: Op, key: &str) -> Option<Action> {
        let mut st = self.lock();
        *st.calls.entry((op, key.to_string())).or_default() += 1;
        let mut chosen = None;
        for rule in st.rules.iter_mut() {
            if !rule.matches(op, key) || rule.times == Some(0) {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                continue;
            }
            if let Some(t) = rule.times.as_mut() {
                *t -= 1;
            }
            chosen = Some(rule.action.clone());
            break;
        }
        chosen
    }

    /// Applies `op`'s scripted fault, if any: `Err` to fail, otherwise
    /// returns after any stall or delay.
    async fn fault(&self, op: Op, key: &str) -> object_store::Result<()> {
        fault(&self.unstall, self.enter(op, key), op, key).await
    }

    fn transfer(&self, bytes: u64) -> Gauge {
        {
            let mut st = self.lock();
            st.transfers += 1;
            st.max_transfers = st.max_transfers.max(st.transfers);
        }
        self.add_bytes(bytes);
        Gauge {
            state: Arc::clone(&self.state),
            transfers: 1,
            bytes,
        }
    }

    fn add_bytes(&self, bytes: u64) {
        let mut st = self.lock();
        st.bytes += bytes;
        st.max_bytes = st.max_bytes.max(st.bytes);
    }
}

async fn fault(
    unstall: &Notify,
    action: Option<Action>,
    op: Op,
    key: &str,
) -> object_store::Result<()> {
    match action {
        None => Ok(()),
        Some(Action::Fail(e)) => Err(e.to_error(op, key)),
        Some(Action::Stall) => {
            unstall.notified().await;
            Ok(())
        }
        Some(Action::Delay(d)) => {
            tokio::time::sleep(d).await;
            Ok(())
        }
    }
}

/// Undoes its share of the in-progress gauges when dropped (a call that
/// finished or was cut alike).
struct Gauge {
    state: Arc<Mutex<State>>,
    transfers: usize,
    bytes: u64,
}

impl Drop for Gauge {
    fn drop(&mut self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.transfers -= self.transfers;
        st.bytes -= self.bytes;
    }
}

#[async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let _g = self.transfer(payload.content_length() as u64);
        self.fault(Op::Put, location.as_ref()).await?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.fault(Op::CreateMultipart, location.as_ref()).await?;
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        let key = location.to_string();
        *self.lock().open_multipart.entry(key.clone()).or_default() += 1;
        let gauge = self.transfer(0);
        Ok(Box::new(FaultUpload {
            store: self.clone(),
            key,
            upload,
            open: true,
            _gauge: gauge,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let op = if options.head { Op::Head } else { Op::Get };
        self.fault(op, location.as_ref()).await?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.fault(Op::Get, location.as_ref()).await?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let me = self.clone();
        let checked = locations
            .then(move |p| {
                let me = me.clone();
                async move {
                    let p = p?;
                    me.fault(Op::Delete, p.as_ref()).await?;
                    Ok(p)
                }
            })
            .boxed();
        self.inner.delete_stream(checked)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let key = prefix.map(|p| p.to_string()).unwrap_or_default();
        let action = self.enter(Op::List, &key);
        let unstall = Arc::clone(&self.unstall);
        let inner = self.inner.list(prefix);
        futures::stream::once(async move {
            match fault(&unstall, action, Op::List, &key).await {
                Ok(()) => inner,
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let key = prefix.map(|p| p.to_string()).unwrap_or_default();
        self.fault(Op::List, &key).await?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.fault(Op::Copy, to.as_ref()).await?;
        self.inner.copy_opts(from, to, options).await
    }
}

/// A multipart upload through the fake: parts, completion and abort are
/// scripted and counted like calls.
struct FaultUpload {
    store: FaultStore,
    key: String,
    upload: Box<dyn MultipartUpload>,
    open: bool,
    _gauge: Gauge,
}

impl fmt::Debug for FaultUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultUpload({})", self.key)
    }
}

impl FaultUpload {
    fn close(&mut self) {
        if self.open {
            self.open = false;
            let mut st = self.store.lock();
            if let Some(n) = st.open_multipart.get_mut(&self.key) {
                *n -= 1;
                if *n == 0 {
                    st.open_multipart.remove(&self.key);
                }
            }
        }
    }
}

#[async_trait]
impl MultipartUpload for FaultUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let len = data.content_length() as u64;
        let action = self.store.enter(Op::PutPart, &self.key);
        let unstall = Arc::clone(&self.store.unstall);
        let key = self.key.clone();
        let store = self.store.clone();
        let part = self.upload.put_part(data);
        async move {
            store.add_bytes(len);
            let _g = Gauge {
                state: Arc::clone(&store.state),
                transfers: 0,
                bytes: len,
            };
            fault(&unstall, action, Op::PutPart, &key).await?;
            part.await
        }
        .boxed()
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        self.store.fault(Op::Complete, &self.key).await?;
        let r = self.upload.complete().await?;
        self.close();
        Ok(r)
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.store.fault(Op::Abort, &self.key).await?;
        self.upload.abort().await?;
        self.close();
        Ok(())
    }
}
