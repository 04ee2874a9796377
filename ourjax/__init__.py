"""ourjax: a JAX-style functional tracing JIT.  Re-exports only; see DESIGN.md for the map."""
from ourjax.config import config  # noqa: F401
from ourjax import dtypes  # noqa: F401
from ourjax import errors  # noqa: F401
from ourjax import tree_util  # noqa: F401
from ourjax import tree  # noqa: F401
from ourjax.array import PublicArray as Array  # noqa: F401  (tracers are instances too)
from ourjax import _eager  # noqa: F401  (installs the eager evaluation of primitives)
from ourjax import lax  # noqa: F401
from ourjax import numpy  # noqa: F401
from ourjax.api import (jit, grad, value_and_grad, vjp, jvp, linearize, vmap, jacfwd,  # noqa
                        jacrev, jacobian, hessian, make_jaxpr, eval_shape, ShapeDtypeStruct,
                        device_put, device_get, block_until_ready, copy_to_host_async, devices,
                        default_backend,
                        device_count, local_devices, disable_jit, local_device_count,
                        process_index, process_count, typeof, pmap, live_arrays,
                        print_environment_info, fwd_and_bwd)
from ourjax.lax import stop_gradient  # noqa: F401
from ourjax.api import linear_transpose  # noqa: F401
from ourjax.custom_derivatives import (custom_jvp, custom_vjp, custom_gradient,  # noqa
                                       closure_convert)
from ourjax.ad_checkpoint import checkpoint, remat, checkpoint_policies  # noqa: F401
from ourjax import custom_derivatives, ad_checkpoint  # noqa: F401,E402
from ourjax.config import (enable_x64, checking_leaks, check_tracer_leaks, transfer_guard,  # noqa: F401
                           transfer_guard_host_to_device, transfer_guard_device_to_host,
                           transfer_guard_device_to_device, default_prng_impl,
                           enable_custom_prng, legacy_prng_key, no_tracing, no_execution,
                           numpy_dtype_promotion, numpy_rank_promotion, make_user_context,
                           allow_f16_reductions,
                           default_matmul_precision, explain_cache_misses, log_compiles,
                           default_device)
from ourjax.config import debug_nans, debug_infs  # noqa: F401,E402
from ourjax.dtypes import float0  # noqa: F401
from ourjax.backends import Device  # noqa: F401,E402  (the type of ``devices()``'s elements)


def host_count(backend=None) -> int:
  """JAX's older name for ``process_count``."""
  return process_count(backend)


def host_id(backend=None) -> int:
  """JAX's older name for ``process_index``."""
  return process_index(backend)


def host_ids(backend=None) -> list:
  """JAX's older name for ``process_indices``."""
  return process_indices(backend)


def process_indices(backend=None) -> list:
  """The indices of the processes (``range(process_count())``)."""
  return list(range(process_count(backend)))
from ourjax.api import clear_caches, effects_barrier  # noqa: F401
from ourjax._callback import pure_callback  # noqa: F401
from ourjax import ref  # noqa: F401,E402
from ourjax import ad  # noqa: F401,E402
from ourjax.ref import Ref, new_ref, empty_ref, free_ref  # noqa: F401,E402
from ourjax import random, nn  # noqa: F401,E402
from ourjax import _keys as _keys  # noqa: E402
# typed PRNG key arrays pass through the structural jnp/lax functions (see ourjax._keys)
_keys.wrap_module(numpy, _keys.STRUCTURAL_NUMPY)
_keys.wrap_module(lax, _keys.STRUCTURAL_LAX)
from ourjax import scipy, typing, debug, ops  # noqa: F401,E402
from ourjax import distributed  # noqa: F401,E402
from ourjax import profiler  # noqa: F401,E402  (OURJAX_PROFILE=1 starts recording here)
from ourjax.core import ensure_compile_time_eval  # noqa: F401,E402
from ourjax._named import named_scope, named_call  # noqa: F401,E402
from ourjax import sharding  # noqa: F401,E402
from ourjax.sharding import (make_mesh, NamedSharding, P, make_array_from_callback,  # noqa
                             make_array_from_single_device_arrays,
                             make_array_from_process_local_data)
from ourjax.interpreters.shard_map import shard_map  # noqa: F401,E402


def __getattr__(name):
  # subpackages that are loaded on first use (testing needs hypothesis)
  if name in ("example_libraries", "testing", "flatten_util", "experimental", "image",
              "custom_batching", "dlpack", "export", "stages"):
    import importlib
    return importlib.import_module(f"ourjax.{name}")
  raise AttributeError(f"module 'ourjax' has no attribute {name!r}")

__version__ = "0.1.0"
