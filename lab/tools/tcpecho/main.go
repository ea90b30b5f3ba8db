// Command tcpecho is the TCP baseline for the latency benchmark: the same
// message workload and JSON as kcpgo-peer's client message modes (see
// interop/kcpgo-peer/README.md), over TCP with TCP_NODELAY.
//
//	tcpecho server --addr 127.0.0.1:0 [--duration D]
//	tcpecho client --addr 127.0.0.1:PORT --rate 60 --size 64 --duration 30s [--cc bbr] --json
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

type config struct {
	addr     string
	rate     float64
	messages int
	size     int
	duration time.Duration
	drain    time.Duration
	timeout  time.Duration
	parallel int
	hold     time.Duration
	cc       string
	jsonOut  bool
	tag      string
	quiet    bool
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "tcpecho: "+format+"\n", a...)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: tcpecho server|client [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	var cfg config
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:29950", "server: listen address; client: server address (loopback)")
	fs.Float64Var(&cfg.rate, "rate", 0, "client: messages per second per connection; > 0 selects latency mode")
	fs.IntVar(&cfg.messages, "messages", 0, "client: messages per connection; with --rate 0 selects ping-pong mode")
	fs.IntVar(&cfg.size, "size", 64, "client: bytes per message (>= 16)")
	fs.DurationVar(&cfg.duration, "duration", 0, "client latency mode: how long to send (0 = 10s); server: exit after this long (0 = never)")
	fs.DurationVar(&cfg.drain, "drain", 2*time.Second, "client: wait this long after the last send for outstanding echoes")
	fs.DurationVar(&cfg.timeout, "timeout", 60*time.Second, "client: overall deadline")
	fs.IntVar(&cfg.parallel, "parallel", 1, "client: concurrent connections")
	fs.DurationVar(&cfg.hold, "hold", 0, "client: keep every connection open this long after all finished")
	fs.StringVar(&cfg.cc, "cc", "", "TCP congestion control for the sockets (e.g. bbr, cubic); empty = system default")
	fs.BoolVar(&cfg.jsonOut, "json", false, "client: one JSON line")
	fs.StringVar(&cfg.tag, "tag", "", "client: copied into the JSON field tag")
	fs.BoolVar(&cfg.quiet, "quiet", false, "less logging")
	fs.Parse(os.Args[2:])
	switch mode {
	case "server":
		os.Exit(server(cfg))
	case "client":
		if cfg.size < 16 {
			fatalf("--size must be at least 16")
		}
		if cfg.rate <= 0 && cfg.messages <= 0 {
			fatalf("give --rate or --messages")
		}
		os.Exit(client(cfg))
	}
	fatalf("unknown mode %q", mode)
}

func setCC(c syscall.RawConn, cc string) error {
	if cc == "" {
		return nil
	}
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptString(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, cc)
	})
	if err != nil {
		return err
	}
	return serr
}

func server(cfg config) int {
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error { return setCC(c, cfg.cc) }}
	ln, err := lc.Listen(context.Background(), "tcp", cfg.addr)
	if err != nil {
		fatalf("listen: %v", err)
	}
	fmt.Printf("listening on %s mode=tcp-echo cc=%q\n", ln.Addr(), cfg.cc)
	if cfg.duration > 0 {
		time.AfterFunc(cfg.duration, func() { ln.Close() })
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0
		}
		go func(c net.Conn) {
			defer c.Close()
			c.(*net.TCPConn).SetNoDelay(true)
			buf := make([]byte, 64*1024)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}(c)
	}
}

var epoch time.Time

func fillPattern(dst []byte, offset int64) {
	for k := range dst {
		dst[k] = byte((uint32(offset+int64(k)) * 2654435761) >> 24)
	}
}

func firstMismatch(b []byte, offset int64) int {
	for k := range b {
		if b[k] != byte((uint32(offset+int64(k))*2654435761)>>24) {
			return k
		}
	}
	return -1
}

