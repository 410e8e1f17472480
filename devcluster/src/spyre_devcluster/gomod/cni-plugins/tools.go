//go:build tools

// The CNI plugins the node's pod network uses (node_config.cni_conflist; loopback is
// containerd's own call).
package cniplugins

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/containernetworking/plugins/plugins/meta/portmap"
)
