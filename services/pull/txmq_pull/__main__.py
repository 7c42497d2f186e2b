"""`python -m txmq_pull [--flag value ...]`: run one pull instance until SIGTERM/SIGINT."""

from __future__ import annotations

from collections.abc import Sequence

from txmq.v1 import common_pb2
from txmq_pull.service import setup
from txmq_pull.settings import PullSettings
from txmq_runtime.server import serve


def main(argv: Sequence[str] | None = None) -> None:
    serve(kind=common_pb2.SERVICE_KIND_PULL, settings_cls=PullSettings, setup=setup, argv=argv)


if __name__ == "__main__":
    main()
