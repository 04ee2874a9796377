"""The Schur decomposition in LAPACK's conventions (host only, NumPy), for ``lax.linalg.schur``
and ``scipy.linalg.schur``.

JAX's CPU Schur is LAPACK's ``?gees`` with no eigenvalue sorting, and a Schur form is unique only
up to the order of its eigenvalues, the signs (phases) of its Schur vectors and the rotation of
each 2 x 2 block; to give the same ``(T, Z)`` as JAX this module follows ``?gees`` step by step,
in the input's precision (float32 arithmetic for float32 input, as LAPACK's single-precision
routines):

* ``_balance_permute``: ``?gebal`` with job 'P' (permutations isolating eigenvalues, no scaling);
* ``_hessenberg``: ``?gehd2`` (Householder reduction of rows/columns ilo..ihi);
* ``_form_q``: ``?orghr`` / ``?ungqr`` (the accumulated reflectors);
* ``_lahqr_real``: ``?lahqr``, the double-shift Francis QR iteration with the Ahues-Tisseur
  deflation test and exceptional shifts, standardizing each converged 2 x 2 block with
  ``_lanv2`` (equal diagonal, off-diagonal product negative);
* ``_lahqr_complex``: ``?lahqr`` for complex matrices (single-shift QR, Wilkinson's shift, the
  subdiagonal kept real).

The BLAS-level steps round as OpenBLAS's kernels do (``?nrm2`` in a wider type, ``?rot`` and
``?ger``/``?gerc`` with fused multiply-adds, ``?gemv`` through NumPy's matmul on the Fortran
layout, ``?scal`` and Fortran's complex arithmetic by the textbook formulas), so the result agrees
with SciPy's / JAX's to a few ulp: measured for random float32/float64 matrices up to order 75,
complex64 up to 30 and complex128 up to 15 (beyond those, rounding differences in the reduction
can change the number of QR sweeps, and with it the order of the eigenvalues or the phases of
the Schur vectors: still a valid Schur decomposition).  LAPACK's ``?hseqr`` switches to the
multishift ``?laqr0`` above order 75; this module uses ``?lahqr`` at every size, so there too
``(T, Z)`` is valid but may differ from LAPACK's.
"""
from __future__ import annotations

import numpy as np

_KEXSH = 10         # iterations between exceptional shifts (?lahqr)


def _sign(a, b):
  """Fortran SIGN(a, b): |a| with the sign bit of b (-0.0 counts as negative, as gfortran)."""
  return -abs(a) if np.signbit(b) else abs(a)


def _lapy2(x, y):
  x, y = abs(x), abs(y)
  w, z = max(x, y), min(x, y)
  if z == 0:
    return w
  q = z / w
  return w * np.sqrt(1 + q * q)      # (q * q: NumPy's float32 q ** 2 is not correctly rounded)


def _lapy3(x, y, z):
  x, y, z = abs(x), abs(y), abs(z)
  w = max(x, y, z)
  if w == 0:
    return x + y + z
  x, y, z = x / w, y / w, z / w
  return w * np.sqrt(x * x + y * y + z * z)


def _ladiv(x, y):
  """?ladiv: the complex quotient x / y by LAPACK's robust algorithm (Baudin and Smith)."""
  rt = type(np.real(x))
  a, b, c, d = np.real(x), np.imag(x), np.real(y), np.imag(y)
  fi = np.finfo(rt)
  ov, un, eps = rt(fi.max), rt(fi.tiny), rt(fi.eps) / 2
  bs = rt(2)
  be = bs / (eps * eps)
  ab, cd = max(abs(a), abs(b)), max(abs(c), abs(d))
  sc = rt(1)
  if ab >= ov / 2:
    a, b, sc = a / 2, b / 2, sc * 2
  if cd >= ov / 2:
    c, d, sc = c / 2, d / 2, sc / 2
  if ab <= un * bs / eps:
    a, b, sc = a * be, b * be, sc / be
  if cd <= un * bs / eps:
    c, d, sc = c * be, d * be, sc * be

  def div2(a, b, c, d, r, t):
    if r != 0:
      br = b * r
      return (a + br) * t if br != 0 else a * t + (b * t) * r
    return (a + d * (b / c)) * t

  def div1(a, b, c, d):
    r = d / c
    t = rt(1) / (c + d * r)
    return div2(a, b, c, d, r, t), div2(b, -a, c, d, r, t)

  if abs(np.imag(y)) <= abs(np.real(y)):
    p, q = div1(a, b, c, d)
  else:
    p, q = div1(b, a, d, c)
    q = -q
  return type(x)(complex(p * sc, q * sc))


