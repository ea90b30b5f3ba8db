//! `--tcp` (fake TCP) in network namespaces: client — router — server, each
//! end a real process (`kcpio-tunnel` or Debian's kcptun) inside its own
//! namespace, the router between them playing the network: one that drops
//! all UDP, a strict stateful firewall with NAT, GRO on the ends. Every
//! link has IPv4 and IPv6 (ULA, `nodad`) addresses; a path says which one
//! the tunnel uses.
//!
//! Needs root (namespaces, raw sockets, nftables); without it every test
//! prints `SKIPPED` and passes. The kcptun tests also need `kcptun-client`
//! (`scripts/install-kcptun.sh`; `KCPIO_REQUIRE_KCPTUN=1` makes its absence
//! a failure). The data source and sink are this test binary itself, run
//! inside the namespaces as the ignored test `netns_helper`. Private
//! namespaces only; everything they hold dies with them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kcpio_testkit::pattern;

const EXE: &str = env!("CARGO_BIN_EXE_kcpio-tunnel");
const SERVER_IP: &str = "10.77.2.2";
/// The server's IPv6 address, as a host in an address with a port.
const SERVER_IP6: &str = "[fd77:2::2]";
const SOURCE: &str = "127.0.0.1:5201";
const ENTRY: &str = "127.0.0.1:12948";
const MB: u64 = 1 << 20;
/// A fetch that stalls this long (no byte) fails.
const LONG: Duration = Duration::from_secs(60);

/// Runs `cmd args`, returning its output (never panics on failure).
fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

