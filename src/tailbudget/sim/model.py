"""The service model a simulation runs: work samples from the log plus fitted parameters.

A `Param` says where its value came from: `fitted` (with its fit quality),
`measured` (read straight off the log) or `default` (the log cannot identify
it; the value is the stated default, and `note` says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from tailbudget.sim.records import LoadLevel, ModelRecord, ParamRecord

if TYPE_CHECKING:
    from tailbudget.sim.fit_table import FitTable
    from tailbudget.sim.records import ModelRecord, ParamRecord

__all__ = ["LLMParams", "Param", "ServiceModel", "WorkSamples"]

Source = Literal["fitted", "measured", "default", "stated"]

DEFAULT_CACHE_BLOCKS = 2048
"""A replica's prefix cache when neither stated nor shown larger by the runs: 2,048 blocks
of 512 tokens (about 1M tokens), the KV cache of a 70B model (80 layers x 8 KV heads x 128
x 2 x 2 bytes = 320 KiB a token) on eight 80 GB GPUs (640 GB less 140 GB of weights, 90%
used: about 1.4M tokens), rounded down."""
DEFAULT_CACHE_NOTE = (
    "KV-cache blocks of 512 tokens per replica (LRU, used with a trace's block hashes): "
    "2,048 (about 1M tokens, a 70B model's KV cache on eight 80 GB GPUs); the logs do not "
    "show the cache's size (state prefix_cache_blocks)"
)


@dataclass(frozen=True)
class Param:
    """One model parameter, its unit and how it was obtained."""

    name: str
    value: float
    unit: str
    source: Source
    note: str = ""

    def record(self) -> ParamRecord:
        """The parameter as the JSON documents show it (value to 6 decimals)."""

        return ParamRecord(
            name=self.name,
            value=round(self.value, 6),
            unit=self.unit,
            source=self.source,
            note=self.note,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what a saved model file holds)."""
        return self.record().model_dump(mode="json")


@dataclass(frozen=True)
class WorkSamples:
    """Whole requests of the log: each simulated request copies one row."""

    work_ms: npt.NDArray[np.float64]
    """Time a request holds a slot (ms): the log's end-to-end time of that request."""
    error: npt.NDArray[np.bool_]
    stages: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    input_tokens: npt.NDArray[np.float64] | None = None
    output_tokens: npt.NDArray[np.float64] | None = None
    load_rps: npt.NDArray[np.float64] | None = None
    """Requests/s of the minute each request was logged in (for load-dependent work)."""
    classes: npt.NDArray[np.str_] | None = None
    """Each request's class from the log (with a budget listing classes): a drawn request
    keeps it."""

    @property
    def size(self) -> int:
        """Number of requests to draw from."""
        return int(self.work_ms.size)


