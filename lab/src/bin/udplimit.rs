//! What this machine's loopback can do without KCP: the floor kcpio's
//! per-packet cost is measured against.
//!
//! ```text
//! cargo run --release -p kcpio-lab --bin udplimit -- [--modes tcp,sendmmsg,gso]
//!     [--reps N] [--mib N] [--size BYTES] [--sockbuf BYTES] [--payload pattern|static] [--json]
//! ```
//!
//! One sender thread and one receiver thread on 127.0.0.1 move `--mib`
//! (default 256) MiB one way, per mode:
//!
//! - `tcp`: a `TcpStream`, 64 KiB writes and reads;
//! - `sendmmsg`: datagrams of `--size` bytes (default 1400, kcpio's default
//!   MTU), 32 per `sendmmsg`, received 32 per `recvmmsg`;
//! - `gso`: the same datagrams, 46 per message with `UDP_SEGMENT` (64,400
//!   bytes, under the 64 KiB limit), 8 messages per `sendmmsg`; the
//!   receiver has `UDP_GRO` on and takes 8 coalesced runs per `recvmmsg`.
//!
//! UDP has no flow control, so the sender keeps at most 1 MiB ahead of what
//! the receiver has counted (a shared counter; the sender parks when it is
//! ahead, the receiver unparks it), and both sockets get `--sockbuf`
//! (default 4 MiB, as `vs-kcpgo.sh` gives kcpio and kcp-go). Datagrams lost
//! anyway are counted and reported; the rate is bytes received over the time
//! from the first send to the last byte received.
//!
//! Payload (`--payload`, default `pattern`): the senders write the test
//! pattern kcpio's and kcp-go's sink peers write (`kcpio_testkit::pattern`,
//! the byte at stream offset `i` a function of `i`), generated chunk by
//! chunk at its stream offset just before each write, and the receivers
//! check it as the sink server does, so the CPU per GB compares like with
//! like (the pattern costs ~0.2 CPU-s/GB on each side here); `static` sends
//! one buffer filled once and checks nothing (the raw floor). With UDP a
//! lost datagram shifts the offsets after it: the receiver then counts
//! mismatched messages (`pattern_errors`) rather than failing.
//!
//! CPU: each thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`), per GB (10^9
//! bytes) received. On loopback the receiver's kernel work (the softirq that
//! delivers a packet) mostly runs on the sending thread, as it does for
//! kcpio's sender and for TCP, so the figures compare like with like.
//!
//! Prints one line per run (JSON with `--json`: `mode`, `rep`, `mb_per_s`,
//! `cpu_gb_send`, `cpu_gb_recv`, `lost_datagrams`, `send_calls`,
//! `recv_calls`), then a table of medians and spreads. `--reps` (default 5)
//! rounds interleave the modes.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use kcpio_testkit::pattern;
use nix::sys::socket::{
    ControlMessage, MsgFlags, MultiHeaders, SockaddrIn, recvmmsg, sendmmsg, setsockopt, sockopt,
};
use rustix::time::{ClockId, clock_gettime};

/// Datagrams per GSO message: 46 × 1400 = 64,400 bytes (UDP allows 65,507).
const GSO_MAX_PAYLOAD: usize = 65_507;
/// Messages per `sendmmsg`/`recvmmsg` without GSO.
const PLAIN_BATCH: usize = 32;
/// Messages per `sendmmsg`/`recvmmsg` with GSO/GRO.
const GSO_BATCH: usize = 8;
/// The larger of the two batch sizes.
const MAX_BATCH: usize = if GSO_BATCH > PLAIN_BATCH {
    GSO_BATCH
} else {
    PLAIN_BATCH
};
/// Bytes the UDP sender may be ahead of the receiver.
const WINDOW: u64 = 1 << 20;
/// TCP write/read size.
const TCP_CHUNK: usize = 64 * 1024;
/// With no progress for this long, what is in flight is counted as lost.
const STALL: Duration = Duration::from_millis(100);
/// A run that takes longer has failed.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// How the pair moves the bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum Mode {
    Tcp,
    Sendmmsg,
    Gso,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Sendmmsg => "sendmmsg",
            Self::Gso => "gso",
        }
    }
}