/// Runs `cmd args` and panics with its stderr when it fails.
fn must(cmd: &str, args: &[&str]) -> String {
    let out = run(cmd, args);
    assert!(
        out.status.success(),
        "{cmd} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether namespaces can be made here (root); prints `SKIPPED` if not.
fn privileged(test: &str) -> bool {
    let probe = format!("kftprobe{}", std::process::id());
    let ok = run("ip", &["netns", "add", &probe]).status.success();
    if ok {
        let _ = run("ip", &["netns", "del", &probe]);
    } else {
        println!("SKIPPED {test}: needs root (network namespaces, raw sockets, nftables)");
    }
    ok
}

/// Whether Debian's kcptun is here; prints `SKIPPED` when it is not.
fn have_kcptun(test: &str) -> bool {
    kcpio_testkit::kcptun::available(test)
}

/// What the router does to the traffic between the ends.
#[derive(Clone, Copy, Default)]
struct PathOpts {
    /// Drop every UDP packet.
    drop_udp: bool,
    /// The strict stateful firewall (policy drop, `ct state invalid
    /// counter drop`, loose tracking and liberal windows off), conntrack
    /// timeouts lowered to `idle_timeout` seconds.
    strict: Option<u32>,
    /// Masquerade the client behind the router's server-side address.
    nat: bool,
    /// GRO on at both ends.
    gro: bool,
    /// The tunnel runs over IPv6 (the server's [`SERVER_IP6`]).
    v6: bool,
}

/// Three namespaces `<p>c — <p>r — <p>s`; deleted on drop.
struct Net {
    c: String,
    r: String,
    s: String,
    /// The server's address the tunnel uses ([`SERVER_IP`] or [`SERVER_IP6`]).
    server_ip: &'static str,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Net {
    fn new(opts: PathOpts) -> Self {
        let p = format!(
            "kft{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let net = Self {
            c: format!("{p}c"),
            r: format!("{p}r"),
            s: format!("{p}s"),
            server_ip: if opts.v6 { SERVER_IP6 } else { SERVER_IP },
        };
        for ns in [&net.c, &net.r, &net.s] {
            must("ip", &["netns", "add", ns]);
            net.exec(ns, "ip", &["link", "set", "lo", "up"]);
        }
        let link = |a: &str, an: &str, b: &str, bn: &str| {
            must(
                "ip",
                &[
                    "link", "add", an, "netns", a, "type", "veth", "peer", "name", bn, "netns", b,
                ],
            );
        };
        link(&net.c, "c0", &net.r, "rc");
        link(&net.r, "rs", &net.s, "s0");
        for (ns, dev, addr) in [
            (&net.c, "c0", "10.77.1.2/24"),
            (&net.r, "rc", "10.77.1.1/24"),
            (&net.r, "rs", "10.77.2.1/24"),
            (&net.s, "s0", "10.77.2.2/24"),
        ] {
            net.exec(ns, "ip", &["addr", "add", addr, "dev", dev]);
            net.exec(ns, "ip", &["link", "set", dev, "up"]);
        }
        for (ns, dev, addr) in [
            (&net.c, "c0", "fd77:1::2/64"),
            (&net.r, "rc", "fd77:1::1/64"),
            (&net.r, "rs", "fd77:2::1/64"),
            (&net.s, "s0", "fd77:2::2/64"),
        ] {
            // `nodad`: usable at once, no duplicate detection to wait for.
            net.exec(ns, "ip", &["-6", "addr", "add", addr, "dev", dev, "nodad"]);
        }
        net.exec(
            &net.c,
            "ip",
            &["-6", "route", "add", "default", "via", "fd77:1::1"],
        );
        net.exec(
            &net.s,
            "ip",
            &["-6", "route", "add", "default", "via", "fd77:2::1"],
        );
        net.exec(&net.r, "sysctl", &["-qw", "net.ipv6.conf.all.forwarding=1"]);
        net.exec(
            &net.c,
            "ip",
            &["route", "add", "default", "via", "10.77.1.1"],
        );
        net.exec(
            &net.s,
            "ip",
            &["route", "add", "default", "via", "10.77.2.1"],
        );
        net.exec(&net.r, "sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
        let mut rules = String::new();
        if let Some(idle) = opts.strict {
            // Conntrack must be loaded before its sysctls exist: the ruleset
            // below loads it, so write the rules first.
            rules.push_str(
                "table inet fw {\n chain transit { type filter hook forward priority 0; policy drop;\n  \
                 ct state invalid counter drop\n  ct state established,related counter accept\n  \
                 iifname \"rc\" tcp dport 29900 tcp flags & (syn|ack|fin|rst) == syn ct state new counter accept\n  \
                 meta l4proto udp counter drop\n }\n}\n",
            );
            net.nft(&net.r, &rules);
            rules.clear();
            for (key, value) in [
                ("nf_conntrack_tcp_loose", 0),
                ("nf_conntrack_tcp_be_liberal", 0),
                ("nf_conntrack_tcp_timeout_established", idle),
                ("nf_conntrack_tcp_timeout_unacknowledged", idle),
            ] {
                let set = format!("net.netfilter.{key}={value}");
                net.exec(&net.r, "sysctl", &["-qw", &set]);
            }
        }
        if opts.drop_udp {
            rules.push_str(
                "table inet blockudp {\n chain transit { type filter hook forward priority 0;\n  \
                 meta l4proto udp counter drop\n }\n}\n",
            );
        }
        if opts.nat {
            rules.push_str(
                "table ip nat {\n chain post { type nat hook postrouting priority srcnat;\n  \
                 oifname \"rs\" masquerade\n }\n}\n\
                 table ip6 nat {\n chain post { type nat hook postrouting priority srcnat;\n  \
                 oifname \"rs\" masquerade\n }\n}\n",
            );
        }
        if !rules.is_empty() {
            net.nft(&net.r, &rules);
        }
        if opts.gro {
            net.exec(&net.c, "ethtool", &["-K", "c0", "gro", "on"]);
            net.exec(&net.s, "ethtool", &["-K", "s0", "gro", "on"]);
        }
        net
    }

    /// Runs `cmd` in namespace `ns`; panics when it fails.
    fn exec(&self, ns: &str, cmd: &str, args: &[&str]) -> String {
        must("ip", &[&["netns", "exec", ns, cmd], args].concat())
    }

    fn nft(&self, ns: &str, rules: &str) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("nft");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(rules.as_bytes())
            .expect("nft rules");
        assert!(
            child.wait().expect("nft").success(),
            "nft rejected:\n{rules}"
        );
    }

    /// Starts `cmd` in `ns`, its stderr into `log` (a file path) or nowhere.
    fn spawn(&self, ns: &str, cmd: &str, args: &[&str], log: Option<&str>) -> Proc {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("log file")),
            None => Stdio::null(),
        };
        let child = Command::new("ip")
            .args([&["netns", "exec", ns, cmd], args].concat())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
        Proc(child)
    }

    /// The source: serves `bytes` of the pattern to each connection at
    /// 127.0.0.1:5201 in the server namespace.
    fn source(&self, bytes: u64) -> Proc {
        let spec = format!("serve {bytes}");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.s])
            .args(helper_args())
            .env("KCPIO_FT_HELPER", spec)
            .stdout(Stdio::null())
            .spawn()
            .expect("helper");
        Proc(child)
    }

    /// Fetches through the tunnel entry in the client namespace, pausing
    /// `gap` after half; `Some(bytes)` when every byte matched the pattern.
    fn fetch(&self, gap: Duration, deadline: Duration) -> Result<u64, String> {
        let spec = format!("fetch {} {}", gap.as_secs(), deadline.as_secs());
        let out = Command::new("ip")
            .args(["netns", "exec", &self.c])
            .args(helper_args())
            .env("KCPIO_FT_HELPER", spec)
            .output()
            .expect("helper");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("FETCHED "))
            .ok_or_else(|| format!("no result: {text}"))?;
        let (n, verdict) = line.split_once(' ').ok_or("bad result")?;
        let n: u64 = n.parse().map_err(|_| "bad count")?;
        if verdict == "ok" {
            Ok(n)
        } else {
            Err(format!("{n} bytes, {verdict}"))
        }
    }

    /// kcpio's firewall tables in `ns`.
    fn kcpio_tables(&self, ns: &str) -> Vec<String> {
        self.exec(ns, "nft", &["list", "tables"])
            .lines()
            .filter(|l| l.contains("kcpio_ftcp_"))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in [&self.c, &self.r, &self.s] {
            let _ = run("ip", &["netns", "del", ns]);
        }
    }
}

