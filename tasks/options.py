"""The scheduler's options and the one place that says which values are valid.

`SchedulerOptions` is what the `scheduler` flow runs with; `option_problems` checks any of its
fields, so that `tenantml run` names a bad option (with its own flag names) before Prefect's
server starts, the SDK's `Client.run` before it waits for the server, and the flow (from the
Prefect UI) before anything runs, all by the same rules. Light to import: no framework, only
`policy`'s names (the CLI checks here before it loads the service).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple

__all__ = ["DISPATCH_MODES", "PRIORS", "OptionProblem", "SchedulerOptions", "option_problems"]

#: where the scheduler's jobs run (`SchedulerOptions.dispatch`)
DISPATCH_MODES = ("auto", "local", "pool")
#: the GP priors a scheduler can run with (`SchedulerOptions.prior`): ``learnt`` across tenants
#: (ease.ml App. A, `policy.prior`; the default) or ``independent`` arms (mean 0.5, variance
#: 0.05: what the service ran before it learnt across tenants; the ablation `bench-live` measures)
PRIORS = ("learnt", "independent")


class OptionProblem(NamedTuple):
    """One option that is not valid: its field `name`, its `value`, and what would be valid
    (`advice`, e.g. ``use 1 or more``)."""

    name: str
    value: Any
    advice: str

    @property
    def shown(self) -> str:
        """The value as a message shows it (a string quoted)."""
        return repr(self.value) if isinstance(self.value, str) else str(self.value)

    def __str__(self) -> str:
        return f"{self.name} {self.shown}: {self.advice}"


def option_problems(**options: Any) -> list[OptionProblem]:
    """What is not valid among `options` (any fields of `SchedulerOptions`, by name; None is
    valid where a field may be left unset), in the order given. A value of another type (a
    string where a number goes) raises TypeError."""
    from policy import POLICY_NAMES
    from policy.seer import TUNERS

    choices = {
        "dispatch": DISPATCH_MODES,
        "policy": POLICY_NAMES,
        "seer_tuner": TUNERS,
        "prior": PRIORS,
    }
    problems = []
    for name, value in options.items():
        if value is None and name in _MAY_BE_UNSET:
            continue
        if name in choices:
            valid, advice = value in choices[name], f"use one of {', '.join(choices[name])}"
        elif name in _LEAST:
            valid, advice = value >= _LEAST[name], f"use {_LEAST[name]} or more"
        elif name in _POSITIVE:
            valid, advice = value > 0, f"use a positive number{_POSITIVE[name]}"
        elif name == "chain_s":
            valid, advice = value >= 0, "use 0 (one job per run) or more seconds"
        elif name in _FIELDS:  # no rule (seed, stop_when_idle)
            continue
        else:  # a caller's typo would silently turn a check off
            raise ValueError(f"{name!r} is not a scheduler option: use {', '.join(_FIELDS)}")
        if not valid:
            unset = " (or leave it unset)" if name in _MAY_BE_UNSET and name not in choices else ""
            problems.append(OptionProblem(name, value, advice + unset))
    return problems


#: the fields with a least value (NaN is below it)
_LEAST = {"ticks": 0, "slots": 1, "prefetch": 0, "seer_budget_x": 1, "max_epochs": 1}
#: the fields that are positive numbers (NaN is not), and what their advice adds
_POSITIVE = {
    "job_budget_s": "",
    "sleep_s": "",
    "outage_patience_s": "",
    "budget_s": "",
    "poll_s": " of seconds",
    "refresh_s": " of seconds",
}
#: the fields that None leaves to the installation's default
_MAY_BE_UNSET = frozenset(
    (
        "policy",
        "ticks",
        "slots",
        "prefetch",
        "seer_budget_x",
        "job_budget_s",
        "sleep_s",
        "outage_patience_s",
        "budget_s",
    )
)


@dataclass(frozen=True)
class SchedulerOptions:
    """The `scheduler` flow's parameters, as given; None is the installation's default.

    * `ticks`: stop after this many ticks once their jobs have finished (0: only finish the jobs
      in flight); None: run until stopped;
    * `policy`: the scheduling policy (`policy.POLICY_NAMES`); None: `Settings.policy`;
    * `slots`: ``G``, the GPU slots; None: `Settings.gpu_slots`;
    * `max_epochs`: epochs per learning rate of each job;
    * `job_budget_s`: seconds per job at most (None: the policy's own time limit only);
    * `sleep_s`: jobs are sleep-based stand-ins holding their slot this long (benchmarks);
    * `poll_s`: seconds between passes; `refresh_s`: seconds between refreshes of the state
      while nothing finishes;
    * `seed`: the policy's random generator;
    * `stop_when_idle`: with ``ticks=None``, stop once no tenant has a model left to try;
    * `dispatch`: ``"local"`` (threads in this process), ``"pool"`` (the Prefect work pool
      ``gpu``), ``"auto"`` (local in embedded mode, else the pool);
    * `prefetch`: ``P``, jobs sent beyond the running ones, each waiting warm on a GPU's lock
      (one machine: its slot's; several nodes: that of the GPU whose worker took it); None:
      ``G`` x the installation's `Settings.prefetch_for` (given, else 0 for local dispatch
      and 1 for the pool's workers);
    * `seer_budget_x`: torch models get a SEER job whose GPU budget is this many times the
      policy's expected job time (None: the fixed learning-rate grid);
    * `seer_tuner`: the tuner of those jobs, ``replan`` (ours) or ``seer`` (the paper's);
    * `outage_patience_s`: seconds a server outage is waited out before the flow fails; None:
      ``TENANTML_OUTAGE_PATIENCE_S`` (default 600);
    * `prior`: the policy's GP prior, ``learnt`` across tenants or ``independent`` arms (the
      ablation; `PRIORS`);
    * `chain_s`: jobs expected to take less than this many seconds are sent several to a flow
      run, chained until their expected seconds add up to it (`Planner.decide`); 0: one job
      per run;
    * `budget_s`: wall-clock seconds after which no tick starts (counted from the scheduler's
      MLflow run, once its servers answer and the jobs an earlier scheduler left are resumed);
      the jobs in flight finish (each within ``job_budget_s`` where given; with a work pool,
      the prefetched ones too) and it stops, as after its ``ticks``. Until then it runs on
      when nothing is left to try, for tenants and examples yet to come (``stop_when_idle``
      stops it there); None: no limit.

    No defaults here: the flow's signature holds them.
    """

    ticks: int | None
    policy: str | None
    slots: int | None
    max_epochs: int
    job_budget_s: float | None
    sleep_s: float | None
    poll_s: float
    refresh_s: float
    seed: int
    stop_when_idle: bool
    dispatch: str
    prefetch: int | None
    seer_budget_x: float | None
    outage_patience_s: float | None
    prior: str
    chain_s: float = 10.0
    seer_tuner: str = "replan"
    budget_s: float | None = None

    def __post_init__(self) -> None:
        """A bad parameter (from the Prefect UI, the CLI or the SDK) is named with what would
        be valid before anything starts (`option_problems`)."""
        problems = option_problems(**{f.name: getattr(self, f.name) for f in fields(self)})
        if problems:
            raise ValueError("scheduler parameters not valid: " + "; ".join(map(str, problems)))


#: every option's name, in the flow's order
_FIELDS = tuple(f.name for f in fields(SchedulerOptions))
