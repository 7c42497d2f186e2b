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

class SendStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEND_STATUS_UNSPECIFIED: _ClassVar[SendStatus]
    SEND_STATUS_OK: _ClassVar[SendStatus]
    SEND_STATUS_FLUSH_DISK_TIMEOUT: _ClassVar[SendStatus]
    SEND_STATUS_FLUSH_REPLICA_TIMEOUT: _ClassVar[SendStatus]

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    DECISION_COMMIT: _ClassVar[Decision]
    DECISION_ROLLBACK: _ClassVar[Decision]

class RequeueAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REQUEUE_ACTION_UNSPECIFIED: _ClassVar[RequeueAction]
    REQUEUE_ACTION_CHECK: _ClassVar[RequeueAction]
    REQUEUE_ACTION_WAIT: _ClassVar[RequeueAction]
    REQUEUE_ACTION_IMMUNITY: _ClassVar[RequeueAction]
    REQUEUE_ACTION_DISCARD: _ClassVar[RequeueAction]

class GetMessageStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GET_MESSAGE_STATUS_UNSPECIFIED: _ClassVar[GetMessageStatus]
    GET_MESSAGE_STATUS_FOUND: _ClassVar[GetMessageStatus]
    GET_MESSAGE_STATUS_NO_MATCHED_MESSAGE: _ClassVar[GetMessageStatus]
    GET_MESSAGE_STATUS_MESSAGE_WAS_REMOVING: _ClassVar[GetMessageStatus]
    GET_MESSAGE_STATUS_OFFSET_FOUND_NULL: _ClassVar[GetMessageStatus]
    GET_MESSAGE_STATUS_OFFSET_OVERFLOW_BADLY: _ClassVar[GetMessageStatus]
    GET_MESSAGE_STATUS_OFFSET_OVERFLOW_ONE: _ClassVar[GetMessageStatus]
    GET_MESSAGE_STATUS_OFFSET_TOO_SMALL: _ClassVar[GetMessageStatus]
    GET_MESSAGE_STATUS_NO_MATCHED_LOGIC_QUEUE: _ClassVar[GetMessageStatus]
    GET_MESSAGE_STATUS_NO_MESSAGE_IN_QUEUE: _ClassVar[GetMessageStatus]
SEND_STATUS_UNSPECIFIED: SendStatus
SEND_STATUS_OK: SendStatus
SEND_STATUS_FLUSH_DISK_TIMEOUT: SendStatus
SEND_STATUS_FLUSH_REPLICA_TIMEOUT: SendStatus
DECISION_UNSPECIFIED: Decision
DECISION_COMMIT: Decision
DECISION_ROLLBACK: Decision
REQUEUE_ACTION_UNSPECIFIED: RequeueAction
REQUEUE_ACTION_CHECK: RequeueAction
REQUEUE_ACTION_WAIT: RequeueAction
REQUEUE_ACTION_IMMUNITY: RequeueAction
REQUEUE_ACTION_DISCARD: RequeueAction
GET_MESSAGE_STATUS_UNSPECIFIED: GetMessageStatus
GET_MESSAGE_STATUS_FOUND: GetMessageStatus
GET_MESSAGE_STATUS_NO_MATCHED_MESSAGE: GetMessageStatus
GET_MESSAGE_STATUS_MESSAGE_WAS_REMOVING: GetMessageStatus
GET_MESSAGE_STATUS_OFFSET_FOUND_NULL: GetMessageStatus
GET_MESSAGE_STATUS_OFFSET_OVERFLOW_BADLY: GetMessageStatus
GET_MESSAGE_STATUS_OFFSET_OVERFLOW_ONE: GetMessageStatus
GET_MESSAGE_STATUS_OFFSET_TOO_SMALL: GetMessageStatus
GET_MESSAGE_STATUS_NO_MATCHED_LOGIC_QUEUE: GetMessageStatus
GET_MESSAGE_STATUS_NO_MESSAGE_IN_QUEUE: GetMessageStatus

