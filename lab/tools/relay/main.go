// Command relay is a seeded, lossy, delaying UDP relay for loopback tests.
//
//	relay --listen 127.0.0.1:A --target 127.0.0.1:B --loss 0.05 --delay 20ms --jitter 5ms --seed 1
//
// Datagrams from any client to --listen go to --target from a socket of
// their own per client address (so several sessions can share one relay);
// answers come back to that client from --listen. Each direction drops with
// its own seeded Bernoulli stream and delays by delay ± uniform jitter
// (jitter may reorder, as on a real path). Queues are bounded: past --queue
// datagrams in flight per direction, new ones are dropped and counted.
// On SIGINT/SIGTERM (or after --duration) it prints its counters and exits.
package main

import (
	"container/heap"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type params struct {
	loss   float64
	delay  time.Duration
	jitter time.Duration
}

type item struct {
	at   time.Time
	seq  uint64
	data []byte
	send func([]byte)
}

type pq []*item

func (q pq) Len() int { return len(q) }
func (q pq) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].seq < q[j].seq
	}
	return q[i].at.Before(q[j].at)
}
func (q pq) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *pq) Push(x any)   { *q = append(*q, x.(*item)) }
func (q *pq) Pop() any {
	old := *q
	n := len(old)
	it := old[n-1]
	*q = old[:n-1]
	return it
}

// direction impairs and schedules one way of traffic.
type direction struct {
	name  string
	p     params
	limit int

	mu    sync.Mutex
	rng   *rand.Rand
	q     pq
	seq   uint64
	wake  chan struct{}
	inPk  atomic.Uint64
	inB   atomic.Uint64
	lost  atomic.Uint64
	over  atomic.Uint64
	outPk atomic.Uint64
	outB  atomic.Uint64
}

func newDirection(name string, p params, seed int64, limit int) *direction {
	d := &direction{name: name, p: p, limit: limit, rng: rand.New(rand.NewSource(seed)), wake: make(chan struct{}, 1)}
	go d.run()
	return d
}

