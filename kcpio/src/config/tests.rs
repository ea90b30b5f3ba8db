use super::*;

#[test]
fn defaults_are_valid_and_kcp_go_defaults_match_kcp_go() {
    let c = Config::builder().build().unwrap();
    assert_eq!(c.kcp_mtu(), 1400);
    assert_eq!((c.inner.arq.snd_wnd, c.inner.arq.rcv_wnd), (1024, 1024));
    assert_eq!((c.inner.arq.interval, c.inner.arq.fast_resend), (30, 2));
    assert!(c.inner.arq.no_congestion && !c.inner.arq.nodelay);
    assert_eq!(c.inner.arq.dead_link, u32::MAX);
    assert!(!c.is_stream());
    assert_eq!(c.inner.accept_backlog, 128);
    assert_eq!(c.inner.idle_timeout, Some(DEFAULT_IDLE_TIMEOUT));
    assert_eq!(c.inner.keepalive, Some(DEFAULT_KEEPALIVE));
    assert_eq!(c.inner.connect_timeout, Some(DEFAULT_CONNECT_TIMEOUT));
    assert!(c.inner.connect_probe);
    assert_eq!(c.write_capacity(), 3 * 1024 * 1376);
    assert_eq!(c.inner.sessions_per_source, (1024, 256));
    assert_eq!(c.inner.proof_timeout, Duration::from_secs(10));

    let k = Config::builder().kcp_go_defaults().build().unwrap();
    assert_eq!((k.inner.arq.snd_wnd, k.inner.arq.rcv_wnd), (32, 32));
    assert_eq!((k.inner.arq.interval, k.inner.arq.fast_resend), (100, 0));
    assert!(!k.inner.arq.no_congestion);
    assert_eq!(k.inner.arq.dead_link, u32::MAX);
    assert_eq!((k.inner.idle_timeout, k.inner.keepalive), (None, None));
    assert!(!k.inner.connect_probe);
    assert_eq!(k.write_capacity(), 96 * 1376);
}

#[test]
fn liveness_options_are_optional_and_range_checked() {
    let secs = Duration::from_secs;
    let c = Config::builder().idle_timeout(None).build().unwrap();
    assert_eq!(c.inner.idle_timeout, None);
    assert_eq!(c.inner.keepalive, Some(DEFAULT_KEEPALIVE));
    // A short idle timeout brings the default keepalive down with it.
    let c = Config::builder().idle_timeout(secs(3)).build().unwrap();
    assert_eq!(c.inner.keepalive, Some(secs(1)));
    let c = Config::builder()
        .idle_timeout(Duration::ZERO)
        .keepalive(None)
        .connect_timeout(None)
        .build()
        .unwrap();
    assert_eq!(
        (
            c.inner.idle_timeout,
            c.inner.keepalive,
            c.inner.connect_timeout
        ),
        (None, None, None)
    );
    let err = |b: ConfigBuilder| b.build().unwrap_err();
    for e in [
        err(Config::builder().keepalive(Duration::from_millis(99))),
        err(Config::builder().keepalive(secs(86_401))),
        err(Config::builder().connect_timeout(Duration::from_millis(1))),
        err(Config::builder().idle_timeout(secs(5)).keepalive(secs(5))),
    ] {
        assert!(matches!(e, ConfigError::OutOfRange { .. }), "{e}");
    }
    let e = err(Config::builder().idle_timeout(secs(5)).keepalive(secs(6)));
    assert!(e.to_string().contains("100..=4999"), "{e}");
}

#[test]
fn windows_too_small_for_an_echo_are_refused() {
    // (2 x 2 + 2) x 1376 = 8 KB: a 16 KiB request echoed back deadlocks.
    let e = Config::builder().window(2, 2).build().unwrap_err();
    assert!(
        matches!(e, ConfigError::OutOfRange { value: 8256, .. }),
        "{e}"
    );
    assert!(Config::builder().window(4, 4).build().is_ok());
}

#[test]
fn fec_max_shards_is_range_checked() {
    assert_eq!(
        Config::builder().build().unwrap().inner.fec_max_shards,
        fec::DEFAULT_MAX_SHARDS
    );
    assert_eq!(
        Config::builder()
            .fec_max_shards(13)
            .build()
            .unwrap()
            .inner
            .fec_max_shards,
        13
    );
    for bad in [0, 1, 257] {
        let err = Config::builder().fec_max_shards(bad).build().unwrap_err();
        assert!(matches!(
            err,
            ConfigError::OutOfRange {
                name: "fec_max_shards",
                ..
            }
        ));
        assert!(err.to_string().contains("2..=256"), "{err}");
    }
}

