//! The adoption machine on a scripted fake environment: one test per
//! transition and per adoption policy (each named for its rule), and a
//! proptest over random scripts of environment results.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::executor::block_on;
use spool_core::PackId;

use super::*;

// ---------------------------------------------------------------------------
// The fake environment: a model of the key directory's siblings, the lock,
// the store + catalog, and the service's signals. Every call checks the
// contract the machine must keep and records a violation otherwise.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct FakePack {
    pack: ReadyPack,
    corrupt: bool,
    /// Fails non-retryably on every upload (e.g. above the in-flight bound).
    poison: bool,
}

#[derive(Debug, Clone, Default)]
struct FakeDir {
    exists: bool,
    /// Held by someone else (another process, or a kept claim of this one).
    live: bool,
    marked: Option<String>,
    not_ours: Option<String>,
    /// Held by this adopter.
    held: bool,
    ready: Vec<FakePack>,
    quarantined: Vec<String>,
    open_files: usize,
    unknown_files: Vec<String>,
    nested_live: bool,
    /// Every pack ever put in it (for the lost-pack check).
    all_ids: Vec<String>,
    marked_by_us: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    List,
    Staging(Duration),
    Probe(PathBuf),
    TryAdopt(PathBuf),
    Begin(PathBuf),
    Round(PathBuf, Vec<String>),
    OtherFiles(PathBuf),
    Mark(PathBuf, String),
    Release(PathBuf),
    ReleaseRemove(PathBuf),
}

struct Fake {
    base: Instant,
    offset: Duration,
    dirs: BTreeMap<PathBuf, FakeDir>,
    /// Extra names the listing returns (not ours, other keys, own dir...).
    extra_listed: Vec<PathBuf>,
    list_error: Option<String>,
    staging_removed: usize,
    // scripts, consumed first
    take_script: VecDeque<AdoptRefusal>,
    begin_script: VecDeque<RecoveryFailure>,
    pack_script: HashMap<String, VecDeque<PackOutcome>>,
    /// The round uploads nothing and answers nothing.
    round_answers_nothing: bool,
    /// Random choices for the proptest; empty → healthy defaults.
    tape: VecDeque<u8>,
    // the store and catalog
    uploaded: BTreeSet<String>,
    indexed: BTreeSet<String>,
    owed: BTreeMap<String, PathBuf>,
    // the service's signals
    lease: bool,
    own_owed: bool,
    own_uploaded: bool,
    flush_waiting: bool,
    stop: bool,
    latched: bool,
    slice: Duration,
    max_round_packs: usize,
    max_round_bytes: u64,
    calls: Vec<Call>,
    violations: Vec<String>,
}

const KEY: &str = "/spool/0123456789ab";
const OWN: &str = "/spool/0123456789ab/r0-aaaaaaaa";

fn sib(n: u32) -> PathBuf {
    PathBuf::from(format!("{KEY}/r{n}-{n:08x}"))
}

fn id(dir: u32, k: u32) -> String {
    format!("{dir:016x}{k:016x}")
}

impl Fake {
    fn new() -> Self {
        let cfg = AdoptionConfig::default();
        Self {
            base: Instant::now(),
            offset: Duration::ZERO,
            dirs: BTreeMap::new(),
            extra_listed: Vec::new(),
            list_error: None,
            staging_removed: 0,
            take_script: VecDeque::new(),
            begin_script: VecDeque::new(),
            pack_script: HashMap::new(),
            round_answers_nothing: false,
            tape: VecDeque::new(),
            uploaded: BTreeSet::new(),
            indexed: BTreeSet::new(),
            owed: BTreeMap::new(),
            lease: true,
            own_owed: false,
            own_uploaded: true,
            flush_waiting: false,
            stop: false,
            latched: false,
            slice: cfg.adoption_slice,
            max_round_packs: cfg.max_round_packs,
            max_round_bytes: cfg.max_round_bytes,
            calls: Vec::new(),
            violations: Vec::new(),
        }
    }

    /// Adds sibling `n` with `packs` ready packs of 1000 bytes each.
    fn add(&mut self, n: u32, packs: u32) -> PathBuf {
        let dir = sib(n);
        let ready: Vec<FakePack> = (0..packs)
            .map(|k| FakePack {
                pack: ReadyPack {
                    path: dir.join(format!("{}.ready", id(n, k))),
                    id: PackId::from_hex(&id(n, k)).unwrap(),
                    bytes: 1000,
                    ordinal: None,
                },
                corrupt: false,
                poison: false,
            })
            .collect();
        let all_ids = ready.iter().map(|p| p.pack.id.to_hex()).collect();
        self.dirs.insert(
            dir.clone(),
            FakeDir {
                exists: true,
                ready,
                all_ids,
                ..FakeDir::default()
            },
        );
        dir
    }

    fn d(&mut self, dir: &Path) -> &mut FakeDir {
        self.dirs.get_mut(dir).expect("no such fake dir")
    }

    fn advance(&mut self, by: Duration) {
        self.offset += by;
    }

    fn budget(&self) -> StepBudget {
        StepBudget {
            slice_deadline: self.base + self.offset + self.slice,
            flush_waiting: self.flush_waiting,
            stop: self.stop,
            latched: self.latched,
            lease_held: self.lease,
            owed: self.own_owed || !self.owed.is_empty(),
            own_uploaded: self.own_uploaded,
        }
    }

    fn draw(&mut self, n: u8) -> u8 {
        self.tape.pop_front().map_or(0, |b| b % n)
    }

    fn violation(&mut self, what: String) {
        self.violations.push(what);
    }

    fn require_held(&mut self, dir: &Path, call: &str) -> bool {
        let held = self.dirs.get(dir).is_some_and(|d| d.held && d.exists);
        if !held {
            self.violation(format!(
                "{call} on {} which this adopter does not hold",
                dir.display()
            ));
        }
        held
    }

    /// The failure a recovery call answers, if any: not held (a violation),
    /// scripted, or drawn from the tape.
    fn recovery_failure(
        &mut self,
        dir: &Path,
        call: &str,
        script: fn(&mut Self) -> &mut VecDeque<RecoveryFailure>,
    ) -> Option<RecoveryFailure> {
        if !self.require_held(dir, call) {
            return Some(RecoveryFailure::Unopenable("not held".into()));
        }
        if let Some(f) = script(self).pop_front() {
            return Some(f);
        }
        match self.draw(8) {
            1 => Some(RecoveryFailure::Cancelled),
            2 => Some(RecoveryFailure::Retryable("EIO".into())),
            _ => None,
        }
    }

    /// The service indexes what is owed (its drain's backlog) and removes the
    /// files.
    fn index_owed(&mut self) {
        for (id, dir) in std::mem::take(&mut self.owed) {
            if let Some(d) = self.dirs.get_mut(&dir) {
                d.ready.retain(|p| p.pack.id.to_hex() != id);
            }
            self.indexed.insert(id);
        }
    }

    fn count(&self, pred: impl Fn(&Call) -> bool) -> usize {
        self.calls.iter().filter(|c| pred(c)).count()
    }

    fn rounds(&self) -> Vec<Vec<String>> {
        self.calls
            .iter()
            .filter_map(|c| match c {
                Call::Round(_, ids) => Some(ids.clone()),
                _ => None,
            })
            .collect()
    }
}

impl AdoptionEnv for Fake {
    fn now(&self) -> Instant {
        self.base + self.offset
    }

    async fn list_siblings(&mut self) -> Result<Vec<PathBuf>, String> {
        self.calls.push(Call::List);
        if let Some(e) = self.list_error.clone() {
            return Err(e);
        }
        let mut out: Vec<PathBuf> = self
            .dirs
            .iter()
            .filter(|(_, d)| d.exists)
            .map(|(p, _)| p.clone())
            .collect();
        out.extend(self.extra_listed.iter().cloned());
        Ok(out)
    }

    async fn remove_stale_staging_copies(&mut self, older_than: Duration) -> usize {
        self.calls.push(Call::Staging(older_than));
        self.staging_removed
    }

    async fn probe(&mut self, dir: &Path) -> ProbeVerdict {
        self.calls.push(Call::Probe(dir.to_path_buf()));
        match self.dirs.get(dir) {
            None => ProbeVerdict::Vanished,
            Some(d) if !d.exists => ProbeVerdict::Vanished,
            Some(d) if d.held => {
                // A probe of a directory this adopter holds would read live:
                // the machine has no business probing it.
                self.violation(format!("probe of {} while adopting it", dir.display()));
                ProbeVerdict::Live
            }
            Some(d) if d.live => ProbeVerdict::Live,
            Some(d) if d.not_ours.is_some() => {
                ProbeVerdict::NotOurs(d.not_ours.clone().unwrap().into())
            }
            Some(d) if d.marked.is_some() => ProbeVerdict::MarkedBlocked(d.marked.clone().unwrap()),
            Some(_) => ProbeVerdict::Dead,
        }
    }

