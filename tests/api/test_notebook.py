"""examples/notebook.ipynb runs headless, top to bottom, without an error cell."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.api.data import DATA, DELAG

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not DELAG.exists(), reason="needs ../shared/data"),
]


def test_notebook_runs(monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # The kernel is a subprocess: it reads the data and this tree through its environment.
    monkeypatch.setenv("TAILBUDGET_DATA", str(DATA.resolve()))
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core's own deprecation notice
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError on the first error cell
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    # the audit, the plan and the simulation render inline as self-contained pages
    pages = [h for h in html if h.startswith("<!DOCTYPE html>")]
    assert len(pages) == 3
    assert all("<script src=" not in h and '<link rel="stylesheet"' not in h for h in pages)
