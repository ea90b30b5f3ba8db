//! Session transcripts (bytes in, frames out, explicit `now`) and property
//! tests of the codec and the session.

use std::time::Duration;

use proptest::prelude::*;

use super::frame::{Cmd, Frames, HEADER_LEN, Header, MAX_PAYLOAD, Upd};
use super::snappy::{Decoder, Encoder, MAX_ENCODED_CHUNK, masked_crc};
use super::{Error, MuxConfig, OpenError, ProtocolError, Role, Session, StreamError, Version};

const T0: Duration = Duration::ZERO;

fn frame(v: u8, cmd: Cmd, sid: u32, body: &[u8]) -> Vec<u8> {
    let mut f = Header::new(v, cmd, body.len() as u16, sid)
        .to_bytes()
        .to_vec();
    f.extend_from_slice(body);
    f
}

fn out(s: &mut Session) -> Vec<(Cmd, u32, Vec<u8>)> {
    let mut buf = vec![0; 200_000];
    let n = s.poll_transmit(&mut buf);
    Frames::new(&buf[..n])
        .map(|f| {
            let f = f.expect("whole frames");
            (
                Cmd::from_u8(f.header().cmd).unwrap(),
                f.header().sid,
                f.body().to_vec(),
            )
        })
        .collect()
}

fn session(role: Role, cfg: &MuxConfig) -> Session {
    Session::new(role, cfg, T0)
}

fn v2() -> MuxConfig {
    MuxConfig::builder()
        .version(Version::V2)
        .stream_window(65_536)
        .build()
        .unwrap()
}

// ---- ids and opening --------------------------------------------------

#[test]
fn client_ids_start_at_3_server_at_2_and_syn_is_sent() {
    let cfg = MuxConfig::default();
    let mut c = session(Role::Client, &cfg);
    assert_eq!(c.open_stream(), Ok(3));
    assert_eq!(c.open_stream(), Ok(5));
    let mut s = session(Role::Server, &cfg);
    assert_eq!(s.open_stream(), Ok(2));
    assert_eq!(
        out(&mut c),
        vec![(Cmd::Syn, 3, vec![]), (Cmd::Syn, 5, vec![])]
    );
}

#[test]
fn open_skips_ids_the_peer_took_and_respects_the_limit() {
    let cfg = MuxConfig::builder().max_open_streams(2).build().unwrap();
    let mut c = session(Role::Client, &cfg);
    // The peer (no parity check in smux) opened stream 3.
    c.handle_input(&frame(1, Cmd::Syn, 3, &[])).unwrap();
    assert_eq!(c.accept_stream(), Some(3));
    assert_eq!(c.open_stream(), Ok(5));
    assert_eq!(c.open_stream(), Err(OpenError::TooManyStreams));
}

#[test]
fn syn_beyond_the_limit_is_answered_with_fin() {
    let cfg = MuxConfig::builder().max_open_streams(1).build().unwrap();
    let mut s = session(Role::Server, &cfg);
    let mut input = frame(1, Cmd::Syn, 3, &[]);
    input.extend(frame(1, Cmd::Syn, 5, &[]));
    input.extend(frame(1, Cmd::Syn, 3, &[])); // duplicate: ignored
    assert_eq!(s.handle_input(&input).unwrap(), input.len());
    assert_eq!(out(&mut s), vec![(Cmd::Fin, 5, vec![])]);
    assert_eq!(s.stats().refused_streams, 1);
    assert_eq!(s.stats().duplicate_syns, 1);
}

#[test]
fn full_backlog_refuses_the_stream_and_keeps_the_session() {
    let cfg = MuxConfig::builder().accept_backlog(1).build().unwrap();
    let mut s = session(Role::Server, &cfg);
    let mut input = frame(1, Cmd::Syn, 3, &[]);
    input.extend(frame(1, Cmd::Syn, 5, &[]));
    input.extend(frame(1, Cmd::Psh, 5, b"x"));
    input.extend(frame(1, Cmd::Psh, 3, b"y"));
    // The second SYN is refused; input never pauses.
    assert_eq!(s.handle_input(&input).unwrap(), input.len());
    assert!(s.wants_input());
    assert_eq!(out(&mut s), vec![(Cmd::Fin, 5, vec![])]);
    assert_eq!(s.stats().refused_backlog, 1);
    assert_eq!(s.stats().refused_streams, 1);
    assert_eq!(s.stats().dropped_bytes, 1);
    assert_eq!(s.accept_stream(), Some(3));
    let mut b = [0; 4];
    assert_eq!(s.read(3, &mut b), Ok(Some(1)));
    // Room again: the next SYN is accepted.
    s.handle_input(&frame(1, Cmd::Syn, 7, &[])).unwrap();
    assert_eq!(s.accept_stream(), Some(7));
}

