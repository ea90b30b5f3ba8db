//! Tests of batched datagram I/O over real loopback sockets.
//!
//! Most bodies take `batching` and run twice (`<name>::batched` and
//! `<name>::portable`), so the Linux fast path and the portable path meet the
//! same expectations. IPv6 cases are skipped when `::1` cannot be bound.
//! Every wait is a bounded loop of short sleeps.

use std::io::{self, IoSliceMut};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::thread::sleep;
use std::time::{Duration, Instant};

use socket2::SockRef;

use super::{RecvMeta, SysStats, Transmit, UdpState};

/// How long any one wait may take before the test gives up.
const DEADLINE: Duration = Duration::from_secs(5);
/// Pause between polls of a non-blocking socket.
const POLL: Duration = Duration::from_millis(1);
/// One datagram's receive buffer (sys knows nothing of KCP, so not the
/// crate's `DATAGRAM_BUF`).
const DATAGRAM_BUF: usize = 1500;

/// Loopback address families under test.
#[derive(Clone, Copy, Debug)]
enum Family {
    V4,
    V6,
}

const FAMILIES: [Family; 2] = [Family::V4, Family::V6];

/// A bound non-blocking socket and its state.
struct Endpoint {
    sock: UdpSocket,
    state: UdpState,
}

impl Endpoint {
    /// Binds to an ephemeral loopback port; `None` when the family is
    /// unavailable (no IPv6 on this host).
    fn bind(family: Family, batching: bool) -> Option<Self> {
        let addr: SocketAddr = match family {
            Family::V4 => (Ipv4Addr::LOCALHOST, 0).into(),
            Family::V6 => (Ipv6Addr::LOCALHOST, 0).into(),
        };
        match UdpSocket::bind(addr) {
            Ok(sock) => Some(Self::from_socket(sock, batching)),
            Err(e) => {
                eprintln!("skipping {family:?}: cannot bind {addr}: {e}");
                None
            }
        }
    }

    fn from_socket(sock: UdpSocket, batching: bool) -> Self {
        // Room for a whole test round even where rmem_max is small.
        let _ = SockRef::from(&sock).set_recv_buffer_size(1 << 21);
        let state = UdpState::new(SockRef::from(&sock), batching).unwrap();
        Self { sock, state }
    }

    fn addr(&self) -> SocketAddr {
        self.sock.local_addr().unwrap()
    }

