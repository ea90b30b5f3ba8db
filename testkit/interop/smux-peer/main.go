// Command smux-peer is a small peer on the real xtaci/smux (built against
// v1.5.58 with go.mod and against v1.5.16 with go.v1516.mod), over TCP or
// over a kcp-go v5.6.72 session set up as kcptun does, optionally inside
// kcptun's snappy framing. It is the oracle for kcpio's mux interop tests and
// the Go side of scripts/vs-smux.sh.
//
//	smux-peer server --listen ADDR [flags]    prints "LISTENING <addr>" first
//	smux-peer client --connect ADDR [flags]
//
// Both roles end with one JSON report line on stdout. See README.md.
package main

import (
	"crypto/sha1"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/golang/snappy"
	kcp "github.com/xtaci/kcp-go/v5"
	"github.com/xtaci/smux"
	"golang.org/x/crypto/pbkdf2"
)

type config struct {
	role string
	addr string
	app  string

	transport   string
	crypt       string
	key         string
	dataShard   int
	parityShard int
	kcpMode     string
	sndwnd      int
	rcvwnd      int
	mtu         int
	sockbuf     int
	snappy      bool

	smuxver          int
	keepalive        int
	keepaliveTimeout int
	framesize        int
	smuxbuf          int
	streambuf        int

	streams     int
	bytes       int64
	writeSize   int
	sizes       []int
	stall       time.Duration
	hold        time.Duration
	silentAfter time.Duration
	inject      string
	timeout     time.Duration
	maxStreams  int
	maxSessions int
	quiet       bool
}

var apps = map[string]bool{
	"echo": true, "sink": true, "source": true, "halfclose": true, "halfclose-rev": true,
	"sizes": true, "idle": true, "inject": true,
}

