#!/usr/bin/env bash
# Architecture invariants (see ARCHITECTURE.md): the core library crates never
# depend on async runtimes, HTTP, databases or CLI parsing.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for crate in brokk-model brokk-jdl brokk-planner brokk-broker brokk-sim; do
  for banned in tokio axum clap sqlx reqwest hyper; do
    if cargo tree --locked -p "$crate" -e normal --prefix none 2>/dev/null | grep -q "^$banned v"; then
      echo "invariant broken: $crate depends on $banned"
      status=1
    fi
  done
done
exit $status
