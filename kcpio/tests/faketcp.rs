//! Fake TCP ([`Carrier::FakeTcp`]) at the library level, each test inside a
//! private network namespace of its own (loopback only, plus a ULA IPv6
//! address for the IPv6 tests): a sharded listener (`reuse_port`) serving
//! many clients, and the iptables (ip6tables) fallback when `nft` is
//! missing, each over IPv4 and IPv6.
//!
//! Needs root (namespaces, raw sockets, firewall rules); without it every
//! test prints `SKIPPED` and passes. Each test runs this binary again
//! inside its namespace (`ip netns exec`), so whatever it installs there
//! dies with the namespace, also when the test fails.
#![cfg(target_os = "linux")]

use std::net::SocketAddr;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use kcpio::{Carrier, Config, KcpListener, KcpStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

/// Set in the namespaced run: which test body to run there.
const IN_NETNS: &str = "KCPIO_FAKETCP_IN_NETNS";

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

/// Deletes the namespace, also when the test fails.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.0]);
    }
}

/// Runs the test `name` again inside a new namespace with loopback up
/// (`env` added), and returns its output; `None` (after printing
/// `SKIPPED`) without root.
fn in_netns(name: &str, env: &[(&str, &str)]) -> Option<String> {
    let ns = Netns(format!("kcpio-ftcp-{}-{name}", std::process::id()));
    if !run("ip", &["netns", "add", &ns.0]).status.success() {
        println!("SKIPPED {name}: needs root (network namespaces, raw sockets, firewall rules)");
        return None;
    }
    assert!(
        run("ip", &["-n", &ns.0, "link", "set", "lo", "up"])
            .status
            .success()
    );
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new("timeout");
    cmd.args(["120", "ip", "netns", "exec", &ns.0])
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env(IN_NETNS, name);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("{text}");
    assert!(out.status.success(), "in the namespace: {text}");
    // Nothing of ours is left in the namespace after the run.
    assert!(no_rules_in(&ns.0), "rules left behind: {}", rules_in(&ns.0));
    Some(text)
}

/// kcpio's nftables tables and iptables chains in namespace `ns` (or here
/// when `ns` is empty), one per line.
fn rules_in(ns: &str) -> String {
    let exec = |cmd: &[&str]| {
        let out = if ns.is_empty() {
            run(cmd[0], &cmd[1..])
        } else {
            run("ip", &[&["netns", "exec", ns], cmd].concat())
        };
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut found = String::new();
    for line in exec(&["nft", "list", "tables"])
        .lines()
        .chain(exec(&["iptables", "-w", "-t", "raw", "-S"]).lines())
        .chain(exec(&["ip6tables", "-w", "-t", "raw", "-S"]).lines())
    {
        if line.contains("kcpio_") {
            found.push_str(line);
            found.push('\n');
        }
    }
    found
}

fn no_rules_in(ns: &str) -> bool {
    rules_in(ns).is_empty()
}

fn config(shards: usize) -> Config {
    Config::builder()
        .carrier(Carrier::FakeTcp)
        .stream(true)
        .window(256, 256)
        .reuse_port(shards)
        .connect_timeout(Some(Duration::from_secs(10)))
        .build()
        .unwrap()
}

fn pattern(off: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = ((off + i as u64).wrapping_mul(31) >> 3) as u8;
    }
}

/// Starts a server that answers each stream with `bytes` of the pattern
/// after reading one request byte.
fn serve(listener: Arc<KcpListener>, clients: usize, bytes: u64) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for _ in 0..clients {
            let (mut s, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut one = [0u8; 1];
                s.read_exact(&mut one).await.unwrap();
                let mut buf = vec![0u8; 16 * 1024];
                let mut off = 0;
                while off < bytes {
                    let n = (bytes - off).min(buf.len() as u64) as usize;
                    pattern(off, &mut buf[..n]);
                    s.write_all(&buf[..n]).await.unwrap();
                    off += n as u64;
                }
                s.flush().await.unwrap();
                // Keep the stream until the client has read everything.
                let _ = timeout(Duration::from_secs(60), s.read(&mut one)).await;
            });
        }
    })
}

/// Connects to `server`, asks, and checks `bytes` of the pattern.
async fn fetch(server: SocketAddr, config: &Config, bytes: u64) -> u64 {
    let mut c = KcpStream::connect(server, config).await.unwrap();
    c.write_all(&[1]).await.unwrap();
    let mut buf = vec![0u8; 16 * 1024];
    let mut want = vec![0u8; 16 * 1024];
    let mut off = 0;
    while off < bytes {
        let n = timeout(Duration::from_secs(30), c.read(&mut buf))
            .await
            .expect("the download goes on")
            .unwrap();
        assert!(n > 0, "early end at {off}");
        pattern(off, &mut want[..n]);
        assert!(buf[..n] == want[..n], "a wrong byte near {off}");
        off += n as u64;
    }
    off
}