// parseArgs reads the role and flags; it returns an error instead of exiting
// so the tests can drive it.
func parseArgs(args []string) (config, error) {
	var cfg config
	if len(args) < 1 || (args[0] != "server" && args[0] != "client") {
		return cfg, errors.New("usage: smux-peer server --listen ADDR | client --connect ADDR [flags] (-h for flags)")
	}
	cfg.role = args[0]
	fs := flag.NewFlagSet("smux-peer "+cfg.role, flag.ContinueOnError)
	var listen, connect, sizes string
	fs.StringVar(&listen, "listen", "", "server: listen address (port 0 picks a free port)")
	fs.StringVar(&connect, "connect", "", "client: server address")
	fs.StringVar(&cfg.app, "app", "echo", "application mode: echo, sink, source, halfclose, halfclose-rev, sizes, idle, inject")
	fs.StringVar(&cfg.transport, "transport", "tcp", "tcp or kcp")
	fs.StringVar(&cfg.crypt, "crypt", "null", "kcp: cipher (kcptun names): null, none, aes, aes-128, aes-192, aes-128-gcm, salsa20, blowfish, twofish, cast5, 3des, tea, xtea, xor, sm4")
	fs.StringVar(&cfg.key, "key", "it's a secrect", "kcp: passphrase, PBKDF2-HMAC-SHA1(key, \"kcp-go\", 4096, 32) as kcptun")
	fs.IntVar(&cfg.dataShard, "datashard", 0, "kcp: Reed-Solomon data shards (0 = FEC off)")
	fs.IntVar(&cfg.parityShard, "parityshard", 0, "kcp: Reed-Solomon parity shards")
	fs.StringVar(&cfg.kcpMode, "mode", "fast3", "kcp: profile normal, fast, fast2, fast3 (kcptun's)")
	fs.IntVar(&cfg.sndwnd, "sndwnd", 1024, "kcp: send window in packets")
	fs.IntVar(&cfg.rcvwnd, "rcvwnd", 1024, "kcp: receive window in packets")
	fs.IntVar(&cfg.mtu, "mtu", 1350, "kcp: SetMtu")
	fs.IntVar(&cfg.sockbuf, "sockbuf", 4194304, "kcp: UDP socket buffers in bytes (0 = OS default)")
	fs.BoolVar(&cfg.snappy, "snappy", false, "kcptun's snappy framing between smux and the transport")
	fs.IntVar(&cfg.smuxver, "smuxver", 1, "smux protocol version, 1 or 2")
	fs.IntVar(&cfg.keepalive, "keepalive", 10, "smux KeepAliveInterval in seconds")
	fs.IntVar(&cfg.keepaliveTimeout, "keepalive-timeout", 30, "smux KeepAliveTimeout in seconds")
	fs.IntVar(&cfg.framesize, "framesize", 32768, "smux MaxFrameSize (largest frame this peer sends, <= 65535)")
	fs.IntVar(&cfg.smuxbuf, "smuxbuf", 4194304, "smux MaxReceiveBuffer (session receive budget)")
	fs.IntVar(&cfg.streambuf, "streambuf", 65536, "smux MaxStreamBuffer (the v2 window this peer advertises)")
	fs.IntVar(&cfg.streams, "streams", 1, "client: concurrent streams on the one session")
	fs.Int64Var(&cfg.bytes, "bytes", 1<<20, "bytes per stream (client echo/sink/source/halfclose/idle; server halfclose-rev)")
	fs.IntVar(&cfg.writeSize, "write-size", 32768, "bytes per Write call")
	fs.StringVar(&sizes, "sizes", "", "sizes app: comma-separated write sizes (default: a sweep of 1..65535)")
	fs.DurationVar(&cfg.stall, "stall", 0, "sink server / source client: do not read the session's first stream for this long")
	fs.DurationVar(&cfg.hold, "hold", 0, "idle: hold the streams open and idle this long; inject: hold the transport this long (0 = 3s)")
	fs.DurationVar(&cfg.silentAfter, "silent-after", 0, "go silent (stop reading and writing the transport, never close it) this long after the session starts")
	fs.StringVar(&cfg.inject, "inject", "badver", "inject app: badver (a SYN with the other version byte) or badcmd (command 7)")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "bound on the whole run (0 = 60s for a client, 600s for a server)")
	fs.IntVar(&cfg.maxStreams, "max-streams", 0, "server: exit after this many streams have ended")
	fs.IntVar(&cfg.maxSessions, "max-sessions", 0, "server: exit after this many sessions (transports) have ended")
	fs.BoolVar(&cfg.quiet, "quiet", false, "no log lines on stderr")
	if err := fs.Parse(args[1:]); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if cfg.role == "server" {
		cfg.addr = listen
	} else {
		cfg.addr = connect
	}
	if cfg.addr == "" {
		return cfg, fmt.Errorf("%s needs --%s", cfg.role, map[string]string{"server": "listen", "client": "connect"}[cfg.role])
	}
	if !apps[cfg.app] {
		return cfg, fmt.Errorf("unknown --app %q", cfg.app)
	}
	if cfg.transport != "tcp" && cfg.transport != "kcp" {
		return cfg, fmt.Errorf("unknown --transport %q", cfg.transport)
	}
	if _, ok := profiles[cfg.kcpMode]; !ok {
		return cfg, fmt.Errorf("unknown --mode %q", cfg.kcpMode)
	}
	if cfg.inject != "badver" && cfg.inject != "badcmd" {
		return cfg, fmt.Errorf("unknown --inject %q", cfg.inject)
	}
	if cfg.streams < 1 || cfg.writeSize < 1 || cfg.bytes < 0 {
		return cfg, errors.New("--streams and --write-size must be positive, --bytes not negative")
	}
	if sizes != "" {
		for _, s := range strings.Split(sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 || n > 65535 {
				return cfg, fmt.Errorf("bad size %q in --sizes (1..65535)", s)
			}
			cfg.sizes = append(cfg.sizes, n)
		}
	} else {
		cfg.sizes = defaultSizes()
	}
	if cfg.timeout == 0 {
		cfg.timeout = 60 * time.Second
		if cfg.role == "server" {
			cfg.timeout = 600 * time.Second
		}
	}
	if cfg.app == "inject" && cfg.hold == 0 {
		cfg.hold = 3 * time.Second
	}
	if err := smux.VerifyConfig(cfg.smuxConfig()); err != nil {
		return cfg, fmt.Errorf("smux config: %w", err)
	}
	return cfg, nil
}

