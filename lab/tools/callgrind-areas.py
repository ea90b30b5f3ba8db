#!/usr/bin/env python3
"""Per-datagram instructions and cache misses of a carrier's two ends, by area.

    callgrind-areas.py NAME SIZE RECV_JSON CLI_IDLE CLI_LOAD SRV_IDLE SRV_LOAD

Reads four callgrind dumps (each end's idle window and loaded window of the
same length, lab/scripts/udp-instr.sh), takes every function's own cost
(calls excluded), sums it by area of the code (from the symbol: inlined code
counts in its caller), subtracts the idle window from the loaded one and
divides by the datagrams the probe receiver got (its bytes over SIZE).
Prints a markdown table: Ir per datagram per end and area, then the cache
misses (I1, D1 read + write, LL) per datagram per end.
"""
import json
import re
import sys
from collections import defaultdict

AREAS = [
    # (area, regex on "object|function"), first match wins.
    ("clock", r"clock_gettime|vdso|Instant::now|std::time|__vdso|timespec"),
    ("malloc", r"\|(malloc|free|realloc|calloc|cfree|_int_malloc|_int_free|_int_realloc|malloc_consolidate|tcache\w*|__libc_malloc|__libc_free|__rust_alloc|__rust_dealloc|__rdl_\w+|alloc::alloc::)"),
    ("memcpy", r"\|(__)?(memcpy|memmove|memset|mempcpy)\w*"),
    ("tokio", r"\|<?&?(mut )?tokio(_util)?::"),
    ("driver", r"\|<?&?(mut )?kcpio::driver::"),
    ("sys", r"\|<?&?(mut )?kcpio::sys::"),
    ("conn/arq", r"\|<?&?(mut )?kcpio::(conn|arq)::"),
    ("fec", r"\|<?&?(mut )?kcpio::fec::"),
    ("crypto", r"\|<?&?(mut )?(kcpio::(crypto|simd)|aes|cipher|crc32fast|aes_gcm|ghash|polyval|ctr)::"),
    ("stream", r"\|<?&?(mut )?kcpio::(stream|listener|socket|relay)::"),
    ("kcpio other", r"\|<?&?(mut )?kcpio::"),
    ("tunnel udp", r"\|<?&?(mut )?kcpio_tunnel::udp::"),
    ("tunnel other", r"\|<?&?(mut )?kcpio_tunnel::"),
    ("udpfloor", r"\|<?&?(mut )?udpfloor::"),
    ("std/core", r"\|<?&?(mut )?(std|core|alloc|hashbrown|bytes|parking_lot\w*)::"),
    ("libc/ld", r"(libc|ld-linux)[^|]*\|"),
]
AREAS = [(a, re.compile(r)) for a, r in AREAS]


def self_costs(path):
    """{(object, function): [costs...]} of a callgrind file's own costs, and the events."""
    events, costs = [], defaultdict(lambda: None)
    names = {"ob": {}, "fn": {}}
    ob = fn = None
    skip = False
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("events:"):
            events = line.split()[1:]
            continue
        m = re.match(r"^(ob|fl|fi|fe|fn|cob|cfi|cfl|cfn)=(?:\((\d+)\))?\s*(.*)$", line)
        if m:
            kind, ident, name = m.groups()
            base = {"cob": "ob", "cfn": "fn", "cfi": "fl", "cfl": "fl", "fi": "fl", "fe": "fl"}.get(kind, kind)
            if base in names and ident is not None:
                if name:
                    names[base][ident] = name
                else:
                    name = names[base].get(ident, "?")
            if kind == "ob":
                ob = name
            elif kind == "fn":
                fn = name
            continue
        if line.startswith("calls="):
            skip = True
            continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            if skip:
                skip = False
                continue
            vals = [int(x) for x in line.split()[1:]]
            key = (ob, fn)
            cur = costs[key]
            if cur is None:
                cur = [0] * len(events)
            for i, v in enumerate(vals):
                cur[i] += v
            costs[key] = cur
    return events, costs


def area_of(ob, fn):
    k = f"{ob}|{fn}"
    for a, r in AREAS:
        if r.search(k):
            return a
    return "other"


def by_area(path):
    events, costs = self_costs(path)
    out = defaultdict(lambda: [0] * len(events))
    for (ob, fn), c in costs.items():
        a = area_of(ob or "", fn or "")
        for i, v in enumerate(c):
            out[a][i] += v
    return events, out


def main():
    name, size, recv, ci, cl, si, sl = sys.argv[1:]
    v = json.loads([x for x in open(recv).read().strip().splitlines() if x.startswith("{")][-1])
    n = v["bytes"] / int(size)
    lost = v.get("lost", 0)
    ends = {}
    for end, idle, load in (("client", ci, cl), ("server", si, sl)):
        ev, a = by_area(idle)
        ev2, b = by_area(load)
        assert ev == ev2, (ev, ev2)
        ends[end] = (ev, {k: [(b[k][i] - a.get(k, [0] * len(ev))[i]) / n for i in range(len(ev))] for k in set(a) | set(b)})
    ev = ends["client"][0]
    ir = ev.index("Ir")
    print(f"\n### {name}: {n:.0f} datagrams delivered, {lost} lost; per delivered datagram, loaded minus idle window\n")
    print("| area | client Ir | server Ir | both |")
    print("|---|---:|---:|---:|")
    areas = sorted(set(ends["client"][1]) | set(ends["server"][1]),
                   key=lambda k: -(ends["client"][1].get(k, [0] * len(ev))[ir] + ends["server"][1].get(k, [0] * len(ev))[ir]))
    tot = [0.0, 0.0]
    for k in areas:
        c = ends["client"][1].get(k, [0] * len(ev))[ir]
        s = ends["server"][1].get(k, [0] * len(ev))[ir]
        tot[0] += c
        tot[1] += s
        if abs(c) + abs(s) < 20:
            continue
        print(f"| {k} | {c:,.0f} | {s:,.0f} | {c + s:,.0f} |")
    print(f"| **total** | **{tot[0]:,.0f}** | **{tot[1]:,.0f}** | **{tot[0] + tot[1]:,.0f}** |")

    def total(end, evn):
        if evn not in ev:
            return float("nan")
        j = ev.index(evn)
        return sum(x[j] for x in ends[end][1].values())

    print("\n| misses per datagram | client | server | both |")
    print("|---|---:|---:|---:|")
    for label, evs in (("I1 (I1mr)", ["I1mr"]), ("D1 (D1mr + D1mw)", ["D1mr", "D1mw"]), ("LL (ILmr + DLmr + DLmw)", ["ILmr", "DLmr", "DLmw"])):
        c = sum(total("client", e) for e in evs)
        s = sum(total("server", e) for e in evs)
        print(f"| {label} | {c:,.1f} | {s:,.1f} | {c + s:,.1f} |")


if __name__ == "__main__":
    main()