    async fn try_adopt(&mut self, dir: &Path) -> Result<(), AdoptRefusal> {
        self.calls.push(Call::TryAdopt(dir.to_path_buf()));
        if self.dirs.values().any(|d| d.held) {
            self.violation(format!(
                "try_adopt of {} while another sibling is held",
                dir.display()
            ));
        }
        let Some(d) = self.dirs.get(dir).cloned() else {
            return Err(AdoptRefusal::Vanished);
        };
        if !d.exists {
            return Err(AdoptRefusal::Vanished);
        }
        if d.live {
            // Live siblings only ever die in this model, so a take of one
            // means the machine took a directory it last saw live.
            self.violation(format!("try_adopt of live sibling {}", dir.display()));
            return Err(AdoptRefusal::Live("pid 4242 on host h".into()));
        }
        if let Some(r) = self.take_script.pop_front() {
            return Err(r);
        }
        if let Some(r) = d.not_ours {
            return Err(AdoptRefusal::Unadoptable(r.into()));
        }
        if let Some(r) = d.marked {
            return Err(AdoptRefusal::MarkedBlocked(r));
        }
        if self.draw(8) == 1 {
            return Err(AdoptRefusal::Retryable("EMFILE".into()));
        }
        let d = self.d(dir);
        d.held = true;
        d.marked = None; // the take rewrites the owner record
        Ok(())
    }

    async fn begin_recovery(&mut self, dir: &Path) -> Result<Vec<ReadyPack>, RecoveryFailure> {
        self.calls.push(Call::Begin(dir.to_path_buf()));
        if let Some(f) = self.recovery_failure(dir, "begin_recovery", |f| &mut f.begin_script) {
            return Err(f);
        }
        let d = self.d(dir);
        // Sweep the dead writer's temp files. (Owed packs are still files; a
        // successor's listing would list them, but this adopter owes nothing
        // when it lists: the gate.)
        d.open_files = 0;
        Ok(d.ready.iter().map(|p| p.pack.clone()).collect())
    }

    async fn upload_and_index_round(
        &mut self,
        dir: &Path,
        packs: &[ReadyPack],
    ) -> Vec<(ReadyPack, PackOutcome)> {
        self.calls.push(Call::Round(
            dir.to_path_buf(),
            packs.iter().map(|p| p.id.to_hex()).collect(),
        ));
        self.require_held(dir, "upload_and_index_round");
        if self.round_answers_nothing {
            return Vec::new();
        }
        if !self.lease {
            self.violation(format!("upload from {} without the lease", dir.display()));
        }
        if self.own_owed || !self.owed.is_empty() {
            self.violation(format!(
                "upload from {} while something is owed",
                dir.display()
            ));
        }
        if !self.own_uploaded {
            self.violation(format!(
                "upload from {} before own packs went up",
                dir.display()
            ));
        }
        let bytes: u64 = packs.iter().map(|p| p.bytes).sum();
        if packs.is_empty()
            || packs.len() > self.max_round_packs
            || (packs.len() > 1 && bytes > self.max_round_bytes)
        {
            self.violation(format!(
                "round of {} packs / {bytes} bytes out of bounds",
                packs.len()
            ));
        }
        let mut out = Vec::new();
        for p in packs {
            let Some(fp) = self
                .dirs
                .get(dir)
                .and_then(|d| d.ready.iter().find(|r| r.pack.id.to_hex() == p.id.to_hex()))
                .cloned()
            else {
                self.violation(format!(
                    "upload of {} which is not a ready pack of {}",
                    p.id.to_hex(),
                    dir.display()
                ));
                out.push((p.clone(), PackOutcome::Cancelled));
                continue;
            };
            if fp.corrupt {
                // the round's validation, ahead of any upload
                let d = self.d(dir);
                d.ready.retain(|r| r.pack.id.to_hex() != p.id.to_hex());
                d.quarantined.push(p.id.to_hex());
                out.push((
                    p.clone(),
                    PackOutcome::Quarantined {
                        reason: "checksum mismatch".into(),
                    },
                ));
                continue;
            }
            if self.uploaded.contains(&p.id.to_hex()) {
                self.violation(format!("pack {} uploaded twice", p.id.to_hex()));
            }
            let scripted = self
                .pack_script
                .get_mut(&p.id.to_hex())
                .and_then(VecDeque::pop_front);
            let outcome = if let Some(o) = scripted {
                o
            } else if fp.poison {
                PackOutcome::Failed {
                    retryable: false,
                    reason: "pack is above the 4096-byte in-flight bound".into(),
                }
            } else {
                match self.draw(8) {
                    1 => PackOutcome::Owed,
                    2 => PackOutcome::Failed {
                        retryable: true,
                        reason: "connection refused".into(),
                    },
                    3 => PackOutcome::Cancelled,
                    _ => PackOutcome::Indexed,
                }
            };
            match outcome {
                PackOutcome::Indexed => {
                    self.uploaded.insert(p.id.to_hex());
                    self.indexed.insert(p.id.to_hex());
                    self.d(dir)
                        .ready
                        .retain(|r| r.pack.id.to_hex() != p.id.to_hex());
                }
                PackOutcome::Owed => {
                    self.uploaded.insert(p.id.to_hex());
                    self.owed.insert(p.id.to_hex(), dir.to_path_buf());
                }
                _ => {}
            }
            out.push((p.clone(), outcome));
        }
        out.reverse(); // "in any order"
        out
    }

