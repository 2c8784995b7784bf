"""The Mooncake trace format as `--arrivals` (issue 34): JSON lines, timestamps in ms."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailbudget.errors import TailbudgetError
from tailbudget.sim.arrivals import parse_arrivals, read_trace
from tests.conftest import SHARED_DATA

MOONCAKE = SHARED_DATA / "mooncake_synthetic_trace.jsonl"


def test_the_shared_mooncake_trace_reads_as_arrivals_with_tokens() -> None:
    if not MOONCAKE.is_file():
        pytest.skip(f"real data file not found: {MOONCAKE}")
    t = read_trace(str(MOONCAKE))
    assert t.t_s.size == 3993 and t.t_s[0] == 0.0
    assert 16 * 60 < t.t_s[-1] < 18 * 60  # 17 minutes, as the data README says
    assert t.input_tokens is not None and t.output_tokens is not None
    assert round(float(t.input_tokens.mean())) == 15325
    assert round(float(t.output_tokens.mean())) == 149
    assert parse_arrivals(str(MOONCAKE)).kind == "trace"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("{not json", "line 2: not a JSON object"),
        ('{"timestamp": 5}', "line 2: a Mooncake trace line has timestamp (ms)"),
        ('{"timestamp": -1, "input_length": 3, "output_length": 4}', "must be numbers >= 0"),
        ('{"timestamp": true, "input_length": 3, "output_length": 4}', "must be numbers >= 0"),
    ],
)
def test_a_bad_line_is_one_error_naming_it(tmp_path: Path, line: str, said: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n' + line + "\n")
    with pytest.raises(TailbudgetError, match=said.replace("(", r"\(").replace(")", r"\)")):
        read_trace(str(path))
