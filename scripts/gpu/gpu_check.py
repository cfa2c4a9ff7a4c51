#!/usr/bin/env python3
"""The GPU check of a shardscope bundle: DIR/gpu-check.sh runs this file (docs/cuda.md).

In one go, each step under its own time limit and all of them under --budget seconds (570, so
that the whole check stays under 10 minutes on one H100):
  probe       is there a GPU? nvidia-smi -L and a one-step `shardscope run --backend cuda`;
              with neither seeing a device: one line and exit 2, nothing written
  tests       the gpu-labelled tests: the cuda instances of autograd_tests and parallel_tests
              (names ending in /cuda or _cuda, as ctest's label gpu) and all of cuda_tests and
              nccl_tests; passed, failed and skipped counted from GoogleTest's JSON
  modes       shardscope run --backend cuda --comm threads, every mode at degree 1, 2 and 4 with
              the reference check (ranks as threads sharing the GPU); --comm nccl too at each
              degree that nvidia-smi has GPUs for; and the Llama preset (GQA, 2 layers, full
              recomputation) in tp, tp-sp and ulysses at degree 2
  compare     one layer step in f32 and f64 dumped on each backend (--dump), then
              `shardscope check CUDA CPU`
  layer_step  bin/layer_bench --backend=cuda beside bench/torch_layer.py --device cuda (TF32 off
              on both sides) at s,b,h,a = 1024,4,1024,16 and 2048,2,2048,16, the gpt preset and
              the llama one (with 4 key/value heads)
  bandwidth   bin/backend_bandwidth --backend cuda at 256 MiB: GeLU, dropout and add beside a
              device-to-device copy
  staging     bin/staging_bench --backend cuda: the all_reduce of 2 and 4 ranks sharing the GPU,
              staged through host memory, beside the host collective alone and the round trip
  sanitizer   compute-sanitizer memcheck and racecheck over a one-step tp-sp run at degree 2,
              the gpt layer and the Llama stack
              (last: the slowest steps, so that a short budget cuts them and not the figures)
A program of the bundle that does not start (a library missing) ends the check at the probe with
one line and exit 1. Everything goes into one results file, FOLDER/results.json (the steps, their commands, exit codes,
counts and figures, the machine, and a readable summary under "summary"); each step's output is
in FOLDER/logs/. The summary is printed, and the results file's path last. Exit 0 when every step
passed, 1 when one failed, timed out, could not run (a missing tool) or was cut by the budget.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import gpu_check_steps as steps_mod  # beside this file (python puts the script's folder on the path)
from gpu_check_steps import last_line


def read_bundle_env(bundle):
    """The bundle's environment (env.sh sourced by bash) and its facts (bundle.env)."""
    out = subprocess.run(["bash", "-c", '. "$1/env.sh" && env -0', "_", str(bundle)],
                         capture_output=True, timeout=120, check=True)
    env = dict(kv.split("=", 1) for kv in out.stdout.decode().split("\0") if "=" in kv)
    return tf32_off(env), out.stderr.decode().strip()


def tf32_off(env):
    """TF32 off whatever the shell had: shardscope's switch unset, and cuBLAS's and cuDNN's
    process-wide override (NVIDIA_TF32_OVERRIDE=0) for shardscope and PyTorch alike."""
    env.pop("SHARDSCOPE_TF32", None)
    env["NVIDIA_TF32_OVERRIDE"] = "0"
    return env


def plain_env():
    return tf32_off(dict(os.environ))


def capture(argv, timeout=60, env=None):
    """(exit code, stdout + stderr) of a short command; (None, why) when it cannot run."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, (p.stdout + p.stderr).strip()
    except FileNotFoundError:
        return None, f"{argv[0]}: not installed"
    except subprocess.TimeoutExpired:
        return None, f"{argv[0]}: no answer in {timeout} s"


def find_tool(name):
    """A CUDA tool on PATH, under $CUDA_HOME/bin or /usr/local/cuda/bin."""
    found = shutil.which(name)
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(os.path.join(root, "bin", name), os.X_OK):
            return os.path.join(root, "bin", name)
    return None


def machine_facts(bundle_env):
    """GPUs, driver, CUDA versions, glibc, OS, PyTorch: what a result must be read with."""
    facts = {"host": socket.gethostname(), "glibc": os.confstr("CS_GNU_LIBC_VERSION")}
    try:
        facts["os"] = re.search(r'PRETTY_NAME="?([^"\n]*)', Path("/etc/os-release").read_text())[1]
    except (OSError, TypeError):
        facts["os"] = "unknown"
    rc, text = capture(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total",
                        "--format=csv,noheader"])
    facts["gpus"] = []
    if rc == 0:
        for line in text.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 4:
                facts["gpus"].append(dict(zip(("index", "name", "driver", "memory"), parts)))
    facts["nvidia_smi"] = "ok" if rc == 0 else text
    rc, text = capture(["nvidia-smi"])
    match = re.search(r"CUDA Version:\s*([\d.]+)", text or "")
    facts["driver_cuda_version"] = match[1] if match else None
    facts["driver"] = facts["gpus"][0]["driver"] if facts["gpus"] else None
    nvcc = find_tool("nvcc")
    rc, text = capture([nvcc, "--version"]) if nvcc else (None, "nvcc: not found")
    match = re.search(r"release [\d.]+, V([\d.]+)", text)
    facts["nvcc"] = match[1] if match else text
    rc, text = capture([sys.executable, "-c",
                        "import torch; print(torch.__version__, torch.version.cuda)"], timeout=120)
    facts["torch"] = (text.splitlines()[-1] if rc == 0 and text else
                      f"not importable ({last_line(text)})")
    facts["libraries"] = dict(
        kv.split("=", 1) for kv in bundle_env.get("SHARDSCOPE_BUNDLE_FOUND", "").split() if "=" in kv)
    return facts


def banner(text):
    """The indented lines under `shardscope run`'s "backend cuda:" (runtime, driver, cuBLAS,
    NCCL versions and one line per device)."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("backend cuda:"):
            inside = True
        elif inside and line.startswith("  "):
            lines.append(line.strip())
        else:
            inside = False
    return lines


