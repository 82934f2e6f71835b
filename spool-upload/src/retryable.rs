//! Failure classification: which store errors are worth retrying.
//!
//! object_store hands errors over in two shapes. Statuses it recognises
//! become typed variants (404 → `NotFound`, 401 → `Unauthenticated`,
//! 403 → `PermissionDenied`, 409 → `AlreadyExists`, 412 → `Precondition`);
//! everything else is `Generic`, whose source chain holds either a
//! `RetryError` carrying the HTTP status (400, 429, 5xx, ...) or an
//! `HttpError` carrying the transport failure (connect, TLS, timeout, cut
//! body). [`is_retryable`] walks that chain: a status decides, and no status
//! means a transport failure, which is retryable.
//!
//! A store handed in as `Arc<dyn ObjectStore>` that is not one of
//! object_store's can report a status the same way by putting a
//! [`StatusError`] in its error's source chain (the fault-scripting store of
//! [`crate::testing`] does).

use std::error::Error as StdError;

/// An HTTP status in an error's source chain, for `ObjectStore`
/// implementations that are not object_store's own HTTP clients.
#[derive(Debug, Clone, thiserror::Error)]
#[error("HTTP status {status}: {message}")]
pub struct StatusError {
    /// The HTTP status code.
    pub status: u16,
    /// What the server said.
    pub message: String,
}

/// object_store's `RetryError` (the carrier of an HTTP status) is not a
/// public type, so it cannot be downcast to; its message — and that of its
/// source, `RequestError::Status` — reads "Server returned non-2xx status
/// code: 503 Service Unavailable: ...". The wiremock tests pin this against
/// the real S3 client, so a change of wording in object_store turns them red.
const STATUS_MARKER: &str = "Server returned non-2xx status code: ";

fn status_in_message(msg: &str) -> Option<u16> {
    let at = msg.find(STATUS_MARKER)? + STATUS_MARKER.len();
    let digits = msg.get(at..at + 3)?;
    digits.parse().ok()
}

/// Whether an HTTP status is worth retrying: 408, 429 and every 5xx.
pub(crate) fn status_is_retryable(status: u16) -> bool {
    status == 408 || status == 429 || status >= 500
}

/// The HTTP status in an error's source chain, if any.
pub fn status_of(err: &object_store::Error) -> Option<u16> {
    match err {
        object_store::Error::NotFound { .. } => return Some(404),
        object_store::Error::Unauthenticated { .. } => return Some(401),
        object_store::Error::PermissionDenied { .. } => return Some(403),
        object_store::Error::AlreadyExists { .. } => return Some(409),
        object_store::Error::Precondition { .. } => return Some(412),
        object_store::Error::NotModified { .. } => return Some(304),
        _ => {}
    }
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(s) = e.downcast_ref::<StatusError>() {
            return Some(s.status);
        }
        if let Some(s) = status_in_message(&e.to_string()) {
            return Some(s);
        }
        cur = e.source();
    }
    None
}

/// Classifies a store error: `true` if trying again later can succeed.
///
/// Not retryable: 400/401/403/404 and every other 4xx but 408 and 429, an
/// unsupported operation, an invalid path or configuration key. Retryable:
/// 408, 429, 5xx, and every failure without a status — connection refused or
/// reset, TLS handshake, timeouts, a body cut in transit, a local I/O error.
/// An error of unknown shape is retryable: the pack then waits in the spool
/// (backed off) instead of being set aside for good.
pub fn is_retryable(err: &object_store::Error) -> bool {
    match err {
        object_store::Error::InvalidPath { .. }
        | object_store::Error::NotSupported { .. }
        | object_store::Error::NotImplemented { .. }
        | object_store::Error::UnknownConfigurationKey { .. } => return false,
        object_store::Error::JoinError { .. } => return true,
        _ => {}
    }
    match status_of(err) {
        Some(status) => status_is_retryable(status),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic_with(source: impl StdError + Send + Sync + 'static) -> object_store::Error {
        object_store::Error::Generic {
            store: "test",
            source: Box::new(source),
        }
    }

    fn status(s: u16) -> object_store::Error {
        generic_with(StatusError {
            status: s,
            message: "x".into(),
        })
    }

    #[test]
    fn statuses_follow_spec_section_5() {
        for s in [400, 401, 403, 404, 405, 411] {
            assert!(!is_retryable(&status(s)), "{s} must not be retried");
        }
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(is_retryable(&status(s)), "{s} must be retried");
        }
    }

    #[test]
    fn typed_variants() {
        let nf = object_store::Error::NotFound {
            path: "k".into(),
            source: "x".into(),
        };
        assert!(!is_retryable(&nf));
        let pd = object_store::Error::PermissionDenied {
            path: "k".into(),
            source: "x".into(),
        };
        assert!(!is_retryable(&pd));
        let ua = object_store::Error::Unauthenticated {
            path: "k".into(),
            source: "x".into(),
        };
        assert!(!is_retryable(&ua));
        let ns = object_store::Error::NotSupported { source: "x".into() };
        assert!(!is_retryable(&ns));
    }

    #[test]
    fn transport_failures_are_retryable() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(is_retryable(&generic_with(io)));
        #[cfg(any(feature = "aws", feature = "gcp", feature = "azure"))]
        {
            use object_store::client::{HttpError, HttpErrorKind};
            let tls = HttpError::new(
                HttpErrorKind::Connect,
                std::io::Error::other("invalid peer certificate: UnknownIssuer"),
            );
            assert!(is_retryable(&generic_with(tls)));
        }
    }

    #[test]
    fn status_read_from_object_store_wording() {
        #[derive(Debug, thiserror::Error)]
        #[error("Error performing PUT http://h/k in 1ms - Server returned non-2xx status code: 400 Bad Request: nope")]
        struct Retry;
        assert_eq!(status_of(&generic_with(Retry)), Some(400));
        assert!(!is_retryable(&generic_with(Retry)));
    }

    #[test]
    fn status_found_deep_in_the_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("wrapper")]
        struct Wrapper(#[source] StatusError);
        let e = generic_with(Wrapper(StatusError {
            status: 403,
            message: "denied".into(),
        }));
        assert_eq!(status_of(&e), Some(403));
        assert!(!is_retryable(&e));
    }
}
