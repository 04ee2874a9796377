"""How the threads of a parallel entry wait for one another (``cpu/entry.py``): a thread
spins ``SPIN_PAUSES`` pauses, then yields its CPU between checks up to ``WAIT_SPINS`` times,
then sleeps on a futex (Linux).  ``_emit_sync(mod)`` emits the three helpers (wait until a
word reaches a value, wait until it changes, wake the sleepers) into a module; the runtime
library (``threads.runtime_library``) holds the process's copy, which entries declare
(``_declare_sync``).  ``entry`` re-exports these names."""
from __future__ import annotations

import sys

from ourjax.backends.llvm import emitter as E


#: Pauses a waiting thread spins before it starts yielding its CPU (``sched_yield``).
SPIN_PAUSES = 128
#: Checks of the word (a pause, then a yield each) before a waiting thread sleeps (on a futex,
#: Linux; elsewhere it keeps yielding).  Yielding instead of spinning matters where the cores
#: are busy with other work: two threads of the pool on one CPU, a spinning one held the other
#: (which it was waiting for) off that CPU until its timeslice ended; a yielding one hands the
#: CPU over.  Where the CPU has nothing else to run, a yield returns at once (~0.3 us).
WAIT_SPINS = 4096


def _futex_syscall():
  """SYS_futex for this host, or None (then waiting threads yield instead of sleeping)."""
  import platform
  if not sys.platform.startswith("linux"):
    return None
  return {"x86_64": 202, "aarch64": 98}.get(platform.machine())


def _emit_wait(mod, name: str, until: str, sysc, futex):
  """``void name(i32* word, i32 target, i32* sleepers)``: return once ``*word until target``
  (``until``: '>=' or '!='); spin ``SPIN_PAUSES`` pauses, then yield up to ``WAIT_SPINS``
  checks in all, then sleep on a futex on ``word`` (after raising ``*sleepers`` and checking
  again, so a waker either sees the flag or the sleeper sees the new value); without futexes,
  keep yielding."""
  import llvmlite.ir as ir
  i32, i8p = E.I32, E.I8.as_pointer()
  i32p = i32.as_pointer()
  pause = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "pause", "", side_effect=True)
  wait = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i32p, i32, i32p]), name=name)
  wait.linkage = "internal"
  # (called at every parallel step: inlined, the entry of a whole program grew to thousands of
  # lines, and optimising it took longer than most of its kernels together)
  wait.attributes.add("noinline")
  word, target, sleepers = wait.args
  blk = {k: wait.append_basic_block(k) for k in ("entry", "spin", "sleep", "done")}
  b = ir.IRBuilder(blk["entry"])
  spins = b.alloca(i32)
  b.store(ir.Constant(i32, 0), spins)
  b.branch(blk["spin"])
  b.position_at_end(blk["spin"])

  def ready(v):
    return (b.icmp_signed(">=", v, target) if until == ">=" else
            b.icmp_unsigned("!=", v, target))
  cur = b.load_atomic(word, "seq_cst", 4)
  k = b.add(b.load(spins), ir.Constant(i32, 1))
  b.store(k, spins)
  b.cbranch(ready(cur), blk["done"], blk["sleep"])
  b.position_at_end(blk["sleep"])
  sy = mod.globals.get("sched_yield") or ir.Function(mod, ir.FunctionType(i32, []),
                                                      name="sched_yield")
  with b.if_else(b.icmp_signed("<", k, ir.Constant(i32, WAIT_SPINS))) as (spin_more, sleep):
    with spin_more:
      b.call(pause, [])
      with b.if_then(b.icmp_signed(">=", k, ir.Constant(i32, SPIN_PAUSES))):
        b.call(sy, [])
    with sleep:
      b.store(ir.Constant(i32, WAIT_SPINS), spins)
      if sysc is not None:
        b.store_atomic(ir.Constant(i32, 1), sleepers, "seq_cst", 4)
        again = b.load_atomic(word, "seq_cst", 4)
        with b.if_then(b.not_(ready(again))):
          b.call(sysc, [E.i64(futex), b.bitcast(word, i8p), E.i64(128),      # FUTEX_WAIT_PRIVATE
                        b.zext(again, E.I64), ir.Constant(i8p, None)])
      else:
        b.call(sy, [])
  b.branch(blk["spin"])
  b.position_at_end(blk["done"])
  b.ret_void()
  return wait


def _emit_sync(mod):
  """Three helpers over i32 words of the control block (all atomics sequentially consistent):
  ``wait_ge(word, target, sleepers)`` returns once ``*word >= target``, ``wait_ne`` once
  ``*word != target`` (``_emit_wait``); ``void wake(i32* word, i32* sleepers)`` wakes the
  sleepers of ``word`` if there are any."""
  import llvmlite.ir as ir
  i32, i8p = E.I32, E.I8.as_pointer()
  i32p = i32.as_pointer()
  futex = _futex_syscall()
  sysc = None
  if futex is not None:
    sysc = mod.globals.get("syscall") or ir.Function(
        mod, ir.FunctionType(E.I64, [E.I64], var_arg=True), name="syscall")
  wait = _emit_wait(mod, "ourjax_wait", ">=", sysc, futex)
  wait_ne = _emit_wait(mod, "ourjax_wait_ne", "!=", sysc, futex)
  wake = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i32p, i32p]), name="ourjax_wake")
  wake.linkage = "internal"
  wake.attributes.add("noinline")
  word, sleepers = wake.args
  b = ir.IRBuilder(wake.append_basic_block("entry"))
  if sysc is not None:
    had = b.atomic_rmw("xchg", sleepers, ir.Constant(i32, 0), "seq_cst")
    with b.if_then(b.icmp_signed("!=", had, ir.Constant(i32, 0))):
      b.call(sysc, [E.i64(futex), b.bitcast(word, i8p), E.i64(129),             # FUTEX_WAKE_PRIVATE
                    E.i64(0x7FFFFFFF)])
  b.ret_void()
  return wait, wait_ne, wake


def _declare_sync(mod):
  """Declarations of the three helpers of ``_emit_sync`` (defined by the runtime library,
  ``threads.runtime_library``)."""
  import llvmlite.ir as ir
  i32p = E.I32.as_pointer()
  wait_t = ir.FunctionType(ir.VoidType(), [i32p, E.I32, i32p])
  return (ir.Function(mod, wait_t, name="ourjax_wait"),
          ir.Function(mod, wait_t, name="ourjax_wait_ne"),
          ir.Function(mod, ir.FunctionType(ir.VoidType(), [i32p, i32p]), name="ourjax_wake"))


from ourjax.backends import settings as _settings  # noqa: E402
_settings.pristine(__name__)   # (as imported: disk-cache keys hold only what differs)
