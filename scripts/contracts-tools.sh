#!/usr/bin/env bash
# Installs the tools the contract tests (crates/brokk/tests/contracts.rs)
# check the services with: openapi-spec-validator and openapi-python-client
# in a virtual environment from PyPI, and promtool from Debian's prometheus
# package. Prints the environment's directory, for BROKK_TEST_CONTRACTS;
# fails, saying why on standard error, where one cannot be had.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$PWD/.venv/contracts
if ! [ -x "$venv/bin/openapi-spec-validator" ] || ! [ -x "$venv/bin/openapi-python-client" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    openapi-spec-validator==0.9.0 openapi-python-client==0.29.1 >&2
fi
if ! command -v promtool >/dev/null 2>&1; then
  # Its daemon is not started: only promtool is wanted.
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; }; } >&2
fi
echo "$venv"
