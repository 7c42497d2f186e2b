"""The asyncio example of docs/sdk.md ("The asyncio client"), run as a reader would run
it (a script of its own) against the session cluster; only the endpoint and the topic
are changed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from docs.markdown import DOCS, code_blocks, section
from support import LocalCluster


def test_the_asyncio_example_runs_as_written(txmq_cluster: LocalCluster, topic: str) -> None:
    [code, *_] = code_blocks(section(DOCS / "sdk.md", "## The asyncio client"), "python")
    code = code.replace('"127.0.0.1:10911"', repr(txmq_cluster.bootstrap)).replace('"orders"', repr(topic))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[b'a', b'b', b'{\"id\": 42}']\n"


def test_the_fastapi_example_runs_as_written(txmq_cluster: LocalCluster, topic: str) -> None:
    """The FastAPI service of docs/sdk.md, served by FastAPI's TestClient (its lifespan runs
    the clients on the app's loop): a POST sends an order, the consumer started in the
    lifespan receives it."""
    [_, code, *_] = code_blocks(section(DOCS / "sdk.md", "## The asyncio client"), "python")
    code = code.replace('"127.0.0.1:10911"', repr(txmq_cluster.bootstrap)).replace('"orders"', repr(topic))
    code += textwrap.dedent(
        """
        import time

        from fastapi.testclient import TestClient

        with TestClient(app) as client:
            ids = [client.post(f"/orders/{n}").json()["msg_id"] for n in (1, 2)]
            deadline = time.monotonic() + 30
            while len(audited) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        print(sorted(audited), len(set(ids)))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[b'{\"id\": 1}', b'{\"id\": 2}'] 2\n"
