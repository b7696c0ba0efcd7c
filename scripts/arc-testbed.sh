#!/usr/bin/env bash
# A local NorduGrid ARC compute element (A-REX with the REST interface, fork
# LRMS, ARC's test CA) for the ARC tests, from Debian's packages. Needs root.
#
#   scripts/arc-testbed.sh start [--slurm CONF]
#       install, configure, start; prints the directory with user.pem,
#       user.key (mapped to nobody), user2.pem, user2.key (a second user,
#       mapped to the account brokkgrid2), ca/, url and ldap (its GLUE 2 LDAP information system, on
#       port 2135, which holds data about two minutes after the start). With
#       --slurm, a second CE (REST on :8443) runs
#       its jobs on the Slurm cluster of that slurm.conf, with the runtime
#       environment ENV/SLURM-RESERVATION that binds a job to a Slurm
#       reservation; its URL is in slurm-url.
#   scripts/arc-testbed.sh stop
#
# What it relies on (measured on this machine kind): the packages install in
# about 20 s; the package's postinst makes the test CA and the host
# certificate; without systemd the Debian SysV scripts start A-REX; the REST
# front end must listen before the first information-provider run, or the
# endpoint is published as critical for a minute; a job's state on the REST
# interface changes at the information provider's runs, here every 10 s
# (see info_period).
set -euo pipefail
# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
BASE=${BROKK_ARC_BASE:-/var/tmp/brokk-arc}
USER_NAME=brokkgrid
USER2_NAME=brokkgrid2
SLURM_CE=/etc/arc-brokk-slurm.conf
SLURM_CE_DIR=/var/spool/arc-brokk-slurm
log() { echo "arc-testbed: $*" >&2; }

listening() { ss -ltn 2>/dev/null | grep -q ":$1 "; }

install_packages() {
  command -v arcctl >/dev/null 2>&1 && [ -x /etc/init.d/arc-arex-ws ] && [ -x /etc/init.d/arc-infosys-ldap ] &&
    dpkg -s nordugrid-arc-plugins-xrootd nordugrid-arc-plugins-gridftp >/dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || { log "installing ARC needs root"; return 1; }
  local pkgs="nordugrid-arc-arex nordugrid-arc-arcctl nordugrid-arc-arcctl-service
    nordugrid-arc-plugins-arcrest nordugrid-arc-plugins-needed nordugrid-arc-client
    nordugrid-arc-infosys-ldap ldap-utils nordugrid-arc-plugins-xrootd nordugrid-arc-plugins-gridftp"
  # shellcheck disable=SC2086
  apt_install "$BASE/install.log" $pkgs
  [ -f /etc/grid-security/testCA-hostcert.pem ] || { arcctl test-ca init && arcctl test-ca hostcert; }
}

# What both CEs share: ARC's test CA for the host, the second user's
# subject mapped to an account of its own, and every other subject the test
# CA made mapped to nobody.
common_blocks() {
  cat <<'EOF'
[common]
x509_host_key = /etc/grid-security/testCA-hostkey.pem
x509_host_cert = /etc/grid-security/testCA-hostcert.pem

[authgroup:zero]
file = /etc/grid-security/testCA.allowed-subjects
EOF
  if [ -f "$BASE/user2.subject" ]; then
    printf '\n[authgroup:second]\nsubject = %s\n' "$(cat "$BASE/user2.subject")"
    printf '\n[mapping]\nmap_to_user = second %s:%s\nmap_to_user = zero nobody:nogroup\n' "$USER2_NAME" "$USER2_NAME"
  else
    printf '\n[mapping]\nmap_to_user = zero nobody:nogroup\n'
  fi
}

configure() {
  {
    echo "# written by Brokk's scripts/arc-testbed.sh: a fork CE for the ARC tests"
    common_blocks
    cat <<'EOF'

[lrms]
lrms = fork

[arex]

[arex/ws]

[arex/ws/jobs]
allowaccess = zero

[infosys]

[infosys/ldap]
port = 2135
# Debian 12's slapd has no back_hdb, ARC's default
bdii_database = mdb

[infosys/glue2]

[infosys/glue2/ldap]

[infosys/cluster]

[queue:fork]
EOF
  } >/etc/arc.conf
}

# A job's state on the REST interface changes only when A-REX's
# information provider runs, once a minute by default, so that every ARC
# test waited most of a minute for each state it follows (about 60 s per
# test, 10 min in all). The period is a setting of A-REX's service
# configuration (`InfoproviderWakeupPeriod`, in tenths of a second: the
# default 600 gave one run a minute here), which the SysV start script
# writes without it: it is patched to write it. A run takes about 2 s; at
# 10 s the ARC tests take 20-25 s each. Only the core A-REX's collector
# feeds the states: the same setting in the REST front end's start script
# made a second collector that ran every few seconds.
INFO_PERIOD=100
info_period() {
  local f=/usr/share/arc/arc-arex-start
  grep -q "InfoproviderWakeupPeriod" "$f" && return 0
  sed -i "s|^\(\s*\)<arex:gmconfig>\\\$ARC_RUNTIME_CONFIG</arex:gmconfig>|&\n\1<arex:InfoproviderWakeupPeriod>$INFO_PERIOD</arex:InfoproviderWakeupPeriod>|" "$f"
}