class SendResult(_message.Message):
    __slots__ = ("status", "msg_id", "offset_msg_id", "queue", "queue_offset", "commit_log_offset", "transaction_id", "duplicate", "deliver_at_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: _common_pb2.MessageQueue
    queue_offset: int
    commit_log_offset: int
    transaction_id: str
    duplicate: bool
    deliver_at_ms: int
    def __init__(self, status: _Optional[_Union[SendStatus, str]] = ..., msg_id: _Optional[str] = ..., offset_msg_id: _Optional[str] = ..., queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., queue_offset: _Optional[int] = ..., commit_log_offset: _Optional[int] = ..., transaction_id: _Optional[str] = ..., duplicate: _Optional[bool] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("message", "producer_group", "transaction_prepared")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_PREPARED_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.Message
    producer_group: str
    transaction_prepared: bool
    def __init__(self, message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., producer_group: _Optional[str] = ..., transaction_prepared: _Optional[bool] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: SendResult
    def __init__(self, result: _Optional[_Union[SendResult, _Mapping]] = ...) -> None: ...

class SendBatchRequest(_message.Message):
    __slots__ = ("messages", "producer_group", "transaction_prepared")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_PREPARED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    producer_group: str
    transaction_prepared: bool
    def __init__(self, messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ..., producer_group: _Optional[str] = ..., transaction_prepared: _Optional[bool] = ...) -> None: ...

class RecordFrame(_message.Message):
    __slots__ = ("sequence", "records", "producer_group", "transaction_prepared")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_PREPARED_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    records: bytes
    producer_group: str
    transaction_prepared: bool
    def __init__(self, sequence: _Optional[int] = ..., records: _Optional[bytes] = ..., producer_group: _Optional[str] = ..., transaction_prepared: _Optional[bool] = ...) -> None: ...

class RecordAck(_message.Message):
    __slots__ = ("sequence", "error", "status", "commit_log_offsets", "queue_offsets", "queue_ids", "offset_msg_id_prefix", "store_id", "duplicate_indexes", "deliver_at_ms")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_INDEXES_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    error: _errors_pb2.ErrorDetail
    status: SendStatus
    commit_log_offsets: _containers.RepeatedScalarFieldContainer[int]
    queue_offsets: _containers.RepeatedScalarFieldContainer[int]
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    offset_msg_id_prefix: str
    store_id: str
    duplicate_indexes: _containers.RepeatedScalarFieldContainer[int]
    deliver_at_ms: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, sequence: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorDetail, _Mapping]] = ..., status: _Optional[_Union[SendStatus, str]] = ..., commit_log_offsets: _Optional[_Iterable[int]] = ..., queue_offsets: _Optional[_Iterable[int]] = ..., queue_ids: _Optional[_Iterable[int]] = ..., offset_msg_id_prefix: _Optional[str] = ..., store_id: _Optional[str] = ..., duplicate_indexes: _Optional[_Iterable[int]] = ..., deliver_at_ms: _Optional[_Iterable[int]] = ...) -> None: ...

class SystemMessage(_message.Message):
    __slots__ = ("message", "sys_flag", "reconsume_times", "prepared_transaction_offset")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    PREPARED_TRANSACTION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.Message
    sys_flag: int
    reconsume_times: int
    prepared_transaction_offset: int
    def __init__(self, message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., sys_flag: _Optional[int] = ..., reconsume_times: _Optional[int] = ..., prepared_transaction_offset: _Optional[int] = ...) -> None: ...

