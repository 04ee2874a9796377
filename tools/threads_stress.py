#!/usr/bin/env python
"""Run the thread-safety tests of ``tests/test_threads.py`` many times in one process (a
race shows up only now and then; CI runs each test once).

    python tools/threads_stress.py --runs 100

Exits 1 at the first failing run, printing its traceback.  A tool: the test suite does not
run it."""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import test_threads as T  # noqa: E402


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--runs", type=int, default=100)
  args = ap.parse_args(argv)
  tests = [(name, fn) for name, fn in vars(T).items() if name.startswith("test_")]
  t0 = time.perf_counter()
  for run in range(args.runs):
    for name, fn in tests:
      try:
        if "compiles" in fn.__code__.co_varnames[:fn.__code__.co_argcount]:
          with T.counting_compiles() as names:
            fn(names)
        else:
          fn()
      except BaseException:      # noqa: BLE001
        print(f"run {run}: {name} FAILED")
        traceback.print_exc()
        return 1
    if (run + 1) % 10 == 0:
      print(f"{run + 1} runs of {len(tests)} tests passed ({time.perf_counter() - t0:.0f} s)",
            flush=True)
  print(f"all {args.runs} runs passed")
  return 0


if __name__ == "__main__":
  sys.exit(main())
