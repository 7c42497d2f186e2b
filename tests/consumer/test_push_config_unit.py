"""The push consumer's settings (txmq._push_config.PushConsumerConfig): what
``PushConsumer(...)``'s keywords become, checked once, frozen."""

from __future__ import annotations

import dataclasses

import pytest

from txmq import BadRequestError, ConsumeFromWhere, PushConsumer
from txmq._push_config import PushConsumerConfig


def test_the_keywords_become_the_config_with_units_in_the_names() -> None:
    consumer = PushConsumer("cfg-unit", "127.0.0.1:1", heartbeat_interval=0.2, retry_backoff=0.05, orderly=True)
    config = consumer._config
    assert config.group == "cfg-unit" and config.endpoint == "127.0.0.1:1"
    assert config.heartbeat_interval_s == 0.2 and config.retry_backoff_s == 0.05 and config.orderly
    assert config.effective_takeover_delay_s == pytest.approx(2.2)  # heartbeat + 2 s by default
    assert config.retry_topic == "%RETRY%cfg-unit"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.orderly = False  # type: ignore[misc]


def test_an_explicit_takeover_delay_is_kept() -> None:
    config = PushConsumerConfig(group="g", endpoint="127.0.0.1:1", heartbeat_interval_s=1.0, takeover_delay_s=5.0)
    assert config.effective_takeover_delay_s == 5.0


@pytest.mark.parametrize(
    ("changes", "error", "names"),
    [
        ({"heartbeat_interval_s": 0}, ValueError, "heartbeat_interval_s must be > 0, not 0"),
        ({"consume_thread_max": -1}, ValueError, "consume_thread_max must be > 0"),
        ({"suspend_current_queue_time_s": 0.0}, ValueError, "suspend_current_queue_time_s"),
        ({"max_reconsume_times": -1}, ValueError, "max_reconsume_times must be >= 0"),
        ({"heartbeat_interval_s": 5.0, "takeover_delay_s": 5.0}, ValueError, "must be longer than"),
        ({"consume_from": "FIRST_OFFSET"}, TypeError, "consume_from must be a ConsumeFromWhere"),
        ({"on_error": "not callable"}, TypeError, "on_error must be callable"),
        ({"group": "bad group"}, BadRequestError, "bad group"),
    ],
)
def test_a_bad_setting_fails_on_construction_naming_it(changes: dict, error: type, names: str) -> None:
    settings = {"group": "g", "endpoint": "127.0.0.1:1", "consume_from": ConsumeFromWhere.FIRST_OFFSET, **changes}
    with pytest.raises(error, match=names):
        PushConsumerConfig(**settings)