class PutSystemMessagesRequest(_message.Message):
    __slots__ = ("messages", "producer_group", "fence")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[SystemMessage]
    producer_group: str
    fence: Fence
    def __init__(self, messages: _Optional[_Iterable[_Union[SystemMessage, _Mapping]]] = ..., producer_group: _Optional[str] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class Fence(_message.Message):
    __slots__ = ("epoch", "half_queue_id")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HALF_QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    half_queue_id: int
    def __init__(self, epoch: _Optional[int] = ..., half_queue_id: _Optional[int] = ...) -> None: ...

class TransactionDecision(_message.Message):
    __slots__ = ("commit_log_offset", "tran_state_table_offset", "transaction_id", "producer_group", "decision", "from_transaction_check", "acting_user", "acting_source")
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRAN_STATE_TABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    FROM_TRANSACTION_CHECK_FIELD_NUMBER: _ClassVar[int]
    ACTING_USER_FIELD_NUMBER: _ClassVar[int]
    ACTING_SOURCE_FIELD_NUMBER: _ClassVar[int]
    commit_log_offset: int
    tran_state_table_offset: int
    transaction_id: str
    producer_group: str
    decision: Decision
    from_transaction_check: bool
    acting_user: str
    acting_source: str
    def __init__(self, commit_log_offset: _Optional[int] = ..., tran_state_table_offset: _Optional[int] = ..., transaction_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., decision: _Optional[_Union[Decision, str]] = ..., from_transaction_check: _Optional[bool] = ..., acting_user: _Optional[str] = ..., acting_source: _Optional[str] = ...) -> None: ...

class DecideTransactionsRequest(_message.Message):
    __slots__ = ("decisions", "transaction_timeout_ms", "fence")
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[TransactionDecision]
    transaction_timeout_ms: int
    fence: Fence
    def __init__(self, decisions: _Optional[_Iterable[_Union[TransactionDecision, _Mapping]]] = ..., transaction_timeout_ms: _Optional[int] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class ProducerDecision(_message.Message):
    __slots__ = ("commit_log_offset", "tran_state_table_offset", "transaction_id", "producer_group", "decision", "from_transaction_check")
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRAN_STATE_TABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    FROM_TRANSACTION_CHECK_FIELD_NUMBER: _ClassVar[int]
    commit_log_offset: int
    tran_state_table_offset: int
    transaction_id: str
    producer_group: str
    decision: Decision
    from_transaction_check: bool
    def __init__(self, commit_log_offset: _Optional[int] = ..., tran_state_table_offset: _Optional[int] = ..., transaction_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., decision: _Optional[_Union[Decision, str]] = ..., from_transaction_check: _Optional[bool] = ...) -> None: ...

class RecallMessageRequest(_message.Message):
    __slots__ = ("topic", "commit_log_offset", "unique_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    commit_log_offset: int
    unique_id: str
    def __init__(self, topic: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., unique_id: _Optional[str] = ...) -> None: ...

class RecallMessageResponse(_message.Message):
    __slots__ = ("status", "unique_id", "deliver_at_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    status: SendStatus
    unique_id: str
    deliver_at_ms: int
    def __init__(self, status: _Optional[_Union[SendStatus, str]] = ..., unique_id: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class EndTransactionsRequest(_message.Message):
    __slots__ = ("decisions",)
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[ProducerDecision]
    def __init__(self, decisions: _Optional[_Iterable[_Union[ProducerDecision, _Mapping]]] = ...) -> None: ...

class DecisionResult(_message.Message):
    __slots__ = ("error", "decision", "first", "committed", "status")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorDetail
    decision: Decision
    first: bool
    committed: _common_pb2.MessageView
    status: SendStatus
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorDetail, _Mapping]] = ..., decision: _Optional[_Union[Decision, str]] = ..., first: _Optional[bool] = ..., committed: _Optional[_Union[_common_pb2.MessageView, _Mapping]] = ..., status: _Optional[_Union[SendStatus, str]] = ...) -> None: ...

class DecideTransactionsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DecisionResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DecisionResult, _Mapping]]] = ...) -> None: ...

