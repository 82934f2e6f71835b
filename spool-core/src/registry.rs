//! The per-process publication registry: how a storage service
//! learns, without polling, that a sink in the same process staged a pack or
//! sealed on release.
//!
//! # Model
//!
//! A [`Registry`] maps a [`SlotKey`] — `(id, ordinal)`, where `id` is a rank
//! directory (its canonical path) and `ordinal` the sink's worker ordinal
//! within the process (`None` for a sink staging in the directory itself,
//! `Some(k)` for one staging under `w<k>/`) — to one [`PublicationPoint`].
//! Slot `(id, k)` is written only by sink `k` of `id`; the directory's
//! service reads every ordinal of its id ([`Registry::points_of`]).
//!
//! A point is concrete, not a handle to somewhere else: it holds the sink's
//! staged-pack counter and its last staged pack id ([`Publication`]),
//! which a sink reopened on the slot carries on. Until a publisher writes it the point is **unbacked**
//! ([`PublicationPoint::read`] returns `None`).
//!
//! # Convergence
//!
//! Whichever side touches a slot first — the service looking for its sinks,
//! or a sink about to publish — creates it, unbacked, through
//! [`Registry::get_or_create`]; the other side gets the same `Arc` (tests
//! assert `Arc::ptr_eq`). A reader never overwrites a publisher's point and a
//! publish never replaces a slot a reader holds: [`Registry::publish`], the
//! single publisher entry point, backs the slot's *existing* point in place,
//! so every handle already captured by a reader sees the publication.
//! There is no aliasing: an id is never re-exported under another id, and
//! every `(id, ordinal)` has its own point. `get_or_create` never notifies.
//!
//! # The dirty-id inbox and wakers
//!
//! A reader (a service loop) calls [`Registry::register_waker`] with its wake
//! handle and gets a [`Reader`], which owns an inbox: a set of dirty ids and
//! a coalescing flag. The wake handle ([`Waker`]) is either the reader's own
//! `std::thread::Thread`, registered from that thread and woken with
//! `unpark` (the reader sleeps in `park`/`park_timeout`), or a
//! runtime-agnostic [`AtomicWaker`] for a reader that is a future (no async
//! runtime is linked here). [`Registry::notify`] / [`Registry::notify_all`]
//! insert ids into every registered inbox and, for each inbox whose flag is
//! not yet set, set it and wake that reader once: a burst of publishes costs
//! one wake until the reader drains. [`Reader::take_dirty`] takes the set and
//! clears the flag, re-arming the next wake. A new reader's inbox starts with
//! every id the registry knows (it has read nothing yet), so a publish made
//! before any reader registered is not missed: a sink with no reader only
//! marks its point. Dropping the [`Reader`] (a service stopping) deregisters
//! its waker.
//!
//! # The lost-wakeup contract
//!
//! - The **publisher** writes the point, then marks the id dirty
//!   ([`Registry::publish`] does both, in that order).
//! - The **reader** drains the dirty set ([`Reader::take_dirty`]) *before* it
//!   re-reads the points, and only sleeps after a drain.
//!
//! Then every publication is seen: if the reader's drain comes before the
//! publisher's mark, the mark re-arms the flag and wakes the reader again
//! (`unpark` before `park` makes the `park` return at once); if it comes
//! after, the point was already written when the reader reads it. Breaking
//! either half (marking before writing, or reading before draining) loses
//! the last publication of a burst; `tests::serial::no_lost_wakeup_under_stress`
//! catches both.
//!
//! The sink (crate::sink) publishes after a pack's stage has published the
//! file *and* fsynced its directory, so a woken reader's scan sees the pack.
//!
//! # Why `Mutex`, not `RwLock`
//!
//! The slot map only ever needs read-then-maybe-insert as one critical
//! section: `get_or_create` must make "whoever comes first creates it, the
//! other observes the same `Arc`" true, which a read lock upgraded to a write
//! lock would not give (two readers could both miss and both insert). The
//! inbox table has no read-only access at all — notify inserts and arms,
//! `take_dirty` takes and clears, registration installs — so a `RwLock`
//! would only ever be write-locked. Critical sections are a few map
//! operations; wakes happen after the lock is dropped.
//!
//! # Tests
//!
//! Unit tests at the bottom of this file: convergence, reader first,
//! publisher first, get_or_create not notifying, coalescing (armed once,
//! cleared by `take_dirty`, re-armed), deregistration, marking with no
//! reader, the async waker; in `tests::serial`, a
//! cross-thread `unpark` wake and the no-lost-wakeup stress.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::Thread;

