"""Per-tenant incremental bookkeeping derived from a :class:`History` (adapter, principle 2).

The book turns the append-only observation log into arrays the pickers work on, updating only
the tenants that received a new observation (so one decision over n = 1,000 tenants costs O(n)
numpy work plus O(t K) for the tenant that changed):

- ``n_obs`` (n,), ``best`` (n,): observation count ``t_i - 1`` and best quality so far
  (0 before the first model: the tenant has nothing to serve with, Sec. 4.1), both on the
  tenant's current data (a ``stale`` observation informs the posterior, and before the first
  completed current one sets ``best`` to a conservative guess, `STALE_FLOOR`); ``measured``
  (n,): whether a model completed on the current data; ``updates``
  (n,): observations applied to the tenant, stale ones included (what caches key on).
- ``sigma_tilde`` (n,): the empirical bound of Alg. 2 line 6,
  ``sigma~_i = min{ B_{t_i-1}(a_{t_i-1}), min_{t'<t_i-1} (y_t' + sigma~_t') } - y_{t_i-1}``,
  kept as the running minimum ``min_ecb`` of the empirical confidence bounds ``y + sigma~``;
  ``B`` is the cost-aware UCB of the played arm under the posterior before its observation.
- ``gap`` (n,): Alg. 2 line 8 rule, ``max_k B_i(k) - best_i`` over the tenant's untried arms.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from policy._types import BoolArray, FloatArray, History, Observation, Problem
from policy.acquisition import BetaRule, beta, ei_per_cost, measurement_var, ucb
from policy.costs import CostEstimator
from policy.gp import TenantPosterior

IntArray = NDArray[np.intp]
CostScale = Literal["mean", "tenant-mean", "max"]

#: Extra variance of a quality measured on an earlier version of a tenant's data
#: (`Observation.stale`): how far a model's quality moves when its training data double. On the
#: carried LCDB curves (``tenantml/data/curves/lcdb.csv.gz``, 41,900 pairs of anchors two steps
#: apart, from 91 training examples up) the change has mean +0.015 and RMS 0.037
#: (``python infra/scripts/stale_variance.py``).
STALE_VAR = 0.037**2
#: After a tenant's data changed, its best on the new data starts at its best stale result
#: less two such RMS (0.074): a conservative guess of how its served model does there, until
#: a model is measured on them. With 0 there (nothing to serve with) the first job after a
#: feed was the cheapest model, whose accuracy then replaced the served one's.
STALE_FLOOR = 2 * 0.037


def _cost_refs(problem: Problem, arms: list[IntArray], scale: CostScale) -> FloatArray:
    """Per-tenant divisor (n,) that puts costs in the unit ``sqrt(beta_t / c_k)`` expects.

    - "mean" (default): the mean cost of all arms of all tenants, so a typical arm has c = 1 and
      cross-tenant cost differences remain (the ease.ml authors' code divides each data set's
      times by their mean, DS3Lab/GP-UCB ``TS-MS/plain_scale.py``);
    - "tenant-mean": each tenant's own mean cost (that code's exact choice);
    - "max": the largest cost, so ``c* = 1`` as in Thm. 1; cheap arms then get ``sqrt(c*/c)``
      times more exploration and UCB degenerates to "cheapest first" on heavy-tailed costs
      (measured in the README's cost-scale ablation).

    With predicted costs the divisor is fixed from the predictions before any job ran, so
    refining one tenant's predictions never rescales another tenant's.
    """
    if scale not in ("mean", "tenant-mean", "max"):
        raise ValueError(f"unknown cost scale {scale!r}; valid: mean, tenant-mean, max")
    costs = [problem.cost[i, a] + problem.job_overhead for i, a in enumerate(arms)]
    if scale == "tenant-mean":
        return np.array([float(np.mean(c)) for c in costs])
    flat = np.concatenate(costs) if costs else np.ones(1)
    ref = float(np.max(flat)) if scale == "max" else float(np.mean(flat))
    return np.full(len(costs), ref)


__all__ = ["TenantBook", "TenantView"]


#: `TenantBook.generation`: one number per (re)built book in the process
_GENERATIONS = itertools.count()


@dataclass(frozen=True, slots=True)
class TenantView:
    """What a tenant picker sees (arrays of shape (n,); read-only by convention)."""

    eligible: BoolArray
    n_obs: IntArray
    weights: FloatArray
    sigma_tilde: FloatArray
    gap: FloatArray
    #: jobs in flight per tenant (None: none)
    n_pending: IntArray | None = None


class TenantBook:
    """Incremental per-tenant state for one :class:`Problem` (see module docstring)."""

    def __init__(
        self,
        problem: Problem,
        *,
        beta_rule: BetaRule = "simple",
        delta: float = 0.1,
        cost_aware: bool = True,
        cost_scale: CostScale = "mean",
        use_gp: bool = True,
    ) -> None:
        self.problem = problem
        n, m = problem.n_tenants, problem.n_models
        self.beta_rule: BetaRule = beta_rule
        self.delta = delta
        self.use_gp = use_gp and problem.prior is not None
        self.local_arms: list[IntArray] = [np.flatnonzero(row) for row in problem.available]
        self.local_index = np.full((n, m), -1, dtype=np.intp)
        for i, arms in enumerate(self.local_arms):
            self.local_index[i, arms] = np.arange(len(arms))
        self.k_max = max((len(a) for a in self.local_arms), default=1)
        self.cost_aware = cost_aware
        self._cost_ref = _cost_refs(problem, self.local_arms, cost_scale)
        self.estimator: CostEstimator | None = None  # predicted costs (a cost-aware book's)
        if problem.cost_prior is not None and cost_aware:
            self.estimator = CostEstimator(
                problem.cost_prior, self.local_arms, problem.sizes, problem.growth_sizes
            )
        self.reset()

    # -- state ---------------------------------------------------------------------------
    def reset(self) -> None:
        n = self.problem.n_tenants
        self.posts: list[TenantPosterior | None] = [None] * n
        self._shared: dict[bytes, tuple[FloatArray, FloatArray]] = {}
        self.tried: list[BoolArray] = [np.zeros(len(a), dtype=bool) for a in self.local_arms]
        self.n_obs = np.zeros(n, dtype=np.intp)
        self.updates = np.zeros(n, dtype=np.intp)  # observations applied, stale ones too
        self.remaining = np.array([len(a) for a in self.local_arms], dtype=np.intp)
        self.best = np.zeros(n)
        self.measured = np.zeros(n, dtype=bool)  # a model measured on the current data
        self.sum_z2 = np.zeros(n)  # sum of squared standardised surprises (y - mu) / sd
        self.n_z2 = np.zeros(n, dtype=np.intp)  # the surprises in it (failed jobs have none)
        self.sum_z = np.zeros(n)  # their signed sum: a posterior too high or too low throughout
        self.min_ecb = np.full(n, np.inf)
        self.sigma_tilde = np.full(n, np.nan)
        self.gap = np.full(n, np.nan)
        self._gap_dirty = np.ones(n, dtype=bool)
        self._consumed = 0
        self._last: Observation | None = None
        # unique across books: a policy's caches keyed on it (`RatePolicy._refresh`) must not
        # outlive the book of another problem (a refitted prior, new costs), which a per-book
        # count restarting at 0 let them do
        self.generation = next(_GENERATIONS)
        if self.estimator is not None:
            self.estimator.reset()
        if self.cost_aware:
            o = self.problem.job_overhead
            self.costs = [
                (self.problem.cost[i, a] + o) / self._cost_ref[i]
                for i, a in enumerate(self.local_arms)
            ]
        else:
            self.costs = [np.ones(len(a)) for a in self.local_arms]

    def sync(self, history: History) -> None:
        """Consume the observations appended since the last call (rebuild if the log differs)."""
        log = history.log
        if len(log) < self._consumed or (
            self._consumed and log[self._consumed - 1] is not self._last
        ):
            self.reset()
        for obs in log[self._consumed :]:
            self._apply(obs)
        self._consumed = len(log)
        self._last = log[-1] if log else None

    def posterior(self, i: int) -> TenantPosterior:
        post = self.posts[i]
        if post is None:
            prior = self.problem.prior
            assert prior is not None
            arms = self.local_arms[i]
            key = arms.tobytes()
            shared = self._shared.get(key)
            if shared is None:
                shared = self._shared[key] = (prior.cov[np.ix_(arms, arms)], prior.mean[arms])
            post = self.posts[i] = TenantPosterior(prior, arms, shared=shared)
        return post

    def beta_at(self, i: int, t: int) -> float:
        if self.beta_rule == "theorem":
            return beta(t, self.k_max, self.delta, "theorem", n_tenants=self.problem.n_tenants)
        return beta(t, len(self.local_arms[i]), self.delta, "simple")

    def _apply(self, obs: Observation) -> None:
        i = obs.tenant
        if not 0 <= i < self.problem.n_tenants:
            raise ValueError(
                f"observation for tenant index {i}; valid: 0..{self.problem.n_tenants - 1}"
            )
        la = int(self.local_index[i, obs.arm])
        if la < 0:
            raise ValueError(
                f"observation for model {obs.arm} which tenant {self.problem.tenants[i]!r} "
                "does not have"
            )
        if obs.completed and not np.isfinite(obs.quality):  # no model measured: as a failure
            obs = replace(obs, quality=0.0, completed=False)  # (one NaN stopped `rate` whole)
        y = float(obs.quality)
        self.updates[i] += 1
        if obs.stale:
            self._apply_stale(i, la, obs)
            return
        if self.use_gp and obs.completed:
            post = self.posterior(i)
            b = self.beta_at(i, int(self.n_obs[i]) + 1)
            bound = post.mu[la] + np.sqrt(b / self.costs[i][la]) * np.sqrt(post.var[la])
            self.min_ecb[i] = min(float(bound), float(self.min_ecb[i]))  # Alg. 2 line 6
            self.sigma_tilde[i] = self.min_ecb[i] - y
            extra = self.measurement_noise(i, y)
            z = (y - post.mu[la]) / np.sqrt(post.var[la] + post.noise + extra)
            self.sum_z2[i] += z**2
            self.sum_z[i] += z
            self.n_z2[i] += 1
            post.update(la, y, extra)
        if self.estimator is not None and np.isfinite(obs.cost) and obs.cost > 0:
            if obs.completed:
                self.estimator.observe(i, obs.arm, obs.cost)
            else:  # a lower bound (`CostEstimator.observe_bound`)
                self.estimator.observe_bound(i, obs.arm, obs.cost)
            if self.cost_aware:  # predicted costs: refine this tenant's (Problem docstring)
                o = self.problem.job_overhead
                self.costs[i] = (self.estimator.expected(i) + o) / self._cost_ref[i]
        if not self.tried[i][la]:
            self.tried[i][la] = True
            self.remaining[i] -= 1
        self.n_obs[i] += 1
        if obs.completed and not self.measured[i]:  # the first model measured on the data now
            self.best[i], self.measured[i] = y, True  # (replaces a `STALE_FLOOR` guess)
        else:
            self.best[i] = max(float(self.best[i]), y)
        self._gap_dirty[i] = True

    def _apply_stale(self, i: int, la: int, obs: Observation) -> None:
        """A job on an earlier version of the tenant's data: conditions the posterior with the
        extra variance `STALE_VAR` (how far a model's quality may move when its data do). The
        arm stays untried; until a model is measured on the current data the tenant's best is
        the `STALE_FLOOR` guess (what it is served with, conservatively), replaced by that
        first measurement; the cost is left out (it was paid on another amount of data than
        ``Problem.sizes`` says)."""
        if self.use_gp and obs.completed:
            y = float(obs.quality)
            self.posterior(i).update(la, y, self.measurement_noise(i, y) + STALE_VAR)
            self._gap_dirty[i] = True
        if obs.completed and not self.measured[i]:
            self.best[i] = max(float(self.best[i]), float(obs.quality) - STALE_FLOOR)
            self._gap_dirty[i] = True

    def measurement_noise(self, i: int, q: float) -> float:
        """The variance of tenant ``i``'s validation accuracy ``q`` that is the model's own
        (`measurement_var` on its ``Problem.val_sizes``; 0 where qualities are exact, as in the
        replay's tables). The GP adds it to the prior's noise for that observation: on a small
        tenant (glass: 160 rows, q = 0.7, s.d. 0.026) one measurement is far noisier than the
        prior's ``sigma`` (0.008, fitted on test sets of thousands)."""
        sizes = self.problem.val_sizes
        if sizes is None:
            return 0.0
        return measurement_var(q, float(sizes[i]))

    # -- per-tenant acquisition -------------------------------------------------------------
    def _branch(self, i: int, pending: Sequence[int]) -> TenantPosterior:
        post = self.posterior(i)
        if not pending:
            return post
        post = post.copy()
        for la in pending:  # GP-BUCB: pending arms hallucinated at their posterior mean
            post.update(la, None, self.measurement_noise(i, float(post.mu[la])))
        return post

    def candidates(self, i: int, pending: Sequence[int] = ()) -> BoolArray:
        mask = ~self.tried[i]
        if pending:
            mask = mask.copy()
            mask[list(pending)] = False
        return mask

    def ucb_scores(self, i: int, pending: Sequence[int] = ()) -> FloatArray:
        """Cost-aware UCB of every local arm at the tenant's next step (Alg. 2 lines 9-10)."""
        post = self._branch(i, pending)
        b = self.beta_at(i, int(self.n_obs[i]) + len(pending) + 1)
        return ucb(post.mu, np.sqrt(post.var), b, self.costs[i])

    def ei_scores(self, i: int, pending: Sequence[int] = ()) -> FloatArray:
        post = self._branch(i, pending)
        return ei_per_cost(post.mu, np.sqrt(post.var), float(self.best[i]), self.costs[i])

    def _gap_of(self, i: int, pending: Sequence[int]) -> float:
        cand = self.candidates(i, pending)
        if not cand.any():
            return -np.inf
        return float(self.ucb_scores(i, pending)[cand].max() - self.best[i])

    def view(self, pending: Mapping[int, Sequence[int]], *, need_gap: bool) -> TenantView:
        """Eligibility (distinct tenants first) and, if asked, the line-8 gaps."""
        remaining = self.remaining
        busy = np.zeros(self.problem.n_tenants, dtype=bool)
        if pending:
            remaining = remaining.copy()
            for i, arms in pending.items():
                if arms:
                    busy[i] = True
                    remaining[i] -= int(np.count_nonzero(~self.tried[i][list(arms)]))
        eligible = remaining > 0
        free = eligible & ~busy
        if free.any():
            eligible = free
        gap = self.gap
        if need_gap and self.use_gp:
            for d in np.flatnonzero(self._gap_dirty).tolist():
                self.gap[d] = self._gap_of(d, ())
            self._gap_dirty[:] = False
            if busy.any():
                gap = self.gap.copy()
                for b in np.flatnonzero(busy & eligible).tolist():
                    gap[b] = self._gap_of(b, pending[b])
        n_pending = np.zeros(self.problem.n_tenants, dtype=np.intp)
        for i, arms in pending.items():
            n_pending[i] = len(arms)
        return TenantView(
            eligible, self.n_obs, self.problem.weights, self.sigma_tilde, gap, n_pending
        )
