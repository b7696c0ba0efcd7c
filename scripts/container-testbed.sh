#!/usr/bin/env bash
# Rootless podman for the container jobs' tests, from Debian's packages: a
# site image store holding a small image (Debian's static busybox imported
# with `podman import`), and a local account with subordinate ids for jobs
# to run as. Needs root.
#
#   scripts/container-testbed.sh start   # prints the directory with store/
#                                        # (the image store), image (its
#                                        # image's name), account (the
#                                        # account's name), oci_runtime,
#                                        # bundles/ (OCI bundles for Slurm),
#                                        # registry (a registry on this host)
#                                        # and pulled (an image only there)
#   scripts/container-testbed.sh stop    # nothing runs between tests
#
# What it relies on (measured on this machine kind): the packages install in
# about 15 s; crun refuses a host with cgroup v1 and v2 mounted together
# ("cgroups in hybrid mode not supported"), runc runs there, so the testbed
# names runc where the host is hybrid; rootless podman needs newuidmap
# (uidmap) and /etc/subuid and /etc/subgid ranges for the account.
set -euo pipefail
# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
BASE=${BROKK_CONTAINERS_BASE:-/var/tmp/brokk-containers}
ACCOUNT=brokkpod
IMAGE=localhost/brokk-busybox:1
# A registry on this host (Debian's docker-registry, plain HTTP), holding
# the same image under another name, for jobs that pull.
REGISTRY=localhost:15000
PULLED=$REGISTRY/brokk/busybox:1
log() { echo "container-testbed: $*" >&2; }

install_packages() {
  command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 && command -v newuidmap >/dev/null 2>&1 &&
    [ -x /bin/busybox ] && command -v slirp4netns >/dev/null 2>&1 && command -v docker-registry >/dev/null 2>&1 &&
    return 0
  [ "$(id -u)" = 0 ] || { log "installing podman needs root"; return 1; }
  local pkgs="podman runc uidmap slirp4netns busybox-static docker-registry"
  # shellcheck disable=SC2086
  apt_install "$BASE/install.log" $pkgs
}

start() {
  mkdir -p "$BASE"
  install_packages
  id "$ACCOUNT" >/dev/null 2>&1 || useradd -m -s /bin/sh "$ACCOUNT"
  local f
  for f in /etc/subuid /etc/subgid; do
    grep -q "^$ACCOUNT:" "$f" 2>/dev/null || echo "$ACCOUNT:1300000:65536" >>"$f"
  done
  # The image: a static busybox and its commands, nothing else.
  if ! podman --root "$BASE/store" --runroot "$BASE/run" --storage-driver overlay image exists "$IMAGE" 2>/dev/null; then
    local root="$BASE/rootfs"
    # /srv, where a job's sandbox is mounted, as in every FHS image.
    rm -rf "$root" && mkdir -p "$root/bin" "$root/tmp" "$root/srv" && chmod 1777 "$root/tmp"
    cp /bin/busybox "$root/bin/busybox"
    for f in sh cat echo id tr sleep ls wc pwd env; do ln -sf busybox "$root/bin/$f"; done
    tar -C "$root" -cf "$BASE/rootfs.tar" .
    podman --root "$BASE/store" --runroot "$BASE/run" --storage-driver overlay import "$BASE/rootfs.tar" "$IMAGE" \
      >"$BASE/import.log" 2>&1 || { log "podman import failed; see $BASE/import.log"; return 1; }
  fi
  # Jobs' podman, as their accounts, read the store.
  chmod -R a+rX "$BASE/store"
  # The same files as an OCI bundle, for the Slurm testbed's own OCI
  # support (its oci.conf): a read-only root file system with the mount
  # points a rootless runc needs, and runc's rootless configuration, which
  # the site copies for each job with its account's ids.
  local bundle="$BASE/bundles/busybox"
  if [ ! -f "$bundle/config.json" ]; then
    rm -rf "$bundle" && mkdir -p "$bundle/rootfs/bin" "$bundle/rootfs/etc"
    (cd "$bundle/rootfs" && mkdir -p tmp srv proc sys dev)
    cp /bin/busybox "$bundle/rootfs/bin/busybox"
    for f in sh cat echo id tr sleep ls wc pwd env; do ln -sf busybox "$bundle/rootfs/bin/$f"; done
    echo "in the bundle" >"$bundle/rootfs/etc/brokk-bundle"
    (cd "$bundle" && runc spec --rootless)
  fi
  chmod -R a+rX "$BASE/bundles"
  echo "$IMAGE" >"$BASE/image"
  start_registry
  echo "$REGISTRY" >"$BASE/registry"
  echo "$PULLED" >"$BASE/pulled"
  echo "$ACCOUNT" >"$BASE/account"
  if grep -q " - cgroup2 " /proc/self/mountinfo && grep -q " - cgroup " /proc/self/mountinfo; then
    echo runc >"$BASE/oci_runtime"
  else
    : >"$BASE/oci_runtime"
  fi
  echo "$BASE"
}

listening() { ss -ltn 2>/dev/null | grep -q ":$1 "; }

# The registry, started once and left running; every account's podman
# reaches it over plain HTTP (a drop-in of the system's registries.conf).
start_registry() {
  mkdir -p /etc/containers/registries.conf.d
  printf '[[registry]]\nlocation = "%s"\ninsecure = true\n' "$REGISTRY" \
    >/etc/containers/registries.conf.d/50-brokk-testbed.conf
  if ! listening "${REGISTRY##*:}"; then
    mkdir -p "$BASE/registry-data"
    cat >"$BASE/registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $BASE/registry-data
http:
  addr: 127.0.0.1:${REGISTRY##*:}
YML
    setsid docker-registry serve "$BASE/registry.yml" >"$BASE/registry.log" 2>&1 </dev/null &
    echo $! >"$BASE/registry.pid"
    for _ in $(seq 1 50); do listening "${REGISTRY##*:}" && break; sleep 0.2; done
    listening "${REGISTRY##*:}" || { log "the registry is not listening; see $BASE/registry.log"; return 1; }
  fi
  podman --root "$BASE/store" --runroot "$BASE/run" --storage-driver overlay push --tls-verify=false \
    "$IMAGE" "$PULLED" >"$BASE/push.log" 2>&1 || { log "podman push failed; see $BASE/push.log"; return 1; }
}

case "${1:-start}" in
start) start ;;
stop) ;;
*) log "usage: $0 start|stop"; exit 2 ;;
esac
