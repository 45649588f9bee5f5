"""The loss picture: every tenant's loss estimate and their total over the scheduler's ticks.

The scheduler logs it as ``loss.png`` to its MLflow run (`tasks._loop.log_tick`), and
``tenantml status --plot FILE.png`` draws the same picture from the metrics MLflow keeps. Both
read the per-tick metrics of `tasks._service.tick_metrics`, logged at step ``t`` (the tick)
when tick t is decided and again, at the same step, whenever its jobs' results change them and
when the scheduler ends by itself (`tasks._loop._log_estimates`): a step's last value is the
belief just before the next tick, which is the one kept:

* ``loss_estimate.<tenant>``: the tenant's estimated accuracy loss (`policy.loss_estimates`:
  the posterior expected gain of training all its untried models over its best; 0 once all
  were tried);
* ``regret_estimate``: the total, the sum over tenants.

A `TickHistory` maps each metric to its ``(tick, value)`` points, ticks ascending. Tick numbers
carry on across scheduler runs (restarts), so the history of an installation is the union of its
scheduler runs' histories; where a tick was logged more than once (by one run or two), the
latest value is kept.

Drawn with matplotlib's object-oriented API on the Agg canvas: no pyplot, no global backend,
safe in threads; about 0.1 s for a few hundred ticks.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence

from mlflow.tracking import MlflowClient

from mlflow_plugin.tracking import SCHEDULER_EXPERIMENT

__all__ = [
    "LOSS_PREFIX",
    "TOTAL",
    "TickHistory",
    "add_tick",
    "load_tick_history",
    "loss_picture",
]

LOSS_PREFIX, TOTAL = "loss_estimate.", "regret_estimate"

TickHistory = dict[str, list[tuple[int, float]]]


def _plotted(key: str) -> bool:
    return key == TOTAL or key.startswith(LOSS_PREFIX)


def add_tick(history: TickHistory, tick: int, metrics: Mapping[str, float]) -> None:
    """Put tick `tick`'s loss metrics (the others in `metrics` are ignored) into `history`,
    replacing what it held for that tick."""
    for key, value in metrics.items():
        if not _plotted(key):
            continue
        points = [p for p in history.get(key, []) if p[0] != tick]
        points.append((int(tick), float(value)))
        history[key] = sorted(points)


def load_tick_history(client: MlflowClient, max_runs: int = 50) -> TickHistory:
    """The loss metrics of the last `max_runs` scheduler runs (experiment ``tenantml/scheduler``)
    as one history, oldest run first so that a later run's value wins on a shared tick. Empty if
    no scheduler has logged a tick yet."""
    exp = client.get_experiment_by_name(SCHEDULER_EXPERIMENT)
    if exp is None:
        return {}
    runs = client.search_runs(
        [exp.experiment_id], max_results=max_runs, order_by=["attributes.start_time DESC"]
    )
    history: TickHistory = {}
    for run in reversed(list(runs)):
        for key in sorted(filter(_plotted, run.data.metrics)):
            for m in client.get_metric_history(run.info.run_id, key):
                add_tick(history, m.step, {key: m.value})
    return history


def _series(history: TickHistory) -> Iterable[tuple[str, Sequence[tuple[int, float]]]]:
    """(label, points): the tenants by name, then the total."""
    for key in sorted(k for k in history if k.startswith(LOSS_PREFIX)):
        yield key[len(LOSS_PREFIX) :], history[key]
    if TOTAL in history:
        yield "total", history[TOTAL]


def loss_picture(history: TickHistory, title: str = "tenantml: loss estimates per tick") -> bytes:
    """The picture of `history` as PNG bytes: one line per tenant and the total (black, thick),
    loss estimate over tick, on a symmetric log scale (linear below 0.001, so 0 shows). An empty
    history gives a picture that says no tick was logged."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    series = list(_series(history))
    for label, points in series:
        ticks = [t for t, _ in points]
        values = [v for _, v in points]
        total = label == "total"
        ax.plot(
            ticks,
            values,
            label=label,
            marker="o" if len(points) < 30 else None,
            markersize=3,
            color="black" if total else None,
            linewidth=2.5 if total else 1.2,
        )
    if series:
        ax.legend(loc="upper right", fontsize="small", ncols=1 + len(series) // 12)
    else:
        ax.text(0.5, 0.5, "no tick logged yet", ha="center", va="center", transform=ax.transAxes)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("tick")
    # symmetric log: the first ticks' losses (~0.5) and the late ones (~0.001) both show; 0 too
    ax.set_yscale("symlog", linthresh=1e-3, linscale=0.5)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("estimated accuracy loss (log scale)")
    ax.grid(alpha=0.3)
    ax.set_title(title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
