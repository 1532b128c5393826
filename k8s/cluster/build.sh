#!/bin/sh
# Builds the Kubernetes test cluster's components from Go modules (go.mod here pins the release):
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd and the pause
# image's process (pause/), into $PERDURE_K8S_CACHE/bin/<release>/ (default ~/.cache/perdure-k8s),
# with the module and build caches beside them: nothing is written in the repo.
# Prints and records (build-seconds.txt) how long the build took; a cold build is one whose
# GOCACHE was empty (measured here: 53 min on 2 busy shared cores, 888 CPU-seconds, 1.8 GB peak).
# Usage: make k8s-cluster, or k8s/cluster/build.sh (PERDURE_K8S_JOBS=N: go build -p N, default 1)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cache=${PERDURE_K8S_CACHE:-$HOME/.cache/perdure-k8s}
release=$(awk '$1 == "k8s.io/kubernetes" || $2 == "k8s.io/kubernetes" {print $NF; exit}' "$here/go.mod")
out=$cache/bin/$release
export GOMODCACHE=$cache/gomod GOCACHE=$cache/gocache GOFLAGS=-modcacherw GOTOOLCHAIN=local
export CGO_ENABLED=0
minor=$(echo "$release" | cut -d. -f2)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags="$ldflags -X $pkg.gitTreeState=clean"
done
mkdir -p "$out" "$GOCACHE"
cold=warm
[ -n "$(ls -A "$GOCACHE" 2>/dev/null | grep -v README)" ] || cold=cold
echo "building Kubernetes $release components into $out ($cold go cache, -p ${PERDURE_K8S_JOBS:-1})"
start=$(date +%s)
cd "$here"
nice -n 19 go build -p "${PERDURE_K8S_JOBS:-1}" -trimpath -ldflags "$ldflags" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kubectl \
    perdure.test/k8scluster/pause
nice -n 19 go build -p "${PERDURE_K8S_JOBS:-1}" -trimpath -ldflags "-s -w" -o "$out/etcd" \
    go.etcd.io/etcd/server/v3
seconds=$(( $(date +%s) - start ))
echo "$cold build: ${seconds} s ($(date -u +%FT%TZ), $(nproc) cores, -p ${PERDURE_K8S_JOBS:-1})" \
    | tee -a "$out/build-seconds.txt"
ls -l "$out"
