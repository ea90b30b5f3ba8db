package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xtaci/smux"
)

// pattern byte at stream offset i: top byte of uint32(i) * 2654435761 (as kcpgo-peer).
func fillPattern(dst []byte, offset int64) {
	for k := range dst {
		dst[k] = byte((uint32(offset+int64(k)) * 2654435761) >> 24)
	}
}

// checkPattern returns an error naming the first byte of b that is not the
// pattern at offset.
func checkPattern(b []byte, offset int64) error {
	for k := range b {
		if b[k] != byte((uint32(offset+int64(k))*2654435761)>>24) {
			return fmt.Errorf("pattern mismatch at offset %d", offset+int64(k))
		}
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, smux.ErrTimeout) || (errors.As(err, &ne) && ne.Timeout())
}

// halfClose sends FIN and keeps the read side where smux can (v1.5.58's
// CloseWrite); v1.5.16 has no half-close, so it falls back to Close (FIN, and
// the stream is forgotten: later data from the peer is dropped).
func halfClose(st *smux.Stream) (bool, error) {
	if cw, ok := any(st).(interface{ CloseWrite() error }); ok {
		return true, cw.CloseWrite()
	}
	return false, st.Close()
}

// writePattern writes n pattern bytes from offset in Write calls of size ws.
func writePattern(w io.Writer, offset, n int64, ws int) error {
	buf := make([]byte, min(int64(ws), max(n, 1)))
	for end := offset + n; offset < end; {
		k := min(int64(len(buf)), end-offset)
		fillPattern(buf[:k], offset)
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		offset += k
	}
	return nil
}

