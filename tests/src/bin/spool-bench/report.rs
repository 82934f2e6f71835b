//! Figures, the per-group tables, and their splice into BENCHMARKS.md.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Groups in report order: (key, heading).
pub const GROUPS: &[(&str, &str)] = &[
    ("core", "spool-core"),
    ("upload", "spool-upload"),
    ("catalog", "spool-catalog"),
    ("service", "spool-service"),
    ("s3s", "spool run --once against s3s-fs"),
    ("backlog", "A backlog of 100 000 packs"),
    ("reindex", "spool reindex of 100 000 bundled packs"),
    ("python", "spool-py"),
];

/// One measured figure, with its baseline when it has one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Figure {
    /// `core`, `upload`, `catalog` or `service`.
    pub group: String,
    /// What was measured.
    pub name: String,
    /// Our figure.
    pub ours: f64,
    /// The baseline's figure, measured side by side.
    pub baseline: Option<f64>,
    /// What the baseline is.
    pub baseline_name: String,
    /// Unit of both figures.
    pub unit: String,
    /// Whether a larger figure is better (throughput) or worse (latency,
    /// memory).
    pub higher_is_better: bool,
    /// The goal for the ratio (ours relative to the baseline, ≥ 1 means at
    /// least as good).
    pub goal: Option<f64>,
    /// Sizes and settings.
    pub detail: String,
    /// Run size (`Full`, `Quick`, `Smoke`).
    pub size: String,
}

impl Figure {
    /// A figure of `group` measured in `unit`, higher is better, no
    /// baseline or goal yet.
    pub fn new(
        ctx: &crate::Ctx,
        group: &str,
        name: impl Into<String>,
        unit: &str,
        detail: impl Into<String>,
    ) -> Figure {
        Figure {
            group: group.into(),
            name: name.into(),
            ours: 0.0,
            baseline: None,
            baseline_name: String::new(),
            unit: unit.into(),
            higher_is_better: true,
            goal: None,
            detail: detail.into(),
            size: format!("{:?}", ctx.size),
        }
    }

    /// Our value.
    pub fn ours(self, ours: f64) -> Figure {
        Figure { ours, ..self }
    }

    /// The baseline and its value.
    pub fn vs(self, name: &str, value: f64) -> Figure {
        Figure {
            baseline: Some(value),
            baseline_name: name.into(),
            ..self
        }
    }

    /// The goal for the ratio.
    pub fn goal(self, goal: f64) -> Figure {
        Figure {
            goal: Some(goal),
            ..self
        }
    }

    /// A smaller value is better (latency, memory).
    pub fn lower_is_better(self) -> Figure {
        Figure {
            higher_is_better: false,
            ..self
        }
    }

    /// How good ours is relative to the baseline (≥ 1: as good or better).
    pub fn ratio(&self) -> Option<f64> {
        let b = self.baseline?;
        if self.ours <= 0.0 || b <= 0.0 {
            return None;
        }
        Some(if self.higher_is_better {
            self.ours / b
        } else {
            b / self.ours
        })
    }

    fn verdict(&self) -> &'static str {
        match (self.ratio(), self.goal) {
            (Some(r), Some(g)) if r >= g => "met",
            (Some(_), Some(_)) => "**missed**",
            _ => "",
        }
    }

    /// One line for the terminal.
    pub fn line(&self) -> String {
        let base = match self.baseline {
            Some(b) => format!("  {}: {} {}", self.baseline_name, fmt(b), self.unit),
            None => String::new(),
        };
        let ratio = match self.ratio() {
            Some(r) => format!("  ratio {r:.2}"),
            None => String::new(),
        };
        let goal = match self.goal {
            Some(g) => format!(" (goal ≥ {g}) {}", self.verdict().replace('*', "")),
            None => String::new(),
        };
        format!(
            "  {:<48} ours {} {}{base}{ratio}{goal}",
            self.name,
            fmt(self.ours),
            self.unit
        )
    }
}

fn fmt(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// The markdown table of one group's figures.
pub fn table(figs: &[&Figure]) -> String {
    let mut s = String::from(
        "| figure | ours | baseline | ratio | goal | |\n|---|---:|---|---:|---:|---|\n",
    );
    for f in figs {
        let base = match f.baseline {
            Some(b) => format!("{}: {} {}", f.baseline_name, fmt(b), f.unit),
            None => "—".into(),
        };
        let ratio = f.ratio().map(|r| format!("{r:.2}")).unwrap_or("—".into());
        let goal = f.goal.map(|g| format!("≥ {g}")).unwrap_or_default();
        s.push_str(&format!(
            "| {} <br><sub>{}</sub> | {} {} | {} | {} | {} | {} |\n",
            f.name,
            f.detail,
            fmt(f.ours),
            f.unit,
            base,
            ratio,
            goal,
            f.verdict()
        ));
    }
    s
}

fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let sha_ni = read("/proc/cpuinfo").contains(" sha_ni");
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    let root = crate::workspace_mount();
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "- measured: {date}\n- CPU: {cpu}, {cores} cores (`nproc` = {cores}), SHA extensions: {}\n- memory: {} GiB\n- kernel: Linux {kernel}\n- disk (scratch data and spools): {root}\n",
        if sha_ni { "yes (sha_ni)" } else { "no" },
        mem_kib / (1 << 20),
    )
}

/// `report --results FILE [--write BENCHMARKS.md]`: prints the markdown
/// tables; with `--write`, replaces each measured group's section (between
/// `<!-- bench:GROUP:begin -->` and `<!-- bench:GROUP:end -->`) and, when
/// every group was measured, the machine section; a run of some groups
/// only (`cargo xtask bench python`) leaves the machine section to the
/// other groups' run and puts its own machine lines under each of its
/// tables.
pub fn main(args: &[String]) -> Result<()> {
    let mut results = None;
    let mut write = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--results" => results = it.next().map(PathBuf::from),
            "--write" => write = it.next().map(PathBuf::from),
            other => bail!("unknown argument {other}"),
        }
    }
    let results = results.context("--results FILE is required")?;
    let text = std::fs::read_to_string(&results)
        .with_context(|| format!("reading {}", results.display()))?;
    let figs: Vec<Figure> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .with_context(|| format!("parsing {}", results.display()))?;
    let mut sections = BTreeMap::new();
    for (key, heading) in GROUPS {
        let mine: Vec<&Figure> = figs.iter().filter(|f| f.group == *key).collect();
        if mine.is_empty() {
            continue;
        }
        let t = table(&mine);
        println!("### {heading}\n\n{t}");
        sections.insert(key.to_string(), t);
    }
    let m = machine();
    println!("{m}");
    if GROUPS.iter().all(|(key, _)| sections.contains_key(*key)) {
        sections.insert("machine".into(), m);
    } else {
        for body in sections.values_mut() {
            body.push_str(&format!("\nThis group measured on its own:\n\n{m}"));
        }
    }
    if let Some(path) = write {
        let mut doc = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for (key, body) in &sections {
            let begin = format!("<!-- bench:{key}:begin -->\n");
            let end = format!("<!-- bench:{key}:end -->");
            let (Some(b), Some(e)) = (doc.find(&begin), doc.find(&end)) else {
                bail!(
                    "{} has no `{}`…`{}` markers for the {key} figures",
                    path.display(),
                    begin.trim(),
                    end
                );
            };
            doc.replace_range(b + begin.len()..e, body);
        }
        std::fs::write(&path, doc).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("spool-bench: figures written into {}", path.display());
    }
    Ok(())
}
