"""A three-member etcd cluster on real processes, for faults that take etcd's leader
down together with a store group's leader (RocketMQ #7689)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from support import ChildProcess, free_port, wait_serving

from txmq_cli.cluster import etcd_binary, etcd_serving_line


class EtcdCluster:
    def __init__(self, base_dir: Path, *, members: int = 3) -> None:
        self.host = "127.0.0.1"
        self.ports = [(free_port(), free_port()) for _ in range(members)]
        initial = ",".join(f"e{i}=http://{self.host}:{peer}" for i, (_, peer) in enumerate(self.ports))
        self.members: list[ChildProcess] = []
        for i, (client, peer) in enumerate(self.ports):
            client_url, peer_url = f"http://{self.host}:{client}", f"http://{self.host}:{peer}"
            self.members.append(
                ChildProcess(
                    name=f"etcd-e{i}",
                    argv=[
                        etcd_binary(),
                        "--name",
                        f"e{i}",
                        "--data-dir",
                        str(base_dir / f"etcd-e{i}"),
                        "--listen-client-urls",
                        client_url,
                        "--advertise-client-urls",
                        client_url,
                        "--listen-peer-urls",
                        peer_url,
                        "--initial-advertise-peer-urls",
                        peer_url,
                        "--initial-cluster",
                        initial,
                        "--initial-cluster-token",
                        base_dir.name,
                        "--initial-cluster-state",
                        "new",
                        "--heartbeat-interval",
                        "50",
                        "--election-timeout",
                        "500",
                        "--log-level",
                        "info",
                    ],
                    log_path=base_dir / f"etcd-e{i}.log",
                    own_session=True,
                )
            )

    @property
    def endpoints(self) -> str:
        return ",".join(f"{self.host}:{client}" for client, _ in self.ports)

    def endpoint(self, i: int) -> str:
        return f"{self.host}:{self.ports[i][0]}"

    def start(self) -> None:
        for member in self.members:
            member.spawn()
        for i in range(len(self.members)):
            self.wait(i)

    def wait(self, i: int) -> None:
        self.members[i].wait_log_line(etcd_serving_line(self.endpoint(i)), timeout_s=30)
        wait_serving(self.endpoint(i), process=self.members[i], timeout_s=30)

    def leader(self) -> int:
        """The index of the member that leads etcd's raft."""
        for i in range(len(self.members)):
            if not self.members[i].running():
                continue
            try:
                request = urllib.request.Request(
                    f"http://{self.endpoint(i)}/v3/maintenance/status", data=b"{}", method="POST"
                )
                with urllib.request.urlopen(request, timeout=2) as response:
                    status = json.load(response)
            except OSError:
                continue
            if status.get("leader") and status["leader"] == status["header"]["member_id"]:
                return i
        raise AssertionError("no etcd member says it leads")

    def kill(self, i: int) -> None:
        self.members[i].kill()

    def restart(self, i: int) -> None:
        self.members[i].spawn()
        self.wait(i)

    def stop(self) -> None:
        for member in self.members:
            if member.running():
                member.terminate(timeout_s=10)
