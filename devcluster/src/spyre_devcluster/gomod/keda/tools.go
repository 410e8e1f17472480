//go:build tools

// The commands install.py builds; importing them keeps their dependencies in go.mod.
package keda

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
