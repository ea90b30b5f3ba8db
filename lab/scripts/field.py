#!/usr/bin/env python3
"""Helpers for scripts/field.sh (not meant to be run by hand).

  field.py http DIR PORT CCFILE     HTTP file server for DIR; each accepted connection gets the
                                    congestion control named in CCFILE (read per connection), since
                                    a network namespace may only default to the host's allowed ones
  field.py serve PORT CC            competing-flow server: one TCP stream of zeros per connection,
                                    congestion control CC set on the socket (TCP_CONGESTION)
  field.py fetch HOST PORT LOG SECS competing-flow client: reads for at most SECS seconds and
                                    appends "epoch_seconds total_bytes" to LOG every 0.2 s
  field.py snap NS_S DEV_S NS_C DEV_C NS_D DEV_D NS_U DEV_U
                                    one JSON object of counters: IP bytes/packets sent by the two
                                    endpoints, packets/drops of the two bottleneck qdiscs
  field.py record DIR N             one run's files (N.meta, N.res, N.snap0, N.snap1, N.ping,
                                    N.flow, N.imp*) -> N.json
  field.py table DIR                every N.json in DIR -> markdown table on stdout, DIR/results.json
"""
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time


def serve(port, cc):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", int(port)))
    ls.listen(4)
    zeros = bytes(64 * 1024)
    while True:
        c, _ = ls.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        try:
            while True:
                c.sendall(zeros)
        except OSError:
            c.close()


def http(directory, port, ccfile):
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Server(ThreadingHTTPServer):
        def get_request(self):
            conn, addr = super().get_request()
            try:
                cc = open(ccfile).read().strip() or "bbr"
            except OSError:
                cc = "bbr"
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
            return conn, addr

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=directory)
    Server(("0.0.0.0", int(port)), handler).serve_forever()


def fetch(host, port, log, secs):
    end = time.time() + float(secs)
    s = socket.create_connection((host, int(port)), timeout=5)
    s.settimeout(0.2)
    total = 0
    last = 0.0
    with open(log, "a", buffering=1) as out:
        out.write(f"{time.time():.3f} 0\n")
        while time.time() < end:
            try:
                b = s.recv(1 << 16)
                if not b:
                    break
                total += len(b)
            except socket.timeout:
                pass
            now = time.time()
            if now - last >= 0.2:
                out.write(f"{now:.3f} {total}\n")
                last = now
        out.write(f"{time.time():.3f} {total}\n")


def _json(cmd):
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def snap(ns_s, dev_s, ns_c, dev_c, ns_d, dev_d, ns_u, dev_u):
    o = {}
    for side, ns, dev in (("srv", ns_s, dev_s), ("cli", ns_c, dev_c)):
        tx = _json(["ip", "-n", ns, "-j", "-s", "link", "show", "dev", dev])[0]["stats64"]["tx"]
        # veth counts the 14-byte Ethernet header; keep IP bytes
        o[f"{side}_tx_ip_bytes"] = tx["bytes"] - 14 * tx["packets"]
        o[f"{side}_tx_pkts"] = tx["packets"]
    for side, ns, dev in (("down", ns_d, dev_d), ("up", ns_u, dev_u)):
        q = _json(["ip", "netns", "exec", ns, "tc", "-s", "-j", "qdisc", "show", "dev", dev])[0]
        o[f"q_{side}_pkts"] = q["packets"]
        o[f"q_{side}_drops"] = q["drops"]
    print(json.dumps(o))


def pct(xs, p):
    """Nearest-rank percentile, as the peers compute it."""
    if not xs:
        return None
    s = sorted(xs)
    import math

    k = min(max(math.ceil(p * len(s) / 100 - 1e-9) - 1, 0), len(s) - 1)
    return s[k]


def _kv(path):
    d = {}
    if os.path.exists(path):
        for line in open(path):
            k, _, v = line.strip().partition(" ")
            if k:
                d[k] = v
    return d


def _flow_bytes_between(path, t0, t1):
    """Bytes the competing flow received between epoch t0 and t1 (linear between samples)."""
    pts = []
    for line in open(path):
        a = line.split()
        if len(a) == 2:
            pts.append((float(a[0]), int(a[1])))
    if len(pts) < 2:
        return None

    def at(t):
        if t <= pts[0][0]:
            return pts[0][1]
        for (ta, ba), (tb, bb) in zip(pts, pts[1:]):
            if ta <= t <= tb:
                return ba if tb == ta else ba + (bb - ba) * (t - ta) / (tb - ta)
        return pts[-1][1]

    return at(t1) - at(t0)


