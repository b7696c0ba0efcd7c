#!/usr/bin/env bash
# Architecture invariants (see ARCHITECTURE.md):
# - the core library crates never depend on async runtimes, HTTP, databases
#   or CLI parsing;
# - one scheduling core: among the library crates only brokk-core depends
#   on the planner (the CLI's planner benchmark aside), so site admission and
#   backfilling exist once, in brokk-core;
# - the simulator runs the broker (brokk-sim depends on brokk-broker);
# - a broker job's state changes only by the rules of brokk_broker::jobs:
#   its field stays private there, the service reads a stored state back
#   only in its database layer, and no SQL names a state to set.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
direct() { # the crates $1 depends on directly (normal dependencies)
  cargo tree --locked -p "$1" -e normal --depth 1 --prefix none 2>/dev/null | tail -n +2 | awk '{print $1}'
}
for crate in brokk-model brokk-jdl brokk-planner brokk-core brokk-broker brokk-sim; do
  for banned in tokio axum clap sqlx reqwest hyper; do
    if cargo tree --locked -p "$crate" -e normal --prefix none 2>/dev/null | grep -q "^$banned v"; then
      echo "invariant broken: $crate depends on $banned"
      status=1
    fi
  done
done
for crate in brokk-site brokk-broker brokk-sim brokk-proto brokk-server; do
  if direct "$crate" | grep -qx brokk-planner; then
    echo "invariant broken: $crate depends on brokk-planner directly; scheduling rules belong in brokk-core"
    status=1
  fi
done
for crate in brokk-site brokk-broker brokk-sim; do
  if ! direct "$crate" | grep -qx brokk-core; then
    echo "invariant broken: $crate does not use brokk-core"
    status=1
  fi
done
if ! direct brokk-sim | grep -qx brokk-broker; then
  echo "invariant broken: brokk-sim does not depend on brokk-broker, so no broker decision runs in simulation"
  status=1
fi
if awk '/^pub struct BrokerJob /,/^}/' crates/brokk-broker/src/jobs.rs | grep -nE '^\s*pub(\([a-z]+\))? state:'; then
  echo "invariant broken: BrokerJob's state is public; it changes only through brokk_broker::jobs::apply"
  status=1
fi
if awk '/^pub struct BrokerReservation /,/^}/' crates/brokk-broker/src/reservations.rs | grep -nE '^\s*pub(\([a-z]+\))? state:'; then
  echo "invariant broken: BrokerReservation's state is public; it changes only through BrokerReservation::apply"
  status=1
fi
if grep -rn '\.restored(' crates/brokk-server/src --include='*.rs' | grep -v '^crates/brokk-server/src/db.rs:'; then
  echo "invariant broken: brokk-server sets a job's state outside its database layer; apply a jobs::Change instead"
  status=1
fi
if grep -rniE "SET state = '" crates/brokk-server/src --include='*.rs'; then
  echo "invariant broken: SQL sets a job's state; the state is decided by brokk_broker::jobs"
  status=1
fi
# The broker core decides; its drivers carry out. The service's driver of
# the core and the simulator's grid call no selection, prediction or
# submission rule and apply no state change themselves, and nothing but the
# core counts a job in what the broker knows of a site.
if grep -nE 'jobs::apply|select::|predict::|submit::|info::book|\bbook\(' crates/brokk-server/src/service/broker.rs; then
  echo "invariant broken: the service's driver of the broker core decides something itself; write the rule in brokk_broker::broker"
  status=1
fi
# A broker job's state changes in the core alone: neither the service
# nor the simulator applies a change itself.
if grep -rn 'jobs::apply' crates/brokk-server/src crates/brokk-sim/src --include='*.rs'; then
  echo "invariant broken: a driver changes a broker job's state itself; ask the core (brokk_broker::broker::BrokerCore)"
  status=1
fi
# A workflow's course and a co-allocation's search are the broker's: the
# drivers run the course through its state machine
# (`workflow::course::Course`, not the rules it chains) and a search through
# `coalloc::search` for the core's `CoAllocate`, never the algorithm's steps.
if grep -rnE 'course::(steps|rest)\b|coalloc::(coallocate|place|CoRequest)\b|use brokk_broker::coalloc::\{[^}]*\b(coallocate|place|CoRequest)\b' crates/brokk-server/src crates/brokk-sim/src --include='*.rs'; then
  echo "invariant broken: a driver runs a workflow's course or a co-allocation's steps itself; go through brokk_broker::workflow::course::Course or the core's CoAllocate (coalloc::search)"
  status=1
fi
if grep -rnE 'info::book|\bbook\(' crates/brokk-server/src crates/brokk-sim/src --include='*.rs'; then
  echo "invariant broken: a driver counts a job in the broker's information; only brokk_broker::broker::BrokerCore does"
  status=1
fi
exit $status
