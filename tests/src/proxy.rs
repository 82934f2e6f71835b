//! A fault-injecting TCP proxy for HTTP/1.1 servers, put between
//! a client and a real server (moto, ClickHouse) to produce the faults the
//! server will not: refused connections, stalls, latency, connections cut
//! after N bytes, requests held back.
//!
//! It reads each request whole (head, then a `Content-Length` or chunked
//! body) before it forwards any of it, so **it never forwards a request it
//! did not receive whole**: a client that goes away mid-body leaves the
//! server nothing. A held-back request whose client went away meanwhile is
//! dropped, not forwarded. Responses stream back unparsed.
//!
//! Faults are [`ProxyRule`]s matched per request (method, path substring),
//! changeable at any time. Every request produces [`Event`]s; hooks
//! ([`Proxy::on_event`]) run in the proxy's task as they happen, so one
//! proxy's traffic can switch another's faults (cut the catalog at the first
//! upload).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a rule does to the requests it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyAction {
    /// Receive the request whole, never forward it, never answer; the
    /// connection stays open until the client closes it.
    Stall,
    /// Forward after this delay (dropped if the client goes away first).
    Delay(Duration),
    /// Hold the request back until [`Proxy::release_held`]; forward it then
    /// only if its client is still there.
    Hold,
    /// Read only this many bytes of the request body, then cut the
    /// connection (the request is not forwarded: it never arrived whole).
    CutRequestAfter(usize),
    /// Read only this many bytes of the request body, then stop reading and
    /// never answer (a store that stalls mid-body): the connection stays
    /// open, unread, until the client closes it or the proxy stops.
    StallRequestAfter(usize),
    /// Forward the request, then cut the connection after this many bytes
    /// of the response.
    CutResponseAfter(usize),
    /// Forward the request, pass this many bytes of the response, then
    /// stop relaying it (a server that stalls mid-answer): the connection
    /// stays open until the client closes it or the proxy stops.
    StallResponseAfter(usize),
    /// Receive the request whole, never forward it, and answer it with
    /// this HTTP status and a short body (`injected fault`), keeping the
    /// connection: a 503 / 500 / 403 burst without a mock server.
    Respond(u16),
}

/// A scripted fault: which requests, what, how often.
#[derive(Debug, Clone)]
pub struct ProxyRule {
    method: Option<String>,
    path_contains: Option<String>,
    action: ProxyAction,
    after: usize,
    times: Option<usize>,
}

impl ProxyRule {
    /// Every request, forever.
    pub fn new(action: ProxyAction) -> ProxyRule {
        ProxyRule {
            method: None,
            path_contains: None,
            action,
            after: 0,
            times: None,
        }
    }

    /// Only requests with this method (`PUT`, `HEAD`, ...).
    pub fn method(mut self, m: &str) -> ProxyRule {
        self.method = Some(m.to_ascii_uppercase());
        self
    }

    /// Only requests whose path (with query) contains `s`.
    pub fn path_contains(mut self, s: &str) -> ProxyRule {
        self.path_contains = Some(s.to_string());
        self
    }

    /// Let the first `n` matching requests through untouched.
    pub fn after(mut self, n: usize) -> ProxyRule {
        self.after = n;
        self
    }

    /// Apply to `n` matching requests, then retire.
    pub fn times(mut self, n: usize) -> ProxyRule {
        self.times = Some(n);
        self
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        self.method.as_deref().is_none_or(|m| m == method)
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
    }
}

/// What happened to a request (or connection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// A client connected.
    Accepted,
    /// A request arrived whole.
    Received,
    /// A request was sent upstream.
    Forwarded,
    /// A request is being held back.
    Held,
    /// A held-back (or delayed) request was dropped: its client went away.
    DroppedClientGone,
    /// A request is stalled (never forwarded).
    Stalled,
    /// A connection was cut mid-request (not forwarded).
    CutRequest,
    /// A connection was cut mid-response.
    CutResponse,
    /// A response was stalled mid-way (the rest never relayed).
    StalledResponse,
    /// A request was answered by the proxy itself ([`ProxyAction::Respond`]).
    Responded,
    /// A client went away before its request arrived whole (not forwarded).
    Incomplete,
}

