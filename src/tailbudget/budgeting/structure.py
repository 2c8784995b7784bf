"""The shape of a pipeline as a log shows it: which stage columns nest, which run at once.

Tabular RPC logs often hold one column per call with the calls nested (a gateway's
column already contains the controller it called), so their sum exceeds the
end-to-end time. A stage is taken to run inside another when it never exceeds it (in
at least `CONTAIN_SHARE` of requests) and moves with it (Pearson correlation at least
`CO_MOVE`); nested stages are not added to the pipeline a second time. Among the
remaining stages, when their sum still exceeds the total in more than `OVERLAP_SHARE`
of requests, the pair whose per-request max removes most of that excess is taken to
run in parallel.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from tailbudget.audit.profile import Profile

CONTAIN_SHARE = 0.99
CO_MOVE = 0.3
OVERLAP_SHARE = 0.05
TOLERANCE_MS = 1.0


@dataclass(frozen=True)
class Structure:
    """Top-level items in order: a stage name, or a tuple of names that run at once."""

    items: tuple[str | tuple[str, ...], ...]
    nested: dict[str, str]
    """Stage -> the stage whose time contains it."""
    detected: tuple[str, ...]
    """How each grouping was found, for the file's comments."""


def structure(profile: Profile, stated: tuple[tuple[str, ...], ...] = ()) -> Structure:
    """Nesting and parallel groups of a profile's stages (stated groups win)."""
    if not profile.stages:
        return Structure((), {}, ())
    notes: list[str] = []
    nested = _nesting(profile) if _overlap(profile, list(profile.stages)) > OVERLAP_SHARE else {}
    for child, parent in nested.items():
        notes.append(f"{child} runs inside {parent} (never longer, moves with it)")
    top = [s for s in profile.stages if s not in nested]
    groups: list[tuple[str, ...]] = [g for g in stated if all(s in top for s in g)]
    grouped = {s for g in groups for s in g}
    while not stated and _overlap_items(profile, top, groups) > OVERLAP_SHARE:
        pair = _best_pair(profile, [s for s in top if s not in grouped], top, groups)
        if pair is None:
            break
        groups.append(pair)
        grouped.update(pair)
        notes.append(f"{pair[0]} and {pair[1]} overlap in time: taken to run in parallel")
    items: list[str | tuple[str, ...]] = []
    for s in top:
        group = next((g for g in groups if s in g), None)
        if group is None:
            items.append(s)
        elif group[0] == s or s == next(x for x in top if x in group):
            items.append(group)
    return Structure(tuple(items), nested, tuple(notes))


def _overlap(profile: Profile, stages: list[str]) -> float:
    summed = np.sum([profile.times[s] for s in stages], axis=0)
    return float(np.mean(summed > profile.total + TOLERANCE_MS))


def _overlap_items(profile: Profile, top: list[str], groups: list[tuple[str, ...]]) -> float:
    return float(np.mean(top_level_times(profile, top, groups) > profile.total + TOLERANCE_MS))


def top_level_times(profile: Profile, top: list[str], groups: list[tuple[str, ...]]) -> np.ndarray:
    """Each request's time over the top-level stages: groups take their max."""
    acc = np.zeros(profile.used)
    done: set[str] = set()
    for s in top:
        if s in done:
            continue
        group = next((g for g in groups if s in g), (s,))
        acc = acc + np.max([profile.times[x] for x in group], axis=0)
        done.update(group)
    return acc


def _nesting(profile: Profile) -> dict[str, str]:
    out: dict[str, str] = {}
    med = {s: float(np.median(profile.times[s])) for s in profile.stages}
    for child, parent in itertools.permutations(profile.stages, 2):
        a, b = profile.times[parent], profile.times[child]
        if med[parent] <= med[child] or np.std(a) == 0 or np.std(b) == 0:
            continue
        inside = float(np.mean(b <= a + TOLERANCE_MS))
        corr = float(np.corrcoef(a, b)[0, 1])
        # The tightest container wins: the smallest parent that holds the child.
        if (
            inside >= CONTAIN_SHARE
            and corr >= CO_MOVE
            and (child not in out or med[parent] < med[out[child]])
        ):
            out[child] = parent
    return out


def _best_pair(
    profile: Profile, free: list[str], top: list[str], groups: list[tuple[str, ...]]
) -> tuple[str, str] | None:
    base = _overlap_items(profile, top, groups)
    best: tuple[float, tuple[str, str]] | None = None
    for a, b in itertools.combinations(free, 2):
        share = _overlap_items(profile, top, [*groups, (a, b)])
        if share < base and (best is None or share < best[0]):
            best = (share, (a, b))
    return best[1] if best is not None else None
