from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CODE_UNSPECIFIED: _ClassVar[Code]
    CODE_OK: _ClassVar[Code]
    CODE_BAD_REQUEST: _ClassVar[Code]
    CODE_ILLEGAL_TOPIC: _ClassVar[Code]
    CODE_ILLEGAL_QUEUE_ID: _ClassVar[Code]
    CODE_ILLEGAL_OFFSET: _ClassVar[Code]
    CODE_ILLEGAL_MESSAGE: _ClassVar[Code]
    CODE_ILLEGAL_CONSUMER_GROUP: _ClassVar[Code]
    CODE_ILLEGAL_PRODUCER_GROUP: _ClassVar[Code]
    CODE_ILLEGAL_FILTER_EXPRESSION: _ClassVar[Code]
    CODE_ILLEGAL_MESSAGE_ID: _ClassVar[Code]
    CODE_ILLEGAL_TRANSACTION_ID: _ClassVar[Code]
    CODE_ILLEGAL_ARGUMENT: _ClassVar[Code]
    CODE_ILLEGAL_DELIVERY_TIME: _ClassVar[Code]
    CODE_MESSAGE_TYPE_CONFLICT: _ClassVar[Code]
    CODE_ILLEGAL_PRIORITY: _ClassVar[Code]
    CODE_UNAUTHENTICATED: _ClassVar[Code]
    CODE_INVALID_CREDENTIALS: _ClassVar[Code]
    CODE_REQUEST_EXPIRED: _ClassVar[Code]
    CODE_FORBIDDEN: _ClassVar[Code]
    CODE_TOPIC_NOT_WRITABLE: _ClassVar[Code]
    CODE_TOPIC_NOT_READABLE: _ClassVar[Code]
    CODE_SYSTEM_TOPIC: _ClassVar[Code]
    CODE_CONSUME_DISABLED: _ClassVar[Code]
    CODE_SERVICE_NOT_READABLE: _ClassVar[Code]
    CODE_SERVICE_NOT_WRITABLE: _ClassVar[Code]
    CODE_TRANSACTION_NOT_ALLOWED: _ClassVar[Code]
    CODE_SQL92_NOT_ENABLED: _ClassVar[Code]
    CODE_ACCESS_DENIED: _ClassVar[Code]
    CODE_NOT_FOUND: _ClassVar[Code]
    CODE_TOPIC_NOT_FOUND: _ClassVar[Code]
    CODE_SUBSCRIPTION_GROUP_NOT_FOUND: _ClassVar[Code]
    CODE_MESSAGE_NOT_FOUND: _ClassVar[Code]
    CODE_TRANSACTION_NOT_FOUND: _ClassVar[Code]
    CODE_STORE_NOT_FOUND: _ClassVar[Code]
    CODE_CONSUME_OFFSET_NOT_FOUND: _ClassVar[Code]
    CODE_USER_NOT_FOUND: _ClassVar[Code]
    CODE_REPLICA_NOT_FOUND: _ClassVar[Code]
    CODE_CONFLICT: _ClassVar[Code]
    CODE_TOPIC_ALREADY_EXISTS: _ClassVar[Code]
    CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS: _ClassVar[Code]
    CODE_TRANSACTION_ALREADY_RESOLVED: _ClassVar[Code]
    CODE_TRANSACTION_MISMATCH: _ClassVar[Code]
    CODE_TRANSACTION_EXPIRED: _ClassVar[Code]
    CODE_FENCED: _ClassVar[Code]
    CODE_USER_ALREADY_EXISTS: _ClassVar[Code]
    CODE_SUBSCRIPTION_CONFLICT: _ClassVar[Code]
    CODE_REPLICA_BEHIND_LOG_START: _ClassVar[Code]
    CODE_GROUP_HAS_LEADER: _ClassVar[Code]
    CODE_QUEUE_LOCKED: _ClassVar[Code]
    CODE_MESSAGE_ALREADY_DELIVERED: _ClassVar[Code]
    CODE_PAYLOAD_TOO_LARGE: _ClassVar[Code]
    CODE_MESSAGE_BODY_TOO_LARGE: _ClassVar[Code]
    CODE_MESSAGE_PROPERTIES_TOO_LARGE: _ClassVar[Code]
    CODE_BATCH_TOO_LARGE: _ClassVar[Code]
    CODE_TOO_MANY_REQUESTS: _ClassVar[Code]
    CODE_DISK_FULL: _ClassVar[Code]
    CODE_QUOTA_EXCEEDED: _ClassVar[Code]
    CODE_INTERNAL_ERROR: _ClassVar[Code]
    CODE_STORAGE_ERROR: _ClassVar[Code]
    CODE_DATA_CORRUPTED: _ClassVar[Code]
    CODE_NOT_IMPLEMENTED: _ClassVar[Code]
    CODE_UNAVAILABLE: _ClassVar[Code]
    CODE_SERVICE_NOT_READY: _ClassVar[Code]
    CODE_NO_LIVE_PRODUCER: _ClassVar[Code]
    CODE_NOT_LEADER: _ClassVar[Code]
    CODE_NOT_ENOUGH_REPLICAS: _ClassVar[Code]
    CODE_UPSTREAM_TIMEOUT: _ClassVar[Code]
