package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// pair runs a server and a client of this program in-process and returns
// both reports. serverArgs and clientArgs follow the role.
func pair(t *testing.T, serverArgs, clientArgs string) (srv, cli *report) {
	t.Helper()
	scfg, err := parseArgs(append([]string{"server", "--listen", "127.0.0.1:0", "--quiet"}, strings.Fields(serverArgs)...))
	if err != nil {
		t.Fatalf("server args: %v", err)
	}
	addr := make(chan net.Addr, 1)
	stop := make(chan struct{})
	done := make(chan *report, 1)
	go func() { done <- runServer(scfg, func(a net.Addr) { addr <- a }, stop) }()
	var a net.Addr
	select {
	case a = <-addr:
	case r := <-done:
		t.Fatalf("server did not start: %v", r.Errors)
	}
	ccfg, err := parseArgs(append([]string{"client", "--connect", a.String(), "--quiet"}, strings.Fields(clientArgs)...))
	if err != nil {
		t.Fatalf("client args: %v", err)
	}
	cli = runClient(ccfg)
	cli.finish()
	select {
	case srv = <-done:
	case <-time.After(20 * time.Second):
		close(stop)
		srv = <-done
	}
	srv.finish()
	return srv, cli
}

func mustOK(t *testing.T, who string, r *report) {
	t.Helper()
	if !r.OK {
		t.Fatalf("%s failed: %v", who, r.Errors)
	}
}

func TestApps(t *testing.T) {
	for _, c := range []struct {
		name, server, client string
		bytes                int64 // client's expected byte count
	}{
		{"echo-v1-tcp", "--app echo --max-streams 8", "--app echo --streams 8 --bytes 100000", 800000},
		{"echo-v2-kcp-snappy", "--app echo --max-streams 4 --transport kcp --smuxver 2 --snappy --crypt aes-128 --datashard 10 --parityshard 3",
			"--app echo --streams 4 --bytes 100000 --transport kcp --smuxver 2 --snappy --crypt aes-128 --datashard 10 --parityshard 3", 400000},
		{"sink-v2", "--app sink --max-streams 20 --smuxver 2", "--app sink --streams 20 --bytes 300000 --smuxver 2", 6000000},
		{"source-v1", "--app source --max-streams 3", "--app source --streams 3 --bytes 200000 --write-size 1000", 600000},
		{"sizes-v2", "--app sizes --max-streams 1 --smuxver 2 --framesize 65535", "--app sizes --smuxver 2 --framesize 65535", 0},
		{"halfclose-rev", "--app halfclose-rev --max-streams 2 --bytes 50000", "--app halfclose-rev --streams 2", 200000},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := pair(t, c.server, c.client)
			mustOK(t, "client", cli)
			mustOK(t, "server", srv)
			if c.bytes > 0 && cli.Bytes != c.bytes {
				t.Fatalf("client bytes %d, want %d", cli.Bytes, c.bytes)
			}
		})
	}
}

// The half-close shape differs by version: v1.5.58 has CloseWrite and reads
// the reply; v1.5.16 falls back to Close and reads nothing.
func TestHalfClose(t *testing.T) {
	srv, cli := pair(t, "--app halfclose --max-streams 2", "--app halfclose --streams 2 --bytes 70000")
	mustOK(t, "client", cli)
	mustOK(t, "server", srv)
	want := int64(2 * 70000)
	if cli.HalfClose {
		want *= 2
	}
	if cli.Bytes != want || srv.Bytes != 2*2*70000 {
		t.Fatalf("half_close=%v: client %d bytes (want %d), server %d", cli.HalfClose, cli.Bytes, want, srv.Bytes)
	}
	if has := smuxVersion() != "v1.5.16"; cli.HalfClose != has {
		t.Fatalf("smux %s: half_close=%v", smuxVersion(), cli.HalfClose)
	}
}

// The stalled first stream finishes last; the others do not wait for it (v2).
func TestStall(t *testing.T) {
	srv, cli := pair(t, "--app sink --max-streams 3 --smuxver 2 --stall 1500ms",
		"--app sink --streams 3 --bytes 1000000 --smuxver 2")
	mustOK(t, "client", cli)
	mustOK(t, "server", srv)
	if cli.FirstStreamS < 1.5 || cli.OthersMaxS > 1.0 {
		t.Fatalf("first stream %.3fs (want >= 1.5), others %.3fs (want < 1)", cli.FirstStreamS, cli.OthersMaxS)
	}
}

func TestInjectIsReported(t *testing.T) {
	for _, kind := range []string{"badver", "badcmd"} {
		srv, cli := pair(t, "--app echo --max-sessions 1", "--app inject --hold 2s --inject "+kind)
		mustOK(t, "client", cli)
		if srv.SessionError != "invalid protocol" {
			t.Fatalf("%s: server session error %q", kind, srv.SessionError)
		}
	}
}

// A silent client (keepalive 1 s, timeout 2 s) is noticed by the server
// between one and two timeouts after it went quiet; an idle one is not.
func TestKeepalive(t *testing.T) {
	ka := "--keepalive 1 --keepalive-timeout 2"
	srv, cli := pair(t, "--app echo --max-sessions 1 "+ka, "--app idle --hold 6s --bytes 64 --silent-after 1s "+ka)
	mustOK(t, "client", cli)
	if s := srv.SessionClosedS; s < 1+2-0.2 || s > 1+4+0.5 {
		t.Fatalf("silent peer detected after %.2fs, want 3..5", s)
	}
	srv, cli = pair(t, "--app echo --max-sessions 1 "+ka, "--app idle --hold 5s --bytes 64 "+ka)
	mustOK(t, "client", cli)
	if cli.SessionClosedS >= 0 {
		t.Fatalf("idle session died after %.2fs", cli.SessionClosedS)
	}
}

func TestArgs(t *testing.T) {
	for _, bad := range []string{
		"server", "client --connect x --app nope", "client --connect x --transport quic",
		"client --connect x --framesize 70000", "client --connect x --keepalive 31",
		"client --connect x --sizes 0", "client --connect x --mode turbo",
	} {
		if _, err := parseArgs(strings.Fields(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	s := defaultSizes()
	if s[0] != 1 || s[len(s)-1] != 65535 {
		t.Fatalf("default sizes %v", s)
	}
}
