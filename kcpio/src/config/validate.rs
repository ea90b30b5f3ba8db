//! [`ConfigBuilder::build`]: every range check, every check of options
//! that depend on each other, and the derivation of the validated
//! [`ConfigInner`] (key schedule, KCP mtu, ARQ parameters). The ranges
//! themselves are in `defaults.rs`.

use std::sync::Arc;
use std::time::Duration;

use super::defaults::{
    DATAGRAM_FEC_DEADLINE_RANGE, DEFAULT_KEEPALIVE, LIFECYCLE_RANGE_MS, MAX_ACCEPT_BACKLOG,
    MAX_BACKOFF_PERCENT, MAX_DATAGRAM, MAX_DATAGRAM_FEC_RESIDUAL_PPM, MAX_DSCP, MAX_DURATION,
    MAX_FEC_GROUP, MAX_FEC_GROUP_DEADLINE, MAX_INTERVAL, MAX_REUSE_PORT, MAX_RTO, MAX_SESSIONS,
    MAX_SHARDS, MAX_SOCKET_BUFFER, MIN_FEC_GROUP_DEADLINE, MIN_FEC_MAX_SHARDS, MIN_IDLE_TIMEOUT,
    MIN_INTERVAL, MIN_KCP_MTU, MIN_RTO, MIN_WRITE_CAPACITY,
};
use super::{Config, ConfigBuilder, ConfigError, ConfigInner};
use crate::arq::{self, ArqConfig};
use crate::crypto::{Method, PacketCrypto};
use crate::fec;

