"""The txmq store: commit log, consume queues, index, offsets and configs (DESIGN §3).

Entry points: ``MessageStore.open`` (message_store.py) and ``add_store_servicers``
(servicer.py); ``StoreSettings`` (settings.py).
"""