def _nrm2(x):
  """Euclidean norm of a short vector as OpenBLAS's ?nrm2 rounds it: the sum of squares in a
  wider type (double for single precision, x87 extended for double), then the square root."""
  t = type(np.real(x[0]))
  wide = np.float64 if t == np.float32 else np.longdouble
  xr, xi = np.real(x).astype(wide), np.imag(x).astype(wide)
  return t(np.sqrt(np.sum(xr * xr) + np.sum(xi * xi)))


def _larfg(alpha, x):
  """LAPACK's ?larfg: (beta, tau, v) with (I - tau [1; v] [1; v]^H)^H [alpha; x] = [beta; 0],
  beta real."""
  t = type(alpha)
  if x.size == 0 and not np.iscomplexobj(alpha):   # (a complex one still makes alpha real)
    return alpha, t(0), x
  xnorm = _nrm2(x) if x.size else np.real(t(0))
  alphr, alphi = np.real(alpha), np.imag(alpha)
  if xnorm == 0 and alphi == 0:
    return alpha, t(0), x
  if np.iscomplexobj(alpha):
    beta = -_sign(_lapy3(alphr, alphi, xnorm), alphr)
    tau = t(complex((beta - alphr) / beta, -alphi / beta))
    scal = _ladiv(t(1), alpha - beta)
    return t(beta), tau, _cmul(x, scal)
  else:
    beta = -_sign(_lapy2(alphr, xnorm), alphr)
    tau = (beta - alpha) / beta
    scal = t(1) / (alpha - beta)
  return t(beta), tau, x * scal


def _balance_permute(a):
  """?gebal with job 'P' (LAPACK 3.11+): rows then columns isolating an eigenvalue are moved
  to the bottom / top.  Returns (a permuted, ilo, ihi, the swaps for ?gebak), 0-based."""
  a = a.copy(order="F")
  n = a.shape[0]
  k, l = 0, n - 1
  scale = list(range(n))
  if n == 0:
    return a, 0, -1, scale
  noconv = True
  while noconv:
    noconv = False
    i = l
    while i >= 0:
      row = a[i, :l + 1]
      if np.count_nonzero(row) - (i <= l and row[i] != 0) == 0:
        scale[l] = i
        if i != l:
          a[:l + 1, [i, l]] = a[:l + 1, [l, i]]
          a[[i, l], k:] = a[[l, i], k:]
        noconv = True
        if l == 0:
          return a, 0, 0, scale
        l -= 1
      i -= 1
  noconv = True
  while noconv:
    noconv = False
    j = k
    while j <= l:
      col = a[k:l + 1, j]
      if np.count_nonzero(col) - (k <= j <= l and col[j - k] != 0) == 0:
        scale[k] = j
        if j != k:
          a[:l + 1, [j, k]] = a[:l + 1, [k, j]]
          a[[j, k], k:] = a[[k, j], k:]
        noconv = True
        k += 1
      j += 1
  return a, k, l, scale


def _unbalance_vectors(z, ilo, ihi, scale):
  """?gebak with job 'P', right vectors: undo the row swaps of ?gebal on the Schur vectors."""
  n = z.shape[0]
  for ii in range(n):
    if ilo <= ii <= ihi:
      continue
    i = ilo - 1 - ii if ii < ilo else ii
    k = scale[i]
    if k != i:
      z[[i, k], :] = z[[k, i], :]
  return z


