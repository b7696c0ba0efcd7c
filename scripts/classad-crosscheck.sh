#!/usr/bin/env bash
# Cross-checks Brokk's ClassAd evaluator against HTCondor's (PyPI `htcondor`),
# on seeded random expressions. Skipped, with a notice, where Python is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v python3 >/dev/null 2>&1; then
  echo "python3 not found: ClassAd cross-check skipped"
  exit 0
fi
venv=.venv/crosscheck
if ! "$venv/bin/python" -c "import htcondor2" >/dev/null 2>&1 && ! "$venv/bin/python" -c "import classad" >/dev/null 2>&1; then
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet --disable-pip-version-check htcondor; }; then
    echo "could not install htcondor from PyPI: ClassAd cross-check skipped"
    exit 0
  fi
fi
count=${CLASSAD_CASES:-400}
cargo run --quiet --locked -p brokk-jdl --example classad_cases -- "$count" 1 \
  | "$venv/bin/python" scripts/classad_crosscheck.py
