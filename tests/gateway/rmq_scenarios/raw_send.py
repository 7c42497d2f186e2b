"""Raw v2 SendMessage calls through the official package's stubs (what a client retry
looks like on the wire): the same message, same ``message_id``, sent ``--repeat``
times; then, with ``--also-new-id``, one more copy under a fresh message id (a new
message, which must be stored). Calls are signed the way the official client signs
them (``rocketmq.v5.util.Signature``).

Prints ``answer`` per call (attempt, message_id, grpc status, v2 status code and
message, the entries' message_id / offset / transaction_id), then ``done``.
"""

from __future__ import annotations

import time

import grpc
from _common import config, emit, parser
from rocketmq.grpc_protocol import (
    Encoding,
    MessageType,
    MessagingServiceStub,
    SendMessageRequest,
)
from rocketmq.v5.util import ClientId, MessageIdCodec, Signature


def request(topic: str, message_id: str, body: bytes, key: str, tag: str) -> SendMessageRequest:
    req = SendMessageRequest()
    msg = req.messages.add()
    msg.topic.name = topic
    msg.body = body
    msg.system_properties.tag = tag
    msg.system_properties.keys.append(key)
    msg.system_properties.message_id = message_id
    msg.system_properties.message_type = MessageType.NORMAL
    msg.system_properties.born_timestamp.seconds = int(time.time())
    msg.system_properties.born_host = "127.0.0.1"
    msg.system_properties.body_encoding = Encoding.IDENTITY
    msg.user_properties["scenario"] = "dedupe"
    return req


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--topic", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--tag", default="dedupe")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--also-new-id", action="store_true")
    args = p.parse_args()
    cfg = config(args)
    client_id = ClientId().client_id
    codec = MessageIdCodec()
    same_id = codec.next_message_id()
    calls = [same_id] * args.repeat + ([codec.next_message_id()] if args.also_new_id else [])

    with grpc.insecure_channel(args.endpoint) as channel:
        stub = MessagingServiceStub(channel)
        for attempt, message_id in enumerate(calls, start=1):
            req = request(args.topic, message_id, b"dedupe-body", args.key, args.tag)
            try:
                res = stub.SendMessage(req, metadata=Signature.metadata(cfg, client_id), timeout=args.request_timeout)
            except grpc.RpcError as exc:
                emit(
                    "answer", attempt=attempt, message_id=message_id, grpc_status=exc.code().name, details=exc.details()
                )
                continue
            emit(
                "answer",
                attempt=attempt,
                message_id=message_id,
                grpc_status="OK",
                code=res.status.code,
                status_message=res.status.message,
                entries=[
                    {
                        "code": e.status.code,
                        "message_id": e.message_id,
                        "offset": e.offset,
                        "transaction_id": e.transaction_id,
                    }
                    for e in res.entries
                ],
            )
    emit("done")


if __name__ == "__main__":
    main()
