# Sourced by the testbed scripts: Debian packages installed quietly, the
# package lists refreshed once if the first try fails (a fresh machine's
# lists may be stale), everything apt says kept in a log.
#
#   apt_install LOG PACKAGE...   # 0 when installed; 1 (and a line on stderr) when not
apt_install() {
  local log=$1
  shift
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >"$log" 2>&1 ||
    { apt-get update -q >>"$log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"$log" 2>&1; } ||
    { echo "apt-get failed; see $log" >&2; return 1; }
}
