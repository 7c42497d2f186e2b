"""txmq: the Python SDK for the txmq transactional message broker.

``Producer`` sends, ``Admin`` administers; both need only one bootstrap address (any
txmq service), from which they learn where the stores are.
"""

from txmq.access import Policy, User
from txmq.admin import Admin, DeadLetter, ResentDeadLetter
from txmq.consumer import (
    ConsumeFromWhere,
    ConsumeStatus,
    ExpressionType,
    MessageListener,
    PullConsumer,
    PullResult,
    PullStatus,
    PushConsumer,
    SendBackResult,
)
from txmq.errors import (
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InternalError,
    NotFoundError,
    NotImplementedYetError,
    PayloadTooLargeError,
    TooManyRequestsError,
    TxmqError,
    UnauthenticatedError,
    UnavailableError,
    UpstreamTimeoutError,
)
from txmq.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from txmq.models import (
    ConsumeOffset,
    ElectedReplica,
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
from txmq.recall import RecallHandle
from txmq.signing import Credentials
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
    "Credentials",
    "DeadLetter",
    "ElectedReplica",
    "Endpoint",
    "ExpressionType",
    "ForbiddenError",
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
    "Policy",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueueData",
    "QueueOffsets",
    "RecallHandle",
    "ReplicaState",
    "ResentDeadLetter",
    "SendBackResult",
    "SendResult",
    "SendStatus",
    "ServiceKind",
    "StoreGroupStatus",
    "StoreStatus",
    "SubscriptionGroupConfig",
    "TlsConfig",
    "TooManyRequestsError",
    "TopicConfig",
    "TopicRoute",
    "TransactionInfo",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "TxmqError",
    "UnauthenticatedError",
    "UnavailableError",
    "UpstreamTimeoutError",
    "User",
]
