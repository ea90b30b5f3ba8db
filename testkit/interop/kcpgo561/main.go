// Command kcpgo561 runs kcp-go v5.6.1, the KCP engine of Debian's kcptun
// 20210922, on recorded traffic, so kcpio can be checked against the FEC
// decoder of that release without a network or a kcptun process.
//
//	kcpgo561 replay FILE   feed a recorded datagram stream to a v5.6.1
//	                       listener with FEC off (it infers the shape, as
//	                       kcptun with --ds 0 --ps 0 does) and report, as one
//	                       JSON line, whether the bytes it delivers are the
//	                       expected ones
//	kcpgo561 gen -out DIR  write DIR/kcpgo561_infer.json: v5.6.1's own FEC
//	                       streams (20/5, 10/3, 5/2) and what a v5.6.1
//	                       listener with FEC off delivered from each
//
// FILE is JSON: {"conv": N, "datagrams_hex": [...], "expected_hex": "..."},
// the datagrams without a crypto layer (kcp-go's "null"), in sending order.
package main

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	kcp "github.com/xtaci/kcp-go/v5"
)

// capture is a recorded one-way datagram stream and the bytes it carries.
type capture struct {
	Conv      uint32   `json:"conv"`
	Datagrams []string `json:"datagrams_hex"`
	Expected  string   `json:"expected_hex"`
}

// result is what a v5.6.1 listener delivered from a capture.
type result struct {
	Expected      int    `json:"expected"`
	Delivered     int    `json:"delivered"`
	FirstMismatch int    `json:"first_mismatch"` // -1: every delivered byte is right
	Intact        bool   `json:"intact"`         // all expected bytes, all right
	KCPInErrors   uint64 `json:"kcp_in_errors"`
	FECRecovered  uint64 `json:"fec_recovered"`
	FECErrs       uint64 `json:"fec_errs"`
}

var peerAddr = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}

// feedConn is a net.PacketConn that returns queued datagrams from ReadFrom
// (one at a time, in order) and swallows whatever is written.
type feedConn struct {
	in     chan []byte
	closed chan struct{}
	once   sync.Once

	mu  sync.Mutex
	out [][]byte // written datagrams, when recording
	rec bool
}

func newFeedConn(record bool) *feedConn {
	return &feedConn{in: make(chan []byte), closed: make(chan struct{}), rec: record}
}

func (c *feedConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case d := <-c.in:
		return copy(b, d), peerAddr, nil
	case <-c.closed:
		return 0, nil, errors.New("closed")
	}
}

func (c *feedConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	if c.rec {
		c.mu.Lock()
		c.out = append(c.out, append([]byte(nil), b...))
		c.mu.Unlock()
	}
	return len(b), nil
}

func (c *feedConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *feedConn) LocalAddr() net.Addr              { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40001} }
func (c *feedConn) SetDeadline(time.Time) error      { return nil }
func (c *feedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *feedConn) SetWriteDeadline(time.Time) error { return nil }
func (c *feedConn) recorded() [][]byte               { c.mu.Lock(); defer c.mu.Unlock(); return c.out }

// replay feeds datagrams to a v5.6.1 listener with FEC off and reads what
// its session delivers until `expected` bytes came or nothing comes for a
// second.
func replay(datagrams [][]byte, expected []byte) (result, error) {
	before := kcp.DefaultSnmp.Copy()
	conn := newFeedConn(false)
	l, err := kcp.ServeConn(nil, 0, 0, conn)
	if err != nil {
		return result{}, err
	}
	defer l.Close()
	if len(datagrams) == 0 {
		return result{}, errors.New("no datagrams")
	}
	// The first datagram opens the session; widen its windows (as kcptun
	// does after accepting) before the rest arrives.
	go func() { conn.in <- datagrams[0] }()
	l.SetDeadline(time.Now().Add(5 * time.Second))
	s, err := l.AcceptKCP()
	if err != nil {
		return result{}, fmt.Errorf("accept: %w", err)
	}
	s.SetWindowSize(1024, 1024)
	fed := make(chan struct{})
	go func() {
		for _, d := range datagrams[1:] {
			conn.in <- d
		}
		close(fed)
	}()
	got := make([]byte, 0, len(expected))
	buf := make([]byte, 65536)
	for len(got) < len(expected) {
		s.SetReadDeadline(time.Now().Add(time.Second))
		n, err := s.Read(buf)
		if err != nil {
			break
		}
		got = append(got, buf[:n]...)
	}
	<-fed
	after := kcp.DefaultSnmp.Copy()
	r := result{
		Expected:      len(expected),
		Delivered:     len(got),
		FirstMismatch: -1,
		KCPInErrors:   after.KCPInErrors - before.KCPInErrors,
		FECRecovered:  after.FECRecovered - before.FECRecovered,
		FECErrs:       after.FECErrs - before.FECErrs,
	}
	for i := range got {
		if i >= len(expected) || got[i] != expected[i] {
			r.FirstMismatch = i
			break
		}
	}
	r.Intact = r.FirstMismatch < 0 && len(got) == len(expected)
	s.Close()
	return r, nil
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "kcpgo561: "+format+"\n", a...)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		fatalf("usage: kcpgo561 replay FILE | gen -out DIR")
	}
	switch os.Args[1] {
	case "replay":
		if len(os.Args) != 3 {
			fatalf("usage: kcpgo561 replay FILE")
		}
		raw, err := os.ReadFile(os.Args[2])
		if err != nil {
			fatalf("%v", err)
		}
		var c capture
		if err := json.Unmarshal(raw, &c); err != nil {
			fatalf("%s: %v", os.Args[2], err)
		}
		var ds [][]byte
		for i, h := range c.Datagrams {
			d, err := hex.DecodeString(h)
			if err != nil {
				fatalf("datagram %d: %v", i, err)
			}
			ds = append(ds, d)
		}
		want, err := hex.DecodeString(c.Expected)
		if err != nil {
			fatalf("expected_hex: %v", err)
		}
		r, err := replay(ds, want)
		if err != nil {
			fatalf("%v", err)
		}
		line, _ := json.Marshal(r)
		fmt.Println(string(line))
	case "gen":
		fs := flag.NewFlagSet("gen", flag.ExitOnError)
		out := fs.String("out", ".", "directory to write kcpgo561_infer.json into")
		fs.Parse(os.Args[2:])
		gen(*out)
	default:
		fatalf("unknown command %q", os.Args[1])
	}
}

