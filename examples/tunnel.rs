//! A TCP-over-KCP port forwarder with kcptun's flags.
//!
//! ```text
//! # far side: accept KCP on :4000 and dial the SSH server for each session
//! cargo run --release --example tunnel -- server --listen 127.0.0.1:4000 --target 127.0.0.1:22
//! # near side: accept TCP on :8388; each connection rides its own KCP session
//! cargo run --release --example tunnel -- client --listen 127.0.0.1:8388 --remote 127.0.0.1:4000
//! ssh -p 8388 127.0.0.1
//! ```
//!
//! Flags as kcptun spells them: `--crypt` (`aes`, `aes-128`, `salsa20`,
//! `none`, `null`, ...), `--key`, `--datashard`, `--parityshard`, `--mode`
//! (`normal`, `fast`, `fast2`, `fast3`), `--mtu`, `--sndwnd`, `--rcvwnd`, with
//! kcptun's defaults. Both sides must agree on `--crypt` and `--key`.
//!
//! On the wire this is **not** kcptun: kcptun multiplexes TCP connections
//! over one KCP session with smux, this example opens one KCP session per TCP
//! connection. KCP itself has no end-of-stream, so inside each session the
//! bytes travel in frames of `u16 big-endian length | bytes`: length 0 ends
//! one direction (the TCP half-close crosses the tunnel) and length `0xFFFF`
//! is a keepalive sent after 10 s of silence, so an idle but open connection
//! outlives the 30 s idle timeout that reaps sessions whose peer vanished.

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use kcpio::{Config, KcpListener, KcpStream, Key, Method, Preset};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Frame header value that ends one direction.
const FIN: u16 = 0;
/// Frame header value of a keepalive (no payload).
const KEEPALIVE: u16 = 0xFFFF;
/// Largest payload of one frame.
const MAX_FRAME: usize = 16 * 1024;
/// Silence on the TCP side after which a keepalive frame is sent.
const KEEPALIVE_EVERY: Duration = Duration::from_secs(10);
/// A session that hears nothing for this long is dropped.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

const USAGE: &str = "\
usage: tunnel client --listen ADDR --remote ADDR [options]
       tunnel server --listen ADDR --target ADDR [options]

options (kcptun's names and defaults):
  --crypt NAME        aes, aes-128, aes-192, salsa20, blowfish, twofish, cast5,
                      3des, tea, xtea, xor, sm4, aes-128-gcm, none, null   [aes]
  --key TEXT          pre-shared passphrase                     [it's a secrect]
  --datashard N       FEC data shards                                      [10]
  --parityshard N     FEC parity shards (0 with datashard 0 turns FEC off)  [3]
  --mode NAME         normal, fast, fast2, fast3                         [fast]
  --mtu N             largest datagram                                   [1350]
  --sndwnd N          send window, segments           [128 client, 1024 server]
  --rcvwnd N          receive window, segments        [512 client, 1024 server]";

/// Which end of the tunnel this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Accepts TCP, opens KCP sessions.
    Client,
    /// Accepts KCP sessions, dials TCP.
    Server,
}

/// Parsed command line.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) role: Role,
    pub(crate) listen: String,
    /// Client: the tunnel server's KCP address. Server: the TCP target.
    pub(crate) peer: String,
    pub(crate) crypt: Method,
    pub(crate) key: String,
    pub(crate) datashard: usize,
    pub(crate) parityshard: usize,
    pub(crate) mode: Preset,
    pub(crate) mtu: usize,
    pub(crate) sndwnd: u16,
    pub(crate) rcvwnd: u16,
}

impl Options {
    /// kcptun's defaults for `role`.
    pub(crate) fn new(role: Role, listen: &str, peer: &str) -> Self {
        let (sndwnd, rcvwnd) = match role {
            Role::Client => (128, 512),
            Role::Server => (1024, 1024),
        };
        Self {
            role,
            listen: listen.to_owned(),
            peer: peer.to_owned(),
            crypt: Method::Aes,
            key: "it's a secrect".to_owned(),
            datashard: 10,
            parityshard: 3,
            mode: Preset::Fast,
            mtu: 1350,
            sndwnd,
            rcvwnd,
        }
    }

