"""``jax.scipy.spatial.transform``: 3-D rotations held as unit quaternions (scalar last,
``(x, y, z, w)``, SciPy's convention) and their spherical linear interpolation.

``Rotation`` and ``Slerp`` are NamedTuples of arrays (so pytrees: they pass through jit, vmap
and grad).  One rotation has ``quat`` of shape ``(4,)``, several ``(n, 4)``; every operation
works on a leading axis of rotations by broadcasting.
"""
from __future__ import annotations

import typing

import numpy as np

from ourjax import numpy as jnp

__all__ = ["Rotation", "Slerp"]

_AXES = {"x": 0, "y": 1, "z": 2}


def _quat_mul(p, q):
  """Hamilton product ``p q`` (scalar last): the rotation q, then p."""
  pv, pw = p[..., :3], p[..., 3:]
  qv, qw = q[..., :3], q[..., 3:]
  v = pw * qv + qw * pv + jnp.cross(pv, qv)
  w = pw * qw - jnp.sum(pv * qv, axis=-1, keepdims=True)
  return jnp.concatenate([v, w], axis=-1)


def _normalize(q):
  return q / jnp.linalg.norm(q, axis=-1, keepdims=True)


def _canonical(q):
  """``q`` or ``-q``, whichever has w > 0 (ties broken by the first nonzero of x, y, z)."""
  x, y, z, w = (q[..., i] for i in range(4))
  flip = (w < 0) | ((w == 0) & ((x < 0) | ((x == 0) & ((y < 0) | ((y == 0) & (z < 0))))))
  return jnp.where(flip[..., None], -q, q)


def _check_seq(seq: str) -> tuple[list[int], bool]:
  if not isinstance(seq, str) or not 1 <= len(seq) <= 3:
    raise ValueError(f"Expected axis specification to be a string of up to 3 characters, got "
                     f"{seq!r}")
  intrinsic, extrinsic = seq.isupper(), seq.islower()
  if not (intrinsic or extrinsic) or any(c not in _AXES for c in seq.lower()):
    raise ValueError("Expected axes from `seq` to be from ['x', 'y', 'z'] or ['X', 'Y', 'Z'], "
                     f"got {seq}")
  if any(a == b for a, b in zip(seq, seq[1:])):
    raise ValueError(f"Expected consecutive axes to be different, got {seq}")
  return [_AXES[c] for c in seq.lower()], extrinsic


def _elementary(axis: int, angle):
  half = angle / 2
  zeros = jnp.zeros_like(half)
  comps = [zeros, zeros, zeros, jnp.cos(half)]
  comps[axis] = jnp.sin(half)
  return jnp.stack(comps, axis=-1)


def _euler_from_quat(q, seq: str):
  """SciPy's quaternion-based Euler angles (Bernardes and Viollet, 2022)."""
  axes, extrinsic = _check_seq(seq)
  if len(axes) != 3:
    raise ValueError(f"Expected 3 axes, got {seq}.")
  if not extrinsic:
    axes = axes[::-1]
  i, j, k = axes
  symmetric = i == k
  if symmetric:
    k = 3 - i - j
  sign = (i - j) * (j - k) * (k - i) // 2
  qi, qj, qk, w = q[..., i], q[..., j], q[..., k], q[..., 3]
  if symmetric:
    a, b, c, d = w, qi, qj, qk * sign
  else:
    a, b, c, d = w - qj, qi + qk * sign, qj + w, qk * sign - qi
  mid = 2 * jnp.arctan2(jnp.hypot(c, d), jnp.hypot(a, b))
  half_sum = jnp.arctan2(b, a)
  half_diff = jnp.arctan2(d, c)
  eps = 1e-7
  case1 = jnp.abs(mid) <= eps            # gimbal lock: the middle angle 0
  case2 = jnp.abs(mid - np.pi) <= eps    # ... or pi
  first = half_sum - half_diff
  last = half_sum + half_diff
  locked = case1 | case2
  locked_val = jnp.where(case1, 2 * half_sum, 2 * half_diff * (-1 if extrinsic else 1))
  zero = jnp.zeros_like(mid)
  if extrinsic:     # the third angle is set to zero in a lock
    first = jnp.where(locked, locked_val, first)
    last = jnp.where(locked, zero, last)
  else:
    first = jnp.where(locked, zero, first)
    last = jnp.where(locked, locked_val, last)
  if not symmetric:
    last = last * sign
    mid = mid - np.pi / 2
  if not extrinsic:
    first, last = last, first
  angles = jnp.stack([first, mid, last], axis=-1)
  return (angles + np.pi) % (2 * np.pi) - np.pi


