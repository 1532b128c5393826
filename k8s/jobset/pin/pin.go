//go:build tools

// Package pin keeps the JobSet controller in go.mod: build.sh builds its main
// (sigs.k8s.io/jobset, the module's root package).
package pin

import (
	_ "sigs.k8s.io/jobset"
)