#[test]
fn kcp_mtu_deducts_headers_like_wire_2_5() {
    let mtu = |mtu, m: Method, fec: (usize, usize)| {
        Config::builder()
            .mtu(mtu)
            .crypto(m, Key::passphrase("k"))
            .fec(fec.0, fec.1)
            .build()
            .unwrap()
            .kcp_mtu()
    };
    assert_eq!(mtu(1400, Method::Null, (0, 0)), 1400);
    assert_eq!(mtu(1400, Method::Aes, (0, 0)), 1380);
    assert_eq!(mtu(1400, Method::Null, (10, 3)), 1392);
    assert_eq!(mtu(1400, Method::Aes, (10, 3)), 1372);
    assert_eq!(mtu(1350, Method::Aes, (10, 3)), 1322);
    assert_eq!(mtu(1400, Method::Aes128Gcm, (0, 0)), 1372);
    assert_eq!(mtu(1400, Method::Aes128Gcm, (10, 3)), 1364);
    assert_eq!(mtu(1500, Method::Null, (0, 0)), 1500);
}

#[test]
fn fake_tcp_takes_24_bytes_off_the_datagram_and_the_kcp_mtu() {
    let build = |mtu, carrier| {
        Config::builder()
            .mtu(mtu)
            .crypto(Method::Aes, Key::passphrase("k"))
            .fec(10, 3)
            .carrier(carrier)
            .build()
    };
    let udp = build(1350, Carrier::Udp).unwrap();
    let tcp = build(1350, Carrier::FakeTcp).unwrap();
    assert_eq!(udp.kcp_mtu() - tcp.kcp_mtu(), 24);
    assert_eq!(tcp.inner.mtu, 1326);
    assert_eq!(udp.inner.carrier, Carrier::Udp);
    assert_eq!(
        Config::builder().build().unwrap().inner.carrier,
        Carrier::Udp
    );
    // The mtu must leave room for the longer header too.
    let min_udp = (20..200).find(|&m| build(m, Carrier::Udp).is_ok()).unwrap();
    assert!(build(min_udp, Carrier::FakeTcp).is_err());
    assert!(build(min_udp + 24, Carrier::FakeTcp).is_ok());
    let err = build(min_udp, Carrier::FakeTcp).unwrap_err();
    assert!(err.to_string().contains("fake-TCP"), "{err}");
}

#[test]
fn invalid_settings_are_typed_errors() {
    let e = Config::builder()
        .mtu(50)
        .crypto(Method::Aes128Gcm, Key::passphrase("k"))
        .fec(10, 3)
        .build()
        .unwrap_err();
    assert_eq!(
        e,
        ConfigError::MtuTooSmall {
            mtu: 50,
            overhead: 36
        }
    );
    assert_eq!(
        Config::builder().window(0, 32).build().unwrap_err(),
        ConfigError::OutOfRange {
            name: "window(send)",
            value: 0,
            min: 1,
            max: 65535
        }
    );
    assert!(matches!(
        Config::builder().fec(10, 0).build().unwrap_err(),
        ConfigError::InvalidFec { .. }
    ));
    assert!(matches!(
        Config::builder().fec(200, 100).build().unwrap_err(),
        ConfigError::InvalidFec { .. }
    ));
    assert!(matches!(
        Config::builder().accept_backlog(0).build().unwrap_err(),
        ConfigError::OutOfRange {
            name: "accept_backlog",
            ..
        }
    ));
}

#[test]
fn key_and_dead_link_rules() {
    assert!(matches!(
        Config::builder()
            .crypto(Method::Aes128, Key::raw(vec![1u8; 8]))
            .build()
            .unwrap_err(),
        ConfigError::InvalidKey(_)
    ));
    // A longer raw key is cut to the method's length, like kcptun's prefix.
    Config::builder()
        .crypto(Method::Aes128, Key::raw(vec![1u8; 32]))
        .build()
        .unwrap();
    let c = Config::builder().dead_link(0).build().unwrap();
    assert_eq!(c.inner.arq.dead_link, u32::MAX);
}

#[test]
fn custom_nodelay_overrides_the_preset() {
    let c = Config::builder()
        .preset(Preset::Fast3)
        .nodelay(false, 10, 3, false)
        .build()
        .unwrap();
    assert!(!c.inner.arq.nodelay);
    assert_eq!(c.inner.arq.interval, 10);
    assert_eq!(c.inner.arq.fast_resend, 3);
    assert!(!c.inner.arq.no_congestion);
}