// ---- limits against a hostile peer ------------------------------------

#[test]
fn open_rate_refuses_a_syn_flood_and_refills_with_time() {
    let cfg = MuxConfig::builder()
        .stream_opens_per_second(4)
        .build()
        .unwrap();
    let mut s = session(Role::Server, &cfg);
    let mut input = Vec::new();
    for sid in (3..=21).step_by(2) {
        input.extend(frame(1, Cmd::Syn, sid, &[]));
    }
    assert_eq!(s.handle_input(&input).unwrap(), input.len());
    // A burst of 4 is accepted, the other 6 are refused with FINs.
    assert_eq!(s.stream_count(), 4);
    assert_eq!(s.stats().refused_rate, 6);
    let fins: Vec<_> = out(&mut s)
        .into_iter()
        .map(|(c, sid, _)| (c, sid))
        .collect();
    assert_eq!(
        fins,
        [11, 13, 15, 17, 19, 21].map(|sid| (Cmd::Fin, sid)).to_vec()
    );
    // Half a second earns two tokens.
    s.set_time(Duration::from_millis(500));
    let mut input = Vec::new();
    for sid in (23..=27).step_by(2) {
        input.extend(frame(1, Cmd::Syn, sid, &[]));
    }
    s.handle_input(&input).unwrap();
    assert_eq!(s.stream_count(), 6);
    assert_eq!(s.stats().refused_rate, 7);
    // The session lives on and its streams work.
    assert!(s.error().is_none());
    assert_eq!(s.write(3, b"ok"), Ok(2));
}

#[test]
fn refusals_beyond_the_queue_are_counted_not_queued() {
    let cfg = MuxConfig::builder().max_open_streams(1).build().unwrap();
    let mut s = session(Role::Server, &cfg);
    let mut input = Vec::new();
    for i in 0..(super::REFUSED_QUEUE as u32 + 11) {
        input.extend(frame(1, Cmd::Syn, 3 + 2 * i, &[]));
    }
    s.handle_input(&input).unwrap();
    assert_eq!(s.stats().refused_limit, super::REFUSED_QUEUE as u64 + 10);
    assert_eq!(s.stats().unanswered_refusals, 10);
    assert_eq!(out(&mut s).len(), super::REFUSED_QUEUE);
}

#[test]
fn stream_send_buffer_bounds_one_stream() {
    let cfg = MuxConfig::builder().stream_send_buffer(10).build().unwrap();
    let mut s = session(Role::Client, &cfg);
    let a = s.open_stream().unwrap();
    assert_eq!(s.write(a, &[7; 25]), Ok(10));
    assert_eq!(s.write(a, &[7; 25]), Ok(0));
    assert_eq!(s.send_buffered(), 10);
    assert_eq!(out(&mut s).len(), 2); // SYN, PSH
    assert_eq!(s.send_buffered(), 0);
    assert_eq!(s.write(a, &[7; 25]), Ok(10));
}

