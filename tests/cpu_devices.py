"""Several-device tests on CPU devices: ``N`` of them (``OURJAX_NUM_CPU_DEVICES``, the CPU as the
platform also where a GPU is present: the flag is read at call time, not from the environment at
import) through the autouse fixture ``four_cpu_devices`` (import it into a test module), and
``random_f32`` for operands."""
import numpy as np
import pytest

import ourjax

N = 4


@pytest.fixture(autouse=True)
def four_cpu_devices(monkeypatch):
  monkeypatch.setenv("OURJAX_NUM_CPU_DEVICES", str(N))
  monkeypatch.setitem(ourjax.config._values, "jax_platforms", "cpu")


def random_f32(rng, shape):
  return rng.standard_normal(shape).astype(np.float32)
