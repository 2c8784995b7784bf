"""Regenerate the golden outputs: `python tests/golden/regen.py` from the repo root.

Run it only when a change of yours intentionally alters a command's output; read the
diff (`git diff tests/golden/expected`) before committing it with that change."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from typer.testing import CliRunner  # noqa: E402

from tests._data import DATA  # noqa: E402
from tests.golden.cases import CASES, EXPECTED, expected_path, run_case  # noqa: E402


def main() -> int:
    if not DATA.is_dir():
        print(f"shared data not found: {DATA}", file=sys.stderr)
        return 1
    EXPECTED.mkdir(exist_ok=True)
    runner = CliRunner()
    codes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            code, text = run_case(runner, case, DATA, Path(tmp))
            codes[case.name] = code
            expected_path(case).write_text(text, encoding="utf-8")
            print(f"{code}  {case.name}")
    (EXPECTED / "exit_codes.json").write_text(json.dumps(codes, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
