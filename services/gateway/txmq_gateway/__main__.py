"""`python -m txmq_gateway [--flag value ...]`: run one gateway instance until SIGTERM/SIGINT."""

from __future__ import annotations

from collections.abc import Sequence

from txmq.v1 import common_pb2
from txmq_gateway.service import setup
from txmq_gateway.settings import GatewaySettings
from txmq_runtime.server import serve


def main(argv: Sequence[str] | None = None) -> None:
    serve(kind=common_pb2.SERVICE_KIND_GATEWAY, settings_cls=GatewaySettings, setup=setup, argv=argv)


if __name__ == "__main__":
    main()
