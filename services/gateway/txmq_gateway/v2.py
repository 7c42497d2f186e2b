"""The ``apache.rocketmq.v2`` protocol (apache/rocketmq-apis), as generated modules.

txmq does not keep a copy of RocketMQ's protos: the gateway imports the modules that
Apache generates and ships in the official Python client (``rocketmq-python-client``,
pinned in pyproject.toml). One copy per process: a process that also generated its own
``apache.rocketmq.v2`` modules would register the same proto files twice, which is why
tests run the official client in a separate process.
"""

from __future__ import annotations

import os


def _client_package_home() -> None:
    """Importing the client package creates ``~/logs/rocketmq_python`` (and opens a log
    file there): on a read-only HOME that import fails with an OSError deep inside it.
    Say so in one line instead, as an ImportError the entry point reports."""
    path = os.path.expanduser("~/logs/rocketmq_python")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ImportError(
            f"the RocketMQ client package (rocketmq-python-client) creates {path} when it is imported: "
            f"{exc.strerror}; set HOME to a writable directory (HOME={os.environ.get('HOME', '')!r})"
        ) from None


_client_package_home()

from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as svc  # noqa: E402
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc  # noqa: E402, F401

Code = pb.Code
SERVICE_NAME = svc.DESCRIPTOR.services_by_name["MessagingService"].full_name
