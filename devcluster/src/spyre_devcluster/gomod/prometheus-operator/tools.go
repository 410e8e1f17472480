//go:build tools

// The commands install.py builds: the operator and its config reloader.
package prometheusoperator

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
	_ "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
)