// defaultSizes: 1..16, then 2^k-1, 2^k, 2^k+1 up to 65535, and the MTU-ish sizes.
func defaultSizes() []int {
	set := map[int]bool{1000: true, 1350: true, 1400: true, 65534: true, 65535: true}
	for n := 1; n <= 16; n++ {
		set[n] = true
	}
	for k := 5; k <= 16; k++ {
		for _, n := range []int{1<<k - 1, 1 << k, 1<<k + 1} {
			if n <= 65535 {
				set[n] = true
			}
		}
	}
	out := make([]int, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

func (cfg config) smuxConfig() *smux.Config {
	c := smux.DefaultConfig()
	c.Version = cfg.smuxver
	c.KeepAliveInterval = time.Duration(cfg.keepalive) * time.Second
	c.KeepAliveTimeout = time.Duration(cfg.keepaliveTimeout) * time.Second
	c.MaxFrameSize = cfg.framesize
	c.MaxReceiveBuffer = cfg.smuxbuf
	c.MaxStreamBuffer = cfg.streambuf
	return c
}

func main() {
	cfg, err := parseArgs(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "smux-peer:", err)
		os.Exit(2)
	}
	var rep *report
	if cfg.role == "server" {
		rep = runServer(cfg, func(a net.Addr) { fmt.Printf("LISTENING %s\n", a) }, nil)
	} else {
		rep = runClient(cfg)
	}
	rep.finish()
	line, _ := json.Marshal(rep)
	fmt.Println(string(line))
	if !rep.OK {
		os.Exit(1)
	}
}

func (cfg config) logf(format string, a ...any) {
	if !cfg.quiet {
		fmt.Fprintf(os.Stderr, "smux-peer %s: "+format+"\n", append([]any{cfg.role}, a...)...)
	}
}

// ---------------------------------------------------------------------------
// report
// ---------------------------------------------------------------------------

const maxErrors = 20

type report struct {
	OK         bool     `json:"ok"`
	Impl       string   `json:"impl"`
	Smux       string   `json:"smux"`
	Role       string   `json:"role"`
	App        string   `json:"app"`
	Transport  string   `json:"transport"`
	Smuxver    int      `json:"smuxver"`
	Snappy     bool     `json:"snappy"`
	Sessions   int      `json:"sessions"`
	Streams    int      `json:"streams"`
	Bytes      int64    `json:"bytes"`
	Seconds    float64  `json:"seconds"`
	MBps       float64  `json:"mbps"`
	CPU        float64  `json:"cpu_s"`
	CPUUser    float64  `json:"cpu_user_s"`
	CPUSys     float64  `json:"cpu_sys_s"`
	MaxRSSKB   int64    `json:"max_rss_kb"`
	ErrorCount int      `json:"error_count"`
	Errors     []string `json:"errors"`

	HalfClose      bool    `json:"half_close"`
	FirstStreamS   float64 `json:"first_stream_s"`
	OthersMaxS     float64 `json:"others_max_s"`
	SessionClosedS float64 `json:"session_closed_s"`
	SessionError   string  `json:"session_error"`
	PeerClosed     bool    `json:"peer_closed"`

	mu      sync.Mutex
	started time.Time
}

func newReport(cfg config) *report {
	return &report{
		Impl: "go-smux", Smux: smuxVersion(), Role: cfg.role, App: cfg.app,
		Transport: cfg.transport, Smuxver: cfg.smuxver, Snappy: cfg.snappy,
		SessionClosedS: -1, Errors: []string{}, started: time.Now(),
	}
}

func (r *report) errorf(format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ErrorCount++
	if len(r.Errors) < maxErrors {
		r.Errors = append(r.Errors, fmt.Sprintf(format, a...))
	}
}

func (r *report) add(bytes int64, streams int) {
	r.mu.Lock()
	r.Bytes += bytes
	r.Streams += streams
	r.mu.Unlock()
}

// sessionClosed records the first session that died without us closing it.
func (r *report) sessionClosed(after time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.SessionClosedS < 0 {
		r.SessionClosedS = after.Seconds()
		if err != nil {
			r.SessionError = err.Error()
		}
	}
}

func (r *report) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Seconds == 0 {
		r.Seconds = time.Since(r.started).Seconds()
	}
	if r.Seconds > 0 {
		r.MBps = float64(r.Bytes) / r.Seconds / 1e6
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.CPUUser = float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6
		r.CPUSys = float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6
		r.CPU = r.CPUUser + r.CPUSys
		r.MaxRSSKB = int64(ru.Maxrss)
	}
	r.OK = r.ErrorCount == 0
}