def _ger(x, y, alpha, c):
  """``c += alpha x y^H`` in place, rounded as OpenBLAS's ?ger / ?gerc: per column the scalar
  ``t = alpha conj(y_j)``, then one fused multiply-add per entry (real), or for complex
  entries ``re += fma(t_r, x_r, -t_i x_i)``, ``im += fma(t_r, x_i, t_i x_r)`` with ``t`` from
  fused multiply-adds too."""
  if not np.iscomplexobj(c):
    c[...] = _fma(x[:, None], (alpha * y)[None, :], c)
    return
  rt = np.finfo(c.dtype).dtype.type
  ar, ai = rt(np.real(alpha)), rt(np.imag(alpha))
  yr, yi = np.real(y), np.imag(y)
  tr = _fma(ar, yr, ai * yi)[None, :]
  ti = _fma(-ar, yi, ai * yr)[None, :]
  xr, xi = np.real(x)[:, None], np.imag(x)[:, None]
  re = np.real(c) + _fma(tr, xr, -(ti * xi))
  im = np.imag(c) + _fma(tr, xi, ti * xr)
  c.real, c.imag = re, im


def _larf(side, v, tau, c):
  """?larf in place on the (Fortran-ordered) view ``c``: ``c <- H c`` (side 'L') or ``c H``
  (side 'R'), H = I - tau v v^H; the product by ?gemv (NumPy's matmul on the same layout calls
  it) and the rank-one update as OpenBLAS's ?ger / ?gerc rounds it."""
  if tau == 0 or c.size == 0:
    return
  if side == "L":
    w = np.conj(np.conj(v) @ c)                 # C^H v
    _ger(v, w, -tau, c)
  else:
    w = c @ v
    _ger(w, v, -tau, c)


def _hessenberg(a, ilo, ihi):
  """?gehd2 on rows/columns ilo..ihi: a (Hessenberg, reflectors below the subdiagonal), taus."""
  n = a.shape[0]
  taus = np.zeros(max(n - 1, 0), a.dtype)
  for i in range(ilo, ihi):
    beta, tau, v = _larfg(a[i + 1, i], a[i + 2:ihi + 1, i].copy())
    vv = np.concatenate([np.ones(1, a.dtype), v])
    _larf("R", vv, tau, a[:ihi + 1, i + 1:ihi + 1])
    _larf("L", vv, np.conj(tau), a[i + 1:ihi + 1, i + 1:])
    a[i + 1, i], a[i + 2:ihi + 1, i], taus[i] = beta, v, tau
  return a, taus


def _form_q(h, taus, ilo, ihi):
  """?orghr / ?unghr through ?org2r / ?ung2r: the orthogonal Q of the Hessenberg reduction."""
  n = h.shape[0]
  q = np.asfortranarray(np.eye(n, dtype=h.dtype))
  nh = ihi - ilo
  if nh <= 0:
    return q
  # the reflectors, shifted one column right, in the nh x nh block at (ilo+1, ilo+1)
  sub = np.zeros((nh, nh), h.dtype, order="F")
  for j in range(nh):
    sub[j + 1:, j] = h[ilo + j + 2:ihi + 1, ilo + j]
  t = taus[ilo:ihi]
  for i in range(nh - 1, -1, -1):
    if i < nh - 1:
      sub[i, i] = 1
      _larf("L", sub[i:, i].copy(), t[i], sub[i:, i + 1:])
    if np.iscomplexobj(sub):
      _cscale(sub[i + 1:, i], -t[i])
    else:
      sub[i + 1:, i] *= -t[i]
    sub[i, i] = 1 - t[i]
    sub[:i, i] = 0
  q[ilo + 1:ihi + 1, ilo + 1:ihi + 1] = sub
  return q