/// The helper's command line: this test binary, just the ignored helper.
fn helper_args() -> Vec<String> {
    let exe = std::env::current_exe().expect("test binary");
    vec![
        exe.to_string_lossy().into_owned(),
        "netns_helper".into(),
        "--exact".into(),
        "--ignored".into(),
        "--nocapture".into(),
    ]
}

/// A child process, stopped (SIGTERM, then SIGKILL after 5 s) on drop.
struct Proc(Child);

impl Proc {
    fn signal(&self, sig: &str) {
        let _ = run("kill", &[sig, &self.0.id().to_string()]);
    }

    /// SIGTERM and wait (bounded): a clean exit.
    fn stop(&mut self) {
        self.signal("-TERM");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// SIGKILL: no clean-up at all.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            self.stop();
        }
    }
}

/// Which program plays an end.
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    Kcpio,
    Kcptun,
}

/// Starts a tunnel end in its namespace: the server on the path's server
/// address, port 29900, forwarding to the source, the client's entry at
/// 127.0.0.1:12948.
fn start(net: &Net, end: End, server: bool, flags: &str, log: Option<&str>) -> Proc {
    let remote = format!("{}:29900", net.server_ip);
    let mut args: Vec<&str> = Vec::new();
    let (ns, program) = match (end, server) {
        (End::Kcpio, true) => {
            args.extend(["server", "-l", &remote, "-t", SOURCE]);
            (&net.s, EXE)
        }
        (End::Kcpio, false) => {
            args.extend(["client", "-l", ENTRY, "-r", &remote]);
            (&net.c, EXE)
        }
        (End::Kcptun, true) => {
            args.extend(["-l", &remote, "-t", SOURCE]);
            (&net.s, "kcptun-server")
        }
        (End::Kcptun, false) => {
            args.extend(["-l", ENTRY, "-r", &remote]);
            (&net.c, "kcptun-client")
        }
    };
    args.extend(flags.split_whitespace());
    net.spawn(ns, program, &args, log)
}

