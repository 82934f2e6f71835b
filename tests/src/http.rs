//! A minimal HTTP/1.1 client over a plain TCP socket, for poking test
//! servers where no signed client is wanted (moto checks no signatures;
//! fake-gcs-server checks no credentials).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `method path` to `host:port` with an empty body and `Connection:
/// close`; returns the status and the body.
pub async fn request(addr: &str, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    request_with_body(addr, method, path, "", b"").await
}

/// Sends `method path` to `host:port` with `body` (and `content_type`, when
/// the body is not empty) and `Connection: close`; returns the status and
/// the response body.
pub async fn request_with_body(
    addr: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    let mut s = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !body.is_empty() {
        req.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await?;
    s.write_all(body).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out"))??;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}
