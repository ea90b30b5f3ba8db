// Command kcpgo-arq-trace runs kcp-go's KCP state machine on a virtual clock
// through fixed scenarios and prints every datagram it emits as JSON. The
// kcp-go copy it builds against has a settable clock (see gen.sh). It drives
// KCP the way a kcp-go UDPSession does: Input with the ACK-no-delay flag, a
// full flush after each Write unless write-delay holds it back, and a timer
// that flushes and re-arms itself for the interval flush returns.
//
// The event loop is mirrored by src/arq/tests/kcpgo_trace.rs; both must
// process the same events in the same order:
//
//  1. deliveries due at T, in (arrival, sequence) order;
//  2. timers due at T, client then server;
//  3. on multiples of 5 ms: the client writes pieces of at most mss bytes
//     while fewer than snd_wnd segments wait, then the server reads whole
//     messages unless its read pause covers T.
package main

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"strings"

	kcp "github.com/xtaci/kcp-go/v5"
)

type dgram struct {
	T    uint32 `json:"t"`
	Dir  string `json:"dir"`
	Len  int    `json:"len"`
	Crc  uint32 `json:"crc32"`
	Segs string `json:"segs"`
}

type scenario struct {
	Name       string  `json:"name"`
	Mtu        int     `json:"mtu"`
	SndWnd     int     `json:"snd_wnd"`
	RcvWnd     int     `json:"rcv_wnd"`
	NoDelay    int     `json:"nodelay"`
	Interval   int     `json:"interval"`
	Resend     int     `json:"resend"`
	Nc         int     `json:"nc"`
	Stream     bool    `json:"stream"`
	WriteDelay bool    `json:"write_delay"`
	AckNoDelay bool    `json:"ack_nodelay"`
	Loss       uint32  `json:"loss_percent"`
	Delay      uint32  `json:"delay_ms"`
	Jitter     uint32  `json:"jitter_ms"`
	Seed       uint32  `json:"seed"`
	Bytes      int     `json:"bytes"`
	PauseFrom  uint32  `json:"pause_from"`
	PauseTo    uint32  `json:"pause_to"`
	DupPercent uint32  `json:"dup_percent"`
	Base       uint32  `json:"clock_base"`
	InitialSn  uint32  `json:"initial_sn"`
	MsgSegs    int     `json:"message_segments"`
	RecoverPct uint32  `json:"recover_percent"`
	EndMs      uint32  `json:"end_ms"`
	Trace      []dgram `json:"trace"`
}

const conv = 0x11223344

// pattern byte i, as in shared/vectors.
func pattern(i int) byte { return byte((uint32(i) * 2654435761) >> 24) }

// fate of the k-th datagram in one direction: dropped, its delay, whether a
// duplicate follows 3 ms later, and whether a dropped one is "recovered by
// FEC" (delivered 5 ms late as an IKCP_PACKET_FEC input).
func fate(s *scenario, dir uint32, k uint32) (bool, uint32, bool, bool) {
	x := k*2654435761 + s.Seed*40503 + dir*7919
	x ^= x >> 15
	x *= 0x2c1b3c6d
	x ^= x >> 12
	return x%100 < s.Loss, s.Delay + (x>>8)%(s.Jitter+1), (x>>20)%100 < s.DupPercent, (x>>24)%100 < s.RecoverPct
}

func summary(p []byte) string {
	var b strings.Builder
	for len(p) >= 24 {
		le32 := func(o int) uint32 { return uint32(p[o]) | uint32(p[o+1])<<8 | uint32(p[o+2])<<16 | uint32(p[o+3])<<24 }
		n := le32(20)
		fmt.Fprintf(&b, "%d/%d/%d/%d/%d/%d/%d;", p[4], p[5], uint16(p[6])|uint16(p[7])<<8, le32(8), le32(12), le32(16), n)
		p = p[24+int(n):]
	}
	return b.String()
}

type packet struct {
	at, seq   uint32
	toServer  bool
	recovered bool
	data      []byte
}