// readPattern reads and verifies until EOF (want < 0) or until want bytes
// arrived; it returns how many bytes were read.
func readPattern(r io.Reader, offset, want int64) (int64, error) {
	buf := make([]byte, 65536)
	var got int64
	for want < 0 || got < want {
		p := buf
		if want >= 0 {
			p = buf[:min(int64(len(buf)), want-got)]
		}
		n, err := r.Read(p)
		if n > 0 {
			if perr := checkPattern(p[:n], offset+got); perr != nil {
				return got, perr
			}
			got += int64(n)
		}
		if err == io.EOF && want < 0 {
			return got, nil
		}
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

func putU64(v uint64) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return b[:]
}

// ---------------------------------------------------------------------------
// server
// ---------------------------------------------------------------------------

// runServer accepts transports until --max-streams streams or --max-sessions
// sessions have ended, --timeout passes, or stop is closed.
// serverGrace is how long a server that reached --max-streams or
// --max-sessions keeps its transports open before closing them.
const serverGrace = 500 * time.Millisecond

// v1516Settle is how long a v1.5.16 server waits on an accepted stream before
// it writes first (see serveStream's halfclose-rev).
const v1516Settle = 300 * time.Millisecond

func runServer(cfg config, ready func(net.Addr), stop <-chan struct{}) *report {
	rep := newReport(cfg)
	l, err := listen(cfg)
	if err != nil {
		rep.errorf("listen: %v", err)
		return rep
	}
	ready(l.Addr())
	rep.started = time.Now()

	done := make(chan struct{})
	var once sync.Once
	finish := func() { once.Do(func() { close(done) }) }
	var streamsEnded, sessionsEnded atomic.Int64
	streamEnded := func() {
		if n := streamsEnded.Add(1); cfg.maxStreams > 0 && n >= int64(cfg.maxStreams) {
			finish()
		}
	}
	var mu sync.Mutex
	var gates []*gate
	go func() {
		for {
			raw, err := l.accept()
			if err != nil {
				finish()
				return
			}
			g := wrap(raw, cfg)
			mu.Lock()
			gates = append(gates, g)
			rep.Sessions++
			mu.Unlock()
			go func() {
				serveSession(g, cfg, rep, streamEnded)
				if n := sessionsEnded.Add(1); cfg.maxSessions > 0 && n >= int64(cfg.maxSessions) {
					finish()
				}
			}()
		}
	}()
	timer := time.NewTimer(cfg.timeout)
	defer timer.Stop()
	select {
	case <-done:
		// let the last streams' frames (a reply, a FIN) leave before the
		// transports close
		time.Sleep(serverGrace)
	case <-stop:
	case <-timer.C:
		if cfg.maxStreams > 0 || cfg.maxSessions > 0 {
			rep.errorf("timed out after %v: %d streams and %d sessions ended", cfg.timeout, streamsEnded.Load(), sessionsEnded.Load())
		}
	}
	rep.Seconds = time.Since(rep.started).Seconds()
	l.Close()
	mu.Lock()
	for _, g := range gates {
		g.release()
	}
	mu.Unlock()
	return rep
}

func serveSession(g *gate, cfg config, rep *report, streamEnded func()) {
	defer g.release()
	if cfg.app == "inject" {
		inject(g, cfg, rep)
		return
	}
	sess, err := smux.Server(g, cfg.smuxConfig())
	if err != nil {
		rep.errorf("smux.Server: %v", err)
		return
	}
	start := time.Now()
	var wg sync.WaitGroup
	for idx := 0; ; idx++ {
		st, err := sess.AcceptStream()
		if err != nil {
			rep.sessionClosed(time.Since(start), err)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer streamEnded()
			n, err := serveStream(st, cfg, idx == 0)
			if err != nil {
				rep.errorf("stream %d: %v", st.ID(), err)
			}
			rep.add(n, 1)
		}()
	}
	// The streams may still hold data that arrived before the session ended.
	wg.Wait()
	sess.Close()
}

// serveStream runs the server side of the app on one accepted stream.
func serveStream(st *smux.Stream, cfg config, first bool) (int64, error) {
	defer st.Close()
	switch cfg.app {
	case "sink":
		if first && cfg.stall > 0 {
			time.Sleep(cfg.stall)
		}
		return sinkStream(st)
	case "source":
		var req [8]byte
		if _, err := io.ReadFull(st, req[:]); err != nil {
			return 0, fmt.Errorf("reading the source request: %w", err)
		}
		n := int64(binary.LittleEndian.Uint64(req[:]))
		return n, writePattern(st, 0, n, cfg.writeSize)
	case "halfclose":
		return respond(st, cfg)
	case "halfclose-rev":
		// smux v1.5.16 sends a stream's SYN before it registers the stream
		// and drops frames for it that arrive in between (KCPTUN.md 3.2):
		// a server that writes and closes at once can lose the data and the
		// FIN to a client goroutine that is slow to be scheduled, and the
		// client then sees a clean EOF with nothing read. Give it a moment.
		if smuxVersion() == "v1.5.16" {
			time.Sleep(v1516Settle)
		}
		n, _, err := initiate(st, cfg)
		return n, err
	default: // echo, sizes, idle
		// The buffer starts small and doubles while reads fill it, so an
		// idle stream costs little beyond smux's own state.
		// (sizes: full size at once, so each echoed frame is as large as the
		// frame read).
		buf := make([]byte, 1024)
		if cfg.app == "sizes" {
			buf = make([]byte, 65536)
		}
		var in int64
		for {
			n, err := st.Read(buf)
			if n > 0 {
				in += int64(n)
				if _, werr := st.Write(buf[:n]); werr != nil {
					return in, werr
				}
				if n == len(buf) && n < 65536 {
					buf = make([]byte, 2*n)
				}
			}
			if err == io.EOF {
				return in, nil
			}
			if err != nil {
				// the session ended under the stream: not this stream's fault
				return in, nil
			}
		}
	}
}

// sinkStream verifies the pattern and reports progress: 8-byte little-endian
// cumulative byte counts (bit 63 once a byte mismatched), sent by a reporter
// that wakes whenever bytes arrived and sends the latest count, so reports
// coalesce while one is being written. No read deadlines: v1.5.16 writes a v2
// window update under the reader's read deadline and drops it when that
// expires, which stalls the stream for good.
func sinkStream(st *smux.Stream) (int64, error) {
	var in atomic.Int64
	var bad atomic.Bool
	wake := make(chan struct{}, 1)
	readDone := make(chan struct{})
	reporterDone := make(chan error, 1)
	go func() {
		var reported int64
		send := func() error {
			v := in.Load()
			if v == reported {
				return nil
			}
			reported = v
			r := uint64(v)
			if bad.Load() {
				r |= 1 << 63
			}
			_, err := st.Write(putU64(r))
			return err
		}
		for {
			select {
			case <-wake:
				if err := send(); err != nil {
					reporterDone <- err
					return
				}
			case <-readDone:
				reporterDone <- send()
				return
			}
		}
	}()
	buf := make([]byte, 65536)
	var rerr error
	for {
		n, err := st.Read(buf)
		if n > 0 {
			if !bad.Load() && checkPattern(buf[:n], in.Load()) != nil {
				bad.Store(true)
				rerr = checkPattern(buf[:n], in.Load())
			}
			in.Add(int64(n))
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			rerr = fmt.Errorf("after %d bytes: %w", in.Load(), err)
			break
		}
	}
	close(readDone)
	werr := <-reporterDone
	if rerr == nil && werr != nil {
		rerr = fmt.Errorf("sending a report: %w", werr)
	}
	return in.Load(), rerr
}

// respond is the answering side of a half-close: read to EOF, then write as
// many pattern bytes back, then close.
func respond(st *smux.Stream, cfg config) (int64, error) {
	n, err := readPattern(st, 0, -1)
	if err != nil {
		return n, fmt.Errorf("reading to EOF: %w", err)
	}
	if err := writePattern(st, 0, n, cfg.writeSize); err != nil {
		return 2 * n, fmt.Errorf("writing the %d-byte reply after the peer's FIN: %w", n, err)
	}
	return 2 * n, nil
}

// initiate is the half-closing side: write --bytes, half-close, read the
// reply to EOF and check it is as long (v1.5.58). With v1.5.16 the half-close
// is a full close and no reply is read.
func initiate(st *smux.Stream, cfg config) (int64, bool, error) {
	if err := writePattern(st, 0, cfg.bytes, cfg.writeSize); err != nil {
		return 0, false, err
	}
	half, err := halfClose(st)
	if err != nil {
		return cfg.bytes, half, fmt.Errorf("half-close: %w", err)
	}
	if !half {
		return cfg.bytes, false, nil
	}
	got, err := readPattern(st, 0, -1)
	if err == nil && got != cfg.bytes {
		err = fmt.Errorf("reply was %d bytes, want %d", got, cfg.bytes)
	}
	return cfg.bytes + got, true, err
}

// inject writes a valid SYN and PSH "hello", then the bad frame, straight to
// the (snappy-wrapped) transport, then holds it for --hold reading and
// discarding, noting whether the peer closed it.
func inject(g *gate, cfg config, rep *report) {
	ver := byte(cfg.smuxver)
	sid := uint32(3)
	if cfg.role == "server" {
		sid = 2
	}
	frame := func(v, cmd byte, sid uint32, data []byte) []byte {
		b := []byte{v, cmd, 0, 0, 0, 0, 0, 0}
		binary.LittleEndian.PutUint16(b[2:], uint16(len(data)))
		binary.LittleEndian.PutUint32(b[4:], sid)
		return append(b, data...)
	}
	bad := frame(ver, 7, sid, nil)
	if cfg.inject == "badver" {
		bad = frame(3-ver, 0, sid+2, nil)
	}
	for _, f := range [][]byte{frame(ver, 0, sid, nil), frame(ver, 2, sid, []byte("hello")), bad} {
		if _, err := g.Write(f); err != nil {
			rep.errorf("inject write: %v", err)
			return
		}
	}
	closed := make(chan struct{})
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := g.Read(buf)
			rep.add(int64(n), 0)
			if err != nil {
				close(closed)
				return
			}
		}
	}()
	select {
	case <-closed:
		rep.mu.Lock()
		rep.PeerClosed = true
		rep.mu.Unlock()
	case <-time.After(cfg.hold):
	}
}