/// One event, with the request it concerns (empty for connection events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// Connection number (from 1).
    pub conn: usize,
    /// Request method.
    pub method: String,
    /// Request path and query.
    pub path: String,
    /// Body bytes received.
    pub body_len: usize,
}

type Hook = Arc<dyn Fn(&Event) + Send + Sync>;

struct Shared {
    upstream: SocketAddr,
    rules: Mutex<Vec<ProxyRule>>,
    hooks: Mutex<Vec<Hook>>,
    events: Mutex<Vec<Event>>,
    conns: Mutex<Vec<JoinHandle<()>>>,
    next_conn: AtomicUsize,
    release: watch::Sender<u64>,
    refusing: watch::Sender<bool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn emit(&self, e: Event) {
        let hooks: Vec<Hook> = lock(&self.hooks).clone();
        lock(&self.events).push(e.clone());
        for h in hooks {
            h(&e);
        }
    }

    fn pick(&self, method: &str, path: &str) -> Option<ProxyAction> {
        let mut rules = lock(&self.rules);
        for r in rules.iter_mut() {
            if r.times == Some(0) || !r.matches(method, path) {
                continue;
            }
            if r.after > 0 {
                r.after -= 1;
                continue;
            }
            if let Some(t) = r.times.as_mut() {
                *t -= 1;
            }
            return Some(r.action.clone());
        }
        None
    }
}

/// A running proxy on a loopback port. Stops (and cuts every connection)
/// when dropped.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for c in lock(&self.shared.conns).drain(..) {
            c.abort();
        }
    }
}