func buildMsg(buf []byte, seq uint64) {
	fillPattern(buf[16:], int64(seq)*int64(len(buf))+16)
	binary.LittleEndian.PutUint64(buf[0:8], seq)
	binary.LittleEndian.PutUint64(buf[8:16], uint64(time.Since(epoch).Nanoseconds()))
}

func checkMsg(buf []byte, want uint64) (float64, error) {
	now := time.Since(epoch).Nanoseconds()
	seq := binary.LittleEndian.Uint64(buf[0:8])
	if seq != want {
		return 0, fmt.Errorf("echo carried sequence %d, expected %d", seq, want)
	}
	if k := firstMismatch(buf[16:], int64(seq)*int64(len(buf))+16); k >= 0 {
		return 0, fmt.Errorf("echo mismatch in message %d at byte %d", seq, 16+k)
	}
	return float64(now-int64(binary.LittleEndian.Uint64(buf[8:16]))) / 1e6, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tcpCounters reads a few fields of struct tcp_info (Linux >= 4.19 layout).
type tcpCounters struct {
	totalRetrans, segsOut, segsIn uint64
	bytesSent, bytesRetrans       uint64
}

func readTCPInfo(c *net.TCPConn) (tc tcpCounters) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	var b [232]byte
	raw.Control(func(fd uintptr) {
		l := uint32(len(b))
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
			uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&l)), 0)
		if e != 0 {
			return
		}
		le := binary.LittleEndian
		if l >= 104 {
			tc.totalRetrans = uint64(le.Uint32(b[100:]))
		}
		if l >= 144 {
			tc.segsOut = uint64(le.Uint32(b[136:]))
			tc.segsIn = uint64(le.Uint32(b[140:]))
		}
		if l >= 216 {
			tc.bytesSent = le.Uint64(b[200:])
			tc.bytesRetrans = le.Uint64(b[208:])
		}
	})
	return
}

type stats struct {
	sent, received int64
	rtts           []float64
	tc             tcpCounters
}

func runConn(cfg config) (st stats, conn *net.TCPConn, err error) {
	d := net.Dialer{Control: func(network, address string, c syscall.RawConn) error { return setCC(c, cfg.cc) }}
	c, err := d.Dial("tcp", cfg.addr)
	if err != nil {
		return st, nil, err
	}
	conn = c.(*net.TCPConn)
	conn.SetNoDelay(true)
	defer func() { st.tc = readTCPInfo(conn) }()
	size := cfg.size
	if cfg.rate <= 0 {
		conn.SetDeadline(time.Now().Add(cfg.timeout))
		out, in := make([]byte, size), make([]byte, size)
		for i := 0; i < cfg.messages; i++ {
			buildMsg(out, uint64(i))
			if _, err := conn.Write(out); err != nil {
				return st, conn, fmt.Errorf("write: %w", err)
			}
			st.sent++
			if _, err := io.ReadFull(conn, in); err != nil {
				return st, conn, fmt.Errorf("read: %w", err)
			}
			rtt, err := checkMsg(in, uint64(i))
			if err != nil {
				return st, conn, err
			}
			st.received++
			st.rtts = append(st.rtts, rtt)
		}
		return st, conn, nil
	}
	dur := cfg.duration
	if dur <= 0 {
		dur = 10 * time.Second
	}
	timeout := cfg.timeout
	if m := dur + cfg.drain + 10*time.Second; timeout < m {
		timeout = m
	}
	conn.SetDeadline(time.Now().Add(timeout))
	var sent, received atomic.Int64
	var senderDone atomic.Bool
	werr := make(chan error, 1)
	start := time.Now()
	period := float64(time.Second) / cfg.rate
	go func() {
		buf := make([]byte, size)
		for i := 0; ; i++ {
			if cfg.messages > 0 && i >= cfg.messages {
				break
			}
			due := start.Add(time.Duration(float64(i) * period))
			if due.Sub(start) >= dur {
				break
			}
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
			buildMsg(buf, uint64(i))
			if _, err := conn.Write(buf); err != nil {
				senderDone.Store(true)
				werr <- err
				conn.SetReadDeadline(time.Now())
				return
			}
			sent.Add(1)
		}
		senderDone.Store(true)
		werr <- nil
		if received.Load() == sent.Load() {
			conn.SetReadDeadline(time.Now())
		} else {
			conn.SetReadDeadline(time.Now().Add(cfg.drain))
		}
	}()
	in := make([]byte, size)
	var rerr error
	for {
		if senderDone.Load() && received.Load() == sent.Load() {
			break
		}
		if _, err := io.ReadFull(conn, in); err != nil {
			if !(isTimeout(err) && senderDone.Load()) {
				rerr = fmt.Errorf("read: %w", err)
			}
			break
		}
		rtt, err := checkMsg(in, uint64(received.Load()))
		if err != nil {
			rerr = err
			break
		}
		st.rtts = append(st.rtts, rtt)
		received.Add(1)
	}
	if !senderDone.Load() {
		conn.SetWriteDeadline(time.Now())
	}
	if e := <-werr; e != nil && rerr == nil {
		rerr = fmt.Errorf("write: %w", e)
	}
	st.sent, st.received = sent.Load(), received.Load()
	return st, conn, rerr
}

