#!/bin/bash
# perdure's Kubernetes test cluster: real kube-apiserver, kube-controller-manager,
# kube-scheduler and etcd on a control-plane host, and a real kubelet with Debian's containerd
# and runc on each worker host; every host a Linux network namespace on a bridge of its own
# (root). tests/integration/k8s/cluster.py drives it with a random prefix, subnet and base dir
# per run (K8S_NS_*); the binaries come from k8s/cluster/build.sh (K8S_BIN).
#
#   cluster.sh up            bridge, hosts, certificates, etcd + control plane on cp, then
#                            containerd + kubelet on every worker, images imported; waits Ready
#   cluster.sh kill NODE     SIGKILL every process of host NODE (kubelet, containerd, its pods)
#   cluster.sh start NODE    start NODE's containerd and kubelet again (after a kill)
#   cluster.sh exec NODE CMD run CMD as host NODE (its network, mount and UTS namespaces)
#   cluster.sh kubectl ARGS  kubectl as cluster admin, run on cp
#   cluster.sh down          stop everything started here (by namespace), delete netns + bridge
#
# Network: bridge <pfx>0 = NET.1 (root namespace, nothing routed out), cp = NET.10, workers
# NET.11... No host has a default route: every packet stays on the bridge.
# Hosts: a "holder" process per host (`sleep infinity` in the host's network namespace, a private
# mount namespace and its own UTS namespace) keeps the host's namespaces; every daemon of the
# host enters all three (nsenter -t HOLDER). kubelet and containerd must share the mount
# namespace (the volumes kubelet mounts are bind-mounted into containers by runc), and the host's
# /etc/hosts, /etc/resolv.conf, /var/log and /run/containerd are bind-mounted there, so two
# hosts never share them. The kernel tunables kubelet insists on (vm.overcommit_memory=1,
# kernel.panic=10, ...) are files bind-mounted over /proc/sys in that namespace: kubelet finds
# its values and never writes the machine's.
# Layout (all under $BASE): pki/, etc/ (kubeconfigs, kubelet and containerd configs), <host>/
# (state), log/<daemon>.log, run/<daemon>.pid.
set -u
BASE=${K8S_NS_BASE:-${TMPDIR:-/tmp}/k8s-ns}
PFX=${K8S_NS_PREFIX:-pk}
NET=${K8S_NS_NET:-10.251.0}
BIN=${K8S_BIN:-${PERDURE_K8S_CACHE:-$HOME/.cache/perdure-k8s}/bin/v1.34.4}
ETCD=${K8S_ETCD:-$BIN/etcd}       # another etcd server binary (Debian's etcd-server)
IMAGES=${K8S_IMAGES:-}               # docker-archive tarballs imported on every worker
read -r -a NODES <<< "${K8S_NS_NODES:-a b}"
CP=cp
SERVICE_CIDR=${K8S_SERVICE_CIDR:-10.255.0.0/24}   # virtual: no packet is ever sent there
LEASE=${K8S_NODE_LEASE_SECONDS:-8}    # kubelet renews its lease every LEASE/4 s
GRACE=${K8S_NODE_GRACE:-10s}          # controller-manager: NotReady after this without renewal
declare -A IP=([cp]=$NET.10)
i=11; for h in "${NODES[@]}"; do IP[$h]=$NET.$i; i=$((i+1)); done
BR=${PFX}0
PKI=$BASE/pki
ETC=$BASE/etc
ADMIN=$ETC/admin.kubeconfig

log() { echo "[$(date +%T.%3N)] $*" >&2; }
pidof_() { cat "$BASE/run/$1.pid" 2>/dev/null; }
alive() { local p; p=$(pidof_ "$1") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null &&
          ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; }

HOSTS=("$CP" "${NODES[@]}")
NS_IFNAME=eth0   # every worker's interface has one name, as on a uniform cluster
# shellcheck source=../nshosts.sh
. "$(dirname "${BASH_SOURCE[0]}")/../nshosts.sh"   # ns, net_ok, net_del, net_up, host_kill

# --- certificates: one CA; a serving certificate for the API server and each kubelet, a client
# certificate per component (CN = user, O = group), the service-account key pair
cert() {  # cert NAME SUBJECT [SAN]
  local name=$1 subj=$2 san=${3:-}
  [ -f "$PKI/$name.crt" ] && return 0
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" \
    -out "$PKI/$name.csr" 2>/dev/null || return 1
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } > "$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -days 30 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
}