    fn send(&self, transmits: &[Transmit<'_>]) -> io::Result<usize> {
        self.state.send(SockRef::from(&self.sock), transmits)
    }

    fn recv(&self, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> io::Result<usize> {
        self.state.recv(SockRef::from(&self.sock), bufs, meta)
    }

    fn stats(&self) -> SysStats {
        self.state.stats()
    }

    /// Sends every transmit, skipping ones that fail; returns the indices
    /// and kinds of the failures.
    fn send_all(&self, transmits: &[Transmit<'_>]) -> Vec<(usize, io::ErrorKind)> {
        let start = Instant::now();
        let mut next = 0;
        let mut failed = Vec::new();
        while next < transmits.len() {
            assert!(start.elapsed() < DEADLINE, "send stuck at {next}");
            match self.send(&transmits[next..]) {
                Ok(n) => {
                    assert!(n >= 1 && next + n <= transmits.len(), "bad count {n}");
                    next += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => sleep(POLL),
                Err(e) => {
                    failed.push((next, e.kind()));
                    next += 1;
                }
            }
        }
        failed
    }

    /// Sends every transmit, asserting none fails.
    fn send_all_ok(&self, transmits: &[Transmit<'_>]) {
        let failed = self.send_all(transmits);
        assert!(failed.is_empty(), "{failed:?}");
    }

    /// Receives until `count` datagrams arrived or the deadline passed, with
    /// buffers of `buf_size` bytes (default: room for a full GRO run).
    fn recv_datagrams(&self, count: usize, buf_size: Option<usize>) -> Received {
        let size = buf_size.unwrap_or(self.state.gro_segments() * DATAGRAM_BUF);
        let mut storage = vec![vec![0u8; size]; 8];
        let mut meta = [RecvMeta::default(); 8];
        let mut got = Received::default();
        let start = Instant::now();
        while got.datagrams.len() < count && start.elapsed() < DEADLINE {
            let mut bufs: Vec<IoSliceMut<'_>> =
                storage.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            match self.recv(&mut bufs, &mut meta) {
                Ok(n) => {
                    assert!(n >= 1 && n <= meta.len());
                    drop(bufs);
                    for (m, buf) in meta.iter().zip(&storage).take(n) {
                        assert!(m.stride >= 1 && m.len <= buf.len(), "{m:?}");
                        got.metas.push(*m);
                        for d in m.datagrams(buf) {
                            got.datagrams.push((m.addr, d.to_vec()));
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => sleep(POLL),
                Err(e) => panic!("receive failed: {e}"),
            }
        }
        got
    }

    /// Polls until a receive returns something other than `WouldBlock`.
    fn recv_until_not_empty(&self) -> io::Result<usize> {
        let mut buf = vec![0u8; DATAGRAM_BUF];
        let mut meta = [RecvMeta::default()];
        let start = Instant::now();
        loop {
            match self.recv(&mut [IoSliceMut::new(&mut buf)], &mut meta) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && start.elapsed() < DEADLINE => {
                    sleep(POLL);
                }
                other => return other,
            }
        }
    }
}

/// What a receiver collected.
#[derive(Default)]
struct Received {
    /// Sender and bytes of every datagram, split by stride, in order.
    datagrams: Vec<(SocketAddr, Vec<u8>)>,
    /// Every message as reported.
    metas: Vec<RecvMeta>,
}

impl Received {
    /// Messages that held more than one datagram.
    fn coalesced(&self) -> usize {
        self.metas.iter().filter(|m| m.len > m.stride).count()
    }
}

/// Recognisable bytes for datagram `id`.
/// A sender and a receiver of the same family, or `None` (the caller skips)
/// where the family is not available.
fn pair(family: Family, batching: bool) -> Option<(Endpoint, Endpoint)> {
    match (
        Endpoint::bind(family, batching),
        Endpoint::bind(family, batching),
    ) {
        (Some(tx), Some(rx)) => Some((tx, rx)),
        _ => None,
    }
}

fn payload(id: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (id * 131 + j * 7 + (j >> 8)) as u8)
        .collect()
}

/// Both sides can use the Linux offloads (false elsewhere or on old kernels).
fn offloads(sender: &Endpoint, receiver: &Endpoint) -> bool {
    sender.state.max_gso_segments() > 1 && receiver.state.gro_segments() > 1
}

/// Runs a body taking `batching` once with the fast path and once without.
macro_rules! both_modes {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn batched() {
                super::$name(true);
            }
            #[test]
            fn portable() {
                super::$name(false);
            }
        }
    )*};
}

both_modes!(
    mixed_sizes_arrive_exactly,
    gso_runs_split_for_any_receiver,
    truncated_datagrams_are_dropped_and_counted,
    bad_destination_skips_one_transmit,
    closed_port_is_a_counted_error,
    empty_socket_would_block,
    dual_stack_reports_plain_ipv4,
);

/// Many datagrams of mixed sizes, in batches, arrive whole, in order, from
/// the sender's address.
fn mixed_sizes_arrive_exactly(batching: bool) {
    const SIZES: [usize; 9] = [1, 7, 100, 512, 999, 1200, 1400, 1472, 33];
    const ROUND: usize = 32;
    for family in FAMILIES {
        let Some((tx, rx)) = pair(family, batching) else {
            continue;
        };
        let payloads: Vec<Vec<u8>> = (0..200)
            .map(|i| payload(i, SIZES[i % SIZES.len()]))
            .collect();
        for (round, chunk) in payloads.chunks(ROUND).enumerate() {
            let transmits: Vec<Transmit<'_>> = chunk
                .iter()
                .map(|p| Transmit {
                    destination: rx.addr(),
                    contents: p,
                    segment_size: None,
                })
                .collect();
            tx.send_all_ok(&transmits);
            let got = rx.recv_datagrams(chunk.len(), None);
            let expected: Vec<(SocketAddr, Vec<u8>)> =
                chunk.iter().map(|p| (tx.addr(), p.clone())).collect();
            assert_eq!(got.datagrams, expected, "{family:?} round {round}");
        }
        let (sent, received) = (tx.stats(), rx.stats());
        assert_eq!(sent.datagrams_sent, 200);
        assert_eq!(received.datagrams_received, 200);
        assert_eq!(sent.send_errors + received.recv_errors, 0);
        if batching && cfg!(target_os = "linux") {
            // sendmmsg: one call per round of 32, not one per datagram.
            assert!(sent.send_syscalls < 200 / 4, "{sent:?}");
        } else {
            assert_eq!(sent.send_syscalls, 200);
        }
    }
}

/// GSO runs (with and without offloads on either side) arrive as the
/// individual datagrams they stand for, whatever the receiver's mode.
fn gso_runs_split_for_any_receiver(batching: bool) {
    for family in FAMILIES {
        for receiver_batching in [true, false] {
            let (Some(tx), Some(rx)) = (
                Endpoint::bind(family, batching),
                Endpoint::bind(family, receiver_batching),
            ) else {
                continue;
            };
            // Runs: 10 x 1200 + a 700 tail; 64 x 1400 (more than one GSO send
            // can carry); 3 x 100 exactly; a segment size larger than the
            // contents; a plain datagram in between.
            let runs: Vec<(Vec<u8>, usize)> = vec![
                (payload(1, 12 * 1200 - 500), 1200),
                (payload(2, 64 * 1400), 1400),
                (payload(3, 300), 100),
                (payload(4, 800), 2000),
            ];
            let plain = payload(5, 333);
            let mut transmits: Vec<Transmit<'_>> = runs
                .iter()
                .map(|(contents, seg)| Transmit {
                    destination: rx.addr(),
                    contents,
                    segment_size: Some(*seg),
                })
                .collect();
            transmits.insert(
                1,
                Transmit {
                    destination: rx.addr(),
                    contents: &plain,
                    segment_size: None,
                },
            );
            let expected: Vec<(SocketAddr, Vec<u8>)> = transmits
                .iter()
                .flat_map(|t| t.datagrams())
                .map(|d| (tx.addr(), d.to_vec()))
                .collect();
            assert_eq!(expected.len(), 12 + 1 + 64 + 3 + 1);

            tx.send_all_ok(&transmits);
            let got = rx.recv_datagrams(expected.len(), None);
            assert_eq!(
                got.datagrams, expected,
                "{family:?} receiver batching {receiver_batching}"
            );
            assert_eq!(tx.stats().datagrams_sent, expected.len() as u64);
            assert_eq!(rx.stats().datagrams_received, expected.len() as u64);
            if tx.state.max_gso_segments() > 1 {
                // GSO: the 64-datagram run needs two sends, the rest one each.
                assert!(tx.stats().send_syscalls <= 2, "{:?}", tx.stats());
            }
            if offloads(&tx, &rx) {
                // GRO handed whole runs up; they were split by stride above.
                assert!(got.coalesced() >= 3, "{:?}", got.metas);
                assert!(
                    got.metas
                        .iter()
                        .any(|m| m.stride == 1400 && m.len > 40 * 1400)
                );
            } else if rx.state.gro_segments() == 1 {
                assert_eq!(got.coalesced(), 0);
            }
        }
    }
}

/// One GSO send lands in one GRO buffer whose stride is the segment size.
#[test]
fn gro_receive_is_split_by_stride() {
    for family in FAMILIES {
        let Some((tx, rx)) = pair(family, true) else {
            continue;
        };
        if !offloads(&tx, &rx) {
            eprintln!("skipping: no GSO/GRO on this system");
            return;
        }
        let contents = payload(9, 20 * 1000 + 500);
        let run = [Transmit {
            destination: rx.addr(),
            contents: &contents,
            segment_size: Some(1000),
        }];
        tx.send_all_ok(&run);
        let got = rx.recv_datagrams(21, None);
        assert_eq!(got.metas.len(), 1, "{:?}", got.metas);
        assert_eq!(got.metas[0].len, contents.len());
        assert_eq!(got.metas[0].stride, 1000);
        let expected: Vec<(SocketAddr, Vec<u8>)> = contents
            .chunks(1000)
            .map(|d| (tx.addr(), d.to_vec()))
            .collect();
        assert_eq!(got.datagrams, expected);
        assert_eq!(tx.stats().send_syscalls, 1);
        assert_eq!(rx.stats().recv_syscalls, 1);
    }
}

/// A datagram larger than its buffer is reported empty and counted; with GRO
/// the whole segments before the cut are kept.
fn truncated_datagrams_are_dropped_and_counted(batching: bool) {
    let Some((tx, rx)) = pair(Family::V4, batching) else {
        return;
    };
    let big = payload(1, 500);
    let small = payload(2, 50);
    let transmits = [&big, &small].map(|p| Transmit {
        destination: rx.addr(),
        contents: p,
        segment_size: None,
    });
    tx.send_all_ok(&transmits);
    let got = rx.recv_datagrams(1, Some(100));
    assert_eq!(got.metas.len(), 2, "{:?}", got.metas);
    assert_eq!(got.metas[0].len, 0);
    assert_eq!(got.datagrams, [(tx.addr(), small.clone())]);
    assert_eq!(rx.stats().truncated, 1);

    if offloads(&tx, &rx) {
        let run = payload(3, 1000);
        let gso = [Transmit {
            destination: rx.addr(),
            contents: &run,
            segment_size: Some(100),
        }];
        tx.send_all_ok(&gso);
        let got = rx.recv_datagrams(3, Some(350));
        assert_eq!(got.metas.len(), 1, "{:?}", got.metas);
        assert_eq!((got.metas[0].len, got.metas[0].stride), (300, 100));
        let expected: Vec<(SocketAddr, Vec<u8>)> = run
            .chunks(100)
            .take(3)
            .map(|d| (tx.addr(), d.to_vec()))
            .collect();
        assert_eq!(got.datagrams, expected);
        assert_eq!(rx.stats().truncated, 2);
    }
}

/// A transmit the kernel rejects for its destination is reported on its own;
/// the transmits around it go out, and GSO stays on.
fn bad_destination_skips_one_transmit(batching: bool) {
    let Some((tx, rx)) = pair(Family::V4, batching) else {
        return;
    };
    let gso_before = tx.state.max_gso_segments();
    let port_zero: SocketAddr = (Ipv4Addr::LOCALHOST, 0).into();
    let wrong_family: SocketAddr = (Ipv6Addr::LOCALHOST, rx.addr().port()).into();
    let payloads: Vec<Vec<u8>> = (0..9).map(|i| payload(i, 200)).collect();
    let run = payload(20, 600);
    let plan: [(SocketAddr, Option<usize>); 9] = [
        (rx.addr(), None),
        (rx.addr(), None),
        (port_zero, None),
        (rx.addr(), None),
        (wrong_family, None),
        (rx.addr(), None),
        (port_zero, Some(100)),
        (rx.addr(), Some(100)),
        (rx.addr(), None),
    ];
    let transmits: Vec<Transmit<'_>> = plan
        .iter()
        .zip(&payloads)
        .map(|(&(destination, segment_size), p)| Transmit {
            destination,
            contents: if segment_size.is_some() { &run } else { p },
            segment_size,
        })
        .collect();
    let failed = tx.send_all(&transmits);
    let failed_at: Vec<usize> = failed.iter().map(|f| f.0).collect();
    assert_eq!(failed_at, [2, 4, 6], "{failed:?}");
    assert!(failed.iter().all(|f| f.1 != io::ErrorKind::WouldBlock));
    assert_eq!(failed[0].1, io::ErrorKind::InvalidInput);

    let expected: Vec<(SocketAddr, Vec<u8>)> = [0, 1, 3, 5, 7, 8]
        .iter()
        .flat_map(|&i| transmits[i].datagrams())
        .map(|d| (tx.addr(), d.to_vec()))
        .collect();
    let got = rx.recv_datagrams(expected.len(), None);
    assert_eq!(got.datagrams, expected);
    assert_eq!(tx.stats().send_errors, 3);
    // The port-0 GSO run was the destination's fault, not GSO's.
    assert_eq!(tx.state.max_gso_segments(), gso_before);
    assert_eq!(tx.stats().gso_fallbacks, 0);
}

/// After ICMP port unreachable, receive and send return `ConnectionRefused`
/// once each (counted); the socket keeps working afterwards.
fn closed_port_is_a_counted_error(batching: bool) {
    for family in FAMILIES {
        let Some((tx, rx)) = pair(family, batching) else {
            continue;
        };
        let closed = {
            let gone = Endpoint::bind(family, false).unwrap();
            gone.addr()
        };
        // ICMP errors reach connected sockets only (no IP_RECVERR).
        tx.sock.connect(closed).unwrap();
        let data = payload(1, 100);
        let to_closed = [Transmit {
            destination: closed,
            contents: &data,
            segment_size: None,
        }];
        assert_eq!(tx.send(&to_closed).unwrap(), 1);
        let err = tx.recv_until_not_empty().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{family:?}");
        assert_eq!(tx.stats().recv_errors, 1);

        // Again, now surfacing on a send: the transmit it hit was not sent.
        assert_eq!(tx.send(&to_closed).unwrap(), 1);
        let start = Instant::now();
        let err = loop {
            assert!(start.elapsed() < DEADLINE, "no error on send");
            match tx.send(&to_closed) {
                Ok(_) => sleep(POLL),
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{family:?}");
        assert!(tx.stats().send_errors >= 1);

        // The socket and its capabilities are intact.
        let gso = tx.state.max_gso_segments();
        tx.sock.connect(rx.addr()).unwrap();
        rx.sock.connect(tx.addr()).unwrap();
        let there = payload(2, 1000);
        let back = payload(3, 900);
        let run = payload(4, 3000);
        let out = [
            Transmit {
                destination: rx.addr(),
                contents: &there,
                segment_size: None,
            },
            Transmit {
                destination: rx.addr(),
                contents: &run,
                segment_size: Some(1000),
            },
        ];
        tx.send_all_ok(&out);
        let got = rx.recv_datagrams(4, None);
        assert_eq!(got.datagrams.len(), 4);
        assert_eq!(got.datagrams[0], (tx.addr(), there.clone()));
        let reply = [Transmit {
            destination: tx.addr(),
            contents: &back,
            segment_size: None,
        }];
        rx.send_all_ok(&reply);
        assert_eq!(
            tx.recv_datagrams(1, None).datagrams,
            [(rx.addr(), back.clone())]
        );
        assert_eq!(tx.state.max_gso_segments(), gso);
    }
}

/// Nothing queued: `WouldBlock`, and the entries are left alone. Empty
/// slices are no-ops.
fn empty_socket_would_block(batching: bool) {
    for family in FAMILIES {
        let Some(rx) = Endpoint::bind(family, batching) else {
            continue;
        };
        let mut buf = [0u8; 64];
        let marker = RecvMeta {
            addr: rx.addr(),
            len: 7,
            stride: 7,
            offset: 0,
            truncated: false,
            rx_time: None,
        };
        let mut meta = [marker; 1];
        let err = rx
            .recv(&mut [IoSliceMut::new(&mut buf)], &mut meta)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(meta, [marker]);
        assert_eq!(rx.recv(&mut [], &mut meta).unwrap(), 0);
        assert_eq!(
            rx.recv(&mut [IoSliceMut::new(&mut buf)], &mut []).unwrap(),
            0
        );
        assert_eq!(rx.send(&[]).unwrap(), 0);
        assert_eq!(rx.stats().recv_errors, 0);
    }
}

/// On a dual-stack IPv6 socket an IPv4 peer is reported as plain IPv4, and
/// plain IPv4 destinations work (v4-mapped on the wire), as do mapped ones.
fn dual_stack_reports_plain_ipv4(batching: bool) {
    let sock = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::DGRAM, None).unwrap();
    sock.set_only_v6(false).unwrap();
    let mapped = SocketAddr::V6(SocketAddrV6::new(
        Ipv4Addr::LOCALHOST.to_ipv6_mapped(),
        0,
        0,
        0,
    ));
    if let Err(e) = sock.bind(&mapped.into()) {
        eprintln!("skipping: cannot bind {mapped}: {e}");
        return;
    }
    let dual = Endpoint::from_socket(sock.into(), batching);
    let Some(v4) = Endpoint::bind(Family::V4, batching) else {
        return;
    };
    let dual_as_v4 = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, dual.addr().port()));

    let hello = payload(1, 300);
    let hello_run = payload(2, 3 * 500);
    let to_dual = [
        Transmit {
            destination: dual_as_v4,
            contents: &hello,
            segment_size: None,
        },
        Transmit {
            destination: dual_as_v4,
            contents: &hello_run,
            segment_size: Some(500),
        },
    ];
    v4.send_all_ok(&to_dual);
    let got = dual.recv_datagrams(4, None);
    assert_eq!(got.datagrams.len(), 4);
    assert!(
        got.datagrams.iter().all(|(from, _)| *from == v4.addr()),
        "{:?}",
        got.metas
    );
    assert_eq!(got.datagrams[0].1, hello);

    let reply = payload(3, 200);
    let reply_run = payload(4, 2 * 600 + 1);
    let v4_mapped = SocketAddr::V6(SocketAddrV6::new(
        match v4.addr().ip() {
            std::net::IpAddr::V4(ip) => ip.to_ipv6_mapped(),
            std::net::IpAddr::V6(ip) => ip,
        },
        v4.addr().port(),
        0,
        0,
    ));
    let to_v4 = [
        Transmit {
            destination: v4.addr(),
            contents: &reply,
            segment_size: None,
        },
        Transmit {
            destination: v4_mapped,
            contents: &reply_run,
            segment_size: Some(600),
        },
    ];
    dual.send_all_ok(&to_v4);
    let got = v4.recv_datagrams(4, None);
    let expected: Vec<(SocketAddr, Vec<u8>)> = to_v4
        .iter()
        .flat_map(|t| t.datagrams())
        .map(|d| (dual_as_v4, d.to_vec()))
        .collect();
    assert_eq!(got.datagrams, expected);
}

/// The kernel refuses GSO on a socket with UDP checksums off (`SO_NO_CHECK`);
/// the refused run is resent datagram by datagram and GSO is switched off.
#[cfg(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "x86",
        target_arch = "arm"
    )
))]
#[test]
fn refused_gso_falls_back_without_loss() {
    /// `SO_NO_CHECK` in the generic Linux ABI.
    const SO_NO_CHECK: libc::c_int = 11;
    let Some((tx, rx)) = pair(Family::V4, true) else {
        return;
    };
    if tx.state.max_gso_segments() == 1 {
        eprintln!("skipping: no GSO on this system");
        return;
    }
    super::linux::set_int(&SockRef::from(&tx.sock), libc::SOL_SOCKET, SO_NO_CHECK, 1).unwrap();
    let first = payload(1, 100);
    let run = payload(2, 10 * 1000 + 1);
    let second_run = payload(3, 4 * 700);
    let transmits = [
        Transmit {
            destination: rx.addr(),
            contents: &first,
            segment_size: None,
        },
        Transmit {
            destination: rx.addr(),
            contents: &run,
            segment_size: Some(1000),
        },
        Transmit {
            destination: rx.addr(),
            contents: &second_run,
            segment_size: Some(700),
        },
    ];
    tx.send_all_ok(&transmits);
    let expected: Vec<(SocketAddr, Vec<u8>)> = transmits
        .iter()
        .flat_map(|t| t.datagrams())
        .map(|d| (tx.addr(), d.to_vec()))
        .collect();
    let got = rx.recv_datagrams(expected.len(), None);
    assert_eq!(got.datagrams, expected);
    assert_eq!(got.coalesced(), 0);
    assert_eq!(tx.state.max_gso_segments(), 1);
    let stats = tx.stats();
    assert_eq!(
        (stats.gso_fallbacks, stats.send_errors),
        (1, 0),
        "{stats:?}"
    );
    assert_eq!(stats.datagrams_sent, expected.len() as u64);
}