pub use futures_util::task::AtomicWaker;

use crate::pack::PackId;

/// The key of one slot: a rank directory and a worker ordinal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotKey {
    /// The rank directory, as a canonical path (the sink and the service of
    /// one directory must spell it the same way; both canonicalize).
    pub dir: PathBuf,
    /// The sink's worker ordinal: `None` stages in the directory itself,
    /// `Some(k)` under `w<k>/`.
    pub ordinal: Option<u32>,
}

/// What a sink publishes into its slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Publication {
    /// How many packs this slot's sink has staged (published and fsynced).
    /// A sink reopened on a slot continues the count.
    pub staged_packs: u64,
    /// The id of the last pack staged, if any.
    pub last_pack: Option<PackId>,
}

/// One slot's publication point. Created unbacked by whichever side comes
/// first; backed in place by [`Registry::publish`].
#[derive(Debug)]
pub struct PublicationPoint {
    key: SlotKey,
    state: Mutex<Option<Publication>>,
}

impl PublicationPoint {
    fn unbacked(key: SlotKey) -> Self {
        Self {
            key,
            state: Mutex::new(None),
        }
    }

    /// The slot this point belongs to.
    pub fn key(&self) -> &SlotKey {
        &self.key
    }

    /// The current publication, or `None` while no publisher has written
    /// the point.
    pub fn read(&self) -> Option<Publication> {
        *lock(&self.state)
    }

    /// Whether a publisher has written the point.
    pub fn is_backed(&self) -> bool {
        self.read().is_some()
    }

    fn back(&self, publication: Publication) {
        *lock(&self.state) = Some(publication);
    }
}

/// A reader's wake handle.
#[derive(Debug, Clone)]
pub enum Waker {
    /// A thread sleeping in `park`/`park_timeout`, woken with `unpark`. Use
    /// [`Waker::current_thread`] from the reader's own thread.
    Thread(Thread),
    /// A future's waker slot: the reader registers its task's waker in it
    /// (before draining) and a notify calls `wake`.
    Async(Arc<AtomicWaker>),
}

impl Waker {
    /// The calling thread's handle. Call it from the reader thread itself,
    /// the thread that will `park`.
    pub fn current_thread() -> Self {
        Waker::Thread(std::thread::current())
    }

    fn wake(&self) {
        match self {
            Waker::Thread(thread) => thread.unpark(),
            Waker::Async(waker) => waker.wake(),
        }
    }
}

struct Inbox {
    dirty: HashSet<PathBuf>,
    /// The coalescing flag: set when a wake was sent that the reader has not
    /// consumed yet with `take_dirty`.
    armed: bool,
    /// Wakes sent to this reader (one per arming).
    wakes: u64,
    waker: Waker,
}

