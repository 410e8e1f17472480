"""A real local control plane: etcd + kube-apiserver (+ kube-controller-manager).

`up` starts the processes detached (their own session), so they outlive the command
that started them; `down` stops exactly those pids. Everything lives in one folder:

    DIR/state.json      pids, ports and binaries of the running processes
    DIR/kubeconfig      admin identity (token) and the API server's generated CA
    DIR/run/            etcd data, certificates, keys, token file, logs

The controller manager runs only the garbage-collector and namespace controllers: with
no kubelet, the Job/ReplicaSet/Deployment controllers would overwrite the status that
tests set while playing the cluster. A node (spyre_devcluster/node.py) passes a `Profile` with the
full controller set and the flags a kubelet needs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from spyre_devcluster.binaries import Binaries, find_binaries

STATE_FILE = "state.json"
KUBECONFIG_FILE = "kubeconfig"
RUN_DIR = "run"
START_TIMEOUT = 120.0  # seconds; a loaded 2-core machine needs ~10-30 s for the apiserver
SERVICE_CIDR = "10.96.0.0/12"  # room for 1M Services (a /24 holds 254)
PORT_ATTEMPTS = 3
PORT_TAKEN = "address already in use"  # how etcd and kube-apiserver log a lost port


class ControlPlaneError(RuntimeError):
    """A problem starting or stopping the control plane, with what to do about it."""


@dataclass(frozen=True)
class Profile:
    """What differs between the played plane (the defaults) and a node's plane."""

    address: str = "127.0.0.1"  # where the API server listens and is reached
    authorization: str = "RBAC"
    controllers: str = "garbagecollector,namespace"
    apiserver_args: Sequence[str] = ()
    controller_args: Sequence[str] = ()
    tokens: Sequence[str] = ()  # more lines for the token file: token,user,uid,"groups"


@dataclass
class Process:
    name: str
    pid: int
    binary: str
    log: str


@dataclass
class State:
    etcd_port: int
    apiserver_port: int
    token: str
    processes: list[Process] = field(default_factory=list)
    address: str = "127.0.0.1"

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.apiserver_port}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def check_port_free(port: int, flag: str) -> None:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ControlPlaneError(
                f"port {port} on 127.0.0.1 is already in use ({exc.strerror}); pass "
                f"another {flag}, or leave it out to pick a free port"
            ) from exc