#[test]
fn transmit_datagrams_follow_segment_size() {
    let data = payload(0, 10);
    let cut = |segment_size| -> Vec<usize> {
        Transmit {
            destination: (Ipv4Addr::LOCALHOST, 1).into(),
            contents: &data,
            segment_size,
        }
        .datagrams()
        .map(<[u8]>::len)
        .collect()
    };
    assert_eq!(cut(None), [10]);
    assert_eq!(cut(Some(0)), [10]);
    assert_eq!(cut(Some(10)), [10]);
    assert_eq!(cut(Some(11)), [10]);
    assert_eq!(cut(Some(4)), [4, 4, 2]);
    assert_eq!(cut(Some(5)), [5, 5]);
    let empty = Transmit {
        destination: (Ipv4Addr::LOCALHOST, 1).into(),
        contents: &[],
        segment_size: Some(3),
    };
    assert_eq!(empty.datagrams().map(<[u8]>::len).collect::<Vec<_>>(), [0]);
}

#[test]
fn recv_meta_datagrams_never_panic() {
    let buf = payload(0, 10);
    let meta = |len, stride| RecvMeta {
        addr: (Ipv4Addr::LOCALHOST, 1).into(),
        len,
        stride,
        offset: 0,
        truncated: false,
        rx_time: None,
    };
    let sizes = |m: RecvMeta| m.datagrams(&buf).map(<[u8]>::len).collect::<Vec<_>>();
    assert_eq!(sizes(meta(10, 10)), [10]);
    assert_eq!(sizes(meta(10, 3)), [3, 3, 3, 1]);
    assert_eq!(sizes(meta(0, 1)), Vec::<usize>::new());
    assert_eq!(sizes(meta(4, 0)), [1, 1, 1, 1]);
    assert_eq!(sizes(meta(50, 20)), [10]);
    assert_eq!(RecvMeta::default().stride, 1);
    // A fake-TCP segment: the datagram sits behind the headers.
    let behind = |offset, len| RecvMeta {
        offset,
        ..meta(len, len)
    };
    assert_eq!(sizes(behind(6, 4)), [4]);
    assert_eq!(sizes(behind(6, 9)), [4]);
    assert_eq!(sizes(behind(12, 4)), Vec::<usize>::new());
}