impl Proxy {
    /// Starts a proxy to `upstream` on a free loopback port.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = bind("127.0.0.1:0".parse().expect("addr"))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            rules: Mutex::new(Vec::new()),
            hooks: Mutex::new(Vec::new()),
            events: Mutex::new(Vec::new()),
            conns: Mutex::new(Vec::new()),
            next_conn: AtomicUsize::new(1),
            release: watch::channel(0).0,
            refusing: watch::channel(false).0,
        });
        let accept = tokio::spawn(accept_loop(listener, addr, Arc::clone(&shared)));
        Ok(Proxy {
            addr,
            shared,
            accept,
        })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds a rule (the first active matching rule decides a request).
    pub fn add_rule(&self, rule: ProxyRule) {
        lock(&self.shared.rules).push(rule);
    }

    /// Drops every rule (requests already held stay held until released).
    pub fn clear_rules(&self) {
        lock(&self.shared.rules).clear();
    }

    /// Refuse connections (`true`): the port stops listening — clients get
    /// a real "connection refused" — and every open connection is cut.
    /// `false` listens again on the same port.
    pub fn set_refusing(&self, on: bool) {
        self.shared.refusing.send_replace(on);
        if on {
            for c in lock(&self.shared.conns).drain(..) {
                c.abort();
            }
        }
    }

    /// Lets every held-back request go (each forwarded only if its client
    /// is still there).
    pub fn release_held(&self) {
        self.shared.release.send_modify(|g| *g += 1);
    }

    /// Runs `hook` on every event, in the proxy's task, as it happens.
    pub fn on_event(&self, hook: impl Fn(&Event) + Send + Sync + 'static) {
        lock(&self.shared.hooks).push(Arc::new(hook));
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Event> {
        lock(&self.shared.events).clone()
    }

    /// How many events of `kind` so far.
    pub fn count(&self, kind: EventKind) -> usize {
        lock(&self.shared.events)
            .iter()
            .filter(|e| e.kind == kind)
            .count()
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let s = TcpSocket::new_v4()?;
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    s.listen(128)
}

async fn accept_loop(listener: TcpListener, addr: SocketAddr, shared: Arc<Shared>) {
    let mut refusing = shared.refusing.subscribe();
    let mut listener = Some(listener);
    loop {
        if *refusing.borrow_and_update() {
            listener = None;
            if refusing.changed().await.is_err() {
                return;
            }
            continue;
        }
        let l = match listener.take() {
            Some(l) => l,
            None => match bind(addr) {
                Ok(l) => l,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        tokio::select! {
            accepted = l.accept() => {
                if let Ok((stream, _)) = accepted {
                    let _ = stream.set_nodelay(true);
                    let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
                    shared.emit(Event { kind: EventKind::Accepted, conn, method: String::new(), path: String::new(), body_len: 0 });
                    let task = tokio::spawn(connection(stream, conn, Arc::clone(&shared)));
                    let mut conns = lock(&shared.conns);
                    conns.retain(|c| !c.is_finished());
                    conns.push(task);
                }
                listener = Some(l);
            }
            _ = refusing.changed() => { listener = Some(l); }
        }
    }
}

enum Framing {
    Length(usize),
    Chunked,
}

struct Head {
    method: String,
    path: String,
    len: usize,
    framing: Framing,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_head(buf: &[u8]) -> Option<Head> {
    let end = find(buf, b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&buf[..end]);
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let mut framing = Framing::Length(0);
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim();
            if k == "content-length" {
                framing = Framing::Length(v.parse().unwrap_or(0));
            } else if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                framing = Framing::Chunked;
            }
        }
    }
    Some(Head {
        method,
        path,
        len: end,
        framing,
    })
}

/// Where a chunked body (starting at `buf[0]`) ends, if it is complete.
fn chunked_end(buf: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line_end = find(&buf[at..], b"\r\n")? + at;
        let size_text = String::from_utf8_lossy(&buf[at..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            // Trailers, then an empty line.
            let end = find(&buf[at - 2..], b"\r\n\r\n")? + at - 2 + 4;
            return Some(end);
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        at += size + 2;
    }
}

async fn read_more(r: &mut OwnedReadHalf, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 64 << 10];
    match r.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// Waits until the client closes (true) — data it sends meanwhile is kept.
async fn client_gone(r: &mut OwnedReadHalf, buf: &mut Vec<u8>) {
    while read_more(r, buf).await {}
}

struct Upstream {
    write: OwnedWriteHalf,
    relay: JoinHandle<()>,
}

/// The client's write half, shared by the relay and the proxy's own
/// answers ([`ProxyAction::Respond`]).
type ClientWrite = Arc<tokio::sync::Mutex<OwnedWriteHalf>>;

/// A canned answer with `status` and a short body, keeping the connection.
fn canned(status: u16) -> Vec<u8> {
    let reason = match status {
        403 => "Forbidden",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Injected",
    };
    let body = "injected fault";
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.relay.abort();
    }
}

async fn connection(client: TcpStream, conn: usize, shared: Arc<Shared>) {
    let (mut cr, cw) = client.into_split();
    let cw: ClientWrite = Arc::new(tokio::sync::Mutex::new(cw));
    let mut upstream: Option<Upstream> = None;
    let cut_response = Arc::new(AtomicU64::new(u64::MAX));
    let stall_response = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let response_sent = Arc::new(AtomicU64::new(0));
    let mut buf: Vec<u8> = Vec::new();
    let ev = |kind: EventKind, method: &str, path: &str, body_len: usize| Event {
        kind,
        conn,
        method: method.to_string(),
        path: path.to_string(),
        body_len,
    };
    loop {
        // The head.
        let head = loop {
            if let Some(h) = parse_head(&buf) {
                break h;
            }
            if !read_more(&mut cr, &mut buf).await {
                if !buf.is_empty() {
                    shared.emit(ev(EventKind::Incomplete, "", "", buf.len()));
                }
                return;
            }
        };
        let action = shared.pick(&head.method, &head.path);
        // The body, whole (or cut on purpose).
        let end = loop {
            let body = &buf[head.len..];
            if let Some(ProxyAction::CutRequestAfter(n)) = action {
                if body.len() >= n {
                    shared.emit(ev(EventKind::CutRequest, &head.method, &head.path, n));
                    return;
                }
            }
            if let Some(ProxyAction::StallRequestAfter(n)) = action {
                if body.len() >= n {
                    shared.emit(ev(EventKind::Stalled, &head.method, &head.path, n));
                    // nothing read, nothing forwarded, nothing answered
                    std::future::pending::<()>().await;
                }
            }
            let end = match head.framing {
                Framing::Length(n) => (body.len() >= n).then_some(head.len + n),
                Framing::Chunked => chunked_end(body).map(|e| head.len + e),
            };
            if let Some(e) = end {
                break e;
            }
            if !read_more(&mut cr, &mut buf).await {
                shared.emit(ev(
                    EventKind::Incomplete,
                    &head.method,
                    &head.path,
                    buf.len() - head.len,
                ));
                return;
            }
        };
        let request: Vec<u8> = buf.drain(..end).collect();
        let body_len = end - head.len;
        shared.emit(ev(EventKind::Received, &head.method, &head.path, body_len));
        match &action {
            Some(ProxyAction::Stall) => {
                shared.emit(ev(EventKind::Stalled, &head.method, &head.path, body_len));
                client_gone(&mut cr, &mut buf).await;
                return;
            }
            Some(ProxyAction::Hold) => {
                shared.emit(ev(EventKind::Held, &head.method, &head.path, body_len));
                let mut release = shared.release.subscribe();
                release.borrow_and_update();
                tokio::select! {
                    _ = client_gone(&mut cr, &mut buf) => {
                        shared.emit(ev(EventKind::DroppedClientGone, &head.method, &head.path, body_len));
                        return;
                    }
                    _ = release.changed() => {}
                }
                // Released: is the client still there? A closed socket reads
                // as EOF at once.
                let probe =
                    tokio::time::timeout(Duration::from_millis(20), read_more(&mut cr, &mut buf))
                        .await;
                if let Ok(false) = probe {
                    shared.emit(ev(
                        EventKind::DroppedClientGone,
                        &head.method,
                        &head.path,
                        body_len,
                    ));
                    return;
                }
            }
            Some(ProxyAction::Respond(status)) => {
                let answer = canned(*status);
                if cw.lock().await.write_all(&answer).await.is_err() {
                    return;
                }
                shared.emit(ev(EventKind::Responded, &head.method, &head.path, body_len));
                continue;
            }
            Some(ProxyAction::Delay(d)) => {
                tokio::select! {
                    _ = client_gone(&mut cr, &mut buf) => {
                        shared.emit(ev(EventKind::DroppedClientGone, &head.method, &head.path, body_len));
                        return;
                    }
                    _ = tokio::time::sleep(*d) => {}
                }
            }
            _ => {}
        }
        // Forward.
        if upstream.is_none() {
            let Ok(s) = TcpStream::connect(shared.upstream).await else {
                return; // upstream down: the client sees its connection close
            };
            let _ = s.set_nodelay(true);
            let (ur, uw) = s.into_split();
            let relay = tokio::spawn(relay(
                ur,
                Arc::clone(&cw),
                Arc::clone(&cut_response),
                Arc::clone(&stall_response),
                Arc::clone(&response_sent),
                Arc::clone(&shared),
                conn,
            ));
            upstream = Some(Upstream { write: uw, relay });
        }
        let limit = match action {
            Some(ProxyAction::CutResponseAfter(n) | ProxyAction::StallResponseAfter(n)) => {
                response_sent.load(Ordering::SeqCst) + n as u64
            }
            _ => u64::MAX,
        };
        stall_response.store(
            matches!(action, Some(ProxyAction::StallResponseAfter(_))),
            Ordering::SeqCst,
        );
        cut_response.store(limit, Ordering::SeqCst);
        let up = upstream.as_mut().expect("connected above");
        if up.write.write_all(&request).await.is_err() {
            return;
        }
        shared.emit(ev(EventKind::Forwarded, &head.method, &head.path, body_len));
    }
}

async fn relay(
    mut ur: OwnedReadHalf,
    cw: ClientWrite,
    cut: Arc<AtomicU64>,
    stall: Arc<std::sync::atomic::AtomicBool>,
    sent_total: Arc<AtomicU64>,
    shared: Arc<Shared>,
    conn: usize,
) {
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let sent = sent_total.load(Ordering::SeqCst);
        let n = match ur.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let limit = cut.load(Ordering::SeqCst);
        if limit != u64::MAX && sent + n as u64 >= limit {
            let keep = (limit - sent) as usize;
            let mut w = cw.lock().await;
            let _ = w.write_all(&chunk[..keep]).await;
            if stall.load(Ordering::SeqCst) {
                shared.emit(Event {
                    kind: EventKind::StalledResponse,
                    conn,
                    method: String::new(),
                    path: String::new(),
                    body_len: 0,
                });
                // the rest is never relayed; the client must give up
                drop(w);
                match std::future::pending::<std::convert::Infallible>().await {}
            }
            shared.emit(Event {
                kind: EventKind::CutResponse,
                conn,
                method: String::new(),
                path: String::new(),
                body_len: 0,
            });
            let _ = w.shutdown().await;
            return;
        }
        sent_total.fetch_add(n as u64, Ordering::SeqCst);
        if cw.lock().await.write_all(&chunk[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_chunked_bodies() {
        let h = parse_head(b"PUT /b/k?x=1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello").unwrap();
        assert_eq!((h.method.as_str(), h.path.as_str()), ("PUT", "/b/k?x=1"));
        assert!(matches!(h.framing, Framing::Length(5)));
        assert!(parse_head(b"PUT / HTTP/1.1\r\nContent-Len").is_none());
        assert_eq!(chunked_end(b"5\r\nhello\r\n0\r\n\r\n"), Some(15));
        assert_eq!(chunked_end(b"5\r\nhello\r\n0\r\n"), None);
        assert_eq!(chunked_end(b"5\r\nhel"), None);
    }

    /// An upstream that answers every request `HTTP/1.1 200` with `hello`.
    async fn upstream() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let mut chunk = [0u8; 4096];
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        while let Some(h) = parse_head(&buf) {
                            buf.drain(..h.len);
                            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
                            if s.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// Sends `GET /` on `s` and reads what comes within 500 ms.
    async fn get(s: &mut TcpStream) -> Vec<u8> {
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = s.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&chunk[..n]);
                if out.ends_with(b"hello") || out.ends_with(b"injected fault") {
                    break;
                }
            }
        })
        .await;
        out
    }

    #[tokio::test]
    async fn canned_answers_keep_the_connection_and_stalled_responses_stop_mid_way() {
        let proxy = Proxy::start(upstream().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(get(&mut s).await.ends_with(b"hello"));
        proxy.add_rule(ProxyRule::new(ProxyAction::Respond(503)).times(1));
        let answer = get(&mut s).await;
        assert!(answer.starts_with(b"HTTP/1.1 503 "), "{answer:?}");
        assert!(answer.ends_with(b"injected fault"));
        // the same connection goes on to the server afterwards
        assert!(get(&mut s).await.ends_with(b"hello"));
        proxy.add_rule(ProxyRule::new(ProxyAction::StallResponseAfter(9)).times(1));
        assert_eq!(get(&mut s).await, b"HTTP/1.1 ");
        assert_eq!(proxy.count(EventKind::Responded), 1);
        assert_eq!(proxy.count(EventKind::StalledResponse), 1);
    }
}
