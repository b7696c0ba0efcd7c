#!/usr/bin/env bash
# Two grid data servers for the tests of grid transfers, from Debian's
# packages: an XRootD server (anonymous, as public data is served) and a
# GridFTP server (GSI, trusting the GRAM testbed's CA and host certificate,
# mapping its test user, and the ARC testbed's when one was started first,
# to brokkgram); with the clients a site moves files with (xrdcp,
# globus-url-copy, and gfal2's with its XRootD, GridFTP and SRM plugins).
# Needs root and a started GRAM testbed (scripts/gram-testbed.sh), whose
# credentials it uses.
#
#   scripts/griddata-testbed.sh start   # prints the directory with root
#                                       # (the XRootD URL), gsiftp (the
#                                       # GridFTP URL), xrootd/ and gridftp/
#                                       # (the servers' files)
#   scripts/griddata-testbed.sh stop
#
# What it relies on (measured on this machine kind): the packages install in
# about 20 s and both servers listen within a second; xrdcp reads `-` as
# standard input or output, globus-url-copy file:///dev/stdin and
# file:///dev/stdout; globus-url-copy authenticates with a certificate and
# key (X509_USER_CERT, X509_USER_KEY) as well as with a proxy; gfal-cat and
# gfal-save move a file over standard output and input, gfal-save into an
# existing directory only; the gfal scripts need Debian's own python3 on
# PATH (they find the gfal2 module there).
set -euo pipefail
# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
BASE=${BROKK_GRIDDATA_BASE:-/var/tmp/brokk-griddata}
GRAM=${BROKK_GRAM_BASE:-/var/tmp/brokk-gram}
ARC=${BROKK_ARC_BASE:-/var/tmp/brokk-arc}
XROOTD_PORT=11094
GRIDFTP_PORT=12811
log() { echo "griddata-testbed: $*" >&2; }

listening() { ss -ltn 2>/dev/null | grep -q ":$1 "; }

install_packages() {
  command -v xrootd >/dev/null 2>&1 && command -v xrdcp >/dev/null 2>&1 &&
    command -v globus-gridftp-server >/dev/null 2>&1 && command -v globus-url-copy >/dev/null 2>&1 &&
    command -v gfal-copy >/dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || { log "installing the servers needs root"; return 1; }
  local pkgs="xrootd-server xrootd-client globus-gridftp-server-progs globus-gass-copy-progs
    gfal2-util-scripts python3-gfal2-util gfal2-plugin-xrootd gfal2-plugin-gridftp gfal2-plugin-srm"
  # shellcheck disable=SC2086
  apt_install "$BASE/install.log" $pkgs
}

start() {
  mkdir -p "$BASE"
  [ -f "$GRAM/host" ] || { log "no GRAM testbed at $GRAM: start scripts/gram-testbed.sh first"; return 1; }
  install_packages
  stop
  local host
  host=$(cat "$GRAM/host")
  # XRootD serves $BASE/xrootd as `daemon`, readable and writable by anyone.
  mkdir -p "$BASE/xrootd"
  chown daemon "$BASE/xrootd"
  cat >"$BASE/xrootd.cfg" <<CFG
all.export /
oss.localroot $BASE/xrootd
xrd.port $XROOTD_PORT
CFG
  setsid xrootd -c "$BASE/xrootd.cfg" -R daemon -n brokk >"$BASE/xrootd.log" 2>&1 </dev/null &
  echo $! >"$BASE/xrootd.pid"
  # GridFTP runs as root and switches to the account the grid-mapfile
  # names (brokkgram for the test user), whose directory $BASE/gridftp is.
  mkdir -p "$BASE/gridftp"
  chown brokkgram "$BASE/gridftp"
  # The ARC testbed's user, when there is one, is that account too: A-REX
  # moves its gsiftp files with the proxy Brokk delegates to it.
  if [ -f "$ARC/user.pem" ]; then
    local dn
    dn=$(openssl x509 -in "$ARC/user.pem" -noout -subject -nameopt compat | sed 's/^subject=//')
    grep -qF "\"$dn\"" /etc/grid-security/grid-mapfile || echo "\"$dn\" brokkgram" >>/etc/grid-security/grid-mapfile
  fi
  env -i PATH="$PATH" globus-gridftp-server -S -p "$GRIDFTP_PORT" -d error,warn -l "$BASE/gridftp.log" \
    -pidfile "$BASE/gridftp.pid"
  for _ in $(seq 1 50); do listening "$XROOTD_PORT" && listening "$GRIDFTP_PORT" && break; sleep 0.2; done
  listening "$XROOTD_PORT" || { log "xrootd is not listening; see $BASE/xrootd.log"; return 1; }
  listening "$GRIDFTP_PORT" || { log "the GridFTP server is not listening; see $BASE/gridftp.log"; return 1; }
  echo "root://$host:$XROOTD_PORT/" >"$BASE/root"
  echo "gsiftp://$host:$GRIDFTP_PORT$BASE/gridftp/" >"$BASE/gsiftp"
  echo "$BASE"
}

stop() {
  local f
  for f in "$BASE/xrootd.pid" "$BASE/gridftp.pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  for _ in $(seq 1 25); do listening "$XROOTD_PORT" || listening "$GRIDFTP_PORT" || return 0; sleep 0.2; done
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
*) log "usage: $0 start|stop"; exit 2 ;;
esac
