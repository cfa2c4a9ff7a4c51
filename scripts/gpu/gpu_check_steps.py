"""The steps of the GPU check (gpu_check.py says what each does): a Runner that runs a command
under a time limit and records it, the steps with their parsers, and the readable summary."""
import collections
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

# The cuda instances of the backend-parameterised tests: a last name part "cuda" or "..._cuda",
# the rule by which tests/CMakeLists.txt gives them the ctest label gpu.
GPU_FILTER = "*/cuda:*/*_cuda"
TESTS = [("autograd_tests", GPU_FILTER, 150), ("parallel_tests", GPU_FILTER, 240),
         ("cuda_tests", "*", 150), ("nccl_tests", "*", 150)]
RUN_SHAPE = ["--seq", "256", "--batch", "4", "--hidden", "512", "--heads", "8", "--dropout",
             "0.1", "--seed", "1"]
# One layer step on each backend, then `shardscope check CUDA CPU` with the check's own defaults
# for the dtype (parallel/run/tensor_compare.h: |a - b| <= atol * max|b| + rtol * |b|, the rule and
# numbers every reference check uses; another summation order through the layer is what they
# cover, between layouts there and between backends here).
COMPARE = [("f32", "3e-5", "3e-5"), ("f64", "1e-11", "1e-11")]
COMPARE_SHAPE = ["--seq", "128", "--batch", "2", "--hidden", "256", "--heads", "8", "--dropout",
                 "0.1", "--seed", "1", "--steps", "1", "--mode", "single", "--degree", "1"]
SANITIZED_RUN = ["--mode", "tp-sp", "--degree", "2", "--steps", "1", "--seq", "32", "--batch", "2",
                 "--hidden", "64", "--heads", "4", "--dropout", "0.1", "--seed", "1"]
# The Llama preset as the runs above take it: grouped-query attention (8 query heads share 2
# key/value heads at the run shape, 4 share 2 at the sanitized one), two layers, full recomputation.
LLAMA_STACK = ["--model", "llama", "--kv-heads", "2", "--layers", "2", "--recompute", "full"]
# The layer step's shapes per model (s,b,h,a and, for llama, g: 4 key/value heads).
BENCH_SHAPES = {"gpt": ["1024,4,1024,16", "2048,2,2048,16"],
                "llama": ["1024,4,1024,16,4", "2048,2,2048,16,4"]}
BANDWIDTH_MIB = 256
LAYER_GOAL = 1.0  # at most PyTorch eager's time (issue 17's goal)
BANDWIDTH_GOAL = 0.8  # elementwise kernels at 80% of the copy's bandwidth or more


class Plan:
    """What the steps run: on cuda:0 for the check; on the CPU with small sizes for a rehearsal
    (--rehearsal: the check's own test on a machine without a GPU; its figures mean nothing)."""

    def __init__(self, rehearsal):
        self.rehearsal = rehearsal
        self.backend = "cpu" if rehearsal else "cuda"
        self.run_shape = (["--seq", "32", "--batch", "2", "--hidden", "64", "--heads", "4",
                           "--dropout", "0.1", "--seed", "1"] if rehearsal else RUN_SHAPE)
        self.bench_shapes = ({"gpt": ["32,2,64,4", "64,2,128,4"], "llama": ["32,2,64,4,2"]}
                             if rehearsal else BENCH_SHAPES)
        self.bandwidth_mib = 8 if rehearsal else BANDWIDTH_MIB

    def device_flags(self):
        """The backend flags of a run on the device: ranks as threads sharing it."""
        return ["--backend", self.backend, "--comm", "threads"]


