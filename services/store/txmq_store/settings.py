"""Store settings (flags --field_name, env TXMQ_STORE_FIELD_NAME, defaults below)."""

from __future__ import annotations

import importlib.util
import os
from typing import Literal

from pydantic import Field, field_validator

from txmq.protocol import DEFAULT_MESSAGE_DELAY_LEVELS, parse_delay_levels
from txmq_runtime.settings import ServiceSettings, service_config

KIB = 1024
MIB = 1024 * KIB


class StoreSettings(ServiceSettings):
    model_config = service_config("store")

    data_dir: str = Field("./data/store", description="Directory of the commit log, queues, index and configs.")
    store_id: str = Field("", description="Store node id; empty: store-0.")

    commitlog_segment_bytes: int = Field(
        128 * MIB, ge=64 * KIB, description="Size of one commit-log segment file; a record never spans two."
    )
    commitlog_preallocate: Literal["zero", "fallocate", "none"] = Field(
        "zero",
        description="Prepare the next commit-log segment in the background: zero-fill it (fastest appends and "
        "fsyncs, writes the segment twice), fallocate it, or not at all (sparse files).",
    )
    disk_min_free_bytes: int = Field(
        512 * MIB,
        ge=0,
        description="Sends are refused (CODE_DISK_FULL, retriable) while the data directory's file system has less "
        "free space than this (RocketMQ diskMaxUsedSpaceRatio, as an absolute floor); 0: no floor.",
    )
    consume_queue_units_per_file: int = Field(300_000, ge=1, description="20-byte units per consume-queue file.")
    index_slots_per_file: int = Field(1_000_000, ge=1, description="Hash slots per index file.")
    index_entries_per_file: int = Field(4_000_000, ge=2, description="Entries per index file before it rolls.")

    flush_mode: Literal["async", "sync"] = Field(
        "async", description="async: flush every flush_interval_ms; sync: fsync (group commit) before the ack."
    )
    flush_interval_ms: int = Field(500, ge=1, description="Async mode: commit-log flush period.")
    sync_flush_timeout_ms: int = Field(
        5_000, ge=1, description="Sync mode: SEND_STATUS_FLUSH_DISK_TIMEOUT when the fsync takes longer."
    )
    flush_consume_queue_interval_ms: int = Field(
        1_000, ge=1, description="Consume queues and index are flushed and the checkpoint written this often."
    )

    max_message_body_bytes: int = Field(4 * MIB, ge=1, description="Largest message body accepted.")
    max_properties_bytes: int = Field(
        32_767, ge=1, le=65_535, description="Largest encoded properties (user + system) of one message."
    )
    max_batch_messages: int = Field(4_096, ge=1, description="Most messages in one SendBatch.")
    max_batch_bytes: int = Field(64 * MIB, ge=1, description="Largest total body size of one SendBatch.")

    default_topic_queue_nums: int = Field(8, ge=1, le=1024, description="Queue count of topics created without one.")
    auto_create_topic_enable: bool = Field(False, description="Create unknown topics on first send.")
    auto_create_subscription_group: bool = Field(
        True, description="Create unknown subscription groups when they commit an offset."
    )
    transaction_message_enable: bool = Field(True, description="Accept half (prepared) messages.")
    decision_cache_entries: int = Field(
        200_000,
        ge=1,
        description="Transaction decisions kept in memory (the decision book); older ones are read from the index.",
    )
    transaction_timeout_ms: int = Field(
        6_000,
        ge=0,
        description=(
            "RocketMQ transactionTimeOut, as the store applies it: a commit or rollback that does not answer a "
            "check, for a half message that set CHECK_IMMUNITY_TIME_IN_SECONDS, is refused (TRANSACTION_EXPIRED) "
            "once max(that, this) has passed since the half message was born, whoever relays it. txcheck's "
            "setting of the same name ages half messages for its check loop: give both the same value."
        ),
    )
    property_filter_enable: bool = Field(True, description="Allow SQL92 filters (RocketMQ enablePropertyFilter).")

    timer_max_delay_ms: int = Field(
        3 * 24 * 3600 * 1000,
        ge=1_000,
        description="Delayed messages (docs/store.md): the latest delivery time accepted, from the store's receipt "
        "(RocketMQ timerMaxDelaySec); later ones are refused with CODE_ILLEGAL_DELIVERY_TIME.",
    )
    message_delay_levels: str = Field(
        DEFAULT_MESSAGE_DELAY_LEVELS,
        description="Delay levels (RocketMQ messageDelayLevel): level N of a DELAY property or of a retry waits the "
        "Nth of these; units ms, s, m, h, d.",
    )
    idempotence_window_ms: int = Field(
        300_000,
        ge=0,
        description="Idempotent sends (docs/store.md): a producer send whose topic and unique id the store accepted "
        "this recently is answered with the first result and not stored again; 0: off.",
    )
    queue_lock_lease_ms: int = Field(
        60_000,
        ge=1_000,
        description="Orderly consumption (docs/consumers.md): how long a queue lock lasts without renewal "
        "(RocketMQ rebalanceLockMaxLiveTime); consumers renew it every third of this.",
    )

    access_message_in_memory_max_ratio_percent: int = Field(
        40, ge=0, le=100, description="Data within this share of RAM behind the write position counts as in memory."
    )
    physical_memory_bytes: int = Field(0, ge=0, description="RAM size for the in-memory rule; 0: detect.")
    max_transfer_bytes_in_memory: int = Field(262_144, ge=1, description="Batch byte limit for in-memory reads.")
    max_transfer_count_in_memory: int = Field(
        256, ge=1, description="Batch count limit for in-memory reads (RocketMQ: 32; docs/rocketmq-differences.md)."
    )
    max_transfer_bytes_on_disk: int = Field(65_536, ge=1, description="Batch byte limit for on-disk reads.")
    max_transfer_count_on_disk: int = Field(8, ge=1, description="Batch count limit for on-disk reads.")

    consume_offset_persist_interval_ms: int = Field(5_000, ge=1, description="Consume offsets are saved this often.")
    arrival_watcher_buffer: int = Field(
        10_000, ge=1, description="Arrivals buffered per watcher before it is marked overflowed."
    )
    arrival_records_max_bytes: int = Field(
        16_384,
        ge=0,
        description="Dispatches up to this size carry their records on the arrival stream (a woken pull is "
        "answered without another read); 0: never.",
    )
    file_reserved_time_ms: int = Field(
        72 * 3600 * 1000, ge=0, description="Commit-log segments older than this are deleted; 0: keep forever."
    )
    clean_files_interval_ms: int = Field(10_000, ge=1, description="How often expired segments are looked for.")

    export_interval_ms: int = Field(
        0,
        ge=0,
        description="Analytics export (docs/analytics.md): snapshot consume and queue offsets and export "
        "transaction events as Parquet this often; needs pyarrow (the analytics extra); 0: off.",
    )
    export_dir: str = Field("", description="Where the analytics export goes; empty: <data_dir>/export.")
    export_retention_ms: int = Field(
        7 * 24 * 3600 * 1000, ge=0, description="Exported files older than this are deleted; 0: keep forever."
    )

    replica_id: str = Field(
        "",
        description="Replicated store group (docs/replication.md): this replica's id within the group named by "
        "store_id; empty: the store is alone (no replication).",
    )
    min_in_sync: int = Field(
        1,
        ge=1,
        description="Replicated group: a send is acknowledged when every in-sync replica holds it, and writes are "
        "refused (CODE_NOT_ENOUGH_REPLICAS) while fewer replicas than this are in sync.",
    )
    replica_lease_ms: int = Field(
        6_000, ge=1_000, description="Replicated group: the leader's etcd lease; a dead leader is replaced after it."
    )
    replica_lag_max_ms: int = Field(
        6_000,
        ge=1,
        description="Replicated group: a follower that has not held everything shipped to it for this long leaves "
        "the in-sync set.",
    )
    unclean_leader_election: bool = Field(
        False,
        description="Replicated group: let a replica outside the in-sync set lead when no in-sync replica is "
        "registered any more. Writes resume, but acknowledged records the in-sync replicas held may be lost "
        "(docs/replication.md).",
    )
    replica_tick_ms: int = Field(
        200, ge=10, description="Replicated group: how often a replica reads its group's state in etcd."
    )
    replica_shipment_max_bytes: int = Field(
        1 * MIB, ge=64 * KIB, description="Replicated group: most log bytes the leader ships in one message."
    )

    @field_validator("export_interval_ms")
    @classmethod
    def _export_writable(cls, value: int) -> int:
        # Checked with the settings, before anything starts: a store asked for an export it
        # cannot write fails its start with one line instead of failing once it serves.
        if value > 0 and importlib.util.find_spec("pyarrow") is None:
            raise ValueError(
                f"{value} asks for the analytics export, which writes Parquet with pyarrow, and this "
                "installation has no pyarrow: install txmq-server[export] (the txmq image has it) or set 0 (off)"
            )
        return value

    @field_validator("message_delay_levels")
    @classmethod
    def _levels_parse(cls, value: str) -> str:
        parse_delay_levels(value)  # a ValueError names the bad item
        return value

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.message_delay_levels)

    @property
    def resolved_store_id(self) -> str:
        return self.store_id or "store-0"

    def physical_memory(self) -> int:
        if self.physical_memory_bytes:
            return self.physical_memory_bytes
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