# ARC's LDAP information system (slapd fed by bdii-update) with the two
# fixes Debian 12 needs, measured in GRID-MIDDLEWARE.md: slapd 2.5's mdb
# back end refuses the hdb-only `cachesize` that ARC's slapd configuration
# writes, and bdii 6.0.0 calls the OpenLDAP clients with -h/-p, which 2.5
# removed (so nothing would reach o=glue).
start_ldap() {
  sed -i -E 's/^(\s*)cachesize(\s+[0-9]+)$/\1# cachesize\2 (removed for back_mdb)/' /usr/share/arc/create-slapd-config
  sed -i -e 's/ -h %s -p %s/ -H ldap:\/\/%s:%s/g' -e 's/ -x -h %s -b %s/ -x -H ldap:\/\/%s -b %s/' /usr/sbin/bdii-update
  /etc/init.d/arc-infosys-ldap stop >/dev/null 2>&1 || true
  # A pid file whose process died (a machine stopped uncleanly) makes the
  # init script refuse to start: only live ones are kept.
  local pidfile alive=no
  for pidfile in /run/arc/bdii/bdii-update.pid /run/arc/bdii/db/slapd.pid; do
    if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then rm -f "$pidfile"; fi
    [ -f "$pidfile" ] && alive=yes
  done
  # Its lock files, left when its processes died without a stop, make the
  # start ask for a status that fails ("no pid file") and give up (seen
  # here, after the machine's previous run).
  if [ "$alive" = no ]; then
    rm -f /run/lock/subsys/arc-infosys-ldap-slapd /run/lock/subsys/arc-infosys-ldap-bdii \
      /run/lock/arc-infosys-ldap-slapd /run/lock/arc-infosys-ldap-bdii
  fi
  # After such a stop the first start may fail while slapd's old database
  # is released (seen here): once more before giving up.
  if ! /etc/init.d/arc-infosys-ldap start >>"$BASE/start.log" 2>&1; then
    sleep 2
    /etc/init.d/arc-infosys-ldap start >>"$BASE/start.log" 2>&1 ||
      { log "ARC's LDAP information system did not start; see $BASE/start.log"; return 1; }
  fi
  for _ in $(seq 1 100); do listening 2135 && break; sleep 0.2; done
  listening 2135 || { log "ARC's LDAP information system is not listening on 2135; see $BASE/start.log"; return 1; }
  echo "ldap://127.0.0.1:2135" >"$BASE/ldap"
}

# The second CE, on Slurm (the set-up measured in GRID-MIDDLEWARE.md): its
# own control, session and temporary directories (A-REX's Slurm scanner
# takes a lock in its TMPDIR, and two CEs sharing /tmp block each other),
# and the runtime environment that puts `#SBATCH --reservation=NAME` into the
# batch script A-REX writes. Mapped jobs run as nobody, whom Brokk's
# reservations on that cluster admit.
configure_slurm_ce() {
  local conf=$1
  mkdir -p "$SLURM_CE_DIR"/{jobstatus,sessiondir,log} "$BASE/rte/ENV"
  install -d -m 1777 "$SLURM_CE_DIR/tmp"
  cat >"$BASE/rte/ENV/SLURM-RESERVATION" <<'EOF'
# description: runs the job in the Slurm advance reservation its argument names
if [ "x$1" = "x0" ] && [ -n "$2" ]; then
  i=0
  while eval "[ -n \"\${joboption_nodeproperty_$i+x}\" ]"; do i=$((i + 1)); done
  eval "joboption_nodeproperty_$i=\"--reservation=$2\""
fi
true
EOF
  {
    echo "# written by Brokk's scripts/arc-testbed.sh: a CE on the Slurm cluster of $conf"
    common_blocks
    cat <<EOF

[lrms]
lrms = slurm
slurm_bin_path = /usr/bin
slurm_use_sacct = no
slurm_wakeupperiod = 5

[arex]
controldir = $SLURM_CE_DIR/jobstatus
sessiondir = $SLURM_CE_DIR/sessiondir
pidfile = /run/arched-arex-brokk-slurm.pid
logfile = $SLURM_CE_DIR/log/arex.log
helperlog = $SLURM_CE_DIR/log/job.helper.errors
runtimedir = $BASE/rte
tmpdir = $SLURM_CE_DIR/tmp

[arex/ws]
wsurl = https://$(hostname -f 2>/dev/null || hostname):8443/arex
pidfile = /run/arched-arex-ws-brokk-slurm.pid
logfile = $SLURM_CE_DIR/log/ws-interface.log

[arex/ws/jobs]
allowaccess = zero

[infosys]
logfile = $SLURM_CE_DIR/log/infoprovider.log

[infosys/glue2]

[infosys/cluster]

[queue:batch]
EOF
  } >"$SLURM_CE"
  # The SysV scripts source these for both CEs: SLURM_CONF by the config.
  for f in /etc/default/arc-arex /etc/default/arc-arex-ws; do
    cat >"$f" <<EOF
case "\${ARC_CONFIG:-/etc/arc.conf}" in
  $SLURM_CE) export SLURM_CONF=$conf ;;
