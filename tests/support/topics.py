"""Topics a test creates on the shared session cluster and deletes when it ends."""

from __future__ import annotations

from support.waiting import unique_name
from txmq import Admin, MessageExt, PullConsumer, PullStatus


class Topics:
    """``topics()`` creates a topic of its own (4 queues unless told) through ``admin``;
    ``delete_all()`` deletes every one it created. Sends right after creation work:
    CreateTopic answers once the route is published."""

    def __init__(self, admin: Admin, *, prefix: str = "t") -> None:
        self.admin = admin
        self.prefix = prefix
        self.created: list[str] = []

    def __call__(self, *, queues: int = 4) -> str:
        name = unique_name(self.prefix)
        self.admin.create_topic(name, read_queue_nums=queues, write_queue_nums=queues)
        self.created.append(name)
        return name

    def delete_all(self) -> None:
        for name in self.created:
            self.admin.delete_topic(name)


def consume_all(consumer: PullConsumer, topic: str) -> list[MessageExt]:
    """Every message of the topic, through the pull service, every queue from 0."""
    out: list[MessageExt] = []
    for mq in consumer.fetch_message_queues(topic):
        offset = 0
        while True:
            r = consumer.pull(mq, "*", offset, 256, suspend=False)
            if r.status is not PullStatus.FOUND:
                break
            out += r.messages
            offset = r.next_begin_offset
    return out