#[test]
fn mapped_sources_become_ipv4() {
    let v4: SocketAddr = (Ipv4Addr::new(10, 1, 2, 3), 9).into();
    let mapped: SocketAddr = (Ipv4Addr::new(10, 1, 2, 3).to_ipv6_mapped(), 9).into();
    let v6: SocketAddr = (Ipv6Addr::LOCALHOST, 9).into();
    assert_eq!(super::canonical(mapped), v4);
    assert_eq!(super::canonical(v4), v4);
    assert_eq!(super::canonical(v6), v6);
}

#[test]
fn udp_state_is_send_and_sync() {
    fn shareable<T: Send + Sync>() {}
    shareable::<UdpState>();
}

#[test]
fn non_udp_sockets_are_refused() {
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let err = UdpState::new(SockRef::from(&listener), true).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
}

/// Time since the Unix epoch on the realtime clock (what kernel receive
/// stamps count in).
fn realtime() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
}

/// Waits (bounded) until the kernel stamps `rx`'s datagrams as they come
/// in: the first socket that asks switches stamping on for the whole
/// system through a deferred work item, and until it ran a datagram is
/// stamped only when it is read.
fn stamping_on(tx: &Endpoint, rx: &Endpoint) {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        tx.send_all_ok(&[Transmit {
            destination: rx.addr(),
            contents: b"warm-up",
            segment_size: None,
        }]);
        sleep(Duration::from_millis(20));
        let read_at = realtime();
        let got = rx.recv_datagrams(1, None);
        let early = |m: &RecvMeta| m.rx_time.is_some_and(|t| t + POLL * 5 <= read_at);
        if got.metas.iter().all(early) {
            return;
        }
    }
    panic!("the kernel never stamped a datagram on arrival");
}

