//! Socket counters, named once: the list below makes both the relaxed
//! atomics the driver bumps and the public [`ListenerStats`] snapshot, with
//! its `merge` for a `reuse_port` group.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::table::Refusal;
use crate::sys::SysStats;

macro_rules! socket_counters {
    ($( $(#[$doc:meta])* $name:ident, )*) => {
        /// Socket-level counters (relaxed atomics), shared with listener and
        /// stream handles for their `stats()`.
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $( pub(crate) $name: AtomicU64, )*
        }

        /// Counters of a listener's socket, from
        /// [`KcpListener::stats`](crate::KcpListener::stats).
        ///
        /// Every datagram that does not reach a session is counted under one
        /// reason and dropped; none is logged above `debug`.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct ListenerStats {
            $( $(#[$doc])* pub $name: u64, )*
            /// Sessions waiting to be accepted now (their peers proved
            /// they receive; the rest wait in `sessions_live`).
            pub backlog: usize,
            /// Receive system calls made (`recvmmsg` or one-datagram calls).
            pub recv_syscalls: u64,
            /// Send system calls made (`sendmmsg` or one-datagram calls).
            pub send_syscalls: u64,
            /// Datagrams cut short by a small receive buffer, dropped.
            pub truncated: u64,
            /// [`Carrier::FakeTcp`](crate::Carrier::FakeTcp): segments
            /// refused and dropped: forged or stray RST, FIN or SYN,
            /// acknowledgements of bytes never sent, payload without PSH,
            /// segments of unknown flows, bad checksums, malformed packets.
            /// None of them touches a session. 0 over UDP.
            pub segments_refused: u64,
            /// [`Carrier::FakeTcp`](crate::Carrier::FakeTcp): segments
            /// longer than a datagram (merged by GRO or a middlebox), dropped
            /// whole, never cut into a wrong datagram. 0 over UDP.
            pub segments_merged: u64,
            /// UDP sockets behind these figures (more than one with
            /// [`ConfigBuilder::reuse_port`](crate::ConfigBuilder::reuse_port)).
            pub sockets: usize,
        }

        impl Counters {
            /// One socket's figures (`backlog` is the caller's to fill).
            pub(crate) fn snapshot(&self, sys: &SysStats) -> ListenerStats {
                ListenerStats {
                    $( $name: self.$name.load(Ordering::Relaxed), )*
                    backlog: 0,
                    recv_syscalls: sys.recv_syscalls,
                    send_syscalls: sys.send_syscalls,
                    truncated: sys.truncated,
                    segments_refused: sys.segments_refused,
                    segments_merged: sys.segments_merged,
                    sockets: 1,
                }
            }
        }

        impl ListenerStats {
            /// Adds another socket of the same group (the backlog is shared:
            /// counted once).
            pub(crate) fn merge(&mut self, o: &ListenerStats) {
                $( self.$name += o.$name; )*
                self.backlog = o.backlog;
                self.recv_syscalls += o.recv_syscalls;
                self.send_syscalls += o.send_syscalls;
                self.truncated += o.truncated;
                self.segments_refused += o.segments_refused;
                self.segments_merged += o.segments_merged;
                self.sockets += o.sockets;
            }
        }
    };
}

socket_counters! {
    /// Datagrams received on the socket.
    datagrams_in,
    /// Their bytes.
    bytes_in,
    /// Datagrams sent.
    datagrams_out,
    /// Their bytes.
    bytes_out,
    /// Dropped: failed decryption or integrity check, or too short.
    bad_crypto,
    /// FEC packets the decoder refused.
    bad_fec,
    /// Packets the ARQ refused (malformed, or too short after decryption).
    bad_kcp,
    /// Dropped: no session for the address and no conv to create one.
    unknown_session,
    /// Dropped: another conv than the address's session (not a takeover).
    conv_mismatch,
    /// Dropped: a late packet of a recently closed session.
    tombstoned,
    /// New peers refused because the accept backlog was full: distinct
    /// addresses, each counted at its first refused datagram of a refusal
    /// episode (an episode ends when the listener admits a session; see
    /// [`KcpListener::stats`](crate::KcpListener::stats) for the memory
    /// bound).
    refused_backlog,
    /// Their datagrams, all dropped.
    refused_backlog_datagrams,
    /// New peers refused because the session cap was reached: distinct
    /// addresses per refusal episode, as `refused_backlog`.
    refused_cap,
    /// Their datagrams, all dropped.
    refused_cap_datagrams,
    /// New peers refused: their first datagram does not begin a
    /// conversation (a late or forged packet, or a takeover without one).
    not_opener,
    /// New peers refused: a replay of a datagram that opened a session.
    replayed,
    /// New peers refused: their source address opened sessions faster than
    /// the per-source limit.
    refused_rate,
    /// Datagrams of a live session from another address that were not newer
    /// than what the session had received (replays, duplicates): dropped,
    /// they move nothing.
    migration_stale,
    /// Window probes sent to an address a session's peer may have moved to
    /// (each within 3 times the bytes received from there).
    path_probes,
    /// Sessions moved to their peer's new address after it answered there.
    migrations,
    /// Datagrams this socket handed to another socket of its
    /// [`reuse_port`](crate::ConfigBuilder::reuse_port) group: they came
    /// from a new address of a peer whose session that socket holds (the
    /// kernel steers each address to one socket).
    forwarded,
    /// Sessions this socket handed to another socket of its group once
    /// their peer's move to an address that socket receives was validated.
    handed_off,
    /// Datagrams forwarded to this socket whose session it had handed to
    /// another socket of its group meanwhile (they were waiting in its
    /// queue): forwarded on to that socket, once each and within its
    /// queue's bound.
    reforwarded,
    /// Datagrams forwarded to this socket for a session it no longer holds
    /// that could not be forwarded on (the session closed, or moved again,
    /// or the next socket's queue was full): dropped.
    forwarded_dropped,
    /// Client sockets replaced because their local address stopped
    /// working (the session kept).
    rebinds,
    /// Sessions that never proved their peer receives, evicted at the
    /// session cap to make room for a newcomer.
    evicted_unproven,
    /// Out-of-band packets (unreliable datagrams) that matched no session
    /// (unknown address or another conv); dropped.
    oob,
    /// Receive errors (ICMP reports, truncation), never fatal.
    recv_errors,
    /// Send errors other than a full buffer.
    send_errors,
    /// Sessions created.
    sessions_opened,
    /// Sessions freed.
    sessions_closed,
    /// Sessions alive now (accepted, waiting in the backlog, waiting for
    /// their peer's proof, or lingering;
    /// a session handed to another socket of the group counts there).
    sessions_live,
    /// Session deadlines that fired (ARQ ticks, idle timeouts, lingers): a
    /// quiet session with nothing in flight and no idle timeout adds none.
    timer_fires,
}

/// Adds one to a counter.
pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Adds `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Ordering::Relaxed);
}

/// Addresses remembered per refusal episode, per socket.
const MAX_REFUSED_PEERS: usize = 4096;

/// The addresses refused admission in the current refusal episode, so the
/// refusal counters count peers rather than datagrams. Owned by the driver
/// task.
///
/// An episode ends when the listener admits a new session
/// ([`new_episode`](Self::new_episode)), on any of its sockets (the
/// shards share one episode number): a peer refused again after that
/// counts again. At most [`MAX_REFUSED_PEERS`] addresses are remembered,
/// as keyed 64-bit hashes (under 64 KiB, allocated on the first refusal);
/// beyond that, every datagram of an address not remembered counts, so the
/// figure can err high in a flood of more distinct addresses, never low.
#[derive(Default)]
pub(crate) struct RefusedPeers {
    seen: HashSet<u64>,
    key: std::collections::hash_map::RandomState,
    /// The listener's episode number (shards), and the one `seen` is of.
    shared: Option<(Arc<AtomicU64>, u64)>,
}

impl RefusedPeers {
    /// Refusal episodes shared by the sockets of one listener.
    pub(crate) fn shared(episode: Arc<AtomicU64>) -> Self {
        let now = episode.load(Ordering::Relaxed);
        Self {
            shared: Some((episode, now)),
            ..Self::default()
        }
    }

    /// Whether `peer` is refused for `reason` for the first time in this
    /// episode.
    pub(crate) fn first(&mut self, peer: SocketAddr, reason: u8) -> bool {
        if let Some((episode, mine)) = self.shared.as_mut() {
            let now = episode.load(Ordering::Relaxed);
            if now != *mine {
                *mine = now;
                self.seen.clear();
            }
        }
        let h = self.key.hash_one((peer, reason));
        if self.seen.contains(&h) {
            return false;
        }
        if self.seen.len() < MAX_REFUSED_PEERS {
            self.seen.insert(h);
        }
        true
    }

    /// The listener admitted a session: the refusal episode is over (for
    /// every socket of the listener).
    pub(crate) fn new_episode(&mut self) {
        if let Some((episode, mine)) = self.shared.as_mut() {
            *mine = episode.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        }
        if !self.seen.is_empty() {
            self.seen.clear();
        }
    }
}

impl Counters {
    /// Counts a datagram from `peer` the table dropped, under its reason;
    /// an admission refusal also counts the peer once per episode. Logs
    /// the first refusal of each peer and reason per episode (`info` for
    /// the admission limits an operator sets, `debug` for the rest), so a
    /// flood logs at most [`MAX_REFUSED_PEERS`] lines per episode.
    pub(crate) fn refused(&self, r: Refusal, peer: SocketAddr, episode: &mut RefusedPeers) {
        let (datagrams, peers) = match r {
            Refusal::BadKcp => (&self.bad_kcp, None),
            Refusal::Oob => (&self.oob, None),
            Refusal::UnknownSession => (&self.unknown_session, None),
            Refusal::ConvMismatch => (&self.conv_mismatch, None),
            Refusal::Tombstoned => (&self.tombstoned, None),
            Refusal::SessionCap => (&self.refused_cap_datagrams, Some(&self.refused_cap)),
            Refusal::Backlog => (&self.refused_backlog_datagrams, Some(&self.refused_backlog)),
            Refusal::NotOpener => (&self.not_opener, None),
            Refusal::Replay => (&self.replayed, None),
            Refusal::RateLimited => (&self.refused_rate, None),
            Refusal::Stale => (&self.migration_stale, None),
        };
        bump(datagrams);
        if !episode.first(peer, r as u8) {
            return;
        }
        if let Some(peers) = peers {
            bump(peers);
        }
        match r {
            Refusal::SessionCap => {
                tracing::info!(%peer, "kcp listener refused a new session: at its session cap (max_sessions)");
            }
            Refusal::Backlog => {
                tracing::info!(%peer, "kcp listener refused a new session: accept backlog full (accept_backlog)");
            }
            Refusal::RateLimited => {
                tracing::info!(%peer, "kcp listener refused a new session: source over its rate (sessions_per_source)");
            }
            _ => tracing::debug!(%peer, reason = ?r, "kcp listener dropped a datagram"),
        }
    }

    /// Counts a datagram from `peer` that failed to open; logs the first
    /// of each peer per refusal episode.
    pub(crate) fn bad_crypto(&self, peer: SocketAddr, episode: &mut RefusedPeers) {
        bump(&self.bad_crypto);
        if episode.first(peer, u8::MAX) {
            tracing::debug!(%peer, "kcp datagram failed to open: another key, cipher or FEC setting, or not kcp");
        }
    }

    /// A session opened.
    pub(crate) fn opened(&self) {
        bump(&self.sessions_opened);
        bump(&self.sessions_live);
    }

    /// A session closed.
    pub(crate) fn closed(&self) {
        bump(&self.sessions_closed);
        self.sessions_live.fetch_sub(1, Ordering::Relaxed);
    }
}