    async fn other_files(&mut self, dir: &Path) -> Option<String> {
        self.calls.push(Call::OtherFiles(dir.to_path_buf()));
        self.require_held(dir, "other_files");
        let d = self.dirs.get(dir)?;
        let mut parts = Vec::new();
        if !d.ready.is_empty() {
            parts.push(format!("{} ready packs", d.ready.len()));
        }
        if !d.quarantined.is_empty() {
            parts.push(format!("{} quarantined packs", d.quarantined.len()));
        }
        if !d.unknown_files.is_empty() {
            parts.push(format!("unknown files ({})", d.unknown_files.join(", ")));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    async fn mark_blocked(&mut self, dir: &Path, reason: &str) {
        self.calls
            .push(Call::Mark(dir.to_path_buf(), reason.to_string()));
        if self.require_held(dir, "mark_blocked") {
            let d = self.d(dir);
            d.marked = Some(reason.to_string());
            d.marked_by_us = Some(reason.to_string());
        }
    }

    async fn release(&mut self, dir: &Path) {
        self.calls.push(Call::Release(dir.to_path_buf()));
        if self.require_held(dir, "release") {
            self.d(dir).held = false;
        }
    }

    async fn release_and_remove_if_empty(&mut self, dir: &Path) -> bool {
        self.calls.push(Call::ReleaseRemove(dir.to_path_buf()));
        if !self.require_held(dir, "release_and_remove_if_empty") {
            return false;
        }
        let d = self.d(dir).clone();
        if !d.ready.is_empty() || !d.quarantined.is_empty() {
            self.violation(format!(
                "release_and_remove_if_empty of {} with {} ready and {} quarantined packs left",
                dir.display(),
                d.ready.len(),
                d.quarantined.len()
            ));
        }
        let d = self.d(dir);
        d.held = false;
        let empty = d.ready.is_empty()
            && d.quarantined.is_empty()
            && d.unknown_files.is_empty()
            && d.open_files == 0
            && !d.nested_live;
        if empty {
            d.exists = false;
        }
        empty
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn adopter() -> Adopter {
    Adopter::new(
        AdoptionConfig::default(),
        PathBuf::from(KEY),
        PathBuf::from(OWN),
    )
}

fn adopter_with(f: impl FnOnce(&mut AdoptionConfig)) -> Adopter {
    let mut cfg = AdoptionConfig::default();
    f(&mut cfg);
    Adopter::new(cfg, PathBuf::from(KEY), PathBuf::from(OWN))
}

/// One step as the first of a fresh cycle.
fn step(a: &mut Adopter, env: &mut Fake) -> StepOutcome {
    a.begin_cycle();
    let b = env.budget();
    block_on(a.step(env, &b))
}

/// One step within the current cycle.
fn step_in_cycle(a: &mut Adopter, env: &mut Fake) -> StepOutcome {
    let b = env.budget();
    block_on(a.step(env, &b))
}

fn stepped(o: StepOutcome) -> Step {
    match o {
        StepOutcome::Stepped(s) => s,
        StepOutcome::Paused(p) => panic!("expected a step, got pause {p:?}"),
    }
}

/// Steps (each as its own cycle) until the machine pauses; returns the steps.
fn run_to_pause(a: &mut Adopter, env: &mut Fake) -> (Vec<Step>, Pause) {
    let mut steps = Vec::new();
    for _ in 0..1000 {
        match step(a, env) {
            StepOutcome::Stepped(s) => steps.push(s),
            StepOutcome::Paused(p) => return (steps, p),
        }
    }
    panic!("no pause after 1000 steps");
}

fn state(a: &Adopter, dir: &Path) -> SiblingState {
    a.sibling(dir).expect("no record").state.clone()
}

/// Steps until `dir` reaches a state whose name is `name`.
fn step_until(a: &mut Adopter, env: &mut Fake, dir: &Path, name: &str) {
    for _ in 0..1000 {
        if a.sibling(dir).is_some_and(|s| s.state.name() == name) {
            return;
        }
        if let StepOutcome::Paused(p) = step(a, env) {
            panic!("paused ({p:?}) before {} reached {name}", dir.display());
        }
    }
    panic!("{} never reached {name}", dir.display());
}

/// An adopter with the fake's round bounds.
fn adopter_for(env: &Fake) -> Adopter {
    adopter_with(|c| {
        c.max_round_packs = env.max_round_packs;
        c.max_round_bytes = env.max_round_bytes;
    })
}

/// Sibling 1 holding `packs` packs, `setup` applied to the fake, and an
/// adopter stepped until the sibling is in state `name`.
fn sibling_in(
    packs: u32,
    name: &str,
    setup: impl FnOnce(&mut Fake, &Path),
) -> (Fake, Adopter, PathBuf) {
    let mut env = Fake::new();
    let d = env.add(1, packs);
    setup(&mut env, &d);
    let mut a = adopter_for(&env);
    step_until(&mut a, &mut env, &d, name);
    (env, a, d)
}

fn assert_no_violations(env: &Fake) {
    assert!(
        env.violations.is_empty(),
        "violations: {:#?}",
        env.violations
    );
}

// ---------------------------------------------------------------------------
// Transitions, in the order of the diagram
// ---------------------------------------------------------------------------

#[test]
fn discovery_lists_the_key_directory_first_and_records_new_siblings_unprobed() {
    let mut env = Fake::new();
    let d = env.add(1, 2);
    let mut a = adopter();
    assert!(
        a.snapshot().adoption_owed,
        "a look at the siblings is owed from the start"
    );
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.action, Action::Discovered { new: 1, gone: 0 });
    assert_eq!(env.calls, vec![Call::List]);
    assert_eq!(state(&a, &d), SiblingState::Unprobed);
}

#[test]
fn staging_copies_older_than_staging_age_are_cleaned_after_each_discovery() {
    let mut env = Fake::new();
    env.staging_removed = 2;
    let mut a = adopter_with(|c| c.staging_max_age = Duration::from_secs(90));
    stepped(step(&mut a, &mut env)); // discovery
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.action, Action::CleanedStaging(2));
    assert_eq!(env.calls[1], Call::Staging(Duration::from_secs(90)));
    assert_eq!(step(&mut a, &mut env), StepOutcome::Paused(Pause::Idle));
    // Again after the next discovery, not before.
    env.advance(Duration::from_secs(30));
    run_to_pause(&mut a, &mut env);
    assert_eq!(env.count(|c| matches!(c, Call::Staging(_))), 2);
}

#[test]
fn removed_staging_copies_are_logged_with_their_count_and_a_clean_pass_is_not() {
    for (removed, expected) in [(0, false), (1, true), (3, true)] {
        let mut env = Fake::new();
        env.staging_removed = removed;
        let mut a = adopter();
        let ((), log) = crate::service::tests::logged(|| {
            stepped(step(&mut a, &mut env)); // discovery
            stepped(step(&mut a, &mut env)); // staging
        });
        let line = log
            .lines()
            .find(|l| l.contains("removed stale staging copies"));
        assert_eq!(line.is_some(), expected, "{removed} removed: {log}");
        if let Some(l) = line {
            assert!(
                l.contains(&format!("removed={removed}")) && l.contains(KEY),
                "{l}"
            );
        }
    }
}

#[test]
fn only_rank_directories_under_this_key_are_siblings_never_our_own() {
    let mut env = Fake::new();
    env.extra_listed = vec![
        PathBuf::from(OWN),
        PathBuf::from("/spool/ffffffffffff/r1-00000001"), // another key
        PathBuf::from(format!("{KEY}/.r2-00000002.deadbeef.creating")),
        PathBuf::from(format!("{KEY}/_refs")),
        PathBuf::from(format!("{KEY}/r3-0000000")), // 7 hex digits
        PathBuf::from(format!("{KEY}/r03-00000003")), // not canonical
        PathBuf::from(format!("{KEY}/sub/r4-00000004")),
    ];
    let d = env.add(5, 0);
    let mut a = adopter();
    run_to_pause(&mut a, &mut env);
    let probed: Vec<_> = env
        .calls
        .iter()
        .filter_map(|c| match c {
            Call::Probe(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(probed, vec![d.clone()]);
    assert_eq!(a.siblings().len(), 1);
}

#[test]
fn probe_dead_then_queue_then_take_then_list_then_upload_then_drain() {
    let mut env = Fake::new();
    let d = env.add(1, 2);
    env.d(&d).open_files = 1;
    let mut a = adopter();
    stepped(step(&mut a, &mut env)); // discover
    stepped(step(&mut a, &mut env)); // staging
    let expect = [
        (Action::Probed(ProbeVerdict::Dead), "dead"),
        (Action::Queued, "queued"),
        (Action::Took, "taken"),
        (Action::Listed(2), "uploading"),
        (
            Action::Round(RoundTally {
                indexed: 2,
                ..RoundTally::default()
            }),
            "uploading",
        ),
        (Action::Drained { removed: true }, "drained"),
    ];
    for (action, name) in expect {
        let s = stepped(step(&mut a, &mut env));
        assert_eq!(s.action, action);
        assert_eq!(s.dir.as_deref(), Some(d.as_path()));
        assert!(!s.ends_cycle() && s.error.is_none(), "{s:?}");
        assert_eq!(state(&a, &d).name(), name);
    }
    assert_eq!(step(&mut a, &mut env), StepOutcome::Paused(Pause::Idle));
    assert!(!env.dirs[&d].exists && env.dirs[&d].open_files == 0);
    assert_eq!(env.indexed.len(), 2);
    let snap = a.snapshot();
    assert_eq!((snap.adopted_spools, snap.adopted_packs), (1, 2));
    assert!(!snap.adoption_owed);
    assert!(state(&a, &d).is_terminal());
    assert_no_violations(&env);
}

#[test]
fn a_sibling_with_no_packs_goes_from_listing_straight_to_drained() {
    let (mut env, mut a, d) = sibling_in(0, "taken", |_, _| {});
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.action, Action::Listed(0));
    assert_eq!(state(&a, &d).name(), "uploading");
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.action, Action::Drained { removed: true });
    assert_no_violations(&env);
}

#[test]
fn the_listing_hashes_nothing_and_its_packs_go_to_the_first_round_whole() {
    // No validation phase of its own: the round's pipeline validates each
    // pack just ahead of its upload, so the store never idles while a
    // backlog is hashed.
    let (mut env, mut a, d) = sibling_in(3, "taken", |_, _| {});
    let s = stepped(step(&mut a, &mut env)); // begin_recovery
    assert_eq!(s.action, Action::Listed(3));
    match state(&a, &d) {
        SiblingState::Uploading { remaining, doomed } => {
            assert_eq!(remaining.len(), 3);
            assert!(doomed.is_none());
        }
        s => panic!("{s}"),
    }
    let s = stepped(step(&mut a, &mut env));
    assert!(
        matches!(s.action, Action::Round(t) if t.indexed == 3),
        "{s:?}"
    );
    assert_eq!(env.rounds(), vec![vec![id(1, 0), id(1, 1), id(1, 2)]]);
}

#[test]
fn rounds_are_one_per_step_and_bounded_by_max_round_packs_and_bytes() {
    let mut env = Fake::new();
    env.max_round_packs = 2;
    env.max_round_bytes = 2500;
    let d = env.add(1, 5);
    env.d(&d).ready[3].pack.bytes = 2000; // with pack 2 would be 3000 > 2500
    env.d(&d).ready[4].pack.bytes = 9000; // above the bound: alone
    let mut a = adopter_with(|c| {
        c.max_round_packs = 2;
        c.max_round_bytes = 2500;
    });
    step_until(&mut a, &mut env, &d, "uploading");
    let mut sizes = Vec::new();
    while state(&a, &d).name() == "uploading" {
        let before = env.rounds().len();
        stepped(step(&mut a, &mut env));
        if env.rounds().len() > before {
            sizes.push(env.rounds().last().unwrap().len());
        }
    }
    assert_eq!(sizes, vec![2, 1, 1, 1]);
    assert_eq!(state(&a, &d), SiblingState::Drained { removed: true });
    assert_no_violations(&env);
}

// ---------------------------------------------------------------------------
// Live siblings, recheck, discovery of later siblings
// ---------------------------------------------------------------------------

#[test]
fn live_sibling_is_skipped_and_rechecked_every_recheck_interval() {
    let mut env = Fake::new();
    let d = env.add(1, 2);
    env.d(&d).live = true;
    let mut a = adopter_with(|c| c.discovery_interval = Duration::from_secs(3600));
    let (_, p) = run_to_pause(&mut a, &mut env);
    assert_eq!(p, Pause::Idle);
    assert_eq!(state(&a, &d).name(), "probed-live");
    assert_eq!(a.snapshot().live_siblings, 1);
    assert!(!a.snapshot().adoption_owed, "a live sibling is not owed");
    assert_eq!(a.next_due(), Some(env.now() + Duration::from_secs(30)));
    env.advance(Duration::from_secs(29));
    assert_eq!(step(&mut a, &mut env), StepOutcome::Paused(Pause::Idle));
    assert_eq!(env.count(|c| matches!(c, Call::Probe(_))), 1);
    env.advance(Duration::from_secs(1));
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.action, Action::Probed(ProbeVerdict::Live));
    // Its owner dies: adopted within the next recheck interval.
    env.d(&d).live = false;
    env.advance(Duration::from_secs(30));
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d), SiblingState::Drained { removed: true });
    assert_eq!(env.indexed.len(), 2);
    assert_no_violations(&env);
}

