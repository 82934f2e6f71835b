//! Walking one bundle in the store with ranged reads, in bounded memory,
//! and finding every intact pack the format lets one find.
//!
//! A bundle is packs back to back and nothing else (spool-upload's crate
//! docs, "Bundles"); a pack's trailer sits at its last
//! [`TRAILER_LEN`] bytes and names its length (spool-core's crate docs,
//! "Pack format"). The walk:
//!
//! 1. **Backward**, from the object's end: reads a window of at most
//!    [`WINDOW`] bytes ending where the walk stands, parses the trailer at
//!    its end ([`Trailer::parse`]), steps back by its `total_len` (at least
//!    [`MIN_PACK_LEN`], at most what is left), and goes on within the
//!    window; the next window is read when the next trailer or pack is
//!    outside it. Each pack found is validated whole
//!    ([`spool_core::pack::validate`]): from the window when it lies in it,
//!    else (a pack larger than [`WINDOW`]) streamed through validation from
//!    a ranged GET of its own range ([`validate_range`]). A pack that fails
//!    validation is counted damaged and the walk goes on before it (its
//!    trailer still names its length).
//! 2. **Forward**, only when the backward walk broke (a damaged trailer, a
//!    length that does not fit): the packs before the break cannot be found
//!    from the end, so one streaming GET of the bytes from offset 0 up to
//!    the lowest pack the backward walk validated is read from the start,
//!    pack by pack by each one's framing (header magic, the 40-byte header,
//!    each record's length prefix, the footer marker, footer and trailer:
//!    [`OnePack`]), each pack validated as it streams. A pack whose framing
//!    holds but whose bytes do not validate is counted damaged and the walk
//!    goes on after it; broken framing ends the walk there.
//!
//! **Bounds.** Memory: one window ([`WINDOW`], 8 MiB) or, for larger
//! packs, validation's 1 MiB buffer and the store's chunks in flight (a
//! channel of four), plus the summaries of the packs of one window handed
//! to the caller at a time (a forward walk hands at most [`BATCH`] at a
//! time). Work: each step moves at least [`MIN_PACK_LEN`] bytes, so an
//! object of `size` bytes is at most `size / MIN_PACK_LEN` packs in each
//! direction (a 4 MiB trailer bomb: 31,775 steps, all in memory from one
//! window per 8 MiB); the caller refuses objects over
//! [`spool_upload::MAX_BUNDLE_BYTES`] before walking them. What a walk
//! keeps of the damage is a count and the first reason, never one entry
//! per pack.

use std::io::Read;
use std::ops::Range;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, ObjectStoreExt};
use spool_core::pack::{
    PackId, PackSummary, Trailer, FOOTER_LEN, FOOTER_MARKER, HEADER_LEN, MAGIC, MIN_PACK_LEN,
    TRAILER_LEN,
};
use spool_upload::Store;

use crate::Error;

/// The most bytes of a bundle one ranged read of the backward walk brings
/// into memory: 8 MiB, the uploader's default bundle size, so a default
/// bundle is one GET.
pub const WINDOW: u64 = 8 << 20;

/// The most packs a forward walk hands over at once.
pub const BATCH: usize = 1024;

/// A pack of a bundle that validated: where it starts in the object, and
/// what validation found.
pub type Found = (u64, PackSummary);

/// Where a walk stands.
enum Phase {
    /// Walking back; the next trailer ends at `end`.
    Backward { end: u64 },
    /// Walking forward (see the module docs): packs and damage come over
    /// `events` from the blocking task reading the stream.
    Forward {
        events: tokio::sync::mpsc::Receiver<Event>,
    },
    /// Nothing more to find.
    Done,
}

/// What the forward walk's blocking task reports.
enum Event {
    /// A valid pack.
    Pack(Found),
    /// A damaged pack (the walk goes on) or broken framing (the walk ends):
    /// why.
    Damaged(String),
    /// Reading the store failed: why.
    ReadFailed(String),
}

