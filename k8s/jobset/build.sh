#!/bin/sh
# Builds the JobSet controller (sigs.k8s.io/jobset at the release go.mod here requires, its
# k8s.io/* dependencies raised to the test cluster's v0.34.4 so that k8s/cluster/build.sh's
# caches serve it) into $PERDURE_K8S_CACHE/bin/jobset-<release>/ (default ~/.cache/perdure-k8s),
# with the module and build caches shared with k8s/cluster: nothing is written in the repo.
# The JobSet CRD is read from the module's source (config/components/crd/bases) by whoever
# installs it; this script prints its path too.
# Prints and records (build-seconds.txt) how long the build took; cold = no binary there yet
# (measured here: 765 s with k8s/cluster's caches warm, 203 CPU-seconds; warm 3 s; NOTES.md).
# Usage: make k8s-jobset, or k8s/jobset/build.sh (PERDURE_K8S_JOBS=N: go build -p N, default 1)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cache=${PERDURE_K8S_CACHE:-$HOME/.cache/perdure-k8s}
release=$(awk '$1 == "sigs.k8s.io/jobset" || $2 == "sigs.k8s.io/jobset" {print $NF; exit}' "$here/go.mod")
out=$cache/bin/jobset-$release
export GOMODCACHE=$cache/gomod GOCACHE=$cache/gocache GOFLAGS=-modcacherw GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$out" "$GOCACHE"
cold=warm
[ -x "$out/jobset-controller" ] || cold=cold
echo "building the JobSet controller $release into $out ($cold, -p ${PERDURE_K8S_JOBS:-1})"
start=$(date +%s)
cd "$here"
nice -n 19 go build -p "${PERDURE_K8S_JOBS:-1}" -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$release" \
    -o "$out/jobset-controller" sigs.k8s.io/jobset
seconds=$(( $(date +%s) - start ))
echo "$cold build: ${seconds} s ($(date -u +%FT%TZ), $(nproc) cores, -p ${PERDURE_K8S_JOBS:-1})" \
    | tee -a "$out/build-seconds.txt"
echo "CRDs: $(go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)/config/components/crd/bases"
ls -l "$out"