pki_up() {
  mkdir -p "$PKI"
  if [ ! -f "$PKI/ca.crt" ]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -days 30 -sha256 \
      -subj "/CN=perdure-test-ca" -out "$PKI/ca.crt" 2>/dev/null || return 1
  fi
  local svc_ip; svc_ip=$(echo "$SERVICE_CIDR" | sed 's|0/24$|1|')
  cert apiserver "/CN=kube-apiserver" \
    "IP:${IP[$CP]},IP:127.0.0.1,IP:$svc_ip,DNS:cp,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc" || return 1
  cert admin "/O=system:masters/CN=perdure-admin" || return 1
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" || return 1
  cert controller-manager "/CN=system:kube-controller-manager" || return 1
  cert scheduler "/CN=system:kube-scheduler" || return 1
  for h in "${NODES[@]}"; do
    cert "kubelet-$h" "/O=system:nodes/CN=system:node:$h" "IP:${IP[$h]},DNS:$h" || return 1
  done
  [ -f "$PKI/sa.key" ] || openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  [ -f "$PKI/sa.pub" ] || openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
}

kubeconfig() {  # kubeconfig FILE CERTNAME SERVER
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: perdure-test
  cluster: {server: "$3", certificate-authority: "$PKI/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$PKI/$2.crt", client-key: "$PKI/$2.key"}
contexts:
- name: perdure-test
  context: {cluster: perdure-test, user: $2, namespace: default}
current-context: perdure-test
EOF
}

# --- hosts: a holder process per host keeps its mount and UTS namespaces
HOLD_SH='set -e
for f in hosts nsswitch.conf resolv.conf; do mount --bind "/etc/netns/$NS_/$f" "/etc/$f"; done
mkdir -p "$HB_/varlog" "$HB_/run-containerd" "$HB_/var-lib-cni" "$HB_/sys"
mount --bind "$HB_/varlog" /var/log
mkdir -p /run/containerd /var/lib/cni
mount --bind "$HB_/run-containerd" /run/containerd
mount --bind "$HB_/var-lib-cni" /var/lib/cni
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
          kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
  f=${kv%%=*}; g=$HB_/sys/$(echo "$f" | tr / _)
  echo "${kv#*=}" > "$g"; mount --bind "$g" "/proc/sys/$f"
done
hostname "$HOST_"
exec sleep infinity'

holder_up() {
  local h=$1
  alive "holder-$h" && return 0
  mkdir -p "$BASE/$h" "$BASE/log" "$BASE/run"
  NS_=$(ns "$h") HOST_=$h HB_=$BASE/$h setsid nsenter --net="/run/netns/$(ns "$h")" \
    unshare --mount --uts --propagation private sh -c "$HOLD_SH" \
    </dev/null >>"$BASE/log/holder-$h.log" 2>&1 &
  echo $! > "$BASE/run/holder-$h.pid"
  for _ in $(seq 50); do
    [ "$(readlink "/proc/$!/exe" 2>/dev/null)" = "$(readlink -f "$(command -v sleep)")" ] && return 0
    sleep 0.1
  done
  log "host $h: its holder did not start"; cat "$BASE/log/holder-$h.log" >&2; return 1
}

on() {  # on HOST CMD...: run CMD in host HOST's namespaces (replaces this shell)
  local h=$1; shift
  exec nsenter -t "$(pidof_ "holder-$h")" --net --mount --uts "$@"
}

start_in() {  # start_in HOST NAME CMD...: a daemon of HOST in the background, PID in run/NAME.pid
  local h=$1 name=$2; shift 2
  setsid nsenter -t "$(pidof_ "holder-$h")" --net --mount --uts "$@" \
    </dev/null >>"$BASE/log/$name.log" 2>&1 &
  echo $! > "$BASE/run/$name.pid"
}

wait_http() {  # wait_http HOST URL SECONDS [curl args]
  local h=$1 url=$2 t=$3; shift 3
  for _ in $(seq $((t * 5))); do
    nsenter -t "$(pidof_ "holder-$h")" --net curl -sf --max-time 1 "$@" "$url" >/dev/null 2>&1 \
      && return 0
    sleep 0.2
  done
  return 1
}

