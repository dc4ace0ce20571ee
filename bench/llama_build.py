"""Benchmark: llama.cpp speed of the portable build against its CPU variants and a native build.

Runs the same measurement for each build, alternating them, and prints JSON: prompt evaluation
and generation tokens/s per build (median of the rounds) and each build's ratio over the
portable baseline. Same model, threads, prompt and greedy decoding for all. The builds: the
portable baseline of the ``--portable`` venv (what `make serve` installs), each CPU variant
installed beside it that this CPU runs (loaded through ``LLAMA_CPP_LIB_PATH`` as the server
loads them; scripts/install-llama-cpp.sh), and, with ``--native``, a venv built with
`NATIVE=1 scripts/install-llama-cpp.sh VENV/bin/python`.

    python bench/llama_build.py --portable .venv/bin/python [--native VENV/bin/python] \
        [--model FILE.gguf] [--threads 1,2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHILD = r"""
import json, sys, time
from llama_cpp import Llama
model, threads = sys.argv[1], int(sys.argv[2])
llm = Llama(model_path=model, n_ctx=2048, n_threads=threads, n_threads_batch=threads,
            verbose=False, seed=1)
prompt = "You are a helpful voice assistant. " * 24 + "Tell me a long story about a dragon."
tokens = llm.tokenize(prompt.encode())
llm.eval(tokens[:8])  # warm
llm.reset()
started = time.perf_counter()
llm.eval(tokens)
prompt_s = time.perf_counter() - started
n, started = 0, time.perf_counter()
for token in llm.generate(tokens, temp=0.0, reset=False):
    n += 1
    if n == 128:
        break
gen_s = time.perf_counter() - started
import llama_cpp
print(json.dumps({"prompt_tokens": len(tokens), "prompt_tps": len(tokens) / prompt_s,
                  "gen_tokens": n, "gen_tps": n / gen_s,
                  "system_info": llama_cpp.llama_print_system_info().decode().strip()}))
"""


def _builds(args: argparse.Namespace) -> dict[str, tuple[str, dict[str, str]]]:
    """name -> (python, extra environment)."""
    prefix = subprocess.run([args.portable, "-c", "import sys; print(sys.prefix)"],
                            capture_output=True, text=True, check=True).stdout.strip()
    from voice_server.llm.llama_cpu import build_record, cpu_flags, variants

    builds = {"portable": (args.portable, {})}
    for build in variants(build_record(prefix), prefix):
        if set(build.requires) <= cpu_flags():
            builds[build.name] = (args.portable, build.env)
    if args.native:
        builds["native"] = (args.native, {})
    return builds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--portable", required=True, help="python of the portable build's venv")
    ap.add_argument("--native", help="python of a native build's venv")
    ap.add_argument("--model", help="GGUF file (default: the bundled model)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.model is None:
        from voice_server.llm.local import tiny_gguf_path

        args.model = str(tiny_gguf_path())
    builds = _builds(args)
    result: dict = {"model": Path(args.model).name, "rounds": args.rounds, "threads": {}}
    for threads in [int(t) for t in args.threads.split(",")]:
        runs: dict[str, list[dict]] = {name: [] for name in builds}
        for _ in range(args.rounds):
            for name, (python, env) in builds.items():  # alternate: drift hits all alike
                out = subprocess.run([python, "-c", CHILD, args.model, str(threads)],
                                     capture_output=True, text=True, check=True, timeout=600,
                                     env={**os.environ, **env})
                runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
        figures = {name: {"prompt_tps": round(statistics.median(r["prompt_tps"] for r in rs), 1),
                          "gen_tps": round(statistics.median(r["gen_tps"] for r in rs), 1),
                          "system_info": rs[0]["system_info"]}
                   for name, rs in runs.items()}
        for name in builds:
            if name != "portable":
                figures[f"ratio_{name}_over_portable"] = {
                    key: round(figures[name][key] / figures["portable"][key], 3)
                    for key in ("prompt_tps", "gen_tps")}
        result["threads"][threads] = figures
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
