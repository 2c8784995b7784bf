"""SGLang `bench_serving` results: one JSON object a line, one line per run.

Without `--output-details` a line holds only aggregates (`duration` in
seconds, `mean_e2e_latency_ms`, `p99_ttft_ms`, ...), which is no request log:
such a file is refused. With it, the line also holds the per-request arrays
`input_lens`, `output_lens`, `ttfts` and `itls` (seconds) and `errors`, as
vLLM writes them; end to end is ttft + sum(itls).
"""

from __future__ import annotations

import json

from tailbudget.errors import LogError
from tailbudget.logs.bench_arrays import per_request_arrays
from tailbudget.logs.bench_rows import BenchRows, text_lines

__all__ = ["sglang_rows"]


def sglang_rows(path: str) -> BenchRows:
    """Per-request rows from every detailed line of an SGLang bench_serving output."""
    runs = []
    summaries = 0
    for number, line in text_lines(path):
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LogError(f"{path}:{number}: not valid JSON ({exc.msg}); check the file") from exc
        if not isinstance(doc, dict):
            raise LogError(f"{path}:{number}: not an SGLang result object; pass the right format")
        if "ttfts" in doc:
            runs.append((number, doc))
        else:
            summaries += 1
    if not runs:
        raise LogError(
            f"{path}: an SGLang bench_serving summary (aggregates only, no per-request data); "
            "re-run `python -m sglang.bench_serving ... --output-details` and pass that file"
        )
    found = BenchRows()
    for number, doc in runs:
        part = per_request_arrays(doc, f"{path}:{number}", "SGLang")
        if len(runs) > 1:
            for row in part.rows:
                row["run"] = f"line{number}@{doc.get('request_rate', '?')}"
        found.extend(part, f"{number}:" if len(runs) > 1 else "")
    if summaries:
        found.notes.append(f"{summaries} SGLang summary lines without per-request data skipped")
    return found
