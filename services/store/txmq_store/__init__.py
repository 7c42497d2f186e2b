"""The txmq store: commit log, consume queues, index, offsets and configs (DESIGN §3).

Entry points: ``MessageStore.open`` (message_store.py), ``add_store_servicers``
(servicer.py), ``StoreSettings`` (settings.py).

servicer -> message_store (wires the parts; life, checkpoints, retention) -> send_path
(a send: validation, append, dispatch, settle), reads, admin (topics, groups, consume
offsets), transactions, timer, replica (a replicated group's replica; group.py: etcd and
the Follow stream) -> validation, codec (record layout), commitlog + flush (segments,
fsync, group commit), dispatch -> consumequeue, index, arrivals; configs and offsets
(JSON); recovery (data directory layout, start-up recovery).
"""
