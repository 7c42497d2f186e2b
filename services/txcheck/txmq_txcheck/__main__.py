"""`python -m txmq_txcheck [--flag value ...]`: run one txcheck instance until SIGTERM/SIGINT."""

from __future__ import annotations

from collections.abc import Sequence

from txmq.v1 import common_pb2
from txmq_runtime.server import serve
from txmq_txcheck.service import setup
from txmq_txcheck.settings import TxcheckSettings


def main(argv: Sequence[str] | None = None) -> None:
    serve(kind=common_pb2.SERVICE_KIND_TXCHECK, settings_cls=TxcheckSettings, setup=setup, argv=argv)


if __name__ == "__main__":
    main()
