"""The golden cases: every command, every output format, on ../shared/data.

Each case is a name and the CLI argv, with `{data}`, `{examples}` and `{tmp}` filled in at
run time. A case whose argv writes `-o {tmp}/NAME` is read back from that file (HTML and
files the command writes); otherwise the golden text is the command's stdout. Cases run
in order in one temporary folder, so a later case may read what an earlier one wrote
(rebudget reads the budget `init --from` measured).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from typer.testing import CliRunner

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "expected"
ROOT = HERE.parents[1]
EXAMPLES = ROOT / "examples"

VLLM = "{data}/vllm_llama33-70b_tp8_sharegpt_qps_inf.json"
GRID = "{data}/vllm_grid/vllm_llama33-70b_04_tp4_pp2_IB_qps_%s.json"
DELAG = "{data}/delag_eshopper_000.csv"
NEZHA = "{data}/nezha_trainticket_baseline_spans.csv"
AIPERF = "{data}/aiperf_profile_export.jsonl"
LLMPERF = "{data}/llmperf_anyscale_70b.json"


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    output: str = ""  # file under {tmp} the command writes; "" means stdout


def _fmt(name: str, argv: tuple[str, ...], formats: tuple[str, ...]) -> list[Case]:
    out: list[Case] = []
    for f in formats:
        if f == "html":
            file = f"{name}.html"
            out.append(Case(f"{name}.html", (*argv, "-f", f, "-o", "{tmp}/" + file), file))
        else:
            out.append(Case(f"{name}.{f}", (*argv, "-f", f)))
    return out


CASES: list[Case] = [
    Case("init-rag.yaml", ("init", "-t", "rag")),
    Case("init-llm-chat.yaml", ("init", "-t", "llm-chat")),
    Case(
        "init-from-vllm.yaml",
        (
            "init",
            "--from",
            VLLM,
            "--slo",
            "ttft.p95=500,tpot.p99=60,e2e.p99=20000",
            "-o",
            "{tmp}/vllm.yaml",
        ),
        "vllm.yaml",
    ),
    Case(
        "init-from-aiperf.yaml",
        ("init", "--from", AIPERF, "-o", "{tmp}/aiperf.yaml"),
        "aiperf.yaml",
    ),
    *_fmt(
        "plan-seed-rag",
        ("plan", "{examples}/seed-rag.yaml", "--samples", "5000"),
        ("text", "md", "json", "html"),
    ),
    *_fmt(
        "plan-seed-llm-objectives",
        ("plan", "{examples}/seed-llm-objectives.yaml", "--samples", "5000"),
        ("text", "json"),
    ),
    *_fmt("rebudget-vllm", ("rebudget", "{tmp}/vllm.yaml", VLLM), ("text", "md", "json", "html")),
    *_fmt(
        "audit-vllm",
        ("audit", VLLM, "--slo", "ttft.p95=500,tpot.p99=60,e2e.p99=20000"),
        ("md", "json", "html"),
    ),
    *_fmt(
        "audit-delag", ("audit", DELAG, "--slo", "p99=900", "--total", "Latency"), ("md", "json")
    ),
    *_fmt("audit-nezha", ("audit", NEZHA, "--slo", "p99=900"), ("md", "json")),
    *_fmt("audit-aiperf", ("audit", AIPERF, "--slo", "ttft.p95=500"), ("md", "json")),
    *_fmt("audit-llmperf", ("audit", LLMPERF, "--slo", "p99=20000"), ("json",)),
    *_fmt("replay-nezha", ("replay", NEZHA), ("json", "text", "md", "html")),
    *_fmt("replay-aiperf", ("replay", AIPERF), ("json", "text")),
    Case("replay-vllm-refused.text", ("replay", VLLM)),
    *_fmt(
        "simulate-grid",
        ("simulate", GRID % "04", "--slo", "ttft.p95=500", "--duration", "2m", "--seed", "3"),
        ("md", "json", "html"),
    ),
    *_fmt(
        "capacity-grid",
        (
            "capacity",
            GRID % "01",
            GRID % "04",
            "--slo",
            "ttft.p95=500",
            "--load",
            "1,4",
            "--duration",
            "2m",
            "--seed",
            "3",
        ),
        ("md", "json", "html"),
    ),
    *[
        Case(f"export-rag-{t}.yaml", ("export", "{examples}/rag.yaml", "--to", t))
        for t in ("prometheus-rules", "keda", "argo-rollouts", "flagger", "openslo", "grafana")
    ],
    Case(
        "export-rag-openslo-vllm.yaml",
        ("export", "{examples}/rag.yaml", "--to", "openslo", "--metrics", "vllm"),
    ),
    Case(
        "export-openslo-file",
        ("export", "{examples}/rag.yaml", "--to", "openslo", "-o", "{tmp}/slo.yaml"),
        "slo.yaml",
    ),
    Case("import-openslo.yaml", ("import", "openslo", "{tmp}/slo.yaml")),
]

# What changes from run to run or machine to machine: masked before comparing.
# Timestamps of the data are kept; only those of today (the run's own clock) are masked.
_TODAY = sorted({date.today().isoformat(), datetime.now(UTC).date().isoformat()})
_MASKS = [
    (
        re.compile(
            r"(?:{})[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?".format("|".join(_TODAY))
        ),
        "[NOW]",
    ),
    (re.compile(r"\b(?:{})\b".format("|".join(_TODAY))), "[TODAY]"),
    (re.compile(r"tailbudget[ /=:]+v?\d+\.\d+(?:\.\d+)?(?:[.+-][\w.]+)?"), "tailbudget [VERSION]"),
    (re.compile(r'"(tailbudget_)?version": "[^"]*"'), '"version": "[VERSION]"'),
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:s|ms) (?:to run|elapsed|wall)\b"), "<ELAPSED>"),
]


# Sums DuckDB runs in parallel differ in the last bits from run to run: long floats are
# compared to 11 significant digits.
_LONG_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d{9,}(?:e[+-]?\d+)?(?![\w.])")


def _short(match: re.Match[str]) -> str:
    return f"{float(match.group()):.11g}"


def mask(text: str, data: Path, tmp: Path) -> str:
    from tailbudget._version import __version__

    for path, token in (
        (tmp, "{tmp}"),
        (data.resolve(), "{data}"),
        (data, "{data}"),
        (EXAMPLES, "{examples}"),
    ):
        text = text.replace(str(path), token)
    for pattern, token in _MASKS:
        text = pattern.sub(token, text)
    version = re.escape(__version__)
    text = re.sub(r"(version\W{1,12})" + version + r"\b", r"\1[VERSION]", text, flags=re.I)
    text = re.sub(r">\s*" + version + r"\s*<", ">[VERSION]<", text)  # an HTML cell
    return _LONG_FLOAT.sub(_short, text)


def normalise_html(html: str) -> str:
    """An HTML page as its visible text plus a hash of the rest (scripts, styles, SVG).

    Embedded charts and styles are long; the golden keeps the readable text and a digest
    of the markup, so a changed chart still fails, with a readable diff for the text."""
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S | re.I)
    text = re.sub(r"<[^>]+>", " ", text)
    text = re.sub(r"[ \t]+", " ", text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    digest = hashlib.sha256(html.encode()).hexdigest()[:16]
    return "\n".join([f"<markup sha256:{digest}>", *lines]) + "\n"


def run_case(runner: CliRunner, case: Case, data: Path, tmp: Path) -> tuple[int, str]:
    """Run one case; its exit code and masked output (HTML normalised)."""
    from tailbudget.cli import app

    fill = {"data": str(data), "examples": str(EXAMPLES), "tmp": str(tmp)}
    argv = [a.format(**fill) for a in case.argv]
    result = runner.invoke(app, argv)
    text = (tmp / case.output).read_text(encoding="utf-8") if case.output else result.stdout
    text = mask(text, data, tmp)
    if case.name.endswith(".html") and result.exit_code in (0, 1):
        text = normalise_html(text)
    elif case.name.endswith(".json") and result.exit_code in (0, 1):
        json.loads(text)  # a JSON case must stay JSON
    if result.stderr:
        text += "--- stderr\n" + mask(result.stderr, data, tmp)
    return result.exit_code, text


def expected_path(case: Case) -> Path:
    return EXPECTED / case.name
