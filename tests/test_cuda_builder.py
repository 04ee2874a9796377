"""The GPU kernels' IR builder (``cuda/builder.py``): its constant folding agrees with LLVM's
own, an instruction is reused only where it dominates, and kernels compile to the same PTX with
it as without it."""
import os
import subprocess
import sys

import llvmlite.binding as llvm
import numpy as np
import pytest
from hypothesis import given, strategies as st
from llvmlite import ir

from ourjax.backends.cuda import builder as B
from ourjax.backends.cuda import codegen

I64 = ir.IntType(64)

BINOPS = ["add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr", "and_",
          "or_", "xor"]
CMPS = ["==", "!=", "<", "<=", ">", ">="]


def _fn(name="f", ret=I64, args=()):
  mod = ir.Module(name="t", context=ir.Context())
  fn = ir.Function(mod, ir.FunctionType(ret, list(args)), name=name)
  return mod, fn


def _llvm_value(build, ty):
  """The constant LLVM folds ``build(plain IRBuilder) -> value`` to (None: not a constant, e.g.
  poison)."""
  mod, fn = _fn(ret=ty)
  b = ir.IRBuilder(fn.append_basic_block("entry"))
  b.ret(build(b))
  codegen.target_machine()          # (LLVM initialised)
  ref = llvm.parse_assembly(str(mod))
  pto = llvm.create_pipeline_tuning_options(speed_level=1)
  pb = llvm.create_pass_builder(llvm.Target.from_default_triple().create_target_machine(), pto)
  pb.getModulePassManager().run(ref, pb)
  line = [ln for ln in str(ref).splitlines() if ln.strip().startswith("ret ")][0]
  word = line.split()[-1]
  if word in ("true", "false"):
    return int(word == "true")
  try:
    return int(word)
  except ValueError:
    return None


def _as_signed(v, width):
  return B._signed(v, width)


widths = st.sampled_from([1, 8, 32, 64])


@given(op=st.sampled_from(BINOPS), width=widths, a=st.integers(-2 ** 64, 2 ** 64),
       c=st.integers(-2 ** 64, 2 ** 64))
def test_binop_folds_as_llvm(op, width, a, c):
  ty = ir.IntType(width)
  a, c = _as_signed(a, width), _as_signed(c, width)
  mod, fn = _fn(ret=ty)
  fb = B.FoldingBuilder(fn.append_basic_block("entry"))
  got = getattr(fb, op)(ir.Constant(ty, a), ir.Constant(ty, c))
  want = _llvm_value(lambda b: getattr(b, op)(ir.Constant(ty, a), ir.Constant(ty, c)), ty)
  if isinstance(got, ir.Constant):
    assert want is not None, (op, width, a, c)
    assert _as_signed(got.constant, width) == _as_signed(want, width), (op, width, a, c)
  else:
    # left to LLVM: a division by zero, a shift past the width (poison or UB there)
    assert op in ("udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr", "sdiv")


@given(cmp=st.sampled_from(CMPS), signed=st.booleans(), width=widths,
       a=st.integers(-2 ** 64, 2 ** 64), c=st.integers(-2 ** 64, 2 ** 64))
def test_icmp_folds_as_llvm(cmp, signed, width, a, c):
  ty = ir.IntType(width)
  a, c = _as_signed(a, width), _as_signed(c, width)
  name = "icmp_signed" if signed else "icmp_unsigned"
  mod, fn = _fn(ret=ir.IntType(1))
  fb = B.FoldingBuilder(fn.append_basic_block("entry"))
  got = getattr(fb, name)(cmp, ir.Constant(ty, a), ir.Constant(ty, c))
  want = _llvm_value(lambda b: getattr(b, name)(cmp, ir.Constant(ty, a), ir.Constant(ty, c)),
                     ir.IntType(1))
  assert isinstance(got, ir.Constant) and int(got.constant) == want


@given(op=st.sampled_from(["zext", "sext", "trunc"]), w0=widths, w1=widths,
       a=st.integers(-2 ** 64, 2 ** 64))
def test_casts_fold_as_llvm(op, w0, w1, a):
  if (op == "trunc") != (w1 < w0) or w0 == w1:
    return
  t0, t1 = ir.IntType(w0), ir.IntType(w1)
  a = _as_signed(a, w0)
  mod, fn = _fn(ret=t1)
  fb = B.FoldingBuilder(fn.append_basic_block("entry"))
  got = getattr(fb, op)(ir.Constant(t0, a), t1)
  want = _llvm_value(lambda b: getattr(b, op)(ir.Constant(t0, a), t1), t1)
  assert _as_signed(got.constant, w1) == _as_signed(want, w1)


