//! A complete kcp-go-compatible session (cipher + FEC + ARQ) driven by a
//! plain loop over a `std::net::UdpSocket`: no tokio, no threads. This is
//! what a game's main loop does with [`kcpio::Conn`], the sans-IO session.
//!
//! It connects to an echo server, sends one message per tick, reads the
//! echoes and prints each round trip.
//!
//! ```text
//! # a kcp-go echo server (testkit/interop/kcpgo-peer), or `cargo run --example echo_server`
//! kcpgo-peer echo-server --addr 127.0.0.1:29900 --crypt aes-128 \
//!     --datashard 10 --parityshard 3 --nodelay fast3 --stream
//! cargo run --example gameloop -- --addr 127.0.0.1:29900 --crypt aes-128 \
//!     --datashard 10 --parityshard 3 --preset fast3 --messages 20
//! ```
//!
//! Flags: `--addr HOST:PORT`, `--crypt NAME` (kcptun's names, default
//! `aes`), `--key PASSPHRASE` (kcptun's default), `--datashard N`
//! `--parityshard N` (FEC, default off), `--preset NAME` (`default`,
//! `normal`, `fast`, `fast2`, `fast3`, `lowlat`; default `fast3`),
//! `--messages N`, `--size BYTES`, `--tick-ms MS`, `--quiet`.

use std::error::Error;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

use kcpio::{Config, Conn, ConnError, Key, Method, Preset};
use rand::RngCore;

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// The echo server.
    pub(crate) addr: String,
    /// Cipher name (kcptun's).
    pub(crate) crypt: String,
    /// Passphrase (PBKDF2, as kcptun derives it).
    pub(crate) key: String,
    /// FEC data and parity shards; (0, 0) is off.
    pub(crate) fec: (usize, usize),
    /// ARQ preset name.
    pub(crate) preset: String,
    /// Messages to send.
    pub(crate) messages: usize,
    /// Bytes per message (at least 8: an index leads each).
    pub(crate) size: usize,
    /// One message per tick.
    pub(crate) tick: Duration,
    /// Give up after this long.
    pub(crate) timeout: Duration,
    /// Print only the summary.
    pub(crate) quiet: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            addr: "127.0.0.1:29900".into(),
            crypt: "aes".into(),
            key: "it's a secrect".into(),
            fec: (0, 0),
            preset: "fast3".into(),
            messages: 20,
            size: 64,
            tick: Duration::from_millis(20),
            timeout: Duration::from_secs(30),
            quiet: false,
        }
    }
}

/// What a run measured.
#[derive(Debug)]
pub(crate) struct Summary {
    /// Round trip of every message, in order.
    pub(crate) rtts: Vec<Duration>,
    /// Datagrams the session sent.
    pub(crate) datagrams_out: u64,
    /// Datagrams the session received.
    pub(crate) datagrams_in: u64,
    /// Packets the FEC decoder rebuilt.
    pub(crate) fec_recovered: u64,
}

/// Builds the session's configuration from `opts`.
fn config(opts: &Options) -> Result<Config, Box<dyn Error>> {
    let method = Method::from_name(&opts.crypt).ok_or("unknown --crypt")?;
    let preset = Preset::from_name(&opts.preset).ok_or("unknown --preset")?;
    let mut b = Config::builder()
        .preset(preset)
        .stream(true)
        .crypto(method, Key::passphrase(opts.key.clone()));
    if opts.fec != (0, 0) {
        b = b.fec(opts.fec.0, opts.fec.1);
    }
    Ok(b.build()?)
}

