//! Loopback throughput of the datagram paths in `kcpio/src/sys`, 1400-byte
//! datagrams, 32 per iteration, sender and receiver on one thread:
//!
//! - `one_per_syscall`: the portable path (`sendto`/`recvmsg` per datagram);
//! - `sendmmsg`: 32 transmits per `sendmmsg`, received with `recvmmsg`;
//! - `gso_gro`: one 32-segment GSO transmit, received as one GRO buffer.
//!
//! `sys` is private to the crate, so its source is compiled into this bench
//! directly (it depends on nothing else in kcpio).

use std::io::{self, IoSliceMut};
use std::net::{Ipv4Addr, UdpSocket};

use criterion::{Criterion, Throughput, criterion_main};
use socket2::SockRef;

// The bench uses a part of sys and none of its tests (nor fake TCP, whose
// re-exports and test imports are unused here).
#[allow(unsafe_code, dead_code, unused_imports)]
#[path = "../src/sys/mod.rs"]
mod sys;

use sys::{RecvMeta, Transmit, UdpState};

/// Bytes per datagram.
const DATAGRAM: usize = 1400;
/// Datagrams per iteration.
const BURST: usize = 32;
/// Receive polls per iteration before giving up (datagrams were lost).
const MAX_POLLS: usize = 1_000_000;

/// How the pair moves datagrams.
#[derive(Clone, Copy)]
enum Mode {
    OnePerSyscall,
    Sendmmsg,
    GsoGro,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::OnePerSyscall => "one_per_syscall",
            Self::Sendmmsg => "sendmmsg",
            Self::GsoGro => "gso_gro",
        }
    }
}

/// A sender and a receiver on loopback, with reusable buffers.
struct Pair {
    mode: Mode,
    tx: UdpSocket,
    tx_state: UdpState,
    rx: UdpSocket,
    rx_state: UdpState,
    payload: Vec<u8>,
    recv_bufs: Vec<Vec<u8>>,
    meta: Vec<RecvMeta>,
}

impl Pair {
    fn new(mode: Mode) -> io::Result<Self> {
        let batching = !matches!(mode, Mode::OnePerSyscall);
        let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        for sock in [&tx, &rx] {
            let sock = SockRef::from(sock);
            sock.set_recv_buffer_size(1 << 22)?;
            sock.set_send_buffer_size(1 << 22)?;
        }
        let tx_state = UdpState::new(SockRef::from(&tx), batching)?;
        let rx_state = UdpState::new(SockRef::from(&rx), batching)?;
        if matches!(mode, Mode::GsoGro)
            && (tx_state.max_gso_segments() < BURST || rx_state.gro_segments() < BURST)
        {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "no GSO/GRO here",
            ));
        }
        let buf_size = rx_state.gro_segments() * 1500;
        let bufs = rx_state.batch_size();
        Ok(Self {
            mode,
            tx,
            tx_state,
            rx,
            rx_state,
            payload: (0..DATAGRAM * BURST).map(|i| i as u8).collect(),
            recv_bufs: vec![vec![0; buf_size]; bufs],
            meta: vec![RecvMeta::default(); bufs],
        })
    }

    /// Sends `BURST` datagrams and receives them all.
    fn round(&mut self) {
        let destination = self.rx.local_addr().expect("bound");
        let mut transmits = [Transmit {
            destination,
            contents: &[],
            segment_size: None,
        }; BURST];
        let transmits: &[Transmit<'_>] = match self.mode {
            Mode::GsoGro => {
                transmits[0] = Transmit {
                    destination,
                    contents: &self.payload,
                    segment_size: Some(DATAGRAM),
                };
                &transmits[..1]
            }
            Mode::OnePerSyscall | Mode::Sendmmsg => {
                for (t, chunk) in transmits.iter_mut().zip(self.payload.chunks(DATAGRAM)) {
                    t.contents = chunk;
                }
                &transmits
            }
        };
        let mut sent = 0;
        while sent < transmits.len() {
            match self
                .tx_state
                .send(SockRef::from(&self.tx), &transmits[sent..])
            {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("send: {e}"),
            }
        }
        let mut received = 0;
        for _ in 0..MAX_POLLS {
            let mut bufs: Vec<IoSliceMut<'_>> = self
                .recv_bufs
                .iter_mut()
                .map(|b| IoSliceMut::new(b))
                .collect();
            match self
                .rx_state
                .recv(SockRef::from(&self.rx), &mut bufs, &mut self.meta)
            {
                Ok(n) => {
                    received += self
                        .meta
                        .iter()
                        .take(n)
                        .map(|m| m.len.div_ceil(m.stride))
                        .sum::<usize>();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("recv: {e}"),
            }
            if received >= BURST {
                return;
            }
        }
        panic!("lost datagrams: {received} of {BURST}");
    }
}

fn udp_loopback(c: &mut Criterion) {
    let mut group = c.benchmark_group("udp_loopback_1400B");
    group.throughput(Throughput::Bytes((DATAGRAM * BURST) as u64));
    for mode in [Mode::OnePerSyscall, Mode::Sendmmsg, Mode::GsoGro] {
        let mut pair = match Pair::new(mode) {
            Ok(pair) => pair,
            Err(e) => {
                eprintln!("skipping {}: {e}", mode.name());
                continue;
            }
        };
        group.bench_function(mode.name(), |b| b.iter(|| pair.round()));
    }
    group.finish();
}

// `criterion_group!` expands to an undocumented `pub fn`; a private module
// keeps it out of `missing_docs`.
mod entry {
    criterion::criterion_group!(benches, super::udp_loopback);
}
criterion_main!(entry::benches);
