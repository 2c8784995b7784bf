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
from dataclasses import dataclass, field

import numpy as np

from tailbudget.audit.nesting import direct, find_arrays
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
    calls: dict[str, list[str]] = field(default_factory=dict)
    """Caller -> the stages run inside it one after another (the budget's `calls:`): the
    caller's slice is its own time, its column less theirs."""

    def own(self, profile: Profile, name: str) -> np.ndarray:
        """A stage's own time per request: its column less its calls' (never below 0)."""
        times = profile.times[name]
        inside = [profile.times[c] for c in self.calls.get(name, [])]
        if not inside:
            return times
        out: np.ndarray = np.clip(times - np.sum(inside, axis=0), 0.0, None)
        return out


def structure(profile: Profile, stated: tuple[tuple[str, ...], ...] = ()) -> Structure:
    """Nesting and parallel groups of a profile's stages (stated groups win)."""
    if not profile.stages:
        return Structure((), {}, ())
    notes: list[str] = []
    nested, calls = _nesting(profile)
    for child, parent in nested.items():
        notes.append(f"{child} runs inside {parent} (the audit's nesting)")
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
    return Structure(tuple(items), nested, tuple(notes), calls)


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


def _nesting(profile: Profile) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(stage -> the stage directly containing it, caller -> its sequential calls), from
    the audit's own rule (`nesting[]`). A caller's direct calls become its `calls:` when
    they run one after another inside it (their sum within it in nearly every request);
    calls that overlap stay out of the pipeline under a caller that keeps its whole time."""
    # As the audit: nesting is looked for only where the stages add up to more than the
    # total (span tables on the critical path never do).
    if _overlap(profile, list(profile.stages)) <= OVERLAP_SHARE:
        return {}, {}
    pairs = find_arrays(profile.times)
    mean = {s: float(np.mean(profile.times[s])) for s in profile.stages}
    nested: dict[str, str] = {}
    for outer, inners in direct(pairs).items():
        for inner in inners:
            if inner not in nested or mean[outer] < mean[nested[inner]]:
                nested[inner] = outer
    calls: dict[str, list[str]] = {}
    for child, parent in nested.items():
        calls.setdefault(parent, []).append(child)
    for parent, children in list(calls.items()):
        summed = np.sum([profile.times[c] for c in children], axis=0)
        within = float(np.mean(summed <= profile.times[parent] + TOLERANCE_MS))
        if within < CONTAIN_SHARE:
            del calls[parent]
        else:  # in the log's column order, as the file lists stages
            calls[parent] = [s for s in profile.stages if s in children]
    return nested, calls


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
