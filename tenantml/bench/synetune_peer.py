"""Syne Tune's ASHA and BOHB on our recorded curves: the maintained implementation our
baselines (:mod:`policy.seer.tuning`) are checked against (issue 19, item 1).

``tenantml seer simulate --peer synetune`` adds a column ``synetune:asha`` beside ``asha`` and
``synetune:bohb`` beside ``bohb``. Both sides get the same problem:

- the same curve set, deadline ``T`` and budget ``B``: ``n = floor(B/T)`` one-resource workers
  for a simulated wall clock of ``T`` (Syne Tune's ``SimulatorBackend`` with its
  ``SimulatorCallback``; a trial reports evaluation ``j`` of its curve ``times[j] / lambda(1)``
  after it starts, as on our simulator);
- the same maximum resource ``R`` (:func:`policy.seer.tuning.max_resource`), grace period one
  evaluation and reduction factor ``eta`` (ASHA's ``max_t``, ``grace_period``,
  ``reduction_factor``);
- the same finite space: a recorded curve set holds each configuration once, so a proposal is
  mapped to a configuration not tried yet. ASHA searches one categorical choice over the curves
  (a repeated proposal becomes a uniformly drawn untried one: uniform sampling without
  replacement, as ours). BOHB's KDE searches the hyperparameters scaled to [0, 1]
  (:attr:`Curves.unit_hps`) and a proposal becomes the nearest untried configuration, as our
  TPE sampler does (a set without hyperparameters is one categorical choice there too);
- the same result: the metric of the best model at the deadline, each trial's last evaluation
  reached by ``T``.

Two things of Syne Tune's simulator are switched off because ours has neither: the real time its
own scheduler spends is not added to the simulated clock, and events have no delays. What
remains different is each library's algorithm: Syne Tune 0.16's ASHA is the stopping variant
(a trial runs on until a rung ranks it outside the top ``1/eta``), ours the promotion variant of
Li et al. (2020, Alg. 2); Syne Tune's BOHB is asynchronous (ASHA's stopping rule with a KDE
searcher), ours keeps BOHB's synchronous Hyperband brackets (Falkner et al. 2018, Sec. 4.2).

Lives outside ``policy/`` because it imports syne-tune (an optional peer: ``pip install
'tenantml[peers]'``).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import tempfile
import warnings
from typing import Any

import numpy as np

from policy.seer.tuning import Curves, TuningSettings, max_resource

__all__ = [
    "PEER",
    "PEER_METHODS",
    "PeerUnavailable",
    "check_available",
    "peer_column",
    "run_peer",
]

PEER = "synetune"
PEER_METHODS = ("asha", "bohb")
_METRIC, _RESOURCE, _ELAPSED = "metric", "evals", "elapsed"


class PeerUnavailable(RuntimeError):
    """Syne Tune is not installed; the message says how to install it."""


def peer_column(method: str) -> str:
    """Name of the peer's column for one of our methods: ``asha`` -> ``synetune:asha``."""
    return f"{PEER}:{method}"


def check_available() -> None:
    """Fail early, before any simulation, when Syne Tune is not installed.

    Raises:
        PeerUnavailable: with the command that installs it.
    """
    _syne()


def _syne() -> dict[str, Any]:
    """The Syne Tune names used here, imported lazily (an optional dependency)."""
    try:
        tune = importlib.import_module("syne_tune")
        sim = importlib.import_module("syne_tune.backend.simulator_backend.simulator_backend")
        cb = importlib.import_module("syne_tune.backend.simulator_backend.simulator_callback")
        status = importlib.import_module("syne_tune.backend.trial_status")
        space = importlib.import_module("syne_tune.config_space")
        baselines = importlib.import_module("syne_tune.optimizer.baselines")
        callback = importlib.import_module("syne_tune.tuner_callback")
        tuner_logger = importlib.import_module("syne_tune.tuner_logger")
    except ImportError as e:
        raise PeerUnavailable(
            f"--peer {PEER} needs Syne Tune ({e.name} is missing): pip install 'tenantml[peers]' "
            f"(syne-tune 0.16), or leave --peer out"
        ) from None
    return {
        "Tuner": tune.Tuner,
        "StoppingCriterion": tune.StoppingCriterion,
        "SimulatorBackend": sim.SimulatorBackend,
        "SimulatorConfig": sim.SimulatorConfig,
        "SimulatorCallback": cb.SimulatorCallback,
        "Status": status.Status,
        "choice": space.choice,
        "uniform": space.uniform,
        "ASHA": baselines.ASHA,
        "BOHB": baselines.BOHB,
        "TunerCallback": callback.TunerCallback,
        "TunerLogger": tuner_logger.TunerLogger,
    }


