#!/usr/bin/env bash
# Checks that kcpio's kcpio-only FEC group deadline is harmless to kcp-go:
# a real kcp-go v5.6.72 UDPSession fed a deadline-closed group (first message
# lost, optionally fillers lost too) recovers the message from parity, and the
# 12-byte fillers only bump its KCPInErrors counter.
# Needs Go and the kcp-go module (go mod download github.com/xtaci/kcp-go/v5@v5.6.72).
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
KCPIO_FILLER_DUMP="$work/fillers.txt" cargo test -p kcpio --lib -- --ignored dump_deadline_group_for_kcp_go
src="$(go env GOMODCACHE)/github.com/xtaci/kcp-go/v5@v5.6.72"
cp -r "$src" "$work/kcp-go" && chmod -R u+w "$work/kcp-go"
cat > "$work/kcp-go/kcpio_filler_test.go" <<GO
package kcp

import (
	"bufio"
	"encoding/hex"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

func runKcpio(t *testing.T, drop map[int]bool) {
	f, err := os.Open("$work/fillers.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pk [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		b, err := hex.DecodeString(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		pk = append(pk, b)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	remote := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}
	s := newUDPSession(0x11223344, 10, 3, nil, conn, true, remote, nil)
	defer s.Close()
	rec0 := atomic.LoadUint64(&DefaultSnmp.FECRecovered)
	err0 := atomic.LoadUint64(&DefaultSnmp.KCPInErrors)
	for i, p := range pk {
		if !drop[i] {
			s.packetInput(append([]byte(nil), p...))
		}
	}
	s.SetReadDeadline(time.Now().Add(time.Second))
	var got []string
	for i := 0; i < 2; i++ {
		b := make([]byte, 1500)
		n, err := s.Read(b)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		got = append(got, string(b[:n]))
	}
	t.Logf("read %q; FECRecovered +%d, KCPInErrors +%d", got,
		atomic.LoadUint64(&DefaultSnmp.FECRecovered)-rec0, atomic.LoadUint64(&DefaultSnmp.KCPInErrors)-err0)
	if got[0] != "first message, lost on the wire" || got[1] != "second" {
		t.Fatalf("got %q", got)
	}
}

func TestKcpioFillersMessageLost(t *testing.T)            { runKcpio(t, map[int]bool{0: true}) }
func TestKcpioFillersMessageAndTwoFillersLost(t *testing.T) { runKcpio(t, map[int]bool{0: true, 3: true, 7: true}) }
GO
(cd "$work/kcp-go" && go test -run Kcpio -v -count 1 2>&1 | grep -E '^(=== RUN|--- |    |PASS|FAIL|ok)')
