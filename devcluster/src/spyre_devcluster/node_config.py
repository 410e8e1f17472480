"""The node's configuration files, as pure functions of its layout (no processes here).

Addresses: the node's own address sits on `lo` (the kernel here has no `dummy` link
driver), so the kubelet and the API server are not exposed on the machine's network;
pods live on a bridge network of their own; Services use the plane's range.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

NODE_NAME = "spyre-node"
NODE_IP = "10.234.0.1"
POD_CIDR = "10.233.0.0/24"
BRIDGE = "spyre0"
CNI_NETWORK = "spyre"
STORAGE_CLASS = "spyre-hostpath"
PROVISIONER_NAME = "spyre.dev/hostpath"


# Unix socket paths must stay under 108 bytes, whatever the folder: containerd's sockets
# live in this fixed folder (one node per machine anyway), beside the machine's record.
RUN_DIR = Path("/run/spyre-node")
SOCKET_PATH_MAX = 107

# The kubelet 1.20 looks for device plugins here whatever --root-dir says (kubelet.sock
# is its registration socket); the fake card plugin (spyre_devcluster/deviceplugin.py) serves its
# sockets beside it. Under /var/lib/kubelet, a fixed path `down` removes (host.py).
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
SPYRE_PF, SPYRE_VF = "ibm.com/spyre_pf", "ibm.com/spyre_vf"
CARD_RESOURCES = (SPYRE_PF, SPYRE_VF)


@dataclass(frozen=True)
class Layout:
    """Where the node keeps its files: under DIR/node, except containerd's sockets (in
    RUN_DIR) and its root (kept in the cache so imported images survive `down`)."""

    dir: Path  # DIR/node
    containerd_root: Path

    @property
    def pki(self) -> Path:
        return self.dir / "pki"

    @property
    def containerd_state(self) -> Path:
        return self.dir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return RUN_DIR / "containerd.sock"

    @property
    def kubelet_socket(self) -> Path:
        """The longest socket path under the folder (the kubelet's pod-resources API)."""
        return self.kubelet_root / "pod-resources" / "kubelet.sock"

    @property
    def cni(self) -> Path:
        return self.dir / "cni"

    @property
    def kubelet_root(self) -> Path:
        return self.dir / "kubelet"

    @property
    def volumes(self) -> Path:
        return self.dir / "volumes"

    @property
    def registry(self) -> Path:
        """The registry's certificates, password file and config."""
        return self.dir / "registry"

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry config_path: a hosts.toml per registry (host:port)."""
        return self.dir / "certs.d"

    def file(self, name: str) -> Path:
        return self.dir / name


def _toml(value: object) -> str:
    return json.dumps(value)  # JSON strings and booleans are valid TOML values


def containerd_config(layout: Layout, pause_image: str, shim: Path, cni_bin: Path) -> str:
    """containerd 2's configuration (version 3: the CRI plugin split into images and
    runtime); `shim`: its runc shim, `cni_bin`: the CNI plugins' folder."""
    images = 'plugins."io.containerd.cri.v1.images"'
    runtime = 'plugins."io.containerd.cri.v1.runtime"'
    return f"""version = 3
root = {_toml(str(layout.containerd_root))}
state = {_toml(str(layout.containerd_state / "state"))}
# NRI would listen on a fixed path (/var/run/nri) and nothing here uses it
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.nri.v1.nri"]

[grpc]
  address = {_toml(str(layout.containerd_socket))}

[ttrpc]
  address = {_toml(str(RUN_DIR / "containerd.ttrpc.sock"))}

[plugins."io.containerd.internal.v1.opt"]
  path = {_toml(str(layout.containerd_state / "opt"))}

[{images}]
  snapshotter = "overlayfs"
  # a pulled layer's blob goes once unpacked (containers run from the snapshot): the
  # serving image takes its 9 GB once, not twice
  discard_unpacked_layers = true
  # which the transfer service does not do: pulls go through the CRI's own client
  use_local_image_pull = true

[{images}.pinned_images]
  sandbox = {_toml(pause_image)}

[{images}.registry]
  # the node's registry (spyre_devcluster/registry.py): its CA, read at each pull
  config_path = {_toml(str(layout.registry_hosts))}

[{runtime}]
  # this VM's bounding set lacks CAP_SYS_RESOURCE: nobody may lower oom_score_adj
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false

[{runtime}.containerd]
  default_runtime_name = "runc"

[{runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  # this build's shim, not one of another containerd on PATH (Debian's 1.6 fails to start)
  runtime_path = {_toml(str(shim))}

[{runtime}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = {_toml(str(layout.containerd_state / "runc"))}

[{runtime}.cni]
  bin_dirs = [{_toml(str(cni_bin))}]
  conf_dir = {_toml(str(layout.cni / "net.d"))}
  max_conf_num = 1
"""


