//! The command line: clap's definitions of kcptun's flags, and Go's
//! single-dash long flags turned into clap's.

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

/// kcptun-compatible tunnel over kcpio.
#[derive(Parser, Debug)]
#[command(
    name = "kcpio-tunnel",
    bin_name = "kcpio-tunnel",
    version,
    about,
    disable_version_flag = true,
    disable_help_subcommand = true,
    propagate_version = true
)]
pub(crate) struct Cli {
    /// Print the version (kcptun's -v; -V too)
    #[arg(short = 'v', short_alias = 'V', long, action = ArgAction::Version, global = true)]
    version: Option<bool>,
    /// Which end of the tunnel to run.
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

/// kcptun's `--mode` profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// nodelay 0, interval 40, resend 2, nc 1
    Normal,
    /// nodelay 0, interval 30, resend 2, nc 1
    Fast,
    /// nodelay 1, interval 20, resend 2, nc 1
    Fast2,
    /// nodelay 1, interval 10, resend 2, nc 1
    Fast3,
    /// --nodelay, --interval, --resend and --nc as given
    Manual,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.to_possible_value().map(|v| v.get_name().to_owned());
        f.write_str(name.as_deref().unwrap_or("?"))
    }
}

impl Mode {
    /// kcptun's (nodelay, interval, resend, nc) for the mode; `None` for manual.
    pub(crate) fn nodelay(self) -> Option<(u32, u32, u32, u32)> {
        match self {
            Self::Normal => Some((0, 40, 2, 1)),
            Self::Fast => Some((0, 30, 2, 1)),
            Self::Fast2 => Some((1, 20, 2, 1)),
            Self::Fast3 => Some((1, 10, 2, 1)),
            Self::Manual => None,
        }
    }
}

/// `--congestion` (kcpio only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum CongestionArg {
    /// the model-based controller: paces at the measured rate, ignores random loss
    #[value(alias = "model")]
    Bbr,
    /// kcptun's: the window only (nc=1)
    None,
    /// KCP's loss-based window (nc=0)
    Kcp,
}

/// Which end of the tunnel.
#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Accept TCP (UDP with --udp, both with --udplisten), carry each connection (flow) to the server.
    Client(ClientArgs),
    /// Accept KCP sessions, dial the target for each stream (flow with --udp, both with --udptarget).
    Server(ServerArgs),
    /// Print the manual page (roff) to stdout.
    #[command(hide = true)]
    Man,
}

/// `kcpio-tunnel client` flags (kcptun-client's).
#[derive(Args, Debug)]
pub(crate) struct ClientArgs {
    /// local listen address (UDP with --udp)
    #[arg(short = 'l', long, default_value = ":12948")]
    pub(crate) localaddr: String,
    /// kcp server address: host:port, or host:min-max for a random port of the range per session (resolved on each connect)
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
    /// kcpio only: also listen on this UDP address and carry its flows beside the TCP streams, as FEC datagrams of the first session (the server needs --udptarget; a kcptun server or one without it carries the TCP streams only, and the UDP flows are dropped and counted). Not with --udp
    #[arg(long)]
    pub(crate) udplisten: Option<String>,
    #[command(flatten)]
    pub(crate) common: Common,
}

