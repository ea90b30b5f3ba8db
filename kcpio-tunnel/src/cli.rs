//! The command line: clap's definitions of kcptun's flags, and Go's
//! single-dash long flags turned into clap's.

use clap::{Args, Parser, Subcommand};

/// kcptun-compatible tunnel over kcpio.
#[derive(Parser, Debug)]
#[command(name = "tunnel", version, about)]
pub(crate) struct Cli {
    /// Which end of the tunnel to run.
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

/// Which end of the tunnel.
#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Accept TCP, carry each connection as a stream to the server.
    Client(ClientArgs),
    /// Accept KCP sessions, dial the target for each stream.
    Server(ServerArgs),
}

/// `tunnel client` flags (kcptun-client's).
#[derive(Args, Debug)]
pub(crate) struct ClientArgs {
    /// local listen address
    #[arg(short = 'l', long, default_value = ":12948")]
    pub(crate) localaddr: String,
    /// kcp server address
    #[arg(short = 'r', long, default_value = "vps:29900")]
    pub(crate) remoteaddr: String,
    /// set num of UDP connections to server
    #[arg(long, default_value_t = 1)]
    pub(crate) conn: usize,
    /// set auto expiration time(in seconds) for a single UDP connection, 0 to disable
    #[arg(long, default_value_t = 0)]
    pub(crate) autoexpire: u64,
    /// set how long an expired connection can live (in seconds)
    #[arg(long, default_value_t = 600)]
    pub(crate) scavengettl: u64,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// `tunnel server` flags (kcptun-server's).
#[derive(Args, Debug)]
pub(crate) struct ServerArgs {
    /// kcp server listen address
    #[arg(short = 'l', long, default_value = ":29900")]
    pub(crate) listen: String,
    /// target server address (host:port, or a unix socket path)
    #[arg(short = 't', long, default_value = "127.0.0.1:12948")]
    pub(crate) target: String,
    /// start profiling server on :6060 (not supported, ignored)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) pprof: Option<bool>,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// Flags both ends take.
#[derive(Args, Debug)]
pub(crate) struct Common {
    /// pre-shared secret between client and server
    #[arg(long, env = "KCPTUN_KEY", default_value = "it's a secrect")]
    pub(crate) key: String,
    /// aes, aes-128, aes-192, salsa20, blowfish, twofish, cast5, 3des, tea, xtea, xor, sm4, none, null, aes-128-gcm
    #[arg(long, default_value = "aes")]
    pub(crate) crypt: String,
    /// profiles: fast3, fast2, fast, normal, manual
    #[arg(long, default_value = "fast")]
    pub(crate) mode: String,
    /// set maximum transmission unit for UDP packets
    #[arg(long, default_value_t = 1350)]
    pub(crate) mtu: usize,
    /// set send window size(num of packets) [client 128, server 1024]
    #[arg(long)]
    pub(crate) sndwnd: Option<u16>,
    /// set receive window size(num of packets) [client 512, server 1024]
    #[arg(long)]
    pub(crate) rcvwnd: Option<u16>,
    /// set reed-solomon erasure coding - datashard
    #[arg(long, visible_alias = "ds", default_value_t = 10)]
    pub(crate) datashard: usize,
    /// set reed-solomon erasure coding - parityshard
    #[arg(long, visible_alias = "ps", default_value_t = 3)]
    pub(crate) parityshard: usize,
    /// set DSCP(6bit)
    #[arg(long, default_value_t = 0)]
    pub(crate) dscp: u8,
    /// disable compression
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) nocomp: Option<bool>,
    /// flush ack immediately when a packet is received
    #[arg(long, hide = true, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) acknodelay: Option<bool>,
    #[arg(long, hide = true, default_value_t = 0)]
    pub(crate) nodelay: u32,
    #[arg(long, hide = true, default_value_t = 50)]
    pub(crate) interval: u32,
    #[arg(long, hide = true, default_value_t = 0)]
    pub(crate) resend: u32,
    #[arg(long, hide = true, default_value_t = 0)]
    pub(crate) nc: u32,
    /// per-socket buffer in bytes
    #[arg(long, default_value_t = 4_194_304)]
    pub(crate) sockbuf: usize,
    /// specify smux version, available 1,2 (the server detects the client's)
    #[arg(long, default_value_t = 1)]
    pub(crate) smuxver: u8,
    /// the overall de-mux buffer in bytes
    #[arg(long, default_value_t = 4_194_304)]
    pub(crate) smuxbuf: usize,
    /// per stream receive buffer in bytes, smux v2+
    #[arg(long, default_value_t = 2_097_152)]
    pub(crate) streambuf: u32,
    /// smux max frame size
    #[arg(long, default_value_t = 32_768)]
    pub(crate) framesize: usize,
    /// seconds between heartbeats
    #[arg(long, default_value_t = 10)]
    pub(crate) keepalive: u64,
    /// seconds the second direction of a connection may outlive the first, 0 until it ends [client 0, server 30]
    #[arg(long)]
    pub(crate) closewait: Option<u64>,
    /// send rate limit per session in bytes/s, 0 to disable
    #[arg(long, default_value_t = 0)]
    pub(crate) ratelimit: u64,
    /// collect snmp to file (not supported, ignored)
    #[arg(long, default_value = "")]
    pub(crate) snmplog: String,
    /// seconds between stats lines in the log
    #[arg(long, default_value_t = 60)]
    pub(crate) snmpperiod: u64,
    /// specify a log file to output, default goes to stderr
    #[arg(long, default_value = "")]
    pub(crate) log: String,
    /// to suppress the 'stream open/close' messages
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) quiet: Option<bool>,
    /// to emulate a TCP connection(linux) (not supported)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) tcp: Option<bool>,
    /// config from json file, which will override the command from shell
    #[arg(short = 'c', default_value = "")]
    pub(crate) c: String,
    /// kcpio only: congestion controller: model (paces at the measured rate, ignores random loss), none (kcptun's: the window only, nc=1) or kcp (nc=0) [default: model; with --mode manual, --nc decides]
    #[arg(long)]
    pub(crate) congestion: Option<String>,
    /// kcpio only: windows grow from --sndwnd/--rcvwnd up to this many segments as the path needs, at most about 2 x maxwnd x mtu bytes each way per session; 0 keeps them fixed, as kcptun [default: 16384 with the model controller, else 0]
    #[arg(long)]
    pub(crate) maxwnd: Option<u16>,
}

/// Go's flag package takes `-name` for `--name`; clap wants two dashes.
pub(crate) fn go_style(args: impl IntoIterator<Item = String>) -> Vec<String> {
    args.into_iter()
        .map(|a| {
            let b = a.as_bytes();
            if b.len() > 2 && b[0] == b'-' && b[1].is_ascii_alphabetic() && !a.starts_with("--") {
                let name = a[1..].split('=').next().unwrap_or("");
                if name.len() > 1 {
                    return format!("-{a}");
                }
            }
            a
        })
        .collect()
}
