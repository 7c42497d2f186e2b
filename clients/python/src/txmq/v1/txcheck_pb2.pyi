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

class TransactionResolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_RESOLUTION_UNSPECIFIED: _ClassVar[TransactionResolution]
    TRANSACTION_RESOLUTION_COMMIT: _ClassVar[TransactionResolution]
    TRANSACTION_RESOLUTION_ROLLBACK: _ClassVar[TransactionResolution]
    TRANSACTION_RESOLUTION_UNKNOWN: _ClassVar[TransactionResolution]
TRANSACTION_RESOLUTION_UNSPECIFIED: TransactionResolution
TRANSACTION_RESOLUTION_COMMIT: TransactionResolution
TRANSACTION_RESOLUTION_ROLLBACK: TransactionResolution
TRANSACTION_RESOLUTION_UNKNOWN: TransactionResolution

class DeliverCheckRequest(_message.Message):
    __slots__ = ("channel_key", "check", "more_checks")
    CHANNEL_KEY_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    MORE_CHECKS_FIELD_NUMBER: _ClassVar[int]
    channel_key: str
    check: CheckTransactionState
    more_checks: _containers.RepeatedCompositeFieldContainer[CheckTransactionState]
    def __init__(self, channel_key: _Optional[str] = ..., check: _Optional[_Union[CheckTransactionState, _Mapping]] = ..., more_checks: _Optional[_Iterable[_Union[CheckTransactionState, _Mapping]]] = ...) -> None: ...

class DeliverCheckResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResumeTransactionRequest(_message.Message):
    __slots__ = ("transaction_id", "store_id")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    store_id: str
    def __init__(self, transaction_id: _Optional[str] = ..., store_id: _Optional[str] = ...) -> None: ...

class ResumeTransactionResponse(_message.Message):
    __slots__ = ("half",)
    HALF_FIELD_NUMBER: _ClassVar[int]
    half: _common_pb2.MessageView
    def __init__(self, half: _Optional[_Union[_common_pb2.MessageView, _Mapping]] = ...) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("producer_group", "transaction_id", "commit_log_offset", "tran_state_table_offset", "resolution", "from_transaction_check", "store_id", "forwarded", "request_id")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRAN_STATE_TABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    FROM_TRANSACTION_CHECK_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    transaction_id: str
    commit_log_offset: int
    tran_state_table_offset: int
    resolution: TransactionResolution
    from_transaction_check: bool
    store_id: str
    forwarded: bool
    request_id: int
    def __init__(self, producer_group: _Optional[str] = ..., transaction_id: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., tran_state_table_offset: _Optional[int] = ..., resolution: _Optional[_Union[TransactionResolution, str]] = ..., from_transaction_check: _Optional[bool] = ..., store_id: _Optional[str] = ..., forwarded: _Optional[bool] = ..., request_id: _Optional[int] = ...) -> None: ...

class EndTransactionResult(_message.Message):
    __slots__ = ("request_id", "error", "response")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    error: _errors_pb2.ErrorDetail
    response: EndTransactionResponse
    def __init__(self, request_id: _Optional[int] = ..., error: _Optional[_Union[_errors_pb2.ErrorDetail, _Mapping]] = ..., response: _Optional[_Union[EndTransactionResponse, _Mapping]] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ("committed",)
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    committed: _common_pb2.MessageView
    def __init__(self, committed: _Optional[_Union[_common_pb2.MessageView, _Mapping]] = ...) -> None: ...

class ProducerHello(_message.Message):
    __slots__ = ("producer_group", "client_id", "accepts_check_batches")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_CHECK_BATCHES_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    client_id: str
    accepts_check_batches: bool
    def __init__(self, producer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., accepts_check_batches: _Optional[bool] = ...) -> None: ...

class EndTransactionBatch(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[EndTransactionRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[EndTransactionRequest, _Mapping]]] = ...) -> None: ...

class ProducerCommand(_message.Message):
    __slots__ = ("hello", "end_transaction", "end_transactions")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    END_TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    END_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    hello: ProducerHello
    end_transaction: EndTransactionRequest
    end_transactions: EndTransactionBatch
    def __init__(self, hello: _Optional[_Union[ProducerHello, _Mapping]] = ..., end_transaction: _Optional[_Union[EndTransactionRequest, _Mapping]] = ..., end_transactions: _Optional[_Union[EndTransactionBatch, _Mapping]] = ...) -> None: ...

class CheckTransactionState(_message.Message):
    __slots__ = ("message", "transaction_id", "commit_log_offset", "tran_state_table_offset", "store_id")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TRAN_STATE_TABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.MessageView
    transaction_id: str
    commit_log_offset: int
    tran_state_table_offset: int
    store_id: str
    def __init__(self, message: _Optional[_Union[_common_pb2.MessageView, _Mapping]] = ..., transaction_id: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., tran_state_table_offset: _Optional[int] = ..., store_id: _Optional[str] = ...) -> None: ...

class CheckTransactionBatch(_message.Message):
    __slots__ = ("checks",)
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    checks: _containers.RepeatedCompositeFieldContainer[CheckTransactionState]
    def __init__(self, checks: _Optional[_Iterable[_Union[CheckTransactionState, _Mapping]]] = ...) -> None: ...

class ServerCommand(_message.Message):
    __slots__ = ("check", "check_batch", "end_result")
    CHECK_FIELD_NUMBER: _ClassVar[int]
    CHECK_BATCH_FIELD_NUMBER: _ClassVar[int]
    END_RESULT_FIELD_NUMBER: _ClassVar[int]
    check: CheckTransactionState
    check_batch: CheckTransactionBatch
    end_result: EndTransactionResult
    def __init__(self, check: _Optional[_Union[CheckTransactionState, _Mapping]] = ..., check_batch: _Optional[_Union[CheckTransactionBatch, _Mapping]] = ..., end_result: _Optional[_Union[EndTransactionResult, _Mapping]] = ...) -> None: ...

class QueryTransactionRequest(_message.Message):
    __slots__ = ("transaction_id",)
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    def __init__(self, transaction_id: _Optional[str] = ...) -> None: ...

class TransactionEvent(_message.Message):
    __slots__ = ("at_ms", "kind", "detail")
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    at_ms: int
    kind: str
    detail: str
    def __init__(self, at_ms: _Optional[int] = ..., kind: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class QueryTransactionResponse(_message.Message):
    __slots__ = ("transaction_id", "producer_group", "resolution", "timeline", "half", "committed", "discarded")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    TIMELINE_FIELD_NUMBER: _ClassVar[int]
    HALF_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    DISCARDED_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    producer_group: str
    resolution: TransactionResolution
    timeline: _containers.RepeatedCompositeFieldContainer[TransactionEvent]
    half: _common_pb2.MessageView
    committed: _common_pb2.MessageView
    discarded: bool
    def __init__(self, transaction_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., resolution: _Optional[_Union[TransactionResolution, str]] = ..., timeline: _Optional[_Iterable[_Union[TransactionEvent, _Mapping]]] = ..., half: _Optional[_Union[_common_pb2.MessageView, _Mapping]] = ..., committed: _Optional[_Union[_common_pb2.MessageView, _Mapping]] = ..., discarded: _Optional[bool] = ...) -> None: ...
