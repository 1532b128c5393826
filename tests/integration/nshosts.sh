# Test hosts as Linux network namespaces on a bridge of their own (root), for the Slurm and
# Kubernetes test clusters' scripts, which source this file. The caller sets:
#   PFX   name prefix: host H is namespace $PFX-H with veth ${PFX}Hv on bridge BR
#   BR    the bridge (NET.1 on it in the root namespace; nothing is routed out: no host has a
#         default route, so every packet stays on the bridge)
#   NET   the /24's first three octets
#   HOSTS array of host names; IP: associative array host -> address
#   NS_IFNAME  optional: the host's interface name inside its namespace (default ${PFX}Hp)
# /etc/netns/<ns>/{hosts,nsswitch.conf,resolv.conf} name every host and no name server, so
# that names resolve from files only (no DNS traffic leaves the subnet); `ip netns exec`
# bind-mounts them over /etc, and the callers' own host launchers do the same.
# A host dies (host_kill H) when every process in its network namespace is SIGKILLed.

ns() { echo "$PFX-$1"; }

net_ok() {
  ip link show "$BR" >/dev/null 2>&1 || return 1
  for h in "${HOSTS[@]}"; do [ -e "/run/netns/$(ns "$h")" ] || return 1; done
}

net_del() {
  for h in "${HOSTS[@]}"; do
    ip netns del "$(ns "$h")" 2>/dev/null
    ip link del "${PFX}${h}v" 2>/dev/null
    rm -rf "/etc/netns/$(ns "$h")"
  done
  ip link del "$BR" 2>/dev/null
}

net_up() {
  net_ok && return 0
  net_del   # a half-built network from an interrupted run
  ip link add "$BR" type bridge
  ip addr add "$NET.1/24" dev "$BR"
  ip link set "$BR" up
  local h n k dev
  for h in "${HOSTS[@]}"; do
    n=$(ns "$h")
    mkdir -p "/etc/netns/$n"
    {
      echo "127.0.0.1 localhost"
      echo "$NET.1 gw"
      for k in "${HOSTS[@]}"; do echo "${IP[$k]} $k"; done
    } > "/etc/netns/$n/hosts"
    echo "hosts: files" > "/etc/netns/$n/nsswitch.conf.tmp"
    grep -vE '^hosts:' /etc/nsswitch.conf >> "/etc/netns/$n/nsswitch.conf.tmp"
    mv "/etc/netns/$n/nsswitch.conf.tmp" "/etc/netns/$n/nsswitch.conf"
    printf '# no nameserver: lookups stay local\noptions timeout:1 attempts:1\n' \
      > "/etc/netns/$n/resolv.conf"
    ip netns add "$n"
    ip link add "${PFX}${h}v" type veth peer name "${PFX}${h}p"
    ip link set "${PFX}${h}v" master "$BR" up
    ip link set "${PFX}${h}p" netns "$n"
    dev=${PFX}${h}p
    if [ -n "${NS_IFNAME:-}" ]; then
      ip netns exec "$n" ip link set "$dev" name "$NS_IFNAME"
      dev=$NS_IFNAME
    fi
    ip netns exec "$n" ip addr add "${IP[$h]}/24" dev "$dev"
    ip netns exec "$n" ip link set "$dev" up
    ip netns exec "$n" ip link set lo up
  done
}

host_kill() {  # the host dies: SIGKILL every process in its network namespace
  local h=$1 pids
  pids=$(ip netns pids "$(ns "$h")" 2>/dev/null)
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  echo "[$(date +%T.%3N)] killed host $h: $(echo $pids | wc -w) processes" >&2
}
