"""`python -m txmq_store [--flag value ...]`: run one store node until SIGTERM/SIGINT."""

from __future__ import annotations

from collections.abc import Sequence

from txmq.v1 import common_pb2
from txmq_runtime.server import serve
from txmq_store.service import setup
from txmq_store.settings import StoreSettings


def main(argv: Sequence[str] | None = None) -> None:
    serve(kind=common_pb2.SERVICE_KIND_STORE, settings_cls=StoreSettings, setup=setup, argv=argv)


if __name__ == "__main__":
    main()
