//! The floor of a UDP relay's CPU per datagram: a forwarder that does
//! nothing but move each datagram from one socket to another, for
//! `lab/scripts/udp-cpu.sh` to run beside kcpio-tunnel and UDPspeeder.
//!
//! ```text
//! udpfloor --listen 127.0.0.1:39011 --to 127.0.0.1:39001 --secs 60
//! ```
//!
//! One thread blocks in `recv_from` on `--listen` and sends each datagram
//! to `--to` from a second socket; another blocks on that socket and sends
//! what comes back to the last source. No event loop, no coding, no cipher,
//! no batching: one sleep, one wake, one receive and one send per datagram,
//! the least any relay that does not hold datagrams back pays. Two in a row
//! stand where a carrier's client and server ends stand.
//!
//! `--tokio`: the same forwarder as one task on a current-thread tokio
//! runtime (what `kcpio-tunnel --udp` runs on), reading with
//! [`RelaySocket`] (the tunnel's local sockets: a short `recvmmsg` batch
//! ends the readiness, so no read is spent on `EAGAIN`): it sleeps in
//! `epoll_wait`, and each datagram costs the runtime's wake-up, one receive
//! and one send. The floor of a relay built the way kcpio-tunnel's UDP mode
//! is, with no session between its sockets: the gap between the two floors
//! is the event loop's, and what kcpio-tunnel pays above `--tokio` is its
//! session's (ARQ, FEC, cipher, driver).

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;
use kcpio::RelaySocket;

#[derive(Parser, Debug)]
#[command(
    name = "udpfloor",
    about = "a bare UDP forwarder: the floor of a relay's CPU per datagram"
)]
struct Cli {
    /// where the applications send
    #[arg(long)]
    listen: SocketAddr,
    /// where their datagrams go
    #[arg(long)]
    to: SocketAddr,
    /// exit after this many seconds
    #[arg(long, default_value_t = 120.0)]
    secs: f64,
    /// forward on a current-thread tokio runtime (one task, epoll) instead
    /// of two blocking threads
    #[arg(long)]
    tokio: bool,
}

/// Moves datagrams from `from` to wherever `dest` says, until `end`.
fn pump(
    from: &UdpSocket,
    end: Instant,
    mut dest: impl FnMut(SocketAddr) -> Option<(SocketAddr, bool)>,
    out: &UdpSocket,
) -> io::Result<()> {
    let mut buf = vec![0u8; 65_536];
    while Instant::now() < end {
        let (n, src) = match from.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            // An ICMP error from an earlier send: not the end.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
            Err(e) => return Err(e),
        };
        let Some((to, connected)) = dest(src) else {
            continue;
        };
        let payload = buf.get(..n).unwrap_or_default();
        // A full buffer or a refused send drops the datagram, as a network would.
        let _ = if connected {
            out.send(payload)
        } else {
            out.send_to(payload, to)
        };
    }
    Ok(())
}

/// Binds the local socket and the one toward `--to` (connected).
fn bind(cli: &Cli) -> io::Result<(UdpSocket, UdpSocket)> {
    let local = UdpSocket::bind(cli.listen)?;
    let any: SocketAddr = if cli.to.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let up = UdpSocket::bind(any)?;
    up.connect(cli.to)?;
    Ok((local, up))
}

/// Datagrams `--tokio` reads per call and direction.
const BATCH: usize = 8;

/// `--tokio`'s buffers for one direction: `BATCH` datagrams of up to 64 KiB.
struct Batch {
    bufs: Vec<u8>,
    from: [(usize, SocketAddr); BATCH],
}

impl Batch {
    const STRIDE: usize = 65_536;

    fn new() -> Self {
        Self {
            bufs: vec![0; BATCH * Self::STRIDE],
            from: [(0, SocketAddr::from(([0, 0, 0, 0], 0))); BATCH],
        }
    }

    /// Waits for the next datagrams on `sock`: how many.
    async fn recv(&mut self, sock: &RelaySocket) -> io::Result<usize> {
        let mut chunks = self.bufs.chunks_mut(Self::STRIDE);
        let mut slices: [IoSliceMut<'_>; BATCH] =
            std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
        sock.recv_from_many(&mut slices, &mut self.from).await
    }

    /// Datagram `i` (empty when it was cut short) and its source.
    fn get(&self, i: usize) -> (&[u8], SocketAddr) {
        let (n, from) = self.from.get(i).copied().unwrap_or(self.from[0]);
        let d = self
            .bufs
            .chunks(Self::STRIDE)
            .nth(i)
            .and_then(|b| b.get(..n))
            .unwrap_or_default();
        (d, from)
    }
}

/// `--tokio`: both directions in one task, until `end`.
async fn run_tokio(local: UdpSocket, up: UdpSocket, end: Instant) -> io::Result<()> {
    let local = RelaySocket::from_std(local)?;
    let up = RelaySocket::from_std(up)?;
    println!("listening on {}", local.local_addr()?);
    let (mut there, mut back) = (Batch::new(), Batch::new());
    let mut source: Option<SocketAddr> = None;
    let deadline = tokio::time::sleep_until(end.into());
    tokio::pin!(deadline);
    loop {
        // A full buffer or a refused send drops the datagram, as a network
        // would; a receive error (an ICMP error from an earlier send) is
        // not the end either.
        tokio::select! {
            () = &mut deadline => return Ok(()),
            r = there.recv(&local) => {
                let Ok(got) = r else { continue };
                for i in 0..got {
                    let (d, src) = there.get(i);
                    source = Some(src);
                    let _ = up.try_send(d);
                }
            }
            r = back.recv(&up) => {
                let (Ok(got), Some(src)) = (r, source) else { continue };
                for i in 0..got {
                    let _ = local.try_send_to(back.get(i).0, src);
                }
            }
        }
    }
}

fn run(cli: &Cli) -> io::Result<()> {
    if !(cli.secs.is_finite() && cli.secs > 0.0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--secs takes a positive number",
        ));
    }
    let end = Instant::now() + Duration::from_secs_f64(cli.secs);
    let (local, up) = bind(cli)?;
    if cli.tokio {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(run_tokio(local, up, end));
    }
    // Wake once a second to see the deadline.
    local.set_read_timeout(Some(Duration::from_secs(1)))?;
    up.set_read_timeout(Some(Duration::from_secs(1)))?;
    println!("listening on {}", local.local_addr()?);
    let source: Arc<Mutex<Option<SocketAddr>>> = Arc::new(Mutex::new(None));
    let back = {
        let (up, local, source) = (up.try_clone()?, local.try_clone()?, Arc::clone(&source));
        std::thread::spawn(move || {
            pump(
                &up,
                end,
                |_| {
                    let s = *source.lock().unwrap_or_else(PoisonError::into_inner);
                    s.map(|s| (s, false))
                },
                &local,
            )
        })
    };
    let to = cli.to;
    pump(
        &local,
        end,
        |src| {
            let mut s = source.lock().unwrap_or_else(PoisonError::into_inner);
            if *s != Some(src) {
                *s = Some(src);
            }
            Some((to, true))
        },
        &up,
    )?;
    back.join()
        .map_err(|_| io::Error::other("the return thread panicked"))?
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("udpfloor: {e}");
            ExitCode::FAILURE
        }
    }
}
