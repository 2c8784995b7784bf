"""What a refused command looks like: exit 2 and one `error:` line naming the bad value."""

from __future__ import annotations

from typing import Any


def one_line_error(result: Any, *needles: str) -> str:
    """The one `error:` line of `result` (a CliRunner result), holding every needle."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