#[test]
fn session_send_budget_bounds_all_streams_and_wakes_the_waiters() {
    let cfg = MuxConfig::builder()
        .stream_send_buffer(10)
        .session_send_buffer(15)
        .build()
        .unwrap();
    let mut s = session(Role::Client, &cfg);
    let a = s.open_stream().unwrap();
    let b = s.open_stream().unwrap();
    let c = s.open_stream().unwrap();
    assert_eq!(s.write(a, &[1; 10]), Ok(10));
    assert_eq!(s.write(b, &[2; 10]), Ok(5));
    assert_eq!(s.write(c, &[3; 10]), Ok(0));
    assert_eq!(s.write(b, &[2; 10]), Ok(0));
    assert_eq!(s.send_buffered(), 15);
    assert_eq!(s.stats().send_budget_waits, 2);
    while s.poll_event().is_some() {}
    // The transport takes the data: both waiting writers are woken.
    let frames = out(&mut s);
    assert_eq!(frames.iter().filter(|f| f.0 == Cmd::Psh).count(), 2);
    let mut woken = Vec::new();
    while let Some(e) = s.poll_event() {
        woken.push(e);
    }
    assert!(woken.contains(&super::Event::Stream(b)));
    assert!(woken.contains(&super::Event::Stream(c)));
    assert_eq!(s.write(c, &[3; 10]), Ok(10));
}

#[test]
fn v1_peer_that_never_reads_bounds_our_output_to_the_session_budget() {
    // 1,000 streams each written to until writes return 0, with the
    // transport never taking anything: the queued bytes stop at the budget.
    let cfg = MuxConfig::builder()
        .stream_send_buffer(4096)
        .session_send_buffer(64 * 1024)
        .build()
        .unwrap();
    let mut s = session(Role::Server, &cfg);
    let data = [0u8; 1000];
    for _ in 0..1000 {
        let sid = s.open_stream().unwrap();
        while s.write(sid, &data).unwrap() > 0 {}
    }
    assert_eq!(s.send_buffered(), 64 * 1024);
}

// ---- data, FIN, drops ---------------------------------------------------

#[test]
fn frames_straddle_calls_and_fin_gives_eof_after_data() {
    let mut s = session(Role::Server, &MuxConfig::default());
    let mut input = frame(1, Cmd::Syn, 3, &[]);
    input.extend(frame(1, Cmd::Psh, 3, b"hello"));
    input.extend(frame(1, Cmd::Psh, 3, &[])); // empty PSH: ignored
    input.extend(frame(1, Cmd::Fin, 3, &[]));
    for b in input.chunks(3) {
        assert_eq!(s.handle_input(b).unwrap(), b.len());
    }
    let sid = s.accept_stream().unwrap();
    let mut buf = [0; 3];
    // What a read would return is known before it: the bytes, then the end.
    assert_eq!(s.read_ready(sid), Ok(Some(5)));
    assert_eq!(s.read(sid, &mut buf), Ok(Some(3)));
    assert_eq!(s.read_ready(sid), Ok(Some(2)));
    assert_eq!(s.read(sid, &mut buf), Ok(Some(2)));
    assert_eq!(&buf[..2], b"lo");
    assert_eq!(s.read_ready(sid), Ok(Some(0)));
    assert_eq!(s.read(sid, &mut buf), Ok(Some(0)));
    // The peer's FIN does not close our half: we may still write.
    assert_eq!(s.write(sid, b"late"), Ok(4));
}

#[test]
fn psh_for_unknown_or_finished_streams_is_dropped_and_counted() {
    let mut s = session(Role::Server, &MuxConfig::default());
    let mut input = frame(1, Cmd::Psh, 9, b"nobody");
    input.extend(frame(1, Cmd::Syn, 3, &[]));
    input.extend(frame(1, Cmd::Fin, 3, &[]));
    input.extend(frame(1, Cmd::Psh, 3, b"after fin"));
    input.extend(frame(1, Cmd::Fin, 11, &[]));
    assert_eq!(s.handle_input(&input).unwrap(), input.len());
    assert_eq!(s.stats().dropped_frames, 2);
    assert_eq!(s.stats().dropped_bytes, 15);
    assert_eq!(s.buffered(), 0);
}

#[test]
fn fin_follows_queued_data_and_close_frees_the_entry() {
    let cfg = MuxConfig::builder().max_frame_size(4).build().unwrap();
    let mut c = session(Role::Client, &cfg);
    let sid = c.open_stream().unwrap();
    c.write(sid, b"abcdefghij").unwrap();
    assert_eq!(c.shutdown_write(sid), Ok(false));
    assert_eq!(c.write(sid, b"x"), Err(StreamError::WriteClosed));
    let frames = out(&mut c);
    let cmds: Vec<_> = frames.iter().map(|f| (f.0, f.2.len())).collect();
    assert_eq!(
        cmds,
        [
            (Cmd::Syn, 0),
            (Cmd::Psh, 4),
            (Cmd::Psh, 4),
            (Cmd::Psh, 2),
            (Cmd::Fin, 0)
        ]
    );
    assert_eq!(c.shutdown_write(sid), Ok(true));
    c.close_stream(sid);
    assert_eq!(c.stream_count(), 0);
    assert!(out(&mut c).is_empty(), "one FIN only");
}