control_plane_up() {
  local cp=${IP[$CP]}
  holder_up $CP || return 1
  mkdir -p "$BASE/$CP/etcd"
  local nofsync=""  # a test cluster's etcd need not survive a power cut (3.5+ only)
  "$ETCD" --help 2>&1 | grep -q -- --unsafe-no-fsync && nofsync=--unsafe-no-fsync
  alive etcd || start_in $CP etcd "$ETCD" --name cp --data-dir "$BASE/$CP/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster cp=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
    --quota-backend-bytes 1073741824 $nofsync --log-level warn
  wait_http $CP http://127.0.0.1:2379/health 60 || { log "etcd did not come up"; return 1; }
  alive kube-apiserver || start_in $CP kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers http://127.0.0.1:2379 --bind-address "$cp" --advertise-address "$cp" \
    --secure-port 6443 --service-cluster-ip-range "$SERVICE_CIDR" \
    --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" \
    --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --authorization-mode Node,RBAC --allow-privileged=true \
    --enable-admission-plugins NodeRestriction --endpoint-reconciler-type none \
    --profiling=false --v=1
  wait_http $CP "https://$cp:6443/readyz" 120 --cacert "$PKI/ca.crt" \
    --cert "$PKI/admin.crt" --key "$PKI/admin.key" || { log "kube-apiserver not ready"; return 1; }
  alive kube-controller-manager || start_in $CP kube-controller-manager \
    "$BIN/kube-controller-manager" --kubeconfig "$ETC/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$ETC/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$ETC/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --node-monitor-period 1s --node-monitor-grace-period "$GRACE" --profiling=false --v=1
  alive kube-scheduler || start_in $CP kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$ETC/scheduler.kubeconfig" \
    --authentication-kubeconfig "$ETC/scheduler.kubeconfig" \
    --authorization-kubeconfig "$ETC/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false --v=1
}

