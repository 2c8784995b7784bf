"""Where the real recorded logs are: ../shared/data beside the repo (main, CI), or two
folders up from a git worktree (wt/NAME)."""

from __future__ import annotations

from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
DATA = next(
    (
        p
        for p in (_ROOT / ".." / "shared" / "data", _ROOT / ".." / ".." / "shared" / "data")
        if p.is_dir()
    ),
    _ROOT / ".." / "shared" / "data",
)