/// The IPv6 address the IPv6 tests listen on (a ULA on the namespace's
/// loopback).
const V6_ADDR: &str = "fd00:77::1";

/// Adds [`V6_ADDR`] to this namespace's loopback, usable at once (`nodad`).
fn add_v6_address() {
    let out = run(
        "ip",
        &[
            "-6",
            "addr",
            "add",
            &format!("{V6_ADDR}/128"),
            "dev",
            "lo",
            "nodad",
        ],
    );
    assert!(out.status.success(), "{out:?}");
}

/// The address a test listens on: port 0 (or `port`) on 127.0.0.1 or
/// [`V6_ADDR`].
fn listen_addr(v6: bool, port: u16) -> String {
    if v6 {
        format!("[{V6_ADDR}]:{port}")
    } else {
        format!("127.0.0.1:{port}")
    }
}

/// Many clients through `shards` shards of one listener on `bind`: all
/// fetch every byte; returns each shard's sessions opened.
async fn many_clients(bind: &str, shards: usize, clients: usize, bytes: u64) -> Vec<u64> {
    let config = config(shards);
    let listener = Arc::new(KcpListener::bind(bind, &config).await.unwrap());
    let server = listener.local_addr().unwrap();
    assert_eq!(listener.stats_per_socket().len(), shards);
    let srv = serve(listener.clone(), clients, bytes);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let config = config.clone();
        tasks.push(tokio::spawn(
            async move { fetch(server, &config, bytes).await },
        ));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), bytes);
    }
    srv.await.unwrap();
    let per = listener.stats_per_socket();
    for (i, s) in per.iter().enumerate() {
        println!(
            "figure: {server} shard {i}: sessions {} datagrams in {} refused segments {} merged {}",
            s.sessions_opened, s.datagrams_in, s.segments_refused, s.segments_merged
        );
        // Nothing was cut, merged or failed its checksum.
        assert_eq!(s.segments_merged, 0, "shard {i}");
    }
    per.iter().map(|s| s.sessions_opened).collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Three shards, 24 clients from one address (127.0.0.1, many ports): the
/// kernel filters split them, every flow is served by exactly one shard
/// (the sessions opened over the shards add up to the clients: a segment
/// seen by two shards would open two), every shard gets some, every byte
/// arrives, and the firewall table is gone afterwards.
#[test]
fn shards_split_many_clients_and_each_flow_lives_on_one_shard() {
    shards_split(
        "shards_split_many_clients_and_each_flow_lives_on_one_shard",
        false,
    );
}

/// The same over IPv6 ([`V6_ADDR`], many ports): the kernel filter reads
/// the IPv6 source behind `SKF_NET_OFF`, the flows are keyed by IPv6
/// addresses, the `ip6` table comes and goes.
#[test]
fn ipv6_shards_split_many_clients_and_each_flow_lives_on_one_shard() {
    shards_split(
        "ipv6_shards_split_many_clients_and_each_flow_lives_on_one_shard",
        true,
    );
}

fn shards_split(name: &str, v6: bool) {
    if std::env::var(IN_NETNS).as_deref() == Ok(name) {
        if v6 {
            add_v6_address();
        }
        let bind = listen_addr(v6, 0);
        let per = runtime().block_on(async {
            timeout(
                Duration::from_secs(90),
                many_clients(&bind, 3, 24, 256 * 1024),
            )
            .await
            .expect("all clients done within 90 s")
        });
        assert_eq!(per.iter().sum::<u64>(), 24, "sessions per shard {per:?}");
        assert!(per.iter().all(|&n| n > 0), "a shard got no peer: {per:?}");
        assert!(no_rules_in(""), "rules left: {}", rules_in(""));
        return;
    }
    if std::env::var_os(IN_NETNS).is_some() {
        return;
    }
    if let Some(text) = in_netns(name, &[]) {
        assert!(text.contains("shard 2: sessions"), "{text}");
        if v6 {
            assert!(text.contains(&format!("figure: [{V6_ADDR}]:")), "{text}");
        }
    }
}

