from txmq.v1 import auth_pb2 as _auth_pb2
from txmq.v1 import common_pb2 as _common_pb2
from txmq.v1 import errors_pb2 as _errors_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PullStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PULL_STATUS_UNSPECIFIED: _ClassVar[PullStatus]
    PULL_STATUS_FOUND: _ClassVar[PullStatus]
    PULL_STATUS_NO_NEW_MSG: _ClassVar[PullStatus]
    PULL_STATUS_NO_MATCHED_MSG: _ClassVar[PullStatus]
    PULL_STATUS_OFFSET_ILLEGAL: _ClassVar[PullStatus]
PULL_STATUS_UNSPECIFIED: PullStatus
PULL_STATUS_FOUND: PullStatus
PULL_STATUS_NO_NEW_MSG: PullStatus
PULL_STATUS_NO_MATCHED_MSG: PullStatus
PULL_STATUS_OFFSET_ILLEGAL: PullStatus

class PullMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "queue", "queue_offset", "max_messages", "filter", "suspend", "suspend_timeout_ms", "commit_offset", "client_id", "raw_records")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORDS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    queue: _common_pb2.MessageQueue
    queue_offset: int
    max_messages: int
    filter: _common_pb2.FilterExpression
    suspend: bool
    suspend_timeout_ms: int
    commit_offset: int
    client_id: str
    raw_records: bool
    def __init__(self, consumer_group: _Optional[str] = ..., queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., queue_offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., filter: _Optional[_Union[_common_pb2.FilterExpression, _Mapping]] = ..., suspend: _Optional[bool] = ..., suspend_timeout_ms: _Optional[int] = ..., commit_offset: _Optional[int] = ..., client_id: _Optional[str] = ..., raw_records: _Optional[bool] = ...) -> None: ...

class PullMessageResponse(_message.Message):
    __slots__ = ("status", "next_begin_offset", "min_offset", "max_offset", "messages", "records", "store_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageView]
    records: bytes
    store_id: str
    def __init__(self, status: _Optional[_Union[PullStatus, str]] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.MessageView, _Mapping]]] = ..., records: _Optional[bytes] = ..., store_id: _Optional[str] = ...) -> None: ...

class PullStreamRequest(_message.Message):
    __slots__ = ("request_id", "pull", "cancel")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    pull: PullMessageRequest
    cancel: bool
    def __init__(self, request_id: _Optional[int] = ..., pull: _Optional[_Union[PullMessageRequest, _Mapping]] = ..., cancel: _Optional[bool] = ...) -> None: ...

class PullStreamResponse(_message.Message):
    __slots__ = ("request_id", "pull", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    pull: PullMessageResponse
    error: _errors_pb2.ErrorDetail
    def __init__(self, request_id: _Optional[int] = ..., pull: _Optional[_Union[PullMessageResponse, _Mapping]] = ..., error: _Optional[_Union[_errors_pb2.ErrorDetail, _Mapping]] = ...) -> None: ...

class UpdateConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "queue", "offset", "client_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    queue: _common_pb2.MessageQueue
    offset: int
    client_id: str
    def __init__(self, consumer_group: _Optional[str] = ..., queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., offset: _Optional[int] = ..., client_id: _Optional[str] = ...) -> None: ...

class UpdateConsumerOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "queue")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    queue: _common_pb2.MessageQueue
    def __init__(self, consumer_group: _Optional[str] = ..., queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ...) -> None: ...

class QueryConsumerOffsetResponse(_message.Message):
    __slots__ = ("found", "offset")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    found: bool
    offset: int
    def __init__(self, found: _Optional[bool] = ..., offset: _Optional[int] = ...) -> None: ...

class ConsumerHeartbeatRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "topics", "leaving", "subscriptions")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    leaving: bool
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., leaving: _Optional[bool] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("topic", "filter")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    filter: _common_pb2.FilterExpression
    def __init__(self, topic: _Optional[str] = ..., filter: _Optional[_Union[_common_pb2.FilterExpression, _Mapping]] = ...) -> None: ...

class ConsumerHeartbeatResponse(_message.Message):
    __slots__ = ("consumer_ids",)
    CONSUMER_IDS_FIELD_NUMBER: _ClassVar[int]
    consumer_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, consumer_ids: _Optional[_Iterable[str]] = ...) -> None: ...