#[test]
fn streams_share_output_round_robin() {
    let cfg = MuxConfig::builder().max_frame_size(100).build().unwrap();
    let mut c = session(Role::Client, &cfg);
    let a = c.open_stream().unwrap();
    let b = c.open_stream().unwrap();
    c.write(a, &[1; 300]).unwrap();
    c.write(b, &[2; 300]).unwrap();
    let sids: Vec<u32> = out(&mut c)
        .iter()
        .filter(|f| f.0 == Cmd::Psh)
        .map(|f| f.1)
        .collect();
    assert_eq!(sids, [a, b, a, b, a, b]);
}

#[test]
fn small_output_buffers_get_whole_frames() {
    let mut c = session(Role::Client, &MuxConfig::default());
    let sid = c.open_stream().unwrap();
    c.write(sid, &[9; 1000]).unwrap();
    let mut all = Vec::new();
    let mut buf = [0; 20];
    loop {
        let n = c.poll_transmit(&mut buf);
        if n == 0 {
            break;
        }
        all.extend_from_slice(&buf[..n]);
    }
    let total: usize = Frames::new(&all).map(|f| f.unwrap().body().len()).sum();
    assert_eq!(total, 1000);
}

// ---- budgets --------------------------------------------------------------

#[test]
fn receive_budget_pauses_input_at_a_frame_boundary() {
    let cfg = MuxConfig::builder()
        .receive_buffer(10)
        .stream_window(10)
        .build()
        .unwrap();
    let mut s = session(Role::Server, &cfg);
    let mut input = frame(1, Cmd::Syn, 3, &[]);
    input.extend(frame(1, Cmd::Psh, 3, &[7; 12])); // exceeds by one frame
    input.extend(frame(1, Cmd::Psh, 3, &[8; 2]));
    let first = s.handle_input(&input).unwrap();
    assert_eq!(first, 8 + 8 + 12);
    assert!(!s.wants_input());
    let sid = s.accept_stream().unwrap();
    let mut buf = [0; 5];
    s.read(sid, &mut buf).unwrap();
    assert!(s.wants_input(), "budget back above zero");
    assert_eq!(s.handle_input(&input[first..]).unwrap(), 10);
}

#[test]
fn closing_a_stream_returns_its_budget() {
    let cfg = MuxConfig::builder()
        .receive_buffer(100)
        .stream_window(50)
        .build()
        .unwrap();
    let mut s = session(Role::Server, &cfg);
    let mut input = frame(1, Cmd::Syn, 3, &[]);
    input.extend(frame(1, Cmd::Psh, 3, &[7; 100]));
    s.handle_input(&input).unwrap();
    assert!(!s.wants_input());
    let sid = s.accept_stream().unwrap();
    s.close_stream(sid);
    assert_eq!(s.buffered(), 0);
    assert!(s.wants_input());
}

// ---- v2 flow control -------------------------------------------------------

#[test]
fn v2_reader_sends_upd_on_first_read_and_every_half_window() {
    let mut s = session(Role::Server, &v2());
    let mut input = frame(2, Cmd::Syn, 3, &[]);
    input.extend(frame(2, Cmd::Psh, 3, &[1; 50_000]));
    s.handle_input(&input).unwrap();
    let sid = s.accept_stream().unwrap();
    let mut buf = [0; 10_000];
    let mut upds = Vec::new();
    for _ in 0..5 {
        s.read(sid, &mut buf).unwrap();
        for (cmd, _, body) in out(&mut s) {
            assert_eq!(cmd, Cmd::Upd);
            upds.push(Upd::from_bytes(body.as_slice().try_into().unwrap()));
        }
    }
    // First read (10,000), then once 32,768 more were read (at 50,000).
    let consumed: Vec<u32> = upds.iter().map(|u| u.consumed).collect();
    assert_eq!(consumed, [10_000, 50_000]);
    assert!(upds.iter().all(|u| u.window == 65_536));
}