#[test]
fn presets_follow_kcptun() {
    let c = Config::builder().preset(Preset::Fast3).build().unwrap();
    assert!(c.inner.arq.nodelay);
    assert_eq!(c.inner.arq.interval, 10);
    assert_eq!(c.inner.arq.fast_resend, 2);
    assert!(c.inner.arq.no_congestion);
    assert_eq!(Preset::from_name("fast2"), Some(Preset::Fast2));
    assert_eq!(Preset::from_name("turbo"), None);
}

#[test]
fn lowlat_preset_sets_its_knobs_and_options_override_them() {
    assert_eq!(Preset::from_name("lowlat"), Some(Preset::LowLatency));
    for p in Preset::ALL {
        assert_eq!(Preset::from_name(p.name()), Some(p));
    }
    let c = Config::builder()
        .preset(Preset::LowLatency)
        .build()
        .unwrap();
    let a = &c.inner.arq;
    assert!(a.nodelay && a.no_congestion && a.ack_nodelay && a.tail_probe);
    assert_eq!((a.interval, a.fast_resend), (10, 1));
    assert_eq!(a.min_rto, Some(20));
    assert_eq!(a.backoff_percent, Some(25));
    assert_eq!(a.max_rto, Some(200));
    assert_eq!(c.inner.fec, Some((2, 2)));
    assert_eq!(c.inner.fec_group_deadline, Some(10));
    assert_eq!(c.kcp_mtu(), 1392);
    // Explicit settings win over the preset's.
    let c = Config::builder()
        .preset(Preset::LowLatency)
        .fec(0, 0)
        .ack_nodelay(false)
        .tail_probe(false)
        .min_rto(Duration::from_millis(50))
        .build()
        .unwrap();
    assert_eq!(c.inner.fec, None);
    assert!(!c.inner.arq.ack_nodelay && !c.inner.arq.tail_probe);
    assert_eq!(c.inner.arq.min_rto, Some(50));
    let c = Config::builder()
        .preset(Preset::LowLatency)
        .fec(10, 3)
        .build()
        .unwrap();
    assert_eq!(c.inner.fec, Some((10, 3)));
    assert_eq!(c.inner.fec_group_deadline, Some(10));
    // The kcp-go presets carry none of the kcpio-only knobs.
    for p in [Preset::Default, Preset::Fast3] {
        let c = Config::builder().preset(p).build().unwrap();
        let a = &c.inner.arq;
        assert_eq!(
            (a.min_rto, a.backoff_percent, a.max_rto),
            (None, None, None)
        );
        assert!(!a.tail_probe && !a.ack_nodelay);
        assert_eq!(c.inner.fec, None);
        assert_eq!(c.inner.fec_group_deadline, None);
    }
}

