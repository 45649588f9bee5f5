"""The GP prior the live service and the replay share: learnt from every tenant with results.

ease.ml learns the arm kernel from *other* tenants' qualities (shared/papers/002 App. A,
:func:`policy.gp.fit_arm_prior`). A live service has two sources of such tenants: a shipped
matrix built from real data (``tenantml/data/live-prior.csv.gz``: LCDB and the ease.ml authors'
CNN matrix mapped to the live catalogue) and its own tenants' finished jobs. :func:`learn_prior`
turns one quality matrix over both into an :class:`ArmPrior`; :class:`OnlinePrior` keeps the
matrix up to date from observations and says when a refit is due, so the cost per scheduler pass
stays bounded (one fit per ``refit_every`` new results).

Notation: ``q`` (M, n) quality of catalogue model ``k`` on tenant (column) ``j``, NaN where
not measured. A catalogue mixes workloads (tabular models are never measured on image tenants),
so the prior is block diagonal: the *blocks* are the connected components of "measured on the
same tenant", each fitted on its own. Models measured on fewer than ``min_tenants`` tenants, and
blocks with fewer than that many tenants, get the wide independent prior ``N(0.5, 0.05)``: a
model nobody has trained yet is not believed to be good or bad.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from policy._types import ArmPrior, FloatArray, Observation
from policy.gp import NOISE_FLOOR, KernelMethod, fit_arm_prior

__all__ = ["DEFAULT_MEAN", "DEFAULT_VAR", "REFIT_EVERY", "OnlinePrior", "learn_prior"]

#: results between two refits of the prior, in the live service and the replay's ``live``.
REFIT_EVERY = 10

#: prior of a model without enough data: mean quality 0.5, standard deviation 0.22.
DEFAULT_MEAN = 0.5
DEFAULT_VAR = 0.05
#: observation-noise variance when no block was fitted (a validation accuracy on a few hundred
#: examples: standard error about 0.01).
DEFAULT_NOISE = 1e-4
#: the least fraction of a block's models a tenant must have measured to shape its kernel
MIN_COVERAGE = 0.2


#: the last few fits, by their inputs: the live service's state and its planner's loop refit the
#: same data in the same pass, the second for free
_MEMO: dict[bytes, ArmPrior] = {}


def learn_prior(
    quality: FloatArray,
    *,
    min_tenants: int = 4,
    method: KernelMethod = "app-a",
    random_state: int | None = 0,
) -> ArmPrior:
    """Prior over the M catalogue models from ``quality`` (M, n), NaN where not measured.

    Per block (see module docstring): tenants that measured fewer than two, or fewer than
    ``MIN_COVERAGE`` of the block's models are left out (App. A imputes missing cells with the
    tenant's mean; a column that is nearly all imputation would teach the kernel that every
    model is alike; 0.2 keeps the ease.ml matrix, which measures 8 of the 36 image candidates,
    and live tenants that tried a fifth of their arms), then
    :func:`fit_arm_prior` with ``method`` on the rest when at least ``min_tenants`` remain.
    The observation noise of the result is the largest of the fitted blocks' (conservative).
    """
    q = np.asarray(quality, dtype=float)
    if q.ndim != 2:
        raise ValueError(f"quality must be a (models, tenants) matrix, got shape {q.shape}")
    key = (
        repr((q.shape, min_tenants, method, random_state)).encode()
        + np.nan_to_num(q, nan=-1.0).tobytes()
    )
    if (memo := _MEMO.get(key)) is not None:
        return memo
    prior = _learn(q, min_tenants, method, random_state)
    _MEMO[key] = prior
    while len(_MEMO) > 4:
        del _MEMO[next(iter(_MEMO))]
    return prior


def _learn(
    q: FloatArray, min_tenants: int, method: KernelMethod, random_state: int | None
) -> ArmPrior:
    m = q.shape[0]
    mean = np.full(m, DEFAULT_MEAN)
    cov = np.eye(m) * DEFAULT_VAR
    noise = 0.0
    seen = np.isfinite(q)
    learnable = seen.sum(axis=1) >= min_tenants
    rows = np.flatnonzero(learnable)
    if len(rows):
        # Models are linked when one tenant measured both: components of (models x tenants).
        sub = seen[rows].astype(np.int8)
        adjacency = csr_matrix(sub @ sub.T)
        n_blocks, label = connected_components(adjacency, directed=False)
        for b in range(n_blocks):
            block = rows[label == b]
            measured = seen[block].sum(axis=0)
            cols = (measured >= 2) & (measured >= MIN_COVERAGE * len(block))
            if cols.sum() < min_tenants:
                continue
            fitted = fit_arm_prior(
                q[np.ix_(block, np.flatnonzero(cols))], method=method, random_state=random_state
            )
            mean[block] = fitted.mean
            cov[np.ix_(block, block)] = fitted.cov
            noise = max(noise, fitted.noise)
    return ArmPrior.create(mean, cov, max(noise or DEFAULT_NOISE, NOISE_FLOOR))


@dataclass
class OnlinePrior:
    """The prior learnt from ``base`` (M, n0) plus the tenants of one scheduler, kept current.

    ``base``: qualities of tenants outside the scheduler (the shipped matrix, or the replay's
    training tenants), NaN where not measured. ``n_tenants``: the scheduler's tenants; each
    becomes one more column holding its best completed quality per model. :meth:`due` turns true
    once ``refit_every`` new results have arrived since the last :meth:`fit`.

    A tenant's own results are then both in the prior and conditioned on by its posterior; with
    one shared prior for all tenants this cannot be avoided, and with many columns (the shipped
    matrix has hundreds) one tenant's weight in the prior is small.
    """

    base: FloatArray
    n_tenants: int
    refit_every: int = REFIT_EVERY
    min_tenants: int = 4
    method: KernelMethod = "app-a"
    _own: FloatArray = field(init=False, repr=False)
    _new: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.base = np.asarray(self.base, dtype=float)
        if self.refit_every < 1:
            raise ValueError(f"refit_every must be >= 1, got {self.refit_every}")
        self._own = np.full((self.base.shape[0], self.n_tenants), np.nan)

    def observe(self, observations: Iterable[Observation], *, count: bool = True) -> None:
        """Record completed jobs (stopped or failed ones carry no quality). ``count=False``:
        results the current prior was already fitted on (they do not make a refit due)."""
        for obs in observations:
            if not obs.completed or not np.isfinite(obs.quality):
                continue
            old = self._own[obs.arm, obs.tenant]
            if not old >= obs.quality:  # NaN or lower
                self._own[obs.arm, obs.tenant] = obs.quality
            self._new += count

    def due(self) -> bool:
        return self._new >= self.refit_every

    def quality(self) -> FloatArray:
        """(M, n0 + n) the matrix the next fit uses."""
        return np.concatenate([self.base, self._own], axis=1)

    def fit(self) -> ArmPrior:
        self._new = 0
        return learn_prior(self.quality(), min_tenants=self.min_tenants, method=self.method)