/// A walk over one bundle (see the module docs). Call
/// [`BundleWalker::next`] until it returns `None`, then read
/// [`BundleWalker::damaged`].
pub struct BundleWalker<'s> {
    store: &'s Store,
    key: Path,
    phase: Phase,
    /// Where the lowest pack the backward walk validated starts (`size`
    /// before any): the forward walk stops there.
    lowest_valid: u64,
    /// Where the backward walk broke (the end of the bytes it could not
    /// walk), if it did: the forward walk counts damage only below it (the
    /// backward walk counted what is above).
    broke: Option<u64>,
    damaged: u64,
    first_damage: Option<String>,
}

impl<'s> BundleWalker<'s> {
    /// A walk of the bundle at `key` in `store`, `size` bytes long (as
    /// listed). Reads nothing yet.
    pub fn new(store: &'s Store, key: Path, size: u64) -> BundleWalker<'s> {
        BundleWalker {
            store,
            key,
            phase: Phase::Backward { end: size },
            lowest_valid: size,
            broke: None,
            damaged: 0,
            first_damage: None,
        }
    }

    /// The packs the walk found damaged (validation failed, or the framing
    /// broke), and the first reason met.
    pub fn damaged(&self) -> (u64, Option<&str>) {
        (self.damaged, self.first_damage.as_deref())
    }

    /// The next valid packs found (one window's worth, or up to [`BATCH`]
    /// of a forward walk; possibly none), or `None` once the walk is over.
    /// `Err` only when the store could not be read.
    pub async fn next(&mut self) -> Result<Option<Vec<Found>>, Error> {
        match &mut self.phase {
            Phase::Done => Ok(None),
            Phase::Backward { end } => {
                let end = *end;
                if end == 0 {
                    self.start_forward();
                    return Ok(Some(Vec::new()));
                }
                self.backward_window(end).await.map(Some)
            }
            Phase::Forward { events } => {
                let mut out = Vec::new();
                let Some(first) = events.recv().await else {
                    self.phase = Phase::Done;
                    return Ok(None);
                };
                let mut next = Some(first);
                while let Some(event) = next.take() {
                    match event {
                        Event::Pack(found) => out.push(found),
                        Event::Damaged(why) => self.damage(why),
                        Event::ReadFailed(why) => {
                            self.phase = Phase::Done;
                            return Err(self.store_error(why.into()));
                        }
                    }
                    if out.len() < BATCH {
                        if let Phase::Forward { events } = &mut self.phase {
                            next = events.try_recv().ok();
                        }
                    }
                }
                Ok(Some(out))
            }
        }
    }

    fn damage(&mut self, why: String) {
        self.damaged += 1;
        self.first_damage.get_or_insert(why);
    }

    fn store_error(&self, error: Box<dyn std::error::Error + Send + Sync>) -> Error {
        Error::ReindexStore {
            store: self.store.description().to_string(),
            key: self.key.to_string(),
            error,
        }
    }

    /// Reads the window ending at `end` and walks back through it (see the
    /// module docs): the packs in it that validated.
    async fn backward_window(&mut self, mut end: u64) -> Result<Vec<Found>, Error> {
        let start = end.saturating_sub(WINDOW);
        let window = self
            .store
            .object_store()
            .get_range(&self.key, start..end)
            .await
            .map_err(|e| self.store_error(e.into()))?;
        let mut in_window: Vec<(Range<u64>, PackId)> = Vec::new();
        let mut large: Vec<(Range<u64>, PackId)> = Vec::new();
        let broken = loop {
            if end == 0 {
                break None;
            }
            if end < MIN_PACK_LEN {
                break Some(format!(
                    "{end} bytes at the start of the bundle are too few for a pack"
                ));
            }
            if end - (TRAILER_LEN as u64) < start {
                break None; // the next trailer is in the next window
            }
            let at = (end - start) as usize;
            let tail: &[u8; TRAILER_LEN] = window[at - TRAILER_LEN..at]
                .try_into()
                .expect("TRAILER_LEN bytes");
            let trailer = match Trailer::parse(tail) {
                Ok(t) => t,
                Err(e) => break Some(format!("the pack ending at byte {end}: {e}")),
            };
            if trailer.total_len < MIN_PACK_LEN || trailer.total_len > end {
                break Some(format!(
                    "the pack {} ending at byte {end}: its trailer says {} bytes, but a pack is \
                     at least {MIN_PACK_LEN} and only {end} are before its end",
                    trailer.id, trailer.total_len
                ));
            }
            let from = end - trailer.total_len;
            if from >= start {
                in_window.push((from..end, trailer.id));
            } else if trailer.total_len > WINDOW {
                large.push((from..end, trailer.id));
            } else {
                break None; // it fits the next window, which starts with it
            }
            end = from;
        };
        self.phase = match broken {
            Some(why) => {
                // not counted: the forward walk meets these bytes and
                // counts the pack they are (its framing or validation fails)
                self.first_damage.get_or_insert(why);
                self.broke = Some(end);
                Phase::Backward { end: 0 }
            }
            None => Phase::Backward { end },
        };
        let checked = tokio::task::spawn_blocking(move || {
            in_window
                .into_iter()
                .map(|(range, id)| {
                    let bytes =
                        &window[(range.start - start) as usize..(range.end - start) as usize];
                    let result = spool_core::pack::validate_bytes(bytes, Some(id));
                    (range, id, result.map_err(|e| e.to_string()))
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let mut found = Vec::new();
        for (range, id, result) in checked {
            self.settle(range, id, result, &mut found);
        }
        for (range, id) in large {
            let result = validate_range(self.store, &self.key, Some(range.clone()), id).await?;
            self.settle(range, id, result, &mut found);
        }
        Ok(found)
    }

    /// Records one backward-walked pack's validation.
    fn settle(
        &mut self,
        range: Range<u64>,
        id: PackId,
        result: Result<PackSummary, String>,
        found: &mut Vec<Found>,
    ) {
        match result {
            Ok(summary) => {
                self.lowest_valid = self.lowest_valid.min(range.start);
                found.push((range.start, summary));
            }
            Err(why) => self.damage(format!(
                "pack {id} at bytes {}..{}: {why}",
                range.start, range.end
            )),
        }
    }

    /// Starts the forward walk over the bytes before the lowest valid pack
    /// when the backward walk broke; else ends the walk.
    fn start_forward(&mut self) {
        let limit = self.lowest_valid;
        let Some(counted_from) = self.broke.filter(|_| limit > 0) else {
            self.phase = Phase::Done;
            return;
        };
        let (chunk_tx, chunk_rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
        let (event_tx, event_rx) = tokio::sync::mpsc::channel::<Event>(BATCH);
        let objects = self.store.object_store().clone();
        let key = self.key.clone();
        tokio::spawn(async move {
            let options = GetOptions::default().with_range(Some(0..limit));
            let mut stream = match objects.get_opts(&key, options).await {
                Ok(got) => got.into_stream(),
                Err(e) => {
                    let _ = chunk_tx.send(Err(std::io::Error::other(e))).await;
                    return;
                }
            };
            while let Some(chunk) = stream.next().await {
                let item = chunk.map_err(std::io::Error::other);
                let failed = item.is_err();
                if chunk_tx.send(item).await.is_err() || failed {
                    break;
                }
            }
        });
        tokio::task::spawn_blocking(move || {
            let mut reader = Chunks::new(chunk_rx);
            forward(&mut reader, (limit, counted_from), &event_tx);
        });
        self.phase = Phase::Forward { events: event_rx };
    }
}

/// The forward walk over `limit` bytes from offset 0 (see the module
/// docs), reporting over `events`: every valid pack, and the damaged ones
/// starting below `counted_from` (the backward walk reported the others).
fn forward(
    reader: &mut Chunks,
    (limit, counted_from): (u64, u64),
    events: &tokio::sync::mpsc::Sender<Event>,
) {
    let never = AtomicBool::new(false);
    let mut at = 0u64;
    while at < limit {
        if limit - at < MIN_PACK_LEN {
            if at >= counted_from {
                return;
            }
            let _ = events.blocking_send(Event::Damaged(format!(
                "{} bytes at byte {at}, before the packs found from the end, are too few for a \
                 pack",
                limit - at
            )));
            return;
        }
        let mut one = OnePack::new(&mut *reader, limit - at);
        let result = spool_core::pack::validate(&mut one, None, &never);
        // read what validation left of the pack, to stand at its end
        let drained = std::io::copy(&mut one, &mut std::io::sink());
        let event = if let Some(why) = one.broken.take() {
            if at >= counted_from {
                return;
            }
            let _ = events.blocking_send(Event::Damaged(format!(
                "the pack starting at byte {at}: {why}; what is before byte {limit} after it \
                 cannot be found"
            )));
            return;
        } else if let Some(why) = one.read_error.take() {
            let _ = events.blocking_send(Event::ReadFailed(why));
            return;
        } else if let Err(e) = drained {
            let _ = events.blocking_send(Event::ReadFailed(e.to_string()));
            return;
        } else {
            match result {
                Ok(summary) => Some(Event::Pack((at, summary))),
                Err(_) if at >= counted_from => None,
                Err(e) => Some(Event::Damaged(format!(
                    "the pack at bytes {at}..{}: {e}",
                    at + one.pos
                ))),
            }
        };
        at += one.pos;
        if event.is_some_and(|e| events.blocking_send(e).is_err()) {
            return; // the walk was dropped
        }
    }
}

/// Where [`OnePack`] stands in a pack's framing.
#[derive(Clone, Copy)]
enum Framing {
    /// In the header, `left` bytes to go.
    Header { left: u64 },
    /// In a record's length prefix (or the footer marker).
    Length,
    /// In a record, `left` bytes to go.
    Record { left: u64 },
    /// In the footer (after its marker) and the trailer, `left` to go.
    Tail { left: u64 },
    /// Past the trailer.
    End,
}

/// A reader of exactly one pack from a stream of packs back to back: it
/// follows the framing as bytes pass (header magic, record length
/// prefixes, footer marker, footer, trailer) and ends (reads 0) at the
/// pack's last byte. Framing that breaks (a bad magic, a pack running past
/// `room` bytes) is an error, and its reason is kept in `broken`.
struct OnePack<'r> {
    inner: &'r mut Chunks,
    framing: Framing,
    /// Bytes passed.
    pos: u64,
    /// The most bytes the pack may have.
    room: u64,
    /// The header's bytes (for its magic) or a length prefix's.
    scratch: Vec<u8>,
    broken: Option<String>,
    read_error: Option<String>,
}

impl<'r> OnePack<'r> {
    fn new(inner: &'r mut Chunks, room: u64) -> OnePack<'r> {
        OnePack {
            inner,
            framing: Framing::Header {
                left: HEADER_LEN as u64,
            },
            pos: 0,
            room,
            scratch: Vec::with_capacity(HEADER_LEN),
            broken: None,
            read_error: None,
        }
    }

    fn fail(&mut self, why: String) -> std::io::Error {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidData, why.clone());
        self.broken = Some(why);
        e
    }

    /// Follows the framing over `bytes` (the next bytes of the pack, never
    /// past the current element).
    fn follow(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let n = bytes.len() as u64;
        self.framing = match self.framing {
            Framing::Header { left } => {
                self.scratch.extend_from_slice(bytes);
                if left > n {
                    Framing::Header { left: left - n }
                } else if self.scratch[..MAGIC.len()] != MAGIC {
                    let found = hex::encode(&self.scratch[..MAGIC.len()]);
                    return Err(self.fail(format!("no pack header (magic {found})")));
                } else {
                    self.scratch.clear();
                    Framing::Length
                }
            }
            Framing::Length => {
                self.scratch.extend_from_slice(bytes);
                if self.scratch.len() < 4 {
                    Framing::Length
                } else {
                    let len = u32::from_le_bytes(self.scratch[..4].try_into().expect("4 bytes"));
                    self.scratch.clear();
                    let (next, more) = if len == FOOTER_MARKER {
                        let tail = (FOOTER_LEN - 4 + TRAILER_LEN) as u64;
                        (Framing::Tail { left: tail }, tail)
                    } else {
                        (Framing::Record { left: len as u64 }, len as u64)
                    };
                    // where the prefix ends: these bytes are not counted in `pos` yet
                    let after = self.pos + n;
                    if after + more > self.room {
                        return Err(self.fail(format!(
                            "its framing runs past the {} bytes left (a length of {len} at byte {} \
                             of the pack)",
                            self.room,
                            after - 4
                        )));
                    }
                    if more == 0 {
                        Framing::Length
                    } else {
                        next
                    }
                }
            }
            Framing::Record { left } if left > n => Framing::Record { left: left - n },
            Framing::Record { .. } => Framing::Length,
            Framing::Tail { left } if left > n => Framing::Tail { left: left - n },
            Framing::Tail { .. } | Framing::End => Framing::End,
        };
        Ok(())
    }

    /// How many bytes the current element still has.
    fn element_left(&self) -> u64 {
        match self.framing {
            Framing::Header { left } | Framing::Record { left } | Framing::Tail { left } => left,
            Framing::Length => 4 - self.scratch.len() as u64,
            Framing::End => 0,
        }
    }
}

impl Read for OnePack<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(why) = &self.broken {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                why.clone(),
            ));
        }
        let want = usize::try_from(self.element_left())
            .unwrap_or(usize::MAX)
            .min(buf.len());
        if want == 0 {
            return Ok(0);
        }
        if self.pos + want as u64 > self.room {
            // only a header can get here: the bytes left are fewer
            let room = self.room;
            return Err(self.fail(format!("{room} bytes left are too few for its header")));
        }
        let n = match self.inner.read(&mut buf[..want]) {
            Ok(n) => n,
            Err(e) => {
                self.read_error = Some(e.to_string());
                return Err(e);
            }
        };
        if n == 0 {
            return Err(self.fail(format!("the bytes end {} bytes into it", self.pos)));
        }
        self.follow(&buf[..n])?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Streams the object at `key` (its `range`, or all of it) through the
/// pack's validation, expecting `id`: `Ok(Ok(summary))` for a valid pack,
/// `Ok(Err(why))` for anything else, `Err` when the store could not be
/// read. Memory: validation's buffer and four chunks in flight, whatever
/// the pack's size.
pub async fn validate_range(
    store: &Store,
    key: &Path,
    range: Option<Range<u64>>,
    id: PackId,
) -> Result<Result<PackSummary, String>, Error> {
    let store_error = |error: Box<dyn std::error::Error + Send + Sync>| Error::ReindexStore {
        store: store.description().to_string(),
        key: key.to_string(),
        error,
    };
    let options = GetOptions::default().with_range(range);
    let got = store
        .object_store()
        .get_opts(key, options)
        .await
        .map_err(|e| store_error(e.into()))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    let check = tokio::task::spawn_blocking(move || {
        spool_core::pack::validate(Chunks::new(rx), Some(id), &AtomicBool::new(false))
    });
    let mut stream = got.into_stream();
    while let Some(chunk) = stream.next().await {
        let item = chunk.map_err(std::io::Error::other);
        let failed = item.is_err();
        if tx.send(item).await.is_err() || failed {
            break; // the validation stopped (a bad pack), or the read failed
        }
    }
    drop(tx);
    match check.await {
        Ok(Ok(summary)) => Ok(Ok(summary)),
        Ok(Err(spool_core::Error::CorruptPack { problem, .. })) => Ok(Err(problem.to_string())),
        Ok(Err(e)) => Err(store_error(e.into())),
        Err(e) => Err(store_error(e.to_string().into())),
    }
}

/// A blocking reader over the chunks an async stream sends.
pub(crate) struct Chunks {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
    chunk: Bytes,
}

impl Chunks {
    fn new(rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>) -> Chunks {
        Chunks {
            rx,
            chunk: Bytes::new(),
        }
    }
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(c)) => self.chunk = c,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}
