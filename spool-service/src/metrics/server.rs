//! The HTTP server of `/metrics` and `/healthz`: hyper's HTTP/1 server on a
//! current-thread tokio runtime of its own thread, so no scrape ever waits
//! on (or stalls) the service's runtime.
//!
//! Bounded against a hostile or broken peer:
//! - at most [`MAX_CONNECTIONS`] connections are served at once; one over
//!   the limit is closed as soon as it is accepted, so idle connections
//!   never pile up descriptors;
//! - a connection gets [`CONNECTION_TIMEOUT`] in all (headers, answer):
//!   one that sends nothing is closed; no keep-alive;
//! - an `accept` that fails (EMFILE when the process is out of descriptors,
//!   ENFILE, ENOMEM, ...) is logged once per storm and retried after
//!   [`ACCEPT_BACKOFF`]: the server keeps answering once descriptors are
//!   back, and never panics.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use tokio::sync::{oneshot, Semaphore};

use super::{render, Published};
use crate::Error;

/// Connections served at once; more are closed on accept.
pub const MAX_CONNECTIONS: usize = 32;
/// The whole life of one connection: request headers in, answer out.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause after a failed `accept` (out of descriptors, say).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The running HTTP server; dropping it stops it.
pub struct Server {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// The bound address (a port 0 request resolved).
    pub addr: SocketAddr,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Binds `addr` and serves `/metrics` and `/healthz` on a thread.
    pub fn start(addr: SocketAddr, published: Published) -> Result<Server, Error> {
        let cannot = |source: std::io::Error| Error::Metrics { addr, source };
        let listener = std::net::TcpListener::bind(addr).map_err(cannot)?;
        listener.set_nonblocking(true).map_err(cannot)?;
        let bound = listener.local_addr().map_err(cannot)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(cannot)?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("spool-metrics".into())
            .spawn(move || {
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => {
                            tokio::select! {
                                () = serve(listener, published) => {}
                                _ = stopped => {}
                            }
                        }
                        Err(e) => tracing::warn!("the metrics server cannot listen: {e}"),
                    }
                });
            })
            .map_err(cannot)?;
        tracing::info!(%bound, "serving /metrics and /healthz on http://{bound}");
        Ok(Server {
            stop: Some(stop),
            thread: Some(thread),
            addr: bound,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The accept loop (never returns).
async fn serve(listener: tokio::net::TcpListener, published: Published) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut failing = false;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                failing = false;
                stream
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(
                        "the metrics server cannot accept a connection ({e}); retrying every {ACCEPT_BACKOFF:?}"
                    );
                    failing = true;
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!("metrics: {MAX_CONNECTIONS} connections open, closing one more");
            drop(stream);
            continue;
        };
        let published = published.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let published = published.clone();
                async move { Ok::<_, Infallible>(answer(&req, &published)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(e) = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
                tracing::debug!("metrics connection closed after {CONNECTION_TIMEOUT:?}: {e}");
            }
            drop(slot);
        });
    }
}

/// The answer to one request.
fn answer<B>(req: &Request<B>, published: &Published) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    let (code, body, ctype) = match req.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            render(published),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        "/healthz" => match published.unhealthy() {
            None => (StatusCode::OK, "ok\n".to_string(), TEXT),
            Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"), TEXT),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "not found: try /metrics or /healthz\n".to_string(),
            TEXT,
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(ctype),
    );
    resp
}