#[test]
fn recheck_interval_zero_never_probes_a_live_sibling_again() {
    let mut env = Fake::new();
    let d = env.add(1, 1);
    env.d(&d).live = true;
    let mut a = adopter_with(|c| c.recheck_interval = Duration::ZERO);
    run_to_pause(&mut a, &mut env);
    env.d(&d).live = false;
    for _ in 0..5 {
        env.advance(Duration::from_secs(3600));
        run_to_pause(&mut a, &mut env);
    }
    assert_eq!(env.count(|c| matches!(c, Call::Probe(_))), 1);
    assert_eq!(state(&a, &d), SiblingState::ProbedLive { recheck_at: None });
}

#[test]
fn a_kept_claim_of_this_process_probes_live_and_is_never_touched() {
    // The env's contract: a directory this very process holds reads Live.
    let mut env = Fake::new();
    let d = env.add(1, 3);
    env.d(&d).live = true;
    env.d(&d).open_files = 1;
    let mut a = adopter();
    for _ in 0..10 {
        run_to_pause(&mut a, &mut env);
        env.advance(Duration::from_secs(31));
    }
    assert!(env
        .calls
        .iter()
        .all(|c| matches!(c, Call::Probe(_) | Call::List | Call::Staging(_))));
    let fd = &env.dirs[&d];
    assert_eq!((fd.ready.len(), fd.open_files), (3, 1));
    assert_no_violations(&env);
}

#[test]
fn a_take_refused_as_live_goes_back_to_probed_live() {
    let (mut env, mut a, d) = sibling_in(1, "queued", |env, _| {
        env.take_script
            .push_back(AdoptRefusal::Live("pid 7 on host h".into()));
    });
    let s = stepped(step(&mut a, &mut env));
    assert!(matches!(
        s.action,
        Action::TakeRefused(AdoptRefusal::Live(_))
    ));
    assert!(!s.ends_cycle());
    assert_eq!(state(&a, &d).name(), "probed-live");
}

/// A take that meets a read-only filesystem
/// blocks the sibling for now (listed blocked by us, not owed, reported
/// once, never a backoff); it is taken again every `recheck_interval`, the
/// reason not reported again while it stays read-only, and drained once
/// the filesystem is writable again.
#[test]
fn a_read_only_sibling_is_blocked_reported_once_and_taken_again_at_each_recheck() {
    let mut env = Fake::new();
    let d = env.add(1, 3);
    for _ in 0..3 {
        env.take_script.push_back(AdoptRefusal::ReadOnly(
            "open X/.owner.lock: Read-only file system (os error 30)".into(),
        ));
    }
    let mut a = adopter_with(|c| c.discovery_interval = Duration::from_secs(3600));
    let mut errors = Vec::new();
    let (steps, p) = run_to_pause(&mut a, &mut env);
    assert_eq!(p, Pause::Idle);
    assert!(
        steps.iter().all(|s| s.flow != Flow::Failed),
        "no backoff: {steps:?}"
    );
    errors.extend(steps.into_iter().filter_map(|s| s.error));
    assert_eq!(state(&a, &d).name(), "read-only");
    let snap = a.snapshot();
    assert_eq!(snap.blocked_siblings.len(), 1);
    assert_eq!(snap.blocked_siblings[0].by, BlockedBy::Us);
    assert!(!snap.adoption_owed, "a read-only sibling is not owed");
    assert_eq!(a.next_due(), Some(env.now() + Duration::from_secs(30)));
    // not taken again before its recheck
    env.advance(Duration::from_secs(29));
    run_to_pause(&mut a, &mut env);
    assert_eq!(env.count(|c| matches!(c, Call::TryAdopt(_))), 1);
    // two more read-only takes, one per recheck, reported no more
    for n in 2..=3 {
        env.advance(Duration::from_secs(1));
        let (steps, _) = run_to_pause(&mut a, &mut env);
        assert!(steps.iter().all(|s| s.flow != Flow::Failed));
        errors.extend(steps.into_iter().filter_map(|s| s.error));
        assert_eq!(env.count(|c| matches!(c, Call::TryAdopt(_))), n);
        assert_eq!(state(&a, &d).name(), "read-only");
        env.advance(Duration::from_secs(29));
    }
    assert_eq!(errors.len(), 1, "reported once: {errors:?}");
    assert!(
        errors[0].contains(&d.display().to_string()) && errors[0].contains("read-only"),
        "{errors:?}"
    );
    // writable again: the next take adopts it
    env.advance(Duration::from_secs(1));
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d), SiblingState::Drained { removed: true });
    assert_eq!(env.indexed.len(), 3);
    assert_no_violations(&env);
}

/// With `recheck_interval` 0 a read-only sibling is never taken again.
#[test]
fn recheck_interval_zero_never_takes_a_read_only_sibling_again() {
    let mut env = Fake::new();
    let d = env.add(1, 1);
    env.take_script
        .push_back(AdoptRefusal::ReadOnly("EROFS".into()));
    let mut a = adopter_with(|c| c.recheck_interval = Duration::ZERO);
    for _ in 0..5 {
        run_to_pause(&mut a, &mut env);
        env.advance(Duration::from_secs(3600));
    }
    assert_eq!(env.count(|c| matches!(c, Call::TryAdopt(_))), 1);
    assert_eq!(
        state(&a, &d),
        SiblingState::ReadOnly {
            reason: "EROFS".into(),
            recheck_at: None
        }
    );
}

/// A reader's lingering shared flock (group mode) delays a
/// take; it is reported (the step's error names the pid), never blocks
/// the sibling and never backs the loop off, and a later pass takes it —
/// even with live siblings never re-checked (interval 0).
#[test]
fn a_take_refused_by_a_shared_reader_is_retried_on_a_later_pass() {
    let mut env = Fake::new();
    let d = env.add(1, 3);
    env.take_script.push_back(AdoptRefusal::HeldShared(
        "spool directory X cannot be taken now: X/.owner.lock is held shared by pid 4242".into(),
    ));
    let mut a = adopter_with(|c| c.recheck_interval = Duration::ZERO);
    let (steps, _) = run_to_pause(&mut a, &mut env);
    let refused = steps
        .iter()
        .find(|s| matches!(s.action, Action::TakeRefused(AdoptRefusal::HeldShared(_))))
        .expect("the take was refused");
    assert_ne!(refused.flow, Flow::Failed, "no backoff for a reader's lock");
    assert!(
        refused
            .error
            .as_deref()
            .unwrap()
            .contains("held shared by pid 4242"),
        "{refused:?}"
    );
    assert_eq!(state(&a, &d).name(), "probed-live");
    assert!(a.snapshot().blocked_siblings.is_empty());
    env.advance(HELD_SHARED_RECHECK);
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d), SiblingState::Drained { removed: true });
    assert_no_violations(&env);
}

#[test]
fn siblings_that_appear_later_are_found_by_the_periodic_listing() {
    let mut env = Fake::new();
    let mut a = adopter();
    run_to_pause(&mut a, &mut env);
    let d = env.add(2, 1);
    env.advance(Duration::from_secs(29));
    run_to_pause(&mut a, &mut env);
    assert!(a.sibling(&d).is_none(), "not before the discovery interval");
    env.advance(Duration::from_secs(1));
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d), SiblingState::Drained { removed: true });
}

#[test]
fn owe_look_lists_at_the_next_step() {
    let mut env = Fake::new();
    let mut a = adopter();
    run_to_pause(&mut a, &mut env);
    let d = env.add(2, 0);
    a.owe_look();
    assert!(a.snapshot().adoption_owed);
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d).name(), "drained");
}

#[test]
fn vanished_siblings_are_forgotten_and_a_recreated_drained_one_is_new() {
    let mut env = Fake::new();
    let d1 = env.add(1, 1);
    env.d(&d1).live = true;
    let d2 = env.add(2, 1);
    let mut a = adopter();
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d2).name(), "drained");
    env.d(&d1).exists = false;
    env.advance(Duration::from_secs(30));
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.action, Action::Discovered { new: 0, gone: 2 });
    assert!(a.siblings().is_empty());
    // r2 reappears (packs moved in by hand): adopted again.
    env.add(2, 1);
    env.advance(Duration::from_secs(30));
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d2).name(), "drained");
    assert_eq!(a.snapshot().adopted_spools, 2);
}

#[test]
fn a_drained_directory_recreated_before_the_next_listing_is_a_new_sibling() {
    let mut env = Fake::new();
    let d = env.add(1, 1);
    let mut a = adopter();
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d), SiblingState::Drained { removed: true });
    // Packs moved back in by hand before the next listing: listed again
    // under the same name, counted new (nothing gone), adopted again.
    env.add(1, 2);
    env.advance(Duration::from_secs(30));
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.action, Action::Discovered { new: 1, gone: 0 });
    assert_eq!(state(&a, &d), SiblingState::Unprobed);
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d), SiblingState::Drained { removed: true });
    assert_eq!(a.snapshot().adopted_spools, 2);
    assert_eq!(env.count(|c| matches!(c, Call::TryAdopt(_))), 2);
}

#[test]
fn a_probe_that_finds_the_directory_gone_forgets_it() {
    let mut env = Fake::new();
    let d = env.add(1, 0);
    let mut a = adopter();
    stepped(step(&mut a, &mut env));
    stepped(step(&mut a, &mut env));
    env.d(&d).exists = false;
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.action, Action::Probed(ProbeVerdict::Vanished));
    assert!(a.sibling(&d).is_none());
}

