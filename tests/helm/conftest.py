"""tests/helm: the chart rendered by the real helm binary. Modules that need helm set
``pytestmark = needs_helm``: skipped, with the reason, only when no helm is installed
(scripts/install_helm_tools.sh puts one in .venv/bin)."""

from __future__ import annotations

import pytest

from helm import chart


@pytest.fixture(scope="session")
def default_docs() -> list[chart.Doc]:
    return chart.render()