def test_identities_and_select():
  mod, fn = _fn(args=[I64, I64, ir.IntType(1)])
  x, y, p = fn.args
  fb = B.FoldingBuilder(fn.append_basic_block("entry"))
  zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
  assert fb.add(x, zero) is x and fb.add(zero, x) is x and fb.sub(x, zero) is x
  assert fb.mul(x, one) is x and fb.mul(one, x) is x and fb.udiv(x, one) is x
  assert fb.or_(x, zero) is x and fb.shl(x, zero) is x
  assert fb.mul(x, zero).constant == 0 and fb.and_(zero, x).constant == 0
  assert fb.urem(x, one).constant == 0
  assert fb.select(ir.Constant(ir.IntType(1), 1), x, y) is x
  assert fb.select(ir.Constant(ir.IntType(1), 0), x, y) is y
  assert fb.select(p, x, x) is x
  assert not fn.blocks[0].instructions             # nothing emitted


def test_reuse_within_a_block_only_at_its_end():
  mod, fn = _fn(args=[I64, I64])
  x, y = fn.args
  entry = fn.append_basic_block("entry")
  other = fn.append_basic_block("other")
  fb = B.FoldingBuilder(entry)
  s = fb.add(x, y)
  assert fb.add(x, y) is s                          # same operands, same block
  assert fb.add(x, y, flags=["nsw"]) is not s       # other flags: another instruction
  assert fb.add(y, x) is not s                      # (operand order is kept as written)
  ptr = fb.inttoptr(x, I64.as_pointer())
  g = fb.gep(ptr, [s])
  assert fb.gep(ptr, [s]) is g and fb.gep(ptr, [s], inbounds=True) is not g
  # positioned before the sum: a new instruction (the old one would be used before it is made)
  fb.position_before(s)
  early = fb.add(x, y)
  assert early is not s
  fb.position_at_end(entry)
  assert fb.add(x, y) in (s, early)
  fb.branch(other)
  fb.position_at_end(other)
  t = fb.add(x, y)                                  # another block: made again
  assert t is not s and t is not early
  fb.ret(t)
  llvm.parse_assembly(str(mod)).verify()


def test_switched_off_is_the_plain_builder(monkeypatch):
  monkeypatch.setenv("OURJAX_CUDA_FOLD", "0")
  mod, fn = _fn()
  assert type(B.new_builder(fn.append_basic_block("entry"))) is ir.IRBuilder
  monkeypatch.setenv("OURJAX_CUDA_FOLD", "1")
  assert type(B.new_builder(fn.append_basic_block("e2"))) is B.FoldingBuilder


_PTX_OF = r"""
import os, sys
sys.path.insert(0, "tests")
import numpy as np, ourjax
from cuda_cases import CASES, IMPLICIT_GEMM_CASES
from test_cuda_time_blocking import _heat, _rk, _rk_args
names = sys.argv[1].split(",")
rng = np.random.default_rng(0)
progs = [(n, fn, make(rng)) for n, fn, make, *_ in list(CASES) + list(IMPLICIT_GEMM_CASES)
         if n in names]
progs += [("rk4_blocked", _rk(40), _rk_args(4096)),
          ("heat_blocked", _heat(20), (rng.uniform(size=(4, 3000)).astype(np.float32),
                                       np.float32(0.2)))]
for name, fn, args in progs:
  ptx = ourjax.jit(fn, backend="cuda").lower(*args).compile().as_text(dialect="ptx")
  sys.stdout.write("@@case " + name + "\n" + ptx)
"""

# kinds whose emitters lean on folding and reuse: tensor-core dots with fused epilogues,
# implicit-GEMM convolutions, reductions, sorts, elementwise kernels; and time-blocked stencil
# chains (the script adds them)
_SAME_PTX = ["dot_wgmma_tf32", "dot_epilogue_bias_gelu", "conv_narrow_b_ss_t",
             "conv_implicit_padding", "softmax", "sort", "ew_gelu", "max_pool"]


def test_kernels_compile_to_the_same_ptx_with_and_without_folding():
  from cuda_cases import CASES, IMPLICIT_GEMM_CASES
  known = {c[0] for c in list(CASES) + list(IMPLICIT_GEMM_CASES)}
  names = [n for n in _SAME_PTX if n in known]
  assert len(names) == len(_SAME_PTX), sorted(set(_SAME_PTX) - known)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = {}
  for v in ("0", "1"):
    env = dict(os.environ, OURJAX_CUDA_FOLD=v, OURJAX_CUDA_KERNEL_CACHE="0",
               OURJAX_CACHE_DIR="off")
    r = subprocess.run([sys.executable, "-c", _PTX_OF, ",".join(names)], cwd=root, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out[v] = r.stdout
  made = {ln[7:] for ln in out["0"].splitlines() if ln.startswith("@@case ")}
  assert made == set(names) | {"rk4_blocked", "heat_blocked"}
  assert out["0"] == out["1"]
