//go:build tools

// The command install.py builds (the server module's main package is etcd).
package etcd

import _ "go.etcd.io/etcd/server/v3"