class Runner:
    """Runs the steps' commands, each under min(its limit, what is left of the budget)."""

    def __init__(self, bundle, out, bundle_env, plain_env, budget, plan):
        self.bundle, self.out, self.logs, self.plan = bundle, out, out / "logs", plan
        self.env = {"bundle": bundle_env, "plain": plain_env}
        self.budget = budget
        self.started = time.monotonic()
        self.deadline = self.started + budget
        self.steps, self.figures = [], {}

    def bin(self, name):
        return str(self.bundle / "bin" / name)

    def _finish(self, step):
        self.steps.append(step)
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:5.0f} s] {step['status']:<9} {step['group']}/{step['name']}"
              f" ({step['seconds']} s){': ' + step['detail'] if step.get('detail') else ''}",
              flush=True)
        return step

    def record(self, group, name, argv, rc, text):
        """A command run before the Runner existed (the probe)."""
        (self.logs / f"{name}.log").write_text(text + "\n")
        step = {"group": group, "name": name, "command": shlex.join(argv), "rc": rc,
                "seconds": 0, "log": f"logs/{name}.log",
                "status": "passed" if rc == 0 else "failed"}
        if rc != 0:
            step["detail"] = last_line(text)
        return self._finish(step)

    def skip(self, group, name, status, why):
        return self._finish({"group": group, "name": name, "command": None, "rc": None,
                             "seconds": 0, "log": None, "status": status, "detail": why})

    def run(self, group, name, argv, limit, env="bundle", parse=None):
        remaining = self.deadline - time.monotonic()
        if remaining < 10:
            return self.skip(group, name, "not run", f"the check's {self.budget:.0f} s were spent")
        timeout = min(limit, remaining)
        log = self.logs / f"{name}.log"
        step = {"group": group, "name": name, "command": shlex.join(argv), "rc": None,
                "log": f"logs/{name}.log", "limit_s": round(timeout)}
        start = time.monotonic()
        with open(log, "wb") as f:
            try:
                p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=self.env[env],
                                     cwd=self.out, start_new_session=True)
            except OSError as error:
                step.update(status="missing", seconds=0, detail=f"cannot start {argv[0]}: {error}")
                return self._finish(step)
            try:
                step["rc"] = p.wait(timeout=timeout)
                step["status"] = "passed" if step["rc"] == 0 else "failed"
            except subprocess.TimeoutExpired:
                kill_group(p)
                step.update(status="timed out", detail=f"killed after {timeout:.0f} s")
        step["seconds"] = round(time.monotonic() - start, 1)
        text = log.read_text(errors="replace")
        if step["status"] == "failed":
            step["detail"] = f"exit {step['rc']}: {last_line(text)}"
        if parse and step["status"] != "timed out":
            try:
                parse(step, text)
            except (OSError, ValueError, KeyError, IndexError, TypeError) as error:
                if step["status"] == "passed":  # a failure's own detail says more
                    step.update(status="failed", detail=f"its output could not be read: {error!r}")
        return self._finish(step)


def kill_group(p):
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(p.pid, sig)
            p.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else "(no output)"


# ---- tests -------------------------------------------------------------------------------------
def skip_needs_fewer_gpus(reason, gpus):
    """True when a skip's reason asks for no more GPUs than there are (or for any at all)."""
    if "no CUDA device" in reason:
        return True
    needs = re.search(r"needs (\d+) CUDA device", reason)
    return bool(needs) and int(needs[1]) <= gpus


def gtest_parser(runner, json_path, gpus):
    def parse(step, text):
        counts, failed = collections.Counter(), []
        for suite in json.loads(json_path.read_text()).get("testsuites", []):
            for test in suite.get("testsuite", []):
                if test.get("status") == "NOTRUN":
                    continue
                name = f"{suite['name']}.{test['name']}"
                if test.get("failures"):
                    counts["failed"] += 1
                    failed.append(name)
                elif test.get("result") == "SKIPPED":
                    counts["skipped"] += 1
                else:
                    counts["passed"] += 1
        reasons = collections.Counter(m.strip() for m in re.findall(r"Skipped\n(.*)\n", text))
        # "needs 2 CUDA devices, found 1 (cudaGetDeviceCount: ...)": the part before the cause
        short = collections.Counter()
        for reason, n in reasons.items():
            short[re.split(r" \(|: ", reason)[0]] += n
        step["counts"] = dict(passed=counts["passed"], failed=counts["failed"],
                              skipped=counts["skipped"])
        step["skip_reasons"] = dict(reasons)
        step["failed_tests"] = failed
        detail = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
        # A skip that a GPU here should have prevented is a failure: "no CUDA device", or
        # "needs N CUDA devices" with N GPUs present.
        wrong = [r for r in reasons if skip_needs_fewer_gpus(r, gpus)]
        if sum(counts.values()) == 0:
            step.update(status="failed", detail="no test ran (the filter selected none)")
        elif counts["failed"] or step["rc"] != 0 or wrong:
            step["status"] = "failed"
            step["detail"] = detail + (f"; skipped though {gpus} GPU(s) are here: {wrong[0]}"
                                       if wrong else "")
        else:
            step["detail"] = detail + (" (" + "; ".join(f"{n} x {r}" for r, n in short.items())
                                       + ")" if short else "")
    return parse