/// Waits until `ns` has something bound to TCP or UDP `port` (the tunnel
/// client's entry, a server's kernel listener or UDP socket), up to 10 s.
fn wait_listening(net: &Net, ns: &str, port: u16) {
    let pat = format!(":{port} ");
    for _ in 0..200 {
        if net.exec(ns, "ss", &["-Hltun"]).contains(&pat) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listening on port {port} in {ns}");
}

/// One download of `bytes` through `client` → `server` with `flags`, over
/// a fresh path; returns the fetch result and the kcpio server's log.
fn transfer(
    opts: PathOpts,
    client: End,
    server: End,
    flags: &str,
    bytes: u64,
    gap: Duration,
    deadline: Duration,
) -> (Result<u64, String>, String) {
    let net = Net::new(opts);
    let log = format!("/tmp/kcpio-faketcp-{}.log", net.s);
    let _source = net.source(bytes);
    let server_flags = format!("{flags} --snmpperiod 1");
    let mut srv = start(
        &net,
        server,
        true,
        if server == End::Kcpio {
            &server_flags
        } else {
            flags
        },
        Some(&log),
    );
    wait_listening(&net, &net.s, 29900);
    let mut cli = start(&net, client, false, flags, None);
    wait_listening(&net, &net.c, 12948);
    let got = net.fetch(gap, deadline);
    if server == End::Kcpio {
        srv.signal("-USR1");
        std::thread::sleep(Duration::from_millis(300));
    }
    if let Some(idle) = opts.strict {
        let fw = net.exec(&net.r, "nft", &["list", "table", "inet", "fw"]);
        let invalid = fw
            .lines()
            .find(|l| l.contains("ct state invalid"))
            .unwrap_or_default()
            .to_owned();
        assert!(
            invalid.contains("packets 0 "),
            "the strict firewall (timeouts {idle} s) found invalid packets: {invalid}\n{fw}"
        );
        // The router's conntrack still holds the flow as a proper TCP
        // connection after the idle gap: established and assured.
        let family = if opts.v6 { "ipv6" } else { "ipv4" };
        let ct = net.exec(
            &net.r,
            "conntrack",
            &["-L", "-f", family, "-p", "tcp", "--dport", "29900"],
        );
        assert!(
            ct.lines()
                .any(|l| l.contains("ESTABLISHED") && l.contains("[ASSURED]")),
            "the strict firewall holds no established, assured entry for the flow:\n{ct}"
        );
    }
    cli.stop();
    srv.stop();
    for ns in [&net.c, &net.s] {
        let left = net.kcpio_tables(ns);
        assert!(left.is_empty(), "firewall tables left in {ns}: {left:?}");
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    (got, text)
}

/// The last `tcp segments refused R merged M` of a kcpio server's log.
fn segment_counters(log: &str) -> Option<(u64, u64)> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("tcp segments refused"))?;
    let rest = line.split_once("tcp segments refused ")?.1;
    let mut words = rest.split([' ', ',']);
    let refused = words.next()?.parse().ok()?;
    let merged = words.nth(1)?.parse().ok()?;
    Some((refused, merged))
}

#[test]
fn interop_with_kcptun_tcp_both_ways_defaults_and_fast3() {
    let test = "interop_with_kcptun_tcp_both_ways_defaults_and_fast3";
    if !privileged(test) || !have_kcptun(test) {
        return;
    }
    for (client, server, flags, bytes) in [
        (End::Kcptun, End::Kcpio, "--tcp", 50 * MB),
        (End::Kcpio, End::Kcptun, "--tcp", 50 * MB),
        (End::Kcptun, End::Kcpio, "--tcp --mode fast3", 20 * MB),
        (End::Kcpio, End::Kcptun, "--tcp --mode fast3", 20 * MB),
    ] {
        let (got, log) = transfer(
            PathOpts::default(),
            client,
            server,
            flags,
            bytes,
            Duration::ZERO,
            LONG,
        );
        assert_eq!(
            got,
            Ok(bytes),
            "{client:?} -> {server:?} {flags}\nserver log:\n{log}"
        );
        if server == End::Kcpio {
            let (_, merged) = segment_counters(&log).expect("stats line");
            assert_eq!(merged, 0, "{log}");
        }
    }
}

/// Over IPv6, both ways with Debian's kcptun (tcpraw 1.2.25 carries IPv6:
/// an `AF_INET6` raw socket, checksums over the IPv6 pseudo-header, an
/// `ip6tables -m hl --hl-eq 1` rule), and between kcpio ends.
#[test]
fn ipv6_interop_with_kcptun_tcp_both_ways_and_kcpio_to_kcpio() {
    let test = "ipv6_interop_with_kcptun_tcp_both_ways_and_kcpio_to_kcpio";
    if !privileged(test) {
        return;
    }
    let v6 = PathOpts {
        v6: true,
        drop_udp: true,
        ..PathOpts::default()
    };
    let mut pairs = vec![(End::Kcpio, End::Kcpio, 20 * MB)];
    if have_kcptun(test) {
        pairs.extend([
            (End::Kcptun, End::Kcpio, 20 * MB),
            (End::Kcpio, End::Kcptun, 20 * MB),
        ]);
    }
    for (client, server, bytes) in pairs {
        let (got, log) = transfer(v6, client, server, "--tcp", bytes, Duration::ZERO, LONG);
        assert_eq!(
            got,
            Ok(bytes),
            "{client:?} -> {server:?} over IPv6\nserver log:\n{log}"
        );
        if server == End::Kcpio {
            let (refused, merged) = segment_counters(&log).expect("stats line");
            println!("figure: IPv6 {client:?} -> kcpio: refused {refused} merged {merged}");
            assert_eq!(merged, 0, "{log}");
        }
    }
}

