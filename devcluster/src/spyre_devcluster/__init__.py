"""A local Kubernetes control plane and node for trying and testing spyre-serving: the
binaries, etcd + kube-apiserver + controller manager, the node (containerd, kubelet,
kube-proxy, scheduler, fake Spyre cards, a registry), the images the node runs, a stand-in
hub, and the simulator the API-server tests play the kubelet with. Not part of the
operator's image."""
