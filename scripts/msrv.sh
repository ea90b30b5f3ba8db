#!/usr/bin/env bash
# The minimum supported Rust version (MSRV) check, run by .ci/run.
#
# `rust-version` in the root Cargo.toml's [workspace.package] is a promise to
# the published crates' users (kcpio, kcpio-tunnel): cargo refuses to build them
# with an older compiler. This script checks the two halves of that promise
# that can be checked with the one toolchain this machine has:
#
# 1. The dependencies. Every package a published crate needs to build (its
#    normal and build dependencies, transitively, for every target, as locked
#    in Cargo.lock) must declare a `rust-version` no higher than ours: a higher
#    one means our MSRV is a lie. Packages that declare none are listed, not
#    failed (cargo itself cannot tell their minimum either).
# 2. The code. clippy's `incompatible_msrv` lint (warn by default; .ci/run
#    runs clippy with -D warnings) reports any standard-library item stabilised
#    after our `rust-version`, which clippy reads from Cargo.toml. This script
#    fails if the lint is allowed anywhere, or if a clippy.toml sets another
#    `msrv`, so that check cannot be switched off quietly.
#
# What it does NOT prove: that the code compiles with that exact rustc
# (language features, inference changes, lints). That needs the old toolchain
# (`rustup toolchain install 1.89` and `cargo +1.89 check --workspace --locked`),
# which cannot be downloaded on this machine: CI here has one toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."

metadata="$(mktemp)"
trap 'rm -f "$metadata"' EXIT
cargo metadata --locked --format-version 1 >"$metadata"

python3 - "$metadata" <<'EOF'
import json, re, subprocess, sys

meta = json.load(open(sys.argv[1]))
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
members = [packages[i] for i in meta["workspace_members"]]

def version(v):
    parts = [int(x) for x in v.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))

failures = []
published = [p for p in members if p.get("publish") != []]
if not published:
    failures.append("no published workspace member found")
msrvs = {p["rust_version"] for p in published}
if None in msrvs or len(msrvs) != 1:
    failures.append(f"published crates must share one rust-version: {sorted(map(str, msrvs))}")
ours = max((v for v in msrvs if v), key=version, default="0")

def needed(root):
    """Everything `root` needs to build for a user: normal and build
    dependencies, transitively (dev-dependencies never reach a user)."""
    seen, todo = set(), [root]
    while todo:
        for dep in nodes[todo.pop()]["deps"]:
            if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]) and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    return seen

undeclared, highest = set(), ("0", "")
for crate in published:
    for pid in needed(crate["id"]):
        dep = packages[pid]
        if pid in meta["workspace_members"]:
            continue
        rv = dep.get("rust_version")
        if rv is None:
            undeclared.add(f"{dep['name']} {dep['version']}")
            continue
        if version(rv) > version(highest[0]):
            highest = (rv, f"{dep['name']} {dep['version']}")
        if version(rv) > version(ours):
            failures.append(f"{crate['name']} needs {dep['name']} {dep['version']}, "
                            f"which declares rust-version {rv} > ours ({ours})")

# The code half: clippy's incompatible_msrv must be on everywhere.
tracked = subprocess.run(["git", "ls-files", "-z"], capture_output=True, text=True)
files = [f for f in tracked.stdout.split("\0") if f] if tracked.returncode == 0 else []
if not files:  # not a git checkout (e.g. an exported copy): walk the tree
    import os
    for top, dirs, names in os.walk("."):
        dirs[:] = [d for d in dirs if d not in ("target", ".git")]
        files += [os.path.join(top, n)[2:] for n in names]
allowed = re.compile(r"(allow|expect)\s*\([^)]*incompatible_msrv|incompatible_msrv\s*=\s*[\"{]?[^\n]*allow")
for path in files:
    if not (path.endswith(".rs") or path.endswith(".toml")):
        continue
    try:
        text = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError):
        continue
    for n, line in enumerate(text.splitlines(), 1):
        if allowed.search(line):
            failures.append(f"{path}:{n}: clippy::incompatible_msrv is allowed: {line.strip()}")
        if path.endswith("clippy.toml") and re.match(r"\s*msrv\s*=", line):
            failures.append(f"{path}:{n}: clippy.toml overrides the msrv Cargo.toml declares")

print(f"MSRV {ours}: {len(published)} published crates; the highest rust-version a "
      f"dependency declares is {highest[0]} ({highest[1]})")
if undeclared:
    print(f"  declaring none ({len(undeclared)}): {', '.join(sorted(undeclared))}")
if failures:
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    sys.exit(1)
EOF
