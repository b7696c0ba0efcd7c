#!/usr/bin/env bash
# A local NorduGrid ARC compute element (A-REX with the REST interface, fork
# LRMS, ARC's test CA) for the ARC tests, from Debian's packages. Needs root.
#
#   scripts/arc-testbed.sh start   # install, configure, start; prints the
#                                  # directory with user.pem, user.key, ca/, url
#   scripts/arc-testbed.sh stop
#
# What it relies on (measured on this machine kind): the packages install in
# about 20 s; the package's postinst makes the test CA and the host
# certificate; without systemd the Debian SysV scripts start A-REX; the REST
# front end must listen before the first information-provider run, or the
# endpoint is published as critical for a minute; A-REX picks job state
# changes up at its own cycles, so a job's state can lag by up to a minute.
set -euo pipefail
BASE=${BROKK_ARC_BASE:-/var/tmp/brokk-arc}
USER_NAME=brokkgrid
log() { echo "arc-testbed: $*" >&2; }

listening() { ss -ltn 2>/dev/null | grep -q ":$1 "; }

install_packages() {
  command -v arcctl >/dev/null 2>&1 && [ -x /etc/init.d/arc-arex-ws ] && return 0
  [ "$(id -u)" = 0 ] || { log "installing ARC needs root"; return 1; }
  local pkgs="nordugrid-arc-arex nordugrid-arc-arcctl nordugrid-arc-arcctl-service
    nordugrid-arc-plugins-arcrest nordugrid-arc-plugins-needed nordugrid-arc-client"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $pkgs >"$BASE/install.log" 2>&1 ||
    { apt-get update -q >>"$BASE/install.log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $pkgs >>"$BASE/install.log" 2>&1; } ||
    { log "apt-get failed; see $BASE/install.log"; return 1; }
  [ -f /etc/grid-security/testCA-hostcert.pem ] || { arcctl test-ca init && arcctl test-ca hostcert; }
}

configure() {
  cat >/etc/arc.conf <<'EOF'
# written by Brokk's scripts/arc-testbed.sh: a fork CE for the ARC tests
[common]
x509_host_key = /etc/grid-security/testCA-hostkey.pem
x509_host_cert = /etc/grid-security/testCA-hostcert.pem

[authgroup:zero]
file = /etc/grid-security/testCA.allowed-subjects

[mapping]
map_to_user = zero nobody:nogroup

[lrms]
lrms = fork

[arex]

[arex/ws]

[arex/ws/jobs]
allowaccess = zero

[infosys]

[infosys/glue2]

[infosys/cluster]

[queue:fork]
EOF
}

credentials() {
  # A test-CA user certificate; its subject is allowed by the CE.
  id "$USER_NAME" >/dev/null 2>&1 || useradd -m -s /bin/bash "$USER_NAME"
  local home
  home=$(getent passwd "$USER_NAME" | cut -d: -f6)
  if [ ! -f "$home/.globus/usercert.pem" ]; then
    (cd /tmp && arcctl test-ca usercert -i "$USER_NAME" >"$BASE/usercert.log" 2>&1) ||
      { log "arcctl test-ca usercert failed; see $BASE/usercert.log"; return 1; }
  fi
  install -m 0644 "$home/.globus/usercert.pem" "$BASE/user.pem"
  install -m 0600 "$home/.globus/userkey.pem" "$BASE/user.key"
  # The CA certificates the CE's host certificate is checked against (not
  # the test CA's key beside them).
  rm -rf "$BASE/ca" && mkdir -p "$BASE/ca"
  find /etc/grid-security/certificates -maxdepth 1 -name '*.pem' ! -name '*-key.pem' -exec cp {} "$BASE/ca/" \;
}

start() {
  mkdir -p "$BASE"
  install_packages
  configure
  credentials
  # Both services, REST front end first listening: see the header.
  /etc/init.d/arc-arex-ws stop >/dev/null 2>&1 || true
  /etc/init.d/arc-arex stop >/dev/null 2>&1 || true
  /etc/init.d/arc-arex start >"$BASE/start.log" 2>&1
  /etc/init.d/arc-arex-ws start >>"$BASE/start.log" 2>&1
  for _ in $(seq 1 100); do listening 443 && break; sleep 0.2; done
  listening 443 || { log "A-REX's REST front end is not listening on 443; see $BASE/start.log"; return 1; }
  echo "https://$(hostname -f 2>/dev/null || hostname):443/arex" >"$BASE/url"
  echo "$BASE"
}

stop() {
  /etc/init.d/arc-arex-ws stop >/dev/null 2>&1 || true
  /etc/init.d/arc-arex stop >/dev/null 2>&1 || true
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
*) log "usage: $0 start|stop"; exit 2 ;;
esac