def _lanv2(a, b, c, d, eps):
  """?lanv2: the standardized Schur factorization of a real 2 x 2 block,
  [a b; c d] = [cs -sn; sn cs] [aa bb; cc dd] [cs sn; -sn cs]; returns (aa, bb, cc, dd, cs, sn)
  with cc = 0 (real eigenvalues) or aa = dd and bb * cc < 0 (a complex pair)."""
  t = type(a)
  one, zero, half = t(1), t(0), t(0.5)
  if c == 0:
    return a, b, c, d, one, zero
  if b == 0:
    return d, -c, zero, a, zero, one
  if (a - d) == 0 and _sign(one, b) != _sign(one, c):
    return a, b, c, d, one, zero
  temp = a - d
  p = half * temp
  bcmax = max(abs(b), abs(c))
  bcmis = min(abs(b), abs(c)) * _sign(one, b) * _sign(one, c)
  scale = max(abs(p), bcmax)
  z = (p / scale) * p + (bcmax / scale) * bcmis
  if z >= t(4) * eps:      # real eigenvalues
    z = p + _sign(np.sqrt(scale) * np.sqrt(z), p)
    a = d + z
    d = d - (bcmax / z) * bcmis
    tau = _lapy2(c, z)
    return a, b - c, zero, d, z / tau, c / tau
  # complex eigenvalues, or real (almost) equal ones: make the diagonal entries equal
  sigma = b + c
  tau = _lapy2(sigma, temp)
  cs = np.sqrt(half * (one + abs(sigma) / tau))
  sn = -(p / (tau * cs)) * _sign(one, sigma)
  aa, bb = a * cs + b * sn, -a * sn + b * cs
  cc, dd = c * cs + d * sn, -c * sn + d * cs
  a, b = aa * cs + cc * sn, bb * cs + dd * sn
  c, d = -aa * sn + cc * cs, -bb * sn + dd * cs
  temp = half * (a + d)
  a = d = temp
  if c != 0:
    if b != 0:
      if _sign(one, b) == _sign(one, c):      # real eigenvalues: make it upper triangular
        sab, sac = np.sqrt(abs(b)), np.sqrt(abs(c))
        p = _sign(sab * sac, c)
        tau = one / np.sqrt(abs(b + c))
        a, d = temp + p, temp - p
        b, c = b - c, zero
        cs1, sn1 = sab * tau, sac * tau
        cs, sn = cs * cs1 - sn * sn1, cs * sn1 + sn * cs1
    else:
      b, c = -c, zero
      cs, sn = -sn, cs
  return a, b, c, d, cs, sn


def _cabs1(x):
  return abs(np.real(x)) + abs(np.imag(x))


def _deflation_point(h, i, l, ilo, ihi, smlnum, ulp, absf=abs):
  """The largest k in (l, i] with a negligible h[k, k-1] (Ahues-Tisseur), else l.  ``absf``:
  the magnitude LAPACK uses (``abs`` for real, ``|re| + |im|`` for complex matrices)."""
  for k in range(i, l, -1):
    hk = absf(h[k, k - 1])
    if hk <= smlnum:
      return k
    tst = absf(h[k - 1, k - 1]) + absf(h[k, k])
    if tst == 0:
      if k - 2 >= ilo:
        tst = tst + abs(np.real(h[k - 1, k - 2]))
      if k + 1 <= ihi:
        tst = tst + abs(np.real(h[k + 1, k]))
    if abs(np.real(h[k, k - 1])) <= ulp * tst:
      ab = max(hk, absf(h[k - 1, k]))
      ba = min(hk, absf(h[k - 1, k]))
      aa = max(absf(h[k, k]), absf(h[k - 1, k - 1] - h[k, k]))
      bb = min(absf(h[k, k]), absf(h[k - 1, k - 1] - h[k, k]))
      s = aa + ab
      if ba * (ab / s) <= max(smlnum, ulp * (bb * (aa / s))):
        return k
  return l


def _clear_below_subdiagonal(h, ilo, ihi):
  """?lahqr's first step: zero the two diagonals below the subdiagonal of h[ilo:ihi+1] (what
  the Hessenberg reduction left there)."""
  for j in range(ilo, ihi - 2):
    h[j + 2, j] = 0
    h[j + 3, j] = 0
  if ilo <= ihi - 2:
    h[ihi, ihi - 2] = 0