/// What the senders write.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
enum Payload {
    /// The sink peers' test pattern, generated per chunk at its stream
    /// offset and checked by the receiver (as kcpio's sink does).
    Pattern,
    /// One buffer filled once, nothing checked.
    Static,
}

/// Loopback limits: TCP, sendmmsg and UDP GSO/GRO, one sender and one receiver thread.
#[derive(clap::Parser)]
struct Args {
    /// Modes to run, interleaved per repetition.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "tcp,sendmmsg,gso"
    )]
    modes: Vec<Mode>,
    /// Repetitions.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    reps: u64,
    /// MiB moved one way per run.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=16384))]
    mib: u64,
    /// Datagram size in bytes.
    #[arg(long, default_value_t = 1400, value_parser = clap::value_parser!(u64).range(64..=9000))]
    size: u64,
    /// Socket buffer size for both UDP sockets (0: the OS default).
    #[arg(long, default_value_t = 4 << 20, value_parser = clap::value_parser!(u64).range(0..=1 << 30))]
    sockbuf: u64,
    /// What the senders write: the sink peers' pattern (generated and
    /// checked, like with like) or one static buffer.
    #[arg(long, value_enum, default_value = "pattern")]
    payload: Payload,
    /// One JSON object per run.
    #[arg(long)]
    json: bool,
}

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// One run's figures.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    mb_per_s: f64,
    cpu_gb_send: f64,
    cpu_gb_recv: f64,
    lost_datagrams: u64,
    send_calls: u64,
    recv_calls: u64,
    /// Received messages (TCP: reads) that differed from the pattern.
    pattern_errors: u64,
}

/// What the receiver reports.
struct RecvOutcome {
    bytes: u64,
    cpu: Duration,
    calls: u64,
    end: Instant,
    pattern_errors: u64,
}

fn tcp_run(bytes: u64, sockbuf: usize, payload: Payload) -> Result<Run, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let receiver = thread::spawn(move || -> Result<RecvOutcome, String> {
        let (mut s, _) = listener.accept().map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(RUN_LIMIT))
            .map_err(|e| e.to_string())?;
        let cpu0 = thread_cpu();
        let mut buf = vec![0u8; TCP_CHUNK];
        let (mut got, mut calls, mut errors) = (0u64, 0u64, 0u64);
        while got < bytes {
            let n = s.read(&mut buf).map_err(|e| format!("tcp read: {e}"))?;
            calls += 1;
            if n == 0 {
                return Err(format!("tcp: eof after {got} bytes"));
            }
            let data = buf.get(..n).unwrap_or_default();
            if payload == Payload::Pattern && pattern::first_mismatch(data, got).is_some() {
                errors += 1;
            }
            got += n as u64;
        }
        Ok(RecvOutcome {
            bytes: got,
            cpu: thread_cpu().saturating_sub(cpu0),
            calls,
            end: Instant::now(),
            pattern_errors: errors,
        })
    });
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    let _ = sockbuf; // TCP sizes its own buffers (autotuning), as a tokio user's would be.
    let mut chunk = vec![0x5au8; TCP_CHUNK];
    let start = Instant::now();
    let cpu0 = thread_cpu();
    let (mut left, mut calls) = (bytes, 0u64);
    while left > 0 {
        let n = (left as usize).min(TCP_CHUNK);
        let data = chunk.get_mut(..n).unwrap_or_default();
        if payload == Payload::Pattern {
            pattern::fill(data, bytes - left);
        }
        s.write_all(data).map_err(|e| format!("tcp write: {e}"))?;
        calls += 1;
        left -= n as u64;
    }
    let send_cpu = thread_cpu().saturating_sub(cpu0);
    let r = receiver
        .join()
        .map_err(|_| "tcp receiver panicked".to_string())??;
    Ok(figures(start, send_cpu, calls, &r, 0))
}

fn figures(start: Instant, send_cpu: Duration, send_calls: u64, r: &RecvOutcome, lost: u64) -> Run {
    let secs = r.end.duration_since(start).as_secs_f64().max(1e-9);
    let gb = (r.bytes as f64 / 1e9).max(1e-12);
    Run {
        mb_per_s: r.bytes as f64 / 1e6 / secs,
        cpu_gb_send: send_cpu.as_secs_f64() / gb,
        cpu_gb_recv: r.cpu.as_secs_f64() / gb,
        lost_datagrams: lost,
        send_calls,
        recv_calls: r.calls,
        pattern_errors: r.pattern_errors,
    }
}

