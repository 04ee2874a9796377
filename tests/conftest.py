"""Shared test settings: a hypothesis profile sized for CI (2 cores, whole suite well under
15 minutes), and helpers to compare against NumPy."""
import os

# every pass of the HLO pipeline verifies the module it leaves (ourjax.lowering.pipeline)
os.environ.setdefault("OURJAX_CHECK_PASSES", "1")
# every kernel the CPU backend would skip as alike to one emitted before (its kernel_key) is
# emitted anyway and must print as that one (ourjax.backends.llvm.kernel_key)
os.environ.setdefault("OURJAX_CHECK_KERNEL_KEYS", "1")
# the GEMM's default cache blocking: results and scratch sizes that do not depend on which
# shape classes an earlier test (or the load of the machine) had tuned; the autotuner's own
# tests turn it on
os.environ.setdefault("OURJAX_GEMM_AUTOTUNE", "0")

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=int(os.environ.get("OURJAX_HYPOTHESIS_EXAMPLES", "25")), deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much])
settings.register_profile("dev", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("OURJAX_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def x64():
  """Run a test with 64-bit types enabled."""
  from ourjax.config import enable_x64
  with enable_x64(True):
    yield


#: Test modules of the GPU backend itself: they test its default (TF32) dots as they are.
_GPU_MODULES = ("test_cuda", "test_ptx", "test_models", "test_profiler", "test_multigpu",
                "test_wgmma", "test_implicit_gemm")


@pytest.fixture(autouse=True, scope="module")
def _full_precision_dots_on_a_gpu(request):
  """On a host whose default backend is a GPU, f32 dots at the default precision run on the
  tensor cores in TF32 (as JAX's do); the suite's other tests compare with float64 NumPy at
  float32 tolerances, so there their dots run at the highest precision.  Nothing changes on a
  CPU host."""
  name = request.module.__name__.rpartition(".")[2]
  import ourjax
  from ourjax.config import config
  if name.startswith(_GPU_MODULES) or ourjax.default_backend() != "gpu":
    yield
    return
  old = config.jax_default_matmul_precision
  config.update("jax_default_matmul_precision", "highest")
  yield
  config.update("jax_default_matmul_precision", old)