def _lahqr_real(h, z, ilo, ihi):
  """?lahqr (wantt, wantz) on a real Hessenberg h, accumulating into z; in place.  Returns 0, or
  the 1-based index of the first unconverged eigenvalue (LAPACK's info)."""
  t = h.dtype.type
  n = h.shape[0]
  if n == 0 or ilo == ihi:
    return 0
  _clear_below_subdiagonal(h, ilo, ihi)
  nh = ihi - ilo + 1
  fi = np.finfo(h.dtype)
  safmin = t(fi.tiny)
  ulp = t(fi.eps)                  # dlamch('P') = eps * base
  smlnum = safmin * (t(nh) / ulp)
  i1, i2 = 0, n - 1
  itmax = 30 * max(10, nh)
  kdefl = 0
  dat1, dat2 = t(0.75), t(-0.4375)
  zero, two = t(0), t(2)
  i = ihi
  while i >= ilo:
    l = ilo
    for _its in range(itmax + 1):
      l = _deflation_point(h, i, l, ilo, ihi, smlnum, ulp)
      if l > ilo:
        h[l, l - 1] = 0
      if l >= i - 1:
        break
      kdefl += 1
      if kdefl % (2 * _KEXSH) == 0:
        s = abs(h[i, i - 1]) + abs(h[i - 1, i - 2])
        h11 = dat1 * s + h[i, i]
        h12, h21, h22 = dat2 * s, s, h11
      elif kdefl % _KEXSH == 0:
        s = abs(h[l + 1, l]) + abs(h[l + 2, l + 1])
        h11 = dat1 * s + h[l, l]
        h12, h21, h22 = dat2 * s, s, h11
      else:
        h11, h21, h12, h22 = h[i - 1, i - 1], h[i, i - 1], h[i - 1, i], h[i, i]
      s = abs(h11) + abs(h12) + abs(h21) + abs(h22)
      if s == 0:
        rt1r = rt1i = rt2r = rt2i = zero
      else:
        h11, h21, h12, h22 = h11 / s, h21 / s, h12 / s, h22 / s
        tr = (h11 + h22) / two
        det = (h11 - tr) * (h22 - tr) - h12 * h21
        rtdisc = np.sqrt(abs(det))
        if det >= 0:
          rt1r = tr * s
          rt2r = rt1r
          rt1i = rtdisc * s
          rt2i = -rt1i
        else:
          rt1r, rt2r = tr + rtdisc, tr - rtdisc
          if abs(rt1r - h22) <= abs(rt2r - h22):
            rt1r = rt1r * s
            rt2r = rt1r
          else:
            rt2r = rt2r * s
            rt1r = rt2r
          rt1i = rt2i = zero
      # look for two consecutive small subdiagonal elements
      for m in range(i - 2, l - 1, -1):
        h21s = h[m + 1, m]
        s = abs(h[m, m] - rt2r) + abs(rt2i) + abs(h21s)
        h21s = h[m + 1, m] / s
        v1 = h21s * h[m, m + 1] + (h[m, m] - rt1r) * ((h[m, m] - rt2r) / s) - rt1i * (rt2i / s)
        v2 = h21s * (h[m, m] + h[m + 1, m + 1] - rt1r - rt2r)
        v3 = h21s * h[m + 2, m + 1]
        s = abs(v1) + abs(v2) + abs(v3)
        v1, v2, v3 = v1 / s, v2 / s, v3 / s
        if m == l:
          break
        if (abs(h[m, m - 1]) * (abs(v2) + abs(v3))
            <= ulp * abs(v1) * (abs(h[m - 1, m - 1]) + abs(h[m, m]) + abs(h[m + 1, m + 1]))):
          break
      v = np.array([v1, v2, v3], h.dtype)
      # double-shift QR step: chase the bulge from row m down to row i
      for k in range(m, i):
        nr = min(3, i - k + 1)
        if k > m:
          v[:nr] = h[k:k + nr, k - 1]
        beta, t1, tail = _larfg(v[0], v[1:nr].copy())
        v[0] = beta
        v[1:nr] = tail
        if k > m:
          h[k, k - 1] = beta
          h[k + 1, k - 1] = 0
          if k < i - 1:
            h[k + 2, k - 1] = 0
        elif m > l:
          h[k, k - 1] = h[k, k - 1] * (t(1) - t1)
        v2 = v[1]
        t2 = t1 * v2
        if nr == 3:
          v3 = v[2]
          t3 = t1 * v3
          rows = h[k:k + 3, k:i2 + 1]
          sm = rows[0] + v2 * rows[1] + v3 * rows[2]
          rows[0] -= sm * t1
          rows[1] -= sm * t2
          rows[2] -= sm * t3
          cols = h[i1:min(k + 3, i) + 1, k:k + 3]
          sm = cols[:, 0] + v2 * cols[:, 1] + v3 * cols[:, 2]
          cols[:, 0] -= sm * t1
          cols[:, 1] -= sm * t2
          cols[:, 2] -= sm * t3
          zc = z[ilo:ihi + 1, k:k + 3]
          sm = zc[:, 0] + v2 * zc[:, 1] + v3 * zc[:, 2]
          zc[:, 0] -= sm * t1
          zc[:, 1] -= sm * t2
          zc[:, 2] -= sm * t3
        elif nr == 2:
          rows = h[k:k + 2, k:i2 + 1]
          sm = rows[0] + v2 * rows[1]
          rows[0] -= sm * t1
          rows[1] -= sm * t2
          cols = h[i1:i + 1, k:k + 2]
          sm = cols[:, 0] + v2 * cols[:, 1]
          cols[:, 0] -= sm * t1
          cols[:, 1] -= sm * t2
          zc = z[ilo:ihi + 1, k:k + 2]
          sm = zc[:, 0] + v2 * zc[:, 1]
          zc[:, 0] -= sm * t1
          zc[:, 1] -= sm * t2
    else:
      return i + 1
    if l == i - 1:       # a 2 x 2 block converged: standardize it
      a, b, c, d, cs, sn = _lanv2(h[i - 1, i - 1], h[i - 1, i], h[i, i - 1], h[i, i], ulp)
      h[i - 1, i - 1], h[i - 1, i], h[i, i - 1], h[i, i] = a, b, c, d
      if i2 > i:
        _rot(h[i - 1, i + 1:i2 + 1], h[i, i + 1:i2 + 1], cs, sn)
      _rot(h[i1:i - 1, i - 1], h[i1:i - 1, i], cs, sn)
      _rot(z[ilo:ihi + 1, i - 1], z[ilo:ihi + 1, i], cs, sn)
    kdefl = 0
    i = l - 1
  return 0


