#!/usr/bin/env bash
# Reads, admits and simulates WfCommons instances that the wfcommons package
# (PyPI) generates with its own recipes: each is validated, admitted against
# a deadline on the example grid (`brokk workflow plan`), refused against an
# impossible one with the earliest finish, and submitted over and over in a
# short admission experiment. Skipped, with a notice, where Python or PyPI
# is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pypi-venv.sh
pypi_venv wfcommons wfcommons wfcommons==1.6 "WfCommons check"
out=target/wfcommons
rm -rf "$out"
cargo build --quiet --locked -p brokk
brokk=target/debug/brokk
for instance in $("$venv/bin/python" scripts/wfcommons_generate.py "$out"); do
  "$brokk" workflow validate "$instance"
  "$brokk" workflow plan "$instance" --grid examples/workflows/grid.toml --deadline 1d --json > "$out/plan.json"
  python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['plan']; assert len(p['tasks']) > 0; print('admitted:', len(p['tasks']), 'tasks, finish', p['finish'])" "$out/plan.json"
  if "$brokk" workflow plan "$instance" --grid examples/workflows/grid.toml --deadline 1m --json > "$out/refused.json"; then
    echo "$instance: admitted against a one-minute deadline" >&2
    exit 1
  fi
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['earliest_finish'], r; print('refused by 1m:', r['reason'], '- earliest finish', r['earliest_finish'])" "$out/refused.json"
  sed -e "0,/^name = /s|^name = .*|name = \"wfcommons\"|" -e "s|^workflows = .*|workflows = 100|" \
      -e "s|^seeds = .*|seeds = [1]|" -e "s|^schedulers = .*|schedulers = [\"heftsync\"]|" \
      -e "s|^inter_arrival = .*|inter_arrival = [10]|" \
      -e "s|^file = .*|file = \"$PWD/$instance\"|" examples/experiments/workflow-montage.toml > "$out/experiment.toml"
  "$brokk" sim workflows "$out/experiment.toml" --out "$out/sim" --json > "$out/sim.json"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); p=r['points'][0]; assert p['submitted'] == 100 and p['admitted'] > 0, p; print('simulated: admitted', p['admitted'], 'of', p['submitted'])" "$out/sim.json"
done
echo "wfcommons-check: every instance was read, admitted and simulated"
