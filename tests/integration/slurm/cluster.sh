#!/bin/bash
# perdure's test cluster: a real multi-host Slurm 22.05 cluster of Linux network namespaces
# (Debian 12, root), made from ../shared/slurm/recipe.sh. tests/integration/slurm/cluster.py
# drives it with a random prefix, subnet and base dir per run (SLURM_NS_*), and NODES (a b c):
# c is free capacity for a replacement node. GraceTime on partition main gives a preempted
# job that long between SIGTERM and its end.
#
#   recipe.sh up            bridge + 3 namespace hosts + munged + slurmctld(head) + slurmd(a,b)
#   recipe.sh kill NODE     SIGKILL every process of host NODE's namespace (the host "dies")
#   recipe.sh start NODE    (re)start slurmd on NODE (after a kill); ReturnToService=2 brings it back
#   recipe.sh exec NODE CMD run CMD on host NODE (head is the login node), SLURM_CONF set
#   recipe.sh status        namespaces, daemon PIDs, sinfo
#   recipe.sh down          stop everything started here (by PID / by namespace), delete netns+bridge
#
# Layout (all under $BASE): etc/slurm.conf, munge/{munge.key,munge.socket,...}, state/{ctld,a,b},
# log/{slurmctld,slurmd-a,slurmd-b,munged}.log, log/jobcomp.txt, run/*.pid
# Network: bridge slm0 = 10.79.0.1 (root namespace, no forwarding, nothing routed out),
#          head = 10.79.0.10, a = 10.79.0.11, b = 10.79.0.12. No default route in the hosts.
# Needs: apt-get install -y slurm-wlm munge ; util-linux (unshare), iproute2.
set -u
BASE=${SLURM_NS_BASE:-${TMPDIR:-/tmp}/slurm-ns}
PFX=${SLURM_NS_PREFIX:-slm}          # namespaces slm-head, slm-a, slm-b; bridge slm0
NET=${SLURM_NS_NET:-10.79.0}
read -r -a NODES <<< "${SLURM_NS_NODES:-a b}"
HEAD=head
declare -A IP=([head]=$NET.10)
i=11; for h in "${NODES[@]}"; do IP[$h]=$NET.$i; i=$((i+1)); done
BR=${PFX}0
CONF=$BASE/etc/slurm.conf
MSOCK=$BASE/munge/munge.socket
export SLURM_CONF=$CONF

nsx() { local h=$1; shift; ip netns exec "$(ns "$h")" "$@"; }
log() { echo "[$(date +%T.%3N)] $*" >&2; }

HOSTS=("$HEAD" "${NODES[@]}")
# shellcheck source=../nshosts.sh
. "$(dirname "${BASH_SOURCE[0]}")/../nshosts.sh"   # ns, net_ok, net_del, net_up, host_kill