// smuxVersion is the xtaci/smux module version linked into this binary.
func smuxVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/xtaci/smux" {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "unknown"
}

// ---------------------------------------------------------------------------
// transport: TCP or kcp-go (kcptun's settings), then snappy, then the gate
// ---------------------------------------------------------------------------

// kcptun's --mode profiles: nodelay, interval, resend, nc.
var profiles = map[string][4]int{
	"normal": {0, 40, 2, 1}, "fast": {0, 30, 2, 1}, "fast2": {1, 20, 2, 1}, "fast3": {1, 10, 2, 1},
}

// blockCrypt maps a kcptun cipher name to kcp-go's BlockCrypt over kcptun's
// 32-byte PBKDF2 key, each cipher taking kcptun's prefix of it.
func blockCrypt(name, pass string) (kcp.BlockCrypt, error) {
	key := pbkdf2.Key([]byte(pass), []byte("kcp-go"), 4096, 32, sha1.New)
	type ctor struct {
		n int
		f func([]byte) (kcp.BlockCrypt, error)
	}
	table := map[string]ctor{
		"none": {32, kcp.NewNoneBlockCrypt}, "aes": {32, kcp.NewAESBlockCrypt},
		"aes-128": {16, kcp.NewAESBlockCrypt}, "aes-192": {24, kcp.NewAESBlockCrypt},
		"aes-128-gcm": {16, kcp.NewAESGCMCrypt}, "salsa20": {32, kcp.NewSalsa20BlockCrypt},
		"blowfish": {32, kcp.NewBlowfishBlockCrypt}, "twofish": {32, kcp.NewTwofishBlockCrypt},
		"cast5": {16, kcp.NewCast5BlockCrypt}, "3des": {24, kcp.NewTripleDESBlockCrypt},
		"tea": {16, kcp.NewTEABlockCrypt}, "xtea": {16, kcp.NewXTEABlockCrypt},
		"xor": {32, kcp.NewSimpleXORBlockCrypt}, "sm4": {16, kcp.NewSM4BlockCrypt},
	}
	if name == "null" || name == "" {
		return nil, nil
	}
	c, ok := table[name]
	if !ok {
		return nil, fmt.Errorf("unknown cipher %q", name)
	}
	return c.f(key[:c.n])
}

// tuneKCP applies kcptun's per-session settings.
func tuneKCP(s *kcp.UDPSession, cfg config) {
	p := profiles[cfg.kcpMode]
	s.SetStreamMode(true)
	s.SetWriteDelay(false)
	s.SetNoDelay(p[0], p[1], p[2], p[3])
	s.SetWindowSize(cfg.sndwnd, cfg.rcvwnd)
	s.SetMtu(cfg.mtu)
	s.SetACKNoDelay(false)
}

// compStream is kcptun's snappy framing (generic/comp.go): a buffered
// writer flushed after every Write, so each smux frame is one chunk.
type compStream struct {
	conn io.ReadWriteCloser
	w    *snappy.Writer
	r    *snappy.Reader
}

func newCompStream(conn io.ReadWriteCloser) *compStream {
	return &compStream{conn: conn, w: snappy.NewBufferedWriter(conn), r: snappy.NewReader(conn)}
}