/// A client socket bound to port 0 whose UDP port is held in TCP by
/// another socket (as another fake-TCP flow's can be: its UDP socket was
/// dropped, its TCP port lives on) still connects: TCP picks its own port.
/// And a port the caller chose is the flow's port, as the server sees it.
#[test]
fn a_client_s_kernel_picked_port_is_not_forced_on_tcp_and_a_chosen_one_is_kept() {
    let name = "a_client_s_kernel_picked_port_is_not_forced_on_tcp_and_a_chosen_one_is_kept";
    if std::env::var(IN_NETNS).as_deref() == Ok(name) {
        runtime().block_on(async {
            let config = config(1);
            let listener = Arc::new(KcpListener::bind("127.0.0.1:0", &config).await.unwrap());
            let server = listener.local_addr().unwrap();
            let srv = serve(listener.clone(), 2, 4096);
            // The kernel's pick for UDP, then held in TCP.
            let sock = kcpio::KcpSocket::bind("127.0.0.1:0".parse().unwrap(), &config).unwrap();
            let udp_port = sock.local_addr().unwrap().port();
            let holder = std::net::TcpListener::bind(("127.0.0.1", udp_port)).unwrap();
            let mut c = timeout(Duration::from_secs(20), sock.connect(server))
                .await
                .expect("connected within 20 s")
                .expect("connects although its UDP port is taken in TCP");
            c.write_all(&[1]).await.unwrap();
            let mut got = vec![0u8; 4096];
            timeout(Duration::from_secs(20), c.read_exact(&mut got))
                .await
                .unwrap()
                .unwrap();
            let mut want = vec![0u8; 4096];
            pattern(0, &mut want);
            assert!(got == want);
            assert_ne!(c.local_addr().unwrap().port(), udp_port);
            drop(holder);
            // A port chosen by the caller (free in TCP and UDP) is kept.
            let chosen = {
                let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                t.local_addr().unwrap().port()
            };
            let at: SocketAddr = ([127, 0, 0, 1], chosen).into();
            let sock = kcpio::KcpSocket::bind(at, &config).unwrap();
            let mut c = timeout(Duration::from_secs(20), sock.connect(server))
                .await
                .expect("connected within 20 s")
                .unwrap();
            assert_eq!(c.local_addr().unwrap(), at);
            c.write_all(&[1]).await.unwrap();
            timeout(Duration::from_secs(20), c.read_exact(&mut got))
                .await
                .unwrap()
                .unwrap();
            assert!(got == want);
            println!("figure: kernel-picked UDP port {udp_port} held in TCP: connected; chosen port {chosen} kept");
            let _ = srv.await;
        });
        return;
    }
    if std::env::var_os(IN_NETNS).is_some() {
        return;
    }
    if let Some(text) = in_netns(name, &[]) {
        assert!(text.contains("chosen port"), "{text}");
    }
}

/// A directory holding `iptables` and `ip` but no `nft`: with it as `PATH`
/// the firewall falls back to iptables.
fn path_without_nft(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kcpio-nonft-{}-{tag}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    for tool in ["iptables", "ip6tables", "ip", "timeout", "sh"] {
        let found = run("sh", &["-c", &format!("command -v {tool}")]);
        let at = String::from_utf8_lossy(&found.stdout).trim().to_string();
        assert!(!at.is_empty(), "{tool} not found");
        let link = dir.join(tool);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(at, &link).unwrap();
    }
    dir
}

