"""Names the transaction service shares with the store and RocketMQ (MessageConst,
TopicValidator, MixAll), plus txmq's own additions (prefixed TXMQ_)."""

from __future__ import annotations

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
CHECK_GROUP = "CID_SYS_RMQ_TRANS"  # progress of the check loop on the half and op queues
OP_TAG = "d"  # RocketMQ TransactionalMessageUtil.REMOVE_TAG

PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
# txmq: how often a check waited because no producer of the group was connected.
PROPERTY_CHECK_WAITS = "TXMQ_CHECK_WAITS"
# txmq: on op messages, one `<half queue offset>:<transaction id>:<C|R>` per entry,
# comma separated, in body order; keys of the op message are the transaction ids.
PROPERTY_OP_DECISIONS = "TXMQ_OP_DECISIONS"
# txmq: on op messages, whether the decision answered a check (`1`) per entry.
PROPERTY_DISCARD_REASON = "TXMQ_DISCARD_REASON"

# sysflag transaction bits (RocketMQ MessageSysFlag).
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC

HALF_QUEUE_ID = 0
