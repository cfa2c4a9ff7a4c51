#!/usr/bin/env python3
"""Where a step's time went, op by op, from traces that `shardscope run --trace FILE` wrote.

    python3 bench/trace_ops.py [--steps FIRST:LAST] [--top N] TRACE [TRACE ...]

For each trace, each (phase, scope, op)'s slices are summed per step over steps FIRST to LAST
(default 2:11, after the first steps' warm-up), and the median over those steps is printed in ms,
one column per trace; with two or more traces a last column divides the first trace's time by the
last's (1 thread over 2: how much the op sped up). Rows are sorted by the last trace's time; the
totals split the matrix products (matmul, causal_matmul) from the other ops. Slices are the
forward ops and backward nodes (trace categories forward and backward); the observers that record
them add about a microsecond to each, so small ops read slightly long.
Exit 2 names a trace that cannot be read or that has no slices in the steps asked for.
"""
import argparse
import json
import signal
import statistics
import sys
from collections import defaultdict

PRODUCTS = ("matmul", "causal_matmul")


def parse_steps(text):
    try:
        first, last = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST:LAST (two integers), given {text!r}")
    if first > last:
        raise argparse.ArgumentTypeError(f"expected FIRST <= LAST, given {text!r}")
    return first, last


def op_times(path, first, last):
    """{(phase, scope, op): median over the steps of that op's summed slices, in ms}."""
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        print(f"trace_ops: cannot read {path}: {e}", file=sys.stderr)
        sys.exit(2)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    per_step = defaultdict(lambda: defaultdict(float))  # step -> key -> ms
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("forward", "backward"):
            continue
        args = e.get("args", {})
        step = args.get("step")
        if step is None or not first <= step <= last:
            continue
        per_step[step][(e["cat"], args.get("scope", ""), args.get("op", ""))] += e["dur"] / 1000.0
    if not per_step:
        print(f"trace_ops: {path} has no forward or backward slices in steps {first} to {last}",
              file=sys.stderr)
        sys.exit(2)
    keys = {k for ops in per_step.values() for k in ops}
    return {k: statistics.median(ops.get(k, 0.0) for ops in per_step.values()) for k in keys}


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head: stop quietly
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", metavar="TRACE")
    parser.add_argument("--steps", type=parse_steps, default=(2, 11), metavar="FIRST:LAST")
    parser.add_argument("--top", type=int, default=0, help="print only the N largest rows")
    args = parser.parse_args()
    times = [op_times(path, *args.steps) for path in args.traces]
    keys = sorted({k for t in times for k in t}, key=lambda k: -times[-1].get(k, 0.0))
    if args.top > 0:
        keys = keys[: args.top]
    ratio = len(times) > 1
    print(f"{'phase':<9} {'scope':<22} {'op':<14}"
          + "".join(f" {f'trace {i + 1} ms':>11}" for i in range(len(times)))
          + (f" {'first/last':>10}" if ratio else ""))

    def row(label, values):
        text = label + "".join(f" {v:11.3f}" for v in values)
        if ratio:
            text += f" {values[0] / values[-1]:10.2f}" if values[-1] > 0 else f" {'-':>10}"
        print(text)

    for k in keys:
        row(f"{k[0]:<9} {k[1][:22]:<22} {k[2][:14]:<14}", [t.get(k, 0.0) for t in times])
    for name, is_product in (("products", True), ("other ops", False)):
        row(f"{'total':<9} {name:<22} {'':<14}",
            [sum(v for k, v in t.items() if (k[2] in PRODUCTS) == is_product) for t in times])


if __name__ == "__main__":
    main()