#[test]
fn a_failed_discovery_listing_is_reported_and_never_backs_the_loop_off() {
    let mut env = Fake::new();
    env.list_error = Some("EACCES".into());
    let mut a = adopter();
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.action, Action::DiscoveryFailed);
    assert!(!s.ends_cycle());
    assert!(s.error.unwrap().contains(KEY));
    assert_eq!(step(&mut a, &mut env), StepOutcome::Paused(Pause::Idle));
    env.list_error = None;
    let d = env.add(1, 0);
    env.advance(Duration::from_secs(30));
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d).name(), "drained");
}

// ---------------------------------------------------------------------------
// Gates: lease, owed, own backlog
// ---------------------------------------------------------------------------

/// Drives a sibling half-way (uploading, one round done), closes `gate`,
/// checks that nothing more happens, opens it again and checks it drains.
fn assert_gate_holds_adoption(close: fn(&mut Fake, bool), pause: Pause) {
    // From the start: not even a listing.
    let mut env = Fake::new();
    let d = env.add(1, 3);
    close(&mut env, true);
    let mut a = adopter_with(|c| c.max_round_packs = 1);
    env.max_round_packs = 1;
    assert_eq!(step(&mut a, &mut env), StepOutcome::Paused(pause));
    assert!(env.calls.is_empty());
    // Half-way through a sibling: no further round, the lock is kept.
    close(&mut env, false);
    step_until(&mut a, &mut env, &d, "uploading");
    stepped(step(&mut a, &mut env));
    close(&mut env, true);
    let calls = env.calls.len();
    for _ in 0..5 {
        assert_eq!(step(&mut a, &mut env), StepOutcome::Paused(pause));
        env.advance(Duration::from_secs(31));
    }
    assert_eq!(env.calls.len(), calls);
    assert!(env.dirs[&d].held && a.snapshot().adoption_owed);
    close(&mut env, false);
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d), SiblingState::Drained { removed: true });
    assert_no_violations(&env);
}

#[test]
fn nothing_is_adopted_without_the_adopter_lease() {
    assert_gate_holds_adoption(|env, closed| env.lease = !closed, Pause::NoLease);
}

#[test]
fn nothing_is_adopted_while_anything_is_owed_to_the_catalog() {
    assert_gate_holds_adoption(|env, closed| env.own_owed = closed, Pause::Owed);
}

#[test]
fn nothing_is_adopted_until_every_own_ready_pack_is_uploaded() {
    assert_gate_holds_adoption(|env, closed| env.own_uploaded = !closed, Pause::OwnBacklog);
}

#[test]
fn a_round_that_leaves_packs_owed_ends_the_cycle_and_adoption_waits_until_nothing_is_owed() {
    let mut env = Fake::new();
    let d1 = env.add(1, 2);
    let d2 = env.add(2, 2);
    env.pack_script.insert(id(1, 0), [PackOutcome::Owed].into());
    let mut a = adopter_with(|c| c.max_round_packs = 1);
    env.max_round_packs = 1;
    step_until(&mut a, &mut env, &d1, "uploading");
    a.begin_cycle();
    let s = stepped(step_in_cycle(&mut a, &mut env));
    assert!(s.flow == Flow::Owed && s.ends_cycle());
    // The service's own budget now says owed: nothing moves, the second
    // sibling's packs all stay in its spool.
    for _ in 0..5 {
        assert_eq!(step(&mut a, &mut env), StepOutcome::Paused(Pause::Owed));
    }
    assert_eq!(env.rounds().len(), 1);
    assert_eq!(env.dirs[&d2].ready.len(), 2);
    assert!(a.snapshot().adoption_owed);
    // The catalog is back: the owed pack is indexed, both siblings drain.
    env.index_owed();
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d1), SiblingState::Drained { removed: true });
    assert_eq!(state(&a, &d2), SiblingState::Drained { removed: true });
    assert_eq!(env.indexed.len(), 4);
    assert_no_violations(&env);
}

// ---------------------------------------------------------------------------
// Slices, flushes
// ---------------------------------------------------------------------------

#[test]
fn a_waiting_flush_makes_the_cycle_yield_after_its_first_step() {
    let mut env = Fake::new();
    env.add(1, 8);
    let mut a = adopter();
    env.flush_waiting = true;
    let report = block_on(a.run_cycle(&mut env, Fake::budget));
    assert_eq!(report.steps, 1);
    assert_eq!(report.paused, Some(Pause::FlushWaiting));
}

/// Scripts `pack`'s next upload to fail retryably (a 503).
fn fail_retryably_once(env: &mut Fake, pack: String) {
    env.pack_script.insert(
        pack,
        [PackOutcome::Failed {
            retryable: true,
            reason: "503".into(),
        }]
        .into(),
    );
}

/// One `run_cycle` from a fresh adopter over sibling 1 (`packs` packs),
/// with `setup` applied to the fake first.
fn first_cycle(packs: u32, setup: impl FnOnce(&mut Fake)) -> CycleReport {
    let mut env = Fake::new();
    env.add(1, packs);
    setup(&mut env);
    let mut a = adopter_for(&env);
    block_on(a.run_cycle(&mut env, Fake::budget))
}

#[test]
fn a_cycles_report_flags_only_the_flow_that_ended_it_after_the_steps_that_went_on() {
    // Discovery, staging, probe, queue, take and listing go on (Flow::
    // Continue); the first round ends the cycle with the flow its packs
    // gave, and only that flow is flagged (the loop backs off on `failed`
    // only, and waits for the catalog on `owed` only).
    let failed = first_cycle(2, |env| {
        fail_retryably_once(env, id(1, 0));
    });
    let cut = first_cycle(2, |env| {
        env.pack_script
            .insert(id(1, 0), [PackOutcome::Cancelled].into());
    });
    let owed = first_cycle(2, |env| {
        env.pack_script.insert(id(1, 0), [PackOutcome::Owed].into());
    });
    for (r, flags) in [
        (&failed, (true, false, false)),
        (&cut, (false, true, false)),
        (&owed, (false, false, true)),
    ] {
        assert!(r.steps > 5, "{r:?}");
        assert_eq!((r.failed, r.cut_short, r.owed), flags, "{r:?}");
        assert_eq!(r.paused, None, "{r:?}");
    }
    // A cycle that drains everything and pauses flags nothing.
    let clean = first_cycle(2, |_| {});
    assert!(clean.steps > 5, "{clean:?}");
    assert_eq!(
        (clean.failed, clean.cut_short, clean.owed),
        (false, false, false)
    );
    assert_eq!(clean.paused, Some(Pause::Idle));
}

#[test]
fn a_marked_blocked_sibling_is_due_for_its_recheck_before_the_next_discovery() {
    let mut env = Fake::new();
    let d = env.add(1, 1);
    env.d(&d).marked = Some("pack above the in-flight bound".into());
    let mut a = adopter_with(|c| {
        c.recheck_interval = Duration::from_secs(10);
        c.discovery_interval = Duration::from_secs(3600);
    });
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d).name(), "marked-blocked");
    // The loop sleeps until the recheck, not until the hourly listing.
    assert_eq!(a.next_due(), Some(env.now() + Duration::from_secs(10)));
}

#[test]
fn the_adopter_keeps_the_knobs_it_was_made_with() {
    let cfg = AdoptionConfig {
        recheck_interval: Duration::from_secs(7),
        discovery_interval: Duration::from_secs(11),
        staging_max_age: Duration::from_secs(13),
        adoption_slice: Duration::from_millis(17),
        max_round_packs: 19,
        max_round_bytes: 23,
    };
    let a = Adopter::new(cfg.clone(), PathBuf::from(KEY), PathBuf::from(OWN));
    assert_eq!(a.config(), &cfg);
}

#[test]
fn every_adopting_cycle_takes_at_least_one_step_however_many_flushes_wait() {
    let mut env = Fake::new();
    let d = env.add(1, 3);
    env.flush_waiting = true;
    let mut a = adopter();
    let mut cycles = 0;
    while state_name(&a, &d) != Some("drained") {
        cycles += 1;
        assert!(cycles < 100, "adoption starved by flushes");
        let report = block_on(a.run_cycle(&mut env, Fake::budget));
        assert_eq!(
            report.steps, 1,
            "exactly one step per cycle while a flush waits"
        );
    }
    assert_eq!(env.indexed.len(), 3);
}

fn state_name(a: &Adopter, dir: &Path) -> Option<&'static str> {
    a.sibling(dir).map(|s| s.state.name())
}

#[test]
fn the_cycle_yields_when_the_adoption_slice_is_over() {
    let mut env = Fake::new();
    env.add(1, 8);
    let mut a = adopter();
    a.begin_cycle();
    stepped(step_in_cycle(&mut a, &mut env));
    stepped(step_in_cycle(&mut a, &mut env));
    env.slice = Duration::ZERO; // deadline = now
    assert_eq!(
        step_in_cycle(&mut a, &mut env),
        StepOutcome::Paused(Pause::SliceOver)
    );
    // A new cycle still takes its first step.
    stepped(step(&mut a, &mut env));
}

