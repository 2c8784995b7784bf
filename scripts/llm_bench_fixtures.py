"""Produce tests/logs/data/ result files by running real load generators on loopback.

    python scripts/llm_bench_fixtures.py --venv /work/venvs/guidellm

The tools need PyTorch, too heavy to install in CI, so their output is
committed and this script says how it was made: it starts the streaming
server in tests/logs/openai_stream_server.py on 127.0.0.1, builds a small
byte-level BPE tokenizer locally (no model hub), runs guidellm from the venv
(`pip install guidellm` there) and SGLang's bench_serving (the sglang wheel
installed there with --no-deps plus the few modules its benchmark imports)
and `vllm bench serve` (the same way), and copies their outputs. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.logs.openai_stream_server import MODEL, Timing, serve_in_thread  # noqa: E402

OUT = ROOT / "tests" / "logs" / "data"


def build_tokenizer(venv_python: str, where: Path) -> Path:
    """A small byte-level BPE tokenizer, trained here on made-up words (no model hub)."""
    code = f"""
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
words = [f"word{{i}} token{{i % 97}} text{{i % 13}}" for i in range(3000)]
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<eos>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(words, trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
fast.save_pretrained({str(where)!r})
"""
    subprocess.run([venv_python, "-c", code], check=True)
    return where


def run_guidellm(venv: Path, url: str, tokenizer: Path, work: Path) -> Path:
    """guidellm at two constant rates (a small sweep), JSON report."""
    out = work / "benchmarks.json"
    cmd = [
        str(venv / "bin" / "guidellm"),
        "run",
        "--backend",
        f"kind=openai_http,target={url},model={MODEL}",
        "--profile",
        "kind=constant,rate=8",
        "--override",
        "profile.rate",
        "8,32",
        "--constraint",
        "kind=max_requests,count=30",
        "--data",
        "kind=synthetic_text,prompt_tokens=64,prompt_tokens_stdev=32,prompt_tokens_min=8,"
        "prompt_tokens_max=160,output_tokens=24,output_tokens_stdev=12,output_tokens_min=1,"
        "output_tokens_max=60",
        "--tokenizer",
        f"kind=huggingface_auto,model={tokenizer}",
        "--output",
        f"kind=json,path={out}",
        "--disable-console-interactive",
    ]
    subprocess.run(cmd, check=True, cwd=work, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    return out


def run_sglang(venv: Path, url: str, tokenizer: Path, work: Path, details: bool) -> Path:
    """SGLang bench_serving (chat API, random token ids), with or without --output-details."""
    out = work / ("sglang_details.jsonl" if details else "sglang_summary.jsonl")
    cmd = [
        str(venv / "bin" / "python"),
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang-oai-chat",
        "--base-url",
        url,
        "--model",
        MODEL,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        "64",
        "--random-output-len",
        "24",
        "--random-range-ratio",
        "0.25",
        "--num-prompts",
        "40",
        "--request-rate",
        "16",
        "--seed",
        "7",
        "--ready-check-timeout-sec",
        "0",
        "--disable-tqdm",
        "--output-file",
        str(out),
        *(["--output-details"] if details else []),
    ]
    subprocess.run(cmd, check=True, cwd=work, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    return out


def run_vllm(venv: Path, url: str, tokenizer: Path, work: Path, details: bool) -> Path:
    """vLLM bench serve (chat API, random dataset), with or without --save-detailed."""
    name = "vllm_detailed.json" if details else "vllm_summary.json"
    cmd = [
        str(venv / "bin" / "vllm"),
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        MODEL,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        "16",
        "--num-prompts",
        "30",
        "--request-rate",
        "20",
        "--seed",
        "3",
        "--save-result",
        *(["--save-detailed"] if details else []),
        "--result-dir",
        str(work),
        "--result-filename",
        name,
    ]
    subprocess.run(cmd, check=True, cwd=work, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    return work / name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, required=True, help="venv with guidellm installed")
    parser.add_argument(
        "--tools", default="guidellm,sglang,vllm", help="comma-separated: guidellm,sglang,vllm"
    )
    args = parser.parse_args()
    tools = set(args.tools.split(","))
    OUT.mkdir(parents=True, exist_ok=True)
    timing = Timing(ttft_ms=15, prefill_ms_per_token=0.2, queue_ms=3, itl_ms=3, fail_every=13)
    with tempfile.TemporaryDirectory() as tmp, serve_in_thread(timing) as url:
        work = Path(tmp)
        tok = build_tokenizer(str(args.venv / "bin" / "python"), work / "tokenizer")
        if "guidellm" in tools:
            report = run_guidellm(args.venv, url, tok, work)
            data = json.loads(report.read_text())
            shutil.copy(report, OUT / "guidellm_benchmarks.json")
            n = [len(b["requests"]["successful"]) for b in data["benchmarks"]]
            print(f"guidellm: {len(n)} benchmarks, successful requests {n}")
        for tool, run in (("sglang", run_sglang), ("vllm", run_vllm)):
            if tool not in tools:
                continue
            for details in (True, False):
                path = run(args.venv, url, tok, work, details)
                shutil.copy(path, OUT / path.name)
                print(f"{tool}: {path.name}, {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
