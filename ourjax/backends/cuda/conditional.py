"""Control flow inside CUDA graphs: a ``while`` loop or a ``cond`` whose predicate or branch
index is computed on the device runs as a conditional graph node (CUDA 12.8+ drivers), so a
replay never waits for the host.

A conditional node runs its body graph when (``while``: as long as) its *handle* is non-zero,
or (``switch``) the body its value selects.  A handle's value is set from device code by
``cudaGraphSetConditional``, an external function the driver's PTX JIT resolves when it loads
a module; our kernels are assembled by ``ptxas`` ahead of time, which cannot resolve it, so the
two tiny *setter* kernels here are PTX loaded through the JIT, once per device.  Each reads the
control value that the program's own kernels stored and sets the handles:

    set_while(pred, loop, then, parity, mask, parity_value)
        loop = *pred != 0; if mask & 1: then = *pred != 0; if mask & 2: parity = parity_value
    set_switch(selector, handle, kind, n)
        handle = (kind 0, a bool) *selector ? 0 : 1; (kind 1, an int32) *selector when it
        is in [0, n), else n - 1 (the host-driven path's rule)

``program._GraphReplay`` lays a ``while`` op out as ``cond; set_while; WHILE { body; cond;
set_while }``; a double-buffered loop's body holds the even iteration then, under an IF node on
the same predicate, the odd one, and an IF node after the loop runs the fix-up copies when the
iteration count was odd (the *parity* handle).  A ``cond`` op is ``set_switch; SWITCH {branches}``.
"""
from __future__ import annotations

import threading

import numpy as np

from ourjax.backends.cuda import driver

MIN_DRIVER = 12080
"""The oldest driver (CUDA 12.8) whose conditional nodes cover what the graphs here use:
WHILE and IF nodes came with 12.3/12.4, SWITCH nodes with 12.8."""

def _set(handle: str, value: str) -> str:
  """PTX calling ``cudaGraphSetConditional(handle, value)`` (two registers)."""
  return (f"  {{\n  .param .b64 a0;\n  .param .b32 a1;\n  st.param.b64 [a0], {handle};\n"
          f"  st.param.b32 [a1], {value};\n  call.uni cudaGraphSetConditional, (a0, a1);\n  }}\n")


PTX = f"""
.version 7.0
.target sm_50
.address_size 64

.extern .func cudaGraphSetConditional(.param .b64 handle, .param .b32 value);

.visible .entry ourjax_set_while(.param .u64 pred_p, .param .u64 loop_p, .param .u64 then_p,
                                 .param .u64 parity_p, .param .u32 mask_p,
                                 .param .u32 parity_value_p)
{{
  .reg .pred %p<4>;
  .reg .b16 %rs<2>;
  .reg .b32 %r<6>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [pred_p];
  ld.param.u64 %rd2, [loop_p];
  ld.param.u64 %rd3, [then_p];
  ld.param.u64 %rd4, [parity_p];
  ld.param.u32 %r1, [mask_p];
  ld.param.u32 %r2, [parity_value_p];
  cvta.to.global.u64 %rd5, %rd1;
  ld.global.u8 %rs1, [%rd5];
  setp.ne.s16 %p1, %rs1, 0;
  selp.u32 %r3, 1, 0, %p1;
{_set("%rd2", "%r3")}  and.b32 %r4, %r1, 1;
  setp.eq.u32 %p2, %r4, 0;
  @%p2 bra NO_THEN;
{_set("%rd3", "%r3")}NO_THEN:
  and.b32 %r5, %r1, 2;
  setp.eq.u32 %p3, %r5, 0;
  @%p3 bra DONE;
{_set("%rd4", "%r2")}DONE:
  ret;
}}

.visible .entry ourjax_set_switch(.param .u64 sel_p, .param .u64 handle_p, .param .u32 kind_p,
                                  .param .u32 n_p)
{{
  .reg .pred %p<4>;
  .reg .b16 %rs<2>;
  .reg .b32 %r<6>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [sel_p];
  ld.param.u64 %rd2, [handle_p];
  ld.param.u32 %r1, [kind_p];
  ld.param.u32 %r2, [n_p];
  cvta.to.global.u64 %rd3, %rd1;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 bra BOOL;
  ld.global.u32 %r3, [%rd3];
  sub.u32 %r4, %r2, 1;
  setp.ge.u32 %p2, %r3, %r2;
  selp.b32 %r5, %r4, %r3, %p2;
  bra SET;
BOOL:
  ld.global.u8 %rs1, [%rd3];
  setp.ne.s16 %p3, %rs1, 0;
  selp.u32 %r5, 0, 1, %p3;
SET:
{_set("%rd2", "%r5")}  ret;
}}
"""

_modules: dict = {}
_lock = threading.Lock()


def supported(dev) -> str | None:
  """None when ``dev``'s driver runs the conditional nodes used here, else why not."""
  v = dev.driver_version
  if v < MIN_DRIVER:
    return f"the driver (CUDA {v // 1000}.{v % 1000 // 10}) has no SWITCH conditional nodes"
  return None


def setters(dev):
  """(set_while, set_switch) ``driver.Function``s of ``dev`` (loaded once)."""
  with _lock:
    mod = _modules.get(dev)
    if mod is None:
      mod = _modules[dev] = driver.Module(dev, PTX, "ourjax_conditional")
  return mod.function("ourjax_set_while"), mod.function("ourjax_set_switch")


SWITCH_KINDS = {np.dtype(np.bool_): 0, np.dtype(np.int32): 1, np.dtype(np.uint32): 1}
"""Selector dtypes ``set_switch`` reads: 0 a bool (branch 0 when true), 1 a 32-bit index."""


class SetterParams:
  """The parameter block of one setter kernel node: the control value's address (slot, offset
  spec: it moves with the call's buffers) and constants (handles, flags), each in a 64-bit
  slot (a 32-bit parameter is read from its slot's low half: the GPU is little-endian)."""

  def __init__(self, spec, consts):
    self.spec = spec
    self.vals = np.zeros(1 + len(consts), np.uint64)
    self.vals[1:] = [int(c) for c in consts]
    self.ptrs = self.vals.ctypes.data + 8 * np.arange(len(self.vals), dtype=np.uint64)
    self.address = int(self.ptrs.ctypes.data)

  def point(self, slots) -> None:
    slot, off = self.spec
    self.vals[0] = int(slots[slot]) + off
