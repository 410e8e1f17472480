//go:build tools

// The command install.py builds. Debian's Prometheus (2.42) is built without Kubernetes
// service discovery, which every PodMonitor and ServiceMonitor renders to.
package prometheus

import _ "github.com/prometheus/prometheus/cmd/prometheus"
