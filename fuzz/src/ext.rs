//! Helpers for the targets that drive a listener's `Conn` whose kcpio
//! extension the peer offered by a tagged window probe (`dgram_fec`,
//! `stream_fec`): the configurations, the offer, the input's records and
//! the bounded transmit drain.

use std::sync::OnceLock;
use std::time::Duration;

use kcpio::{Config, ConfigBuilder, Conn, Key, Method, Preset};

/// The session's conv.
pub const CONV: u32 = 0x0102_0304;

/// The target's configuration: the fast3 preset, `null` (or, with `aead`,
/// AES-GCM) crypto under the passphrase `fuzz`, then `extend`. Both are
/// built once, by the first call (a target passes one `extend`): a
/// passphrase's key derivation (PBKDF2, 4,096 rounds) per input was most
/// of an iteration's time, and a `Config` is immutable, so sharing it
/// keeps every input deterministic.
pub fn config(aead: bool, extend: fn(ConfigBuilder) -> ConfigBuilder) -> &'static Config {
    static CONFIGS: OnceLock<[Config; 2]> = OnceLock::new();
    let build = |method| {
        extend(
            Config::builder()
                .preset(Preset::Fast3)
                .crypto(method, Key::passphrase("fuzz")),
        )
        .build()
        .expect("the fuzz configuration is valid")
    };
    &CONFIGS.get_or_init(|| [build(Method::Null), build(Method::Aes128Gcm)])[usize::from(aead)]
}

/// A listener's session of `config` that heard the peer's offer at time
/// zero: a WASK opener whose `frg` is `tag`; `None` when `config` makes
/// no session.
pub fn offered(config: &Config, tag: u8) -> Option<Conn> {
    let mut conn = Conn::new(CONV, config).ok()?;
    conn.answer_datagram_fec_only();
    let mut wask = [0u8; 24];
    wask[..4].copy_from_slice(&CONV.to_le_bytes());
    wask[4] = 83;
    wask[5] = tag;
    let _ = conn.handle_packet(Duration::ZERO, &wask);
    Some(conn)
}

/// One input record `[advance, kind, len_lo, len_hi, bytes...]`.
pub struct Record<'a> {
    /// How far the clock moves first.
    pub advance: Duration,
    /// What the record is (each target reads its own bits).
    pub kind: u8,
    /// The low byte of the length, which targets reuse as a size.
    pub len_lo: u8,
    /// The record's bytes (at most the length, fewer at the input's end).
    pub bytes: &'a [u8],
}

/// The next record of `rest`, which moves past it.
pub fn next_record<'a>(rest: &mut &'a [u8]) -> Option<Record<'a>> {
    let [adv, kind, lo, hi, tail @ ..] = *rest else {
        return None;
    };
    let n = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
    let (bytes, tail) = tail.split_at(n);
    *rest = tail;
    Some(Record {
        advance: Duration::from_millis(u64::from(*adv)),
        kind: *kind,
        len_lo: *lo,
        bytes,
    })
}

/// Runs `conn`'s timers at `now` and drains what it sends into `slot`,
/// checking each packet fits a datagram and the drain is bounded.
pub fn drain(conn: &mut Conn, now: Duration, slot: &mut [u8]) {
    conn.handle_timeout(now);
    let mut out = 0;
    while let Some(t) = conn.poll_transmit(now, slot) {
        assert!(conn.header_len() + t.len <= slot.len());
        out += 1;
        assert!(out <= 4096, "an unbounded drain");
    }
}
