"""Actions the controller takes: journal first, then log, webhook, command, shed, replicas."""

from tailbudget.serve.actions.base import Action, Dispatcher, Outcome
from tailbudget.serve.actions.config import ActionsConfig, build_actions, load_actions_config
from tailbudget.serve.actions.external import CommandAction, WebhookAction
from tailbudget.serve.actions.local import (
    LogAction,
    LoggingLevelAction,
    ReplicasAction,
    ShedAction,
)

__all__ = [
    "Action",
    "ActionsConfig",
    "CommandAction",
    "Dispatcher",
    "LogAction",
    "LoggingLevelAction",
    "Outcome",
    "ReplicasAction",
    "ShedAction",
    "WebhookAction",
    "build_actions",
    "load_actions_config",
]