#[test]
fn a_path_that_drops_udp_passes_tcp_only() {
    let test = "a_path_that_drops_udp_passes_tcp_only";
    if !privileged(test) {
        return;
    }
    let blocked = PathOpts {
        drop_udp: true,
        ..PathOpts::default()
    };
    if have_kcptun(test) {
        // kcptun over UDP: its smux session never opens, nothing arrives.
        let (got, _) = transfer(
            blocked,
            End::Kcptun,
            End::Kcptun,
            "",
            MB,
            Duration::ZERO,
            Duration::from_secs(10),
        );
        assert!(
            !matches!(got, Ok(n) if n > 0),
            "UDP crossed a router dropping it: {got:?}"
        );
    }
    let (got, log) = transfer(
        blocked,
        End::Kcpio,
        End::Kcpio,
        "--tcp",
        20 * MB,
        Duration::ZERO,
        LONG,
    );
    assert_eq!(got, Ok(20 * MB), "{log}");
}

#[test]
fn strict_firewall_nat_and_gro_see_no_invalid_packet_across_an_idle_gap() {
    strict_idle_gap(
        "strict_firewall_nat_and_gro_see_no_invalid_packet_across_an_idle_gap",
        false,
        20 * MB,
    );
}

/// The same over IPv6, with the strict firewall's conntrack holding the
/// IPv6 flow across the idle gap.
#[test]
fn ipv6_strict_firewall_nat_and_gro_see_no_invalid_packet_across_an_idle_gap() {
    strict_idle_gap(
        "ipv6_strict_firewall_nat_and_gro_see_no_invalid_packet_across_an_idle_gap",
        true,
        10 * MB,
    );
}

fn strict_idle_gap(test: &str, v6: bool, bytes: u64) {
    if !privileged(test) {
        return;
    }
    // Conntrack timeouts of 8 s (instead of 300 s and 5 days) and a 12 s
    // pause mid-transfer: the flow must be kept alive by keepalives.
    let opts = PathOpts {
        strict: Some(8),
        nat: true,
        gro: true,
        v6,
        ..PathOpts::default()
    };
    let mut pairs = vec![(End::Kcpio, End::Kcpio)];
    if have_kcptun(test) {
        pairs.push((End::Kcptun, End::Kcpio));
    }
    for (client, server) in pairs {
        let (got, log) = transfer(
            opts,
            client,
            server,
            "--tcp --keepalive 2",
            bytes,
            Duration::from_secs(12),
            LONG,
        );
        assert_eq!(got, Ok(bytes), "{client:?} -> {server:?}\n{log}");
        let (_, merged) = segment_counters(&log).expect("stats line");
        assert_eq!(merged, 0, "GRO merged segments:\n{log}");
    }
}

#[test]
fn firewall_tables_go_at_exit_and_a_killed_ones_at_the_next_start() {
    tables_go_at_exit(
        "firewall_tables_go_at_exit_and_a_killed_ones_at_the_next_start",
        false,
    );
}

/// Over IPv6 the table is in the `ip6` family, with the same life.
#[test]
fn ipv6_firewall_tables_go_at_exit_and_a_killed_ones_at_the_next_start() {
    tables_go_at_exit(
        "ipv6_firewall_tables_go_at_exit_and_a_killed_ones_at_the_next_start",
        true,
    );
}