def run_tests(runner, gpus):
    for binary, gtest_filter, limit in TESTS:
        json_path = runner.logs / f"{binary}.json"
        argv = [runner.bin(binary), f"--gtest_filter={gtest_filter}",
                f"--gtest_output=json:{json_path}"]
        runner.run("tests", binary, argv, limit, parse=gtest_parser(runner, json_path, gpus))


# ---- every mode ----------------------------------------------------------------------------------
def report_parser(report_path):
    def parse(step, text):
        if step["rc"] not in (0, 3):
            return
        report = json.loads(report_path.read_text())
        check = report["check"]
        times = [s["time_ms"] for s in report["steps"]]
        step["check"] = {"ran": check["ran"], "passed": check["passed"],
                         "rtol": check["rtol"], "atol": check["atol"],
                         "steps_checked": check["steps_checked"],
                         "failed_elements": sum(t["failed_elements"] for t in check["tensors"]),
                         "worst_over_bound": max((t["worst_over_bound"] for t in check["tensors"]),
                                                 default=None)}
        step["step_ms"] = times
        step["median_step_ms_after_first"] = statistics.median(times[1:] or times)
        step_ms = f"step {step['median_step_ms_after_first']:.1f} ms (median after the first)"
        if report["config"]["mode"] == "single":  # the reference itself: nothing to check
            step["detail"] = f"single device, no reference check; {step_ms}"
            return
        if not check["ran"] or not check["passed"]:
            step["status"] = "failed"
        worst = step["check"]["worst_over_bound"]
        step["detail"] = (f"reference check {'passed' if check['passed'] else 'FAILED'}"
                          f"{'' if check['ran'] else ' (did not run)'} over "
                          f"{check['steps_checked']} step(s) ("
                          f"{step['check']['failed_elements']} elements out of tolerance, worst "
                          f"|a - b| / bound {fmt(worst, '.2e')} with rtol {check['rtol']:.0e}, "
                          f"atol {check['atol']:.0e} x max|b|); {step_ms}")
    return parse


def run_modes(runner, gpus):
    runs = [("single", 1)] + [(m, d) for d in (1, 2, 4) for m in ("tp", "tp-sp", "ulysses")]
    for mode, degree in runs:
        comms = ["threads"] + (["nccl"] if gpus >= degree and mode != "single" and
                               not runner.plan.rehearsal else [])
        for comm in comms:
            name = f"{mode}-d{degree}-{comm}"
            report = runner.logs / f"run-{name}.json"
            argv = [runner.bin("shardscope"), "run", "--backend", runner.plan.backend, "--comm",
                    comm, "--mode", mode, "--degree", str(degree), "--steps", "3",
                    *runner.plan.run_shape, "--report", str(report)]
            runner.run("modes", name, argv, 120, parse=report_parser(report))
    for mode in ("tp", "tp-sp", "ulysses"):  # the Llama stack, ranks sharing the device
        name = f"llama-{mode}-d2-threads"
        report = runner.logs / f"run-{name}.json"
        argv = [runner.bin("shardscope"), "run", "--backend", runner.plan.backend, "--comm",
                "threads", "--mode", mode, "--degree", "2", "--steps", "2",
                *runner.plan.run_shape, *LLAMA_STACK, "--report", str(report)]
        runner.run("modes", name, argv, 120, parse=report_parser(report))


