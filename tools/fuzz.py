#!/usr/bin/env python
"""Long differential fuzzing run (``ourjax.fuzzing``): random programs run eagerly, under jit on
the CPU backend (or ``--backend cuda``: the GPU, with f32 dots at full precision, as the
reference computes them), under grad and under vmap, each compared with the reference backend.

    python tools/fuzz.py --minutes 10 [--out fuzz-repro] [--max-ops 10] [--seed N]
                         [--backend cpu|cuda]

On a mismatch (or an exception in a mode whose reference run succeeded) hypothesis shrinks the
program to a minimal one, and a reproducer script is written to ``--out``
(``<mode>-<hash>.py``: run it with the worktree on PYTHONPATH); the run then goes on with a
new seed.  Mismatches are told apart by mode and message head, so one bug is written once.
At the end it prints the figures: programs, comparisons, mismatches.  A tool: the test suite
runs a bounded version (tests/test_fuzz.py)."""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from ourjax import fuzzing  # noqa: E402


class _Stop(Exception):
  pass


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--minutes", type=float, default=10.0)
  ap.add_argument("--out", default=os.path.join(ROOT, "fuzz-repro"))
  ap.add_argument("--max-ops", type=int, default=10)
  ap.add_argument("--seed", type=int, default=None)
  ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
  args = ap.parse_args(argv)
  if args.backend == "cuda":
    import ourjax
    ourjax.config.update("jax_default_matmul_precision", "highest")   # (not tf32)
  rng = random.Random(args.seed)
  deadline = time.monotonic() + 60 * args.minutes
  stats = {"programs": 0, "comparisons": 0, "mismatches": 0, "distinct": 0}
  seen: set = set()
  state = {"last": None, "error": None}

  def body(prog):
    if time.monotonic() > deadline:
      raise _Stop
    stats["programs"] += 1
    try:
      stats["comparisons"] += fuzzing.check(prog, backend=args.backend)
    except _Stop:
      raise
    except Exception as e:           # noqa: BLE001 (a Mismatch, or a mode's exception)
      state["last"], state["error"] = prog, e
      raise

  while time.monotonic() < deadline:
    run_seed = rng.getrandbits(32)
    test = settings(max_examples=10 ** 6, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))(
        given(fuzzing.programs(min_ops=2, max_ops=args.max_ops))(body))
    try:
      seed(run_seed)(test)()
    except _Stop:
      break
    except Exception as e:           # noqa: BLE001
      if _only_stops(e):             # (the deadline met while hypothesis was shrinking)
        break
      prog, err = state["last"], state["error"] or e
      stats["mismatches"] += 1
      if prog is None:
        print(f"seed {run_seed}: {type(e).__name__}: {e}", flush=True)
        continue
      msg = str(err)
      key = (getattr(err, "mode", type(err).__name__), msg.split(":")[0][:80],
             tuple(sorted(set(prog.ops))))
      if key in seen:
        continue
      seen.add(key)
      stats["distinct"] += 1
      os.makedirs(args.out, exist_ok=True)
      h = hashlib.sha1(prog.source.encode() + repr(prog.inputs).encode()).hexdigest()[:10]
      path = os.path.join(args.out, f"{key[0]}-{h}.py")
      note = f"seed {run_seed}; {type(err).__name__}: {msg[:1500]}\n"
      with open(path, "w") as f:
        f.write(fuzz_note(prog, note))
      print(f"MISMATCH ({key[0]}), minimized program written to {path}:\n{prog}\n  "
            f"{msg[:600]}\n", flush=True)
  print(f"fuzz: {stats['programs']} programs, {stats['comparisons']} comparisons, "
        f"{stats['mismatches']} mismatches ({stats['distinct']} distinct reproducers) in "
        f"{args.minutes:g} minutes")
  return 1 if stats["mismatches"] else 0


def _only_stops(e) -> bool:
  """Whether ``e`` is the deadline's ``_Stop`` alone, or a group of them (hypothesis groups the
  distinct failures it met while shrinking: each a stop when the deadline passed mid-run)."""
  if isinstance(e, _Stop):
    return True
  subs = getattr(e, "exceptions", None)
  return bool(subs) and all(_only_stops(x) for x in subs)


def fuzz_note(prog, note):
  return prog.reproducer(note)


if __name__ == "__main__":
  sys.exit(main())
