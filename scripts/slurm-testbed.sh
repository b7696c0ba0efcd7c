#!/usr/bin/env bash
# Real local Slurm clusters for Brokk's tests and benchmarks.
#
#   scripts/slurm-testbed.sh start [--clusters N] [--nodes N] [--cpus N] [--dir DIR] [--port P]
#                                  [--federation NAME]
#   scripts/slurm-testbed.sh stop  [--dir DIR]
#   scripts/slurm-testbed.sh status [--dir DIR]
#
# `start` installs Slurm and munge with apt-get when they are missing, starts
# munged once, and for each cluster c1..cN writes DIR/cN/slurm.conf and starts
# one slurmctld and one slurmd per node (nodes fake their size with
# SlurmdParameters=config_overrides). It is idempotent: daemons whose pid file
# names a live process are left alone, and nodes an earlier crash left drained
# are resumed. The last line printed is DIR, under which
# each cluster's configuration is DIR/cN/slurm.conf. `stop` kills exactly the
# daemons named by the pid files under DIR.
#
# With `--federation NAME` the clusters keep accounting in one slurmdbd
# (MariaDB and slurmdbd from Debian's packages, installed when missing, the
# database started by its init script, slurmdbd on port P+90) and are joined
# into the Slurm federation NAME: `sbatch -M` reaches every cluster, and a
# job submitted to one gets a sibling on each (the first to start wins).
# What Brokk's delegation between brokers is measured against.
set -euo pipefail

cmd=${1:-start}
shift || true
clusters=2 nodes=2 cpus=8 port=17100 federation=
dir=${BROKK_SLURM_DIR:-/tmp/brokk-slurm}
while [ $# -gt 0 ]; do
  case "$1" in
    --clusters) clusters=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --federation) federation=$2; shift 2 ;;
    *) echo "slurm-testbed: unknown argument $1" >&2; exit 2 ;;
  esac
done

