//! ARQ input: one endpoint fed arbitrary datagrams, interleaved with sends,
//! reads, flushes and timer ticks on a virtual clock.
//!
//! Input: two config bytes, a conv (u32), then operations. Checks: a readable
//! queue always yields bytes; emitted datagrams fit the MTU and parse; reads
//! never exceed the buffer; queued data stays within the windows; the heap
//! stays bounded.
#![no_main]

use kcpio::arq::{Kcp, Origin, Timestamp};
use kcpio_fuzz::arq::{config, drain, max_windows, read_stream};
use kcpio_fuzz::{Counting, Reader, live_bytes};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let cfg = config(r.u8(), r.u8());
    let (snd_wnd, rcv_wnd) = max_windows(&cfg);
    let conv = r.u32();
    let Ok(mut k) = Kcp::new(conv, &cfg) else {
        return;
    };
    let base = live_bytes();
    let mut now = 0u32;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096];
    let payload = vec![0xA5u8; 65_536];
    for _ in 0..4096 {
        if r.is_empty() {
            break;
        }
        let t = Timestamp::from_millis(now);
        match r.u8() % 9 {
            0 | 1 => {
                let origin = if r.u8() & 1 == 0 {
                    Origin::Regular
                } else {
                    Origin::Recovered
                };
                let _ = k.handle_datagram(t, r.record(), origin);
            }
            2 => {
                let n = usize::from(r.u16());
                let accepted = k.send(&payload[..n]);
                assert!(accepted <= n);
            }
            3 => {
                let n = usize::from(r.u16()) % 3000;
                let _ = k.send_message(&payload[..n]);
            }
            4 => {
                let n = usize::from(r.u8()) * 16 + 1;
                read_stream(&mut k, &mut buf[..n]);
            }
            5 => {
                if let Ok(n) = k.recv_message(&mut buf) {
                    assert!(n <= buf.len());
                }
            }
            6 => {
                out.clear();
                drain(&mut k, t, cfg.mtu, &mut out);
            }
            7 => {
                now = now.wrapping_add(u32::from(r.u16()));
                k.handle_timeout(Timestamp::from_millis(now));
            }
            _ => {
                // Whatever is due now.
                if let Some(due) = k.poll_timeout() {
                    now = now.max(due.as_millis());
                    k.handle_timeout(Timestamp::from_millis(now));
                }
            }
        }
        if let Some(size) = k.peek_size() {
            // A message is at most the receive window's worth of segments.
            assert!(size <= rcv_wnd * 65_536);
        }
        assert!(k.wait_snd() <= 4 * snd_wnd + 256);
    }
    // Everything the endpoint holds is bounded by its windows and the
    // largest segment an input can carry (a record of 64 KiB).
    let grown = live_bytes().saturating_sub(base);
    let slots = (2 * rcv_wnd).next_power_of_two() + 4 * snd_wnd;
    assert!(grown <= slots * 70_000 + (1 << 20), "heap grew by {grown}");
});
