"""The actions file of `tailbudget serve --actions FILE`: which executors run.

```yaml
log: true                       # log every decision (default)
logging: {loggers: [""], trim_level: WARNING}
shed: {fraction: 0.5, rate_per_s: 200}
webhooks:
  - url: http://deployer.internal/hooks/tailbudget
    actions: [rollback, scale_up, scale_down]
    retries: 3
    backoff_s: 0.5
commands:
  - argv: [kubectl, argo, rollouts, abort, my-app]
    actions: [rollback]
    timeout_s: 30
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tailbudget.budget.yaml_safe import YamlError, load_yaml
from tailbudget.control.backpressure import PriorityShedder, TokenBucket
from tailbudget.errors import PolicyError
from tailbudget.serve.actions.base import Action
from tailbudget.serve.actions.external import CommandAction, WebhookAction
from tailbudget.serve.actions.local import LogAction, LoggingLevelAction, ShedAction

__all__ = ["ActionsConfig", "build_actions", "load_actions_config"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WebhookConfig(_Model):
    """One webhook."""

    url: str
    actions: list[str] | None = None
    retries: int = Field(3, ge=0, le=20)
    backoff_s: float = Field(0.5, ge=0)
    timeout_s: float = Field(5.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)


class CommandConfig(_Model):
    """One command (argv list)."""

    argv: list[str] = Field(min_length=1)
    actions: list[str] | None = None
    timeout_s: float = Field(30.0, gt=0)


class LoggingConfig(_Model):
    """Which loggers trim_logging raises, and to which level."""

    loggers: list[str] = Field(default_factory=lambda: [""])
    trim_level: str = "WARNING"


class ShedConfig(_Model):
    """What shed_load sets."""

    fraction: float = Field(0.5, gt=0, le=1)
    rate_per_s: float | None = Field(None, gt=0)


class ActionsConfig(_Model):
    """The whole actions file."""

    log: bool = True
    logging: LoggingConfig | None = None
    shed: ShedConfig | None = None
    webhooks: list[WebhookConfig] = Field(default_factory=list)
    commands: list[CommandConfig] = Field(default_factory=list)


def load_actions_config(path: str | Path | None) -> ActionsConfig:
    """Read an actions file (YAML or JSON); None gives the default (log only)."""
    if path is None:
        return ActionsConfig()
    try:
        raw: Any = load_yaml(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the actions file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise PolicyError(
            f"{path}: the actions file is not UTF-8 text; give a YAML or JSON file"
        ) from None
    except YamlError as exc:
        raise PolicyError(f"{path}: {exc}") from None
    try:
        return ActionsConfig.model_validate(raw or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise PolicyError(f"{path}: {where}: {err['msg']}") from None


def build_actions(
    config: ActionsConfig,
    *,
    shedder: PriorityShedder | None = None,
    limiter: TokenBucket | None = None,
) -> tuple[list[Action], ShedAction | None, LoggingLevelAction | None]:
    """Executors for a config; also returns the shed and logging executors (for status).

    `shedder` / `limiter` are the in-process backpressure gates shed_load drives
    (an application embedding the runtime passes the gates its middleware uses).
    """
    actions: list[Action] = []
    if config.log:
        actions.append(LogAction())
    trim = None
    if config.logging is not None:
        trim = LoggingLevelAction(config.logging.loggers, config.logging.trim_level)
        actions.append(trim)
    shed = ShedAction(
        fraction=config.shed.fraction if config.shed else 0.5,
        rate_per_s=config.shed.rate_per_s if config.shed else None,
        shedder=shedder,
        limiter=limiter,
    )
    actions.append(shed)
    for hook in config.webhooks:
        actions.append(
            WebhookAction(
                hook.url,
                retries=hook.retries,
                backoff_s=hook.backoff_s,
                timeout_s=hook.timeout_s,
                headers=hook.headers,
                actions=hook.actions,
            )
        )
    for cmd in config.commands:
        actions.append(CommandAction(cmd.argv, timeout_s=cmd.timeout_s, actions=cmd.actions))
    return actions, shed, trim
