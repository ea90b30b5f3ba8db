//! The kcptun captures in `kcpio/tests/vectors/kcptun/` (Debian kcptun 20210922:
//! smux 1.5.16, golang/snappy 0.0.2) decode and re-encode byte for byte:
//! smux frames, snappy chunks, and what a kcpio session emits for the same
//! application steps.

use std::time::Duration;

use kcpio::mux::frame::{Cmd, Frames, HEADER_LEN, Header};
use kcpio::mux::snappy::{Decoder, Encoder, MAX_ENCODED_CHUNK};
use kcpio::mux::{Error, MuxConfig, ProtocolError, Role, Session, Version};
use serde_json::Value;

fn load(name: &str) -> Value {
    let path = format!("{}/tests/vectors/kcptun/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("vector file")).expect("json")
}

fn hex(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().expect("hex string")).expect("hex")
}

/// The smux byte stream of one direction (decompressed when snappy is on).
fn smux_stream(dir: &Value) -> Vec<u8> {
    if dir.get("decompressed_hex").is_some() {
        hex(&dir["decompressed_hex"])
    } else {
        hex(&dir["kcp_stream_hex"])
    }
}

const ALL: [&str; 5] = [
    "A_smux1_plain.json",
    "C_smux1_snappy_small.json",
    "D_smux2_plain.json",
    "F_smux1_snappy_compressed.json",
    "H_smuxver_mismatch.json",
];

#[test]
fn smux_frames_decode_and_reencode() {
    let mut seen = 0;
    for name in ALL {
        let v = load(name);
        for dir in ["c2s", "s2c"] {
            let d = &v["streams"][dir];
            let stream = smux_stream(d);
            let expected = d["smux_frames"].as_array().expect("frames");
            let frames: Vec<_> = Frames::new(&stream)
                .collect::<Result<_, _>>()
                .expect("whole frames");
            assert_eq!(frames.len(), expected.len(), "{name} {dir}");
            let mut rebuilt = Vec::new();
            for (f, e) in frames.iter().zip(expected) {
                let h = f.header();
                assert_eq!(u64::from(h.version), e["ver"].as_u64().unwrap(), "{name}");
                assert_eq!(u64::from(h.sid), e["sid"].as_u64().unwrap());
                assert_eq!(u64::from(h.len), e["length"].as_u64().unwrap());
                let cmd = Cmd::from_u8(h.cmd).expect("known command");
                assert_eq!(
                    format!("{cmd:?}").to_uppercase(),
                    e["cmd"].as_str().unwrap()
                );
                if cmd == Cmd::Upd {
                    let upd = f.upd().expect("8-byte body");
                    assert_eq!(u64::from(upd.consumed), e["consumed"].as_u64().unwrap());
                    assert_eq!(u64::from(upd.window), e["window"].as_u64().unwrap());
                }
                if let Some(data) = e.get("data") {
                    assert_eq!(f.body(), data.as_str().unwrap().as_bytes());
                }
                // Re-encode from the parsed fields.
                let mut buf = vec![0; HEADER_LEN];
                Header::new(h.version, cmd, h.len, h.sid).emit(&mut buf);
                buf.extend_from_slice(f.body());
                assert_eq!(buf, hex(&e["hex"]), "{name} {dir}");
                rebuilt.extend_from_slice(&buf);
                seen += 1;
            }
            assert_eq!(rebuilt, stream, "{name} {dir}");
        }
    }
    assert!(seen > 30, "{seen} frames checked");
}

#[test]
fn snappy_chunks_decode_and_reencode() {
    for name in [
        "C_smux1_snappy_small.json",
        "F_smux1_snappy_compressed.json",
    ] {
        let v = load(name);
        for dir in ["c2s", "s2c"] {
            let d = &v["streams"][dir];
            let wire = hex(&d["kcp_stream_hex"]);
            // Decode, fed one byte at a time.
            let mut dec = Decoder::new();
            let mut plain = Vec::new();
            let mut pos = 0;
            while pos < wire.len() {
                pos += dec.push(&wire[pos..pos + 1]).expect("valid stream");
                plain.extend_from_slice(dec.decoded());
                let n = dec.decoded().len();
                dec.consume(n);
            }
            assert!(!dec.mid_chunk());
            assert_eq!(plain, hex(&d["decompressed_hex"]), "{name} {dir}");
            // Re-encode each chunk's data as Go's writer did (one Write +
            // Flush per smux frame).
            let mut enc = Encoder::new();
            let mut out = vec![0; MAX_ENCODED_CHUNK];
            let mut rebuilt = Vec::new();
            for c in d["snappy_chunks"].as_array().unwrap() {
                if c["type"] == "0xff" {
                    continue; // the encoder writes the identifier itself
                }
                let data = hex(&c["decoded_hex"]);
                let (taken, n) = enc.encode(&data, &mut out);
                assert_eq!(taken, data.len());
                rebuilt.extend_from_slice(&out[..n]);
            }
            assert_eq!(hex::encode(&rebuilt), hex::encode(&wire), "{name} {dir}");
        }
    }
}

