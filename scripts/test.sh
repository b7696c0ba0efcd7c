#!/usr/bin/env bash
# Brokk's whole test suite, from a fresh machine with only the Rust toolchain.
# Installs what the tests need, then runs format, lint, tests and cross-checks.
set -euo pipefail
cd "$(dirname "$0")/.."
# A one-off build gains nothing from incremental caches, which are most of
# the target directory's size.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# Each stage's title carries the time since the start, so that a slow stage
# shows in CI's log.
stage() { printf '== %s [%dm%02ds]\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }

stage "format and lint"
cargo fmt --all -- --check
cargo fmt --manifest-path python/Cargo.toml -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings

stage "architecture invariants"
scripts/check-invariants.sh

stage "PostgreSQL for the persistence tests"
if url=$(scripts/postgres.sh); then
  export BROKK_TEST_POSTGRES="$url"
  echo "PostgreSQL at $url"
else
  echo "PostgreSQL unavailable: its persistence tests are skipped"
fi

stage "Slurm: two local clusters for the Slurm backend's tests"
BROKK_TEST_SLURM=$(scripts/slurm-testbed.sh start --clusters 2 --nodes 2 --cpus 8)
export BROKK_TEST_SLURM
echo "Slurm clusters under $BROKK_TEST_SLURM"

stage "ARC: two local compute elements (A-REX, test CA; one fork, one on the second Slurm cluster) for the ARC backend's tests"
arc=no
if [ "$(id -u)" = 0 ] && BROKK_TEST_ARC=$(scripts/arc-testbed.sh start --slurm "$BROKK_TEST_SLURM/c2/slurm.conf"); then
  export BROKK_TEST_ARC
  arc=yes
  echo "ARC CEs at $(cat "$BROKK_TEST_ARC/url") and, on Slurm, $(cat "$BROKK_TEST_ARC/slurm-url")"
else
  echo "no ARC CE (it needs root and Debian's packages): the ARC tests stay ignored"
fi

stage "GRAM: a local Globus GRAM5 gatekeeper (fork job manager, its own CA) for the GRAM backend's tests"
gram=no
if [ "$(id -u)" = 0 ] && BROKK_TEST_GRAM=$(scripts/gram-testbed.sh start); then
  export BROKK_TEST_GRAM
  gram=yes
  echo "GRAM gatekeeper at $(cat "$BROKK_TEST_GRAM/contact")"
else
  echo "no GRAM gatekeeper (it needs root and Debian's packages): the GRAM tests stay ignored"
fi

stage "grid data: an XRootD server and a GridFTP server (the GRAM testbed's CA) for the grid transfers' tests"
griddata=no
if [ "$gram" = yes ] && BROKK_TEST_GRIDDATA=$(scripts/griddata-testbed.sh start); then
  export BROKK_TEST_GRIDDATA
  griddata=yes
  echo "XRootD at $(cat "$BROKK_TEST_GRIDDATA/root"), GridFTP at $(cat "$BROKK_TEST_GRIDDATA/gsiftp")"
else
  echo "no grid data servers (they need root, Debian's packages and the GRAM testbed): their tests stay ignored"
fi

stage "containers: rootless podman, an image store with a busybox image, and an account for container jobs"
containers=no
if [ "$(id -u)" = 0 ] && BROKK_TEST_CONTAINERS=$(scripts/container-testbed.sh start); then
  export BROKK_TEST_CONTAINERS
  containers=yes
  echo "container image $(cat "$BROKK_TEST_CONTAINERS/image") in $BROKK_TEST_CONTAINERS/store"
else
  echo "no podman testbed (it needs root and Debian's packages): the container tests stay ignored"
fi

stage "Chromium and ChromeDriver for the dashboard's browser test"
browser=no
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  browser=yes
elif [ "$(id -u)" = 0 ] && { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; }; } \
  >/tmp/brokk-chromium-install.log 2>&1; then
  browser=yes
else
  echo "Chromium unavailable: the browser test stays ignored (see /tmp/brokk-chromium-install.log)"
fi

stage "the contracts' tools: openapi-spec-validator and openapi-python-client (PyPI), promtool (Debian)"
contracts=no
if BROKK_TEST_CONTRACTS=$(scripts/contracts-tools.sh 2>/tmp/brokk-contracts-tools.log); then
  export BROKK_TEST_CONTRACTS
  contracts=yes
else
  echo "the contracts' tools are unavailable: their tests stay ignored (see /tmp/brokk-contracts-tools.log)"
fi

