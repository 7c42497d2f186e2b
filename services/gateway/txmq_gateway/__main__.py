"""`python -m txmq_gateway [--flag value ...]`: run one gateway instance until SIGTERM/SIGINT."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from txmq.v1 import common_pb2
from txmq_runtime.server import serve


def main(argv: Sequence[str] | None = None) -> None:
    # Imported here: the gateway's modules import the RocketMQ client package, which can
    # fail at import (a read-only HOME: txmq_gateway.v2); that is one line, not a traceback.
    try:
        from txmq_gateway.service import setup
        from txmq_gateway.settings import GatewaySettings
    except ImportError as exc:
        print(f"txmq-gateway: cannot start: {exc}", file=sys.stderr)
        sys.exit(1)
    serve(kind=common_pb2.SERVICE_KIND_GATEWAY, settings_cls=GatewaySettings, setup=setup, argv=argv)


if __name__ == "__main__":
    main()
