//! Asking a daemon for its open bundle: a real metrics server, a port
//! nobody serves, a stranger's page, and peers that stall or drip.

use std::net::TcpListener;
use std::time::Duration;

use spool_service::metrics::{server::Server, Published};
use spool_service::{OpenBundle as Gauges, Snapshot};

use super::*;

fn daemon_with(open: Gauges) -> Server {
    let published = Published::new();
    let snapshot = Snapshot {
        open_bundle: open,
        ..Snapshot::default()
    };
    published.publish(&snapshot, None);
    Server::start("127.0.0.1:0".parse().unwrap(), published).unwrap()
}

#[test]
fn the_open_bundle_is_read_from_a_running_daemons_metrics() {
    let server = daemon_with(Gauges {
        packs: 37,
        bytes: 37 * 16 * 1024,
        age: Duration::from_millis(640),
        since: None,
    });
    let answer = ask(server.addr);
    assert_eq!(
        answer,
        Daemon::Answered {
            addr: server.addr.to_string(),
            open_bundle: OpenBundleGauges {
                packs: 37,
                bytes: 37 * 16 * 1024,
                age_ms: 640,
            },
        }
    );
    assert!(
        answer
            .text()
            .starts_with("open bundle of 37 pack(s), 592.00 KiB, the oldest waiting 0.64 s"),
        "{}",
        answer.text()
    );
    let none = ask(daemon_with(Gauges::default()).addr);
    assert!(none.text().starts_with("no open bundle"), "{}", none.text());
}

#[test]
fn a_port_nobody_serves_or_a_page_without_the_gauges_is_no_answer() {
    let free = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap();
    drop(free);
    assert!(matches!(ask(addr), Daemon::NoAnswer { .. }));

    // Something else answers HTTP at the address.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = other.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in other.incoming() {
            let mut s = s.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\nsomething_else 1\n");
        }
    });
    match ask(addr) {
        Daemon::NoAnswer { why, .. } => {
            assert!(why.contains("spool_open_bundle_packs"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

mod serial {
    use super::*;

    /// [`ask`], asserted to return within [`ASK_TIMEOUT`] and a second.
    fn ask_in_time(addr: SocketAddr) -> Daemon {
        let t = Instant::now();
        let answer = ask(addr);
        assert!(
            t.elapsed() < ASK_TIMEOUT + Duration::from_secs(1),
            "{:?}",
            t.elapsed()
        );
        answer
    }

    /// A daemon that accepts and never answers, or drips its answer,
    /// costs `spool status` at most [`ASK_TIMEOUT`] (bound with a second's
    /// margin).
    #[test]
    fn a_daemon_that_never_answers_or_drips_costs_at_most_the_timeout() {
        let mute = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = mute.local_addr().unwrap();
        let held = std::thread::spawn(move || {
            let (s, _) = mute.accept().unwrap();
            std::thread::sleep(Duration::from_secs(2));
            drop(s);
        });
        let answer = ask_in_time(addr);
        assert!(
            matches!(&answer, Daemon::NoAnswer { why, .. } if why.contains("no answer within")),
            "{answer:?}"
        );

        let drip = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = drip.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = drip.accept().unwrap();
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
            for _ in 0..40 {
                std::thread::sleep(Duration::from_millis(100));
                if s.write_all(b"# waiting\n").is_err() {
                    break;
                }
            }
        });
        let answer = ask_in_time(addr);
        assert!(matches!(answer, Daemon::NoAnswer { .. }), "{answer:?}");
        held.join().unwrap();
    }
}
