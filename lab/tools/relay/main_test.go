package main

import (
	"sync"
	"testing"
	"time"
)

// collect offers n one-byte datagrams to a direction and gathers what it sends.
func collect(t *testing.T, p params, seed int64, limit, n int) (got [][]byte, d *direction) {
	t.Helper()
	d = newDirection("test", p, seed, limit)
	var mu sync.Mutex
	for i := 0; i < n; i++ {
		d.offer([]byte{byte(i), byte(i >> 8)}, func(b []byte) {
			mu.Lock()
			got = append(got, b)
			mu.Unlock()
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if d.outPk.Load()+d.lost.Load()+d.over.Load() == uint64(n) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	return append([][]byte(nil), got...), d
}

func TestLossIsSeededAndNearTheRate(t *testing.T) {
	p := params{loss: 0.1}
	_, a := collect(t, p, 7, 1<<16, 20000)
	_, b := collect(t, p, 7, 1<<16, 20000)
	_, c := collect(t, p, 8, 1<<16, 20000)
	if a.lost.Load() != b.lost.Load() {
		t.Fatalf("same seed, different drops: %d vs %d", a.lost.Load(), b.lost.Load())
	}
	if a.lost.Load() == c.lost.Load() {
		t.Logf("seeds 7 and 8 dropped the same count %d (possible, unlikely)", a.lost.Load())
	}
	if l := a.lost.Load(); l < 1700 || l > 2300 {
		t.Fatalf("10%% loss of 20000 dropped %d", l)
	}
	if a.outPk.Load()+a.lost.Load() != 20000 {
		t.Fatalf("out %d + lost %d != 20000", a.outPk.Load(), a.lost.Load())
	}
}

func TestDelayHoldsAndKeepsOrderWithoutJitter(t *testing.T) {
	start := time.Now()
	got, d := collect(t, params{delay: 30 * time.Millisecond}, 1, 1<<16, 100)
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("100 datagrams through a 30 ms delay were all out after %v", el)
	}
	if len(got) != 100 || d.lost.Load() != 0 {
		t.Fatalf("got %d, lost %d", len(got), d.lost.Load())
	}
	for i, b := range got {
		if int(b[0])|int(b[1])<<8 != i {
			t.Fatalf("datagram %d came out as %d", i, int(b[0])|int(b[1])<<8)
		}
	}
}

func TestQueueIsBounded(t *testing.T) {
	_, d := collect(t, params{delay: 50 * time.Millisecond}, 1, 10, 100)
	if d.over.Load() != 90 || d.outPk.Load() != 10 {
		t.Fatalf("limit 10: overflow %d, out %d", d.over.Load(), d.outPk.Load())
	}
}