impl ConfigBuilder {
    /// The keepalive and connect timeout are in range, and the keepalive
    /// comes before the idle timeout.
    fn check_lifecycle(&self) -> Result<(), ConfigError> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (min, max) = LIFECYCLE_RANGE_MS;
        for (name, value) in [
            ("keepalive (ms)", self.keepalive.flatten()),
            ("connect_timeout (ms)", self.connect_timeout),
        ] {
            if let Some(v) = value.map(ms).filter(|v| !(min..=max).contains(v)) {
                return Err(ConfigError::OutOfRange {
                    name,
                    value: v,
                    min,
                    max,
                });
            }
        }
        if let (Some(Some(k)), Some(idle)) = (self.keepalive, self.idle_timeout)
            && k >= idle
        {
            return Err(ConfigError::OutOfRange {
                name: "keepalive (ms, below idle_timeout)",
                value: ms(k),
                min,
                max: ms(idle).saturating_sub(1),
            });
        }
        Ok(())
    }

    /// Validates the settings and derives the key.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the first setting outside its documented
    /// range, or the first combination that cannot work.
    pub fn build(self) -> Result<Config, ConfigError> {
        self.check_limits()?;
        self.check_lifecycle()?;
        let fec = self.fec_shape();
        if let Some((data, parity)) = fec {
            if data == 0 || parity == 0 || data + parity > MAX_FEC_GROUP {
                return Err(ConfigError::InvalidFec { data, parity });
            }
            fec::FecEncoder::new(data, parity)
                .map_err(|_| ConfigError::InvalidFec { data, parity })?;
        }
        // An explicit `fec_group_deadline` needs FEC on.
        if self.fec_group_deadline.is_some() && fec.is_none() {
            return Err(ConfigError::Requires {
                name: "fec_group_deadline",
                needs: "FEC on: fec(data, parity) with both at least 1",
            });
        }
        if self.migration == Some(true) && self.method != Method::Aes128Gcm {
            return Err(ConfigError::Requires {
                name: "migration",
                needs: "crypto(Method::Aes128Gcm, ..): the one cipher whose datagrams cannot be forged or altered without the key",
            });
        }
        let need = self.method.key_len();
        // No PBKDF2 run (4096 rounds) for a method that takes no key.
        let mut key = if need == 0 {
            Vec::new()
        } else {
            self.key.bytes()
        };
        if key.len() > need {
            key.truncate(need);
        }
        let crypto = PacketCrypto::new(self.method, &key).map_err(ConfigError::InvalidKey)?;
        let overhead = packet_overhead(&crypto, fec.is_some()) + self.carrier.overhead();
        let min_mtu = overhead + MIN_KCP_MTU;
        if self.mtu < min_mtu {
            return Err(ConfigError::MtuTooSmall {
                mtu: self.mtu,
                overhead,
            });
        }
        range("mtu", self.mtu, min_mtu, MAX_DATAGRAM)?;
        // The datagram extension's loss report fills a packet's plaintext
        // (an mtu of 61-77 under `aes-128-gcm` leaves a KCP segment room
        // but not it).
        let sealed = self.carrier.overhead() + crypto.header_len() + crypto.trailer_len();
        let min_mtu = sealed + super::DATAGRAM_FEC_MIN_PLAIN;
        if self.datagram_fec && self.mtu < min_mtu {
            return Err(ConfigError::OutOfRange {
                name: "mtu (with datagram_fec: room for its 50-byte loss report)",
                value: self.mtu as u64,
                min: min_mtu as u64,
                max: MAX_DATAGRAM as u64,
            });
        }
        let explicit_rto = self.min_rto.is_some() || self.max_rto.is_some();
        let config = self.assemble(crypto);
        let arq = &config.inner.arq;
        if explicit_rto {
            check_rto_cap(arq)?;
        }
        arq.validate().map_err(ConfigError::Arq)?;
        let capacity = write_capacity(arq);
        if capacity < MIN_WRITE_CAPACITY {
            return Err(ConfigError::OutOfRange {
                name: "window: bytes writable before the peer reads, (2 x send + receive) x mss",
                value: capacity as u64,
                min: MIN_WRITE_CAPACITY as u64,
                max: u64::MAX,
            });
        }
        Ok(config)
    }

    /// The FEC shape in force: the explicit one, else the preset's, `None`
    /// for off (`(0, 0)`). Unchecked: [`build`](Self::build) checks it.
    fn fec_shape(&self) -> Option<(usize, usize)> {
        match self
            .fec
            .or_else(|| self.preset.fec().map(|(shape, _)| shape))
        {
            None | Some((0, 0)) => None,
            shape => shape,
        }
    }

    /// The configuration these settings make with `crypto` (the key
    /// schedule of their method), derived without a check: infallible, so
    /// [`Config::default`] needs no `expect`. [`build`](Self::build) checks
    /// the settings before it and the derived ARQ parameters after it.
    pub(super) fn assemble(self, crypto: PacketCrypto) -> Config {
        let fec = self.fec_shape();
        // The preset's deadline rides with FEC (the preset's own shape or
        // an explicit one).
        let fec_group_deadline = match (self.fec_group_deadline, fec) {
            (Some(d), Some(_)) => Some(d),
            (None, Some(_)) => self.preset.fec().map(|(_, d)| d),
            (_, None) => None,
        };
        // The carrier's header beyond UDP's comes off the datagram.
        let datagram_mtu = self.mtu.saturating_sub(self.carrier.overhead());
        let kcp_mtu = datagram_mtu.saturating_sub(packet_overhead(&crypto, fec.is_some()));
        let mut arq = self.preset.arq_config();
        if let Some((nodelay, interval, resend, nc)) = self.nodelay {
            arq.nodelay = nodelay;
            arq.interval = interval;
            arq.fast_resend = resend;
            arq.no_congestion = nc;
        }
        arq.mtu = kcp_mtu;
        arq.snd_wnd = self.snd_wnd;
        arq.rcv_wnd = self.rcv_wnd;
        arq.stream = self.stream;
        arq.write_delay = self.write_delay;
        if let Some(on) = self.ack_nodelay {
            arq.ack_nodelay = on;
        }
        if let Some(d) = self.min_rto {
            arq.min_rto = Some(ms(d));
        }
        if let Some(p) = self.rto_backoff_percent {
            arq.backoff_percent = Some(p);
        }
        if let Some(d) = self.max_rto {
            arq.max_rto = Some(ms(d));
        }
        if let Some(on) = self.tail_probe {
            arq.tail_probe = on;
        }
        arq.ack_repeat = self.ack_repeat;
        if let Some(c) = self.congestion {
            arq.congestion = Some(c);
        }
        arq.max_window = self.max_window;
        // 0 = never give up: a transmission count no segment reaches.
        arq.dead_link = if self.dead_link == 0 {
            u32::MAX
        } else {
            self.dead_link
        };
        Config {
            inner: Arc::new(ConfigInner {
                arq,
                mtu: datagram_mtu,
                method: self.method,
                crypto: Arc::new(crypto),
                fec,
                fec_group_deadline: fec_group_deadline.map(ms),
                fec_max_shards: self.fec_max_shards,
                datagram_fec: self.datagram_fec,
                adaptive_fec: self.adaptive_fec,
                datagram_fec_deadline: self.datagram_fec_deadline,
                datagram_fec_residual: f64::from(self.datagram_fec_residual_ppm) / 1e6,
                rate_limit: self.rate_limit,
                dscp: self.dscp,
                recv_buffer: self.recv_buffer,
                send_buffer: self.send_buffer,
                accept_backlog: self.accept_backlog,
                max_sessions: self.max_sessions,
                sessions_per_source: self.sessions_per_source,
                proof_timeout: self.proof_timeout,
                idle_timeout: self.idle_timeout,
                keepalive: self.keepalive.unwrap_or_else(|| {
                    let third = self.idle_timeout.map_or(DEFAULT_KEEPALIVE, |i| i / 3);
                    Some(DEFAULT_KEEPALIVE.min(third)).filter(|k| !k.is_zero())
                }),
                connect_probe: self.connect_probe,
                connect_timeout: self.connect_timeout,
                icmp_reset: self.icmp_reset,
                migration: self.migration.unwrap_or(self.method == Method::Aes128Gcm),
                linger: self.linger,
                conv: self.conv,
                batching: self.batching,
                carrier: self.carrier,
                reuse_port: self.reuse_port,
            }),
        }
    }

    /// The range of every option that stands on its own (the ones that
    /// depend on others are checked where they are combined).
    fn check_limits(&self) -> Result<(), ConfigError> {
        range("window(send)", self.snd_wnd, 1, u16::MAX)?;
        range("window(recv)", self.rcv_wnd, 1, u16::MAX)?;
        if let Some((_, interval, _, _)) = self.nodelay {
            range("nodelay(interval)", interval, MIN_INTERVAL, MAX_INTERVAL)?;
        }
        let (min, max) = (MIN_FEC_MAX_SHARDS, MAX_SHARDS);
        range("fec_max_shards", self.fec_max_shards, min, max)?;
        if let Some(d) = self.fec_group_deadline {
            let (min, max) = (MIN_FEC_GROUP_DEADLINE, MAX_FEC_GROUP_DEADLINE);
            time_range("fec_group_deadline (ms)", d, min, max)?;
        }
        if let Some(d) = self.min_rto {
            time_range("min_rto (ms)", d, MIN_RTO, MAX_RTO)?;
        }
        if let Some(p) = self.rto_backoff_percent {
            range("rto_backoff_percent", p, 0, MAX_BACKOFF_PERCENT)?;
        }
        let (min, max) = DATAGRAM_FEC_DEADLINE_RANGE;
        time_range(
            "datagram_fec_deadline (ms)",
            self.datagram_fec_deadline,
            min,
            max,
        )?;
        let ppm = self.datagram_fec_residual_ppm;
        range(
            "datagram_fec_residual_ppm",
            ppm,
            1,
            MAX_DATAGRAM_FEC_RESIDUAL_PPM,
        )?;
        range("dscp", self.dscp, 0, MAX_DSCP)?;
        let recv = self.recv_buffer.unwrap_or(0);
        range("socket_buffers(recv)", recv, 0, MAX_SOCKET_BUFFER)?;
        let send = self.send_buffer.unwrap_or(0);
        range("socket_buffers(send)", send, 0, MAX_SOCKET_BUFFER)?;
        range("accept_backlog", self.accept_backlog, 1, MAX_ACCEPT_BACKLOG)?;
        range("max_sessions", self.max_sessions, 1, MAX_SESSIONS)?;
        let (burst, per_second) = self.sessions_per_source;
        let max = MAX_SESSIONS as u32;
        range("sessions_per_source(burst)", burst, 1, max)?;
        range("sessions_per_source(per_second)", per_second, 1, max)?;
        let (min, max) = (MIN_IDLE_TIMEOUT, MAX_DURATION);
        time_range("proof_timeout (ms)", self.proof_timeout, min, max)?;
        if let Some(idle) = self.idle_timeout {
            time_range("idle_timeout (ms)", idle, MIN_IDLE_TIMEOUT, MAX_DURATION)?;
        }
        time_range("linger (ms)", self.linger, Duration::ZERO, MAX_DURATION)?;
        if let Some(n) = self.reuse_port {
            range("reuse_port", n, 1, MAX_REUSE_PORT)?;
        }
        Ok(())
    }
}