func run(s *scenario) {
	// now is relative; kcp-go sees Base + now (so the clock can wrap).
	var now uint32
	kcp.SetClock(func() uint32 { return s.Base + now })
	var wire []packet
	var seq uint32
	var k [2]uint32
	emit := func(toServer bool) func([]byte, int) {
		return func(buf []byte, size int) {
			p := append([]byte(nil), buf[:size]...)
			dir := "c2s"
			d := uint32(0)
			if !toServer {
				dir, d = "s2c", 1
			}
			s.Trace = append(s.Trace, dgram{now, dir, size, crc32.ChecksumIEEE(p), summary(p)})
			drop, delay, dup, recover := fate(s, d, k[d])
			k[d]++
			if !drop {
				seq++
				wire = append(wire, packet{now + delay, seq, toServer, false, p})
				if dup {
					seq++
					wire = append(wire, packet{now + delay + 3, seq, toServer, false, p})
				}
			} else if recover {
				seq++
				wire = append(wire, packet{now + delay + 5, seq, toServer, true, p})
			}
		}
	}
	mk := func(toServer bool) *kcp.KCP {
		x := kcp.NewKCP(conv, emit(toServer))
		x.SetMtu(s.Mtu)
		x.WndSize(s.SndWnd, s.RcvWnd)
		x.NoDelay(s.NoDelay, s.Interval, s.Resend, s.Nc)
		x.SetInitialSn(s.InitialSn)
		return x
	}
	c, sv := mk(true), mk(false)
	c.SetStream(s.Stream)
	sv.SetStream(s.Stream)
	ends := []*kcp.KCP{c, sv}
	timers := []uint32{0, 0}
	mss := s.Mtu - 24
	sent, got, msgs := 0, 0, 0
	buf := make([]byte, 1<<20)
	for {
		// 1. deliveries due now, in (at, seq) order
		for {
			best := -1
			for i, p := range wire {
				if p.at == now && (best < 0 || p.seq < wire[best].seq) {
					best = i
				}
			}
			if best < 0 {
				break
			}
			p := wire[best]
			wire = append(wire[:best], wire[best+1:]...)
			to := c
			if p.toServer {
				to = sv
			}
			kind := kcp.IKCP_PACKET_REGULAR
			if p.recovered {
				kind = kcp.IKCP_PACKET_FEC
			}
			to.Input(p.data, kind, s.AckNoDelay)
		}
		// 2. timers
		for i, e := range ends {
			if timers[i] == now {
				timers[i] = now + e.FlushFull()
			}
		}
		// 3. application
		if now%5 == 0 {
			for sent < s.Bytes && c.WaitSnd() < s.SndWnd {
				n := min(mss, s.Bytes-sent)
				if s.MsgSegs > 0 {
					// Raw KCP message mode: one Send per message, fragmented
					// by KCP itself with frg counting down.
					n = min(1+int((uint32(msgs)*7919+s.Seed*31)%uint32(s.MsgSegs*mss)), s.Bytes-sent)
					msgs++
				}
				piece := make([]byte, n)
				for i := range piece {
					piece[i] = pattern(sent + i)
				}
				c.Send(piece)
				sent += n
				if c.WaitSnd() >= s.SndWnd || !s.WriteDelay {
					c.FlushFull()
				}
			}
			if !(now >= s.PauseFrom && now < s.PauseTo) {
				for sv.PeekSize() > 0 {
					n := sv.Recv(buf)
					for i := 0; i < n; i++ {
						if buf[i] != pattern(got+i) {
							panic("corrupt")
						}
					}
					got += n
				}
			}
		}
		if got == s.Bytes && c.WaitSnd() == 0 && len(wire) == 0 {
			s.EndMs = now
			return
		}
		if now > 3_600_000 {
			panic(s.Name + ": no completion")
		}
		now++
	}
}

