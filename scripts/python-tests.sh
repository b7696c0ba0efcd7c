#!/usr/bin/env bash
# Builds the Python package (pyo3 + maturin) into a fresh virtual
# environment, as a user installs it with pip from the repository, then runs
# its tests (pytest) and executes the example notebook headless (nbconvert).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv="$repo/target/python/venv"
rm -rf "$venv"
python3 -m venv "$venv"
# The extension's Rust build shares a target directory kept out of the clone.
export CARGO_TARGET_DIR="$repo/target/python/cargo"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "$repo/python[test]"
cd "$repo/python"
"$venv/bin/python" -m pytest -q -rP tests
"$venv/bin/jupyter" nbconvert --to notebook --execute examples/kth-sp2.ipynb \
  --output-dir "$repo/target/python" --ExecutePreprocessor.timeout=600
echo "python: package built, tests passed, notebook executed ($repo/target/python/kth-sp2.ipynb)"