/// Every range rule of the builder: the value just outside each bound is
/// refused with an error naming the option, the value and the range;
/// the bound itself is accepted.
#[test]
fn every_range_rule_refuses_and_names_value_and_range() {
    let b = Config::builder;
    let ms = Duration::from_millis;
    let s = Duration::from_secs;
    let fec = || b().fec(10, 3);
    let lowlat = || b().preset(Preset::LowLatency);
    let refused: Vec<(ConfigBuilder, &str, &str)> = vec![
        (b().mtu(9000), "mtu", "mtu = 9000 is outside 25..=1500"),
        (b().mtu(1501), "mtu", "mtu = 1501 is outside 25..=1500"),
        (
            b().window(0, 32),
            "window(send)",
            "window(send) = 0 is outside 1..=65535",
        ),
        (
            b().window(32, 0),
            "window(recv)",
            "window(recv) = 0 is outside 1..=65535",
        ),
        (
            b().nodelay(true, 9, 2, true),
            "nodelay(interval)",
            "nodelay(interval) = 9 is outside 10..=5000",
        ),
        (
            b().nodelay(false, 5001, 0, false),
            "nodelay(interval)",
            "= 5001 is outside 10..=5000",
        ),
        (
            b().fec_max_shards(1),
            "fec_max_shards",
            "fec_max_shards = 1 is outside 2..=256",
        ),
        (
            b().fec_max_shards(257),
            "fec_max_shards",
            "= 257 is outside 2..=256",
        ),
        (
            fec().fec_group_deadline(Duration::ZERO),
            "fec_group_deadline (ms)",
            "fec_group_deadline (ms) = 0 is outside 1..=5000",
        ),
        (
            fec().fec_group_deadline(ms(5001)),
            "fec_group_deadline (ms)",
            "= 5001 is outside 1..=5000",
        ),
        (
            b().fec_group_deadline(ms(10)),
            "fec_group_deadline",
            "fec_group_deadline needs FEC on",
        ),
        (
            lowlat().fec(0, 0).fec_group_deadline(ms(10)),
            "fec_group_deadline",
            "needs FEC on",
        ),
        (
            b().min_rto(Duration::ZERO),
            "min_rto (ms)",
            "min_rto (ms) = 0 is outside 1..=60000",
        ),
        (
            b().min_rto(Duration::from_micros(999)),
            "min_rto (ms)",
            "= 0 is outside 1..=60000",
        ),
        (
            b().min_rto(ms(60_001)),
            "min_rto (ms)",
            "= 60001 is outside 1..=60000",
        ),
        (
            b().rto_backoff_percent(1001),
            "rto_backoff_percent",
            "rto_backoff_percent = 1001 is outside 0..=1000",
        ),
        (
            b().min_rto(ms(50)).max_rto(ms(40)),
            "max_rto (ms)",
            "max_rto (ms) = 40 is outside 50..=60000",
        ),
        (
            b().max_rto(ms(99)),
            "max_rto (ms)",
            "= 99 is outside 100..=60000",
        ),
        (
            b().preset(Preset::Fast3).max_rto(ms(29)),
            "max_rto (ms)",
            "= 29 is outside 30..=60000",
        ),
        (
            lowlat().min_rto(ms(300)),
            "max_rto (ms)",
            "= 200 is outside 300..=60000",
        ),
        (
            b().max_rto(ms(60_001)),
            "max_rto (ms)",
            "= 60001 is outside 100..=60000",
        ),
        (b().dscp(64), "dscp", "dscp = 64 is outside 0..=63"),
        (b().dscp(255), "dscp", "dscp = 255 is outside 0..=63"),
        (
            b().socket_buffers((1 << 30) + 1, 0),
            "socket_buffers(recv)",
            "= 1073741825 is outside 0..=1073741824",
        ),
        (
            b().socket_buffers(0, usize::MAX),
            "socket_buffers(send)",
            "is outside 0..=1073741824",
        ),
        (
            b().accept_backlog(0),
            "accept_backlog",
            "accept_backlog = 0 is outside 1..=65536",
        ),
        (
            b().accept_backlog(65_537),
            "accept_backlog",
            "= 65537 is outside 1..=65536",
        ),
        (
            b().max_sessions(0),
            "max_sessions",
            "max_sessions = 0 is outside 1..=16777216",
        ),
        (
            b().max_sessions((1 << 24) + 1),
            "max_sessions",
            "is outside 1..=16777216",
        ),
        (
            b().sessions_per_source(0, 1),
            "sessions_per_source(burst)",
            "sessions_per_source(burst) = 0 is outside 1..=16777216",
        ),
        (
            b().sessions_per_source(1, 0),
            "sessions_per_source(per_second)",
            "= 0 is outside 1..=16777216",
        ),
        (
            b().sessions_per_source((1 << 24) + 1, 1),
            "sessions_per_source(burst)",
            "= 16777217 is outside 1..=16777216",
        ),
        (
            b().proof_timeout(ms(99)),
            "proof_timeout (ms)",
            "proof_timeout (ms) = 99 is outside 100..=86400000",
        ),
        (
            b().proof_timeout(s(86_401)),
            "proof_timeout (ms)",
            "= 86401000 is outside 100..=86400000",
        ),
        (
            b().idle_timeout(Duration::from_nanos(1)),
            "idle_timeout (ms)",
            "idle_timeout (ms) = 0 is outside 100..=86400000",
        ),
        (
            b().idle_timeout(ms(99)),
            "idle_timeout (ms)",
            "= 99 is outside 100..=86400000",
        ),
        (
            b().idle_timeout(s(86_401)),
            "idle_timeout (ms)",
            "= 86401000 is outside 100..=86400000",
        ),
        (
            b().linger(s(86_401)),
            "linger (ms)",
            "linger (ms) = 86401000 is outside 0..=86400000",
        ),
        (
            b().reuse_port(0),
            "reuse_port",
            "reuse_port = 0 is outside 1..=256",
        ),
        (
            b().reuse_port(257),
            "reuse_port",
            "= 257 is outside 1..=256",
        ),
    ];
    for (builder, name, message) in refused {
        let err = builder.build().unwrap_err();
        let named = match &err {
            ConfigError::OutOfRange { name, .. } | ConfigError::Requires { name, .. } => *name,
            other => panic!("{name}: untyped refusal {other:?}"),
        };
        assert_eq!(named, name, "{err}");
        assert!(err.to_string().contains(message), "{name}: {err}");
    }
    let accepted: Vec<ConfigBuilder> = vec![
        b().mtu(1500),
        b().window(1, 1024),
        b().window(1024, 1),
        b().window(u16::MAX, u16::MAX),
        b().nodelay(true, 10, 2, true),
        b().nodelay(false, 5000, 0, false),
        b().fec_max_shards(2),
        b().fec_max_shards(256),
        fec().fec_group_deadline(ms(1)),
        fec().fec_group_deadline(ms(5000)),
        lowlat().fec_group_deadline(ms(30)),
        b().min_rto(ms(1)),
        b().min_rto(ms(60_000)),
        b().rto_backoff_percent(0),
        b().rto_backoff_percent(1000),
        b().max_rto(ms(100)),
        b().max_rto(ms(60_000)),
        b().preset(Preset::Fast3).max_rto(ms(30)),
        b().min_rto(ms(5)).max_rto(ms(5)),
        lowlat().min_rto(ms(300)).max_rto(ms(300)),
        b().dscp(63),
        b().socket_buffers(1 << 30, 1 << 30),
        b().accept_backlog(1),
        b().accept_backlog(65_536),
        b().max_sessions(1),
        b().max_sessions(1 << 24),
        b().sessions_per_source(1, 1),
        b().sessions_per_source(1 << 24, 1 << 24),
        b().proof_timeout(ms(100)),
        b().proof_timeout(s(86_400)),
        b().idle_timeout(Duration::ZERO),
        b().idle_timeout(ms(100)),
        b().idle_timeout(s(86_400)),
        b().linger(Duration::ZERO),
        b().linger(s(86_400)),
        b().reuse_port(1),
        b().reuse_port(256),
    ];
    for builder in accepted {
        let shown = format!("{builder:?}");
        builder.build().unwrap_or_else(|e| panic!("{e}: {shown}"));
    }
}

