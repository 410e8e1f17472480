"""The nodes' configuration files, as pure functions of their layout (no processes here).

Addresses: the first node's address sits on `lo` (the kernel here has no `dummy` link
driver), so the kubelet and the API server are not exposed on the machine's network;
each further node lives in a network namespace of its own, joined to the host by a veth
on the NODES_BRIDGE; each node's pods live on a bridge network of their own, one /24 of
CLUSTER_POD_CIDR per node; Services use the plane's range.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

NODE_NAME = "spyre-node"  # the first node's; the others' get -2, -3, ...
NODE_IP = "10.234.0.1"  # the first node's, where the control plane and registry listen
CLUSTER_POD_CIDR = "10.233.0.0/16"  # node i's pods: 10.233.i.0/24
NODES_BRIDGE = "spyre-nodes"  # the host's end of the further nodes' network
NODES_NETWORK = "10.234.1"  # .1 the host on NODES_BRIDGE, .N node N (N >= 2)
MAX_NODES = 8
CNI_NETWORK = "spyre"
STORAGE_CLASS = "spyre-hostpath"
PROVISIONER_NAME = "spyre.dev/hostpath"


# Unix socket paths must stay under 108 bytes, whatever the folder: containerd's sockets
# live in this fixed folder (one cluster per machine anyway), beside the machine's record.
RUN_DIR = Path("/run/spyre-node")
SOCKET_PATH_MAX = 107

# The kubelet looks for device plugins here whatever --root-dir says (kubelet.sock
# is its registration socket); the fake card plugin (spyre_devcluster/deviceplugin.py) serves its
# sockets beside it. Under /var/lib/kubelet, a fixed path `down` removes (host.py); a
# further node sees a folder of its own there (Member.private_paths).
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
SPYRE_PF, SPYRE_VF = "ibm.com/spyre_pf", "ibm.com/spyre_vf"
CARD_RESOURCES = (SPYRE_PF, SPYRE_VF)


# Fixed paths the kubelet writes whatever its flags say and a second kubelet must not
# share: the device-plugin folder, and the pod logs each kubelet's garbage collector
# removes for pods it does not know.
PRIVATE_PATHS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers")


@dataclass(frozen=True)
class Member:
    """One node of the cluster: its name, addresses and machine-wide names. The first
    (index 0) runs in the host's namespaces, as the single node always did; each other
    in a network and mount namespace of its own (spyre_devcluster/node_netns.py)."""

    index: int

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def name(self) -> str:
        return NODE_NAME if self.first else f"{NODE_NAME}-{self.index + 1}"

    @property
    def ip(self) -> str:
        return NODE_IP if self.first else f"{NODES_NETWORK}.{self.index + 1}"

    @property
    def pod_cidr(self) -> str:
        return f"10.233.{self.index}.0/24"

    @property
    def bridge(self) -> str:
        return f"spyre{self.index}"

    @property
    def veth(self) -> str:
        """The host's end of its link to NODES_BRIDGE (the node's end is eth0)."""
        return self.name

    @property
    def run_dir(self) -> Path:
        return RUN_DIR if self.first else RUN_DIR / self.name

    @property
    def cgroup_root(self) -> str:
        """The kubelet's --cgroup-root: its kubepods go below it in every hierarchy."""
        return "/" if self.first else f"/{self.name}"

    def process(self, name: str) -> str:
        """The name of one of its processes in the plane's state (and its log)."""
        return name if self.first else f"{name}-{self.name}"


FIRST = Member(0)


@dataclass(frozen=True)
class Layout:
    """Where a node keeps its files: under DIR/node (a further node's under
    DIR/node/<name>), except containerd's sockets (in its run dir) and its root (kept in
    the cache so imported images survive `down`). The PKI and the registry's files are
    the cluster's, in DIR/node."""

    dir: Path  # DIR/node
    containerd_root: Path
    member: Member = FIRST

    @property
    def home(self) -> Path:
        """The node's own files."""
        return self.dir if self.member.first else self.dir / self.member.name

    @property
    def pki(self) -> Path:
        return self.dir / "pki"

    @property
    def containerd_state(self) -> Path:
        return self.home / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.member.run_dir / "containerd.sock"

    @property
    def private(self) -> Path:
        """A further node's own PRIVATE_PATHS, bound over them in its mount namespace."""
        return self.home / "private"

    @property
    def kubelet_socket(self) -> Path:
        """The longest socket path under the folder (the kubelet's pod-resources API)."""
        return self.kubelet_root / "pod-resources" / "kubelet.sock"

    @property
    def cni(self) -> Path:
        return self.home / "cni"

    @property
    def kubelet_root(self) -> Path:
        return self.home / "kubelet"

    @property
    def volumes(self) -> Path:
        return self.dir / "volumes"

    @property
    def ceph(self) -> Path:
        """The CephFS's data, sockets and logs (cephfs.py)."""
        return self.dir / "ceph"

    @property
    def cephfs_mount(self) -> Path:
        """Where the node mounts the CephFS: its volumes are folders there."""
        return self.dir / "cephfs"

    @property
    def registry(self) -> Path:
        """The registry's certificates, password file and config."""
        return self.dir / "registry"

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry config_path: a hosts.toml per registry (host:port)."""
        return self.dir / "certs.d"

    def file(self, name: str) -> Path:
        return self.home / name


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
  address = {_toml(str(layout.member.run_dir / "containerd.ttrpc.sock"))}

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
                "bridge": layout.member.bridge,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": layout.member.pod_cidr}]],
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
        "address": layout.member.ip,
        "port": port,
        "readOnlyPort": 0,
        # the node's address: a further node's 127.0.0.1 is in its own namespace
        "healthzBindAddress": layout.member.ip,
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(layout.pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": layout.member.cgroup_root,
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
        "volumePluginDir": str(layout.home / "volume-plugins"),
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
        f"--node-ip={layout.member.ip}",
        f"--hostname-override={layout.member.name}",
    ]


def proxy_config(layout: Layout, healthz_port: int, metrics_port: int) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(layout.file("kube-proxy.kubeconfig"))},
        "mode": "iptables",
        "bindAddress": layout.member.ip,
        "healthzBindAddress": f"{layout.member.ip}:{healthz_port}",
        "metricsBindAddress": f"{layout.member.ip}:{metrics_port}",
        "clusterCIDR": CLUSTER_POD_CIDR,
        "hostnameOverride": layout.member.name,
        "nodePortAddresses": [f"{layout.member.ip}/32"],
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