log() { echo "slurm-testbed: $*" >&2; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_all() {
  [ -d "$dir" ] || return 0
  for pidfile in "$dir"/c*/run/*.pid "$dir"/slurmdbd.pid; do
    [ -f "$pidfile" ] || continue
    if alive "$pidfile"; then
      kill "$(cat "$pidfile")" 2>/dev/null || true
    fi
  done
  for pidfile in "$dir"/c*/run/*.pid "$dir"/slurmdbd.pid; do
    [ -f "$pidfile" ] || continue
    for _ in $(seq 50); do alive "$pidfile" || break; sleep 0.1; done
    alive "$pidfile" && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
    && command -v sbatch >/dev/null && command -v munged >/dev/null; then
    return 0
  fi
  log "installing slurm-wlm and munge with apt-get"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq slurm-wlm slurm-client munge >&2
}

start_munge() {
  if [ ! -f /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
  fi
  chown munge:munge /etc/munge/munge.key 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
  if munge -n >/dev/null 2>&1 </dev/null; then
    return 0
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  if id munge >/dev/null 2>&1; then
    su -s /bin/sh munge -c "/usr/sbin/munged" 2>/dev/null || /usr/sbin/munged --force
  else
    /usr/sbin/munged --force
  fi
  for _ in $(seq 50); do munge -n >/dev/null 2>&1 </dev/null && return 0; sleep 0.1; done
  log "munged did not start"; exit 1
}

write_conf() {
  local c=$1 cdir=$2 ctld=$3
  local host; host=$(hostname -s)
  mkdir -p "$cdir"/{state,spool,run,log}
  {
    echo "# Written by scripts/slurm-testbed.sh"
    echo "ClusterName=brokk$c"
    echo "SlurmctldHost=$host(127.0.0.1)"
    echo "SlurmctldPort=$ctld"
    echo "SlurmdPort=$((ctld + 1))"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "StateSaveLocation=$cdir/state"
    echo "SlurmdSpoolDir=$cdir/spool/%n"
    echo "SlurmctldPidFile=$cdir/run/slurmctld.pid"
    echo "SlurmdPidFile=$cdir/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$cdir/log/slurmctld.log"
    echo "SlurmdLogFile=$cdir/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "SchedulerType=sched/backfill"
    # Reservations start, and queued jobs move, within a second.
    echo "SchedulerParameters=sched_interval=1,bf_interval=1,defer_batch=0"
    if [ -n "$federation" ]; then
      echo "AccountingStorageType=accounting_storage/slurmdbd"
      echo "AccountingStorageHost=127.0.0.1"
      echo "AccountingStoragePort=$((port + 90))"
      # Federated job ids carry their cluster's id; the controllers talk.
      echo "FederationParameters=fed_display"
    else
      echo "AccountingStorageType=accounting_storage/none"
    fi
    echo "JobCompType=jobcomp/filetxt"
    echo "JobCompLoc=$cdir/log/jobcomp.log"
    echo "SlurmdParameters=config_overrides"
    echo "ReturnToService=2"
    echo "MinJobAge=300"
    echo "MaxJobCount=100000"
    echo "SlurmctldTimeout=30"
    echo "SlurmdTimeout=60"
    echo "MpiDefault=none"
    echo "LaunchParameters=enable_nss_slurm"
    local list=""
    for n in $(seq "$nodes"); do
      local name="c${c}n$n"
      echo "NodeName=$name NodeAddr=127.0.0.1 NodeHostname=$host Port=$((ctld + 1 + n)) CPUs=$cpus RealMemory=4000 State=UNKNOWN"
      list="$list${list:+,}$name"
    done
    echo "PartitionName=batch Nodes=$list Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
  } >"$cdir/slurm.conf.new"
  mv "$cdir/slurm.conf.new" "$cdir/slurm.conf"
  # Slurm's own OCI support, for jobs that name a bundle (--container):
  # runc, rootless, as the job's user, in one `run`. Slurm 22.05 knows %u
  # (the user's name) but not %U.
  cat >"$cdir/oci.conf" <<'OCI'
RunTimeQuery="runc --rootless=true --root=/tmp/runc-%u state %n.%u.%j.%s.%t"
RunTimeRun="runc --rootless=true --root=/tmp/runc-%u run %n.%u.%j.%s.%t -b %b"
RunTimeKill="runc --rootless=true --root=/tmp/runc-%u kill -a %n.%u.%j.%s.%t"
RunTimeDelete="runc --rootless=true --root=/tmp/runc-%u delete --force %n.%u.%j.%s.%t"
OCI
}

start_cluster() {
  local c=$1 cdir="$dir/c$1" ctld=$((port + 10 * ($1 - 1)))
  if ! alive "$cdir/run/slurmctld.pid"; then
    write_conf "$c" "$cdir" "$ctld"
    log "starting cluster brokk$c ($nodes nodes x $cpus CPUs, slurmctld on port $ctld)"
    /usr/sbin/slurmctld -f "$cdir/slurm.conf" -i
  fi
  for n in $(seq "$nodes"); do
    local name="c${c}n$n"
    if ! alive "$cdir/run/slurmd-$name.pid"; then
      mkdir -p "$cdir/spool/$name"
      /usr/sbin/slurmd -f "$cdir/slurm.conf" -N "$name"
    fi
  done
  for _ in $(seq 100); do
    if SLURM_CONF="$cdir/slurm.conf" scontrol ping 2>/dev/null | grep -q UP; then
      # A crash can leave nodes drained (a launch it cut short, a job id the
      # restarted controller handed out twice): a testbed has no operator, so
      # start resumes them.
      SLURM_CONF="$cdir/slurm.conf" sinfo --local -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^(drain|drng|fail|down)$/ {print $1}' |
        while read -r node; do
          log "resuming node $node of brokk$c"
          SLURM_CONF="$cdir/slurm.conf" scontrol update nodename="$node" state=resume >&2 || true
        done
      local bad
      bad=$(SLURM_CONF="$cdir/slurm.conf" sinfo --local -h -o '%t' 2>/dev/null | grep -vcE '^(idle|mix|alloc|resv)' || true)
      local seen
      seen=$(SLURM_CONF="$cdir/slurm.conf" sinfo --local -h -N -o '%N' 2>/dev/null | sort -u | wc -l)
      if [ "$bad" = 0 ] && [ "$seen" = "$nodes" ]; then
        return 0
      fi
    fi
    sleep 0.2
  done
  log "cluster brokk$c did not come up; see $cdir/log"
  SLURM_CONF="$cdir/slurm.conf" sinfo >&2 || true
  exit 1
}

install_accounting() {
  command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null && return 0
  log "installing slurmdbd and mariadb-server with apt-get"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq slurmdbd mariadb-server >&2 \
    || { $sudo apt-get update -qq >&2; DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq slurmdbd mariadb-server >&2; }
}

# MariaDB and one slurmdbd for the clusters' accounting. slurmdbd reads its
# slurmdbd.conf from the directory of $SLURM_CONF: DIR/dbd.
start_accounting() {
  mysqladmin ping >/dev/null 2>&1 || /etc/init.d/mariadb start >&2
  mysql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'brokk';
            GRANT ALL ON brokk_acct.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  local ddir="$dir/dbd"
  mkdir -p "$ddir"
  alive "$dir/slurmdbd.pid" && return 0
  {
    echo "AuthType=auth/munge"
    echo "DbdHost=localhost"
    echo "DbdAddr=127.0.0.1"
    echo "DbdPort=$((port + 90))"
    echo "SlurmUser=root"
    echo "StorageType=accounting_storage/mysql"
    echo "StorageHost=localhost"
    echo "StorageUser=slurm"
    echo "StoragePass=brokk"
    echo "StorageLoc=brokk_acct"
    echo "PidFile=$dir/slurmdbd.pid"
    echo "LogFile=$dir/slurmdbd.log"
  } >"$ddir/slurmdbd.conf"
  chmod 600 "$ddir/slurmdbd.conf"
  touch "$ddir/slurm.conf"
  log "starting slurmdbd on port $((port + 90))"
  SLURM_CONF="$ddir/slurm.conf" /usr/sbin/slurmdbd
  for _ in $(seq 100); do
    alive "$dir/slurmdbd.pid" && (echo >"/dev/tcp/127.0.0.1/$((port + 90))") 2>/dev/null && return 0
    sleep 0.1
  done
  log "slurmdbd did not start; see $dir/slurmdbd.log"; exit 1
}

# The clusters, an account and this user in the accounting, and the
# federation; the controllers restarted to read it.
join_federation() {
  local conf="$dir/c1/slurm.conf" names=""
  for c in $(seq "$clusters"); do names="$names${names:+,}brokk$c"; done
  SLURM_CONF=$conf sacctmgr -i add cluster $(echo "$names" | tr , ' ') >&2 || true
  SLURM_CONF=$conf sacctmgr -i add account brokk Cluster="$names" >&2 || true
  SLURM_CONF=$conf sacctmgr -i add user "$(id -un)" Account=brokk Cluster="$names" >&2 || true
  SLURM_CONF=$conf sacctmgr -i add federation "$federation" clusters="$names" >&2 || true
  for c in $(seq "$clusters"); do
    local pidfile="$dir/c$c/run/slurmctld.pid"
    if alive "$pidfile"; then
      kill "$(cat "$pidfile")"
      for _ in $(seq 50); do alive "$pidfile" || break; sleep 0.1; done
    fi
    /usr/sbin/slurmctld -f "$dir/c$c/slurm.conf"
  done
  for c in $(seq "$clusters"); do
    for _ in $(seq 150); do
      SLURM_CONF="$dir/c$c/slurm.conf" scontrol show federation 2>/dev/null | grep -q "Self: *brokk$c" && break
      sleep 0.2
    done
  done
  SLURM_CONF=$conf scontrol show federation >&2 || true
}

case "$cmd" in
  start)
    install
    start_munge
    mkdir -p "$dir"
    if [ -n "$federation" ]; then
      install_accounting
      start_accounting
    fi
    for c in $(seq "$clusters"); do start_cluster "$c"; done
    [ -n "$federation" ] && join_federation
    echo "$dir"
    ;;
  stop)
    stop_all
    ;;
  status)
    for conf in "$dir"/c*/slurm.conf; do
      [ -f "$conf" ] || continue
      echo "== $conf"
      SLURM_CONF="$conf" sinfo || true
    done
    ;;
  *)
    echo "usage: $0 start|stop|status [options]" >&2
    exit 2
    ;;
esac
