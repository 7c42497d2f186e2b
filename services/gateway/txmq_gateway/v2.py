"""The ``apache.rocketmq.v2`` protocol (apache/rocketmq-apis), as generated modules.

txmq does not keep a copy of RocketMQ's protos: the gateway imports the modules that
Apache generates and ships in the official Python client (``rocketmq-python-client``,
pinned in pyproject.toml). One copy per process: a process that also generated its own
``apache.rocketmq.v2`` modules would register the same proto files twice, which is why
tests run the official client in a separate process.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as svc
from rocketmq.grpc_protocol import service_pb2_grpc as svc_grpc  # noqa: F401

Code = pb.Code
SERVICE_NAME = svc.DESCRIPTOR.services_by_name["MessagingService"].full_name