func percentile(r []float64, p float64) float64 {
	if len(r) == 0 {
		return 0
	}
	k := int(math.Ceil(p*float64(len(r))/100-1e-9)) - 1
	k = max(0, min(k, len(r)-1))
	return r[k]
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

type result struct {
	Impl             string  `json:"impl"`
	Mode             string  `json:"mode"`
	Pass             bool    `json:"pass"`
	Error            string  `json:"error,omitempty"`
	Tag              string  `json:"tag"`
	Sessions         int     `json:"sessions"`
	ElapsedMs        float64 `json:"elapsed_ms"`
	HoldMs           float64 `json:"hold_ms"`
	Size             int     `json:"size"`
	RateHz           float64 `json:"rate_hz"`
	Messages         int     `json:"messages"`
	Sent             int64   `json:"sent"`
	Received         int64   `json:"received"`
	Lost             int64   `json:"lost"`
	PayloadBytes     int64   `json:"payload_bytes"`
	RttMin           float64 `json:"rtt_min_ms"`
	RttMean          float64 `json:"rtt_mean_ms"`
	RttP50           float64 `json:"rtt_p50_ms"`
	RttP90           float64 `json:"rtt_p90_ms"`
	RttP99           float64 `json:"rtt_p99_ms"`
	RttP999          float64 `json:"rtt_p999_ms"`
	RttMax           float64 `json:"rtt_max_ms"`
	OutPkts          uint64  `json:"out_pkts"`
	OutBytes         uint64  `json:"out_bytes"`
	InPkts           uint64  `json:"in_pkts"`
	InBytes          uint64  `json:"in_bytes"`
	OutSegs          uint64  `json:"out_segs"`
	InSegs           uint64  `json:"in_segs"`
	RetransSegs      uint64  `json:"retrans_segs"`
	FastRetransSegs  uint64  `json:"fast_retrans_segs"`
	EarlyRetransSegs uint64  `json:"early_retrans_segs"`
	LostSegs         uint64  `json:"lost_segs"`
	RepeatSegs       uint64  `json:"repeat_segs"`
	FECRecovered     uint64  `json:"fec_recovered"`
	FECErrs          uint64  `json:"fec_errs"`
	FECParityShards  uint64  `json:"fec_parity_shards"`
	InCsumErrors     uint64  `json:"in_csum_errors"`
	Overhead         float64 `json:"overhead"`
	CPUUser          float64 `json:"cpu_user_s"`
	CPUSys           float64 `json:"cpu_sys_s"`
	MaxRSSKB         int64   `json:"max_rss_kb"`
	CC               string  `json:"cc"`
}

func client(cfg config) int {
	if cfg.parallel < 1 {
		cfg.parallel = 1
	}
	res := result{Impl: "tcp", Mode: "pingpong", Tag: cfg.tag, Sessions: cfg.parallel, HoldMs: float64(cfg.hold.Milliseconds()),
		Size: cfg.size, RateHz: cfg.rate, Messages: cfg.messages, CC: cfg.cc}
	if cfg.rate > 0 {
		res.Mode = "latency"
	}
	type one struct {
		st   stats
		conn *net.TCPConn
		err  error
	}
	outs := make([]one, cfg.parallel)
	epoch = time.Now()
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st, c, err := runConn(cfg)
			outs[i] = one{st, c, err}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(epoch)
	if cfg.hold > 0 {
		fmt.Fprintf(os.Stderr, "holding %d sessions for %s\n", cfg.parallel, cfg.hold)
		time.Sleep(cfg.hold)
	}
	res.Pass = true
	var rtts []float64
	var segsOut, segsIn, bytesSent uint64
	for _, o := range outs {
		if o.err != nil {
			res.Pass = false
			if res.Error == "" {
				res.Error = o.err.Error()
			}
		}
		res.Sent += o.st.sent
		res.Received += o.st.received
		rtts = append(rtts, o.st.rtts...)
		res.RetransSegs += o.st.tc.totalRetrans
		segsOut += o.st.tc.segsOut
		segsIn += o.st.tc.segsIn
		bytesSent += o.st.tc.bytesSent
		if o.conn != nil {
			o.conn.Close()
		}
	}
	// TCP segments stand in for packets; "bytes" count TCP payload plus a
	// 32-byte TCP header (with timestamps) per segment, the analogue of
	// KCP's UDP payload with its own headers.
	res.OutPkts, res.InPkts, res.OutSegs, res.InSegs = segsOut, segsIn, segsOut, segsIn
	res.OutBytes = bytesSent + 32*segsOut
	res.ElapsedMs = float64(elapsed.Microseconds()) / 1000
	res.Lost = res.Sent - res.Received
	if res.Lost > 0 {
		res.Pass = false
	}
	res.PayloadBytes = res.Sent * int64(cfg.size)
	if res.PayloadBytes > 0 {
		res.Overhead = round3(float64(res.OutBytes) / float64(res.PayloadBytes))
	}
	sort.Float64s(rtts)
	if n := len(rtts); n > 0 {
		var sum float64
		for _, r := range rtts {
			sum += r
		}
		res.RttMin, res.RttMax, res.RttMean = round3(rtts[0]), round3(rtts[n-1]), round3(sum/float64(n))
		res.RttP50, res.RttP90 = round3(percentile(rtts, 50)), round3(percentile(rtts, 90))
		res.RttP99, res.RttP999 = round3(percentile(rtts, 99)), round3(percentile(rtts, 99.9))
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.CPUUser = round3(float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6)
		res.CPUSys = round3(float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6)
		res.MaxRSSKB = int64(ru.Maxrss)
	}
	if cfg.jsonOut {
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
	} else {
		verdict := "PASS"
		if !res.Pass {
			verdict = "FAIL: " + res.Error
		}
		fmt.Printf("%s mode=%s conns=%d size=%d rate=%g sent=%d received=%d lost=%d elapsed=%.1fms rtt_ms: mean=%.3f p50=%.3f p90=%.3f p99=%.3f p99.9=%.3f max=%.3f overhead=%.3f retrans=%d\n",
			verdict, res.Mode, res.Sessions, res.Size, res.RateHz, res.Sent, res.Received, res.Lost, res.ElapsedMs,
			res.RttMean, res.RttP50, res.RttP90, res.RttP99, res.RttP999, res.RttMax, res.Overhead, res.RetransSegs)
	}
	if !res.Pass {
		return 1
	}
	return 0
}