def _interrupt_on_sigterm() -> signal.Handlers | None:
    """Turn SIGTERM into KeyboardInterrupt (unwinding `with` blocks and pytest fixtures)
    while nothing else handles it; returns what to restore, None if left alone."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    return signal.SIG_DFL


def _restore_sigterm(previous: signal.Handlers | None) -> None:
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)


def _alive(proc: Process) -> bool:
    """True when the pid still runs the binary we started (not a reused pid)."""
    try:
        exe = os.readlink(f"/proc/{proc.pid}/exe")
    except OSError:
        return False
    return Path(exe).name.removesuffix(" (deleted)") == Path(proc.binary).resolve().name


def tail(path: str, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n    ".join(text[-lines:])


class ControlPlane:
    """One local control plane rooted at a folder."""

    def __init__(self, directory: Path, profile: Profile | None = None) -> None:
        self.profile = profile or Profile()
        self.dir = directory.resolve()
        self.run = self.dir / RUN_DIR
        self.kubeconfig = self.dir / KUBECONFIG_FILE
        self.state_file = self.dir / STATE_FILE
        self._popens: dict[int, subprocess.Popen[bytes]] = {}  # children started here
        self._term_handler: signal.Handlers | None = None

    def __enter__(self) -> ControlPlane:
        """`with ControlPlane(folder) as plane:` up on entry (default ports), down on exit.
        Inside it a SIGTERM stops the program as Ctrl-C does, so the exit still runs and
        no etcd or kube-apiserver outlives a killed test run."""
        self._term_handler = _interrupt_on_sigterm()
        try:
            self.up()
        except BaseException:
            _restore_sigterm(self._term_handler)
            raise
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self.down()
        finally:
            _restore_sigterm(self._term_handler)

    # ----- state -----------------------------------------------------------------
    def load_state(self) -> State | None:
        if not self.state_file.exists():
            return None
        raw = json.loads(self.state_file.read_text())
        procs = [Process(**p) for p in raw.pop("processes")]
        return State(**raw, processes=procs)

    def _save_state(self, state: State) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.replace(self.state_file)

    def running(self) -> State | None:
        state = self.load_state()
        if state and any(_alive(p) for p in state.processes):
            return state
        return None

    # ----- up --------------------------------------------------------------------
    def up(
        self,
        *,
        etcd_port: int | None = None,
        apiserver_port: int | None = None,
        controller_manager: bool = True,
        binaries: Binaries | None = None,
    ) -> State:
        """Start everything and wait until the API server is ready."""
        existing = self.running()
        if existing is not None:
            pids = ", ".join(str(p.pid) for p in existing.processes)
            raise ControlPlaneError(
                f"a control plane is already running from {self.dir} (pids {pids}, "
                f"{existing.server}); use it, or stop it with "
                f"`spyre-operator cluster down --dir {self.dir}`"
            )
        if self.state_file.exists():  # stale state of processes that died: start afresh
            self._cleanup()
        bins = binaries or find_binaries()
        if controller_manager and bins.controller_manager is None:
            raise ControlPlaneError(
                f"kube-controller-manager is missing ({bins.source}); run "
                "`spyre-operator cluster install` or start with --no-controller-manager"
            )
        if etcd_port is not None:
            check_port_free(etcd_port, "--etcd-port")
        if apiserver_port is not None:
            check_port_free(apiserver_port, "--apiserver-port")
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.run.mkdir(parents=True, exist_ok=True)
            state = State(
                etcd_port=etcd_port or free_port(),
                apiserver_port=apiserver_port or free_port(),
                token=secrets.token_hex(16),
                address=self.profile.address,
            )
            try:
                self._start(state, bins, controller_manager)
                return state
            except ControlPlaneError as err:
                self.down()
                # A port chosen free can be taken before the process binds it (another
                # process on a busy machine): choose again rather than fail the caller.
                if PORT_TAKEN not in str(err) or attempt == PORT_ATTEMPTS:
                    raise
            except BaseException:
                self.down()
                raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _start(self, state: State, bins: Binaries, controller_manager: bool) -> None:
        self._start_etcd(state, bins)
        self._start_apiserver(state, bins)
        self._write_kubeconfig(state)
        if controller_manager:
            self._start_controller_manager(state, bins)

    def spawn(
        self, state: State, name: str, binary: Path, args: list[str], prefix: Sequence[str] = ()
    ) -> Process:
        """Start binary (after prefix: a command that execs it, e.g. in other namespaces)."""
        log = self.run / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [*prefix, str(binary), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        proc = Process(name=name, pid=popen.pid, binary=str(binary), log=str(log))
        state.processes.append(proc)
        self._save_state(state)  # saved at once, so `down` can stop it whatever happens
        self._popens[proc.pid] = popen
        return proc

    def wait_ready(self, proc: Process, what: str, probe: str, token: str | None = None) -> None:
        """Poll `probe` until it answers 200; fail fast, with its log, if the process dies."""
        deadline = time.monotonic() + START_TIMEOUT
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        while time.monotonic() < deadline:
            popen = self._popens.get(proc.pid)
            code = popen.poll() if popen else None
            if code is not None:
                raise ControlPlaneError(
                    f"{what} exited during start-up (exit code {code}). Last log lines "
                    f"({proc.log}):\n    {tail(proc.log)}"
                )
            try:
                req = urllib.request.Request(probe, headers=headers)
                with urllib.request.urlopen(req, timeout=2, context=context) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise ControlPlaneError(
            f"{what} did not become ready within {START_TIMEOUT:.0f}s ({probe}). Last log "
            f"lines ({proc.log}):\n    {tail(proc.log)}"
        )

    def _start_etcd(self, state: State, bins: Binaries) -> None:
        peer = free_port()
        client = f"http://127.0.0.1:{state.etcd_port}"
        proc = self.spawn(
            state,
            "etcd",
            bins.etcd,
            [
                "--name=local",
                f"--data-dir={self.run / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=local=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",  # throwaway test data; fsync dominates start-up on slow disks
            ],
        )
        self.wait_ready(proc, "etcd", f"{client}/health")

    def _write_credentials(self, state: State) -> None:
        key, pub = self.run / "sa.key", self.run / "sa.pub"
        for cmd in (
            ["openssl", "genrsa", "-out", str(key), "2048"],
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
        ):
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise ControlPlaneError(f"`{' '.join(cmd)}` failed: {result.stderr.strip()}")
        tokens = self.run / "tokens.csv"
        lines = [f'{state.token},admin,admin,"system:masters"', *self.profile.tokens]
        tokens.write_text("\n".join(lines) + "\n")
        tokens.chmod(0o600)

    def _start_apiserver(self, state: State, bins: Binaries) -> None:
        self._write_credentials(state)
        proc = self.spawn(
            state,
            "kube-apiserver",
            bins.apiserver,
            [
                f"--etcd-servers=http://127.0.0.1:{state.etcd_port}",
                f"--bind-address={state.address}",
                f"--secure-port={state.apiserver_port}",
                f"--cert-dir={self.run / 'certs'}",
                f"--token-auth-file={self.run / 'tokens.csv'}",
                f"--service-account-key-file={self.run / 'sa.pub'}",
                f"--service-account-signing-key-file={self.run / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--authorization-mode={self.profile.authorization}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                *self.insecure_port_off(bins.apiserver, "--insecure-port"),
                *self.profile.apiserver_args,
            ],
        )
        self.wait_ready(proc, "kube-apiserver", f"{state.server}/readyz", token=state.token)

    @staticmethod
    def insecure_port_off(binary: Path, flag: str) -> list[str]:
        """Turn off the insecure port on versions that have one (up to 1.23; refused after)."""
        out = subprocess.run(
            [str(binary), "--help"], capture_output=True, text=True, check=False
        ).stdout
        return [f"{flag}=0"] if f"{flag} int" in out else []

    def _start_controller_manager(self, state: State, bins: Binaries) -> None:
        assert bins.controller_manager is not None
        self.spawn(
            state,
            "kube-controller-manager",
            bins.controller_manager,
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--controllers={self.profile.controllers}",
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials=false",
                *self.insecure_port_off(bins.controller_manager, "--port"),
                *self.profile.controller_args,
            ],
        )
        # It has no health port here (secure port off); a short wait catches a bad start.
        time.sleep(1.0)
        popen = self._popens[state.processes[-1].pid]
        if popen.poll() is not None:
            log = state.processes[-1].log
            raise ControlPlaneError(
                f"kube-controller-manager exited during start-up: \n    {tail(log)}"
            )

    def _write_kubeconfig(self, state: State) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "spyre-local",
            "clusters": [
                {
                    "name": "spyre-local",
                    # the API server's self-generated certificate file carries its CA too
                    "cluster": {
                        "server": state.server,
                        "certificate-authority": str(self.run / "certs" / "apiserver.crt"),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": state.token}}],
            "contexts": [
                {
                    "name": "spyre-local",
                    "context": {"cluster": "spyre-local", "user": "admin", "namespace": "default"},
                }
            ],
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
        self.kubeconfig.chmod(0o600)

    # ----- down ------------------------------------------------------------------
    def down(self, timeout: float = 15.0) -> list[Process]:
        """Stop the processes this folder started (newest first) and remove the state."""
        state = self.load_state()
        stopped = [p for p in reversed(state.processes if state else []) if self.stop(p, timeout)]
        self._cleanup()
        return stopped

    def stop_named(self, state: State, names: Collection[str]) -> None:
        """Stop the processes called `names` and drop them from the state."""
        for proc in [p for p in state.processes if p.name in names]:
            self.stop(proc)
            state.processes.remove(proc)
        self._save_state(state)

    def stop(self, proc: Process, timeout: float = 15.0) -> bool:
        """TERM, then KILL after timeout; False if it was not running."""
        if not _alive(proc):
            return False
        os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(proc) and time.monotonic() < deadline:
            self._reap(proc.pid)
            time.sleep(0.1)
        if _alive(proc):
            os.kill(proc.pid, signal.SIGKILL)
            while _alive(proc):
                self._reap(proc.pid)
                time.sleep(0.05)
        return True

    def exit_code(self, proc: Process) -> int | None:
        """The exit code of a process started by this object, None while it runs."""
        popen = self._popens.get(proc.pid)
        if popen is not None:
            return popen.poll()
        return None if _alive(proc) else -1

    def _reap(self, pid: int) -> None:
        """Collect our own children so they do not linger as zombies."""
        popen = self._popens.get(pid)
        if popen is not None:
            popen.poll()

    def _cleanup(self) -> None:
        shutil.rmtree(self.run, ignore_errors=True)
        self.kubeconfig.unlink(missing_ok=True)
        self.state_file.unlink(missing_ok=True)