    /// The session configuration these options describe.
    pub(crate) fn config(&self) -> Result<Config, kcpio::ConfigError> {
        Config::builder()
            .preset(self.mode)
            .crypto(self.crypt, Key::passphrase(self.key.as_str()))
            .fec(self.datashard, self.parityshard)
            .mtu(self.mtu)
            .window(self.sndwnd, self.rcvwnd)
            .stream(true)
            .socket_buffers(4 << 20, 4 << 20)
            .idle_timeout(IDLE_TIMEOUT)
            .build()
    }
}

/// Parses `client|server` and the flags; `Ok(None)` asks for the usage text.
pub(crate) fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let role = match it.next().as_deref() {
        Some("client") => Role::Client,
        Some("server") => Role::Server,
        Some("-h" | "--help") | None => return Ok(None),
        Some(other) => return Err(format!("expected 'client' or 'server', not '{other}'")),
    };
    let peer_flag = match role {
        Role::Client => "--remote",
        Role::Server => "--target",
    };
    let mut o = Options::new(role, "", "");
    let mut listen = None;
    let mut peer = None;
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| -> Result<usize, String> {
            v.parse()
                .map_err(|_| format!("{flag}: '{v}' is not a number"))
        };
        let window = |v: &str| -> Result<u16, String> {
            v.parse()
                .map_err(|_| format!("{flag}: '{v}' is not a window size (1..=65535)"))
        };
        match flag.as_str() {
            "--listen" | "-l" => listen = Some(value),
            f if f == peer_flag
                || (f == "-r" && role == Role::Client)
                || (f == "-t" && role == Role::Server) =>
            {
                peer = Some(value);
            }
            "--crypt" => {
                o.crypt = Method::from_name(&value)
                    .ok_or_else(|| format!("--crypt: unknown cipher '{value}'"))?;
            }
            "--key" => o.key = value,
            "--datashard" | "--ds" => o.datashard = number(&value)?,
            "--parityshard" | "--ps" => o.parityshard = number(&value)?,
            "--mode" => {
                o.mode = Preset::from_name(&value)
                    .ok_or_else(|| format!("--mode: unknown mode '{value}'"))?;
            }
            "--mtu" => o.mtu = number(&value)?,
            "--sndwnd" => o.sndwnd = window(&value)?,
            "--rcvwnd" => o.rcvwnd = window(&value)?,
            other => return Err(format!("unknown flag '{other}'")),
        }
    }
    o.listen = listen.ok_or("--listen is required")?;
    o.peer = peer.ok_or_else(|| format!("{peer_flag} is required"))?;
    Ok(Some(o))
}

/// Client side: every TCP connection accepted on `tcp` gets its own KCP
/// session to `remote`. Runs until accepting fails.
pub(crate) async fn run_client(
    tcp: TcpListener,
    remote: SocketAddr,
    config: Config,
) -> io::Result<()> {
    loop {
        let (conn, from) = tcp.accept().await?;
        let config = config.clone();
        tokio::spawn(async move {
            let _ = conn.set_nodelay(true);
            let res = async {
                let kcp = KcpStream::connect(remote, &config).await?;
                forward(conn, kcp).await
            }
            .await;
            log_end(from, res);
        });
    }
}

/// Server side: every KCP session accepted on `kcp` dials `target` and
/// forwards both ways. Runs until accepting fails.
pub(crate) async fn run_server(kcp: KcpListener, target: String) -> io::Result<()> {
    loop {
        let (session, from) = kcp.accept().await?;
        let target = target.clone();
        tokio::spawn(async move {
            let res = async {
                let conn = TcpStream::connect(&target).await?;
                let _ = conn.set_nodelay(true);
                forward(conn, session).await
            }
            .await;
            log_end(from, res);
        });
    }
}

fn log_end(from: SocketAddr, res: io::Result<(u64, u64)>) {
    match res {
        Ok((up, down)) => eprintln!("{from}: closed, {up} bytes to KCP, {down} bytes from KCP"),
        Err(e) => eprintln!("{from}: ended with {e}"),
    }
}

