//! `Catalog::referenced_bytes` in the fast tier: the case of
//! `referenced_bytes/case.rs` on the in-memory fake and on SQLite; and a
//! wrapper that does not forward it answers an error, never "nothing is
//! referenced".
#![forbid(unsafe_code)]

#[path = "referenced_bytes/case.rs"]
mod case;

use spool_catalog::{Catalog, Error};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_memory() {
    let c = spool_catalog::open("memory://").unwrap();
    case::referenced_bytes_follows_the_current_row(&*c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/catalog.db", dir.path().display());
    let c = spool_catalog::open(&url).unwrap();
    case::referenced_bytes_follows_the_current_row(&*c).await;
    // a new object on the same file reads the same
    let again = spool_catalog::open(&url).unwrap();
    assert_eq!(
        again
            .referenced_bytes(&["pre/b-alone.pack".into()])
            .await
            .unwrap()
            .len(),
        1
    );
}

/// A catalog that forwards everything it must but not
/// `referenced_bytes`: the trait's default.
struct Wrapper(std::sync::Arc<dyn Catalog>);

#[async_trait::async_trait]
impl Catalog for Wrapper {
    fn server(&self) -> String {
        self.0.server()
    }
    async fn ensure_schema(&self) -> spool_catalog::Result<()> {
        self.0.ensure_schema().await
    }
    async fn index(
        &self,
        rows: &[spool_catalog::PackRow],
        fence: Option<&spool_catalog::LeaseGuard>,
    ) -> spool_catalog::Result<()> {
        self.0.index(rows, fence).await
    }
    async fn get(&self, pack_id: &str) -> spool_catalog::Result<Option<spool_catalog::PackRow>> {
        self.0.get(pack_id).await
    }
    async fn list_range(
        &self,
        from_ms: u64,
        to_ms: u64,
    ) -> spool_catalog::Result<Vec<spool_catalog::PackRow>> {
        self.0.list_range(from_ms, to_ms).await
    }
    async fn count(&self) -> spool_catalog::Result<u64> {
        self.0.count().await
    }
    async fn read_lease_head(&self, name: &str) -> spool_catalog::Result<spool_catalog::LeaseHead> {
        self.0.read_lease_head(name).await
    }
    async fn append_claim(&self, claim: &spool_catalog::NewClaim) -> spool_catalog::Result<()> {
        self.0.append_claim(claim).await
    }
    async fn read_claims(
        &self,
        name: &str,
        term: u64,
    ) -> spool_catalog::Result<Vec<spool_catalog::LeaseRecord>> {
        self.0.read_claims(name, term).await
    }
    async fn lease_log(
        &self,
        name: &str,
    ) -> spool_catalog::Result<Vec<spool_catalog::LeaseRecord>> {
        self.0.lease_log(name).await
    }
}

#[tokio::test]
async fn a_wrapper_that_does_not_forward_it_answers_an_error() {
    let inner = spool_catalog::open("memory://").unwrap();
    let w = Wrapper(inner);
    let e = w
        .referenced_bytes(&["pre/a.pack".into()])
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Unsupported { .. }) && !e.is_retryable(),
        "{e}"
    );
    assert!(e.to_string().contains("read referenced bytes"), "{e}");
}