esac
EOF
  done
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
  # The second user, mapped to an account of its own (see common_blocks).
  id "$USER2_NAME" >/dev/null 2>&1 || useradd -m -s /bin/bash "$USER2_NAME"
  home=$(getent passwd "$USER2_NAME" | cut -d: -f6)
  if [ ! -f "$home/.globus/usercert.pem" ]; then
    (cd /tmp && arcctl test-ca usercert -i "$USER2_NAME" >>"$BASE/usercert.log" 2>&1) ||
      { log "arcctl test-ca usercert failed; see $BASE/usercert.log"; return 1; }
  fi
  install -m 0644 "$home/.globus/usercert.pem" "$BASE/user2.pem"
  install -m 0600 "$home/.globus/userkey.pem" "$BASE/user2.key"
  openssl x509 -in "$BASE/user2.pem" -noout -subject -nameopt compat | sed 's/^subject=//' >"$BASE/user2.subject"
  # The CA certificates the CE's host certificate is checked against (not
  # the test CA's key beside them).
  rm -rf "$BASE/ca" && mkdir -p "$BASE/ca"
  find /etc/grid-security/certificates -maxdepth 1 -name '*.pem' ! -name '*-key.pem' -exec cp {} "$BASE/ca/" \;
}

start() {
  local slurm_conf=""
  while [ $# -gt 0 ]; do
    case "$1" in
    --slurm) slurm_conf=$(realpath "$2"); shift 2 ;;
    *) log "unknown argument $1"; return 2 ;;
    esac
  done
  mkdir -p "$BASE"
  install_packages
  configure
  credentials
  # Again, now that the second user's subject is known.
  configure
  info_period
  rm -f "$BASE/slurm-url"
  if [ -n "$slurm_conf" ]; then
    configure_slurm_ce "$slurm_conf"
    ARC_CONFIG=$SLURM_CE /etc/init.d/arc-arex-ws stop >/dev/null 2>&1 || true
    ARC_CONFIG=$SLURM_CE /etc/init.d/arc-arex stop >/dev/null 2>&1 || true
    ARC_CONFIG=$SLURM_CE /etc/init.d/arc-arex start >>"$BASE/start.log" 2>&1
    ARC_CONFIG=$SLURM_CE /etc/init.d/arc-arex-ws start >>"$BASE/start.log" 2>&1
    arcctl -c "$SLURM_CE" rte enable ENV/SLURM-RESERVATION >>"$BASE/start.log" 2>&1 ||
      { log "enabling ENV/SLURM-RESERVATION failed; see $BASE/start.log"; return 1; }
    for _ in $(seq 1 100); do listening 8443 && break; sleep 0.2; done
    listening 8443 || { log "the Slurm CE's REST front end is not listening on 8443; see $BASE/start.log"; return 1; }
    echo "https://$(hostname -f 2>/dev/null || hostname):8443/arex" >"$BASE/slurm-url"
  fi
  # Both services, REST front end first listening: see the header.
  /etc/init.d/arc-arex-ws stop >/dev/null 2>&1 || true
  /etc/init.d/arc-arex stop >/dev/null 2>&1 || true
  /etc/init.d/arc-arex start >"$BASE/start.log" 2>&1
  /etc/init.d/arc-arex-ws start >>"$BASE/start.log" 2>&1
  for _ in $(seq 1 100); do listening 443 && break; sleep 0.2; done
  listening 443 || { log "A-REX's REST front end is not listening on 443; see $BASE/start.log"; return 1; }
  echo "https://$(hostname -f 2>/dev/null || hostname):443/arex" >"$BASE/url"
  rm -f "$BASE/ldap"
  start_ldap
  echo "$BASE"
}

stop() {
  /etc/init.d/arc-infosys-ldap stop >/dev/null 2>&1 || true
  /etc/init.d/arc-arex-ws stop >/dev/null 2>&1 || true
  /etc/init.d/arc-arex stop >/dev/null 2>&1 || true
  if [ -f "$SLURM_CE" ]; then
    ARC_CONFIG=$SLURM_CE /etc/init.d/arc-arex-ws stop >/dev/null 2>&1 || true
    ARC_CONFIG=$SLURM_CE /etc/init.d/arc-arex stop >/dev/null 2>&1 || true
  fi
  # An information-provider run outlives A-REX's stop when it waits to
  # hand its LDIF to an information system that is gone; left, it holds
  # the next start's hand-over.
  pkill -9 -f /usr/share/arc/CEinfo.pl 2>/dev/null || true
}

case "${1:-start}" in
start) shift; start "$@" ;;
stop) stop ;;
*) log "usage: $0 start|stop"; exit 2 ;;
esac
