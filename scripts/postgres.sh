#!/usr/bin/env bash
# Installs (apt) and starts a local PostgreSQL for the broker service's
# persistence tests, with fresh databases `brokk_test` and `brokk_test_standby`
# owned by `brokk`.
# Prints the URL on success; fails (exit 1) with a message where it cannot.
set -euo pipefail
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then echo "not root: cannot install PostgreSQL" >&2; exit 1; fi
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$ver main$" || pg_createcluster "$ver" main >&2
pg_ctlcluster "$ver" main start >&2 2>/dev/null || pg_ctlcluster "$ver" main status >/dev/null
as_pg() { su postgres -c "$1"; }
as_pg "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname = 'brokk'\"" | grep -q 1 \
  || as_pg "psql -qc \"CREATE USER brokk WITH PASSWORD 'brokk'\"" >&2
# One database per test that needs one: they run at once.
for db in brokk_test brokk_test_standby; do
  as_pg "dropdb --if-exists $db" >&2
  as_pg "createdb -O brokk $db" >&2
done
echo "postgres://brokk:brokk@127.0.0.1/brokk_test"