// ---------------------------------------------------------------------------
// client
// ---------------------------------------------------------------------------

// kcpLinger is how long a KCP client waits after its last stream closed
// before it closes the session.
const kcpLinger = 300 * time.Millisecond

func runClient(cfg config) *report {
	rep := newReport(cfg)
	raw, err := dialTransport(cfg)
	if err != nil {
		rep.errorf("dial: %v", err)
		return rep
	}
	g := wrap(raw, cfg)
	defer g.release()
	rep.Sessions = 1
	rep.started = time.Now()
	if cfg.app == "inject" {
		inject(g, cfg, rep)
		return rep
	}
	sess, err := smux.Client(g, cfg.smuxConfig())
	if err != nil {
		rep.errorf("smux.Client: %v", err)
		return rep
	}
	var closing atomic.Bool
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() { // notice the session dying under us (keepalive, peer gone)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-watchDone:
				return
			case <-t.C:
				if sess.IsClosed() && !closing.Load() {
					rep.sessionClosed(time.Since(rep.started), nil)
					return
				}
			}
		}
	}()

	finished := make(chan struct{})
	go func() {
		defer close(finished)
		if cfg.app == "idle" {
			idle(sess, cfg, rep)
		} else {
			perStream(sess, cfg, rep)
		}
	}()
	select {
	case <-finished:
	case <-time.After(cfg.timeout):
		rep.errorf("timed out after %v", cfg.timeout)
	}
	rep.mu.Lock()
	rep.Seconds = time.Since(rep.started).Seconds()
	rep.mu.Unlock()
	if cfg.transport == "kcp" {
		// KCP has no close handshake: give the last FINs and acks time to
		// leave before the socket goes.
		time.Sleep(kcpLinger)
	}
	closing.Store(true)
	sess.Close()
	return rep
}