def cni_conflist(layout: Layout) -> dict[str, object]:
    return {
        "cniVersion": "0.4.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.cni / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


# The aggregation layer's front proxy (as kubeadm sets it up): the API server proxies an
# aggregated API (KEDA's external metrics) with this client certificate and the caller's
# identity in X-Remote-* headers, which the extension server trusts from this CA only.
FRONT_PROXY_CLIENT = "front-proxy-client"


def _signed(ca: Path, cert: Path, subject: str) -> list[list[str]]:
    """openssl: a key and a certificate for `subject` signed by the CA `ca`."""
    return [
        ["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
         "-keyout", f"{cert}.key", "-out", f"{cert}.csr"],
        ["openssl", "x509", "-req", "-in", f"{cert}.csr", "-CA", f"{ca}.crt", "-CAkey",
         f"{ca}.key", "-CAcreateserial", "-days", "3650", "-out", f"{cert}.crt"],
    ]  # fmt: skip


def pki_commands(pki: Path) -> list[list[str]]:
    """openssl commands making the node's CA (the kubelet trusts it) with the API server's
    client certificate for the kubelet, and the front proxy's CA and client certificate."""
    commands = []
    for ca, cert, subject in (
        ("ca", "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client"),
        ("front-proxy-ca", FRONT_PROXY_CLIENT, f"/CN={FRONT_PROXY_CLIENT}"),
    ):
        commands.append(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
             "-subj", f"/CN=spyre-node-{ca}", "-keyout", f"{pki / ca}.key",
             "-out", f"{pki / ca}.crt"]
        )  # fmt: skip
        commands += _signed(pki / ca, pki / cert, subject)
    return commands


def front_proxy_args(pki: Path) -> tuple[str, ...]:
    return (
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / FRONT_PROXY_CLIENT}.crt",
        f"--proxy-client-key-file={pki / FRONT_PROXY_CLIENT}.key",
    )


def kubelet_config(layout: Layout, port: int, healthz_port: int) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(layout.pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        # never collect images: the pause image is imported, not pulled
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "oomScoreAdj": 0,  # lowering it needs CAP_SYS_RESOURCE
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        # these machines boot cgroup v1 (hybrid; v2 holds only hugetlb), which the kubelet
        # refuses since 1.35 unless told; it still runs on it (maintenance mode upstream)
        "failCgroupV1": False,
        "volumePluginDir": str(layout.dir / "volume-plugins"),
        "nodeStatusUpdateFrequency": "1s",  # Ready in ~6 s instead of ~16 s
        "rotateCertificates": False,
        "serializeImagePulls": False,
    }


def kubelet_args(layout: Layout) -> list[str]:
    """The settings the kubelet has only as flags (the pause image is containerd's)."""
    return [
        f"--config={layout.file('kubelet.json')}",
        f"--kubeconfig={layout.file('kubelet.kubeconfig')}",
        f"--root-dir={layout.kubelet_root}",
        f"--cert-dir={layout.kubelet_root / 'pki'}",
        f"--node-ip={NODE_IP}",
        f"--hostname-override={NODE_NAME}",
    ]


def proxy_config(layout: Layout, healthz_port: int, metrics_port: int) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(layout.file("kube-proxy.kubeconfig"))},
        "mode": "iptables",
        "bindAddress": NODE_IP,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "clusterCIDR": POD_CIDR,
        "hostnameOverride": NODE_NAME,
        "nodePortAddresses": [f"{NODE_IP}/32"],
        "oomScoreAdj": 0,
        # leave the host's conntrack sysctls alone
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def kubeconfig(server: str, ca: Path, user: str, token: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "node",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "node", "context": {"cluster": "local", "user": user}}],
    }


def storage_class() -> dict[str, object]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER_NAME,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }
