"""`simulate` and `capacity` under hostile input: the work a command line implies is
estimated and refused before anything is allocated (one `error:` line, exit 2, naming the
option, the estimate and the bound), arrival files are checked, spans are bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tailbudget.cli import app
from tests.cli._expect import one_line_error

runner = CliRunner()
SRC = Path(__file__).resolve().parents[2] / "src"


def _log(path: Path, epochs: np.ndarray) -> Path:
    rng = np.random.default_rng(1)
    db, llm = rng.lognormal(3, 0.5, epochs.size), rng.lognormal(5, 0.5, epochs.size)
    rows = [
        f"{t!r},{d + m + 5:.3f},{d:.3f},{m:.3f},0"
        for t, d, m in zip(epochs.tolist(), db, llm, strict=True)
    ]
    path.write_text("ts,total_ms,db_ms,llm_ms,error\n" + "\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _log(tmp_path_factory.mktemp("sim") / "log.csv", 1.7e9 + np.arange(300) * 0.5)


@pytest.mark.parametrize("command", ["simulate", "capacity"])
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--duration", "10000h"], "--duration 10000h"),
        (["--arrivals", "poisson:1e9"], "--arrivals poisson:1e9"),
        (["--arrivals", "burst:1e12"], "--arrivals burst:1e12"),
    ],
)
def test_a_run_too_large_is_refused_before_it_starts(log, command, args, needle):
    result = runner.invoke(app, [command, str(log), "--slo", "p95=800", *args])
    line = one_line_error(result, needle, "simulated events", "above the bound of", "--max-events")
    assert "4,000,000" in line or "80,000,000" in line


@pytest.mark.parametrize(
    "args",
    [["--replicas", "1000000000000"], ["--policy", "fixed:100000000000"]],
)
def test_replicas_too_many_are_refused(log, args):
    result = runner.invoke(app, ["simulate", str(log), "--slo", "p95=800", *args])
    one_line_error(result, " ".join(args), "replica slots", "--max-events")


@pytest.mark.parametrize("args", [["--replicas", "1e12"], ["--policy", "fixed:1e11"]])
def test_replicas_in_exponent_form_areone_line_error(log, args):
    result = runner.invoke(app, ["simulate", str(log), "--slo", "p95=800", *args])
    one_line_error(result)


def test_max_events_raises_the_bound_and_refuses_nonsense(log):
    args = ["simulate", str(log), "--slo", "p95=800", "--arrivals", "poisson:2", "--duration"]
    one_line_error(runner.invoke(app, [*args, "1000h", "--policy", "fixed"]), "--duration 1000h")
    fine = runner.invoke(app, [*args, "2m", "--policy", "fixed", "--max-events", "100000"])
    assert fine.exit_code == 0, fine.output
    one_line_error(runner.invoke(app, [*args, "2m", "--max-events", "0"]), "--max-events must be")


@pytest.mark.parametrize("command", ["simulate", "capacity"])
@pytest.mark.parametrize("duration", ["0", "0s", "0m"])
def test_a_zero_duration_is_refused(log, command, duration):
    result = runner.invoke(app, [command, str(log), "--slo", "p95=800", "--duration", duration])
    one_line_error(result, "--duration must be a positive time", repr(duration))


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("binary.csv", b"\x00\xff\xfe\x01binary", "not UTF-8 text"),
        ("latin1.csv", "ts\n1\n2\ncaf\xe9\n".encode("latin-1"), "not UTF-8 text"),
        ("nan.csv", b"ts\n1\nnan\n3\n", "line 3: arrival time 'nan' must be a finite time"),
        ("inf.csv", b"ts\n1\ninf\n3\n", "arrival time 'inf' must be a finite time"),
        ("neginf.csv", b"ts\n1\n-inf\n3\n", "arrival time '-inf' must be a finite time"),
        ("negative.csv", b"ts\n1\n-1e12\n3\n", "arrival time '-1e12' must be a finite time"),
        ("nat.csv", b"ts\n2023-01-01T00:00:00\nNaT\n", "arrival time 'NaT'"),
        ("far.csv", b"ts\n1\n1e12\n", "policy evaluations"),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "capacity"])
def test_hostile_arrival_files_areone_line_error(log, tmp_path, command, name, content, needle):
    trace = tmp_path / name
    trace.write_bytes(content)
    result = runner.invoke(app, [command, str(log), "--slo", "p95=800", "--arrivals", str(trace)])
    one_line_error(result, needle)


@pytest.mark.parametrize(
    ("name", "second", "needle"),
    [("y2200.csv", 7_258_118_400.0, "to 2200-01-01"), ("y1970.csv", 0.0, "1970-01-01 to")],
)
@pytest.mark.parametrize("command", ["simulate", "capacity"])
def test_a_log_spanning_centuries_is_refused(tmp_path, command, name, second, needle):
    epochs = 1.7e9 + np.arange(300) * 0.5
    epochs[::2] = second
    log = _log(tmp_path / name, epochs)
    result = runner.invoke(app, [command, str(log), "--slo", "p95=800"])
    one_line_error(result, needle, "minutes to fit over", "check its timestamps", "--max-events")


def test_refused_runs_stay_under_a_gigabyte(log):
    """Each case in a child process that reports its peak RSS: a refusal that allocated
    first would show it (the cases used to die of MemoryError after 4 GB)."""
    cases = [
        ["--duration", "10000h"],
        ["--replicas", "1000000000000"],
        ["--arrivals", "poisson:1e9"],
        ["--arrivals", "burst:1e12"],
    ]
    # VmHWM is this process image's own peak: ru_maxrss survives exec on Linux, so a child
    # forked from a large pytest process would report the parent's size, not its own.
    script = (
        "import sys\n"
        "from tailbudget.cli import main\n"
        "sys.argv = ['tailbudget', *sys.argv[1:]]\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')]\n"
        "    print(hwm[0].split()[1], file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    for args in cases:
        done = subprocess.run(
            [sys.executable, "-c", script, "simulate", str(log), "--slo", "p95=800", *args],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr[-2000:]
        *lines, peak_kib = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "--max-events" in lines[0], done.stderr[-2000:]
        assert int(peak_kib) < 1 << 20, (args, peak_kib)


def test_the_python_api_refuses_the_same_runs_in_its_own_words(log):
    import tailbudget as tb
    from tailbudget.errors import TailbudgetError

    with pytest.raises(TailbudgetError, match=r"duration='10000h'.*raise max_events"):
        tb.simulate(str(log), slo="p95=800", duration="10000h")
    with pytest.raises(TailbudgetError, match=r"arrivals='poisson:1e9'"):
        tb.capacity(str(log), slo="p95=800", arrivals="poisson:1e9")
    with pytest.raises(TailbudgetError, match="duration must be a positive time") as err:
        tb.simulate(str(log), slo="p95=800", duration=0)
    assert err.value.param == "duration"
    with pytest.raises(TailbudgetError, match="max_events must be") as err:
        tb.simulate(str(log), slo="p95=800", max_events=0)
    assert err.value.param == "max_events"


@pytest.mark.parametrize("command", ["simulate", "capacity"])
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--load", "0"], "--load"),  # simulate: a traceback
        (["--load", "nan"], "--load"),  # "about nan simulated events"
        (["--load", "inf"], "--load"),
        (["--seed", "-1"], "--seed"),  # numpy's ValueError traceback
        (["--provision-delay", "1e300h"], "--provision-delay"),
        (["--provision-delay", "999999999999s"], "--provision-delay"),  # 1e12 s hung
        (["--cold-window-min", "-1"], "--cold-window-min"),  # exit 0
        (["--cold-window-min", "nan"], "--cold-window-min"),  # exit 0
        (["--cold-factor", "inf"], "--cold-factor"),  # exit 0
        (["--concurrency", "1000000000000"], "--concurrency"),
    ],
)
def test_issue_35_model_options_are_one_line(log, command, args, needle):
    result = runner.invoke(app, [command, str(log), "--slo", "p95=800", *args])
    one_line_error(result, needle)


def test_issue_35_logging_overhead_out_of_range_is_one_line(log):
    result = runner.invoke(
        app, ["simulate", str(log), "--slo", "p95=800", "--logging-overhead-ms", "inf"]
    )
    one_line_error(result, "--logging-overhead-ms")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("ts,output_tokens\n0,-5\n1,3\n", "output_tokens '-5'"),
        ("ts,output_tokens\n0,nan\n", "output_tokens 'nan'"),
        ("ts,input_tokens,output_tokens\n0,inf,3\n", "input_tokens 'inf'"),
    ],
)
def test_issue_35_arrival_fields_are_checked_while_reading(log, tmp_path, body, needle):
    trace = tmp_path / "arrivals.csv"
    trace.write_text(body)
    result = runner.invoke(
        app, ["simulate", str(log), "--slo", "p95=800", "--arrivals", str(trace)]
    )
    one_line_error(result, needle)


def test_issue_35_an_arrival_file_past_the_bound_stops_while_reading(log, tmp_path):
    trace = tmp_path / "arrivals.csv"
    trace.write_text("ts\n" + "\n".join(str(i) for i in range(2_000)) + "\n")
    result = runner.invoke(
        app,
        [
            "simulate",
            str(log),
            "--slo",
            "p95=800",
            "--arrivals",
            str(trace),
            "--max-events",
            "1000",
        ],
    )
    one_line_error(result, "more than 1,000 arrivals")


def test_issue_35_the_event_bound_counts_decode_steps(tmp_path):
    # Answers of 1e9 tokens were stepped one token at a time (still running at 120 s).
    import json

    grid = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "vllm_grid"
    source = grid / "vllm_llama33-70b_04_tp4_pp2_IB_qps_04.json"
    if not source.is_file():
        pytest.skip("shared data not present")
    run = json.loads(source.read_text())
    run["output_lens"] = [10**9] * len(run["output_lens"])
    log = tmp_path / "vllm_1e9.json"
    log.write_text(json.dumps(run))
    result = runner.invoke(app, ["simulate", str(log), "--slo", "ttft.p95=2000"])
    one_line_error(result, "decode steps", "above the bound of", "--max-events")


@pytest.mark.parametrize("command", ["simulate", "capacity"])
def test_an_llm_log_without_times_or_rate_says_what_to_give(tmp_path, command):
    # LLMPerf's individual responses have no start times and no rate: the error named no
    # file and no way forward ("LLM logs need a duration or timestamps ...").
    rows = [
        {"ttft_s": 0.3, "end_to_end_latency_s": 2.0 + i / 100, "inter_token_latency_s": 0.01,
         "number_input_tokens": 500, "number_output_tokens": 150, "error_code": None}
        for i in range(40)
    ]  # fmt: skip
    path = tmp_path / "llmperf_run.json"
    path.write_text(json.dumps(rows))
    result = runner.invoke(app, [command, str(path), "--slo", "ttft.p95=500"])
    one_line_error(result, "llmperf_run.json", "no start times", "timestamps", "states its rate")
