"""``rate``: a joint (tenant, model) picker, the one-step Bayes-optimal rate of loss reduction.

ease.ml picks a tenant first (Alg. 2) and a model second (GP-UCB). But every tenant's accuracy
loss ``l_i = a*_i - best_i`` (paper 001 App. A Eq. 2) is in the same unit, so all (tenant, model)
pairs can be compared directly. Training model ``k`` for tenant ``i`` reduces the tenant's loss
by ``max(0, min(y_ik, 1) - best_i)`` (accuracy cannot pass 1); under the GP posterior
``y_ik ~ N(mu_ik, sigma_ik^2 + s^2)`` its expectation is the expected improvement of that
bounded outcome, ``EI_ik = EI(best_i) - EI(1)`` (``best_i = 0`` before the tenant's first model,
which has nothing to serve with; after the tenant's data changed, a conservative guess of its
served model's accuracy on them, `policy._book.STALE_FLOOR`). Without the bound, a tenant at
0.985 whose first results
surprised its prior (a wide calibrated posterior) looked as promising as one at 0.88: in
``bench-live real`` digits spent 75 s on three LeNet variants after LeNet's 0.985 while MNIST
waited for its first CNN. The policy runs the pair with the largest

    ``rate_ik = w_i EI_ik / c_ik``

expected weighted loss reduction per unit expected cost: Smith's rule (weighted shortest
processing time) applied to the expected rewards, the rule the oracle reference applies to the
true ones. ``c_ik`` are the problem's costs (given, or predicted by :mod:`policy.costs`).

Measured qualities (``Problem.val_sizes``: a live tenant's validation accuracy on ``n_val``
examples) are noisy, and a tenant is served the model that *measures* best, so a better model
replaces the incumbent only when its measurement says so. ``EI_ik`` is then the expected gain
of the served model's true quality, :func:`policy.acquisition.selected_improvement` with the
two measurements' noise ``v_e = 2 (1 - r) q (1 - q) / n_val``, ``r`` the share of a validation
accuracy's binomial noise that two models measured on the same examples have in common
(:data:`policy.acquisition.ERROR_CORRELATION`: they fail on the same hard examples): on 30
validation rows at 0.9 its s.d. is 0.055, and a job that may gain 0.03 is mostly a coin toss, on
300 rows (s.d. 0.017) it is not.
Replay tables measure exactly (``val_sizes`` None): there it is the EI above.

Multi-device (G free slots): slots are filled one after another; a pending job is "believed"
at its expected outcome: its arm is hallucinated at the posterior mean (GP-BUCB variance
reduction of correlated arms) and the tenant's best becomes ``best_i + EI_i,pending`` (the
expected best once it reports), so the next slot goes to the next most promising pair, of the
same tenant only if that is still worth more than every other tenant's.

Cost of a decision: each tenant's best pair is cached and recomputed (O(K_i + t_i K_i)) only
when that tenant got an observation or a pending job; the choice is an argmax over n.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policy._book import CostScale, TenantBook
from policy._types import Assignment, Decision, FloatArray, Snapshot
from policy.acquisition import expected_improvement, selected_improvement
from policy.estimates import CALIBRATION

__all__ = ["RatePolicy"]


@dataclass
class RatePolicy:
    """Joint picker ``argmax_{i,k} w_i EI_ik / c_ik`` (module docstring).

    ``cost_aware=False`` drops the cost (``c = 1``), the rate per job.
    ``calibration = nu > 0`` scales tenant ``i``'s posterior sd by ``sqrt(kappa_i)``,
    ``kappa_i = (nu + sum z^2) / (nu + n_i)`` over the ``n_i`` standardised surprises
    ``z = (y - mu) / sd`` of its own measured results (a failed job has none): a
    scaled-inverse-chi^2 estimate of the kernel amplitude for that tenant, ``nu``
    pseudo-observations at 1. A tenant the shared kernel mispredicts gets wider intervals and
    more exploration. ``predictive=True`` uses
    the variance of a new observation (latent + noise) instead of the latent variance in EI.
    Defaults are the best measured variant (README, "Beyond Hybrid").
    """

    name: str = "rate"
    cost_aware: bool = True
    cost_scale: CostScale = "mean"
    calibration: float = CALIBRATION
    predictive: bool = False
    #: the quality's upper bound (accuracy: 1): EI of the bounded outcome ``min(y, upper)``
    upper: float = 1.0
    _book: TenantBook | None = field(default=None, init=False, repr=False)
    _gen: int = field(default=-1, init=False, repr=False)
    _seen: np.ndarray = field(default_factory=lambda: np.zeros(0, np.intp), init=False, repr=False)
    _score: FloatArray = field(default_factory=lambda: np.zeros(0), init=False, repr=False)
    _arm: np.ndarray = field(default_factory=lambda: np.zeros(0, np.intp), init=False, repr=False)

    def book(self, snapshot: Snapshot) -> TenantBook:
        problem = snapshot.problem
        if self._book is None or self._book.problem is not problem:
            if problem.prior is None:
                raise ValueError("the rate policy needs a GP prior (Problem.prior)")
            self._book = TenantBook(problem, cost_aware=self.cost_aware, cost_scale=self.cost_scale)
        self._book.sync(snapshot.history)
        return self._book

    def tenant_rates(self, book: TenantBook, i: int, pending: Sequence[int] = ()) -> FloatArray:
        """``w_i EI_ik / c_ik`` (K_i,) over tenant ``i``'s local arms; -inf where not a candidate
        (tried or pending)."""
        post = book.posterior(i)
        best = float(book.best[i])
        if pending:
            # believe pending jobs: expected best after they report, sequentially
            for la in pending:
                sd = np.sqrt(post.var[la : la + 1] + post.noise)
                gain = expected_improvement(post.mu[la : la + 1], sd, best, self.upper)
                best += float(gain[0])
            post = book._branch(i, pending)
        sd = np.sqrt(post.var + post.noise) if self.predictive else np.sqrt(post.var)
        if self.calibration > 0:
            nu = self.calibration
            kappa = (nu + book.sum_z2[i]) / (nu + book.n_z2[i])
            sd = sd * np.sqrt(kappa)
        gain = selected_improvement(post.mu, sd, best, self.selection_noise(book, i), self.upper)
        rate = book.problem.weights[i] * gain / book.costs[i]
        out: FloatArray = np.where(book.candidates(i, pending), rate, -np.inf)
        return out

    @staticmethod
    def selection_noise(book: TenantBook, i: int) -> float:
        """``v_e = 2 (1 - r) q (1 - q) / n_val``: the variance of a new model's validation
        accuracy less the incumbent's, both binomial on the tenant's ``n_val`` validation
        examples at about the incumbent's accuracy ``q``, less the share ``r`` of that noise the
        two have in common (`TenantBook.measurement_noise`; 0 without ``Problem.val_sizes``, or
        before the first model on the tenant's current data, which is served whatever it
        measures)."""
        if not book.measured[i]:
            return 0.0
        return 2.0 * book.measurement_noise(i, float(book.best[i]))

    def _refresh(self, book: TenantBook) -> None:
        n = book.problem.n_tenants
        if self._gen != book.generation or len(self._seen) != n:
            self._gen = book.generation
            self._seen = np.full(n, -1, dtype=np.intp)
            self._score = np.full(n, -np.inf)
            self._arm = np.full(n, -1, dtype=np.intp)
        for i in np.flatnonzero(self._seen != book.updates).tolist():
            self._best_of(book, i, ())
            self._seen[i] = book.updates[i]

    def _best_of(self, book: TenantBook, i: int, pending: Sequence[int]) -> tuple[float, int]:
        rates = self.tenant_rates(book, i, pending)
        k = int(np.argmax(rates))
        score = float(rates[k])
        if not pending:
            self._score[i], self._arm[i] = score, k
        return score, k

    def decide(self, snapshot: Snapshot, state: Any, rng: np.random.Generator) -> Decision:
        book = self.book(snapshot)
        self._refresh(book)
        pending: dict[int, list[int]] = {}
        for a in snapshot.pending:
            pending.setdefault(a.tenant, []).append(int(book.local_index[a.tenant, a.arm]))
        score, arm = self._score.copy(), self._arm.copy()
        for i, arms in pending.items():
            score[i], arm[i] = self._best_of(book, i, arms)
        out: list[Assignment] = []
        for _ in range(max(snapshot.free_slots, 0)):
            i = int(np.argmax(score))
            if not np.isfinite(score[i]):
                break
            local = int(arm[i])
            out.append(Assignment(i, int(book.local_arms[i][local])))
            pending.setdefault(i, []).append(local)
            score[i], arm[i] = self._best_of(book, i, pending[i])
        finite = np.isfinite(self._score)
        info = {"expected_loss_reduction_rate": float(self._score[finite].max(initial=0.0))}
        return Decision(tuple(out), state, info)
