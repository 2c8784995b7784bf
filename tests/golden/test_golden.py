"""Every command's outputs on ../shared/data, byte for byte after masking (issue 38).

Taken before the house moves (serve/ apart, renderers registered, `_fmt`): a move must
not change one output. A change that intentionally alters an output regenerates the
golden with `python tests/golden/regen.py` (see tests/golden/README.md) and commits the
reviewed diff with the change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests._data import DATA
from tests.golden.cases import CASES, EXPECTED, expected_path, run_case

REGEN = (
    "golden output changed. If your change means to alter this output, regenerate with "
    "`python tests/golden/regen.py`, read `git diff tests/golden/expected` and commit it "
    "with your change (tests/golden/README.md); otherwise the change altered an output "
    "it should not have."
)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """Every case run once, in order, in one folder (later cases read earlier files)."""
    if not DATA.is_dir():
        pytest.skip(f"shared data not found: {DATA}")
    tmp = tmp_path_factory.mktemp("golden")
    runner = CliRunner()
    return {case.name: run_case(runner, case, DATA, Path(tmp)) for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_output_is_the_golden_one(case, outputs) -> None:
    code, text = outputs[case.name]
    codes = json.loads((EXPECTED / "exit_codes.json").read_text())
    assert code == codes[case.name], f"exit code {code}, golden {codes[case.name]}: {REGEN}"
    assert text == expected_path(case).read_text(encoding="utf-8"), REGEN