# ---- CUDA against the CPU ---------------------------------------------------------------------
def run_compare(runner):
    shardscope = runner.bin("shardscope")
    for dtype, rtol, atol in COMPARE:
        dumps = {side: runner.out / "dumps" / f"{side}-{dtype}" for side in ("device", "cpu")}
        made = []
        for side, flags in (("device", runner.plan.device_flags()), ("cpu", ["--backend", "cpu"])):
            argv = [shardscope, "run", *flags, *COMPARE_SHAPE, "--dtype", dtype, "--dump",
                    str(dumps[side])]
            made.append(runner.run("compare", f"dump-{side}-{dtype}", argv, 120))
        if any(s["status"] != "passed" for s in made):
            runner.skip("compare", f"check-{dtype}", "not run", "a dump above failed")
            continue

        def parse(step, text):
            match = re.search(r"(\d+) of (\d+) tensors passed", text)
            step["detail"] = (match[0] if match else last_line(text)) + f" (rtol {rtol}, atol {atol})"
            if step["status"] == "passed":
                shutil.rmtree(runner.out / "dumps", ignore_errors=True)
            else:
                step["detail"] += "; the dumps are kept in dumps/"
        argv = [shardscope, "check", str(dumps["device"]), str(dumps["cpu"]), "--rtol", rtol,
                "--atol", atol]
        runner.run("compare", f"check-{dtype}", argv, 120, parse=parse)


# ---- compute-sanitizer ----------------------------------------------------------------------------
def run_sanitizer(runner, find_tool):
    tool = find_tool("compute-sanitizer")
    runs = [(check, limit, model, flags) for model, flags in (("gpt", []), ("llama", LLAMA_STACK))
            for check, limit in (("memcheck", 180), ("racecheck", 240))]
    for check, limit, model, flags in runs:
        name = check if model == "gpt" else f"{check}-{model}"
        if not tool:
            runner.skip("sanitizer", name, "missing", "compute-sanitizer not found on PATH, "
                        "$CUDA_HOME/bin or /usr/local/cuda/bin")
            continue

        def parse(step, text):
            match = re.search(r"(ERROR|RACECHECK) SUMMARY: [^\n]*", text)
            step["detail"] = match[0] if match else step.get("detail", "")
        # The sanitizer runs with this machine's environment; DIR/run gives the program the
        # bundle's (the sanitizer follows it through the exec).
        argv = [tool, "--tool", check, "--error-exitcode", "86", "--print-limit", "20",
                "--target-processes", "all", str(runner.bundle / "run"), "shardscope", "run",
                *runner.plan.device_flags(), *SANITIZED_RUN, *flags]
        runner.run("sanitizer", name, argv, limit, env="plain", parse=parse)


# ---- benchmarks -----------------------------------------------------------------------------------
def run_layer_step(runner):
    rows = []
    for model, shapes in runner.plan.bench_shapes.items():
        rows += layer_step_rows(runner, model, shapes)
    runner.figures["layer_step"] = {
        "what": "forward + backward of sum(layer(x)), f32, TF32 off on both sides, median ms per "
                "step (shardscope: median of 5 repetitions; torch: of 20 steps after 3 warm-up)",
        "goal": f"shardscope <= {LAYER_GOAL}x torch", "rows": rows}