func (c *compStream) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *compStream) Write(p []byte) (int, error) {
	if _, err := c.w.Write(p); err != nil {
		return 0, err
	}
	if err := c.w.Flush(); err != nil {
		return 0, err
	}
	return len(p), nil
}
func (c *compStream) Close() error { return c.conn.Close() }

// gate makes a transport go silent at a given time: from then on reads and
// writes block (what is read is dropped) and Close leaves the transport open,
// so the peer sees a live transport that carries nothing. Zero time: no gate.
type gate struct {
	conn     io.ReadWriteCloser
	at       time.Time
	mu       sync.Mutex
	stopped  chan struct{} // closed by release (end of the run)
	released bool
}

func newGate(conn io.ReadWriteCloser, at time.Time) *gate {
	return &gate{conn: conn, at: at, stopped: make(chan struct{})}
}

func (g *gate) silent() bool { return !g.at.IsZero() && !time.Now().Before(g.at) }

func (g *gate) block() error {
	<-g.stopped
	return io.ErrClosedPipe
}

func (g *gate) Read(p []byte) (int, error) {
	if g.silent() {
		return 0, g.block()
	}
	n, err := g.conn.Read(p)
	if g.silent() {
		return 0, g.block()
	}
	return n, err
}

func (g *gate) Write(p []byte) (int, error) {
	if g.silent() {
		return 0, g.block()
	}
	return g.conn.Write(p)
}

func (g *gate) Close() error {
	if g.silent() {
		return nil
	}
	return g.conn.Close()
}

// release ends the run: blocked calls return and the transport is closed.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.released {
		g.released = true
		close(g.stopped)
		g.conn.Close()
	}
}

// wrap puts snappy (if asked) and the silence gate over a raw transport.
func wrap(raw io.ReadWriteCloser, cfg config) *gate {
	var c io.ReadWriteCloser = raw
	if cfg.snappy {
		c = newCompStream(raw)
	}
	var at time.Time
	if cfg.silentAfter > 0 {
		at = time.Now().Add(cfg.silentAfter)
	}
	return newGate(c, at)
}

func dialTransport(cfg config) (io.ReadWriteCloser, error) {
	if cfg.transport == "tcp" {
		return net.DialTimeout("tcp", cfg.addr, 10*time.Second)
	}
	block, err := blockCrypt(cfg.crypt, cfg.key)
	if err != nil {
		return nil, err
	}
	s, err := kcp.DialWithOptions(cfg.addr, block, cfg.dataShard, cfg.parityShard)
	if err != nil {
		return nil, err
	}
	tuneKCP(s, cfg)
	if cfg.sockbuf > 0 {
		s.SetReadBuffer(cfg.sockbuf)
		s.SetWriteBuffer(cfg.sockbuf)
	}
	return s, nil
}

// listener yields raw transports, TCP or KCP.
type listener interface {
	accept() (io.ReadWriteCloser, error)
	Addr() net.Addr
	Close() error
}

type tcpListener struct{ net.Listener }

func (l tcpListener) accept() (io.ReadWriteCloser, error) { return l.Accept() }

type kcpListener struct {
	*kcp.Listener
	cfg config
}

func (l kcpListener) accept() (io.ReadWriteCloser, error) {
	s, err := l.AcceptKCP()
	if err != nil {
		return nil, err
	}
	tuneKCP(s, l.cfg)
	return s, nil
}

func listen(cfg config) (listener, error) {
	if cfg.transport == "tcp" {
		l, err := net.Listen("tcp", cfg.addr)
		if err != nil {
			return nil, err
		}
		return tcpListener{l}, nil
	}
	block, err := blockCrypt(cfg.crypt, cfg.key)
	if err != nil {
		return nil, err
	}
	l, err := kcp.ListenWithOptions(cfg.addr, block, cfg.dataShard, cfg.parityShard)
	if err != nil {
		return nil, err
	}
	if cfg.sockbuf > 0 {
		l.SetReadBuffer(cfg.sockbuf)
		l.SetWriteBuffer(cfg.sockbuf)
	}
	return kcpListener{l, cfg}, nil
}
