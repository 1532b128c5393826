//go:build tools

// Package pin keeps the components' packages in go.mod: build.sh builds the mains that sit
// beside these packages in their own modules (k8s.io/kubernetes/cmd/kube-apiserver, ...).
package pin

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)
