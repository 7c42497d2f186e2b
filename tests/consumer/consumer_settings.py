"""PushConsumer settings for tests: short intervals, so membership changes and
retries happen within a second or two (shared by the in-process consumers and
push_child.py)."""

FAST: dict[str, float] = {
    "heartbeat_interval": 0.2,
    "rebalance_interval": 1.0,
    "takeover_delay": 1.0,
    "commit_interval": 0.2,
    "retry_backoff": 0.05,
    "retry_backoff_max": 0.2,
    "pull_error_backoff": 0.2,
    "suspend_timeout": 5.0,
}
