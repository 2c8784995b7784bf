"""Fixtures of the export tests: the shipped budget templates."""

from __future__ import annotations

import pytest
from export_helpers import RAG, TEMPLATES

from tailbudget.budget import Budget, load_budget


@pytest.fixture(params=TEMPLATES, ids=lambda p: p.stem)
def template_budget(request: pytest.FixtureRequest) -> Budget:
    """Each budget template shipped with tailbudget."""
    return load_budget(request.param)


@pytest.fixture
def rag() -> Budget:
    """The rag template."""
    return load_budget(RAG)
