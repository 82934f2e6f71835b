//! `fault-proxy`: the fault proxy ([`spool_tests::proxy`]) as a process of
//! its own, for `cargo xtask torture --faults` (xtask links no spool crate
//! and no async runtime, so it drives this over pipes).
//!
//! ```text
//! fault-proxy UPSTREAM_ADDR        # e.g. 127.0.0.1:9123
//! ```
//!
//! It prints `listening 127.0.0.1:PORT` on stdout once it accepts, then one
//! line per injected fault as it happens (`fault KIND METHOD PATH`, KIND one
//! of `stalled`, `stalled-response`, `cut-request`, `cut-response`,
//! `responded`). It reads commands on stdin, one per line, and answers each
//! with `ok` (or `error: WHY`):
//! - `clear`: drop every rule and stop refusing;
//! - `refuse`: stop listening and cut every connection (`clear` listens
//!   again on the same port);
//! - `rule ACTION [ARG] [method M] [path P]`: add a rule for every matching
//!   request, ACTION one of `stall`, `delay MS`, `cut-request BYTES`,
//!   `stall-request BYTES`, `cut-response BYTES`, `stall-response BYTES`,
//!   `status CODE`.
//!
//! It exits when stdin closes (its parent went away), so it never outlives
//! the torture.

#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spool_tests::proxy::{EventKind, Proxy, ProxyAction, ProxyRule};

fn main() {
    let Some(upstream) = std::env::args().nth(1) else {
        eprintln!("usage: fault-proxy UPSTREAM_ADDR (e.g. 127.0.0.1:9123)");
        std::process::exit(2);
    };
    let upstream = match upstream.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fault-proxy: {upstream} is not an IP:PORT address: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let proxy = match rt.block_on(Proxy::start(upstream)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("fault-proxy: cannot listen on loopback: {e}");
            std::process::exit(1);
        }
    };
    let out = Arc::new(Mutex::new(std::io::stdout()));
    say(&out, &format!("listening {}", proxy.addr()));
    {
        let out = Arc::clone(&out);
        proxy.on_event(move |e| {
            let kind = match e.kind {
                EventKind::Stalled => "stalled",
                EventKind::StalledResponse => "stalled-response",
                EventKind::CutRequest => "cut-request",
                EventKind::CutResponse => "cut-response",
                EventKind::Responded => "responded",
                _ => return,
            };
            let method = if e.method.is_empty() { "-" } else { &e.method };
            let path = if e.path.is_empty() { "-" } else { &e.path };
            say(&out, &format!("fault {kind} {method} {path}"));
        });
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let answer = match command(&proxy, line.trim()) {
            Ok(()) => "ok".to_string(),
            Err(why) => format!("error: {why}"),
        };
        say(&out, &answer);
    }
    drop(proxy);
    rt.shutdown_timeout(Duration::from_millis(100));
}

fn say(out: &Mutex<std::io::Stdout>, line: &str) {
    let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// Applies one stdin command (see the module docs).
fn command(proxy: &Proxy, line: &str) -> Result<(), String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.first().copied() {
        Some("clear") => {
            proxy.clear_rules();
            proxy.set_refusing(false);
            Ok(())
        }
        Some("refuse") => {
            proxy.set_refusing(true);
            Ok(())
        }
        Some("rule") => {
            proxy.add_rule(rule(&words[1..])?);
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other}")),
        None => Ok(()),
    }
}

/// `ACTION [ARG] [method M] [path P]` as a rule.
fn rule(words: &[&str]) -> Result<ProxyRule, String> {
    let arg = |i: usize| -> Result<u64, String> {
        let w = words.get(i).ok_or(format!("{} needs a number", words[0]))?;
        w.parse()
            .map_err(|_| format!("{}: {w} is not a number", words[0]))
    };
    let (action, rest) = match words.first().copied() {
        Some("stall") => (ProxyAction::Stall, 1),
        Some("delay") => (ProxyAction::Delay(Duration::from_millis(arg(1)?)), 2),
        Some("cut-request") => (ProxyAction::CutRequestAfter(arg(1)? as usize), 2),
        Some("stall-request") => (ProxyAction::StallRequestAfter(arg(1)? as usize), 2),
        Some("cut-response") => (ProxyAction::CutResponseAfter(arg(1)? as usize), 2),
        Some("stall-response") => (ProxyAction::StallResponseAfter(arg(1)? as usize), 2),
        Some("status") => (ProxyAction::Respond(arg(1)? as u16), 2),
        Some(other) => return Err(format!("unknown action {other}")),
        None => return Err("rule needs an action".into()),
    };
    let mut rule = ProxyRule::new(action);
    let mut it = words[rest..].iter();
    while let Some(w) = it.next() {
        let v = it.next().ok_or(format!("{w} needs a value"))?;
        rule = match *w {
            "method" => rule.method(v),
            "path" => rule.path_contains(v),
            other => return Err(format!("unknown rule option {other}")),
        };
    }
    Ok(rule)
}