/// Shared between the UDP sender and receiver.
struct Flow {
    received: AtomicU64,
    sender_parked: AtomicBool,
    done: AtomicBool,
}

/// A connected pair of UDP sockets with `sockbuf`-byte buffers (forced past
/// `rmem_max` where we may, as root).
fn udp_pair(sockbuf: usize, gro: bool) -> Result<(UdpSocket, UdpSocket), String> {
    let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| e.to_string())?;
    let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| e.to_string())?;
    tx.connect(rx.local_addr().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    rx.connect(tx.local_addr().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    if sockbuf > 0 {
        if setsockopt(&rx, sockopt::RcvBufForce, &sockbuf).is_err() {
            let _ = setsockopt(&rx, sockopt::RcvBuf, &sockbuf);
        }
        if setsockopt(&tx, sockopt::SndBufForce, &sockbuf).is_err() {
            let _ = setsockopt(&tx, sockopt::SndBuf, &sockbuf);
        }
    }
    if gro {
        setsockopt(&rx, sockopt::UdpGroSegment, &true).map_err(|e| format!("UDP_GRO: {e}"))?;
    }
    rx.set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| e.to_string())?;
    Ok((tx, rx))
}

fn udp_run(
    bytes: u64,
    size: usize,
    sockbuf: usize,
    gso: bool,
    payload: Payload,
) -> Result<Run, String> {
    let (tx, rx) = udp_pair(sockbuf, gso)?;
    let flow = Arc::new(Flow {
        received: AtomicU64::new(0),
        sender_parked: AtomicBool::new(false),
        done: AtomicBool::new(false),
    });
    let sender_thread = thread::current();
    let rflow = flow.clone();
    let receiver = thread::spawn(move || -> Result<RecvOutcome, String> {
        let per_buf = if gso {
            (GSO_MAX_PAYLOAD / size) * size
        } else {
            size
        };
        let batch = if gso { GSO_BATCH } else { PLAIN_BATCH };
        let mut store = vec![0u8; per_buf * batch];
        let mut headers =
            MultiHeaders::<SockaddrIn>::preallocate(batch, gso.then(|| nix::cmsg_space!(i32)));
        let cpu0 = thread_cpu();
        let (mut got, mut calls, mut errors) = (0u64, 0u64, 0u64);
        let mut end = Instant::now();
        let deadline = Instant::now() + RUN_LIMIT;
        loop {
            // The vectors are rebuilt per call (nix ties their lifetime to the
            // results'): one small allocation per system call, not per datagram.
            let mut lens = [0usize; MAX_BATCH];
            let res = {
                let mut slices: Vec<[IoSliceMut<'_>; 1]> = store
                    .chunks_mut(per_buf)
                    .map(|c| [IoSliceMut::new(c)])
                    .collect();
                recvmmsg(
                    rx.as_raw_fd(),
                    &mut headers,
                    slices.iter_mut(),
                    MsgFlags::MSG_WAITFORONE,
                    None,
                )
                .map(|msgs| {
                    let mut k = 0;
                    for (m, len) in msgs.zip(lens.iter_mut()) {
                        *len = m.bytes;
                        k += 1;
                    }
                    k
                })
            };
            calls += 1;
            match res {
                Ok(k) => {
                    let mut n = 0u64;
                    for (i, &len) in lens.iter().take(k).enumerate() {
                        let data = store
                            .get(i * per_buf..i * per_buf + len)
                            .unwrap_or_default();
                        if payload == Payload::Pattern
                            && pattern::first_mismatch(data, got + n).is_some()
                        {
                            errors += 1;
                        }
                        n += len as u64;
                    }
                    got += n;
                    end = Instant::now();
                    rflow.received.store(got, Ordering::Release);
                    if rflow.sender_parked.swap(false, Ordering::AcqRel) {
                        sender_thread.unpark();
                    }
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {
                    if rflow.done.load(Ordering::Acquire) {
                        break;
                    }
                }
                Err(e) => return Err(format!("recvmmsg: {e}")),
            }
            if got >= bytes || Instant::now() > deadline {
                break;
            }
        }
        Ok(RecvOutcome {
            bytes: got,
            cpu: thread_cpu().saturating_sub(cpu0),
            calls,
            end,
            pattern_errors: errors,
        })
    });

    let seg = u16::try_from(size).map_err(|e| e.to_string())?;
    let per_msg = if gso {
        (GSO_MAX_PAYLOAD / size) * size
    } else {
        size
    };
    let batch = if gso { GSO_BATCH } else { PLAIN_BATCH };
    let mut buf = vec![0x5au8; per_msg * batch];
    let mut headers =
        MultiHeaders::<SockaddrIn>::preallocate(batch, gso.then(|| nix::cmsg_space!(u16)));
    let gso_cmsg = [ControlMessage::UdpGsoSegments(&seg)];
    let cmsgs: &[ControlMessage<'_>] = if gso { &gso_cmsg } else { &[] };
    let addrs: Vec<Option<SockaddrIn>> = vec![None; batch];
    let start = Instant::now();
    let cpu0 = thread_cpu();
    let (mut sent, mut calls, mut lost) = (0u64, 0u64, 0u64);
    // Bytes written off as lost (not counted against the window).
    let mut written_off = 0u64;
    let mut last_progress = (Instant::now(), 0u64);
    while sent < bytes && start.elapsed() < RUN_LIMIT {
        let received = flow.received.load(Ordering::Acquire);
        let in_flight = (sent - received).saturating_sub(written_off);
        if in_flight >= WINDOW {
            if received != last_progress.1 {
                last_progress = (Instant::now(), received);
            } else if last_progress.0.elapsed() > STALL {
                // Nothing arrived for a while: what is in flight is gone.
                let gone = in_flight;
                lost += gone.div_ceil(size as u64);
                written_off += gone;
                continue;
            }
            flow.sender_parked.store(true, Ordering::Release);
            if flow.received.load(Ordering::Acquire) == received {
                thread::park_timeout(Duration::from_millis(5));
            }
            flow.sender_parked.store(false, Ordering::Release);
            continue;
        }
        // Messages this call: the rest of the run, at most one batch.
        let left = bytes - sent;
        let msgs = (left.div_ceil(per_msg as u64) as usize).clamp(1, batch);
        let mut lens = [0usize; MAX_BATCH];
        let mut queued = 0u64;
        for (i, len) in lens.iter_mut().take(msgs).enumerate() {
            // A GSO message's last datagram may be short; keep whole datagrams.
            *len = ((bytes - sent - queued) as usize).min(per_msg);
            if payload == Payload::Pattern {
                let at = i * per_msg;
                let data = buf.get_mut(at..at + *len).unwrap_or_default();
                pattern::fill(data, sent + queued);
            }
            queued += *len as u64;
        }
        let iovs: Vec<[IoSlice<'_>; 1]> = lens
            .iter()
            .take(msgs)
            .enumerate()
            .map(|(i, &n)| {
                [IoSlice::new(
                    buf.get(i * per_msg..i * per_msg + n).unwrap_or_default(),
                )]
            })
            .collect();
        calls += 1;
        match sendmmsg(
            tx.as_raw_fd(),
            &mut headers,
            iovs.iter(),
            addrs.get(..msgs).unwrap_or_default(),
            cmsgs,
            MsgFlags::empty(),
        ) {
            Ok(results) => {
                let done = results.count();
                let done_bytes: u64 = iovs.iter().take(done).map(|v| v[0].len() as u64).sum();
                sent += done_bytes;
            }
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
            // ECONNREFUSED: the receiver went away; ENOBUFS: a full device queue.
            Err(nix::errno::Errno::ENOBUFS) => thread::yield_now(),
            Err(e) => return Err(format!("sendmmsg: {e}")),
        }
    }
    let send_cpu = thread_cpu().saturating_sub(cpu0);
    flow.done.store(true, Ordering::Release);
    let r = receiver
        .join()
        .map_err(|_| "udp receiver panicked".to_string())??;
    let lost_total = lost.max((sent.saturating_sub(r.bytes)).div_ceil(size as u64));
    Ok(figures(start, send_cpu, calls, &r, lost_total))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let (bytes, size, sockbuf) = (args.mib << 20, args.size as usize, args.sockbuf as usize);
    let mut runs: Vec<(Mode, Run)> = Vec::new();
    let mut failed = false;
    for rep in 1..=args.reps {
        for &mode in &args.modes {
            let res = match mode {
                Mode::Tcp => tcp_run(bytes, sockbuf, args.payload),
                Mode::Sendmmsg => udp_run(bytes, size, sockbuf, false, args.payload),
                Mode::Gso => udp_run(bytes, size, sockbuf, true, args.payload),
            };
            match res {
                Ok(r) => {
                    if args.json {
                        println!(
                            "{}",
                            serde_json::json!({
                                "mode": mode.name(), "rep": rep, "mb_per_s": r.mb_per_s,
                                "cpu_gb_send": r.cpu_gb_send, "cpu_gb_recv": r.cpu_gb_recv,
                                "lost_datagrams": r.lost_datagrams,
                                "send_calls": r.send_calls, "recv_calls": r.recv_calls,
                                "pattern_errors": r.pattern_errors,
                                "payload": format!("{:?}", args.payload).to_lowercase(),
                            })
                        );
                    } else {
                        println!(
                            "{:<9} #{rep}: {:8.1} MB/s  send {:.3} CPU-s/GB  recv {:.3} CPU-s/GB  lost {}  calls {}/{}  pattern errors {}",
                            mode.name(),
                            r.mb_per_s,
                            r.cpu_gb_send,
                            r.cpu_gb_recv,
                            r.lost_datagrams,
                            r.send_calls,
                            r.recv_calls,
                            r.pattern_errors
                        );
                    }
                    runs.push((mode, r));
                }
                Err(e) => {
                    eprintln!("udplimit: {} #{rep}: {e}", mode.name());
                    failed = true;
                }
            }
        }
    }
    eprintln!(
        "\nmedians of {} run(s), {} MiB, {}-byte datagrams, payload {:?} (min–max):",
        args.reps, args.mib, args.size, args.payload
    );
    eprintln!("| mode | MB/s | send CPU-s/GB | recv CPU-s/GB |");
    eprintln!("|---|---:|---:|---:|");
    for &mode in &args.modes {
        let pick = |f: fn(&Run) -> f64| -> (f64, f64, f64) {
            let mut v: Vec<f64> = runs
                .iter()
                .filter(|(m, _)| *m == mode)
                .map(|(_, r)| f(r))
                .collect();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (median(&mut v), lo, hi)
        };
        let cell = |(m, lo, hi): (f64, f64, f64), prec: usize| {
            format!("{m:.prec$} ({lo:.prec$}–{hi:.prec$})")
        };
        eprintln!(
            "| {} | {} | {} | {} |",
            mode.name(),
            cell(pick(|r| r.mb_per_s), 0),
            cell(pick(|r| r.cpu_gb_send), 3),
            cell(pick(|r| r.cpu_gb_recv), 3)
        );
    }
    if failed {
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_moves_all_bytes_on_loopback() {
        // 4 MiB each: the pair delivers everything (or counts what it lost)
        // and reports positive figures.
        for payload in [Payload::Pattern, Payload::Static] {
            let tcp = tcp_run(4 << 20, 0, payload).expect("tcp");
            assert!(tcp.mb_per_s > 0.0 && tcp.lost_datagrams == 0);
            assert_eq!(tcp.pattern_errors, 0, "tcp {payload:?}");
            for gso in [false, true] {
                let r = udp_run(4 << 20, 1400, 4 << 20, gso, payload).expect("udp");
                assert!(r.mb_per_s > 0.0, "gso={gso}: {r:?}");
                assert!(r.recv_calls > 0 && r.send_calls > 0, "gso={gso}: {r:?}");
                // The pattern arrives intact unless a datagram was lost.
                if r.lost_datagrams == 0 {
                    assert_eq!(r.pattern_errors, 0, "gso={gso} {payload:?}: {r:?}");
                }
            }
        }
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