def layer_step_rows(runner, model, shapes):
    """One model's layer step beside PyTorch's; the steps of the gpt preset keep their first
    names (layer_bench, torch_layer), the others carry the model's."""
    suffix = "" if model == "gpt" else f"-{model}"
    ours, theirs = {}, {}
    out_json = runner.logs / f"layer_bench{suffix}.json"

    def parse_ours(step, text):
        for b in json.loads(out_json.read_text())["benchmarks"]:
            if b.get("aggregate_name") == "median":
                s = re.search(r"s:(\d+)/b:(\d+)/h:(\d+)/a:(\d+)(?:/g:(\d+))?", b["name"])
                scale = {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[b["time_unit"]]
                dims = [d for d in s.groups() if d]
                # A shape given as s,b,h,a is the one named .../a:A/g:A (every head its own K, V).
                names = [",".join(dims)] + ([",".join(dims[:4])] if dims[4:] == dims[3:4] else [])
                for name in names:
                    ours[name] = b["real_time"] * scale
    argv = [runner.bin("layer_bench"), f"--backend={runner.plan.backend}", f"--model={model}",
            *(f"--shape={s}" for s in shapes),
            "--benchmark_filter=^BM_LayerStep/", "--benchmark_repetitions=5",
            "--benchmark_report_aggregates_only=true",
            f"--benchmark_out={out_json}", "--benchmark_out_format=json"]
    runner.run("layer_step", f"layer_bench{suffix}", argv, 240, parse=parse_ours)

    def parse_theirs(step, text):
        for line in text.splitlines():
            parts = line.split()
            if parts and parts[0] in shapes:
                theirs[parts[0]] = statistics.median(float(t) for t in parts[1:])
    argv = [sys.executable, str(runner.bundle / "torch_layer.py"), "--device",
            runner.plan.backend, "--model", model, "--repetitions", "20", "--warmup", "3",
            "--per-step", *(a for s in shapes for a in ("--shape", s))]
    runner.run("layer_step", f"torch_layer{suffix}", argv, 240, env="plain", parse=parse_theirs)
    rows = []
    for shape in shapes:
        a, t = ours.get(shape), theirs.get(shape)
        ratio = a / t if a and t else None
        rows.append({"model": model, "shape": shape, "shardscope_ms": a, "torch_ms": t,
                     "ratio": ratio, "goal_met": None if ratio is None else ratio <= LAYER_GOAL})
    return rows


def run_bandwidth(runner):
    out_json = runner.logs / "bandwidth.json"

    def parse(step, text):
        data = json.loads(out_json.read_text())
        for op in data["ops"]:
            if op["op"] != "copy":
                op["goal_met"] = op["fraction_of_copy"] >= BANDWIDTH_GOAL
        data["goal"] = f"elementwise ops >= {BANDWIDTH_GOAL:.0%} of copy's GB/s"
        runner.figures["bandwidth"] = data
        step["detail"] = ", ".join(f"{op['op']} {op['gb_per_s']:.0f} GB/s" for op in data["ops"])
    argv = [runner.bin("backend_bandwidth"), "--backend", runner.plan.backend, "--mib",
            str(runner.plan.bandwidth_mib), "--reps", "20", "--json", str(out_json)]
    runner.run("bandwidth", "backend_bandwidth", argv, 120, parse=parse)


def run_staging(runner):
    mib = "1,4" if runner.plan.rehearsal else "1,16,64,256"

    def parse(step, text):
        rows = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 6 and parts[0].isdigit():
                rows.append({"ranks": int(parts[0]), "mib": int(parts[1]),
                             "staged_ms": float(parts[2]), "host_only_ms": float(parts[3]),
                             "round_trip_ms": float(parts[4]), "algbw_gb_per_s": float(parts[5])})
        if not rows:
            raise ValueError("no table in the output")
        runner.figures["staging"] = {
            "what": "all_reduce of ranks sharing the device (threads, staged through host memory) "
                    "beside the host all_reduce alone and one rank's device-host round trip, "
                    "median ms of 5", "device": runner.plan.backend, "rows": rows}
        big = rows[-1]
        step["detail"] = (f"{big['ranks']} ranks, {big['mib']} MiB: staged {big['staged_ms']:.1f} "
                          f"ms, host alone {big['host_only_ms']:.1f} ms, round trip "
                          f"{big['round_trip_ms']:.1f} ms")
    argv = [runner.bin("staging_bench"), "--backend", runner.plan.backend, "--ranks", "2,4",
            "--mib", mib, "--reps", "5"]
    runner.run("staging", "staging_bench", argv, 150, parse=parse)


def run_all(runner, gpus, find_tool):
    run_tests(runner, gpus)
    run_modes(runner, gpus)
    run_compare(runner)
    run_layer_step(runner)
    run_bandwidth(runner)
    run_staging(runner)
    run_sanitizer(runner, find_tool)  # last: the slowest steps, and the figures come first


# ---- the summary ------------------------------------------------------------------------------------
def fmt(value, spec=".1f"):
    return "-" if value is None else format(value, spec)


def summary_lines(r):
    m, steps = r["machine"], r["steps"]
    passed = sum(s["status"] == "passed" for s in steps)
    gpu_names = ", ".join(sorted({g["name"] for g in m["gpus"]})) or "no GPU listed by nvidia-smi"
    lines = [
        f"shardscope GPU check {r['date']}{' (REHEARSAL on the CPU: no GPU figure)' if r['rehearsal'] else ''}: "
        f"{'PASSED' if r['passed'] else 'FAILED'}, {passed} of "
        f"{len(steps)} steps passed, in {r['seconds']:.0f} s",
        f"GPU: {len(m['gpus'])} x {gpu_names}; driver {m['driver']} (CUDA {m['driver_cuda_version']}); "
        f"nvcc {m['nvcc']}; torch {m['torch']}",
        f"machine: {m['host']}, {m['os']}, {m['glibc']}; commit {r['commit']}, bundle built "
        f"{r['bundle']['built']} (nvcc {r['bundle']['nvcc']}, sm_{r['bundle']['cuda_architectures']})",
        "libraries: " + " ".join(f"{k}={v}" for k, v in m["libraries"].items()),
    ]
    lines += [f"  {l}" for l in m.get("cuda_report", [])]
    lines.append("steps:")
    for s in steps:
        lines.append(f"  {s['status']:<9} {s['seconds']:>6} s  {s['group']}/{s['name']}"
                     f"{': ' + s['detail'] if s.get('detail') else ''}")
    layer = r["figures"].get("layer_step")
    if layer:
        lines.append(f"layer step ({layer['what']}; goal {layer['goal']}):")
        lines.append(f"  {'model':<6} {'s,b,h,a[,g]':<18} {'shardscope ms':>13} {'torch ms':>9} "
                     f"{'ratio':>6}  goal")
        for row in layer["rows"]:
            goal = {True: "met", False: "not met", None: "-"}[row["goal_met"]]
            lines.append(f"  {row.get('model', 'gpt'):<6} {row['shape']:<18} "
                         f"{fmt(row['shardscope_ms']):>13} "
                         f"{fmt(row['torch_ms']):>9} {fmt(row['ratio'], '.2f'):>6}  {goal}")
    bandwidth = r["figures"].get("bandwidth")
    if bandwidth:
        lines.append(f"bandwidth ({bandwidth['device']}, {bandwidth['mib_per_tensor']} MiB per "
                     f"tensor, {bandwidth['dtype']}; goal {bandwidth['goal']}):")
        for op in bandwidth["ops"]:
            goal = {True: "  goal met", False: "  goal not met"}.get(op.get("goal_met"), "")
            lines.append(f"  {op['op']:<16} {op['gb_per_s']:8.1f} GB/s "
                         f"{100 * op['fraction_of_copy']:6.1f}% of copy{goal}")
    staging = r["figures"].get("staging")
    if staging:
        lines.append(f"ranks sharing the device ({staging['device']}; {staging['what']}):")
        lines.append(f"  {'ranks':>5} {'MiB':>5} {'staged ms':>10} {'host ms':>8} "
                     f"{'round trip ms':>13} {'GB/s':>6}")
        for row in staging["rows"]:
            lines.append(f"  {row['ranks']:>5} {row['mib']:>5} {row['staged_ms']:>10.2f} "
                         f"{row['host_only_ms']:>8.2f} {row['round_trip_ms']:>13.2f} "
                         f"{row['algbw_gb_per_s']:>6.2f}")
    return lines
