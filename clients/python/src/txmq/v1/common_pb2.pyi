from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FilterType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILTER_TYPE_UNSPECIFIED: _ClassVar[FilterType]
    FILTER_TYPE_TAG: _ClassVar[FilterType]
    FILTER_TYPE_SQL92: _ClassVar[FilterType]

class ServiceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SERVICE_KIND_UNSPECIFIED: _ClassVar[ServiceKind]
    SERVICE_KIND_STORE: _ClassVar[ServiceKind]
    SERVICE_KIND_TXCHECK: _ClassVar[ServiceKind]
    SERVICE_KIND_PULL: _ClassVar[ServiceKind]
    SERVICE_KIND_GATEWAY: _ClassVar[ServiceKind]
    SERVICE_KIND_STORE_REPLICA: _ClassVar[ServiceKind]
FILTER_TYPE_UNSPECIFIED: FilterType
FILTER_TYPE_TAG: FilterType
FILTER_TYPE_SQL92: FilterType
SERVICE_KIND_UNSPECIFIED: ServiceKind
SERVICE_KIND_STORE: ServiceKind
SERVICE_KIND_TXCHECK: ServiceKind
SERVICE_KIND_PULL: ServiceKind
SERVICE_KIND_GATEWAY: ServiceKind
SERVICE_KIND_STORE_REPLICA: ServiceKind

class Message(_message.Message):
    __slots__ = ("topic", "body", "tags", "keys", "properties", "unique_id", "flag", "queue_id", "born_timestamp_ms")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_ID_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: bytes
    tags: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    unique_id: str
    flag: int
    queue_id: int
    born_timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., unique_id: _Optional[str] = ..., flag: _Optional[int] = ..., queue_id: _Optional[int] = ..., born_timestamp_ms: _Optional[int] = ...) -> None: ...

class MessageView(_message.Message):
    __slots__ = ("message", "offset_msg_id", "queue_offset", "commit_log_offset", "store_size_bytes", "body_crc", "sys_flag", "born_host", "store_timestamp_ms", "store_host", "reconsume_times", "prepared_transaction_offset", "store_id")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BODY_CRC_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    PREPARED_TRANSACTION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    message: Message
    offset_msg_id: str
    queue_offset: int
    commit_log_offset: int
    store_size_bytes: int
    body_crc: int
    sys_flag: int
    born_host: str
    store_timestamp_ms: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    store_id: str
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., offset_msg_id: _Optional[str] = ..., queue_offset: _Optional[int] = ..., commit_log_offset: _Optional[int] = ..., store_size_bytes: _Optional[int] = ..., body_crc: _Optional[int] = ..., sys_flag: _Optional[int] = ..., born_host: _Optional[str] = ..., store_timestamp_ms: _Optional[int] = ..., store_host: _Optional[str] = ..., reconsume_times: _Optional[int] = ..., prepared_transaction_offset: _Optional[int] = ..., store_id: _Optional[str] = ...) -> None: ...

class MessageQueue(_message.Message):
    __slots__ = ("topic", "store_id", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    store_id: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., store_id: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class FilterExpression(_message.Message):
    __slots__ = ("type", "expression")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    type: FilterType
    expression: str
    def __init__(self, type: _Optional[_Union[FilterType, str]] = ..., expression: _Optional[str] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("name", "read_queue_nums", "write_queue_nums", "perm", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SubscriptionGroupConfig(_message.Message):
    __slots__ = ("group_name", "consume_enable", "consume_broadcast_enable", "retry_max_times", "retry_queue_nums")
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    CONSUME_ENABLE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_BROADCAST_ENABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    RETRY_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    consume_enable: bool
    consume_broadcast_enable: bool
    retry_max_times: int
    retry_queue_nums: int
    def __init__(self, group_name: _Optional[str] = ..., consume_enable: _Optional[bool] = ..., consume_broadcast_enable: _Optional[bool] = ..., retry_max_times: _Optional[int] = ..., retry_queue_nums: _Optional[int] = ...) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ("kind", "instance_id", "address", "started_at_ms", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    kind: ServiceKind
    instance_id: str
    address: str
    started_at_ms: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, kind: _Optional[_Union[ServiceKind, str]] = ..., instance_id: _Optional[str] = ..., address: _Optional[str] = ..., started_at_ms: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...