/// Our chains in the raw table of `tool` (`iptables` or `ip6tables`) and
/// the OUTPUT jumps to them.
fn iptables_chains(tool: &str) -> Vec<String> {
    let out = run(tool, &["-w", "-t", "raw", "-S"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("kcpio_"))
        .map(str::to_owned)
        .collect()
}

/// Without `nft` the rules go into iptables: they appear (chain, its two
/// drops, the jump from OUTPUT), they work (a transfer passes, and the
/// kernel socket's TTL-1 segments are counted dropped by them), they go
/// when the socket closes, and a chain left by a killed process goes at
/// the next start.
#[test]
fn without_nft_the_iptables_rules_appear_work_and_go_also_after_a_kill() {
    iptables_fallback(
        "without_nft_the_iptables_rules_appear_work_and_go_also_after_a_kill",
        false,
    );
}

/// The same over IPv6: the rules go into `ip6tables` (`-m hl --hl-eq 1`).
#[test]
fn ipv6_without_nft_the_ip6tables_rules_appear_work_and_go_also_after_a_kill() {
    iptables_fallback(
        "ipv6_without_nft_the_ip6tables_rules_appear_work_and_go_also_after_a_kill",
        true,
    );
}

fn iptables_fallback(name: &str, v6: bool) {
    const HOLD: &str = "KCPIO_FAKETCP_HOLD";
    let (tool, ttl_rule, ttl_counted) = if v6 {
        ("ip6tables", "--hl-eq 1", "HL match HL == 1")
    } else {
        ("iptables", "--ttl-eq 1", "TTL match TTL == 1")
    };
    let iptables_chains = || iptables_chains(tool);
    if std::env::var(IN_NETNS).as_deref() == Ok(name) {
        if v6 && std::env::var_os(HOLD).is_none() {
            add_v6_address();
        }
        if std::env::var_os(HOLD).is_some() {
            // The process to be killed: a listener that never closes.
            return runtime().block_on(async {
                let l = KcpListener::bind(listen_addr(v6, 29977), &config(1))
                    .await
                    .unwrap();
                println!("HOLDING {}", l.local_addr().unwrap());
                tokio::time::sleep(Duration::from_secs(60)).await;
            });
        }
        assert!(
            run("sh", &["-c", "command -v nft"]).stdout.is_empty(),
            "nft still on PATH"
        );
        runtime().block_on(async {
            let config = config(1);
            let listener = Arc::new(
                KcpListener::bind(listen_addr(v6, 0), &config)
                    .await
                    .unwrap(),
            );
            let server = listener.local_addr().unwrap();
            assert_eq!(server.is_ipv6(), v6);
            let chains = iptables_chains();
            let port = server.port().to_string();
            assert!(
                chains.iter().any(|l| l.starts_with("-N kcpio_")),
                "{chains:?}"
            );
            assert!(
                chains
                    .iter()
                    .any(|l| l.contains(&port) && l.contains(ttl_rule) && l.contains("DROP")),
                "{chains:?}"
            );
            assert!(
                chains
                    .iter()
                    .any(|l| l.contains(&port) && l.contains("RST") && l.contains("DROP")),
                "{chains:?}"
            );
            assert!(
                chains.iter().any(|l| l.starts_with("-A OUTPUT -j kcpio_")),
                "{chains:?}"
            );
            let srv = serve(listener.clone(), 1, 1 << 20);
            let got = timeout(Duration::from_secs(60), fetch(server, &config, 1 << 20))
                .await
                .expect("the download ends within 60 s");
            assert_eq!(got, 1 << 20);
            srv.await.unwrap();
            // The kernel's own ACKs (TTL 1) hit the drop rules.
            let counted = run(tool, &["-w", "-t", "raw", "-L", "-v", "-n", "-x"]);
            let text = String::from_utf8_lossy(&counted.stdout).into_owned();
            let drops: u64 = text
                .lines()
                .filter(|l| l.contains("DROP") && l.contains(ttl_counted))
                .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
                .sum();
            println!("figure: kernel segments dropped by the {tool} rules: {drops}");
            assert!(drops > 0, "{text}");
            drop(listener);
        });
        // Closed: every chain gone (the clients' too).
        assert!(iptables_chains().is_empty(), "{:?}", iptables_chains());

        // A killed process leaves its chain; the next start removes it.
        let exe = std::env::current_exe().unwrap();
        let mut held = Command::new(exe)
            .args(["--exact", name, "--nocapture", "--test-threads", "1"])
            .env(HOLD, "1")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut waited = 0;
        while !iptables_chains()
            .iter()
            .any(|l| l.contains("--sport 29977") || l.contains("spt:29977"))
        {
            waited += 1;
            assert!(waited < 200, "the holder never installed its chain");
            std::thread::sleep(Duration::from_millis(50));
        }
        held.kill().unwrap(); // SIGKILL: no clean-up runs
        held.wait().unwrap();
        let left = iptables_chains();
        assert!(
            left.iter().any(|l| l.starts_with("-N kcpio_")),
            "a SIGKILL leaves the chain: {left:?}"
        );
        runtime().block_on(async {
            let l = KcpListener::bind(listen_addr(v6, 0), &config(1))
                .await
                .unwrap();
            let now = iptables_chains();
            let ours = format!(
                "kcpio_{}_{}",
                std::process::id(),
                l.local_addr().unwrap().port()
            );
            assert!(
                now.iter().all(|line| line.contains(&ours)),
                "the dead process's chain is still there: {now:?}"
            );
        });
        assert!(iptables_chains().is_empty(), "{:?}", iptables_chains());
        println!("figure: {tool} fallback clean after a kill");
        return;
    }
    if std::env::var_os(IN_NETNS).is_some() {
        return;
    }
    let dir = path_without_nft(tool);
    let text = in_netns(name, &[("PATH", dir.to_str().unwrap())]);
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(text) = text {
        assert!(
            text.contains(&format!("figure: {tool} fallback clean")),
            "{text}"
        );
    }
}