def _fma(a, b, c):
  """a * b + c rounded once, as the fused multiply-adds of OpenBLAS's kernels: through float64
  for float32 (exact), and for float64 by the exact product (Dekker's split) and an error-free
  sum, whose result is a * b + c correctly rounded except in rare ties of double rounding."""
  dt = np.result_type(c)
  if dt == np.float32:
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64)
            + np.asarray(c, np.float64)).astype(dt)
  if dt != np.float64:
    return a * b + c
  a, b, c = np.asarray(a, dt), np.asarray(b, dt), np.asarray(c, dt)
  with np.errstate(over="ignore", invalid="ignore"):
    p = a * b
    sa, sb = a * 134217729.0, b * 134217729.0           # 2^27 + 1
    ah, bh = sa - (sa - a), sb - (sb - b)
    al, bl = a - ah, b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl   # a * b = p + e exactly
    s = p + c
    v = s - p
    t = (p - (s - v)) + (c - v)                          # p + c = s + t exactly
    out = s + (t + e)
  return np.where(np.isfinite(out), out, p + c)


def _rot(x, y, c, s):
  """?rot in place, as OpenBLAS's kernel rounds it: x <- fma(c, x, s y), y <- fma(c, y, -s x)."""
  tx = _fma(c, x, s * y)
  y[...] = _fma(c, y, -(s * x))
  x[...] = tx