#[test]
fn v2_writer_honours_the_peer_window() {
    let mut c = session(Role::Client, &v2());
    let sid = c.open_stream().unwrap();
    let mut sent = 0;
    // Initial window 256 KiB.
    for _ in 0..10 {
        while c.write(sid, &[0; 65_536]).unwrap() > 0 {}
        let n: usize = out(&mut c).iter().map(|f| f.2.len()).sum();
        sent += n;
        if n == 0 {
            break;
        }
    }
    assert_eq!(sent, 262_144);
    // The peer consumed 100,000 with a 65,536 window: 100,000 + 65,536 - sent.
    let upd = Upd {
        consumed: 100_000,
        window: 65_536,
    }
    .to_bytes();
    c.handle_input(&frame(2, Cmd::Upd, sid, &upd)).unwrap();
    assert!(out(&mut c).is_empty(), "inflight exceeds the new window");
    let upd = Upd {
        consumed: 262_144,
        window: 65_536,
    }
    .to_bytes();
    c.handle_input(&frame(2, Cmd::Upd, sid, &upd)).unwrap();
    let n: usize = out(&mut c).iter().map(|f| f.2.len()).sum();
    assert_eq!(n, 65_536);
    // A peer acknowledging more than was sent breaks the stream, as in Go.
    let upd = Upd {
        consumed: 1 << 30,
        window: 65_536,
    }
    .to_bytes();
    c.handle_input(&frame(2, Cmd::Upd, sid, &upd)).unwrap();
    let _ = out(&mut c);
    assert_eq!(c.write(sid, b"x"), Err(StreamError::PeerConsumedTooMuch));
}

#[test]
fn v1_skips_upd_frames() {
    let mut s = session(Role::Server, &MuxConfig::default());
    let upd = Upd {
        consumed: 1,
        window: 2,
    }
    .to_bytes();
    let mut input = frame(1, Cmd::Upd, 3, &upd);
    input.extend(frame(1, Cmd::Nop, 0, &[]));
    assert_eq!(s.handle_input(&input).unwrap(), input.len());
    assert_eq!(s.stats().ignored_upds, 1);
    assert!(s.error().is_none());
}

// ---- fatal errors ---------------------------------------------------------

#[test]
fn bad_frames_end_the_session_with_what_arrived() {
    let cases: [(&[u8], &str); 5] = [
        (&[2, 0, 0, 0, 3, 0, 0, 0], "version mismatch"),
        (&[1, 5, 0, 0, 0, 0, 0, 0], "unknown command 5"),
        (&[1, 3, 1, 0, 0, 0, 0, 0], "command 3 with invalid length 1"),
        (&[1, 0, 4, 0, 3, 0, 0, 0], "command 0 with invalid length 4"),
        (&[1, 4, 7, 0, 3, 0, 0, 0], "command 4 with invalid length 7"),
    ];
    for (bytes, text) in cases {
        let mut s = session(Role::Server, &MuxConfig::default());
        let e = s.handle_input(bytes).unwrap_err();
        assert!(matches!(e, Error::Protocol(_)), "{e:?}");
        assert!(e.to_string().contains(text), "{e}");
        assert!(!s.wants_input());
        assert!(!s.has_transmit());
        assert_eq!(s.open_stream(), Err(OpenError::Session(e)));
    }
    let e = ProtocolError::UnknownCommand {
        header: [1, 9, 0, 0, 0, 0, 0, 0],
    };
    assert_eq!(e.header()[1], 9);
}

#[test]
fn reads_drain_buffered_data_before_the_error() {
    let mut s = session(Role::Server, &MuxConfig::default());
    let mut input = frame(1, Cmd::Syn, 3, &[]);
    input.extend(frame(1, Cmd::Psh, 3, b"ok"));
    input.extend([9; 8]);
    assert!(s.handle_input(&input).is_err());
    let mut buf = [0; 8];
    // Accept is closed after the error, but the id is known: read it.
    assert_eq!(s.read(3, &mut buf), Ok(Some(2)));
    assert!(matches!(
        s.read(3, &mut buf),
        Err(StreamError::Session(Error::Protocol(_)))
    ));
}