class Rotation(typing.NamedTuple):
  """A rotation, or a stack of them, in 3 dimensions (``jax.scipy.spatial.transform.Rotation``,
  SciPy's API)."""
  quat: typing.Any

  # -- constructors --------------------------------------------------------------------------
  @classmethod
  def from_quat(cls, quat) -> "Rotation":
    """From quaternions ``(x, y, z, w)`` (normalized here)."""
    quat = jnp.asarray(quat)
    if quat.shape[-1:] != (4,) or quat.ndim > 2:
      raise ValueError(f"Expected `quat` to have shape (4,) or (N, 4), got {quat.shape}.")
    return cls(_normalize(quat))

  @classmethod
  def from_matrix(cls, matrix) -> "Rotation":
    """From rotation matrices ``(3, 3)`` or ``(N, 3, 3)`` (SciPy's method: the quaternion from
    the largest of the trace and the diagonal, for accuracy)."""
    m = jnp.asarray(matrix)
    if m.shape[-2:] != (3, 3) or m.ndim > 3:
      raise ValueError(f"Expected `matrix` to have shape (3, 3) or (N, 3, 3), got {m.shape}")
    d = jnp.stack([m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]], axis=-1)
    tr = jnp.sum(d, axis=-1)
    choice = jnp.argmax(jnp.concatenate([d, tr[..., None]], axis=-1), axis=-1)
    cands = []
    for i in range(3):
      j, k = (i + 1) % 3, (i + 2) % 3
      comps = [None] * 4
      comps[i] = 1 - tr + 2 * m[..., i, i]
      comps[j] = m[..., j, i] + m[..., i, j]
      comps[k] = m[..., k, i] + m[..., i, k]
      comps[3] = m[..., k, j] - m[..., j, k]
      cands.append(jnp.stack(comps, axis=-1))
    cands.append(jnp.stack([m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                            m[..., 1, 0] - m[..., 0, 1], 1 + tr], axis=-1))
    q = cands[3]
    for i in range(3):
      q = jnp.where((choice == i)[..., None], cands[i], q)
    return cls(_normalize(q))

  @classmethod
  def from_rotvec(cls, rotvec, degrees: bool = False) -> "Rotation":
    """From rotation vectors (axis times angle, radians unless ``degrees``)."""
    rotvec = jnp.asarray(rotvec)
    if rotvec.shape[-1:] != (3,) or rotvec.ndim > 2:
      raise ValueError(f"Expected `rot_vec` to have shape (3,) or (N, 3), got {rotvec.shape}")
    if degrees:
      rotvec = jnp.deg2rad(rotvec)
    angle = jnp.linalg.norm(rotvec, axis=-1, keepdims=True)
    small = angle <= 1e-3
    a2 = angle * angle
    safe = jnp.where(small, 1.0, angle)
    scale = jnp.where(small, 0.5 - a2 / 48 + a2 * a2 / 3840, jnp.sin(safe / 2) / safe)
    return cls(jnp.concatenate([scale * rotvec, jnp.cos(angle / 2)], axis=-1))

  @classmethod
  def from_mrp(cls, mrp) -> "Rotation":
    """From Modified Rodrigues Parameters."""
    mrp = jnp.asarray(mrp)
    if mrp.shape[-1:] != (3,) or mrp.ndim > 2:
      raise ValueError(f"Expected `mrp` to have shape (3,) or (N, 3), got {mrp.shape}")
    sq = jnp.sum(mrp * mrp, axis=-1, keepdims=True)
    return cls(jnp.concatenate([2 * mrp, 1 - sq], axis=-1) / (1 + sq))

  @classmethod
  def from_euler(cls, seq: str, angles, degrees: bool = False) -> "Rotation":
    """From Euler angles about the axes of ``seq`` (lowercase: extrinsic, fixed axes;
    uppercase: intrinsic, rotating axes)."""
    axes, extrinsic = _check_seq(seq)
    angles = jnp.asarray(angles)
    if degrees:
      angles = jnp.deg2rad(angles)
    single = angles.ndim == 0 or (angles.ndim == 1 and len(axes) > 1)
    a = angles.reshape((-1, len(axes)))
    q = None
    for n, ax in enumerate(axes):
      e = _elementary(ax, a[:, n])
      q = e if q is None else (_quat_mul(e, q) if extrinsic else _quat_mul(q, e))
    return cls(q[0] if single else q)

  @classmethod
  def identity(cls, num: int | None = None, dtype=float) -> "Rotation":
    q = jnp.array([0., 0., 0., 1.], dtype=dtype)
    return cls(q if num is None else jnp.tile(q, (num, 1)))

  @classmethod
  def random(cls, random_key, num: int | None = None) -> "Rotation":
    """Uniformly distributed rotations (normalized Gaussian quaternions)."""
    from ourjax import random
    shape = (4,) if num is None else (num, 4)
    return cls.from_quat(random.normal(random_key, shape))

  @classmethod
  def concatenate(cls, rotations: typing.Sequence) -> "Rotation":
    return cls(jnp.concatenate([jnp.atleast_2d(r.quat) for r in rotations]))

  # -- conversions ---------------------------------------------------------------------------
  def as_quat(self, canonical: bool = False, scalar_first: bool = False):
    q = _canonical(self.quat) if canonical else self.quat
    return jnp.roll(q, 1, axis=-1) if scalar_first else q

  def as_matrix(self):
    x, y, z, w = (self.quat[..., i] for i in range(4))
    xx, yy, zz, ww = x * x, y * y, z * z, w * w
    xy, zw, xz, yw, yz, xw = x * y, z * w, x * z, y * w, y * z, x * w
    rows = [[xx - yy - zz + ww, 2 * (xy - zw), 2 * (xz + yw)],
            [2 * (xy + zw), -xx + yy - zz + ww, 2 * (yz - xw)],
            [2 * (xz - yw), 2 * (yz + xw), -xx - yy + zz + ww]]
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)

  def as_rotvec(self, degrees: bool = False):
    q = _canonical(self.quat)
    v, w = q[..., :3], q[..., 3:]
    angle = 2 * jnp.arctan2(jnp.linalg.norm(v, axis=-1, keepdims=True), w)
    small = angle <= 1e-3
    a2 = angle * angle
    safe = jnp.where(small, 1.0, angle)
    scale = jnp.where(small, 2 + a2 / 12 + 7 * a2 * a2 / 2880, safe / jnp.sin(safe / 2))
    out = scale * v
    return jnp.rad2deg(out) if degrees else out

  def as_mrp(self):
    q = _canonical(self.quat)
    return q[..., :3] / (1 + q[..., 3:])

  def as_euler(self, seq: str, degrees: bool = False):
    angles = _euler_from_quat(self.quat, seq)
    return jnp.rad2deg(angles) if degrees else angles

  # -- operations ----------------------------------------------------------------------------
  def apply(self, vectors, inverse: bool = False):
    """The rotated ``vectors`` (``(3,)`` or ``(N, 3)``; broadcast against the rotations)."""
    vectors = jnp.asarray(vectors)
    m = self.as_matrix()
    if inverse:
      m = jnp.swapaxes(m, -1, -2)
    return jnp.einsum("...ij,...j->...i", m, vectors)

  def inv(self) -> "Rotation":
    return Rotation(self.quat * jnp.array([-1, -1, -1, 1], dtype=self.quat.dtype))

  def magnitude(self):
    """The rotation angles, in [0, pi]."""
    return 2 * jnp.arctan2(jnp.linalg.norm(self.quat[..., :3], axis=-1),
                           jnp.abs(self.quat[..., 3]))

  def mean(self, weights=None) -> "Rotation":
    """The (weighted) mean rotation (Markley et al.: the principal eigenvector of the weighted
    sum of the quaternions' outer products)."""
    q = jnp.atleast_2d(self.quat)
    w = jnp.ones(q.shape[0], q.dtype) if weights is None else jnp.asarray(weights)
    k = jnp.einsum("n,ni,nj->ij", w, q, q)
    _, vecs = jnp.linalg.eigh(k)
    return Rotation(vecs[:, -1])

  def __mul__(self, other: "Rotation") -> "Rotation":
    """The composition: ``other`` applied first, then ``self``."""
    return Rotation(_quat_mul(self.quat, other.quat))

  def __getitem__(self, indexer) -> "Rotation":
    if self.single:
      raise TypeError("Single rotation is not subscriptable.")
    return Rotation(self.quat[indexer])

  def __len__(self):
    if self.single:
      raise TypeError("Single rotation has no len().")
    return self.quat.shape[0]

  @property
  def single(self) -> bool:
    return self.quat.ndim == 1