def gees(a):
  """``(T, Z)`` with ``a = Z T Z^H``, as LAPACK's ``?gees`` (no sorting) computes them: for real
  ``a`` the real Schur form (2 x 2 blocks for complex conjugate pairs), for complex ``a`` the
  complex one (T upper triangular).  Non-finite input (or no convergence) gives NaN outputs."""
  n = a.shape[0]
  if n == 0:
    return a.copy(), np.eye(0, dtype=a.dtype)
  if not np.all(np.isfinite(a)):
    return np.full_like(a, np.nan), np.full_like(a, np.nan)
  h, ilo, ihi, scale = _balance_permute(np.asfortranarray(a))
  h, taus = _hessenberg(h, ilo, ihi)
  z = _form_q(h, taus, ilo, ihi)
  info = (_lahqr_complex if np.iscomplexobj(h) else _lahqr_real)(h, z, ilo, ihi)
  if info:
    return np.full_like(a, np.nan), np.full_like(a, np.nan)
  if n > 2:
    h[np.tril_indices(n, -2)] = 0
  z = _unbalance_vectors(z, ilo, ihi, scale)
  return h, z


def _cmul(a, b):
  """Complex products by the textbook formula, each part rounded as written (NumPy's SIMD
  complex loops fuse multiply-adds; LAPACK's compiled Fortran and ?scal do not)."""
  a, b = np.asarray(a), np.asarray(b)
  dt = np.result_type(a, b)
  ar, ai, br, bi = np.real(a), np.imag(a), np.real(b), np.imag(b)
  out = np.empty(np.broadcast_shapes(a.shape, b.shape), dt)
  out.real = ar * br - ai * bi
  out.imag = ar * bi + ai * br
  return out


def _cdivr(x, r):
  """complex / real, part by part (as Fortran's complex division by a real; NumPy's complex
  division rounds differently)."""
  return type(x)(complex(np.real(x) / r, np.imag(x) / r))


def _cscale(x, alpha):
  """?scal in place on the view ``x``."""
  x[...] = _cmul(x, alpha)


