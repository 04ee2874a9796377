"""Shared test settings: a hypothesis profile sized for CI (2 cores, whole suite well under
15 minutes), and helpers to compare against NumPy."""
import os

# every pass of the HLO pipeline verifies the module it leaves (ourjax.lowering.pipeline)
os.environ.setdefault("OURJAX_CHECK_PASSES", "1")

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