fn drain(s: &mut Session) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0; 4096];
    loop {
        let n = s.poll_transmit(&mut buf);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// A kcpio client replaying the app of capture `A` (or `D` in v2) emits the
/// same bytes as kcptun's client, and parses the server's bytes.
fn replay_client(name: &str, version: Version) {
    let v = load(name);
    let c2s = smux_stream(&v["streams"]["c2s"]);
    let s2c = smux_stream(&v["streams"]["s2c"]);
    let config = MuxConfig::builder()
        .version(version)
        .stream_window(2_097_152)
        .build()
        .unwrap();
    let mut s = Session::new(Role::Client, &config, Duration::ZERO);
    let sid = s.open_stream().unwrap();
    assert_eq!(sid, 3);
    assert_eq!(s.write(sid, b"hello").unwrap(), 5);
    let mut wire = drain(&mut s);
    // The server's echo and FIN arrive; the app reads "hello" then closes.
    let psh_end = 13; // the PSH "hello" comes first
    assert_eq!(s.handle_input(&s2c[..psh_end]).unwrap(), psh_end);
    let mut buf = [0; 16];
    assert_eq!(s.read(sid, &mut buf).unwrap(), Some(5));
    assert_eq!(&buf[..5], b"hello");
    wire.extend(drain(&mut s)); // v2: the UPD after the first read
    s.close_stream(sid);
    wire.extend(drain(&mut s));
    assert_eq!(
        s.handle_input(&s2c[psh_end..]).unwrap(),
        s2c.len() - psh_end
    );
    if version == Version::V1 {
        // The keepalive at 10 s.
        s.handle_timeout(Duration::from_secs(10));
        wire.extend(drain(&mut s));
    }
    assert_eq!(hex::encode(&wire), hex::encode(&c2s), "{name}");
    assert!(s.error().is_none());
    assert_eq!(s.stream_count(), 0);
}

#[test]
fn client_emits_the_captured_bytes_v1() {
    replay_client("A_smux1_plain.json", Version::V1);
}

#[test]
fn client_emits_the_captured_bytes_v2() {
    replay_client("D_smux2_plain.json", Version::V2);
}

#[test]
fn server_parses_every_captured_client_stream() {
    for name in ALL {
        let v = load(name);
        let c2s = smux_stream(&v["streams"]["c2s"]);
        let version = if c2s[0] == 2 {
            Version::V2
        } else {
            Version::V1
        };
        let config = MuxConfig::builder().version(version).build().unwrap();
        let mut s = Session::new(Role::Server, &config, Duration::ZERO);
        // One byte at a time: frames straddle every call.
        for b in c2s.chunks(1) {
            assert_eq!(s.handle_input(b).unwrap(), 1, "{name}");
            while s.accept_stream().is_some() {}
        }
        assert!(s.error().is_none());
    }
}

#[test]
fn version_mismatch_names_what_arrived() {
    // Capture H: a v2 client against a v1 server.
    let v = load("H_smuxver_mismatch.json");
    let c2s = smux_stream(&v["streams"]["c2s"]);
    let config = MuxConfig::default();
    let mut s = Session::new(Role::Server, &config, Duration::ZERO);
    let err = s.handle_input(&c2s).unwrap_err();
    let Error::Protocol(ProtocolError::VersionMismatch {
        expected: 1,
        header,
    }) = err
    else {
        panic!("{err:?}");
    };
    assert_eq!(header, [2, 0, 0, 0, 3, 0, 0, 0]);
    let msg = err.to_string();
    assert!(
        msg.contains("version 1") && msg.contains("version 2"),
        "{msg}"
    );
    assert!(msg.contains("02 00 00 00 03 00 00 00"), "{msg}");
    // Nothing is sent after the error.
    assert_eq!(drain(&mut s), b"");
}
