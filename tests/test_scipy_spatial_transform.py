"""ourjax.scipy.spatial.transform (Rotation, Slerp) against NumPy float64 references built
independently: elementary rotation matrices, Rodrigues' formula, round trips."""
import numpy as np
import pytest

import ourjax
import ourjax.numpy as jnp
from ourjax.scipy.spatial.transform import Rotation, Slerp

RNG = np.random.default_rng(7)


def _elem(axis, a):
  c, s = np.cos(a), np.sin(a)
  i, j = [(1, 2), (2, 0), (0, 1)][axis]
  m = np.eye(3)
  m[i, i] = m[j, j] = c
  m[i, j], m[j, i] = -s, s
  return m


def _euler_matrix(seq, angles):
  mats = [_elem("xyz".index(c), a) for c, a in zip(seq.lower(), angles)]
  out = np.eye(3)
  for m in mats:   # extrinsic: later rotations act on the left; intrinsic: on the right
    out = m @ out if seq.islower() else out @ m
  return out


def _rodrigues(v):
  th = np.linalg.norm(v)
  k = v / th
  kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
  return np.eye(3) + np.sin(th) * kx + (1 - np.cos(th)) * kx @ kx


def _quats(n):
  q = RNG.normal(size=(n, 4))
  return q / np.linalg.norm(q, axis=1, keepdims=True)


@pytest.mark.parametrize("seq", ["xyz", "zyx", "XYZ", "ZXZ", "yzy", "YXZ"])
def test_euler_matches_elementary_rotations_and_round_trips(seq):
  angles = np.array([[0.3, -0.7, 1.1], [2.0, 0.4, -2.5]])
  if seq.lower()[0] == seq.lower()[2]:
    angles[:, 1] = np.abs(angles[:, 1])      # proper Euler angles: middle angle in [0, pi]
  r = Rotation.from_euler(seq, angles)
  for k in range(2):
    np.testing.assert_allclose(r.as_matrix()[k], _euler_matrix(seq, angles[k]), atol=1e-5)
  np.testing.assert_allclose(r.as_euler(seq), angles, atol=1e-4)
  np.testing.assert_allclose(Rotation.from_euler(seq, np.rad2deg(angles), degrees=True)
                             .as_matrix(), r.as_matrix(), atol=1e-5)


def test_matrix_rotvec_mrp_quat_round_trips():
  q = _quats(16)
  r = Rotation.from_quat(q)
  m = np.asarray(r.as_matrix(), np.float64)
  np.testing.assert_allclose(np.einsum("nij,nkj->nik", m, m), np.broadcast_to(np.eye(3), m.shape),
                             atol=1e-5)
  np.testing.assert_allclose(np.linalg.det(m), 1, atol=1e-5)
  canon = np.where(q[:, 3:] < 0, -q, q)
  np.testing.assert_allclose(r.as_quat(canonical=True), canon, atol=1e-6)
  np.testing.assert_allclose(Rotation.from_matrix(m).as_quat(canonical=True), canon, atol=1e-5)
  rv = np.asarray(r.as_rotvec(), np.float64)
  for k in range(16):
    np.testing.assert_allclose(_rodrigues(rv[k]), m[k], atol=1e-5)
  np.testing.assert_allclose(Rotation.from_rotvec(rv).as_quat(canonical=True), canon, atol=1e-5)
  np.testing.assert_allclose(Rotation.from_mrp(r.as_mrp()).as_quat(canonical=True), canon,
                             atol=1e-5)
  np.testing.assert_allclose(r.magnitude(), np.linalg.norm(rv, axis=1), atol=1e-5)
  np.testing.assert_allclose(r.as_quat(scalar_first=True), np.roll(q, 1, axis=1), atol=1e-6)


def test_small_rotation_vectors():
  rv = np.array([[1e-6, 0, 0], [0, 2e-4, -1e-4], [0, 0, 0]])
  r = Rotation.from_rotvec(rv)
  np.testing.assert_allclose(r.as_rotvec(), rv, atol=1e-9)
  np.testing.assert_allclose(r.magnitude(), np.linalg.norm(rv, axis=1), atol=1e-7)


def test_apply_compose_inverse():
  r1, r2 = Rotation.from_quat(_quats(5)), Rotation.from_quat(_quats(5))
  v = RNG.normal(size=(5, 3))
  m1, m2 = np.asarray(r1.as_matrix(), np.float64), np.asarray(r2.as_matrix(), np.float64)
  np.testing.assert_allclose(r1.apply(v), np.einsum("nij,nj->ni", m1, v), atol=1e-5)
  np.testing.assert_allclose(r1.apply(v, inverse=True), np.einsum("nji,nj->ni", m1, v),
                             atol=1e-5)
  np.testing.assert_allclose((r1 * r2).as_matrix(), m1 @ m2, atol=1e-5)
  np.testing.assert_allclose((r1 * r1.inv()).magnitude(), np.zeros(5), atol=1e-3)
  np.testing.assert_allclose(r1[2].apply(v), v @ m1[2].T, atol=1e-5)   # one rotation, many
  assert r1[2].single and not r1.single and len(r1) == 5
  with pytest.raises(TypeError):
    len(r1[0])


def test_mean_identity_random_concatenate():
  r = Rotation.from_euler("z", np.array([0.1, 0.2, 0.3]))
  np.testing.assert_allclose(r.mean().as_euler("zyx")[0], 0.2, atol=1e-5)
  np.testing.assert_allclose(r.mean(np.array([0., 0., 1.])).as_euler("zyx")[0], 0.3, atol=1e-5)
  np.testing.assert_array_equal(Rotation.identity().as_quat(), [0, 0, 0, 1])
  assert Rotation.identity(3).as_quat().shape == (3, 4)
  rr = Rotation.random(ourjax.random.key(0), 6)
  np.testing.assert_allclose(jnp.linalg.norm(rr.quat, axis=1), np.ones(6), atol=1e-6)
  assert len(Rotation.concatenate([rr, rr[0]])) == 7


def test_slerp_interpolates_at_constant_angular_rate():
  r = Rotation.from_euler("x", np.array([0.0, 1.0, 1.5]))
  s = Slerp.init(np.array([0., 1., 3.]), r)
  out = s(np.array([0., 0.25, 1., 2., 3.]))
  np.testing.assert_allclose(out.as_euler("xyz")[:, 0], [0., 0.25, 1., 1.25, 1.5], atol=1e-5)
  np.testing.assert_allclose(s(0.5).as_euler("xyz")[0], 0.5, atol=1e-5)


def test_rotation_is_a_pytree_under_jit_vmap_grad():
  q = jnp.asarray(_quats(4), jnp.float32)
  f = ourjax.jit(lambda r, v: r.apply(v))
  v = RNG.normal(size=(4, 3)).astype(np.float32)
  np.testing.assert_allclose(f(Rotation.from_quat(q), v), Rotation.from_quat(q).apply(v),
                             atol=1e-6)
  mats = ourjax.vmap(lambda qq: Rotation.from_quat(qq).as_matrix())(q)
  np.testing.assert_allclose(mats, Rotation.from_quat(q).as_matrix(), atol=1e-6)
  # d/dθ of the x component of e_y rotated about z by θ is -cos θ
  g = ourjax.grad(lambda t: Rotation.from_euler("z", t).apply(jnp.array([0., 1., 0.]))[0])
  np.testing.assert_allclose(g(0.4), -np.cos(0.4), rtol=1e-5)
