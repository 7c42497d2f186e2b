"""A three-member etcd cluster on real processes, for faults that take etcd's leader
down together with a store group's leader (RocketMQ #7689)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from support import EtcdServer, free_port


class EtcdCluster:
    def __init__(self, base_dir: Path, *, members: int = 3) -> None:
        ports = [(free_port(), free_port()) for _ in range(members)]
        initial = ",".join(f"e{i}=http://127.0.0.1:{peer}" for i, (_, peer) in enumerate(ports))
        self.members = [
            EtcdServer(
                data_dir=base_dir / f"etcd-e{i}" / "data",
                log_path=base_dir / f"etcd-e{i}.log",
                client_port=client,
                peer_port=peer,
                heartbeat_interval_ms=50,
                election_timeout_ms=500,
                name=f"e{i}",
                initial_cluster=initial,
            )
            for i, (client, peer) in enumerate(ports)
        ]

    @property
    def endpoints(self) -> str:
        return ",".join(m.endpoint for m in self.members)

    def start(self) -> None:
        """Spawn every member, then wait for each; if one fails, stop the others (no
        process or log file outlives a failed start)."""
        try:
            for member in self.members:  # together: none is ready before a quorum is up
                member.process.spawn()
            for member in self.members:
                member.wait_serving()
        except BaseException:
            self.stop()
            raise

    def leader(self) -> int:
        """The index of the member that leads etcd's raft."""
        for i, member in enumerate(self.members):
            if not member.process.running():
                continue
            request = urllib.request.Request(f"http://{member.endpoint}/v3/maintenance/status", data=b"{}")
            try:
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
        self.members[i].start()

    def stop(self) -> None:
        for member in self.members:
            member.stop()
