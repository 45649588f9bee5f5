"""The shipped matrix's prior, fitted once per machine: a new home's first pass does not refit it.

`ServiceState.with_learnt_prior` fits the GP prior (`policy.prior.learn_prior`, App. A) on the
shipped quality matrix and one column per tenant of its finished jobs. Until a tenant has a
result those columns are empty, and `learn_prior` leaves out columns with fewer than two
measurements, so the fit is the fit of the shipped matrix alone: the same on every new home
with the same catalogue. Done in the scheduler's thread before its first job, it took 0.8 s on
the 2-core machine (0.7 s of them importing scikit-learn's GP module), and ``bench-live``
measured the learnt-prior systems' first job 0.6 s after the independent prior's.

`fit_shipped` keeps that fit in the user's cache (`tasks.settings.user_cache`,
``prior-<sha256>.npz``: mean (M,), cov (M, M), noise), keyed by the matrix and the fit's
settings, so a changed matrix or catalogue is a different file. A file that cannot be read is
fitted again and replaced; a cache that cannot be written is only skipped.
"""

from __future__ import annotations

import hashlib
import logging
import zipfile
from pathlib import Path

import numpy as np

from policy import ArmPrior
from policy.prior import OnlinePrior
from tasks.settings import user_cache, write_atomically

__all__ = ["cache_path", "fit_shipped"]

log = logging.getLogger(__name__)


def cache_path(source: OnlinePrior) -> Path:
    """The cache file of `source`'s fit with no tenant results: named by a SHA-256 of the
    shipped matrix (shape and values, NaN included) and the fit's settings."""
    h = hashlib.sha256()
    h.update(repr((source.base.shape, source.min_tenants, source.method)).encode())
    h.update(np.ascontiguousarray(source.base, dtype=np.float64).tobytes())
    return user_cache() / f"prior-{h.hexdigest()[:32]}.npz"


def fit_shipped(source: OnlinePrior) -> ArmPrior:
    """``source.fit()`` for a source whose tenants have no results yet, read from the cache when
    an earlier run on this machine fitted the same matrix (and written there when not)."""
    own = source.quality()[:, source.base.shape[1] :]
    if not np.isnan(own).all():
        raise ValueError("fit_shipped is for a prior without tenant results; use source.fit()")
    path = cache_path(source)
    cached = _read(path, source.base.shape[0])
    if cached is not None:
        return cached
    prior = source.fit()
    _write(path, prior)
    return prior


def _read(path: Path, m: int) -> ArmPrior | None:
    try:
        with np.load(path, allow_pickle=False) as f:
            mean, cov, noise = f["mean"], f["cov"], float(f["noise"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:  # damaged, alien
        log.warning("ignoring the prior cache %s (%r); fitting again", path, e)
        return None
    if mean.shape != (m,) or cov.shape != (m, m) or not np.isfinite(cov).all():
        log.warning("ignoring the prior cache %s (shapes %s, %s); fitting again", path,
                    mean.shape, cov.shape)  # fmt: skip
        return None
    return ArmPrior.create(mean, cov, noise)


def _write(path: Path, prior: ArmPrior) -> None:
    """Keep `prior` at `path`, replaced in one step (two schedulers may race)."""

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, mean=prior.mean, cov=prior.cov, noise=np.float64(prior.noise))

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(save, path)
    except OSError as e:  # a read-only or full cache: the next run fits again
        log.warning("could not keep the prior's fit in %s: %r", path, e)