class HalfAction(_message.Message):
    __slots__ = ("commit_log_offset", "action", "reason")
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    commit_log_offset: int
    action: RequeueAction
    reason: str
    def __init__(self, commit_log_offset: _Optional[int] = ..., action: _Optional[_Union[RequeueAction, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class RequeueHalvesRequest(_message.Message):
    __slots__ = ("actions", "fence")
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedCompositeFieldContainer[HalfAction]
    fence: Fence
    def __init__(self, actions: _Optional[_Iterable[_Union[HalfAction, _Mapping]]] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class HalfActionResult(_message.Message):
    __slots__ = ("error", "decided", "commit_log_offset", "queue_offset", "store_timestamp_ms", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DECIDED_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    error: _errors_pb2.ErrorDetail
    decided: Decision
    commit_log_offset: int
    queue_offset: int
    store_timestamp_ms: int
    properties: _containers.ScalarMap[str, str]
    def __init__(self, error: _Optional[_Union[_errors_pb2.ErrorDetail, _Mapping]] = ..., decided: _Optional[_Union[Decision, str]] = ..., commit_log_offset: _Optional[int] = ..., queue_offset: _Optional[int] = ..., store_timestamp_ms: _Optional[int] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RequeueHalvesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[HalfActionResult]
    def __init__(self, results: _Optional[_Iterable[_Union[HalfActionResult, _Mapping]]] = ...) -> None: ...

class SendBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResult, _Mapping]]] = ...) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "offset", "max_messages", "filter", "raw_records")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORDS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    filter: _common_pb2.FilterExpression
    raw_records: bool
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., filter: _Optional[_Union[_common_pb2.FilterExpression, _Mapping]] = ..., raw_records: _Optional[bool] = ...) -> None: ...

class GetMessageResponse(_message.Message):
    __slots__ = ("status", "next_begin_offset", "min_offset", "max_offset", "messages", "suggest_pulling_from_replica", "records", "store_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUGGEST_PULLING_FROM_REPLICA_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageView]
    suggest_pulling_from_replica: bool
    records: bytes
    store_id: str
    def __init__(self, status: _Optional[_Union[GetMessageStatus, str]] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.MessageView, _Mapping]]] = ..., suggest_pulling_from_replica: _Optional[bool] = ..., records: _Optional[bytes] = ..., store_id: _Optional[str] = ...) -> None: ...

class WatchArrivalsRequest(_message.Message):
    __slots__ = ("topics", "with_records")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    WITH_RECORDS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    with_records: bool
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., with_records: _Optional[bool] = ...) -> None: ...

class Arrival(_message.Message):
    __slots__ = ("topic", "queue_id", "queue_offset", "max_offset", "tag_code", "properties", "store_timestamp_ms", "record", "min_offset")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TAG_CODE_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    queue_offset: int
    max_offset: int
    tag_code: int
    properties: _containers.ScalarMap[str, str]
    store_timestamp_ms: int
    record: bytes
    min_offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., tag_code: _Optional[int] = ..., properties: _Optional[_Mapping[str, str]] = ..., store_timestamp_ms: _Optional[int] = ..., record: _Optional[bytes] = ..., min_offset: _Optional[int] = ...) -> None: ...

class ArrivalBatch(_message.Message):
    __slots__ = ("arrivals", "overflowed", "store_id")
    ARRIVALS_FIELD_NUMBER: _ClassVar[int]
    OVERFLOWED_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    arrivals: _containers.RepeatedCompositeFieldContainer[Arrival]
    overflowed: bool
    store_id: str
    def __init__(self, arrivals: _Optional[_Iterable[_Union[Arrival, _Mapping]]] = ..., overflowed: _Optional[bool] = ..., store_id: _Optional[str] = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("offset_msg_id", "commit_log_offset")
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset_msg_id: str
    commit_log_offset: int
    def __init__(self, offset_msg_id: _Optional[str] = ..., commit_log_offset: _Optional[int] = ...) -> None: ...

class ViewMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.MessageView
    def __init__(self, message: _Optional[_Union[_common_pb2.MessageView, _Mapping]] = ...) -> None: ...

class QueryMessagesRequest(_message.Message):
    __slots__ = ("topic", "key", "unique_id", "max_results", "begin_timestamp_ms", "end_timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    unique_id: str
    max_results: int
    begin_timestamp_ms: int
    end_timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., unique_id: _Optional[str] = ..., max_results: _Optional[int] = ..., begin_timestamp_ms: _Optional[int] = ..., end_timestamp_ms: _Optional[int] = ...) -> None: ...

class QueryMessagesResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageView]
    def __init__(self, messages: _Optional[_Iterable[_Union[_common_pb2.MessageView, _Mapping]]] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "last_store_timestamp_ms")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp_ms: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_store_timestamp_ms: _Optional[int] = ...) -> None: ...

