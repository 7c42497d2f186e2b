"""txmq: the Python SDK for the txmq transactional message broker.

``Producer`` sends, ``Admin`` administers; both need only one bootstrap address (any
txmq service), from which they learn where the stores are.
"""

from txmq.admin import Admin
from txmq.consumer import (
    ConsumeFromWhere,
    ConsumeStatus,
    ExpressionType,
    MessageListener,
    PullConsumer,
    PullResult,
    PullStatus,
    PushConsumer,
)
from txmq.errors import (
    BadRequestError,
    ConflictError,
    ForbiddenError,
    UnauthenticatedError,
    InternalError,
    NotFoundError,
    NotImplementedYetError,
    PayloadTooLargeError,
    TooManyRequestsError,
    TxmqError,
    UnavailableError,
    UpstreamTimeoutError,
)
from txmq.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from txmq.models import (
    ConsumeOffset,
    Endpoint,
    Perm,
    QueueData,
    QueueOffsets,
    ReplicaState,
    ServiceKind,
    StoreGroupStatus,
    StoreStatus,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicRoute,
)
from txmq.producer import Producer
from txmq.tls import TlsConfig
from txmq.transaction import (
    LocalTransactionState,
    TransactionInfo,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)

__all__ = [
    "Admin",
    "BadRequestError",
    "ConflictError",
    "ConsumeFromWhere",
    "ConsumeOffset",
    "ConsumeStatus",
    "Endpoint",
    "ExpressionType",
    "ForbiddenError",
    "UnauthenticatedError",
    "InternalError",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageListener",
    "MessageQueue",
    "NotFoundError",
    "NotImplementedYetError",
    "PayloadTooLargeError",
    "Perm",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueueData",
    "QueueOffsets",
    "ReplicaState",
    "SendResult",
    "SendStatus",
    "ServiceKind",
    "StoreGroupStatus",
    "StoreStatus",
    "SubscriptionGroupConfig",
    "TooManyRequestsError",
    "TopicConfig",
    "TlsConfig",
    "TopicRoute",
    "TransactionInfo",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "TxmqError",
    "UnavailableError",
    "UpstreamTimeoutError",
]