#[test]
fn lock_listing_and_remaining_packs_are_kept_between_cycles_so_a_backlog_is_listed_once() {
    let mut env = Fake::new();
    let d = env.add(1, 6);
    env.flush_waiting = true; // one step per cycle: every step in its own cycle
    let mut a = adopter_with(|c| c.max_round_packs = 2);
    env.max_round_packs = 2;
    for _ in 0..100 {
        if state_name(&a, &d) == Some("drained") {
            break;
        }
        block_on(a.run_cycle(&mut env, Fake::budget));
    }
    assert_eq!(state_name(&a, &d), Some("drained"));
    assert_eq!(env.count(|c| matches!(c, Call::TryAdopt(_))), 1);
    assert_eq!(env.count(|c| matches!(c, Call::Begin(_))), 1);
    let sent: Vec<String> = env.rounds().concat();
    assert_eq!(
        sent.len(),
        6,
        "each pack went to exactly one round: {sent:?}"
    );
    assert_eq!(
        env.count(|c| matches!(c, Call::Release(_) | Call::ReleaseRemove(_))),
        1
    );
    assert_no_violations(&env);
}

// ---------------------------------------------------------------------------
// Failures: retryable, non-retryable, cancelled
// ---------------------------------------------------------------------------

#[test]
fn retryable_failures_requeue_at_the_back_and_count_toward_backoff() {
    let (mut env, mut a, d) = sibling_in(3, "uploading", |env, _| {
        env.max_round_packs = 2;
        fail_retryably_once(env, id(1, 0));
    });
    let s = stepped(step(&mut a, &mut env));
    assert!(s.flow == Flow::Failed && s.ends_cycle());
    match state(&a, &d) {
        SiblingState::Uploading { remaining, .. } => {
            let ids: Vec<_> = remaining.iter().map(|p| p.id.to_hex()).collect();
            assert_eq!(ids, vec![id(1, 2), id(1, 0)]);
        }
        s => panic!("{s}"),
    }
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d), SiblingState::Drained { removed: true });
    assert_eq!(env.indexed.len(), 3);
}

#[test]
fn a_non_retryable_pack_blocks_its_directory_after_the_rest_went_up() {
    let mut env = Fake::new();
    let d = env.add(1, 4);
    env.d(&d).ready[1].poison = true;
    let mut a = adopter_with(|c| c.max_round_packs = 1);
    env.max_round_packs = 1;
    let (steps, _) = run_to_pause(&mut a, &mut env);
    assert!(
        steps.iter().all(|s| s.flow != Flow::Failed),
        "a blocked sibling never backs the loop off"
    );
    let SiblingState::Blocked { reason } = state(&a, &d) else {
        panic!("{}", state(&a, &d))
    };
    assert!(reason.contains("in-flight bound"), "{reason}");
    // Its round counts it as failed for good, once; the rest went up; the
    // poisoned pack stays where it was.
    let tallies: Vec<RoundTally> = steps
        .iter()
        .filter_map(|s| match s.action {
            Action::Round(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(
        tallies.iter().map(|t| t.non_retryable).sum::<usize>(),
        1,
        "{tallies:?}"
    );
    assert_eq!(env.indexed.len(), 3);
    let fd = &env.dirs[&d];
    assert!(fd.exists && !fd.held);
    assert_eq!(fd.ready.len(), 1);
    assert_eq!(fd.marked_by_us.as_deref(), Some(reason.as_str()));
    let snap = a.snapshot();
    assert_eq!(
        snap.blocked_siblings,
        vec![BlockedSibling {
            dir: d.clone(),
            reason,
            by: BlockedBy::Us
        }]
    );
    assert!(!snap.adoption_owed, "a blocked sibling is not owed");
    assert_eq!(snap.adopted_spools, 0);
    assert_no_violations(&env);
}

#[test]
fn a_blocked_siblings_reason_is_reported_once_and_it_is_never_looked_at_again() {
    let mut env = Fake::new();
    let d = env.add(1, 2);
    env.d(&d).ready[0].poison = true;
    let mut a = adopter();
    let mut errors = Vec::new();
    for _ in 0..20 {
        errors.extend(block_on(a.run_cycle(&mut env, Fake::budget)).errors);
        env.advance(Duration::from_secs(31));
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains(&d.display().to_string()));
    let after_block = env
        .calls
        .iter()
        .rposition(|c| matches!(c, Call::Release(_)))
        .unwrap();
    assert!(env.calls[after_block..]
        .iter()
        .all(|c| !matches!(c, Call::Probe(p) | Call::TryAdopt(p) if p == &d)));
    assert_eq!(state(&a, &d).name(), "blocked");
}

#[test]
fn a_lock_that_cannot_be_taken_blocks_the_sibling_without_backoff() {
    let (mut env, mut a, d) = sibling_in(2, "queued", |env, _| {
        env.take_script
            .push_back(AdoptRefusal::Unadoptable("EACCES on .owner.lock".into()));
    });
    let s = stepped(step(&mut a, &mut env));
    assert!(s.flow != Flow::Failed && s.error.is_some());
    assert_eq!(
        state(&a, &d),
        SiblingState::Blocked {
            reason: "EACCES on .owner.lock".into()
        }
    );
    // Never held: nothing marked or released.
    assert_eq!(
        env.count(|c| matches!(c, Call::Mark(..) | Call::Release(_))),
        0
    );
    assert!(!a.snapshot().adoption_owed);
}

#[test]
fn another_users_directory_is_blocked_at_probe_without_mark_or_release() {
    let mut env = Fake::new();
    let d = env.add(1, 2);
    env.d(&d).not_ours = Some("owned by uid 1001; cannot open .owner.lock (EACCES)".into());
    let mut a = adopter();
    let (steps, _) = run_to_pause(&mut a, &mut env);
    assert!(steps.iter().all(|s| s.flow != Flow::Failed));
    assert_eq!(steps.iter().filter(|s| s.error.is_some()).count(), 1);
    assert_eq!(state(&a, &d).name(), "blocked");
    assert_eq!(
        env.count(|c| matches!(c, Call::TryAdopt(_) | Call::Mark(..) | Call::Release(_))),
        0
    );
    assert_eq!(a.snapshot().blocked_siblings.len(), 1);
}

#[test]
fn a_directory_that_cannot_be_opened_after_the_take_is_marked_blocked_and_released() {
    let (mut env, mut a, d) = sibling_in(2, "taken", |env, _| {
        env.begin_script.push_back(RecoveryFailure::Unopenable(
            "EACCES reading the directory".into(),
        ));
    });
    let s = stepped(step(&mut a, &mut env));
    assert!(s.error.is_some() && s.flow != Flow::Failed);
    assert_eq!(state(&a, &d).name(), "blocked");
    assert!(env.dirs[&d].marked_by_us.is_some() && !env.dirs[&d].held);
    assert_eq!(env.dirs[&d].ready.len(), 2);
}

#[test]
fn a_drained_directory_that_still_holds_other_files_is_blocked() {
    let mut env = Fake::new();
    let d = env.add(1, 3);
    env.d(&d).ready[2].corrupt = true;
    env.d(&d).unknown_files.push("notes.txt".into());
    let mut a = adopter();
    run_to_pause(&mut a, &mut env);
    let SiblingState::Blocked { reason } = state(&a, &d) else {
        panic!("{}", state(&a, &d))
    };
    assert!(
        reason.contains("1 quarantined packs") && reason.contains("notes.txt"),
        "{reason}"
    );
    assert_eq!(a.sibling(&d).unwrap().quarantined_packs, 1);
    assert_eq!(env.indexed.len(), 2, "the corrupt pack is never uploaded");
    assert!(env.dirs[&d].exists);
    assert_eq!(env.count(|c| matches!(c, Call::ReleaseRemove(_))), 0);
}

#[test]
fn a_corrupt_pack_is_quarantined_in_its_round_and_never_uploaded() {
    let (mut env, mut a, d) = sibling_in(2, "uploading", |env, d| {
        env.d(d).ready[0].corrupt = true;
    });
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(
        s.action,
        Action::Round(RoundTally {
            indexed: 1,
            quarantined: 1,
            ..RoundTally::default()
        })
    );
    assert_eq!(a.sibling(&d).unwrap().quarantined_packs, 1);
    run_to_pause(&mut a, &mut env);
    assert!(!env.uploaded.contains(&id(1, 0)));
    assert_eq!(env.dirs[&d].quarantined, vec![id(1, 0)]);
    assert_eq!(state(&a, &d).name(), "blocked");
    assert_eq!(env.count(|c| matches!(c, Call::ReleaseRemove(_))), 0);
    assert_no_violations(&env);
}

#[test]
fn a_pack_gone_since_the_listing_is_dropped_not_retried() {
    let (mut env, mut a, d) = sibling_in(2, "uploading", |env, _| {
        env.pack_script
            .insert(id(1, 1), VecDeque::from([PackOutcome::Vanished]));
    });
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(
        s.action,
        Action::Round(RoundTally {
            indexed: 1,
            vanished: 1,
            ..RoundTally::default()
        })
    );
    assert!(!s.ends_cycle(), "{s:?}");
    env.d(&d).ready.retain(|p| p.pack.id.to_hex() != id(1, 1)); // it is gone
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d).name(), "drained");
    assert_eq!(env.rounds().len(), 1, "nothing went up again");
    assert_eq!(a.snapshot().adopted_packs, 1);
}

#[test]
fn directories_marked_blocked_by_others_are_skipped() {
    let mut env = Fake::new();
    let d = env.add(1, 2);
    env.d(&d).marked = Some("pack above the in-flight bound".into());
    let mut a = adopter();
    let (steps, _) = run_to_pause(&mut a, &mut env);
    assert!(steps
        .iter()
        .all(|s| s.error.is_none() && s.flow != Flow::Failed));
    assert_eq!(state(&a, &d).name(), "marked-blocked");
    assert_eq!(env.count(|c| matches!(c, Call::TryAdopt(_))), 0);
    let snap = a.snapshot();
    assert_eq!(snap.blocked_siblings[0].by, BlockedBy::Another);
    assert!(!snap.adoption_owed);
    // An operator clears the mark: noticed at the next recheck.
    env.d(&d).marked = None;
    env.advance(Duration::from_secs(30));
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d).name(), "drained");
}