#[test]
fn nothing_is_clamped() {
    let ms = Duration::from_millis;
    let c = Config::builder().mtu(1500).build().unwrap();
    assert_eq!((c.inner.mtu, c.kcp_mtu()), (1500, 1500));
    let c = Config::builder()
        .nodelay(true, 5000, 0, false)
        .build()
        .unwrap();
    assert_eq!(c.inner.arq.interval, 5000);
    let c = Config::builder()
        .min_rto(ms(1))
        .max_rto(ms(1))
        .build()
        .unwrap();
    assert_eq!(
        (c.inner.arq.min_rto, c.inner.arq.max_rto),
        (Some(1), Some(1))
    );
    let c = Config::builder().dscp(63).build().unwrap();
    assert_eq!(c.inner.dscp, 63);
}

#[test]
fn default_is_the_builders_default() {
    let a = Config::default();
    let b = Config::builder().build().unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    // The key schedule too (the `Debug` above leaves it out).
    assert_eq!(a.inner.crypto.method(), b.inner.crypto.method());
    assert_eq!(a.inner.crypto.header_len(), b.inner.crypto.header_len());
}

#[test]
fn debug_never_shows_the_key() {
    let c = Config::builder()
        .crypto(Method::Aes128, Key::passphrase("hunter2"))
        .build()
        .unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
    assert!(!format!("{:?}", Key::passphrase("hunter2")).contains("hunter2"));
}

#[test]
fn datagram_fec_needs_room_for_its_report() {
    // Under aes-128-gcm with FEC a 70-byte mtu leaves a KCP segment room
    // (25 bytes and more) but 42 plaintext bytes: less than a report.
    let b = || {
        Config::builder()
            .crypto(Method::Aes128Gcm, Key::passphrase("k"))
            .fec(10, 3)
            .window(8192, 8192)
            .mtu(70)
    };
    assert!(b().build().is_ok());
    let e = b().datagram_fec(true).build().unwrap_err();
    assert!(matches!(e, ConfigError::OutOfRange { .. }), "{e}");
    assert!(e.to_string().contains("datagram_fec"), "{e}");
    assert!(b().mtu(78).datagram_fec(true).build().is_ok());
}