/// Runs the session: one message per tick, echoes read and timed, until
/// every echo is back; then shuts down (everything acknowledged).
///
/// # Errors
///
/// A bad option, a socket error, the session failing (dead link), or the
/// timeout.
pub(crate) fn run(opts: &Options) -> Result<Summary, Box<dyn Error>> {
    let size = opts.size.max(8);
    let config = config(opts)?;
    let crypto = config.packet_crypto();
    let peer: SocketAddr = opts
        .addr
        .to_socket_addrs()?
        .next()
        .ok_or("--addr resolves to nothing")?;
    let local: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let socket = UdpSocket::bind(local)?;
    socket.connect(peer)?;

    // A random conversation id, as kcp-go's DialWithOptions picks one;
    // nonces from the same CSPRNG.
    let mut rng = rand::rng();
    let mut conn = Conn::new(rng.next_u32(), &config)?;
    let mut slot = vec![0u8; conn.max_datagram()];
    let mut rx = vec![0u8; 1500];
    let mut nonce = [0u8; 16];
    let nonce = &mut nonce[..crypto.nonce_len()];

    let epoch = Instant::now();
    let mut sent_at: Vec<Instant> = Vec::with_capacity(opts.messages);
    let mut rtts = Vec::with_capacity(opts.messages);
    let mut pending: Vec<u8> = Vec::new();
    let mut echo: Vec<u8> = Vec::new();
    let mut next_tick = epoch;
    let mut shutting_down = false;
    // The first receive of every round waits in the socket (step 4 sets
    // how long); the rest only drain.
    socket.set_read_timeout(Some(Duration::from_micros(100)))?;
    loop {
        let now = epoch.elapsed();
        if now > opts.timeout {
            return Err(
                format!("timed out with {} of {} echoes", rtts.len(), opts.messages).into(),
            );
        }
        // 1. The network: every datagram that arrived, opened and handed
        //    to the session; then its timers.
        loop {
            match socket.recv(&mut rx) {
                Ok(n) => {
                    let datagram = &mut rx[..n.min(1500)];
                    // A datagram that fails to open is dropped (kcp-go counts it).
                    if let Ok(range) = crypto.open(datagram) {
                        let _ = conn.handle_packet(epoch.elapsed(), &datagram[range]);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break;
                }
                // ICMP port unreachable and the like: the peer is not up
                // (yet); the ARQ retransmits.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
                Err(e) => return Err(e.into()),
            }
            socket.set_nonblocking(true)?;
        }
        socket.set_nonblocking(false)?;
        let now = epoch.elapsed();
        conn.handle_timeout(now);

        // 2. The game: one message per tick, echoes framed by size.
        if Instant::now() >= next_tick && sent_at.len() < opts.messages {
            let mut m = vec![0u8; size];
            m[..8].copy_from_slice(&(sent_at.len() as u64).to_le_bytes());
            pending.extend_from_slice(&m);
            sent_at.push(Instant::now());
            next_tick += opts.tick;
        }
        while !pending.is_empty() {
            match conn.write(&pending) {
                Ok(n) => {
                    pending.drain(..n);
                }
                Err(ConnError::WouldBlock) => break,
                Err(e) => return Err(e.into()),
            }
        }
        loop {
            match conn.read(&mut rx) {
                Ok(n) => echo.extend_from_slice(&rx[..n]),
                Err(ConnError::WouldBlock) => break,
                Err(e) => return Err(e.into()),
            }
        }
        while echo.len() >= size {
            let mut idx = [0u8; 8];
            idx.copy_from_slice(&echo[..8]);
            let i = u64::from_le_bytes(idx) as usize;
            if i != rtts.len() || i >= sent_at.len() {
                return Err(format!("echo {i} arrived, expected {}", rtts.len()).into());
            }
            let rtt = sent_at[i].elapsed();
            if !opts.quiet {
                println!("message {i}: {:.1} ms", rtt.as_secs_f64() * 1e3);
            }
            rtts.push(rtt);
            echo.drain(..size);
        }
        if rtts.len() == opts.messages {
            // Everything came back: stop writing, wait for the last ACKs.
            shutting_down = true;
            match conn.shutdown() {
                Ok(()) | Err(ConnError::LingerExpired) => break,
                Err(ConnError::WouldBlock) => {}
                Err(e) => return Err(e.into()),
            }
        }

        // 3. Out: every datagram the session has, sealed and sent.
        while let Some(t) = conn.poll_transmit(epoch.elapsed(), &mut slot) {
            rng.fill_bytes(nonce);
            let n = crypto.seal(&mut slot, t.len, nonce)?;
            match socket.send(&slot[..n]) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(e) = conn.error() {
            return Err(e.into());
        }

        // 4. Sleep in the socket until the next datagram, tick or timer.
        let now = epoch.elapsed();
        let mut wake = conn.poll_timeout().unwrap_or(now + Duration::from_secs(1));
        if !shutting_down && sent_at.len() < opts.messages {
            wake = wake.min(next_tick.duration_since(epoch));
        }
        let wait = wake.saturating_sub(now).max(Duration::from_micros(100));
        socket.set_read_timeout(Some(wait))?;
    }
    let stats = conn.stats();
    Ok(Summary {
        rtts,
        datagrams_out: stats.datagrams_out,
        datagrams_in: stats.datagrams_in,
        fec_recovered: stats.fec_in.recovered,
    })
}

/// `--flag value` pairs into [`Options`].
#[allow(dead_code)] // the test includes this file for `run`
fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, Box<dyn Error>> {
    let mut o = Options::default();
    while let Some(flag) = args.next() {
        if flag == "--quiet" {
            o.quiet = true;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--addr" => o.addr = value,
            "--crypt" => o.crypt = value,
            "--key" => o.key = value,
            "--datashard" => o.fec.0 = value.parse()?,
            "--parityshard" => o.fec.1 = value.parse()?,
            "--preset" | "--mode" => o.preset = value,
            "--messages" => o.messages = value.parse()?,
            "--size" => o.size = value.parse()?,
            "--tick-ms" => o.tick = Duration::from_millis(value.parse()?),
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    Ok(o)
}

fn main() -> Result<(), Box<dyn Error>> {
    let opts = parse(std::env::args().skip(1))?;
    let s = run(&opts)?;
    let mut sorted = s.rtts.clone();
    sorted.sort_unstable();
    let ms = |d: Option<&Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1e3);
    println!(
        "{} round trips: min {:.1} ms, median {:.1} ms, max {:.1} ms; \
         datagrams out {}, in {}, FEC recovered {}",
        sorted.len(),
        ms(sorted.first()),
        ms(sorted.get(sorted.len() / 2)),
        ms(sorted.last()),
        s.datagrams_out,
        s.datagrams_in,
        s.fec_recovered
    );
    Ok(())
}

/// The game loop against the kcp-go echo server of
/// `testkit/interop/kcpgo-peer`: aes-128 with FEC 10/3, and plain. Without
/// Go the tests print `SKIPPED: ...` and pass; `KCPIO_REQUIRE_GO=1` makes
/// that a failure. They run with `cargo test --all-targets`, as this
/// example's unit tests.
#[cfg(test)]
mod tests {
    use super::{Options, run};
    use std::time::Duration;

    use kcpio_testkit::gopeer::{self, GoServer};

    /// The game loop talks to a kcp-go echo server with `crypt` and `fec`;
    /// every message comes back, in order.
    async fn against_kcpgo(crypt: &str, fec: (usize, usize)) {
        let Some(bin) = gopeer::binary() else {
            return;
        };
        let flags = gopeer::fast3_stream_flags(crypt, fec);
        let server = GoServer::spawn(&bin, "echo-server", &flags).await;
        let opts = Options {
            addr: server.addr().to_string(),
            crypt: crypt.into(),
            fec,
            messages: 50,
            // Bigger than one segment, so the echo crosses the ARQ in pieces.
            size: 3000,
            tick: Duration::from_millis(5),
            timeout: Duration::from_secs(20),
            quiet: true,
            ..Options::default()
        };
        let run = tokio::task::spawn_blocking(move || run(&opts).map_err(|e| e.to_string()))
            .await
            .expect("the game loop panicked");
        let summary =
            run.unwrap_or_else(|e| panic!("{crypt} fec {fec:?}: {e}; {:?}", server.log()));
        assert_eq!(summary.rtts.len(), 50);
        assert!(summary.datagrams_in > 0 && summary.datagrams_out > 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gameloop_aes128_fec_against_kcpgo() {
        against_kcpgo("aes-128", (10, 3)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gameloop_plain_against_kcpgo() {
        against_kcpgo("null", (0, 0)).await;
    }
}