class Slerp(typing.NamedTuple):
  """Spherical linear interpolation of rotations at increasing ``times``."""
  times: typing.Any
  timedelta: typing.Any
  rotations: Rotation
  rotvecs: typing.Any

  @classmethod
  def init(cls, times, rotations: Rotation) -> "Slerp":
    if not isinstance(rotations, Rotation):
      raise TypeError("`rotations` must be a `Rotation` instance.")
    if rotations.single or len(rotations) == 1:
      raise ValueError("`rotations` must be a sequence of at least 2 rotations.")
    times = jnp.asarray(times)
    if times.ndim != 1:
      raise ValueError(f"Expected times to be specified in a 1 dimensional array, got "
                       f"{times.ndim} dimensions.")
    if times.shape[0] != len(rotations):
      raise ValueError(f"Expected number of rotations to be equal to number of timestamps "
                       f"given, got {len(rotations)} rotations and {times.shape[0]} "
                       "timestamps.")
    timedelta = jnp.diff(times)
    rotvecs = (rotations[:-1].inv() * rotations[1:]).as_rotvec()
    return cls(times, timedelta, rotations, rotvecs)

  def __call__(self, times) -> Rotation:
    compute = jnp.asarray(times)
    t = jnp.atleast_1d(compute)
    ind = jnp.clip(jnp.searchsorted(self.times, t, side="right") - 1, 0,
                   self.timedelta.shape[0] - 1)
    alpha = (t - self.times[ind]) / self.timedelta[ind]
    out = self.rotations[ind] * Rotation.from_rotvec(self.rotvecs[ind] * alpha[:, None])
    return out[0] if compute.ndim == 0 else out
