//! Progress of long work (`recover`, `verify`) on stderr.
//!
//! On a terminal (stderr is a TTY, and no `--json`): an indicatif bar.
//! Otherwise plain lines, so logs and CI keep a record and scripts that
//! read `--json` from stdout stay machine-clean: one when the work starts,
//! one every [`PLAIN_INTERVAL`] while it runs, one when it ends.
//! `--no-progress` turns both off.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a plain progress line is printed while work runs.
pub const PLAIN_INTERVAL: Duration = Duration::from_secs(5);

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An indicatif bar on stderr.
    Bar,
    /// Plain periodic lines on stderr.
    Plain,
    /// Nothing.
    Off,
}

impl Mode {
    /// The bar on a terminal without `--json`, plain lines otherwise, or
    /// nothing with `--no-progress`.
    pub fn pick(json: bool, no_progress: bool) -> Mode {
        if no_progress {
            Mode::Off
        } else if !json && std::io::stderr().is_terminal() {
            Mode::Bar
        } else {
            Mode::Plain
        }
    }
}

/// One piece of long work counted in packs (with bytes alongside).
pub struct Progress {
    what: String,
    mode: Mode,
    bar: Option<ProgressBar>,
    plain: Mutex<Plain>,
}

struct Plain {
    total: u64,
    done: u64,
    bytes: u64,
    last: Instant,
}

impl Progress {
    /// Starts showing progress of `what` (e.g. `verify /var/lib/spool/...`)
    /// over `total` packs (`None`: known only after a listing, given to
    /// [`Progress::set_total`]; the first plain line waits for it).
    pub fn start(what: impl Into<String>, total: Option<u64>, mode: Mode) -> Progress {
        let what = what.into();
        let known = total.is_some();
        let total = total.unwrap_or(0);
        let bar = (mode == Mode::Bar).then(|| {
            // Hidden until the total is known (an empty bar reads as done).
            let target = if known {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            };
            let bar = ProgressBar::with_draw_target(Some(total), target);
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} packs, {msg} ({elapsed}, eta {eta})",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar.set_prefix(what.clone());
            bar.set_message("0 B");
            bar
        });
        if mode == Mode::Plain && known {
            eprintln!("{what}: 0/{total} packs");
        }
        Progress {
            what,
            mode,
            bar,
            plain: Mutex::new(Plain {
                total,
                done: 0,
                bytes: 0,
                last: Instant::now(),
            }),
        }
    }

    /// Sets the total (when it is known only after a listing); call it
    /// once.
    pub fn set_total(&self, total: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        self.state().total = total;
        if self.mode == Mode::Plain {
            eprintln!("{}: 0/{total} packs", self.what);
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Plain> {
        self.plain.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets how far the work is: `done` packs, `bytes` bytes.
    pub fn set(&self, done: u64, bytes: u64) {
        let mut st = self.state();
        st.done = done;
        st.bytes = bytes;
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            bar.set_message(indicatif::BinaryBytes(bytes).to_string());
        }
        if self.mode == Mode::Plain && st.last.elapsed() >= PLAIN_INTERVAL {
            st.last = Instant::now();
            eprintln!(
                "{}: {}/{} packs, {}",
                self.what,
                st.done,
                st.total,
                indicatif::BinaryBytes(st.bytes)
            );
        }
    }

    /// Ends the display with a last line saying `summary`.
    pub fn finish(&self, summary: &str) {
        let st = self.state();
        match self.mode {
            Mode::Bar => {
                if let Some(bar) = &self.bar {
                    bar.finish_and_clear();
                }
            }
            Mode::Plain => eprintln!(
                "{}: {}/{} packs, {}: {summary}",
                self.what,
                st.done,
                st.total,
                indicatif::BinaryBytes(st.bytes)
            ),
            Mode::Off => {}
        }
    }
}
