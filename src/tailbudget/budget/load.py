"""Reading a budget file, with errors that name the field path and the fix."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from tailbudget.budget.model import Budget
from tailbudget.budget.validation import describe
from tailbudget.budget.yaml_safe import YamlError, load_yaml
from tailbudget.errors import BudgetError

__all__ = ["describe", "load_budget", "parse_budget"]


def load_budget(path: str | Path) -> Budget:
    """Read and validate a budget file; raise BudgetError with a one-line message."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BudgetError(
            f"{p}: budget file not found (create one with `tailbudget init`)"
        ) from None
    except IsADirectoryError:
        raise BudgetError(
            f"{p}: a folder, not a budget file; give the budget's YAML file "
            "(create one with `tailbudget init`)"
        ) from None
    except UnicodeDecodeError:
        raise BudgetError(
            f"{p}: not a text file (a budget file is YAML in UTF-8; "
            "create one with `tailbudget init`)"
        ) from None
    except OSError as exc:
        raise BudgetError(
            f"{p}: cannot read budget file ({exc.__class__.__name__}: {exc})"
        ) from None
    return parse_budget(text, source=str(p))


def parse_budget(text: str | dict[str, object], *, source: str = "<budget>") -> Budget:
    """Validate YAML text (or an already-parsed mapping) as a budget."""
    if isinstance(text, str):
        try:
            data = load_yaml(text)
        except YamlError as exc:
            raise BudgetError(f"{source}: {exc}") from None
        except Exception as exc:  # the YAML parser raises more than YAMLError on odd input
            raise BudgetError(f"{source}: not valid YAML: {exc}".splitlines()[0]) from None
    else:
        data = text
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise BudgetError(
            f"{source}: a budget file must be a mapping with slo: and pipeline:, got {kind}"
        )
    try:
        return Budget.model_validate(data)
    except ValidationError as exc:
        raise BudgetError(f"{source}: {describe(exc)}") from None