CODE_UNSPECIFIED: Code
CODE_OK: Code
CODE_BAD_REQUEST: Code
CODE_ILLEGAL_TOPIC: Code
CODE_ILLEGAL_QUEUE_ID: Code
CODE_ILLEGAL_OFFSET: Code
CODE_ILLEGAL_MESSAGE: Code
CODE_ILLEGAL_CONSUMER_GROUP: Code
CODE_ILLEGAL_PRODUCER_GROUP: Code
CODE_ILLEGAL_FILTER_EXPRESSION: Code
CODE_ILLEGAL_MESSAGE_ID: Code
CODE_ILLEGAL_TRANSACTION_ID: Code
CODE_ILLEGAL_ARGUMENT: Code
CODE_ILLEGAL_DELIVERY_TIME: Code
CODE_MESSAGE_TYPE_CONFLICT: Code
CODE_ILLEGAL_PRIORITY: Code
CODE_UNAUTHENTICATED: Code
CODE_INVALID_CREDENTIALS: Code
CODE_REQUEST_EXPIRED: Code
CODE_FORBIDDEN: Code
CODE_TOPIC_NOT_WRITABLE: Code
CODE_TOPIC_NOT_READABLE: Code
CODE_SYSTEM_TOPIC: Code
CODE_CONSUME_DISABLED: Code
CODE_SERVICE_NOT_READABLE: Code
CODE_SERVICE_NOT_WRITABLE: Code
CODE_TRANSACTION_NOT_ALLOWED: Code
CODE_SQL92_NOT_ENABLED: Code
CODE_ACCESS_DENIED: Code
CODE_NOT_FOUND: Code
CODE_TOPIC_NOT_FOUND: Code
CODE_SUBSCRIPTION_GROUP_NOT_FOUND: Code
CODE_MESSAGE_NOT_FOUND: Code
CODE_TRANSACTION_NOT_FOUND: Code
CODE_STORE_NOT_FOUND: Code
CODE_CONSUME_OFFSET_NOT_FOUND: Code
CODE_USER_NOT_FOUND: Code
CODE_REPLICA_NOT_FOUND: Code
CODE_CONFLICT: Code
CODE_TOPIC_ALREADY_EXISTS: Code
CODE_SUBSCRIPTION_GROUP_ALREADY_EXISTS: Code
CODE_TRANSACTION_ALREADY_RESOLVED: Code
CODE_TRANSACTION_MISMATCH: Code
CODE_TRANSACTION_EXPIRED: Code
CODE_FENCED: Code
CODE_USER_ALREADY_EXISTS: Code
CODE_SUBSCRIPTION_CONFLICT: Code
CODE_REPLICA_BEHIND_LOG_START: Code
CODE_GROUP_HAS_LEADER: Code
CODE_QUEUE_LOCKED: Code
CODE_MESSAGE_ALREADY_DELIVERED: Code
CODE_PAYLOAD_TOO_LARGE: Code
CODE_MESSAGE_BODY_TOO_LARGE: Code
CODE_MESSAGE_PROPERTIES_TOO_LARGE: Code
CODE_BATCH_TOO_LARGE: Code
CODE_TOO_MANY_REQUESTS: Code
CODE_DISK_FULL: Code
CODE_QUOTA_EXCEEDED: Code
CODE_INTERNAL_ERROR: Code
CODE_STORAGE_ERROR: Code
CODE_DATA_CORRUPTED: Code
CODE_NOT_IMPLEMENTED: Code
CODE_UNAVAILABLE: Code
CODE_SERVICE_NOT_READY: Code
CODE_NO_LIVE_PRODUCER: Code
CODE_NOT_LEADER: Code
CODE_NOT_ENOUGH_REPLICAS: Code
CODE_UPSTREAM_TIMEOUT: Code

class ErrorDetail(_message.Message):
    __slots__ = ("code", "message", "retriable", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRIABLE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    retriable: bool
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ..., retriable: _Optional[bool] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...