/// `kcpio-tunnel server` flags (kcptun-server's).
#[derive(Args, Debug)]
pub(crate) struct ServerArgs {
    /// kcp server listen address: host:port, or host:min-max to listen on every port of the range
    #[arg(short = 'l', long, default_value = ":29900")]
    pub(crate) listen: String,
    /// target server address (host:port, or a unix socket path; a UDP host:port with --udp)
    #[arg(short = 't', long, default_value = "127.0.0.1:12948")]
    pub(crate) target: String,
    /// kcpio only: also send the UDP flows of clients with --udplisten to this UDP host:port, beside the streams to -t (each flow from a socket of its own). Not with --udp
    #[arg(long)]
    pub(crate) udptarget: Option<String>,
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
    #[arg(long, value_enum, default_value = "fast")]
    pub(crate) mode: Mode,
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
    /// seconds between heartbeats (smux's; with --udp, which has no smux, the session's keepalive probe, 0 for none, and the session ends after max(30, 3 x this) seconds of silence)
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
    /// seconds between stats lines in the log, written only when something changed; 0 turns them off (SIGUSR1 writes one at any time)
    #[arg(long, default_value_t = 60)]
    pub(crate) snmpperiod: u64,
    /// specify a log file to append to, default goes to stderr
    #[arg(long, default_value = "")]
    pub(crate) log: String,
    /// to suppress the 'stream open/close' messages
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) quiet: Option<bool>,
    /// to emulate a TCP connection(linux): each KCP packet rides a TCP segment of a real handshake's flow, as kcptun's --tcp (tcpraw); needs root (CAP_NET_RAW, CAP_NET_ADMIN)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) tcp: Option<bool>,
    /// config from json file, which will override the command from shell
    #[arg(short = 'c', default_value = "")]
    pub(crate) c: String,
    /// kcpio only: streams forwarded at once, all sessions together; each holds a descriptor (server: to the target; client: the local connection). Streams beyond are closed at once (server: a FIN; client: the local connection is closed) [default: the descriptor limit (ulimit -n) less 128, at most 8192]
    #[arg(long)]
    pub(crate) maxstreams: Option<usize>,
    /// kcpio only: the most of --maxstreams one client (a source address, all its sessions together) may hold (server), or one of the --conn sessions (client) [default: server half of --maxstreams, client all of it]
    #[arg(long)]
    pub(crate) sessionstreams: Option<usize>,
    /// kcpio only, server: dials to the target in flight at once, all sessions together; one client (source address) may have half. A target that refuses or times out makes new streams be refused for a back-off of 0.1 s doubling to 5 s
    #[arg(long, default_value_t = 128)]
    pub(crate) maxdials: usize,
    /// kcpio only, server: seconds a stream may wait for a dial slot and its dial to the target together
    #[arg(long, default_value_t = 10)]
    pub(crate) dialtimeout: u64,
    /// kcpio only: MiB read from the connections (server: targets; client: local applications) that the sessions may hold toward the other end at once (smux send buffers and KCP send queues), plus what copy buffers hold for connections slow to read, all sessions together; on a server one client (source address) may hold half. Forwarders stop reading while it is spent
    #[arg(long, default_value_t = crate::limits::MAX_BUFFER_DEFAULT_MIB)]
    pub(crate) maxbuffer: usize,
    /// kcpio only: congestion controller (model is an alias of bbr) [default: bbr; with --mode manual, --nc decides]
    #[arg(long, value_enum)]
    pub(crate) congestion: Option<CongestionArg>,
    /// kcpio only, server: do not follow a client to a new address (NAT rebinding, a new network); with aes-128-gcm a session follows its client once the client proves it receives there (other ciphers never follow). Client: no quiet probe (a window probe after 400 ms without data, which lets a server find a download-only client that moved)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) nomigrate: Option<bool>,
    /// kcpio only: keep --datashard/--parityshard's fixed shape with kcpio peers too. By default two kcpio ends (both offering it) size each group's parity to the loss the receiver reports (none on a clean path, up to half the data on a lossy one); kcptun peers always get the fixed shape
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) fixedfec: Option<bool>,
    /// kcpio only, client: ignore ICMP port unreachable on an established session (by default a streak of them with nothing from the server in between ends the session within about a second, as a TCP reset would; ICMP is not authenticated)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) noicmpreset: Option<bool>,
    /// kcpio only: carry UDP instead of TCP. The client listens on UDP -l and gives each source address a flow; the server sends each flow to UDP -t from a socket of its own. All flows of a client cross one session as FEC-protected datagrams whose parity adapts to the loss (negotiated: both ends must be kcpio with --udp). --datashard/--parityshard only frame the session's stream (its keepalive probes here); 0 is fine, but both ends must agree
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub(crate) udp: Option<bool>,
    /// kcpio only, --udp/--udplisten/--udptarget: the most flows at once (client: source addresses; server: per session, and --maxstreams over all sessions, each flow holding a descriptor; at most 1048576). Datagrams of a new flow beyond it are dropped and counted
    #[arg(long, default_value_t = 1024)]
    pub(crate) udpflows: usize,
    /// kcpio only, --udp/--udplisten/--udptarget: seconds without a datagram either way after which a flow expires (its server socket closes); the next datagram from that source opens a new flow
    #[arg(long, default_value_t = 180)]
    pub(crate) udpidle: u64,
    /// kcpio only, --udp/--udplisten/--udptarget: the datagram FEC group deadline in ms (1..=1000), about the most delay a datagram rebuilt from parity gets; lower spends more parity on bursty traffic
    #[arg(long, default_value_t = 15)]
    pub(crate) udpdeadline: u64,
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    #[test]
    fn clap_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
