//! A store that keeps nothing: every PUT and part is taken and dropped, so a
//! drain's peak RSS is the service's own (an in-memory store, or moto,
//! would hold the drained bytes). Reads find nothing; listings are empty.
//! Only spool's own records (`_spool/...`, spool-service's prefix record)
//! are kept, in memory, so a drain finds the record it wrote.

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The discarding store; counts the bytes it was given.
#[derive(Debug, Default)]
pub struct NullStore {
    /// Bytes taken (single PUTs and parts).
    pub bytes: Arc<AtomicU64>,
    /// Spool's own records, kept.
    records: object_store::memory::InMemory,
}

/// Whether `location` is one of spool's own records.
fn is_record(location: &Path) -> bool {
    location.parts().any(|p| p.as_ref() == "_spool")
}

impl fmt::Display for NullStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NullStore")
    }
}

fn put_result() -> PutResult {
    PutResult {
        e_tag: None,
        version: None,
        extensions: Default::default(),
    }
}

fn not_found(location: &Path) -> object_store::Error {
    object_store::Error::NotFound {
        path: location.to_string(),
        source: "the null store keeps nothing".into(),
    }
}

#[async_trait]
impl ObjectStore for NullStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if is_record(location) {
            return self.records.put_opts(location, payload, opts).await;
        }
        self.bytes
            .fetch_add(payload.content_length() as u64, Ordering::Relaxed);
        Ok(put_result())
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Ok(Box::new(NullUpload {
            bytes: self.bytes.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if is_record(location) {
            return self.records.get_opts(location, options).await;
        }
        Err(not_found(location))
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        locations
    }

    fn list(&self, _prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        futures::stream::empty().boxed()
    }

    async fn list_with_delimiter(
        &self,
        _prefix: Option<&Path>,
    ) -> object_store::Result<ListResult> {
        Ok(ListResult {
            common_prefixes: Vec::new(),
            objects: Vec::new(),
            extensions: Default::default(),
        })
    }

    async fn copy_opts(
        &self,
        from: &Path,
        _to: &Path,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(not_found(from))
    }
}

#[derive(Debug)]
struct NullUpload {
    bytes: Arc<AtomicU64>,
}

#[async_trait]
impl MultipartUpload for NullUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.bytes
            .fetch_add(data.content_length() as u64, Ordering::Relaxed);
        Box::pin(async { Ok(()) })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        Ok(put_result())
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        Ok(())
    }
}