stage "a font for the simulator's PNG and PDF figures (fonts-dejavu-core)"
if ! fc-list 2>/dev/null | grep -q . && [ ! -d /usr/share/fonts/truetype ]; then
  if [ "$(id -u)" = 0 ]; then
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends fonts-dejavu-core ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends fonts-dejavu-core; }; } \
      >/tmp/brokk-fonts-install.log 2>&1 || echo "fonts-dejavu-core could not be installed (see /tmp/brokk-fonts-install.log)"
  else
    echo "no font and not root: the figure tests will say which package to install"
  fi
fi

stage "tests"
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --locked --workspace --no-fail-fast
else
  cargo test --locked --workspace --no-fail-fast
fi
cargo test --locked --workspace --doc

stage "tests that need the services and tools installed above: Slurm, chaos, ARC, GRAM, PostgreSQL, users apart (as root), the browser, the contracts"
# A plain `cargo test` shows these as ignored; here they run.
ignored="binary(slurm) | binary(chaos)"
tests=(--test slurm --test chaos)
if [ "$browser" = yes ]; then
  ignored="$ignored | binary(dashboard)"
  tests+=(--test dashboard)
fi
if [ -n "${BROKK_TEST_POSTGRES:-}" ]; then
  ignored="$ignored | test(postgresql)"
else
  echo "no PostgreSQL: its crash test stays ignored"
fi
if [ "$arc" = yes ]; then
  if [ "$griddata" = yes ]; then
    ignored="$ignored | binary(arc) | binary(arc_slurm)"
  else
    # Its tests of root:// and gsiftp:// through A-REX need the servers.
    ignored="$ignored | (binary(arc) & !test(/ces_own_data_staging|delegated_proxy/)) | binary(arc_slurm)"
  fi
  tests+=(--test arc --test arc_slurm)
fi
if [ "$gram" = yes ]; then
  ignored="$ignored | binary(gram)"
  tests+=(--test gram)
fi
if [ "$griddata" = yes ]; then
  ignored="$ignored | binary(griddata)"
  tests+=(--test griddata)
fi
if [ "$containers" = yes ]; then
  ignored="$ignored | binary(containers)"
  tests+=(--test containers)
fi
if [ "$contracts" = yes ]; then
  ignored="$ignored | binary(contracts)"
  tests+=(--test contracts)
fi
if [ "$(id -u)" = 0 ]; then
  ignored="$ignored | binary(accounts)"
  tests+=(--test accounts)
else
  echo "not root: the accounts tests stay ignored (they create Unix accounts)"
fi
if command -v cargo-nextest >/dev/null 2>&1; then
  # --workspace, as the run above, so that features unify the same way and
  # nothing is compiled a second time.
  cargo nextest run --locked --workspace --run-ignored ignored-only --no-fail-fast \
    -E "package(brokk) & ($ignored)"
else
  cargo test --locked -p brokk "${tests[@]}" -- --ignored --test-threads=1
  if [ -n "${BROKK_TEST_POSTGRES:-}" ]; then cargo test --locked -p brokk --test service --test standby -- --ignored; fi
fi

stage "load test: a hostile user and an ordinary one at once against one broker"
# The ordinary user's status and submit p99 alone and under attack, and the
# broker's memory before, during and after; fails if the ordinary user is
# refused or left unanswered, or an attack gets past a limit.
# The binary the tests built (a build of `-p brokk` alone unifies features
# differently and compiles it all again, two minutes of CI).
cargo build --locked -q --workspace --bins
target/debug/brokk bench attack --seconds 15

stage "README's tour, command by command, in a clean clone"
scripts/readme-tour.sh

stage "ClassAd cross-check against HTCondor's own evaluator"
scripts/classad-crosscheck.sh

stage "simulator cross-check against AccaSim"
scripts/accasim-crosscheck.sh

stage "WfCommons instances from the wfcommons package's recipes: read, admitted and simulated"
scripts/wfcommons-check.sh

stage "the Python package: built with pip into a fresh virtual environment, pytest, the example notebook"
# Its lock file is tracked: a change of the workspace's crates must update
# it here, not in a user's `pip install ./python`.
if ! cargo metadata --locked --format-version 1 --manifest-path python/Cargo.toml > /dev/null; then
  echo "python/Cargo.lock is out of date: run cargo update --workspace --manifest-path python/Cargo.toml and commit it"
  exit 1
fi
if command -v python3 >/dev/null 2>&1; then
  scripts/python-tests.sh
else
  echo "python3 not found: the Python package's tests are skipped"
fi

stage "all tests passed"