#[test]
fn a_drained_directory_holding_a_nested_live_spool_is_released_and_kept() {
    let mut env = Fake::new();
    let d = env.add(1, 2);
    env.d(&d).nested_live = true;
    let mut a = adopter();
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d), SiblingState::Drained { removed: false });
    assert!(env.dirs[&d].exists && !env.dirs[&d].held);
    assert_eq!(a.snapshot().adopted_spools, 1);
    // Never adopted again although it is still listed and unheld.
    for _ in 0..3 {
        env.advance(Duration::from_secs(31));
        run_to_pause(&mut a, &mut env);
    }
    assert_eq!(env.count(|c| matches!(c, Call::TryAdopt(_))), 1);
}

#[test]
fn a_cancelled_pack_goes_back_to_the_front_and_cuts_the_cycle_short() {
    let (mut env, mut a, d) = sibling_in(4, "uploading", |env, _| {
        env.max_round_packs = 2;
        env.pack_script
            .insert(id(1, 1), [PackOutcome::Cancelled].into());
    });
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.flow, Flow::CutShort);
    match state(&a, &d) {
        SiblingState::Uploading { remaining, .. } => {
            let ids: Vec<_> = remaining.iter().map(|p| p.id.to_hex()).collect();
            assert_eq!(ids, vec![id(1, 1), id(1, 2), id(1, 3)]);
        }
        s => panic!("{s}"),
    }
    assert!(env.dirs[&d].held, "a cut round keeps the lock");
}

#[test]
fn a_pack_missing_from_the_rounds_answer_counts_as_cancelled() {
    let (mut env, mut a, d) = sibling_in(2, "uploading", |env, _| {
        env.round_answers_nothing = true;
    });
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.flow, Flow::CutShort, "{s:?}");
    let SiblingState::Uploading { remaining, .. } = state(&a, &d) else {
        panic!("{}", state(&a, &d))
    };
    assert_eq!(remaining.len(), 2);
}

#[test]
fn a_cut_listing_lets_the_directory_go_whole_and_starts_over() {
    let (mut env, mut a, d) = sibling_in(2, "taken", |env, _| {
        env.begin_script.push_back(RecoveryFailure::Cancelled);
    });
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.flow, Flow::CutShort);
    assert_eq!(state(&a, &d), SiblingState::Unprobed);
    assert!(!env.dirs[&d].held && env.dirs[&d].exists);
    assert_eq!(env.dirs[&d].ready.len(), 2);
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d).name(), "drained");
    assert_eq!(env.count(|c| matches!(c, Call::TryAdopt(_))), 2);
    assert_no_violations(&env);
}

#[test]
fn retryable_recovery_failures_keep_the_lock_and_count_toward_backoff() {
    let (mut env, mut a, d) = sibling_in(1, "taken", |env, _| {
        env.begin_script
            .push_back(RecoveryFailure::Retryable("EIO".into()));
    });
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.flow, Flow::Failed);
    assert_eq!(state(&a, &d), SiblingState::Taken);
    assert!(env.dirs[&d].held);
    stepped(step(&mut a, &mut env)); // listed
    assert_eq!(state(&a, &d).name(), "uploading");
    run_to_pause(&mut a, &mut env);
    assert_eq!(state(&a, &d).name(), "drained");
}

#[test]
fn a_retryable_take_failure_stays_queued_and_counts_toward_backoff() {
    let (mut env, mut a, d) = sibling_in(1, "queued", |env, _| {
        env.take_script
            .push_back(AdoptRefusal::Retryable("EMFILE".into()));
    });
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(s.flow, Flow::Failed);
    assert_eq!(state(&a, &d), SiblingState::Queued);
}

// ---------------------------------------------------------------------------
// Stop and latch
// ---------------------------------------------------------------------------

#[test]
fn stop_releases_every_adopted_lock_and_queued_sibling_and_removes_nothing() {
    let mut env = Fake::new();
    let d1 = env.add(1, 4);
    let d2 = env.add(2, 2);
    let mut a = adopter_with(|c| c.max_round_packs = 1);
    env.max_round_packs = 1;
    step_until(&mut a, &mut env, &d1, "uploading");
    stepped(step(&mut a, &mut env)); // one round
    assert_eq!(state(&a, &d2), SiblingState::Queued);
    env.stop = true;
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(
        s.action,
        Action::ReleasedAll {
            released: 1,
            dropped: 1
        }
    );
    assert_eq!(state(&a, &d1), SiblingState::ReleasedOnCancel);
    assert_eq!(state(&a, &d2), SiblingState::ReleasedOnCancel);
    assert!(env.dirs[&d1].exists && !env.dirs[&d1].held);
    assert_eq!(
        env.dirs[&d1].ready.len(),
        3,
        "half-drained: the rest stays for a successor"
    );
    assert_eq!(env.count(|c| matches!(c, Call::ReleaseRemove(_))), 0);
    assert_eq!(step(&mut a, &mut env), StepOutcome::Paused(Pause::Stopped));
    assert_eq!(a.next_due(), None);
    assert!(
        a.snapshot().adoption_owed,
        "what a stop cut is still to adopt"
    );
    // A successor finishes the job.
    let mut b = adopter_with(|c| c.max_round_packs = 1);
    env.stop = false;
    run_to_pause(&mut b, &mut env);
    assert_eq!(state(&b, &d1).name(), "drained");
    assert_eq!(state(&b, &d2).name(), "drained");
    assert_eq!(env.indexed.len(), 6);
    assert_no_violations(&env);
}

#[test]
fn stop_comes_before_every_gate() {
    let (mut env, mut a, d) = sibling_in(2, "taken", |_, _| {});
    env.stop = true;
    env.lease = false;
    env.own_owed = true;
    stepped(step(&mut a, &mut env));
    assert!(!env.dirs[&d].held);
}

#[test]
fn a_latched_service_lets_go_of_everything_being_adopted_and_queued_at_once() {
    let mut env = Fake::new();
    let d1 = env.add(1, 3);
    let d2 = env.add(2, 1);
    let d3 = env.add(3, 1);
    env.d(&d3).live = true;
    let mut a = adopter();
    step_until(&mut a, &mut env, &d1, "uploading");
    env.latched = true;
    env.lease = false;
    let s = stepped(step(&mut a, &mut env));
    assert_eq!(
        s.action,
        Action::ReleasedAll {
            released: 1,
            dropped: 1
        }
    );
    assert_eq!(state(&a, &d1), SiblingState::ReleasedOnLatch);
    assert_eq!(state(&a, &d2), SiblingState::ReleasedOnLatch);
    assert_eq!(
        state(&a, &d3).name(),
        "probed-live",
        "live siblings are not ours to let go"
    );
    assert!(!env.dirs[&d1].held);
    assert_eq!(env.dirs[&d1].ready.len(), 3);
    assert_eq!(step(&mut a, &mut env), StepOutcome::Paused(Pause::Latched));
    assert_no_violations(&env);
}

// ---------------------------------------------------------------------------
// The proptest: random scripts of environment results
// ---------------------------------------------------------------------------

mod random_scripts {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Kind {
        Dead,
        Live,
        DiesLater,
        Marked,
        NotOurs,
    }