// ---- keepalive ------------------------------------------------------------

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn keepalive_sends_nop_every_interval() {
    let mut c = session(Role::Client, &MuxConfig::default());
    assert_eq!(c.poll_timeout(), Some(secs(10)));
    c.handle_timeout(secs(10));
    assert_eq!(out(&mut c), vec![(Cmd::Nop, 0, vec![])]);
    assert_eq!(c.poll_timeout(), Some(secs(20)));
    // A late call skips missed ticks, one NOP.
    c.handle_input(&frame(1, Cmd::Nop, 0, &[])).unwrap();
    c.handle_timeout(secs(29));
    assert_eq!(out(&mut c).len(), 1);
    assert_eq!(c.poll_timeout(), Some(secs(30)));
}

#[test]
fn keepalive_times_out_between_one_and_two_periods_of_silence() {
    let mut c = session(Role::Client, &MuxConfig::default());
    // The last frame arrives at 5 s; the check at 30 s sees it, the one at
    // 60 s does not: 55 s of silence.
    c.handle_timeout(secs(5));
    c.handle_input(&frame(1, Cmd::Nop, 0, &[])).unwrap();
    c.handle_timeout(secs(30));
    assert!(c.error().is_none());
    c.handle_timeout(secs(59));
    assert!(c.error().is_none());
    c.handle_timeout(secs(60));
    assert_eq!(c.error(), Some(Error::KeepaliveTimeout));
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn keepalive_spares_a_session_paused_by_its_own_reader() {
    let cfg = MuxConfig::builder()
        .receive_buffer(4)
        .stream_window(4)
        .build()
        .unwrap();
    let mut s = session(Role::Server, &cfg);
    let mut input = frame(1, Cmd::Syn, 3, &[]);
    input.extend(frame(1, Cmd::Psh, 3, b"fill"));
    s.handle_input(&input).unwrap();
    for t in [30, 60, 90] {
        s.handle_timeout(secs(t));
    }
    assert!(s.error().is_none());
}

#[test]
fn disabled_keepalive_has_no_timer() {
    let cfg = MuxConfig::builder().disable_keepalive().build().unwrap();
    let mut s = session(Role::Client, &cfg);
    assert_eq!(s.poll_timeout(), None);
    s.handle_timeout(secs(1000));
    assert!(s.error().is_none() && !s.has_transmit());
}

#[test]
fn config_is_verified_like_go_smux() {
    let b = MuxConfig::builder;
    assert!(b().keepalive_timeout(secs(5)).build().is_err());
    assert!(b().keepalive_interval(Duration::ZERO).build().is_err());
    assert!(b().max_frame_size(0).build().is_err());
    assert!(b().max_frame_size(65_536).build().is_err());
    assert!(b().max_frame_size(65_535).build().is_ok());
    assert!(
        b().receive_buffer(1 << 20).build().is_err(),
        "window 2 MiB > buffer"
    );
    assert!(b().accept_backlog(0).build().is_err());
    assert!(b().stream_opens_per_second(0).build().is_err());
    assert!(b().stream_send_buffer(0).build().is_err());
    assert!(
        b().stream_send_buffer(100)
            .session_send_buffer(99)
            .build()
            .is_err()
    );
    assert!(
        b().disable_keepalive()
            .keepalive_timeout(secs(1))
            .build()
            .is_ok()
    );
}

// ---- snappy codec ------------------------------------------------------

#[test]
fn crc32c_matches_the_known_vectors() {
    assert_eq!(super::snappy::crc32c(b"123456789"), 0xe306_9283);
    assert_eq!(super::snappy::crc32c(&[]), 0);
    // Chunk of capture C: `01 0c 00 00 | 44 39 ac 2f | SYN sid 3`.
    assert_eq!(masked_crc(&[1, 0, 0, 0, 3, 0, 0, 0]), 0x2fac_3944);
}

#[test]
fn snappy_decoder_rejects_what_go_rejects() {
    let cases: [&[u8]; 5] = [
        &[0x01, 0x05, 0, 0, 0, 0, 0, 0, 0],        // no identifier first
        b"\xff\x06\x00\x00sNaPpX",                 // bad identifier
        b"\xff\x06\x00\x00sNaPpY\x02\x00\x00\x00", // reserved type
        b"\xff\x06\x00\x00sNaPpY\x01\x05\x00\x00\0\0\0\0x", // bad checksum
        b"\xff\x06\x00\x00sNaPpY\x00\xff\xff\x01", // too long
    ];
    for c in cases {
        assert!(Decoder::new().push(c).is_err(), "{c:?}");
    }
    // Skippable and padding chunks are skipped.
    let ok = b"\xff\x06\x00\x00sNaPpY\xfe\x02\x00\x00ab\x80\x00\x00\x00";
    let mut d = Decoder::new();
    assert_eq!(d.push(ok), Ok(ok.len()));
    assert!(d.decoded().is_empty() && !d.mid_chunk());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn header_round_trips(v in any::<u8>(), cmd in 0u8..5, len in any::<u16>(), sid in any::<u32>()) {
        let h = Header { version: v, cmd, len, sid };
        prop_assert_eq!(Header::from_bytes(&h.to_bytes()), h);
    }

    #[test]
    fn frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let total: usize = Frames::new(&bytes).filter_map(Result::ok).map(|f| f.total_len()).sum();
        prop_assert!(total <= bytes.len());
    }

    #[test]
    fn arbitrary_input_stays_within_budgets(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        super::fuzz_session(&bytes);
    }

    #[test]
    fn well_formed_traffic_stays_within_budgets(
        ops in proptest::collection::vec((0u8..5, 0u32..12, 0usize..3000), 0..200),
        v2 in any::<bool>(),
    ) {
        let v = if v2 { 2 } else { 1 };
        let mut input = Vec::new();
        for (cmd, sid, len) in ops {
            let cmd = Cmd::from_u8(cmd).unwrap();
            let body = match cmd {
                Cmd::Psh => vec![0x5a; len],
                Cmd::Upd => Upd { consumed: len as u32, window: 70_000 }.to_bytes().to_vec(),
                _ => vec![],
            };
            input.extend(frame(v, cmd, sid, &body));
        }
        let mut data = vec![if v2 { 1 } else { 0 } | (7 << 2)];
        data.extend(input);
        super::fuzz_session(&data);
    }

    #[test]
    fn snappy_round_trips(data in proptest::collection::vec(0u8..4, 0..150_000), split in 1usize..5000) {
        let mut enc = Encoder::new();
        let mut buf = vec![0; MAX_ENCODED_CHUNK];
        let mut wire = Vec::new();
        let mut rest = &data[..];
        while !rest.is_empty() {
            let (t, n) = enc.encode(rest, &mut buf);
            wire.extend_from_slice(&buf[..n]);
            rest = &rest[t..];
        }
        let mut dec = Decoder::new();
        let mut back = Vec::new();
        for piece in wire.chunks(split) {
            let mut pos = 0;
            while pos < piece.len() {
                pos += dec.push(&piece[pos..]).unwrap();
                back.extend_from_slice(dec.decoded());
                let n = dec.decoded().len();
                dec.consume(n);
            }
        }
        prop_assert_eq!(back, data);
    }

    #[test]
    fn snappy_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let mut d = Decoder::new();
        let mut input = b"\xff\x06\x00\x00sNaPpY".to_vec();
        input.extend(bytes);
        let mut pos = 0;
        while let Ok(n) = d.push(&input[pos..]) {
            pos += n;
            let k = d.decoded().len();
            prop_assert!(k <= super::snappy::MAX_BLOCK);
            d.consume(k);
            if n == 0 && k == 0 { break; }
        }
    }
}

#[test]
fn max_payload_frame_parses() {
    let mut s = session(Role::Server, &MuxConfig::default());
    let mut input = frame(1, Cmd::Syn, 3, &[]);
    input.extend(frame(1, Cmd::Psh, 3, &vec![1; MAX_PAYLOAD]));
    assert_eq!(s.handle_input(&input).unwrap(), input.len());
    assert_eq!(s.buffered(), MAX_PAYLOAD);
    assert_eq!(HEADER_LEN, 8);
}
