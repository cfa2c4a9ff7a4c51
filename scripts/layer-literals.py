#!/usr/bin/env python3
"""Counts the layer's scope and parameter names written as string literals outside its
declaration (parallel/layers/layer_decl.cpp): the measure of issue 20's "one declaration".

  python3 scripts/layer-literals.py [REPO] [--list]

REPO (default: this checkout) is where the sources are counted; the names always come from this
checkout's declaration, so an older commit checked out elsewhere can be measured the same way.

The names are read from the declaration itself: every module scope ("attn.qkv"), its last part
("qkv", as a nested ScopeGuard writes it), its parameters ("attn.qkv.weight"), and the run's scopes
around the layer ("loss", "grad_reduce"). Counted in the C++ sources of the library, the apps and
the visualizer (parallel/, apps/, io/, viz/, autograd/); tests, labs and benchmarks are left out
(they check the names, or teach them). Prints the count per file and the total; --list prints
every occurrence.
"""
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

args = [a for a in sys.argv[1:] if not a.startswith("--")]
here = Path(__file__).resolve().parent.parent
repo = Path(args[0]) if args else here
decl = (here / "parallel/layers/layer_decl.cpp").read_text()
scopes = re.findall(r'\{"([a-z0-9_.]+)",\s*Kind::', decl)
if not scopes:
    sys.exit("layer-literals: no module found in parallel/layers/layer_decl.cpp")
names = set(scopes) | {s.rsplit(".", 1)[-1] for s in scopes} | {"attn", "mlp"}
names |= {f"{s}.{p}" for s in scopes for p in ("weight", "bias")}
header = (here / "parallel/layers/layer_decl.h").read_text()
names |= set(re.findall(r'k\w+Scope = "([a-z_]+)"', header))
files = subprocess.run(["git", "ls-files", "*.cpp", "*.h", "*.cu", "*.cuh"], cwd=repo,
                       capture_output=True, text=True, check=True).stdout.split()
literal = re.compile(r'"((?:[^"\\]|\\.)*)"')
per = Counter()
for f in files:
    if not f.startswith(("parallel/", "apps/", "io/", "viz/", "autograd/")):
        continue
    if f.startswith("parallel/layers/layer_decl."):
        continue
    for n, line in enumerate((repo / f).read_text().splitlines(), 1):
        if line.strip().startswith("//"):
            continue
        code = re.sub(r"\s//\s.*$", "", line)  # a trailing comment's examples are not code
        for m in literal.finditer(code):
            if m.group(1) in names:
                per[f] += 1
                if "--list" in sys.argv:
                    print(f"{f}:{n}: \"{m.group(1)}\"")
for f, c in per.most_common():
    print(f"{c:4d} {f}")
print(f"{sum(per.values()):4d} total")