@dataclass(frozen=True)
class LLMParams:
    """Continuous batching: a replica runs steps; each step decodes one token per sequence.

    step time = step_base + step_per_seq x (sequences decoding)
                + step_per_kv x (thousands of context tokens they hold)
                + (prefill_step + prefill_per_token x uncached tokens), when the step prefills;
    a step prefills at most `token_budget` - decoding uncached tokens (a share
    `prefix_hit_rate` of each prompt is cached); at most `batch_limit`
    sequences run at once. TTFT = queue wait + the steps until its prompt is
    prefilled + `fixed_ms(input tokens)` (time outside the engine).
    """

    step_base_ms: Param
    step_per_seq_ms: Param
    prefill_step_ms: Param
    prefill_per_token_ms: Param
    fixed_ms: Param
    fixed_per_token_ms: Param
    batch_limit: Param
    token_budget: Param
    prefix_hit_rate: Param = field(
        default_factory=lambda: Param(
            "prefix_hit_rate", 0.0, "share", "default", "no prefix cache assumed"
        )
    )
    """Share of prompt tokens served from the prefix cache: a step computes the rest."""
    ingest_ms: Param = field(
        default_factory=lambda: Param(
            "ingest_ms", 0.0, "ms", "default", "no front-end time per request assumed"
        )
    )
    """Front-end time per request (API server, tokenising), one request at a time per
    replica, before the engine can schedule it."""
    step_per_kv_ms: Param = field(
        default_factory=lambda: Param(
            "step_per_kv_ms", 0.0, "ms", "default", "no cost per context token assumed"
        )
    )
    """Step time per 1,000 tokens of context the decoding sequences hold (attention reads
    their KV cache: prompt, cached part included, and the tokens decoded so far)."""
    prefix_cache_blocks: Param = field(
        default_factory=lambda: Param(
            "prefix_cache_blocks",
            float(DEFAULT_CACHE_BLOCKS),
            "blocks",
            "default",
            DEFAULT_CACHE_NOTE,
        )
    )
    """KV-cache blocks of 512 tokens one replica's prefix cache holds (an LRU), used when
    the arrivals carry block hashes (a Mooncake trace)."""
    hit_levels: tuple[tuple[float, float, bool], ...] = field(default=(), kw_only=True)
    """Each fitted run's (requests/s a replica, hit share, burst): a simulation takes the
    share at its own offered rate between them (sim/hit_levels.py)."""

    def params(self) -> list[Param]:
        """Every parameter, in a stable order."""
        return [
            self.step_base_ms,
            self.step_per_seq_ms,
            self.prefill_step_ms,
            self.prefill_per_token_ms,
            self.fixed_ms,
            self.fixed_per_token_ms,
            self.batch_limit,
            self.token_budget,
            self.prefix_hit_rate,
            self.ingest_ms,
            self.step_per_kv_ms,
            self.prefix_cache_blocks,
        ]


@dataclass(frozen=True)
class ServiceModel:
    """Everything the simulator needs about the service, and how each part was obtained."""

    kind: Literal["queue", "llm"]
    """queue: K slots per replica, a request holds one for its work time; llm: batching."""
    samples: WorkSamples
    concurrency: Param
    """Requests one replica serves at once (queue model)."""
    cold_factor: Param
    """Work of a request on a replica younger than `cold_window_s` is multiplied by this."""
    cold_window_s: Param
    provision_delay_s: Param
    logging_overhead_ms: Param
    """Per-request time trim_logging removes."""
    low_priority_share: Param
    """Share of requests shed_load may drop."""
    llm: LLMParams | None = None
    load_slope: Param | None = None
    """Work grows by this many ms per request/s a replica receives (contention); the
    logged work is taken at its own minute's rate, a simulated one at the replica's."""
    sources: tuple[str, ...] = ()
    load_levels: tuple[dict[str, Any], ...] = ()
    """Per input log: its rate (requests/s), mean concurrency and key percentiles."""
    fit_quality: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    fit: FitTable | None = None
    """Every fitted run replayed on its own arrivals, figure by figure (LLM model)."""

    @property
    def reproduces(self) -> bool | None:
        """Whether the model reproduces the runs it was fitted on (None: not assessed)."""
        return None if self.fit is None else self.fit.reproduces

    def params(self) -> list[Param]:
        """Every parameter, the LLM ones included."""
        out = [] if self.llm is not None else [self.concurrency]
        out += [] if self.load_slope is None else [self.load_slope]
        out += [
            self.cold_factor,
            self.cold_window_s,
            self.provision_delay_s,
            self.logging_overhead_ms,
            self.low_priority_share,
        ]
        return out + (self.llm.params() if self.llm is not None else [])

    @property
    def unidentified(self) -> list[str]:
        """Names of the parameters the log could not identify (stated defaults used)."""
        return [p.name for p in self.params() if p.source == "default"]

    def record(self) -> ModelRecord:
        """The `model` block of the JSON output."""

        return ModelRecord(
            kind=self.kind,
            sources=list(self.sources),
            requests=self.samples.size,
            work="whole requests of the log, resampled (stage times and sizes stay together)",
            stages=sorted(self.samples.stages),
            parameters=[p.record() for p in self.params()],
            unidentified=self.unidentified,
            load_levels=[LoadLevel.model_validate(level) for level in self.load_levels],
            fit_quality=self.fit_quality,
            notes=list(self.notes),
        )

    def to_dict(self) -> dict[str, Any]:
        """The `model` block as plain values."""
        return self.record().model_dump(mode="json")
