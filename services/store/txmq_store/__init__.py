"""The txmq store: commit log, consume queues, index, offsets and configs (DESIGN §3).

Entry points: ``MessageStore.open`` (message_store.py), ``add_store_servicers``
(servicer.py), ``StoreSettings`` (settings.py).

servicer -> message_store (core: send, read, admin, housekeeping) -> validation, codec
(record layout), commitlog + flush (segments, fsync, group commit), dispatch ->
consumequeue, index, arrivals; configs and offsets (JSON); recovery (data directory
layout, start-up recovery).
"""
