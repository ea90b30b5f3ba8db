#!/usr/bin/env bash
# The README's test command: every unit, simulation, property, socket and interop test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --all-targets
cargo test --doc