/// The per-process publication registry. See the module docs.
pub struct Registry {
    map: Mutex<HashMap<SlotKey, Arc<PublicationPoint>>>,
    wakers: Mutex<HashMap<u64, Inbox>>,
    next_reader: AtomicU64,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("slots", &lock(&self.map).len())
            .field("readers", &lock(&self.wakers).len())
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent (single map
    // operations), so a panic elsewhere while holding the lock does not make
    // the data unusable.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Registry {
    /// An empty registry. Tests and embedders that want isolation inject
    /// their own; everyone else shares [`Registry::global`].
    pub fn new() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            wakers: Mutex::new(HashMap::new()),
            next_reader: AtomicU64::new(0),
        }
    }

    /// The process-wide default registry.
    pub fn global() -> Arc<Registry> {
        static GLOBAL: OnceLock<Arc<Registry>> = OnceLock::new();
        GLOBAL.get_or_init(|| Arc::new(Registry::new())).clone()
    }

    /// The point of slot `(id, ordinal)`: the existing one, or a new
    /// unbacked one if nobody touched the slot yet. Never notifies.
    pub fn get_or_create(&self, id: &Path, ordinal: Option<u32>) -> Arc<PublicationPoint> {
        let key = SlotKey {
            dir: id.to_path_buf(),
            ordinal,
        };
        let mut map = lock(&self.map);
        map.entry(key.clone())
            .or_insert_with(|| Arc::new(PublicationPoint::unbacked(key)))
            .clone()
    }

    /// Every slot of `id`, ordered by ordinal (`None` first).
    pub fn points_of(&self, id: &Path) -> Vec<Arc<PublicationPoint>> {
        let map = lock(&self.map);
        let mut points: Vec<_> = map
            .iter()
            .filter(|(key, _)| key.dir == id)
            .map(|(_, point)| point.clone())
            .collect();
        points.sort_by(|a, b| a.key.cmp(&b.key));
        points
    }

    /// The single publisher entry point: backs the slot's existing point (or
    /// a new one) with `publication`, then marks `id` dirty and wakes its
    /// readers. Write first, mark second: the lost-wakeup contract.
    pub fn publish(
        &self,
        id: &Path,
        ordinal: Option<u32>,
        publication: Publication,
    ) -> Arc<PublicationPoint> {
        let point = self.get_or_create(id, ordinal);
        point.back(publication);
        self.notify(id);
        point
    }

    /// Marks `id` dirty in every reader's inbox and wakes each reader whose
    /// coalescing flag was clear. With no reader registered this does
    /// nothing beyond what the caller already wrote into its point.
    pub fn notify(&self, id: &Path) {
        self.mark(|dirty| {
            dirty.insert(id.to_path_buf());
        });
    }

    /// Marks every known id dirty in every reader's inbox and wakes each
    /// reader whose flag was clear (for events that concern everyone, such
    /// as a lease latch).
    pub fn notify_all(&self) {
        let ids: HashSet<PathBuf> = lock(&self.map).keys().map(|k| k.dir.clone()).collect();
        self.mark(|dirty| dirty.extend(ids.iter().cloned()));
    }

    fn mark(&self, insert: impl Fn(&mut HashSet<PathBuf>)) {
        let mut to_wake = Vec::new();
        {
            let mut wakers = lock(&self.wakers);
            for inbox in wakers.values_mut() {
                insert(&mut inbox.dirty);
                if !inbox.armed {
                    inbox.armed = true;
                    inbox.wakes += 1;
                    to_wake.push(inbox.waker.clone());
                }
            }
        }
        for waker in to_wake {
            waker.wake();
        }
    }

    /// Installs a reader's wake handle and returns its [`Reader`]. The inbox
    /// starts with every id the registry knows, armed, and the reader is
    /// woken once, so its first drain covers whatever was published before
    /// it registered. Dropping the reader deregisters it.
    pub fn register_waker(self: &Arc<Self>, waker: Waker) -> Reader {
        let token = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let dirty: HashSet<PathBuf> = lock(&self.map).keys().map(|k| k.dir.clone()).collect();
        let armed = !dirty.is_empty();
        lock(&self.wakers).insert(
            token,
            Inbox {
                dirty,
                armed,
                wakes: u64::from(armed),
                waker: waker.clone(),
            },
        );
        if armed {
            waker.wake();
        }
        Reader {
            registry: self.clone(),
            token,
        }
    }

    /// How many readers are registered.
    pub fn readers(&self) -> usize {
        lock(&self.wakers).len()
    }
}

/// A registered reader: its inbox lives in the registry until this is
/// dropped.
#[derive(Debug)]
pub struct Reader {
    registry: Arc<Registry>,
    token: u64,
}