// A kcp-go v5.6.1 sender's stream for one FEC shape, and what a v5.6.1
// listener with FEC off delivered from it.
type inferCase struct {
	DataShards   int      `json:"data_shards"`
	ParityShards int      `json:"parity_shards"`
	Conv         uint32   `json:"conv"`
	Mss          int      `json:"mss"`
	Datagrams    []string `json:"datagrams_hex"`
	PayloadSHA1  string   `json:"payload_sha1"`
	Receiver     result   `json:"receiver"`
}

// genMtu keeps the vectors small; the fault does not depend on the size.
const genMtu = 400

// pattern is the payload: byte i is (i * 7 + i / 251) mod 256.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// sendOnce records what a v5.6.1 session with FEC ds/ps sends for one write
// of `payload` before any acknowledgment (its first window: 32 segments).
func sendOnce(ds, ps int, conv uint32, payload []byte) [][]byte {
	conn := newFeedConn(true)
	s, err := kcp.NewConn3(conv, peerAddr, nil, ds, ps, conn)
	if err != nil {
		fatalf("NewConn3: %v", err)
	}
	s.SetStreamMode(true)
	s.SetNoDelay(0, 30, 2, 1)
	s.SetMtu(genMtu)
	s.SetWindowSize(128, 1024)
	if _, err := s.Write(payload); err != nil {
		fatalf("write: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	s.Close()
	conn.Close()
	// Keep the first transmission of each packet only (the first window).
	return conn.recorded()
}

func gen(dir string) {
	const conv = 0x3ac5f00d
	var cases []inferCase
	for _, shape := range [][2]int{{20, 5}, {10, 3}, {5, 2}} {
		mss := genMtu - 8 - 24 // mtu - FEC header - KCP header
		segs := 32             // kcp-go's first window (rmt_wnd starts at 32)
		payload := pattern(segs * mss)
		sent := sendOnce(shape[0], shape[1], conv, payload)
		// The window's datagrams: data shards and parity up to the last data
		// shard of the first 32 segments (later ones are retransmissions).
		var window [][]byte
		data := 0
		for _, d := range sent {
			if len(d) >= 6 && d[4] == 0xf1 {
				if data == segs {
					break
				}
				data++
			}
			window = append(window, d)
		}
		if data != segs {
			fatalf("%v: %d data shards in the first window, want %d", shape, data, segs)
		}
		r, err := replay(window, payload)
		if err != nil {
			fatalf("%v: %v", shape, err)
		}
		c := inferCase{DataShards: shape[0], ParityShards: shape[1], Conv: conv, Mss: mss, Receiver: r}
		sum := sha1.Sum(payload)
		c.PayloadSHA1 = hex.EncodeToString(sum[:])
		for _, d := range window {
			c.Datagrams = append(c.Datagrams, hex.EncodeToString(d))
		}
		cases = append(cases, c)
	}
	doc := map[string]any{
		"about": "kcp-go v5.6.1 (reedsolomon v1.9.9) sender with FEC, no crypto, stream mode, mtu 400, " +
			"one write of 32 segments of the payload pattern (byte i = (i*7 + i/251) mod 256) before any ACK; " +
			"receiver: a v5.6.1 listener with FEC off, fed exactly these datagrams in order",
		"cases": cases,
	}
	out, _ := json.MarshalIndent(doc, "", " ")
	path := filepath.Join(dir, "kcpgo561_infer.json")
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		fatalf("%v", err)
	}
	for _, c := range cases {
		fmt.Printf("%d/%d: %d datagrams, receiver %+v\n", c.DataShards, c.ParityShards, len(c.Datagrams), c.Receiver)
	}
}