fn tables_go_at_exit(test: &str, v6: bool) {
    if !privileged(test) {
        return;
    }
    let net = Net::new(PathOpts {
        v6,
        ..PathOpts::default()
    });
    let remote = format!("{}:29900", net.server_ip);
    let server = || {
        net.spawn(
            &net.s,
            EXE,
            &["server", "--tcp", "-l", &remote, "-t", SOURCE],
            None,
        )
    };
    let tables = |want: usize| {
        for _ in 0..100 {
            let t = net.kcpio_tables(&net.s);
            if t.len() == want {
                return t;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "want {want} kcpio tables, have {:?}",
            net.kcpio_tables(&net.s)
        );
    };
    let mut first = server();
    wait_listening(&net, &net.s, 29900);
    let family = if v6 { "table ip6 " } else { "table ip " };
    let t = tables(1);
    assert!(t[0].starts_with(family), "{t:?}");
    first.stop();
    tables(0);
    // Killed: its table stays; the next start removes it with its own.
    let mut killed = server();
    wait_listening(&net, &net.s, 29900);
    let stale = tables(1);
    killed.kill();
    tables(1);
    let mut next = server();
    wait_listening(&net, &net.s, 29900);
    let now = tables(1);
    assert_ne!(now, stale, "the killed process's table is still there");
    next.stop();
    tables(0);
}

#[test]
fn without_privileges_bind_fails_naming_the_capability() {
    let test = "without_privileges_bind_fails_naming_the_capability";
    if !privileged(test) {
        return;
    }
    if Command::new("setpriv").arg("--help").output().is_err() {
        println!("SKIPPED {test}: setpriv (util-linux) not installed");
        return;
    }
    let net = Net::new(PathOpts::default());
    let server = ["server", "--tcp", "-l", "10.77.2.2:29900", "-t", SOURCE];
    for (drop_caps, capability) in [
        // An ordinary user: no firewall rules.
        (
            &[
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ][..],
            "CAP_NET_ADMIN",
        ),
        // Root without CAP_NET_RAW: no raw socket (the table it had
        // installed already is removed again).
        (
            &["--inh-caps=-all", "--bounding-set=-net_raw"][..],
            "CAP_NET_RAW",
        ),
    ] {
        let args = [
            &["netns", "exec", &net.s, "setpriv"],
            drop_caps,
            &[EXE],
            &server[..],
        ]
        .concat();
        let out = run("ip", &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "bound without {capability}");
        assert!(err.contains(capability), "{capability} not named: {err}");
        assert!(net.kcpio_tables(&net.s).is_empty());
    }
}

#[test]
fn a_handshake_into_a_black_hole_ends_at_the_connect_timeout() {
    let test = "a_handshake_into_a_black_hole_ends_at_the_connect_timeout";
    if !privileged(test) {
        return;
    }
    let net = Net::new(PathOpts::default());
    net.nft(
        &net.r,
        "table inet hole {\n chain transit { type filter hook forward priority 0;\n  meta l4proto tcp drop\n }\n}\n",
    );
    let log = format!("/tmp/kcpio-faketcp-{}.log", net.c);
    let _cli = start(&net, End::Kcpio, false, "--tcp", Some(&log));
    wait_listening(&net, &net.c, 12948);
    // The fetch gets nothing; the client's log says why, well before the
    // kernel's own SYN retries (about two minutes) would give up.
    let started = Instant::now();
    assert!(!matches!(net.fetch(Duration::ZERO, Duration::from_secs(12)), Ok(n) if n > 0));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        text.contains("handshake did not complete within connect_timeout"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// Not a test: the source and sink the tests above run inside their
/// namespaces (`KCPIO_FT_HELPER="serve BYTES"` or `"fetch GAP DEADLINE"`).
#[test]
#[ignore = "helper run inside a network namespace by the other tests"]
fn netns_helper() {
    let spec = std::env::var("KCPIO_FT_HELPER").expect("KCPIO_FT_HELPER");
    let words: Vec<u64> = spec
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().expect("number"))
        .collect();
    let mut buf = vec![0u8; 64 * 1024];
    if spec.starts_with("serve") {
        let total = words[0];
        let l = TcpListener::bind(SOURCE).expect("bind source");
        for conn in l.incoming().take(16) {
            let Ok(mut c) = conn else { continue };
            let mut off = 0;
            while off < total {
                let n = (total - off).min(buf.len() as u64) as usize;
                pattern::fill(&mut buf[..n], off);
                if c.write_all(&buf[..n]).is_err() {
                    break;
                }
                off += n as u64;
            }
        }
    } else {
        let (gap, deadline) = (Duration::from_secs(words[0]), words[1]);
        let mut c = TcpStream::connect(ENTRY).expect("connect entry");
        c.set_read_timeout(Some(Duration::from_secs(deadline)))
            .expect("timeout");
        let mut v = pattern::Verifier::default();
        let mut paused = gap.is_zero();
        let verdict = loop {
            match c.read(&mut buf) {
                Ok(0) => break "ok",
                Ok(n) => {
                    if !v.push(&buf[..n]) {
                        break "corrupt";
                    }
                    if !paused && v.offset >= 4 * MB {
                        paused = true;
                        std::thread::sleep(gap);
                    }
                }
                Err(_) => break "stalled",
            }
        };
        println!("FETCHED {} {verdict}", v.offset);
    }
}