write_conf() {
  mkdir -p "$BASE"/{etc,log,run,state/ctld} "$BASE/munge"
  for h in "${NODES[@]}"; do mkdir -p "$BASE/state/$h"; chmod 755 "$BASE/state/$h"; done
  local nodelist; nodelist=$(IFS=,; echo "${NODES[*]}")
  cat > "$CONF" <<EOF
ClusterName=nscluster
SlurmctldHost=$HEAD(${IP[$HEAD]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# one munged in the root namespace; its unix socket is a file, so every namespace reaches it.
# cred_expire also delays the restart of a requeued job (default 120 s).
AuthInfo=socket=$MSOCK,cred_expire=10
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$BASE/state/ctld
SlurmdSpoolDir=$BASE/state/%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/${PROCTRACK:-linuxproc}
TaskPlugin=task/${TASKPLUGIN:-none}
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=${SLURMD_TIMEOUT:-10}
SlurmctldTimeout=10
MessageTimeout=${MESSAGE_TIMEOUT:-5}
TCPTimeout=2
KillWait=5
InactiveLimit=0
MinJobAge=600
Waittime=0
JobRequeue=0
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobCompType=jobcomp/filetxt
JobCompLoc=$BASE/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
NodeName=DEFAULT CPUs=2 RealMemory=1000 State=UNKNOWN
EOF
  # only read when a cgroup plugin is configured (PROCTRACK=cgroup); slurmd loads the cgroup
  # plugin (autodetect -> cgroup/v1 here) at start even without it
  printf 'CgroupPlugin=autodetect\nConstrainCores=no\nConstrainRAMSpace=no\n' > "$BASE/etc/cgroup.conf"
  for h in "${NODES[@]}"; do echo "NodeName=$h NodeAddr=${IP[$h]} NodeHostname=$h" >> "$CONF"; done
  cat >> "$CONF" <<EOF
PartitionName=main Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=${GRACE_TIME:-30}
PartitionName=urgent Nodes=$nodelist MaxTime=INFINITE State=UP PriorityTier=10
EOF
}

# alive PIDFILE: the recorded PID still runs the daemon named by the file (not a zombie, not a
# recycled PID that now belongs to someone else)
alive() {
  [ -f "$1" ] || return 1
  local p want; p=$(cat "$1"); want=$(basename "$1" .pid); want=${want%%-*}
  [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$want" ] || return 1
  ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null
}

munge_up() {
  alive "$BASE/run/munged.pid" && return 0
  chmod 755 "$BASE/munge"
  if [ ! -f "$BASE/munge/munge.key" ]; then
    dd if=/dev/urandom of="$BASE/munge/munge.key" bs=1024 count=1 status=none
    chmod 600 "$BASE/munge/munge.key"
  fi
  # root namespace, foreground, every path private to $BASE (nothing touches /run/munge)
  setsid munged -F --force --key-file="$BASE/munge/munge.key" --socket="$MSOCK" \
    --pid-file="$BASE/munge/munged.pid" --seed-file="$BASE/munge/munged.seed" \
    --log-file="$BASE/log/munged.log" --num-threads=4 </dev/null >>"$BASE/log/munged.out" 2>&1 &
  echo $! > "$BASE/run/munged.pid"
  for _ in $(seq 50); do [ -S "$MSOCK" ] && return 0; sleep 0.1; done
  log "munged did not come up"; return 1
}

# on H CMD...: run CMD as host H: its network namespace, a private mount namespace with H's
# /etc/{hosts,nsswitch.conf,resolv.conf}, and a private UTS namespace with hostname H.
# Not `ip netns exec`: it remounts /sys, hiding /sys/fs/cgroup, and slurmd 22.05 always loads
# the cgroup plugin and dies without a real cgroup mount ("No filesystem mounted on
# /sys/fs/cgroup", "Unexpected fs type on /sys/fs/cgroup/systemd"). The hostname matters too:
# slurmctld insists that it match SlurmctldHost, and `srun hostname` shows it.
# Run clients (sbatch/srun/salloc) as `recipe.sh exec head ...` (or `ip netns exec slm-head`):
# slurmctld wakes a waiting srun ("step creation temporarily disabled ... Requested nodes are
# busy") by connecting to the srun's hostname -- a node name resolves to the node, any other name
# (this machine's, for a client in the root namespace) becomes 0.0.0.0:port, which only reaches a
# client in the controller's own namespace; elsewhere srun sleeps 60 + pid%10 s instead.
ON_SH='for f in hosts nsswitch.conf resolv.conf; do mount --bind "/etc/netns/$NS_/$f" "/etc/$f"; done
hostname "$HOST_"; exec "$@"'
on() {  # replaces this shell: a signal to it reaches CMD (the tests stop a controller so)
  local h=$1; shift
  exec env NS_="$(ns "$h")" HOST_="$h" nsenter --net="/run/netns/$(ns "$h")" \
    unshare --mount --uts --propagation private sh -c "$ON_SH" sh "$@"
}

# start one daemon as host H in the background; its PID goes to run/NAME.pid
start_in() {
  local h=$1 name=$2; shift 2
  NS_=$(ns "$h") HOST_=$h setsid nsenter --net="/run/netns/$(ns "$h")" \
    unshare --mount --uts --propagation private sh -c "$ON_SH" sh "$@" \
    </dev/null >>"$BASE/log/$name.out" 2>&1 &
  echo $! > "$BASE/run/$name.pid"   # setsid/nsenter/unshare/sh all exec: this is the daemon's PID
}

ctld_up() { alive "$BASE/run/slurmctld.pid" || start_in $HEAD slurmctld slurmctld -D -f "$CONF"; }
slurmd_up() { alive "$BASE/run/slurmd-$1.pid" || start_in "$1" "slurmd-$1" slurmd -D -N "$1" -f "$CONF"; }

wait_idle() {  # wait until every node is idle (or mixed/alloc) and responding
  local t0=$SECONDS want=${#NODES[@]}
  while (( SECONDS - t0 < ${1:-60} )); do
    local n; n=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^(idle|mix|alloc)$/' | sort -u | wc -l)
    [ "$n" -ge "$want" ] && return 0
    sleep 0.2
  done
  log "nodes not idle after ${1:-60}s:"; sinfo -N >&2; return 1
}

cmd_up() {
  local t0; t0=$(date +%s.%N)
  net_up || exit 1
  # never rewrite the config under running daemons (`down` first to change settings)
  if ! alive "$BASE/run/slurmctld.pid"; then
    # fresh cluster: job ids restart at 1, so keep the last run's logs (jobcomp.txt!) aside
    [ -d "$BASE/log" ] && { rm -rf "$BASE/log.prev"; mv "$BASE/log" "$BASE/log.prev"; }
    write_conf
  fi
  munge_up || exit 1
  ctld_up
  for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
  for h in "${NODES[@]}"; do slurmd_up "$h"; done
  wait_idle 60 || exit 1
  log "cluster up in $(echo "$(date +%s.%N) - $t0" | bc) s"
  sinfo
}

cmd_down() {
  for h in "${NODES[@]}" $HEAD; do ip netns list | grep -qw "$(ns "$h")" && host_kill "$h"; done
  local f p left=()
  for f in "$BASE"/run/*.pid; do   # anything left that we started (munged) -- by PID, if still ours
    alive "$f" && { p=$(cat "$f"); kill "$p" 2>/dev/null; left+=("$p"); }
  done
  for p in "${left[@]}"; do
    for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
  done
  net_del
  # PROCTRACK=cgroup only: slurmd made /sys/fs/cgroup/<ctl>/slurm_<node>/... in the shared v1
  # hierarchy; a killed host leaves its job/step cgroups behind (empty once the host is dead).
  for h in "${NODES[@]}"; do
    for d in /sys/fs/cgroup/*/slurm_"$h"; do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
  done
  rm -rf "$BASE"/state "$BASE/munge/munge.socket"* "$BASE/run"
  log "down"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  kill) host_kill "$2" ;;
  start) if [ "$2" = "$HEAD" ]; then ctld_up; else slurmd_up "$2"; fi ;;
  exec) h=$2; shift 2; on "$h" "$@" ;;   # e.g. recipe.sh exec head sbatch job.sh
  status)
    ip netns list | grep "^$PFX-"
    [ -S "$MSOCK" ] || { echo "munged not running"; exit 1; }
    for f in "$BASE"/run/*.pid; do [ -f "$f" ] && echo "$(basename "$f" .pid) $(cat "$f") $(alive "$f" && echo alive || echo dead)"; done
    sinfo -N ;;
  *) echo "usage: $0 up|down|kill NODE|start NODE|exec NODE CMD...|status" >&2; exit 2 ;;
esac