def _backend_class(st: dict[str, Any]) -> type:
    """A ``SimulatorBackend`` whose trials replay recorded curves (built on first use: the base
    class exists only once Syne Tune is imported)."""

    base: Any = st["SimulatorBackend"]

    class CurveBackend(base):  # type: ignore[misc]
        """Trial ``i`` replays curve ``curve_of[i]``, mapped once when the trial starts."""

        def __init__(
            self,
            curves: Curves,
            x: np.ndarray,
            rng: np.random.Generator,
            speed: float,
            tick: float,
        ) -> None:
            no_delay = st["SimulatorConfig"](0.0, 0.0, 0.0, 0.0, 0.0)
            super().__init__(
                entry_point=__file__,  # never run: results come from the curves
                elapsed_time_attr=_ELAPSED,
                simulator_config=no_delay,
                tuner_sleep_time=tick,
            )
            self.curves, self.x, self.rng, self.speed = curves, x, rng, speed
            self.curve_of: dict[int, int] = {}
            self.resumed_at: dict[int, int] = {}

        def _advance_by_outside_time(self) -> None:
            # Ours charges no time for the scheduler's own decisions; neither does this one.
            return None

        def _pause_trial(self, trial_id: int, result: dict[str, Any] | None) -> None:
            super()._pause_trial(trial_id, result)
            if result is not None and _RESOURCE in result:
                self.resumed_at[trial_id] = int(result[_RESOURCE])

        def _map(self, config: dict[str, Any]) -> int:
            used = set(self.curve_of.values())
            unused = [c for c in range(len(self.curves)) if c not in used]
            if "config" in config:
                proposal = int(config["config"])
                if proposal not in used or not unused:
                    return proposal
                return int(self.rng.choice(unused))
            target = np.array([float(config[f"x{j}"]) for j in range(self.x.shape[1])])
            return self.curves.nearest_untried(target, used)

        def _run_job_and_collect_results(
            self, trial_id: int, config: dict[str, Any] | None = None
        ) -> tuple[str, list[dict[str, Any]]]:
            if trial_id not in self.curve_of:
                self.curve_of[trial_id] = self._map(config or self._trial_dict[trial_id].config)
            c = self.curve_of[trial_id]
            times, values = self.curves.times[c], self.curves.values[c]
            start = self.resumed_at.get(trial_id, 0)
            offset = float(times[start - 1]) if start else 0.0
            results = [
                {
                    _METRIC: float(values[j]),
                    _RESOURCE: j + 1,
                    _ELAPSED: (times[j] - offset) / self.speed,
                }
                for j in range(start, len(times))
            ]
            return st["Status"].completed, results

    return CurveBackend


def run_peer(
    method: str,
    curves: Curves,
    deadline: float,
    budget: float,
    seed: int,
    settings: TuningSettings,
    *,
    brackets: int = 1,
) -> tuple[float, float]:
    """Syne Tune's ``method`` (``asha`` or ``bohb``) once on ``curves``: the metric of the best
    model at the deadline (see the module docstring for what is matched to ours) and the
    resource-time paid (its ``n`` workers for all of ``T``, as for ours).

    ``brackets``: Syne Tune's number of brackets (its default, 1, is the most aggressive
    one, grace period one evaluation; Hyperband's set is ``floor(log_eta R) + 1``).

    Raises:
        ValueError: ``method`` is not one the peer runs.
        PeerUnavailable: Syne Tune is not installed.
    """
    if method not in PEER_METHODS:
        raise ValueError(f"the {PEER} peer runs {', '.join(PEER_METHODS)}, not {method!r}")
    st = _syne()
    logging.getLogger("syne_tune").setLevel(logging.ERROR)
    T = float(deadline)
    workers = max(1, int(budget // deadline))
    rng = np.random.default_rng(seed)
    x = curves.unit_hps if method == "bohb" else np.zeros((len(curves), 0))
    if x.shape[1]:
        space: dict[str, Any] = {f"x{j}": st["uniform"](0.0, 1.0) for j in range(x.shape[1])}
    else:
        space = {"config": st["choice"]([str(c) for c in range(len(curves))])}
    common = {
        "config_space": space,
        "metric": _METRIC,
        "time_attr": _RESOURCE,
        "max_t": max_resource(curves, T, settings),
        "do_minimize": False,
        "random_seed": seed,
        "grace_period": 1,
        "reduction_factor": settings.eta,
        "brackets": brackets,
    }
    scheduler = st["ASHA"](**common) if method == "asha" else st["BOHB"](**common)

    last: dict[int, tuple[float, float]] = {}  # trial -> (simulated time, metric) last reported

    callback: Any = st["TunerCallback"]
    tuner_logger: Any = st["TunerLogger"]

    class LastReport(callback):  # type: ignore[misc]
        def on_trial_result(
            self, trial: Any, status: str, result: dict[str, Any], decision: str
        ) -> None:
            last[trial.trial_id] = (float(result["st_tuner_time"]), float(result[_METRIC]))

    class Quiet(tuner_logger):  # type: ignore[misc]
        def __getattribute__(self, name: str) -> Any:
            if name.startswith("print_"):
                return lambda *args, **kwargs: None
            return super().__getattribute__(name)

    backend = _backend_class(st)(
        curves, x, rng, speed=settings.scaling(1), tick=curves.epoch_time / 10
    )
    with tempfile.TemporaryDirectory(prefix="tenantml-synetune-") as folder:
        tuner = st["Tuner"](
            trial_backend=backend,
            scheduler=scheduler,
            stop_criterion=st["StoppingCriterion"](max_wallclock_time=T),
            n_workers=workers,
            sleep_time=0,
            callbacks=[st["SimulatorCallback"](), LastReport()],
            tuner_name=folder,  # an absolute name: its files go to this folder, then away
            suffix_tuner_name=False,
            save_tuner=False,
            print_update_interval=float("inf"),
            results_update_interval=float("inf"),
            output_logger=Quiet(use_colors=False, use_emojis=False),
        )
        # Parts of Syne Tune draw from numpy's global generator (ASHA's bracket choice and
        # others): seed it for the run, so that a seed gives one result, and restore it after.
        global_state = np.random.get_state()
        np.random.seed(seed)
        try:
            # its closing summary is print()ed; pandas warns about the RandomState its KDE uses
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                tuner.run()
        finally:
            np.random.set_state(global_state)
    reached = [value for at, value in last.values() if at <= T]
    return (max(reached) if reached else curves.untrained), workers * T