// offer takes a datagram (a copy it may keep) and schedules or drops it.
func (d *direction) offer(b []byte, send func([]byte)) {
	d.inPk.Add(1)
	d.inB.Add(uint64(len(b)))
	d.mu.Lock()
	drop := d.p.loss > 0 && d.rng.Float64() < d.p.loss
	var jit time.Duration
	if d.p.jitter > 0 {
		jit = time.Duration((d.rng.Float64()*2 - 1) * float64(d.p.jitter))
	}
	if drop {
		d.mu.Unlock()
		d.lost.Add(1)
		return
	}
	if len(d.q) >= d.limit {
		d.mu.Unlock()
		d.over.Add(1)
		return
	}
	delay := d.p.delay + jit
	if delay < 0 {
		delay = 0
	}
	d.seq++
	heap.Push(&d.q, &item{at: time.Now().Add(delay), seq: d.seq, data: b, send: send})
	first := d.q[0].seq == d.seq
	d.mu.Unlock()
	if first {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

func (d *direction) run() {
	t := time.NewTimer(time.Hour)
	for {
		d.mu.Lock()
		var wait time.Duration = time.Hour
		var due []*item
		now := time.Now()
		for len(d.q) > 0 {
			if w := d.q[0].at.Sub(now); w > 0 {
				wait = w
				break
			}
			due = append(due, heap.Pop(&d.q).(*item))
		}
		d.mu.Unlock()
		for _, it := range due {
			it.send(it.data)
			d.outPk.Add(1)
			d.outB.Add(uint64(len(it.data)))
		}
		if len(due) > 0 {
			continue
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-d.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
	}
}

func (d *direction) report() string {
	return fmt.Sprintf("%s: in=%d in_bytes=%d dropped=%d overflow=%d out=%d out_bytes=%d",
		d.name, d.inPk.Load(), d.inB.Load(), d.lost.Load(), d.over.Load(), d.outPk.Load(), d.outB.Load())
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "relay: "+format+"\n", a...)
	os.Exit(2)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address clients send to (loopback)")
	target := flag.String("target", "", "address datagrams are relayed to (loopback)")
	loss := flag.Float64("loss", 0, "drop probability per datagram, each direction")
	delay := flag.Duration("delay", 0, "one-way delay, each direction")
	jitter := flag.Duration("jitter", 0, "uniform jitter: each datagram's delay is delay±jitter (may reorder)")
	rloss := flag.Float64("rev-loss", -1, "drop probability target→client (default: --loss)")
	rdelay := flag.Duration("rev-delay", -1, "delay target→client (default: --delay)")
	rjitter := flag.Duration("rev-jitter", -1, "jitter target→client (default: --jitter)")
	seed := flag.Int64("seed", 1, "seed of the loss and jitter streams (client→target uses seed, target→client seed+1)")
	queue := flag.Int("queue", 8192, "datagrams in flight per direction before tail drop")
	maxClients := flag.Int("max-clients", 16384, "distinct client addresses served")
	duration := flag.Duration("duration", 0, "exit after this long (0 = until signalled)")
	flag.Parse()
	if *target == "" {
		fatalf("--target is required")
	}
	if *loss < 0 || *loss > 1 || *rloss > 1 {
		fatalf("loss must be in [0,1]")
	}
	fwd := params{*loss, *delay, *jitter}
	rev := fwd
	if *rloss >= 0 {
		rev.loss = *rloss
	}
	if *rdelay >= 0 {
		rev.delay = *rdelay
	}
	if *rjitter >= 0 {
		rev.jitter = *rjitter
	}
	laddr, err := net.ResolveUDPAddr("udp", *listen)
	if err != nil {
		fatalf("listen address: %v", err)
	}
	taddr, err := net.ResolveUDPAddr("udp", *target)
	if err != nil {
		fatalf("target address: %v", err)
	}
	if !laddr.IP.IsLoopback() || !taddr.IP.IsLoopback() {
		fatalf("loopback addresses only")
	}
	lconn, err := net.ListenUDP("udp", laddr)
	if err != nil {
		fatalf("listen: %v", err)
	}
	lconn.SetReadBuffer(4 << 20)
	lconn.SetWriteBuffer(4 << 20)
	up := newDirection("c2s", fwd, *seed, *queue)
	down := newDirection("s2c", rev, *seed+1, *queue)
	fmt.Printf("listening on %s target=%s loss=%g/%g delay=%s/%s jitter=%s/%s seed=%d\n",
		lconn.LocalAddr(), taddr, fwd.loss, rev.loss, fwd.delay, rev.delay, fwd.jitter, rev.jitter, *seed)

	var mu sync.Mutex
	clients := map[string]*net.UDPConn{}
	var refused atomic.Uint64

	upstream := func(c *net.UDPAddr) *net.UDPConn {
		key := c.String()
		mu.Lock()
		defer mu.Unlock()
		if u, ok := clients[key]; ok {
			return u
		}
		if len(clients) >= *maxClients {
			return nil
		}
		u, err := net.DialUDP("udp", nil, taddr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "relay: upstream socket:", err)
			return nil
		}
		u.SetReadBuffer(1 << 20)
		clients[key] = u
		caddr := *c
		go func() {
			buf := make([]byte, 65536)
			for {
				n, err := u.Read(buf)
				if err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						continue
					}
					return
				}
				down.offer(append([]byte(nil), buf[:n]...), func(b []byte) { lconn.WriteToUDP(b, &caddr) })
			}
		}()
		return u
	}

	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := lconn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			u := upstream(from)
			if u == nil {
				refused.Add(1)
				continue
			}
			up.offer(append([]byte(nil), buf[:n]...), func(b []byte) { u.Write(b) })
		}
	}()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	if *duration > 0 {
		select {
		case <-sig:
		case <-time.After(*duration):
		}
	} else {
		<-sig
	}
	mu.Lock()
	nc := len(clients)
	mu.Unlock()
	fmt.Fprintf(os.Stderr, "relay: clients=%d refused=%d %s %s\n", nc, refused.Load(), up.report(), down.report())
}