worker_conf() {  # containerd and kubelet configuration of worker H
  local h=$1 d=$BASE/$1
  mkdir -p "$d/containerd" "$d/cni" "$d/kubelet" "$d/pod-logs"
  cat > "$ETC/containerd-$h.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$d/containerd.sock"
[ttrpc]
  address = "$d/containerd.sock.ttrpc"
[debug]
  address = "$d/containerd-debug.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "perdure.local/pause:1"
  # root here lacks CAP_SYS_RESOURCE: no process may lower its oom_score_adj, and runc fails
  # ("can't get final child's PID from pipe: EOF") setting the pause container's -998
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni"
EOF
  # pods run with hostNetwork; a CNI configuration must still exist for containerd to call the
  # node's network ready (it is used only by a pod without hostNetwork: a bridge inside the host)
  cat > "$d/cni/10-perdure.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "perdure-test", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": false, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.254.${IP[$h]##*.}.0/24"}]]}}]}
EOF
  kubeconfig "$ETC/kubelet-$h.kubeconfig" "kubelet-$h" "https://${IP[$CP]}:6443"
  cat > "$ETC/kubelet-$h.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ${IP[$h]}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: AlwaysAllow}
tlsCertFile: "$PKI/kubelet-$h.crt"
tlsPrivateKeyFile: "$PKI/kubelet-$h.key"
containerRuntimeEndpoint: "unix://$d/containerd.sock"
cgroupDriver: cgroupfs
cgroupRoot: /$PFX-$h
failCgroupV1: false
failSwapOn: false
resolvConf: "/etc/netns/$(ns "$h")/resolv.conf"
podLogsDir: "$d/pod-logs"
nodeLeaseDurationSeconds: $LEASE
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
syncFrequency: 5s
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
localStorageCapacityIsolation: false
makeIPTablesUtilChains: false
serializeImagePulls: false
maxPods: 20
EOF
}

cgroup_root() {  # kubelet's cgroupRoot /<pfx>-H must exist in every v1 hierarchy beforehand
  local c d
  for c in /sys/fs/cgroup/*/; do
    [ -f "$c/cgroup.procs" ] || continue
    d=$c$PFX-$1
    mkdir -p "$d"
    if [ -f "$c/cpuset.cpus" ]; then
      cat "$c/cpuset.cpus" > "$d/cpuset.cpus"; cat "$c/cpuset.mems" > "$d/cpuset.mems"
    fi
  done
}

worker_up() {
  local h=$1 d=$BASE/$1
  holder_up "$h" || return 1
  worker_conf "$h"
  cgroup_root "$h"
  if ! alive "containerd-$h"; then
    rm -f "$d/containerd.sock"   # a killed host's stale socket
    start_in "$h" "containerd-$h" containerd --config "$ETC/containerd-$h.toml"
    for _ in $(seq 100); do
      ctr -a "$d/containerd.sock" version >/dev/null 2>&1 && break
      sleep 0.1
    done
    local img
    for img in $IMAGES; do
      nsenter -t "$(pidof_ "holder-$h")" --mount ctr -a "$d/containerd.sock" -n k8s.io \
        images import "$img" >/dev/null || { log "host $h: cannot import $img"; return 1; }
    done
  fi
  alive "kubelet-$h" || start_in "$h" "kubelet-$h" "$BIN/kubelet" \
    --config "$ETC/kubelet-$h.yaml" --kubeconfig "$ETC/kubelet-$h.kubeconfig" \
    --hostname-override "$h" --node-ip "${IP[$h]}" --root-dir "$d/kubelet" --v=1
}

kc() { nsenter -t "$(pidof_ holder-$CP)" --net "$BIN/kubectl" --kubeconfig "$ADMIN" "$@"; }

wait_ready() {  # every worker Ready
  local t0=$SECONDS want=${#NODES[@]}
  while (( SECONDS - t0 < ${1:-120} )); do
    local n; n=$(kc get nodes --no-headers 2>/dev/null | awk '$2 == "Ready"' | wc -l)
    [ "$n" -ge "$want" ] && return 0
    sleep 0.3
  done
  log "nodes not Ready after ${1:-120}s:"; kc get nodes -o wide >&2; return 1
}

wait_account() {  # the controller-manager made namespace default's service account (pods need it)
  for _ in $(seq 300); do
    kc get serviceaccount default >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  log "no service account default/default"; return 1
}

cmd_up() {
  local t0; t0=$(date +%s.%N)
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
    [ -x "$BIN/$b" ] || { log "$BIN/$b is missing: run k8s/cluster/build.sh"; exit 1; }
  done
  [ -x "$ETCD" ] || { log "$ETCD is missing: run k8s/cluster/build.sh"; exit 1; }
  net_up || exit 1
  mkdir -p "$ETC" "$BASE/log" "$BASE/run"
  pki_up || { log "certificates failed"; exit 1; }
  kubeconfig "$ADMIN" admin "https://${IP[$CP]}:6443"
  kubeconfig "$ETC/controller-manager.kubeconfig" controller-manager "https://${IP[$CP]}:6443"
  kubeconfig "$ETC/scheduler.kubeconfig" scheduler "https://${IP[$CP]}:6443"
  control_plane_up || exit 1
  log "control plane up in $(echo "$(date +%s.%N) - $t0" | bc) s"
  for h in "${NODES[@]}"; do worker_up "$h" || exit 1; done
  wait_ready "${READY_TIMEOUT:-120}" || exit 1
  wait_account || exit 1
  log "cluster up in $(echo "$(date +%s.%N) - $t0" | bc) s"
}

cmd_down() {
  for h in "${NODES[@]}" $CP; do
    ip netns list | grep -qw "$(ns "$h")" && host_kill "$h"
  done
  sleep 0.3
  net_del
  # kubelet's pod cgroups (cgroupRoot /<pfx>-<host>) in the shared v1 hierarchy, empty now
  for h in "${NODES[@]}"; do
    for d in /sys/fs/cgroup/*/"$PFX-$h"; do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
  done
  rm -rf "$BASE/run"
  log "down"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  kill) host_kill "$2" ;;
  start) worker_up "$2" ;;
  exec) h=$2; shift 2; on "$h" "$@" ;;
  kubectl) shift; on $CP "$BIN/kubectl" --kubeconfig "$ADMIN" "$@" ;;
  *) echo "usage: $0 up|down|kill NODE|start NODE|exec NODE CMD...|kubectl ARGS" >&2; exit 2 ;;
esac