/// On the batched Linux path every message of a batch carries the
/// kernel's receive time: for datagrams that waited in the socket while
/// the reader slept, the time they came in, well before the read; in
/// arrival order. The portable path carries none (the caller then uses
/// its processing time).
#[test]
fn a_late_reader_learns_when_each_datagram_arrived() {
    const COUNT: usize = 12;
    const LATE: Duration = Duration::from_millis(200);
    for batching in [true, false] {
        for family in FAMILIES {
            let Some((tx, rx)) = pair(family, batching) else {
                continue;
            };
            if batching && cfg!(target_os = "linux") {
                stamping_on(&tx, &rx);
            }
            let sent_from = realtime();
            for i in 0..COUNT {
                // Distinct sizes: no GRO run, one message per datagram.
                let d = payload(i, 100 + i);
                tx.send_all_ok(&[Transmit {
                    destination: rx.addr(),
                    contents: &d,
                    segment_size: None,
                }]);
            }
            let sent_until = realtime();
            sleep(LATE);
            let read_at = realtime();
            let got = rx.recv_datagrams(COUNT, None);
            assert_eq!(got.datagrams.len(), COUNT, "{family:?} batching {batching}");
            let stamps: Vec<Option<Duration>> = got.metas.iter().map(|m| m.rx_time).collect();
            if !(cfg!(target_os = "linux") && batching) {
                assert!(stamps.iter().all(Option::is_none), "{stamps:?}");
                continue;
            }
            let stamps: Vec<Duration> = stamps.into_iter().map(|s| s.expect("stamped")).collect();
            assert!(got.metas.len() > 1, "one batch of several messages");
            for s in &stamps {
                // Stamped when it came in (loopback: during or just after
                // the send), not when the late reader got to it; a
                // softirq deferred on a busy box may stamp later, never
                // as late as half the reader's sleep.
                assert!(*s >= sent_from, "{s:?} before the send at {sent_from:?}");
                assert!(
                    *s + LATE / 2 <= read_at,
                    "stamp {s:?} is the read time {read_at:?}, not the arrival (sent by {sent_until:?})"
                );
            }
            assert!(stamps.is_sorted(), "{stamps:?}");
        }
    }
}
