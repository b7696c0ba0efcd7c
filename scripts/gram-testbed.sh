#!/usr/bin/env bash
# A local Globus GRAM5 gatekeeper (Grid Community Toolkit, fork job manager)
# for the GRAM tests, from Debian's packages, with a CA of its own. Needs root.
#
#   scripts/gram-testbed.sh start   # install, make credentials, start; prints
#                                   # the directory with user.pem, user.key
#                                   # (mapped to brokkgram), user2.pem,
#                                   # user2.key (mapped to brokkgram2), ca/
#                                   # and contact (the gatekeeper's resource
#                                   # contact)
#   scripts/gram-testbed.sh stop
#
# What it relies on (measured on this machine kind): the packages install in
# about 30 s; the gatekeeper starts in under a second and listens on 2119;
# GSI checks the host certificate's name against the contacted host
# (STRICT_RFC2818 in /etc/grid-security/gsi.conf), so the host certificate
# carries the host name as a DNS name; a CA is trusted through its
# certificate and signing policy in /etc/grid-security/certificates under
# its subject hash.
set -euo pipefail
# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
BASE=${BROKK_GRAM_BASE:-/var/tmp/brokk-gram}
USER_NAME=brokkgram
USER2_NAME=brokkgram2
CERTS=/etc/grid-security/certificates
log() { echo "gram-testbed: $*" >&2; }

listening() { ss -ltn 2>/dev/null | grep -q ":$1 "; }

install_packages() {
  command -v globusrun >/dev/null 2>&1 && [ -x /etc/init.d/globus-gatekeeper ] && return 0
  [ "$(id -u)" = 0 ] || { log "installing Globus needs root"; return 1; }
  local pkgs="globus-gatekeeper globus-gram-job-manager globus-gram-job-manager-fork-setup-poll
    globus-gram-client-tools globus-proxy-utils globus-gsi-cert-utils-progs"
  # shellcheck disable=SC2086
  apt_install "$BASE/install.log" $pkgs
}

# A CA of the testbed's own, trusted by GSI, signing the host's certificate
# and the test user's.
credentials() {
  local host ca="$BASE/ca-private"
  host=$(hostname -f 2>/dev/null || hostname)
  mkdir -p "$ca" "$CERTS"
  if [ ! -f "$ca/ca.pem" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/O=Brokk/CN=Brokk GRAM test CA" \
      -addext basicConstraints=critical,CA:true -addext keyUsage=critical,keyCertSign,cRLSign \
      -keyout "$ca/ca.key" -out "$ca/ca.pem" 2>/dev/null
  fi
  local hash
  for hash in $(openssl x509 -in "$ca/ca.pem" -noout -subject_hash) \
    $(openssl x509 -in "$ca/ca.pem" -noout -subject_hash_old); do
    install -m 0644 "$ca/ca.pem" "$CERTS/$hash.0"
    cat >"$CERTS/$hash.signing_policy" <<'EOF'
access_id_CA X509 '/O=Brokk/CN=Brokk GRAM test CA'
pos_rights globus CA:sign
cond_subjects globus '"/O=Brokk/*"'
EOF
  done
  sign() { # name subject extensions
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$ca/$1.key" -out "$ca/$1.csr" 2>/dev/null
    openssl x509 -req -in "$ca/$1.csr" -CA "$ca/ca.pem" -CAkey "$ca/ca.key" -CAcreateserial -days 365 \
      -extfile <(printf '%s\n' "$3") -out "$ca/$1.pem" 2>/dev/null
  }
  if [ ! -f "$ca/host.pem" ]; then
    sign host "/O=Brokk/CN=host\/$host" "subjectAltName=DNS:$host
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth"
  fi
  if [ ! -f "$ca/user.pem" ]; then
    sign user "/O=Brokk/CN=$USER_NAME" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  fi
  # A second grid user, mapped to an account of its own.
  if [ ! -f "$ca/user2.pem" ]; then
    sign user2 "/O=Brokk/CN=$USER2_NAME" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  fi
  install -m 0644 "$ca/host.pem" /etc/grid-security/hostcert.pem
  install -m 0400 "$ca/host.key" /etc/grid-security/hostkey.pem
  local u
  for u in "$USER_NAME" "$USER2_NAME"; do
    id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"
    chmod 0700 "$(getent passwd "$u" | cut -d: -f6)"
  done
  {
    echo "\"/O=Brokk/CN=$USER_NAME\" $USER_NAME"
    echo "\"/O=Brokk/CN=$USER2_NAME\" $USER2_NAME"
  } >/etc/grid-security/grid-mapfile
  install -m 0644 "$ca/user.pem" "$BASE/user.pem"
  install -m 0600 "$ca/user.key" "$BASE/user.key"
  install -m 0644 "$ca/user2.pem" "$BASE/user2.pem"
  install -m 0600 "$ca/user2.key" "$BASE/user2.key"
  rm -rf "$BASE/ca" && mkdir -p "$BASE/ca" && cp -a "$CERTS/." "$BASE/ca/"
  echo "$host" >"$BASE/host"
}

start() {
  mkdir -p "$BASE"
  install_packages
  credentials
  globus-gatekeeper-admin -e jobmanager-fork-poll -n jobmanager-fork >/dev/null 2>&1 || true
  globus-gatekeeper-admin -e jobmanager-fork-poll -n jobmanager >/dev/null 2>&1 || true
  # A clean environment: the gatekeeper takes X509_USER_* from it as its
  # own credential.
  env -i PATH="$PATH" /etc/init.d/globus-gatekeeper stop >/dev/null 2>&1 || true
  env -i PATH="$PATH" /etc/init.d/globus-gatekeeper start >"$BASE/start.log" 2>&1
  for _ in $(seq 1 50); do listening 2119 && break; sleep 0.2; done
  listening 2119 || { log "the gatekeeper is not listening on 2119; see $BASE/start.log"; return 1; }
  echo "$(cat "$BASE/host"):2119/jobmanager-fork" >"$BASE/contact"
  echo "$BASE"
}

stop() {
  env -i PATH="$PATH" /etc/init.d/globus-gatekeeper stop >/dev/null 2>&1 || true
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
*) log "usage: $0 start|stop"; exit 2 ;;
esac
