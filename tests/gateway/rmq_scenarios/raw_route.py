"""Raw v2 QueryRoute and Heartbeat calls through the official package's stubs, signed the
way the official client signs them (``rocketmq.v5.util.Signature``) with the given
access key / secret. Shows the exact v2 status code the gateway answers (the high-level
client hides a refused route look-up behind a generic exception).

Prints ``answer`` per call (op, grpc status, v2 code, message, the routed endpoints),
then ``done``.
"""

from __future__ import annotations

import grpc
from _common import config, emit, parser
from rocketmq.grpc_protocol import (
    ClientType,
    HeartbeatRequest,
    MessagingServiceStub,
    QueryRouteRequest,
)
from rocketmq.v5.util import ClientId, Signature


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--topic", required=True)
    args = p.parse_args()
    cfg = config(args)
    client_id = ClientId().client_id

    route = QueryRouteRequest()
    route.topic.name = args.topic
    route.endpoints.CopyFrom(cfg.rpc_endpoints.endpoints)
    heartbeat = HeartbeatRequest(client_type=ClientType.PRODUCER)

    with grpc.insecure_channel(args.endpoint) as channel:
        stub = MessagingServiceStub(channel)
        for op, call, req in (("QueryRoute", stub.QueryRoute, route), ("Heartbeat", stub.Heartbeat, heartbeat)):
            try:
                res = call(req, metadata=Signature.metadata(cfg, client_id), timeout=args.request_timeout)
            except grpc.RpcError as exc:
                emit("answer", op=op, grpc_status=exc.code().name, details=exc.details())
                continue
            fields = {}
            if op == "QueryRoute":
                fields["endpoints"] = sorted(
                    {f"{a.host}:{a.port}" for q in res.message_queues for a in q.broker.endpoints.addresses}
                )
                fields["queues"] = len(res.message_queues)
            emit("answer", op=op, grpc_status="OK", code=res.status.code, status_message=res.status.message, **fields)
    emit("done")


if __name__ == "__main__":
    main()
