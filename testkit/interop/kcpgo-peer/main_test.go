package main

import (
	"encoding/binary"
	"io"
	"testing"
	"time"

	kcp "github.com/xtaci/kcp-go/v5"
)

func TestPercentileIsNearestRank(t *testing.T) {
	r := make([]float64, 1000)
	for i := range r {
		r[i] = float64(i + 1)
	}
	for _, c := range []struct{ p, want float64 }{{50, 500}, {90, 900}, {99, 990}, {99.9, 999}, {100, 1000}, {0, 1}} {
		if got := percentile(r, c.p); got != c.want {
			t.Errorf("p%g of 1..1000 = %g, want %g", c.p, got, c.want)
		}
	}
	if got := percentile([]float64{7}, 99.9); got != 7 {
		t.Errorf("one sample: %g", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("no samples: %g", got)
	}
}

func TestMessageRoundTrip(t *testing.T) {
	epoch = time.Now().Add(-time.Second)
	buf := make([]byte, 64)
	buildMsg(buf, 41)
	if binary.LittleEndian.Uint64(buf[0:8]) != 41 {
		t.Fatal("sequence not at bytes 0..8")
	}
	rtt, err := checkMsg(buf, 41)
	if err != nil || rtt < 0 || rtt > 1000 {
		t.Fatalf("rtt %v err %v", rtt, err)
	}
	if _, err := checkMsg(buf, 42); err == nil {
		t.Fatal("a wrong sequence number passed")
	}
	buf[40] ^= 1
	if _, err := checkMsg(buf, 41); err == nil {
		t.Fatal("a corrupted payload byte passed")
	}
	// the payload is the stream pattern at offset seq*size+16
	want := make([]byte, 48)
	fillPattern(want, 41*64+16)
	buildMsg(buf, 41)
	if string(buf[16:]) != string(want) {
		t.Fatal("payload is not the pattern at seq*size+16")
	}
}

// TestOOBRoundTrip runs oobRound against an in-process kcp-go listener that
// echoes out-of-band datagrams the way echo-server --oob-echo does.
func TestOOBRoundTrip(t *testing.T) {
	lis, err := kcp.ListenWithOptions("127.0.0.1:0", nil, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		s, err := lis.AcceptKCP()
		if err != nil {
			return
		}
		s.SetOOBHandler(func(b []byte) { s.SendOOB(b) })
		buf := make([]byte, 64)
		for {
			n, err := s.Read(buf)
			if err != nil {
				return
			}
			s.Write(buf[:n])
		}
	}()
	cfg := config{addr: lis.Addr().String(), dataShard: 3, parityShard: 1, oob: 50, size: 100, oobInterval: time.Millisecond, drain: 2 * time.Second}
	sess, err := dial(cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	// The listener learns of the session from stream data first.
	sess.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := sess.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(sess, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	epoch = time.Now()
	st, err := oobRound(sess, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.sent != 50 || st.received < 45 || st.max != 1400-8-4 {
		t.Fatalf("sent %d received %d max %d", st.sent, st.received, st.max)
	}
}