    #[derive(Debug, Clone)]
    struct DirSpec {
        kind: Kind,
        /// (corrupt, poison) per pack.
        packs: Vec<(bool, bool)>,
        unknown_file: bool,
        nested_live: bool,
        open_files: usize,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Step,
        Cycle,
        ToggleLease,
        ToggleFlush,
        ToggleOwnOwed,
        ToggleOwnUploaded,
        IndexOwed,
        Advance(u8),
        Kill(usize),
        AddLater(usize),
        Stop,
        Latch,
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            4 => Just(Kind::Dead),
            1 => Just(Kind::Live),
            2 => Just(Kind::DiesLater),
            1 => Just(Kind::Marked),
            1 => Just(Kind::NotOurs),
        ]
    }

    fn dir_spec() -> impl Strategy<Value = DirSpec> {
        (
            kind(),
            prop::collection::vec((prop::bool::weighted(0.1), prop::bool::weighted(0.1)), 0..7),
            prop::bool::weighted(0.15),
            prop::bool::weighted(0.15),
            0usize..3,
        )
            .prop_map(
                |(kind, packs, unknown_file, nested_live, open_files)| DirSpec {
                    kind,
                    packs,
                    unknown_file,
                    nested_live,
                    open_files,
                },
            )
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            10 => Just(Op::Step),
            6 => Just(Op::Cycle),
            2 => Just(Op::ToggleLease),
            2 => Just(Op::ToggleFlush),
            1 => Just(Op::ToggleOwnOwed),
            1 => Just(Op::ToggleOwnUploaded),
            3 => Just(Op::IndexOwed),
            3 => any::<u8>().prop_map(Op::Advance),
            1 => (0usize..6).prop_map(Op::Kill),
            1 => (0usize..6).prop_map(Op::AddLater),
            1 => Just(Op::Stop),
            1 => Just(Op::Latch),
        ]
    }

    fn build(specs: &[DirSpec]) -> (Fake, Vec<PathBuf>) {
        let mut env = Fake::new();
        env.max_round_packs = 3;
        env.max_round_bytes = 2500;
        let mut dirs = Vec::new();
        for (n, spec) in specs.iter().enumerate() {
            let d = env.add(n as u32 + 1, spec.packs.len() as u32);
            let fd = env.d(&d);
            for (k, &(corrupt, poison)) in spec.packs.iter().enumerate() {
                fd.ready[k].corrupt = corrupt;
                fd.ready[k].poison = poison;
            }
            if spec.unknown_file {
                fd.unknown_files.push("core.1234".into());
            }
            fd.nested_live = spec.nested_live;
            fd.open_files = spec.open_files;
            match spec.kind {
                Kind::Live | Kind::DiesLater => fd.live = true,
                Kind::Marked => fd.marked = Some("marked by another adopter".into()),
                Kind::NotOurs => fd.not_ours = Some("another user's (EACCES)".into()),
                Kind::Dead => {}
            }
            dirs.push(d);
        }
        (env, dirs)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

        #[test]
        fn random_scripts_never_break_the_adoption_invariants(
            specs in prop::collection::vec(dir_spec(), 1..6),
            ops in prop::collection::vec(op(), 0..150),
            tape in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let (mut env, dirs) = build(&specs);
            // Siblings added later start absent.
            let mut hidden: BTreeSet<usize> = BTreeSet::new();
            for (i, spec) in specs.iter().enumerate() {
                if i % 3 == 2 && matches!(spec.kind, Kind::Dead) {
                    env.d(&dirs[i]).exists = false;
                    hidden.insert(i);
                }
            }
            env.tape = tape.into();
            let mut a = Adopter::new(
                AdoptionConfig { max_round_packs: 3, max_round_bytes: 2500, ..AdoptionConfig::default() },
                PathBuf::from(KEY),
                PathBuf::from(OWN),
            );
            for op in ops {
                match op {
                    Op::Step => { step(&mut a, &mut env); }
                    Op::Cycle => { block_on(a.run_cycle(&mut env, Fake::budget)); }
                    Op::ToggleLease => env.lease = !env.lease,
                    Op::ToggleFlush => env.flush_waiting = !env.flush_waiting,
                    Op::ToggleOwnOwed => env.own_owed = !env.own_owed,
                    Op::ToggleOwnUploaded => env.own_uploaded = !env.own_uploaded,
                    Op::IndexOwed => env.index_owed(),
                    Op::Advance(s) => env.advance(Duration::from_secs(u64::from(s))),
                    Op::Kill(i) => {
                        if let Some(d) = dirs.get(i) {
                            if matches!(specs[i].kind, Kind::DiesLater) {
                                env.d(d).live = false;
                            }
                        }
                    }
                    Op::AddLater(i) => {
                        if hidden.remove(&i) {
                            env.d(&dirs[i]).exists = true;
                        }
                    }
                    Op::Stop => env.stop = true,
                    Op::Latch => env.latched = true,
                }
                // Live siblings are never held by us, whatever happens.
                for (i, d) in dirs.iter().enumerate() {
                    if env.dirs[d].live {
                        prop_assert!(!env.dirs[d].held, "live sibling {i} held");
                    }
                }
                prop_assert!(env.dirs.values().filter(|d| d.held).count() <= 1);
            }
            prop_assert!(env.violations.is_empty(), "violations: {:#?}", env.violations);

            // Healing: every signal healthy, every result healthy, time moves.
            let stopped = env.stop || env.latched;
            env.tape.clear();
            env.lease = true;
            env.flush_waiting = false;
            env.own_owed = false;
            env.own_uploaded = true;
            for i in std::mem::take(&mut hidden) {
                env.d(&dirs[i]).exists = true;
            }
            for _ in 0..200 {
                env.index_owed();
                block_on(a.run_cycle(&mut env, Fake::budget));
                env.advance(Duration::from_secs(31));
            }
            env.index_owed();
            prop_assert!(env.violations.is_empty(), "violations after healing: {:#?}", env.violations);
            prop_assert!(env.dirs.values().all(|d| !d.held), "a lock still held at the end");

            // No pack is lost: each is indexed or still a file in its directory.
            for (d, fd) in &env.dirs {
                for id in &fd.all_ids {
                    let indexed = env.indexed.contains(id);
                    let present = fd.exists
                        && (fd.ready.iter().any(|p| &p.pack.id.to_hex() == id) || fd.quarantined.contains(id));
                    prop_assert!(indexed != present, "pack {id} of {}: indexed {indexed}, present {present}", d.display());
                }
            }
            if stopped {
                return Ok(());
            }
            // Everything adoptable was adopted; everything else left as it is.
            for (i, d) in dirs.iter().enumerate() {
                let spec = &specs[i];
                let fd = &env.dirs[d];
                // A removed directory's record is forgotten at the next listing.
                let st = a.sibling(d).map_or(SiblingState::Drained { removed: true }, |s| s.state.clone());
                let adoptable = match spec.kind {
                    Kind::Dead => true,
                    Kind::DiesLater => !fd.live,
                    _ => false,
                };
                if !adoptable {
                    prop_assert!(fd.exists);
                    prop_assert_eq!(fd.ready.len() + fd.quarantined.len(), spec.packs.len());
                    prop_assert!(!st.is_owed() || matches!(spec.kind, Kind::DiesLater), "{}: {st}", d.display());
                    continue;
                }
                let must_block = spec.unknown_file || spec.packs.iter().any(|&(c, p)| c || p);
                if must_block {
                    prop_assert_eq!(st.name(), "blocked");
                    prop_assert!(fd.exists);
                    // The rest went up.
                    let left = spec.packs.iter().filter(|&&(c, p)| c || p).count();
                    prop_assert_eq!(fd.ready.len() + fd.quarantined.len(), left);
                } else {
                    prop_assert_eq!(&st, &SiblingState::Drained { removed: !spec.nested_live });
                    prop_assert_eq!(fd.exists, spec.nested_live);
                    prop_assert!(fd.ready.is_empty());
                }
            }
            prop_assert!(!a.snapshot().adoption_owed || dirs.iter().any(|d| env.dirs[d].live));
        }
    }
}

#[test]
fn the_snapshot_names_the_sibling_being_adopted_and_counts_its_packs() {
    let (mut env, mut a, d) = sibling_in(3, "uploading", |env, _| env.max_round_packs = 2);
    let snap = a.snapshot();
    assert_eq!(snap.adopting.as_deref(), Some(d.as_path()));
    assert!(snap.adoption_owed);
    stepped(step(&mut a, &mut env));
    assert_eq!(a.snapshot().adopted_packs, 2);
    assert_eq!(a.sibling(&d).unwrap().uploaded_packs, 2);
    run_to_pause(&mut a, &mut env);
    let snap = a.snapshot();
    assert_eq!(snap.adopting, None);
    assert_eq!((snap.adopted_spools, snap.adopted_packs), (1, 3));
    assert_eq!(a.next_due(), Some(env.now() + Duration::from_secs(30)));
}

#[test]
fn each_sibling_state_is_terminal_holds_the_lock_or_is_owed_as_spec_7_3_says() {
    // (state, terminal, holds the lock, owed): the terminal states are the
    // ones this adopter is done with; the let-go ones stay owed (kept
    // whole for a successor); only Taken and Uploading hold the lock.
    let table = [
        (SiblingState::Unprobed, false, false, true),
        (
            SiblingState::ProbedLive { recheck_at: None },
            false,
            false,
            false,
        ),
        (
            SiblingState::MarkedBlocked {
                reason: "x".into(),
                recheck_at: None,
            },
            false,
            false,
            false,
        ),
        (SiblingState::Dead, false, false, true),
        (SiblingState::Queued, false, false, true),
        (SiblingState::Taken, false, true, true),
        (
            SiblingState::Uploading {
                remaining: VecDeque::new(),
                doomed: None,
            },
            false,
            true,
            true,
        ),
        (SiblingState::Drained { removed: true }, true, false, false),
        (
            SiblingState::Blocked { reason: "x".into() },
            true,
            false,
            false,
        ),
        (SiblingState::ReleasedOnCancel, true, false, true),
        (SiblingState::ReleasedOnLatch, true, false, true),
    ];
    for (state, terminal, holds, owed) in table {
        // Logs and `last_error` print the state by its snapshot name.
        assert_eq!(state.to_string(), state.name());
        assert_eq!(
            (state.is_terminal(), state.holds_lock(), state.is_owed()),
            (terminal, holds, owed),
            "{}",
            state.name()
        );
    }
}