/// What a packet carries besides the KCP segment: the crypto header and
/// trailer, and the FEC header when sending FEC.
fn packet_overhead(crypto: &PacketCrypto, fec: bool) -> usize {
    let fec_header = if fec { fec::DATA_HEADER } else { 0 };
    crypto.header_len() + fec_header + crypto.trailer_len()
}

/// [`Config::write_capacity`] of an ARQ configuration.
pub(super) fn write_capacity(a: &ArqConfig) -> usize {
    (2 * usize::from(a.snd_wnd) + usize::from(a.rcv_wnd))
        * a.mtu.saturating_sub(arq::segment::HEADER_LEN)
}

/// Whole milliseconds of a duration already checked against its range.
fn ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// `Ok` when `min <= value <= max`, else [`ConfigError::OutOfRange`].
fn range<T>(name: &'static str, value: T, min: T, max: T) -> Result<(), ConfigError>
where
    T: PartialOrd + TryInto<u64>,
{
    if min <= value && value <= max {
        return Ok(());
    }
    let wide = |v: T| v.try_into().unwrap_or(u64::MAX);
    Err(ConfigError::OutOfRange {
        name,
        value: wide(value),
        min: wide(min),
        max: wide(max),
    })
}

/// `Ok` when `min <= value <= max`, else [`ConfigError::OutOfRange`] in
/// whole milliseconds (`name` says "(ms)").
fn time_range(
    name: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    Err(ConfigError::OutOfRange {
        name,
        value: ms(value),
        min: ms(min),
        max: ms(max),
    })
}

/// The backed-off RTO cap in force must not be below the RTO floor in force
/// (explicit, the preset's, or kcp-go's).
fn check_rto_cap(arq: &ArqConfig) -> Result<(), ConfigError> {
    let kcp_go_floor = if arq.nodelay { 30 } else { 100 };
    let floor = arq.min_rto.unwrap_or(kcp_go_floor);
    match arq.max_rto {
        Some(cap) => time_range(
            "max_rto (ms)",
            Duration::from_millis(cap.into()),
            Duration::from_millis(floor.into()),
            MAX_RTO,
        ),
        None => Ok(()),
    }
}