func main() {
	scenarios := []*scenario{
		{Name: "default_loss10", Mtu: 1400, SndWnd: 32, RcvWnd: 32, NoDelay: 0, Interval: 100, Resend: 0, Nc: 0, Loss: 10, Delay: 30, Jitter: 0, Seed: 1, Bytes: 48 << 10},
		{Name: "fast3_loss20_jitter", Mtu: 1400, SndWnd: 64, RcvWnd: 64, NoDelay: 1, Interval: 10, Resend: 2, Nc: 1, Stream: true, Loss: 20, Delay: 20, Jitter: 15, Seed: 2, Bytes: 64 << 10},
		{Name: "normal_writedelay_acknodelay", Mtu: 1200, SndWnd: 48, RcvWnd: 48, NoDelay: 0, Interval: 40, Resend: 2, Nc: 1, Stream: true, WriteDelay: true, AckNoDelay: true, Loss: 5, Delay: 25, Jitter: 5, Seed: 3, Bytes: 48 << 10},
		{Name: "fast2_small_rcvwnd_paused_reader", Mtu: 1400, SndWnd: 32, RcvWnd: 8, NoDelay: 1, Interval: 20, Resend: 2, Nc: 1, Loss: 5, Delay: 15, Jitter: 3, Seed: 4, Bytes: 32 << 10, PauseFrom: 100, PauseTo: 2600},
		{Name: "fast_cwnd_loss5_reorder", Mtu: 1400, SndWnd: 64, RcvWnd: 64, NoDelay: 0, Interval: 30, Resend: 2, Nc: 0, Loss: 5, Delay: 20, Jitter: 25, Seed: 5, Bytes: 64 << 10},
		{Name: "default_mtu500_clean", Mtu: 500, SndWnd: 32, RcvWnd: 32, NoDelay: 0, Interval: 100, Resend: 0, Nc: 0, Loss: 0, Delay: 10, Jitter: 0, Seed: 6, Bytes: 24 << 10},
		{Name: "fast3_loss30_cwnd", Mtu: 1400, SndWnd: 32, RcvWnd: 32, NoDelay: 1, Interval: 10, Resend: 2, Nc: 0, Loss: 30, Delay: 40, Jitter: 10, Seed: 7, Bytes: 32 << 10},
		{Name: "fast3_wrap_dup_loss10", Mtu: 1400, SndWnd: 128, RcvWnd: 128, NoDelay: 1, Interval: 10, Resend: 2, Nc: 1, Stream: true, Loss: 10, Delay: 25, Jitter: 20, Seed: 8, Bytes: 256 << 10, DupPercent: 5, Base: 0xFFFFFF00, InitialSn: 0xFFFFFFC0},
		{Name: "default_wrap_dup_tiny_rcvwnd", Mtu: 1000, SndWnd: 16, RcvWnd: 4, NoDelay: 0, Interval: 100, Resend: 0, Nc: 0, Loss: 15, Delay: 30, Jitter: 40, Seed: 9, Bytes: 48 << 10, DupPercent: 10, Base: 0xFFFF0000, InitialSn: 0xFFFFFFF8, PauseFrom: 500, PauseTo: 1900},
		{Name: "fast3_messages_3_segments", Mtu: 1400, SndWnd: 32, RcvWnd: 32, NoDelay: 1, Interval: 10, Resend: 2, Nc: 1, Loss: 10, Delay: 20, Jitter: 20, Seed: 11, Bytes: 128 << 10, DupPercent: 3, MsgSegs: 3},
		{Name: "default_messages_small_rcvwnd_paused", Mtu: 700, SndWnd: 16, RcvWnd: 8, NoDelay: 0, Interval: 100, Resend: 0, Nc: 0, Loss: 10, Delay: 30, Jitter: 10, Seed: 12, Bytes: 48 << 10, MsgSegs: 4, PauseFrom: 300, PauseTo: 1500, Base: 0xFFFFF000, InitialSn: 0xFFFFFFF0},
		{Name: "fast2_fec_recovered_loss25", Mtu: 1372, SndWnd: 64, RcvWnd: 64, NoDelay: 1, Interval: 20, Resend: 2, Nc: 1, Stream: true, Loss: 25, Delay: 30, Jitter: 10, Seed: 13, Bytes: 128 << 10, RecoverPct: 70},
		{Name: "default_fec_recovered_cwnd", Mtu: 1372, SndWnd: 32, RcvWnd: 32, NoDelay: 0, Interval: 100, Resend: 0, Nc: 0, Loss: 15, Delay: 20, Jitter: 5, Seed: 14, Bytes: 64 << 10, RecoverPct: 60},
		{Name: "fast_acknodelay_dup_reorder", Mtu: 1400, SndWnd: 64, RcvWnd: 32, NoDelay: 0, Interval: 30, Resend: 2, Nc: 0, AckNoDelay: true, Loss: 8, Delay: 10, Jitter: 30, Seed: 10, Bytes: 96 << 10, DupPercent: 8},
	}
	for _, s := range scenarios {
		run(s)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", " ")
	if err := out.Encode(map[string]any{
		"generator": "interop/kcpgo-arq-trace (kcp-go v5.6.72 KCP on a virtual clock, session-style driving)",
		"conv":      conv,
		"scenarios": scenarios,
	}); err != nil {
		panic(err)
	}
}
