from txmq.v1 import auth_pb2 as _auth_pb2
from txmq.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueryRouteRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("store_id", "store_address", "read_queue_nums", "write_queue_nums", "perm", "message_type")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    store_address: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    message_type: str
    def __init__(self, store_id: _Optional[str] = ..., store_address: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., message_type: _Optional[str] = ...) -> None: ...

class QueryRouteResponse(_message.Message):
    __slots__ = ("topic", "queues", "store_endpoints", "pull_endpoints", "txcheck_endpoints")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    STORE_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    PULL_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    TXCHECK_ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueData]
    store_endpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    pull_endpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    txcheck_endpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ..., store_endpoints: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ..., pull_endpoints: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ..., txcheck_endpoints: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ...) -> None: ...

class ListEndpointsRequest(_message.Message):
    __slots__ = ("kind",)
    KIND_FIELD_NUMBER: _ClassVar[int]
    kind: _common_pb2.ServiceKind
    def __init__(self, kind: _Optional[_Union[_common_pb2.ServiceKind, str]] = ...) -> None: ...

class ListEndpointsResponse(_message.Message):
    __slots__ = ("endpoints",)
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    endpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    def __init__(self, endpoints: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ...) -> None: ...
