//go:build tools

// The endpoint picker of spec.routing (the Gateway API Inference Extension's EPP), for the
// testbed to build and run on its node: its image is the operator's --picker-image.
package epp

import (
	_ "sigs.k8s.io/gateway-api-inference-extension/cmd/epp"
)