impl Reader {
    /// Takes the dirty ids and clears the coalescing flag, so the next
    /// notify wakes this reader again. Call it *before* re-reading points.
    pub fn take_dirty(&self) -> HashSet<PathBuf> {
        let mut wakers = lock(&self.registry.wakers);
        match wakers.get_mut(&self.token) {
            Some(inbox) => {
                inbox.armed = false;
                std::mem::take(&mut inbox.dirty)
            }
            None => HashSet::new(),
        }
    }

    /// Whether a wake has been sent that this reader has not drained yet.
    pub fn is_armed(&self) -> bool {
        lock(&self.registry.wakers)
            .get(&self.token)
            .is_some_and(|inbox| inbox.armed)
    }

    /// How many wakes the registry has sent this reader: one per arming of
    /// its coalescing flag, however many marks each covered.
    pub fn wakes(&self) -> u64 {
        lock(&self.registry.wakers)
            .get(&self.token)
            .map_or(0, |inbox| inbox.wakes)
    }

    /// The registry this reader is registered with.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        lock(&self.registry.wakers).remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    fn dir(name: &str) -> PathBuf {
        PathBuf::from(format!("/spool/key/{name}"))
    }

    fn publication(n: u64) -> Publication {
        Publication {
            staged_packs: n,
            last_pack: Some(PackId([n as u8; 16])),
        }
    }

    /// A task waker that counts its wakes.
    #[derive(Default)]
    struct CountingWake(AtomicUsize);
    impl Wake for CountingWake {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A reader whose waker counts wakes; the AtomicWaker is re-registered
    /// before each drain, as a future's poll would.
    fn counting_reader(registry: &Arc<Registry>) -> (Reader, Arc<AtomicWaker>, Arc<CountingWake>) {
        let atomic = Arc::new(AtomicWaker::new());
        let count = Arc::new(CountingWake::default());
        atomic.register(&std::task::Waker::from(count.clone()));
        let reader = registry.register_waker(Waker::Async(atomic.clone()));
        (reader, atomic, count)
    }

    fn rearm(atomic: &AtomicWaker, count: &Arc<CountingWake>) {
        atomic.register(&std::task::Waker::from(count.clone()));
    }

    #[test]
    fn get_or_create_converges_on_one_slot() {
        let registry = Registry::new();
        let a = registry.get_or_create(&dir("r0-00000001"), Some(0));
        let b = registry.get_or_create(&dir("r0-00000001"), Some(0));
        assert!(Arc::ptr_eq(&a, &b));
        let other_ordinal = registry.get_or_create(&dir("r0-00000001"), Some(1));
        let no_ordinal = registry.get_or_create(&dir("r0-00000001"), None);
        let other_id = registry.get_or_create(&dir("r0-00000002"), Some(0));
        assert!(!Arc::ptr_eq(&a, &other_ordinal));
        assert!(!Arc::ptr_eq(&a, &no_ordinal));
        assert!(!Arc::ptr_eq(&a, &other_id));
        assert!(!a.is_backed());
        assert_eq!(registry.points_of(&dir("r0-00000001")).len(), 3);
    }

    #[test]
    fn reader_first_then_publisher_backs_the_readers_point() {
        let registry = Registry::new();
        let id = dir("r0-00000001");
        let readers_point = registry.get_or_create(&id, Some(3));
        assert_eq!(readers_point.read(), None, "created unbacked");
        let publishers_point = registry.publish(&id, Some(3), publication(1));
        assert!(Arc::ptr_eq(&readers_point, &publishers_point));
        assert_eq!(readers_point.read(), Some(publication(1)));
        // The registry still holds that very point.
        assert!(Arc::ptr_eq(
            &registry.get_or_create(&id, Some(3)),
            &readers_point
        ));
        registry.publish(&id, Some(3), publication(2));
        assert_eq!(readers_point.read(), Some(publication(2)));
        assert!(readers_point.is_backed());
    }

    #[test]
    fn a_registrys_debug_counts_its_slots_and_readers_and_a_reader_names_its_registry() {
        let registry = Arc::new(Registry::new());
        registry.get_or_create(&dir("r0-00000001"), Some(0));
        registry.get_or_create(&dir("r0-00000002"), None);
        let reader = registry.register_waker(Waker::current_thread());
        assert!(Arc::ptr_eq(reader.registry(), &registry));
        assert_eq!(format!("{registry:?}"), "Registry { slots: 2, readers: 1 }");
    }

    #[test]
    fn publisher_first_then_reader_adopts_the_point() {
        let registry = Registry::new();
        let id = dir("r0-00000001");
        let publishers_point = registry.publish(&id, None, publication(5));
        let readers_point = registry.get_or_create(&id, None);
        assert!(Arc::ptr_eq(&readers_point, &publishers_point));
        // The reader's touch did not overwrite the publisher's point.
        assert_eq!(readers_point.read(), Some(publication(5)));
        assert_eq!(registry.points_of(&id)[0].read(), Some(publication(5)));
    }

    #[test]
    fn get_or_create_does_not_notify() {
        let registry = Arc::new(Registry::new());
        let (reader, _atomic, count) = counting_reader(&registry);
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "empty registry: no wake");
        registry.get_or_create(&dir("r0-00000001"), Some(0));
        assert!(reader.take_dirty().is_empty());
        assert!(!reader.is_armed());
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn coalescing_flag_armed_once_cleared_by_take_dirty_and_rearmed() {
        let registry = Arc::new(Registry::new());
        let (reader, atomic, count) = counting_reader(&registry);
        let (a, b) = (dir("r0-0000000a"), dir("r0-0000000b"));

        registry.publish(&a, Some(0), publication(1));
        assert!(reader.is_armed());
        registry.publish(&a, Some(1), publication(1));
        registry.notify(&b);
        assert_eq!(reader.wakes(), 1, "three marks, one wake");
        assert_eq!(count.0.load(Ordering::SeqCst), 1);

        rearm(&atomic, &count);
        let dirty = reader.take_dirty();
        assert_eq!(dirty, HashSet::from([a.clone(), b.clone()]));
        assert!(!reader.is_armed(), "take_dirty clears the flag");
        assert!(reader.take_dirty().is_empty());

        registry.notify(&b);
        registry.notify(&a);
        assert!(reader.is_armed(), "re-armed by the next notify");
        assert_eq!(reader.wakes(), 2, "and woken again, once");
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert_eq!(reader.take_dirty(), HashSet::from([a, b]));
    }

    #[test]
    fn notify_all_marks_every_known_id() {
        let registry = Arc::new(Registry::new());
        registry.get_or_create(&dir("r0-00000001"), None);
        registry.get_or_create(&dir("r1-00000002"), Some(4));
        let (reader, atomic, count) = counting_reader(&registry);
        reader.take_dirty();
        rearm(&atomic, &count);
        let before = count.0.load(Ordering::SeqCst);
        registry.notify_all();
        assert_eq!(count.0.load(Ordering::SeqCst), before + 1);
        assert_eq!(
            reader.take_dirty(),
            HashSet::from([dir("r0-00000001"), dir("r1-00000002")])
        );
    }

    #[test]
    fn every_reader_has_its_own_inbox() {
        let registry = Arc::new(Registry::new());
        let (first, _a1, c1) = counting_reader(&registry);
        let (second, _a2, c2) = counting_reader(&registry);
        registry.notify(&dir("r0-00000001"));
        assert_eq!(c1.0.load(Ordering::SeqCst), 1);
        assert_eq!(c2.0.load(Ordering::SeqCst), 1);
        assert_eq!(first.take_dirty().len(), 1);
        assert_eq!(
            second.take_dirty().len(),
            1,
            "one drain does not steal another's ids"
        );
    }

    #[test]
    fn a_dropped_reader_is_deregistered_and_no_longer_woken() {
        let registry = Arc::new(Registry::new());
        let (reader, atomic, count) = counting_reader(&registry);
        assert_eq!(registry.readers(), 1);
        drop(reader);
        assert_eq!(registry.readers(), 0);
        registry.publish(&dir("r0-00000001"), None, publication(1));
        // The waker was never woken: nothing references the inbox any more.
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        drop(atomic);
    }

    #[test]
    fn with_no_reader_a_publish_only_marks_and_a_later_reader_sees_it() {
        let registry = Arc::new(Registry::new());
        let id = dir("r0-00000001");
        registry.publish(&id, Some(0), publication(7));
        assert_eq!(registry.readers(), 0);
        let (reader, _atomic, count) = counting_reader(&registry);
        assert!(
            reader.is_armed(),
            "a new reader starts armed with every known id"
        );
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(reader.take_dirty(), HashSet::from([id.clone()]));
        assert_eq!(
            registry.get_or_create(&id, Some(0)).read(),
            Some(publication(7))
        );
    }

    #[test]
    fn the_global_registry_is_one_per_process() {
        assert!(Arc::ptr_eq(&Registry::global(), &Registry::global()));
    }

    /// Timing-dependent: run one at a time (nextest `serial` group).
    mod serial {
        use super::*;
        use std::sync::mpsc;
        use std::time::{Duration, Instant};

        #[test]
        fn cross_thread_unpark_wakes_a_parked_reader() {
            let registry = Arc::new(Registry::new());
            let id = dir("r0-00000001");
            let (ready_tx, ready_rx) = mpsc::channel();
            let (done_tx, done_rx) = mpsc::channel();
            let r = registry.clone();
            let reader_id = id.clone();
            let handle = std::thread::spawn(move || {
                let reader = r.register_waker(Waker::current_thread());
                ready_tx.send(()).unwrap();
                let start = Instant::now();
                loop {
                    let dirty = reader.take_dirty();
                    if dirty.contains(&reader_id) {
                        let seen = r.get_or_create(&reader_id, Some(2)).read();
                        done_tx.send((seen, start.elapsed())).unwrap();
                        return;
                    }
                    // A long park: only an unpark ends it early.
                    std::thread::park_timeout(Duration::from_secs(30));
                    if start.elapsed() > Duration::from_secs(20) {
                        return;
                    }
                }
            });
            ready_rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(50)); // let it park
            registry.publish(&id, Some(2), publication(1));
            let (seen, _elapsed) = done_rx
                .recv_timeout(Duration::from_secs(5))
                .expect("the parked reader was woken by the publish");
            assert_eq!(seen, Some(publication(1)));
            handle.join().unwrap();
            assert_eq!(registry.readers(), 0, "the reader deregistered on exit");
        }

        /// Publishers race the reader's drain in many short bursts; after
        /// each burst the reader must reach the burst's last value without
        /// any wake other than the registry's. A lost wakeup leaves it
        /// parked past the bound.
        #[test]
        fn no_lost_wakeup_under_stress() {
            const ROUNDS: u64 = 20_000;
            const BURST: u64 = 3;
            let registry = Arc::new(Registry::new());
            let id = dir("r0-00000001");
            let (ready_tx, ready_rx) = mpsc::channel();
            let (ack_tx, ack_rx) = mpsc::channel::<u64>();
            let r = registry.clone();
            let reader_id = id.clone();
            let reader_thread = std::thread::spawn(move || {
                let reader = r.register_waker(Waker::current_thread());
                let point = r.get_or_create(&reader_id, Some(0));
                ready_tx.send(()).unwrap();
                let mut acked = 0;
                loop {
                    // Contract: drain first, then read the point.
                    reader.take_dirty();
                    let seen = point.read().map_or(0, |p| p.staged_packs);
                    while acked < seen / BURST {
                        acked += 1;
                        if ack_tx.send(acked).is_err() {
                            return;
                        }
                    }
                    if seen >= ROUNDS * BURST {
                        return;
                    }
                    std::thread::park_timeout(Duration::from_secs(10));
                }
            });
            ready_rx.recv().unwrap();
            for round in 0..ROUNDS {
                for k in 1..=BURST {
                    registry.publish(&id, Some(0), publication(round * BURST + k));
                }
                match ack_rx.recv_timeout(Duration::from_secs(3)) {
                    Ok(acked) => assert_eq!(acked, round + 1),
                    Err(_) => panic!(
                        "lost wakeup: round {round}: the reader never saw {}",
                        round * BURST + BURST
                    ),
                }
            }
            reader_thread.join().unwrap();
        }
    }
}