def record(d, n):
    base = f"{d}/{n}"
    meta = json.load(open(f"{base}.meta"))
    res = _kv(f"{base}.res")
    r = dict(meta)
    r["status"] = res.get("status", "failed")
    if r["status"] in ("n/a", "skipped"):
        r["note"] = res.get("note", "")
        json.dump(r, open(f"{base}.json", "w"))
        return
    rate_Bps = meta["rate_mbit"] * 1e6 / 8
    by = int(res.get("bytes", 0) or 0)
    secs = float(res.get("secs", 0) or 0)
    r["bytes"] = by
    r["secs"] = secs
    r["partial"] = res.get("partial", "1") == "1"
    r["hash_ok"] = res.get("hash_ok", "0") == "1"
    r["note"] = res.get("note", "")
    if r["partial"] and secs < float(meta["cap_s"]) - 2:
        # ended short of the file well before the cap: the transfer broke
        r["status"] = "failed"
        r["note"] = (r["note"] + f" (broke after {by} B in {secs:.1f} s)").strip()
    r["goodput_MBps"] = by / secs / 1e6 if secs > 0 else 0.0
    r["goodput_frac"] = (by / secs) / (rate_Bps * (1 - meta["loss_down"])) if secs > 0 else 0.0
    # kcpio's peer only: goodput from its first sink report after 5 s on
    steady = float(res.get("steady_MBps", 0) or 0)
    r["steady_MBps"] = steady or None
    r["steady_frac"] = steady * 1e6 / (rate_Bps * (1 - meta["loss_down"])) if steady else None
    cpu = res.get("cpu_s")
    r["cpu_s"] = float(cpu) if cpu not in (None, "") else None
    r["cpu_s_per_GB"] = r["cpu_s"] / (by / 1e9) if r["cpu_s"] is not None and by > 0 else None
    try:
        s0 = json.loads(open(f"{base}.snap0").read())
        s1 = json.loads(open(f"{base}.snap1").read())
        dd = {k: s1[k] - s0[k] for k in s0}
        r["counters"] = dd
        if not meta.get("compete") and by > 0:
            r["wire_per_payload"] = (dd["srv_tx_ip_bytes"] + dd["cli_tx_ip_bytes"]) / by
        for side in ("down", "up"):
            tot = dd[f"q_{side}_pkts"] + dd[f"q_{side}_drops"]
            r[f"q_{side}_drop_frac"] = dd[f"q_{side}_drops"] / tot if tot else 0.0
    except (OSError, ValueError, KeyError):
        pass
    if os.path.exists(f"{base}.ping"):
        rtts = [float(x) for x in re.findall(r"time=([0-9.]+) ms", open(f"{base}.ping").read())]
        r["probe_n"] = len(rtts)
        if rtts:
            r["probe_p50_ms"] = pct(rtts, 50)
            r["probe_p99_ms"] = pct(rtts, 99)
            base_rtt = meta["rtt_ms"]
            r["probe_infl_p50"] = (r["probe_p50_ms"] - base_rtt) / base_rtt
            r["probe_infl_p99"] = (r["probe_p99_ms"] - base_rtt) / base_rtt
    if meta.get("compete") and os.path.exists(f"{base}.flow") and "t0" in res and "t1" in res:
        t0, t1 = float(res["t0"]), float(res["t1"])
        fb = _flow_bytes_between(f"{base}.flow", t0, t1)
        if fb is not None and t1 > t0:
            x1 = by / secs if secs > 0 else 0.0
            x2 = fb / (t1 - t0)
            r["compete_MBps"] = x2 / 1e6
            r["jain"] = (x1 + x2) ** 2 / (2 * (x1 * x1 + x2 * x2)) if x1 + x2 > 0 else None
    imp = {}
    for side in ("down", "up"):
        p = f"{base}.imp-{side}"
        if os.path.exists(p):
            kv = dict(re.findall(r"(\w+)=(\d+)", open(p).read().split("impairer:")[-1]))
            imp[side] = {k: int(v) for k, v in kv.items()}
    r["impairer"] = imp
    json.dump(r, open(f"{base}.json", "w"))


def _fmt(v, d=2, pctf=False):
    if v is None:
        return "–"
    return f"{v * 100:.{d}f}%" if pctf else f"{v:.{d}f}"