// perStream opens --streams streams at once and runs the client side of the
// app on each, recording when each finished.
func perStream(sess *smux.Session, cfg config, rep *report) {
	times := make([]float64, cfg.streams)
	var wg sync.WaitGroup
	for i := 0; i < cfg.streams; i++ {
		// Opened in order, so stream 0 has the lowest id and its SYN is
		// the first the peer sees (the one a --stall server stalls).
		st, err := sess.OpenStream()
		if err != nil {
			rep.errorf("open stream %d: %v", i, err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := clientStream(st, cfg, rep, i == 0)
			times[i] = time.Since(rep.started).Seconds()
			if err != nil {
				rep.errorf("stream %d: %v", st.ID(), err)
			}
			rep.add(n, 1)
		}()
	}
	wg.Wait()
	rep.mu.Lock()
	defer rep.mu.Unlock()
	rep.FirstStreamS = times[0]
	for _, t := range times[1:] {
		rep.OthersMaxS = max(rep.OthersMaxS, t)
	}
}

func clientStream(st *smux.Stream, cfg config, rep *report, first bool) (int64, error) {
	switch cfg.app {
	case "sink":
		defer st.Close()
		return sinkClient(st, cfg)
	case "source":
		defer st.Close()
		if _, err := st.Write(putU64(uint64(cfg.bytes))); err != nil {
			return 0, err
		}
		if first && cfg.stall > 0 {
			time.Sleep(cfg.stall)
		}
		got, err := readPattern(st, 0, -1)
		if err == nil && got != cfg.bytes {
			err = fmt.Errorf("got %d bytes before EOF, want %d", got, cfg.bytes)
		}
		return got, err
	case "halfclose":
		n, half, err := initiate(st, cfg)
		rep.mu.Lock()
		rep.HalfClose = half
		rep.mu.Unlock()
		if !half && err == nil {
			// v1.5.16: no reply can be read, but keep the session up a
			// moment so the responder's reply lands (and is dropped by
			// smux) instead of meeting a closed transport.
			time.Sleep(serverGrace)
		}
		st.Close()
		return n, err
	case "halfclose-rev":
		defer st.Close()
		n, err := respond(st, cfg)
		if err == nil && n == 0 {
			err = errors.New("the stream ended before the server's data arrived")
		}
		return n, err
	case "sizes":
		defer st.Close()
		return sizes(st, cfg)
	default: // echo
		defer st.Close()
		return echo(st, 0, cfg)
	}
}

// echo writes --bytes pattern bytes from offset and reads the echo back.
func echo(st *smux.Stream, offset int64, cfg config) (int64, error) {
	werr := make(chan error, 1)
	go func() { werr <- writePattern(st, offset, cfg.bytes, cfg.writeSize) }()
	got, err := readPattern(st, offset, cfg.bytes)
	if err != nil {
		return got, fmt.Errorf("echo after %d bytes: %w", got, err)
	}
	return got, <-werr
}

// sinkClient writes --bytes and waits for the sink's report to reach it.
func sinkClient(st *smux.Stream, cfg config) (int64, error) {
	werr := make(chan error, 1)
	go func() { werr <- writePattern(st, 0, cfg.bytes, cfg.writeSize) }()
	var b [8]byte
	for cfg.bytes > 0 {
		if _, err := io.ReadFull(st, b[:]); err != nil {
			return 0, fmt.Errorf("waiting for a sink report: %w", err)
		}
		v := binary.LittleEndian.Uint64(b[:])
		if v&(1<<63) != 0 {
			return int64(v &^ (1 << 63)), errors.New("the sink saw a pattern mismatch")
		}
		if int64(v) > cfg.bytes {
			return int64(v), fmt.Errorf("the sink reported %d bytes, more than the %d sent", v, cfg.bytes)
		}
		if int64(v) == cfg.bytes {
			break
		}
	}
	return cfg.bytes, <-werr
}

// sizes writes each size with one Write (one frame when --framesize allows)
// and waits for its whole echo before the next.
func sizes(st *smux.Stream, cfg config) (int64, error) {
	buf := make([]byte, 65535)
	var off int64
	for _, n := range cfg.sizes {
		fillPattern(buf[:n], off)
		if _, err := st.Write(buf[:n]); err != nil {
			return off, fmt.Errorf("write of %d bytes: %w", n, err)
		}
		if _, err := readPattern(st, off, int64(n)); err != nil {
			return off, fmt.Errorf("echo of the %d-byte write: %w", n, err)
		}
		off += int64(n)
	}
	return off, nil
}

// idle opens --streams streams, echoes --bytes on each, holds them all idle
// for --hold (printing "holding N streams for D" on stderr when the hold
// starts), then echoes again on each (unless this peer went silent) and
// closes them. The session must survive the hold.
func idle(sess *smux.Session, cfg config, rep *report) {
	streams := make([]*smux.Stream, cfg.streams)
	round := func(offset int64) {
		var wg sync.WaitGroup
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if streams[i] == nil {
					st, err := sess.OpenStream()
					if err != nil {
						rep.errorf("open stream %d: %v", i, err)
						return
					}
					streams[i] = st
				}
				n, err := echo(streams[i], offset, cfg)
				if err != nil {
					rep.errorf("stream %d: %v", streams[i].ID(), err)
				}
				rep.add(n, 0)
			}()
		}
		wg.Wait()
	}
	round(0)
	fmt.Fprintf(os.Stderr, "holding %d streams for %v\n", cfg.streams, cfg.hold)
	time.Sleep(cfg.hold)
	switch {
	case cfg.silentAfter > 0: // this peer went silent: its session may be dead, as intended
	case sess.IsClosed():
		rep.errorf("the session died during the %v hold", cfg.hold)
	default:
		round(cfg.bytes)
	}
	for _, st := range streams {
		if st != nil {
			st.Close()
			rep.add(0, 1)
		}
	}
}