NO_DEVICE = re.compile(r"(no CUDA device[^\n]*|needs \d+ CUDA devices?[^\n]*)")


def probe(bundle, env):
    """Is there a GPU? (device count by nvidia-smi, the probe run's exit code and output)."""
    rc_smi, smi = capture(["nvidia-smi", "-L"])
    gpus = len([l for l in smi.splitlines() if l.startswith("GPU ")]) if rc_smi == 0 else 0
    argv = [str(bundle / "bin" / "shardscope"), "run", "--backend", "cuda", "--mode", "single",
            "--degree", "1", "--steps", "1", "--seq", "16", "--batch", "1", "--hidden", "32",
            "--heads", "2"]
    rc, text = capture(argv, timeout=120, env=env)
    if rc_smi == 0:
        smi_says = f"nvidia-smi lists {gpus} GPU(s)"
    elif rc_smi is None:
        smi_says = smi  # "nvidia-smi: not installed" or "...: no answer in 60 s"
    else:
        smi_says = f"nvidia-smi exits {rc_smi}: {smi.splitlines()[-1] if smi else 'no output'}"
    return gpus, smi_says, argv, rc, text


def main():
    parser = argparse.ArgumentParser(description="the GPU check of a shardscope bundle")
    parser.add_argument("--bundle", type=Path, required=True, help="the bundle folder")
    parser.add_argument("--out", type=Path, help="results folder (DIR/results/gpu-check-DATE)")
    parser.add_argument("--budget", type=float, default=570, help="seconds for all steps")
    parser.add_argument("--rehearsal", action="store_true",
                        help="the check's own test without a GPU: every step on the CPU backend "
                             "with small sizes; its figures mean nothing")
    args = parser.parse_args()
    bundle = args.bundle.resolve()
    started = datetime.datetime.now(datetime.timezone.utc)

    env, env_messages = read_bundle_env(bundle)
    gpus, smi_says, probe_argv, probe_rc, probe_text = probe(bundle, env)
    no_device = NO_DEVICE.search(probe_text or "")
    if probe_rc is not None and probe_rc != 0 and no_device and gpus == 0 and not args.rehearsal:
        print(f"gpu-check: no GPU found ({smi_says}; shardscope: {no_device[1]}): nothing to "
              f"check on this machine", file=sys.stderr)
        return 2

    if probe_rc == 127 or "error while loading shared libraries" in (probe_text or ""):
        print(f"gpu-check: the bundle's programs do not start here: {last_line(probe_text)} "
              f"(env.sh: {env.get('SHARDSCOPE_BUNDLE_FOUND', '')})", file=sys.stderr)
        return 1
    out = (args.out or bundle / "results" / f"gpu-check-{started:%Y%m%d-%H%M%S}").resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    runner = steps_mod.Runner(bundle, out, env, plain_env(), args.budget,
                              steps_mod.Plan(args.rehearsal))
    runner.record("probe", "probe", probe_argv, probe_rc, probe_text)
    facts = machine_facts(env)
    facts["env_sh"] = env_messages
    facts["cuda_report"] = banner(probe_text)
    steps_mod.run_all(runner, gpus, find_tool)

    bundle_facts = {k: v for k, v in env.items() if k.startswith("SHARDSCOPE_BUNDLE_")}
    results = {
        "format": "shardscope-gpu-check", "version": 1,
        "rehearsal": args.rehearsal,
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(time.monotonic() - runner.started, 1),
        "commit": bundle_facts.get("SHARDSCOPE_BUNDLE_COMMIT"),
        "bundle": {"dir": str(bundle), "built": bundle_facts.get("SHARDSCOPE_BUNDLE_BUILT"),
                   "nvcc": bundle_facts.get("SHARDSCOPE_BUNDLE_NVCC"),
                   "cuda_architectures": bundle_facts.get("SHARDSCOPE_BUNDLE_CUDA_ARCHITECTURES")},
        "machine": facts,
        "passed": all(s["status"] == "passed" for s in runner.steps),
        "steps": runner.steps,
        "figures": runner.figures,
    }
    results["summary"] = steps_mod.summary_lines(results)
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    print("\n".join(results["summary"]))
    print(path)
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