/// Copies both ways between a TCP connection and a KCP session until both
/// directions have ended; a TCP half-close becomes a FIN frame and a FIN
/// frame becomes a TCP half-close. Returns (bytes TCP → KCP, KCP → TCP).
pub(crate) async fn forward(tcp: TcpStream, kcp: KcpStream) -> io::Result<(u64, u64)> {
    let (tcp_rd, tcp_wr) = tcp.into_split();
    let (kcp_rd, mut kcp_wr) = kcp.into_split();
    let up = async {
        let n = tcp_to_frames(tcp_rd, &mut kcp_wr).await?;
        Ok::<_, io::Error>(n)
    };
    let down = frames_to_tcp(kcp_rd, tcp_wr);
    let (up, down) = tokio::try_join!(up, down)?;
    // Both directions are over: wait until the peer acknowledged our FIN.
    kcp_wr.shutdown().await?;
    Ok((up, down))
}

/// TCP bytes into frames; a FIN frame at end of stream. Keepalives while the
/// TCP side is quiet.
async fn tcp_to_frames<R, W>(mut tcp: R, kcp: &mut W) -> io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 2 + MAX_FRAME];
    let mut total = 0u64;
    loop {
        let read = tokio::time::timeout(KEEPALIVE_EVERY, tcp.read(&mut buf[2..])).await;
        let n = match read {
            Err(_) => {
                kcp.write_all(&KEEPALIVE.to_be_bytes()).await?;
                continue;
            }
            Ok(r) => r?,
        };
        if n == 0 {
            kcp.write_all(&FIN.to_be_bytes()).await?;
            return Ok(total);
        }
        // n <= MAX_FRAME < KEEPALIVE
        let len = u16::try_from(n).map_err(io::Error::other)?;
        buf[..2].copy_from_slice(&len.to_be_bytes());
        kcp.write_all(&buf[..2 + n]).await?;
        total += n as u64;
    }
}

/// Frames into TCP bytes; a FIN frame shuts the TCP write side down.
async fn frames_to_tcp<R, W>(mut kcp: R, mut tcp: W) -> io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; MAX_FRAME];
    let mut total = 0u64;
    loop {
        let mut hdr = [0u8; 2];
        kcp.read_exact(&mut hdr).await?;
        match u16::from_be_bytes(hdr) {
            FIN => {
                tcp.shutdown().await?;
                return Ok(total);
            }
            KEEPALIVE => {}
            len => {
                let len = usize::from(len);
                let Some(payload) = buf.get_mut(..len) else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "tunnel frame too large",
                    ));
                };
                kcp.read_exact(payload).await?;
                tcp.write_all(payload).await?;
                total += len as u64;
            }
        }
    }
}

async fn run(o: Options) -> Result<(), Box<dyn std::error::Error>> {
    let config = o.config()?;
    match o.role {
        Role::Client => {
            let remote = tokio::net::lookup_host(&o.peer)
                .await?
                .next()
                .ok_or("--remote resolves to no address")?;
            let tcp = TcpListener::bind(&o.listen).await?;
            eprintln!(
                "tunnel client: TCP {} -> KCP {remote} ({}, mode {:?}, FEC {}/{})",
                tcp.local_addr()?,
                o.crypt.name(),
                o.mode,
                o.datashard,
                o.parityshard
            );
            run_client(tcp, remote, config).await?;
        }
        Role::Server => {
            let kcp = KcpListener::bind(&o.listen, &config).await?;
            eprintln!(
                "tunnel server: KCP {} -> TCP {} ({}, mode {:?}, FEC {}/{})",
                kcp.local_addr()?,
                o.peer,
                o.crypt.name(),
                o.mode,
                o.datashard,
                o.parityshard
            );
            run_server(kcp, o.peer.clone()).await?;
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let o = match parse_args(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tunnel: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(o).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tunnel: {e}");
            ExitCode::FAILURE
        }
    }
}