class GetQueueOffsetsRequest(_message.Message):
    __slots__ = ("topic", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class GetQueueOffsetsResponse(_message.Message):
    __slots__ = ("topic", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class SearchOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class SearchOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class SendBackRequest(_message.Message):
    __slots__ = ("group", "commit_log_offset", "unique_id", "delay_level", "max_reconsume_times", "uncounted", "client_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_ID_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    UNCOUNTED_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    commit_log_offset: int
    unique_id: str
    delay_level: int
    max_reconsume_times: int
    uncounted: bool
    client_id: str
    def __init__(self, group: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., unique_id: _Optional[str] = ..., delay_level: _Optional[int] = ..., max_reconsume_times: _Optional[int] = ..., uncounted: _Optional[bool] = ..., client_id: _Optional[str] = ...) -> None: ...

class SendBackResponse(_message.Message):
    __slots__ = ("result", "dead_lettered", "reconsume_times")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    result: SendResult
    dead_lettered: bool
    reconsume_times: int
    def __init__(self, result: _Optional[_Union[SendResult, _Mapping]] = ..., dead_lettered: _Optional[bool] = ..., reconsume_times: _Optional[int] = ...) -> None: ...

class ResendDeadLettersRequest(_message.Message):
    __slots__ = ("group", "unique_ids")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_IDS_FIELD_NUMBER: _ClassVar[int]
    group: str
    unique_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., unique_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ResentDeadLetter(_message.Message):
    __slots__ = ("dead_letter_id", "commit_log_offset", "result")
    DEAD_LETTER_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    dead_letter_id: str
    commit_log_offset: int
    result: SendResult
    def __init__(self, dead_letter_id: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., result: _Optional[_Union[SendResult, _Mapping]] = ...) -> None: ...

class ResendDeadLettersResponse(_message.Message):
    __slots__ = ("resent",)
    RESENT_FIELD_NUMBER: _ClassVar[int]
    resent: _containers.RepeatedCompositeFieldContainer[ResentDeadLetter]
    def __init__(self, resent: _Optional[_Iterable[_Union[ResentDeadLetter, _Mapping]]] = ...) -> None: ...

class LockQueuesRequest(_message.Message):
    __slots__ = ("group", "client_id", "queues")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    def __init__(self, group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ...) -> None: ...

class LockQueuesResponse(_message.Message):
    __slots__ = ("locked", "lease_ms")
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    locked: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    lease_ms: int
    def __init__(self, locked: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class UnlockQueuesRequest(_message.Message):
    __slots__ = ("group", "client_id", "queues")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    def __init__(self, group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockQueuesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CommitConsumeOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "offset", "fence", "client_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    fence: Fence
    client_id: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ..., client_id: _Optional[str] = ...) -> None: ...

class CommitConsumeOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryConsumeOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class QueryConsumeOffsetResponse(_message.Message):
    __slots__ = ("found", "offset")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    found: bool
    offset: int
    def __init__(self, found: _Optional[bool] = ..., offset: _Optional[int] = ...) -> None: ...

class ListConsumeOffsetsRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class ConsumeOffset(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "offset", "min_offset", "max_offset", "updated_at_ms")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    min_offset: int
    max_offset: int
    updated_at_ms: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., updated_at_ms: _Optional[int] = ...) -> None: ...

class ListConsumeOffsetsResponse(_message.Message):
    __slots__ = ("offsets", "taken_at_ms")
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    TAKEN_AT_MS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumeOffset]
    taken_at_ms: int
    def __init__(self, offsets: _Optional[_Iterable[_Union[ConsumeOffset, _Mapping]]] = ..., taken_at_ms: _Optional[int] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: _common_pb2.TopicConfig
    def __init__(self, topic: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: _common_pb2.TopicConfig
    def __init__(self, topic: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class TopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: _common_pb2.TopicConfig
    def __init__(self, topic: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("include_system",)
    INCLUDE_SYSTEM_FIELD_NUMBER: _ClassVar[int]
    include_system: bool
    def __init__(self, include_system: _Optional[bool] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, topics: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class CreateSubscriptionGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: _common_pb2.SubscriptionGroupConfig
    def __init__(self, group: _Optional[_Union[_common_pb2.SubscriptionGroupConfig, _Mapping]] = ...) -> None: ...

class UpdateSubscriptionGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: _common_pb2.SubscriptionGroupConfig
    def __init__(self, group: _Optional[_Union[_common_pb2.SubscriptionGroupConfig, _Mapping]] = ...) -> None: ...

class DeleteSubscriptionGroupRequest(_message.Message):
    __slots__ = ("group_name",)
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    def __init__(self, group_name: _Optional[str] = ...) -> None: ...

class DeleteSubscriptionGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetSubscriptionGroupRequest(_message.Message):
    __slots__ = ("group_name",)
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    def __init__(self, group_name: _Optional[str] = ...) -> None: ...

class SubscriptionGroupResponse(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: _common_pb2.SubscriptionGroupConfig
    def __init__(self, group: _Optional[_Union[_common_pb2.SubscriptionGroupConfig, _Mapping]] = ...) -> None: ...

class ListSubscriptionGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSubscriptionGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[_common_pb2.SubscriptionGroupConfig]
    def __init__(self, groups: _Optional[_Iterable[_Union[_common_pb2.SubscriptionGroupConfig, _Mapping]]] = ...) -> None: ...

class GetStoreStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStoreStatusResponse(_message.Message):
    __slots__ = ("store_id", "flush_mode", "commit_log_min_offset", "commit_log_max_offset", "commit_log_flushed_offset", "dispatched_offset", "segment_count", "recovered_from_crash", "started_at_ms", "settings", "replica")
    class SettingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    FLUSH_MODE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    RECOVERED_FROM_CRASH_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    flush_mode: str
    commit_log_min_offset: int
    commit_log_max_offset: int
    commit_log_flushed_offset: int
    dispatched_offset: int
    segment_count: int
    recovered_from_crash: bool
    started_at_ms: int
    settings: _containers.ScalarMap[str, str]
    replica: ReplicaStatus
    def __init__(self, store_id: _Optional[str] = ..., flush_mode: _Optional[str] = ..., commit_log_min_offset: _Optional[int] = ..., commit_log_max_offset: _Optional[int] = ..., commit_log_flushed_offset: _Optional[int] = ..., dispatched_offset: _Optional[int] = ..., segment_count: _Optional[int] = ..., recovered_from_crash: _Optional[bool] = ..., started_at_ms: _Optional[int] = ..., settings: _Optional[_Mapping[str, str]] = ..., replica: _Optional[_Union[ReplicaStatus, _Mapping]] = ...) -> None: ...

class ElectReplicaRequest(_message.Message):
    __slots__ = ("store_id", "replica_id", "force")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    replica_id: str
    force: bool
    def __init__(self, store_id: _Optional[str] = ..., replica_id: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class ElectReplicaResponse(_message.Message):
    __slots__ = ("state", "log_end")
    STATE_FIELD_NUMBER: _ClassVar[int]
    LOG_END_FIELD_NUMBER: _ClassVar[int]
    state: StoreGroupState
    log_end: int
    def __init__(self, state: _Optional[_Union[StoreGroupState, _Mapping]] = ..., log_end: _Optional[int] = ...) -> None: ...

class EpochEntry(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class StoreGroupState(_message.Message):
    __slots__ = ("epoch", "leader", "leader_address", "in_sync", "epoch_start_offset", "min_in_sync", "changed_at_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    EPOCH_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    CHANGED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    leader: str
    leader_address: str
    in_sync: _containers.RepeatedScalarFieldContainer[str]
    epoch_start_offset: int
    min_in_sync: int
    changed_at_ms: int
    def __init__(self, epoch: _Optional[int] = ..., leader: _Optional[str] = ..., leader_address: _Optional[str] = ..., in_sync: _Optional[_Iterable[str]] = ..., epoch_start_offset: _Optional[int] = ..., min_in_sync: _Optional[int] = ..., changed_at_ms: _Optional[int] = ...) -> None: ...

class FollowerReport(_message.Message):
    __slots__ = ("store_id", "replica_id", "epoch", "log_end", "epochs", "segment_bytes", "consume_offsets_version", "config_version", "fences_version")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONSUME_OFFSETS_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    FENCES_VERSION_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    replica_id: str
    epoch: int
    log_end: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    segment_bytes: int
    consume_offsets_version: int
    config_version: int
    fences_version: int
    def __init__(self, store_id: _Optional[str] = ..., replica_id: _Optional[str] = ..., epoch: _Optional[int] = ..., log_end: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., segment_bytes: _Optional[int] = ..., consume_offsets_version: _Optional[int] = ..., config_version: _Optional[int] = ..., fences_version: _Optional[int] = ...) -> None: ...

class Shipment(_message.Message):
    __slots__ = ("epoch", "truncate_to", "epochs", "offset", "data", "high_watermark", "topics_json", "subscription_groups_json", "consume_offsets_json", "consume_offsets_version", "fences_json", "config_version", "fences_version")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_TO_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    TOPICS_JSON_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_GROUPS_JSON_FIELD_NUMBER: _ClassVar[int]
    CONSUME_OFFSETS_JSON_FIELD_NUMBER: _ClassVar[int]
    CONSUME_OFFSETS_VERSION_FIELD_NUMBER: _ClassVar[int]
    FENCES_JSON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    FENCES_VERSION_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    truncate_to: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    offset: int
    data: bytes
    high_watermark: int
    topics_json: bytes
    subscription_groups_json: bytes
    consume_offsets_json: bytes
    consume_offsets_version: int
    fences_json: bytes
    config_version: int
    fences_version: int
    def __init__(self, epoch: _Optional[int] = ..., truncate_to: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., high_watermark: _Optional[int] = ..., topics_json: _Optional[bytes] = ..., subscription_groups_json: _Optional[bytes] = ..., consume_offsets_json: _Optional[bytes] = ..., consume_offsets_version: _Optional[int] = ..., fences_json: _Optional[bytes] = ..., config_version: _Optional[int] = ..., fences_version: _Optional[int] = ...) -> None: ...

class GetReplicaStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReplicaProgress(_message.Message):
    __slots__ = ("replica_id", "log_end", "lag_bytes", "in_sync", "caught_up_ms_ago", "connected")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    CAUGHT_UP_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    log_end: int
    lag_bytes: int
    in_sync: bool
    caught_up_ms_ago: int
    connected: bool
    def __init__(self, replica_id: _Optional[str] = ..., log_end: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., in_sync: _Optional[bool] = ..., caught_up_ms_ago: _Optional[int] = ..., connected: _Optional[bool] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("store_id", "replica_id", "role", "epoch", "log_end", "high_watermark", "leader", "in_sync", "min_in_sync", "epochs", "followers", "needs_resync")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    MIN_IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    FOLLOWERS_FIELD_NUMBER: _ClassVar[int]
    NEEDS_RESYNC_FIELD_NUMBER: _ClassVar[int]
    store_id: str
    replica_id: str
    role: str
    epoch: int
    log_end: int
    high_watermark: int
    leader: str
    in_sync: _containers.RepeatedScalarFieldContainer[str]
    min_in_sync: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochEntry]
    followers: _containers.RepeatedCompositeFieldContainer[ReplicaProgress]
    needs_resync: bool
    def __init__(self, store_id: _Optional[str] = ..., replica_id: _Optional[str] = ..., role: _Optional[str] = ..., epoch: _Optional[int] = ..., log_end: _Optional[int] = ..., high_watermark: _Optional[int] = ..., leader: _Optional[str] = ..., in_sync: _Optional[_Iterable[str]] = ..., min_in_sync: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochEntry, _Mapping]]] = ..., followers: _Optional[_Iterable[_Union[ReplicaProgress, _Mapping]]] = ..., needs_resync: _Optional[bool] = ...) -> None: ...
