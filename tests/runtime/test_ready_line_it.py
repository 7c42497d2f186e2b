"""A service started with a quiet --log-level still writes its ready / stopped lines
(tools read readiness from the log: `txmq up`, the tests' process fixtures), and nothing
else at INFO."""

from __future__ import annotations

from support import ServiceFactory


def test_a_quiet_service_is_still_seen_ready(service_factory: ServiceFactory) -> None:
    store = service_factory.store("--log-level", "WARNING")  # returns once the ready line is read
    assert store.address
    store.stop()
    text = store.process.log_path.read_text()
    assert " ready on " in text and " stopped" in text
    assert not [line for line in text.splitlines() if " INFO " in line and "txmq.lifecycle" not in line]
