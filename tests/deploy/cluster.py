"""A rendered release, run as podman containers in network namespaces of its own.

The network: one namespace per pod (its own loopback and address, so every pod can
bind the ports the chart gives it), joined by veth pairs to a bridge that lives in a
"hub" namespace, which also runs the cluster's DNS (dnsmasq, answering from the
release's names at once, AAAA included). Nothing is added to the host's network
namespace: no bridge, no route, no forwarding rule, no sysctl. The test's clients run
in a namespace of their own on the same bridge (``client``), as a pod or a node would.

A pod's containers share its namespace; ``/etc/hosts`` and ``/etc/resolv.conf`` are the
pod's (its own name, the cluster's nameserver and search path). Volumes are host
directories: emptyDir per pod, a PVC per claim (kept across restarts, as a StatefulSet
pod keeps its claim), ConfigMaps and Secrets as read-only files. A container runs with
the pod's and container's securityContext (user, group, fsGroup as a supplementary
group, read-only root filesystem, dropped capabilities, no new privileges) and its
restart policy (podman restarts a container whose process dies, as the kubelet does).

Not done here (and said so by the test): kube-proxy (a Service name resolves to its
pods' own addresses, ready or not), NetworkPolicies, PDBs, rolling updates, resource
limits, scheduling.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.deploy import kube
from tests.deploy.engine import ROOT, Podman

SUBNET = ipaddress.ip_network("10.213.0.0/16")
HUB_IP = "10.213.0.1"
PROBER = [sys.executable, "-m", "tests.deploy.prober"]


@dataclass
class ProbeResult:
    pod: str
    container: str
    probe: str
    kind: str
    ok: bool
    detail: str


class Network:
    """Network namespaces ``<prefix>-hub`` (bridge + DNS), one per pod, and ``<prefix>-client``."""

    def __init__(self, prefix: str, state: Path) -> None:
        self.prefix = prefix
        self.state = state
        self.hub = f"{prefix}-hub"
        self.client = f"{prefix}-client"
        self._hosts = iter(SUBNET.hosts())
        next(self._hosts)  # HUB_IP
        self.addresses: dict[str, str] = {}  # namespace -> address
        self._dns: subprocess.Popen[bytes] | None = None
        self._n = 0

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)

    def start(self) -> None:
        self.remove_leftovers(self.prefix)
        self._ip("netns", "add", self.hub)
        self._ip("-n", self.hub, "link", "set", "lo", "up")
        self._ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        self._ip("-n", self.hub, "addr", "add", f"{HUB_IP}/{SUBNET.prefixlen}", "dev", "br0")
        self._ip("-n", self.hub, "link", "set", "br0", "up")
        self.add(self.client)
        # `ip netns exec` bind-mounts /etc/netns/<name>/* over /etc: the client's
        # resolver asks the cluster's DNS.
        etc = Path("/etc/netns") / self.client
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text(f"nameserver {HUB_IP}\noptions ndots:1 timeout:1 attempts:2\n")

    def add(self, namespace: str) -> str:
        """A namespace with one address on the bridge; returns the address."""
        self._n += 1
        address = str(next(self._hosts))
        veth = f"v{self._n}"
        self._ip("netns", "add", namespace)
        # Both ends are made inside the hub namespace, one moved straight into the new one:
        # the host's namespace never sees them.
        self._ip("-n", self.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        self._ip("-n", self.hub, "link", "set", veth, "master", "br0", "up")
        self._ip("-n", namespace, "addr", "add", f"{address}/{SUBNET.prefixlen}", "dev", "eth0")
        self._ip("-n", namespace, "link", "set", "eth0", "up")
        self._ip("-n", namespace, "link", "set", "lo", "up")
        self.addresses[namespace] = address
        return address

    def serve_dns(self, records: dict[str, list[str]], *, domain: str) -> None:
        hosts = self.state / "dns-hosts"
        hosts.write_text("".join(f"{ip} {name}\n" for name, ips in sorted(records.items()) for ip in ips))
        if self._dns is not None:
            self._dns.send_signal(signal.SIGHUP)  # re-reads --addn-hosts
            return
        self._dns_log = open(self.state / "dnsmasq.log", "wb")
        self._dns = subprocess.Popen(
            ["ip", "netns", "exec", self.hub, "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
             "--no-resolv", "--no-hosts", f"--addn-hosts={hosts}", f"--listen-address={HUB_IP}",
             "--bind-interfaces", "--user=root", "--group=root", "--pid-file=", f"--local=/{domain}/",
             "--log-facility=-", "--cache-size=0"],
            stdout=subprocess.DEVNULL, stderr=self._dns_log,
        )  # fmt: skip

    def client_argv(self, argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """The command line and environment that run ``argv`` in the client namespace (the
        repository importable, for ``python -m tests.deploy...``)."""
        return ["ip", "netns", "exec", self.client, *argv], {**os.environ, "PYTHONPATH": str(ROOT)}

    def client_run(
        self, argv: Sequence[str], *, timeout: float, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a program in the client namespace, to its end."""
        command, env = self.client_argv(argv)
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, input=input, env=env, cwd=ROOT)

    def client_start(self, argv: Sequence[str]) -> subprocess.Popen[str]:
        """Start a program in the client namespace, in the background."""
        command, env = self.client_argv(argv)
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)

    def close(self) -> None:
        if self._dns is not None:
            self._dns.terminate()
            try:
                self._dns.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._dns.kill()
                self._dns.wait()
            self._dns_log.close()
        self.remove_leftovers(self.prefix)

    @staticmethod
    def remove_leftovers(prefix: str) -> None:
        """Delete every namespace of ``prefix`` (a run that was killed leaves them)."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
        for line in listed.splitlines():
            name = line.split()[0] if line.split() else ""
            if name == f"{prefix}-hub" or name.startswith(f"{prefix}-"):
                subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        shutil.rmtree(Path("/etc/netns") / f"{prefix}-client", ignore_errors=True)


class Release:
    """One rendered release, run: ``start``, then pods by name."""

    def __init__(
        self,
        podman: Podman,
        work: kube.Workload,
        *,
        namespace: str,
        domain: str,
        state: Path,
        prefix: str = "txmqd",
        log: Callable[[str], None] = print,
    ) -> None:
        self.podman = podman
        self.work = work
        self.namespace = namespace
        self.domain = domain
        self.state = state
        self.log = log
        self.net = Network(prefix, state)
        self.prefix = prefix
        self.ips: dict[str, str] = {}
        self._containers: list[str] = []

    # -- names -------------------------------------------------------------------------

    def netns(self, pod: kube.Pod) -> str:
        return f"{self.prefix}-{pod.name}"

    def container_name(self, pod: kube.Pod, container: dict[str, Any]) -> str:
        return f"{self.prefix}_{pod.name}_{container['name']}"

    # -- start -------------------------------------------------------------------------

    def start(self) -> None:
        self.remove_containers()
        self.state.mkdir(parents=True, exist_ok=True)
        self.net.start()
        for pod in [*self.work.pods, *self.work.test_pods, *self.work.job_pods]:
            self.ips[pod.name] = self.net.add(self.netns(pod))
        self.net.serve_dns(
            kube.dns_records(self.work, {p.name: self.ips[p.name] for p in self.work.pods},
                             namespace=self.namespace, domain=self.domain),
            domain=self.domain,
        )  # fmt: skip
        for pod in self.work.pods:
            self.start_pod(pod, detach=True)

    def start_pod(self, pod: kube.Pod, *, detach: bool) -> int | None:
        """Init containers to completion, then the containers. ``detach=False`` (a test or
        job pod): wait for its (one) container and return its exit code."""
        files = self._pod_files(pod)
        for init in pod.init_containers():
            done = self.podman(*self._run_args(pod, init, files, detach=False), timeout=900, check=False)
            if done.returncode != 0:
                return done.returncode
        code: int | None = None
        for container in pod.containers():
            args = self._run_args(pod, container, files, detach=detach)
            done = self.podman(*args, timeout=None if detach else 900, check=detach)
            if not detach:
                code = done.returncode
        return code

    def _pod_files(self, pod: kube.Pod) -> dict[str, Path]:
        """Host paths of the pod's volumes, /etc/hosts and /etc/resolv.conf."""
        pod_dir = self.state / "pods" / pod.name
        pod_dir.mkdir(parents=True, exist_ok=True)
        fs_group = int(pod.spec.get("securityContext", {}).get("fsGroup", 0))
        search = f"{self.namespace}.svc.{self.domain} svc.{self.domain} {self.domain}"
        (pod_dir / "resolv.conf").write_text(f"nameserver {HUB_IP}\nsearch {search}\noptions ndots:5\n")
        names = " ".join(n for n in (pod.fqdn(self.namespace, self.domain), pod.hostname or pod.name) if n)
        (pod_dir / "hosts").write_text(
            f"127.0.0.1 localhost\n::1 localhost ip6-localhost\n{self.ips[pod.name]} {names}\n"
        )
        files = {"/etc/resolv.conf": pod_dir / "resolv.conf", "/etc/hosts": pod_dir / "hosts"}
        for name, volume in pod.volumes().items():
            if "emptyDir" in volume:
                path = pod_dir / "empty" / name
                shutil.rmtree(path, ignore_errors=True)  # a new pod's emptyDir is empty
                path.mkdir(parents=True)
                path.chmod(0o1777)
            elif "persistentVolumeClaim" in volume:
                path = self.state / "pvc" / volume["persistentVolumeClaim"]["claimName"]
                if not path.exists():
                    path.mkdir(parents=True)
                    os.chown(path, 0, fs_group)
                    path.chmod(0o2775)
            elif "configMap" in volume or "secret" in volume:
                path = pod_dir / "files" / name
                shutil.rmtree(path, ignore_errors=True)
                path.mkdir(parents=True)
                if "configMap" in volume:
                    data = {k: v.encode() for k, v in self.work.config_maps[volume["configMap"]["name"]].items()}
                else:
                    data = self.work.secrets[volume["secret"]["secretName"]]
                for key, value in data.items():
                    (path / key).write_bytes(value)
                    os.chown(path / key, 0, fs_group)
                    (path / key).chmod(0o440 if "secret" in volume else 0o444)
            else:
                raise kube.Unsupported(f"{pod.name}: volume {volume}")
            files[f"volume:{name}"] = path
        return files

    def _run_args(self, pod: kube.Pod, container: dict[str, Any], files: dict[str, Path], *, detach: bool) -> list[str]:
        pod_sc = pod.spec.get("securityContext") or {}
        sc = {**pod_sc, **(container.get("securityContext") or {})}
        env = kube.container_env(
            container, pod, namespace=self.namespace, pod_ip=self.ips[pod.name],
            config_maps=self.work.config_maps, secrets=self.work.secrets,
        )  # fmt: skip
        name = self.container_name(pod, container)
        args = ["run", "--name", name, "--network", f"ns:/run/netns/{self.netns(pod)}", "--no-hosts",
                "--hostname", pod.hostname or pod.name, "--pull", "never",
                "--label", f"txmq-deploy={self.prefix}", "--log-driver", "k8s-file"]  # fmt: skip
        args += ["-v", f"{files['/etc/resolv.conf']}:/etc/resolv.conf:ro", "-v", f"{files['/etc/hosts']}:/etc/hosts:ro"]
        if detach:
            args += ["-d", "--restart", {"Always": "always", "OnFailure": "on-failure"}.get(pod.restart_policy, "no")]
        if "runAsUser" in sc:
            args += ["--user", f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"]
        if "fsGroup" in pod_sc:
            args += ["--group-add", str(pod_sc["fsGroup"])]
        if sc.get("readOnlyRootFilesystem"):
            args += ["--read-only", "--read-only-tmpfs=false"]
        for cap in (sc.get("capabilities") or {}).get("drop") or []:
            args += ["--cap-drop", cap]
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        for mount in container.get("volumeMounts") or []:
            source = files[f"volume:{mount['name']}"]
            if mount.get("subPath"):
                source = source / mount["subPath"]
            args += ["-v", f"{source}:{mount['mountPath']}{':ro' if mount.get('readOnly') else ''}"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        if container.get("workingDir"):
            args += ["--workdir", container["workingDir"]]
        command = [kube.expand(c, env) for c in container.get("command") or []]
        cmd_args = [kube.expand(a, env) for a in container.get("args") or []]
        if command:
            args += ["--entrypoint", json.dumps(command)]
        args += [container["image"], *cmd_args]
        self._containers.append(name)
        return args

    # -- while it runs ---------------------------------------------------------------------

    def pods_of(self, owner: str) -> list[kube.Pod]:
        return self.work.owned_by(owner)

    def main_container(self, pod: kube.Pod) -> str:
        return self.container_name(pod, pod.containers()[0])

    def exec(self, pod: kube.Pod, argv: Sequence[str], *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.podman("exec", self.main_container(pod), *argv, timeout=timeout, check=False)

    def logs(self, pod: kube.Pod, *, tail: int = 40) -> str:
        done = self.podman("logs", "--tail", str(tail), self.main_container(pod), check=False)
        return done.stdout + done.stderr

    def pid(self, pod: kube.Pod) -> int:
        return int(self.podman("inspect", "--format", "{{.State.Pid}}", self.main_container(pod)).stdout.strip())

    def restarts(self, pod: kube.Pod) -> int:
        return int(self.podman("inspect", "--format", "{{.RestartCount}}", self.main_container(pod)).stdout.strip())

    def kill_9(self, pod: kube.Pod) -> int:
        """kill -9 the container's process (not `podman kill`, which podman would not
        restart): the restart policy brings it back, as the kubelet does."""
        pid = self.pid(pod)
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self, pod: kube.Pod) -> None:
        self.podman("stop", "--time", "30", self.main_container(pod), timeout=60)

    def start_again(self, pod: kube.Pod) -> None:
        self.podman("start", self.main_container(pod), timeout=60)

    def run_to_completion(self, pod: kube.Pod) -> tuple[int | None, str]:
        """A test or job pod: run it, return its exit code and its output."""
        code = self.start_pod(pod, detach=False)
        name = self.main_container(pod)
        out = self.podman("logs", name, check=False)
        self.podman("rm", "-f", name, check=False)
        for init in pod.init_containers():
            self.podman("rm", "-f", self.container_name(pod, init), check=False)
        return code, out.stdout + out.stderr

    # -- probes ----------------------------------------------------------------------------

    def probes(
        self, pods: Sequence[kube.Pod] | None = None, *, which: Sequence[str] = kube.PROBES
    ) -> list[ProbeResult]:
        """Run every probe of the pods' containers once, as the kubelet would: network
        probes from outside the pod (the client namespace, like a node), exec probes in
        the container."""
        pods = list(self.work.pods if pods is None else pods)
        asks: list[dict[str, Any]] = []
        results: list[ProbeResult] = []
        for pod in pods:
            for container in pod.containers():
                for probe_name in which:
                    probe = container.get(probe_name)
                    if not probe:
                        continue
                    kind, spec = kube.probe_target(probe, container)
                    timeout = float(probe.get("timeoutSeconds", 1))
                    where = {"pod": pod.name, "container": container["name"], "probe": probe_name, "kind": kind}
                    if kind == "exec":
                        done = self.podman("exec", self.container_name(pod, container), *spec["command"],
                                           check=False, timeout=timeout + 5)  # fmt: skip
                        detail = f"exit {done.returncode} {(done.stdout + done.stderr).strip()[-200:]}"
                        results.append(ProbeResult(**where, ok=done.returncode == 0, detail=detail))
                    else:
                        asks.append({**where, "ip": self.ips[pod.name], "spec": spec, "timeout_s": timeout})
        if asks:
            done = self.net.client_run(PROBER, input=json.dumps(asks), timeout=60 + 5 * len(asks))
            if done.returncode != 0:
                raise RuntimeError(f"prober failed: {done.stderr[-2000:]}")
            for line in done.stdout.splitlines():
                results.append(ProbeResult(**json.loads(line)))
        return results

    def wait_ready(self, pods: Sequence[kube.Pod] | None = None, *, timeout_s: float) -> float:
        """Wait until every readiness probe of ``pods`` passes; returns the seconds taken."""
        started = time.monotonic()
        failing: list[ProbeResult] = []
        while time.monotonic() - started < timeout_s:
            failing = [r for r in self.probes(pods, which=("readinessProbe",)) if not r.ok]
            if not failing:
                return time.monotonic() - started
            time.sleep(2)
        details = "\n".join(f"  {r.pod}/{r.container} {r.kind}: {r.detail}" for r in failing)
        logs = "\n".join(f"--- {p}:\n{self.logs(self.work.pod(p))}" for p in sorted({r.pod for r in failing}))
        raise TimeoutError(f"not ready within {timeout_s:.0f} s:\n{details}\n{logs}")

    def client(self, argv: Sequence[str], *, timeout: float = 120, input: str | None = None) -> str:
        """Run a client program in the client namespace; its output, or an error with it."""
        done = self.net.client_run(argv, timeout=timeout, input=input)
        if done.returncode != 0:
            raise AssertionError(
                f"{shlex.join(argv)} exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n"
                f"--- stderr\n{done.stderr[-4000:]}"
            )
        return done.stdout

    # -- end ---------------------------------------------------------------------------

    def remove_containers(self) -> None:
        listed = self.podman("ps", "-a", "--filter", f"label=txmq-deploy={self.prefix}", "--format", "{{.Names}}",
                             check=False).stdout.split()  # fmt: skip
        if listed:
            self.podman("rm", "-f", "--time", "5", *listed, check=False, timeout=180)

    def close(self) -> None:
        self.remove_containers()
        self.net.close()
