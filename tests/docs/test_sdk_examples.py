"""The runnable examples of docs/sdk.md, run as a reader would run them (a script of
their own, in a fresh interpreter) against the session's local cluster. Only the
endpoint and the topic are changed: to the cluster's and to a topic of the test's own."""

from __future__ import annotations

import subprocess
import sys

from support import LocalCluster
from support.topics import Topics, consume_all
from support.waiting import wait_until

from txmq import PullConsumer

from .markdown import DOCS, code_blocks, section

SDK = DOCS / "sdk.md"
ENDPOINT = '"127.0.0.1:10911"'


def example(heading: str, **replace: str) -> str:
    """The first Python block under ``heading``, each ``replace`` key (a literal of the
    example, found exactly once) put in place of its value."""
    [code, *_] = code_blocks(section(SDK, heading), "python")
    for old, new in replace.items():
        assert code.count(old) == 1, f"{old} is not in the example once:\n{code}"
        code = code.replace(old, new)
    return code


def run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_transactional_example_commits_its_message(txmq_cluster: LocalCluster, new_topic: Topics) -> None:
    topic = new_topic(queues=1)
    code = example("## Transactional messages", **{ENDPOINT: repr(txmq_cluster.bootstrap), '"orders"': repr(topic)})
    status, state, transaction_id = run(code).split()
    assert (status, state) == ("OK", "COMMIT")
    with PullConsumer("docs-sdk-example", txmq_cluster.bootstrap) as consumer:
        [committed] = wait_until(lambda: consume_all(consumer, topic), what="the committed message visible")
    assert committed.body == b'{"id": 42}' and committed.msg_id == transaction_id
