"""txmq's RocketMQ 5 gateway: the ``apache.rocketmq.v2.MessagingService`` over txmq."""