def table(d):
    runs = []
    n = 1
    while os.path.exists(f"{d}/{n}.meta"):
        if os.path.exists(f"{d}/{n}.json"):
            runs.append(json.load(open(f"{d}/{n}.json")))
        n += 1
    groups = {}
    for r in runs:
        groups.setdefault((r["path"], r["row"]), []).append(r)
    summary = []
    paths = []
    for r in runs:
        if r["path"] not in paths:
            paths.append(r["path"])
    for path in paths:
        first = next(r for r in runs if r["path"] == path)
        print(
            f"\n### {path}: {first['rate_mbit']:g} Mbit/s, RTT {first['rtt_ms']:g} ms, loss {first['loss_down'] * 100:g}% down / "
            f"{first['loss_up'] * 100:g}% up (per direction), jitter ±{first['jitter_ms']:g} ms, queue {first['queue_bdp']:g} BDP "
            f"({first['queue_bytes']} B), {first['size'] / 1048576:g} MiB capped at {first['cap_s']} s"
            + (f", competing TCP {first['compete']} flow" if first.get("compete") else "")
            + "\n"
        )
        cols = "| row | goodput MB/s (median) | runs | of rate×(1−loss) | CPU s/GB | wire B / payload B | probe RTT p50 / p99 ms (inflation over base RTT) | bottleneck drops down / up |"
        sep = "|---|---:|---|---:|---:|---:|---:|---:|"
        if first.get("compete"):
            cols += " competing flow MB/s | Jain |"
            sep += "---:|---:|"
        print(cols)
        print(sep)
        for (p, row), rs in groups.items():
            if p != path:
                continue
            done = [r for r in rs if r["status"] not in ("n/a", "skipped", "failed")]
            notes = sorted({r.get("note", "") for r in rs if r["status"] == "failed" and r.get("note")})
            if not done:
                why = rs[0]["status"] + (": " + rs[0].get("note", "") if rs[0].get("note") else "")
                if rs[0]["status"] == "failed":
                    why = f"failed {len(rs)}/{len(rs)}: " + "; ".join(notes)
                print(f"| {row} | {why} |" + " |" * (sep.count("|") - 3))
                summary.append({"path": path, "row": row, "status": rs[0]["status"], "notes": notes or [rs[0].get("note", "")]})
                continue

            def med(k):
                xs = [r[k] for r in done if r.get(k) is not None]
                return statistics.median(xs) if xs else None

            gps = [r["goodput_MBps"] for r in done]
            marks = []
            for r in done:
                m = f"{r['goodput_MBps']:.2f}"
                if r["partial"]:
                    m += "†"
                elif not r["hash_ok"]:
                    m += "‡"
                marks.append(m)
            failed = len(rs) - len(done)
            runs_s = ", ".join(marks) + (f" (+{failed} failed: {'; '.join(notes)})" if failed else "")
            s = {
                "path": path,
                "row": row,
                "status": "ok",
                "runs": len(done),
                "partial_runs": sum(1 for r in done if r["partial"]),
                "goodput_MBps": statistics.median(gps),
                "goodput_MBps_runs": gps,
            }
            for k in (
                "goodput_frac",
                "steady_MBps",
                "steady_frac",
                "cpu_s_per_GB",
                "wire_per_payload",
                "probe_p50_ms",
                "probe_p99_ms",
                "probe_infl_p50",
                "probe_infl_p99",
                "q_down_drop_frac",
                "q_up_drop_frac",
                "compete_MBps",
                "jain",
            ):
                s[k] = med(k)
            summary.append(s)
            line = (
                f"| {row} | {s['goodput_MBps']:.2f} | {runs_s} | {_fmt(s['goodput_frac'], 0, True)}"
                + (f" ({_fmt(s['steady_frac'], 0, True)} from 5 s)" if s.get("steady_frac") else "")
                + f" | {_fmt(s['cpu_s_per_GB'], 1)} | "
                f"{_fmt(s['wire_per_payload'])} | {_fmt(s['probe_p50_ms'], 0)} / {_fmt(s['probe_p99_ms'], 0)} "
                f"({_fmt(s['probe_infl_p50'], 0, True)} / {_fmt(s['probe_infl_p99'], 0, True)}) | "
                f"{_fmt(s['q_down_drop_frac'], 2, True)} / {_fmt(s['q_up_drop_frac'], 2, True)} |"
            )
            if first.get("compete"):
                line += f" {_fmt(s['compete_MBps'])} | {_fmt(s['jain'])} |"
            print(line)
    print(
        "\nMB/s = 10^6 bytes of verified payload per second. (N% from 5 s): kcpio's peer only, the goodput from its first sink report after 5 s to the end of the transfer (the rate once started, on a long path). † = hit the time cap (partial goodput), ‡ = full size but the hash "
        "did not match. CPU s/GB: the tunnel or peer processes, client and server summed (TCP rows: none). Wire: IP bytes "
        "sent by both endpoints (both directions, before any loss) per payload byte. Drops: packets dropped by the tbf "
        "bottleneck queue (the random loss is separate) over packets offered to it."
    )
    json.dump({"runs": runs, "summary": summary}, open(f"{d}/results.json", "w"), indent=1)


def main():
    a = sys.argv[1:]
    if not a:
        print(__doc__)
        sys.exit(2)
    cmd, args = a[0], a[1:]
    {"http": http, "serve": serve, "fetch": fetch, "snap": snap, "record": record, "table": table}[cmd](*args)


if __name__ == "__main__":
    main()