def _lahqr_complex(h, z, ilo, ihi):
  """?lahqr (wantt, wantz) on a complex Hessenberg h: single-shift QR with Wilkinson's shift,
  the subdiagonal kept real; accumulates into z, in place.  Returns 0 or LAPACK's info."""
  t = h.dtype.type
  n = h.shape[0]
  if n == 0 or ilo == ihi:
    return 0
  _clear_below_subdiagonal(h, ilo, ihi)
  jlo, jhi = 0, n - 1
  for i in range(ilo + 1, ihi + 1):          # make the subdiagonal real
    if np.imag(h[i, i - 1]) != 0:
      sc = _cdivr(h[i, i - 1], _cabs1(h[i, i - 1]))
      sc = _cdivr(np.conj(sc), abs(sc))
      h[i, i - 1] = abs(h[i, i - 1])
      _cscale(h[i, i:jhi + 1], sc)
      _cscale(h[jlo:min(jhi, i + 1) + 1, i], np.conj(sc))
      _cscale(z[ilo:ihi + 1, i], np.conj(sc))
  nh = ihi - ilo + 1
  rt = np.finfo(h.dtype).dtype.type
  fi = np.finfo(h.dtype)
  ulp = rt(fi.eps)
  smlnum = rt(fi.tiny) * (rt(nh) / ulp)
  i1, i2 = 0, n - 1
  itmax = 30 * max(10, nh)
  kdefl = 0
  dat1, half = rt(0.75), rt(0.5)
  i = ihi
  while i >= ilo:
    l = ilo
    for _its in range(itmax + 1):
      l = _deflation_point(h, i, l, ilo, ihi, smlnum, ulp, _cabs1)
      if l > ilo:
        h[l, l - 1] = 0
      if l >= i:
        break
      kdefl += 1
      if kdefl % (2 * _KEXSH) == 0:
        s = dat1 * abs(np.real(h[i, i - 1]))
        tt = s + h[i, i]
      elif kdefl % _KEXSH == 0:
        s = dat1 * abs(np.real(h[l + 1, l]))
        tt = s + h[l, l]
      else:                                  # Wilkinson's shift
        tt = h[i, i]
        u = _cmul(np.sqrt(h[i - 1, i]), np.sqrt(h[i, i - 1]))[()]
        s = _cabs1(u)
        if s != 0:
          x = half * (h[i - 1, i - 1] - tt)
          sx = _cabs1(x)
          s = max(s, _cabs1(x))
          xs, us = _cdivr(x, s), _cdivr(u, s)
          y = s * np.sqrt(_cmul(xs, xs) + _cmul(us, us))[()]
          if sx > 0:
            xd = _cdivr(x, sx)
            if np.real(xd) * np.real(y) + np.imag(xd) * np.imag(y) < 0:
              y = -y
          tt = tt - _cmul(u, _ladiv(u, x + y))[()]
      # look for two consecutive small subdiagonal elements
      for m in range(i - 1, l - 1, -1):
        h11, h22 = h[m, m], h[m + 1, m + 1]
        h11s = h11 - tt
        h21 = np.real(h[m + 1, m])
        s = _cabs1(h11s) + abs(h21)
        h11s, h21 = _cdivr(h11s, s), h21 / s
        if m == l:
          break
        h10 = np.real(h[m, m - 1])
        if abs(h10) * abs(h21) <= ulp * (_cabs1(h11s) * (_cabs1(h11) + _cabs1(h22))):
          break
      v = np.array([h11s, h21], h.dtype)
      for k in range(m, i):                  # single-shift QR step
        if k > m:
          v[:] = h[k:k + 2, k - 1]
        beta, t1, tail = _larfg(v[0], v[1:].copy())
        v[0], v[1] = beta, tail[0]
        if k > m:
          h[k, k - 1] = beta
          h[k + 1, k - 1] = 0
        v2 = v[1]
        t2 = np.real(_cmul(t1, v2))[()]
        rows = h[k:k + 2, k:i2 + 1]
        sm = _cmul(np.conj(t1), rows[0]) + t2 * rows[1]
        rows[0] -= sm
        rows[1] -= _cmul(sm, v2)
        for blk in (h[i1:min(k + 2, i) + 1, k:k + 2], z[ilo:ihi + 1, k:k + 2]):
          sm = _cmul(t1, blk[:, 0]) + t2 * blk[:, 1]
          blk[:, 0] -= sm
          blk[:, 1] -= _cmul(sm, np.conj(v2))
        if k == m and m > l:                 # keep h[m, m-1] real
          temp = t(1) - t1
          temp = _cdivr(temp, abs(temp))
          h[m + 1, m] = _cmul(h[m + 1, m], np.conj(temp))
          if m + 2 <= i:
            h[m + 2, m + 1] = _cmul(h[m + 2, m + 1], temp)
          for j in range(m, i + 1):
            if j != m + 1:
              if i2 > j:
                _cscale(h[j, j + 1:i2 + 1], temp)
              _cscale(h[i1:j, j], np.conj(temp))
              _cscale(z[ilo:ihi + 1, j], np.conj(temp))
      temp = h[i, i - 1]                     # keep h[i, i-1] real
      if np.imag(temp) != 0:
        rtemp = abs(temp)
        h[i, i - 1] = rtemp
        temp = _cdivr(temp, rtemp)
        if i2 > i:
          _cscale(h[i, i + 1:i2 + 1], np.conj(temp))
        _cscale(h[i1:i, i], temp)
        _cscale(z[ilo:ihi + 1, i], temp)
    else:
      return i + 1
    kdefl = 0
    i = l - 1
  return 0
