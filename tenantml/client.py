"""The Python SDK: what a tenant (and an operator) does with tenantml.

from tenantml import Client
c = Client()                                    # TENANTML_HOME, embedded or `tenantml up`
c.submit("digits", "{input: {[Tensor[8, 8, 1]], []}, output: {[Tensor[10]], []}}")
c.feed("digits", images, labels)                # arrays; or c.feed_files(paths, labels)
c.run(ticks=5)                                  # the scheduler, for 5 ticks
c.infer("digits", images[:3])                   # with models:/digits@best
c.status("digits")                              # leaderboard: models tried, accuracy, cost
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.typing import NDArray

from store import ExampleRecord, ExampleStore
from store.schema import Schema
from tasks.leaderboard import Leaderboard, LeaderboardRow
from tasks.settings import ServerUnreachableError, Settings

if TYPE_CHECKING:
    from tasks import SchedulerEvent
    from tasks.prefect_start import EarlyStart

__all__ = ["Client", "Leaderboard", "LeaderboardRow", "NoModelYetError"]


_MODELS: dict[tuple[str, str, str, str], Any] = {}  # (tracking URI, user, tenant, version)
_MODEL_LOCKS: dict[tuple[str, str, str, str], threading.Lock] = {}
_MODELS_LOCK = threading.Lock()
_MODELS_MAX = 32  # loaded models kept per process, oldest dropped first


class NoModelYetError(LookupError):
    def __str__(self) -> str:
        return str(self.args[0])


def _check_http(url: str, what: str, how: str) -> None:
    import urllib.request  # servers mode only; it loads http.client and email (tens of ms)

    try:
        with urllib.request.urlopen(url, timeout=5):
            return
    except OSError as e:
        raise ServerUnreachableError(f"{what} at {url} is not reachable ({e}); {how}") from None


class Client:
    """One installation of tenantml (see `tasks.settings` for where it lives)."""

    def __init__(
        self,
        home: str | Path | None = None,
        *,
        check_servers: bool = True,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        settings = Settings.load(home)
        if user is not None:  # a tenant's identity (store.TenantScopedStore)
            settings = dataclasses.replace(settings, user=user, password=password)
        self.settings = settings.apply()
        self._prefect_start: EarlyStart | None = None
        if check_servers and self.settings.mode == "servers":
            self.check_servers()

    def _operator_only(self, what: str) -> None:
        if self.settings.user:
            from store import TenantAccessError

            raise TenantAccessError(
                f"{what} is the operator's; tenant {self.settings.user!r} may submit, feed, "
                "refine, list examples, infer and see the status of its own tenant only"
            )

    def check_servers(self) -> None:
        """Raise `ServerUnreachableError` naming the server and how to start it."""
        how = "start the servers with `tenantml up` (or remove TENANTML_HOME/servers.json)"
        s = self.settings
        if s.tracking_uri.startswith("http"):
            _check_http(s.tracking_uri.rstrip("/") + "/health", "the MLflow server", how)
        if s.prefect_api_url:
            _check_http(s.prefect_api_url.rstrip("/") + "/health", "the Prefect server", how)
        if s.s3_endpoint_url:
            _check_http(s.s3_endpoint_url, "the S3 endpoint", how)

    @cached_property
    def store(self) -> ExampleStore:
        self.settings.ensure_applied()  # boto3 reads the S3 credentials from the environment
        store = self.settings.store()
        if self.settings.user:
            from store import TenantScopedStore

            return cast(ExampleStore, TenantScopedStore(store, self.settings.user))
        return store

    def grant(self, name: str) -> str:
        """Operator: (re)create tenant `name`'s MLflow user with rights on its own experiment and
        registered model only; returns the new password (`tenantml up --auth`)."""
        from mlflow_plugin.permissions import grant_tenant
        from mlflow_plugin.tracking import experiment_name

        self._operator_only("granting credentials")
        self.store.schema(name)  # unknown tenant -> clear error
        users = dict(self.settings.server_env).get("MLFLOW_TRACKING_USERNAME") or os.environ.get(
            "MLFLOW_TRACKING_USERNAME"
        )
        if not users:
            # embedded, or servers without `--auth`: MLflow has no users (an MLflow traceback)
            how = "embedded" if self.settings.mode == "embedded" else "on servers without --auth"
            raise ValueError(
                "grant needs MLflow users: servers started with `tenantml up --auth` (this home "
                f"is {how})"
            )
        exp = self.mlflow.get_experiment_by_name(experiment_name(name))
        if exp is None:
            raise ValueError(f"tenant {name!r} has no MLflow experiment; submit it again")
        return grant_tenant(self.settings.tracking_uri, name, str(exp.experiment_id))

    @property
    def mlflow(self) -> Any:
        """This installation's `MlflowClient`; its credentials are read from the process's
        environment on each request, so this client's settings are applied again first where
        another `Client`'s were applied since (another home, or a tenant's identity)."""
        self.settings.ensure_applied()
        return self._mlflow

    @cached_property
    def _mlflow(self) -> Any:
        from mlflow.tracking import MlflowClient

        from tasks.tracking_template import keep_template

        client = MlflowClient(self.settings.tracking_uri)
        keep_template(self.settings.tracking_uri)  # a new home's database: for later new homes
        return client

    # -- tenants -------------------------------------------------------------------------------
    def submit(
        self,
        name: str,
        schema: Schema | str,
        *,
        weight: float | None = None,
        models: Sequence[str] | None = None,
    ) -> Leaderboard:
        """Declare a task; idempotent for the same schema, an error for a different one.
        `weight` (operator only; default 1): how much the tenant's regret counts when the
        scheduler shares the pool (`set_weight`). `models`: train only these candidates of the
        schema (e.g. its CNNs), ``["all"]`` to lift it; None keeps what was set (default: all).
        A model that is not a candidate is refused before anything is stored."""
        from mlflow_plugin.tracking import valid_weight
        from tasks import register_tenant

        if weight is not None:
            self._operator_only("a tenant's weight")
            valid_weight(weight)  # before anything is stored
        if isinstance(schema, str):
            schema = Schema.parse(schema)
        if not isinstance(schema, Schema):  # an AttributeError from deep inside, before
            raise TypeError(
                f"schema {schema!r} is not valid: give a Schema or its text, e.g. "
                "'{input: {[Tensor[4]], []}, output: {[Tensor[3]], []}}'"
            )
        if isinstance(models, str):  # "knn" was read as the models k, n, n
            raise TypeError(f"models {models!r}: give a list of names, e.g. [{models!r}]")
        register_tenant(
            self.mlflow, self.store, name, schema, self.settings.artifact_location, models
        )
        if weight is not None:
            self.set_weight(name, weight)  # publishes the leaderboard
        elif not self.settings.user:  # the weight it shows is the operator's to read
            self._publish(name)
        return self.status(name)

    def set_weight(self, name: str, weight: float) -> float:
        """Operator: tenant `name`'s weight w_i, the factor of its regret in the total the `rate`
        policy reduces (2: its loss counts twice; default 1). Applies from the scheduler's next
        refresh. Returns the weight set."""
        from mlflow_plugin.tracking import set_tenant_weight

        self._operator_only("a tenant's weight")
        self.store.schema(name)  # UnknownTenantError naming the known tenants
        # validates the weight before it writes anything
        w = set_tenant_weight(self.mlflow, name, weight, self.settings.artifact_location)
        self._publish(name)  # `status` shows the new weight at once
        return w

    def weight(self, name: str) -> float:
        """Operator: tenant `name`'s weight (1 unless `set_weight` changed it)."""
        from mlflow_plugin.tracking import DEFAULT_WEIGHT, tenant_weights

        self._operator_only("a tenant's weight")
        self.store.schema(name)  # UnknownTenantError naming the known tenants (was 1.0)
        return tenant_weights(self.mlflow).get(name, DEFAULT_WEIGHT)

    def tenants(self) -> list[str]:
        return self.store.tenants()

    def feed(
        self, name: str, inputs: Iterable[Any] | NDArray[Any], outputs: Iterable[Any] | NDArray[Any]
    ) -> tuple[int, range]:
        """Store labelled examples; returns (snapshot, ids). A bad example rejects the call."""
        m, ids = self.store.feed(name, inputs, outputs)
        return m.version, ids

    def feed_files(
        self, name: str, paths: Iterable[str | Path], labels: Iterable[Any]
    ) -> tuple[int, range]:
        from store.loaders import feed_files

        m, ids = feed_files(self.store, name, paths, labels)
        return m.version, ids

    def refine(self, name: str, *, enable: Iterable[int] = (), disable: Iterable[int] = ()) -> int:
        """Switch examples on/off by id; returns the new snapshot."""
        return self.store.refine(name, enable=enable, disable=disable).version

    def examples(self, name: str, snapshot: int | None = None) -> list[ExampleRecord]:
        return list(self.store.examples(name, snapshot))

    # -- models --------------------------------------------------------------------------------
    def _best_version(self, name: str) -> str | None:
        from mlflow_plugin.registry import best_model

        best = best_model(self.mlflow, name)
        return best.version if best else None

    def infer(self, name: str, inputs: Any, lengths: Sequence[int] | None = None) -> NDArray[Any]:
        """Predictions of the tenant's best model so far (``models:/<name>@best``). Sequences:
        a list of ``(T_i, *S)`` arrays, or padded ``(n, T_max, *S)`` with `lengths`."""
        from mlflow_plugin.pyfunc import pyfunc_input

        schema = self.store.schema(name)  # unknown tenant -> clear error
        # Encoded once, with the feed checks (a bad example is named), in the model's form.
        model_input = pyfunc_input(schema, inputs, lengths)
        version = self._best_version(name)
        if version is None:
            raise NoModelYetError(
                f"tenant {name!r} has no model yet: feed examples and run the scheduler "
                "(`tenantml run`), then try again"
            )
        model = self._load_model(name, version)
        return np.asarray(model.predict(model_input))

    def _load_model(self, name: str, version: str) -> Any:
        """The pyfunc of `name`'s model `version` (the one `best` was on when looked up), loaded
        once per process and identity: a version never changes, and loading one (download and
        unpickling of the net) takes about a second."""
        import mlflow

        key = (self.settings.tracking_uri, self.settings.user or "", name, version)
        self.settings.ensure_applied()  # MLflow loads `models:/` from the process's tracking URI
        with _MODELS_LOCK:
            lock = _MODEL_LOCKS.setdefault(key, threading.Lock())
        with lock:  # concurrent first calls load it once
            if key not in _MODELS:
                _MODELS[key] = mlflow.pyfunc.load_model(f"models:/{name}/{version}")
                while len(_MODELS) > _MODELS_MAX:
                    _MODELS.pop(next(iter(_MODELS)))
            return _MODELS[key]

    def infer_files(self, name: str, paths: Sequence[str | Path]) -> NDArray[Any]:
        from store.loaders import iter_file_inputs

        return self.infer(name, list(iter_file_inputs(self.store.schema(name), paths)))

    def status(self, name: str, *, fresh: bool = False) -> Leaderboard:
        """Leaderboard: every model tried (accuracy, cost, when) and which one is `best`.

        The jobs' rows come from the copy the service keeps in the store (`tasks.leaderboard`;
        `Leaderboard.as_of` says when it was taken), which needs no MLflow; with `fresh`, when
        no copy was published yet, or for a tenant's identity, from MLflow now (``as_of``
        None): MLflow checks a tenant's password, the store's copy would not."""
        from tasks import leaderboard
        from trainers import candidates

        schema = self.store.schema(name)  # unknown tenant -> clear error
        m = self.store.manifest(name)
        snap = None if fresh or self.settings.user else leaderboard.read(self.store, name)
        as_of = None if snap is None else snap.as_of
        if snap is None:  # a tenant may not read the weights (the operator's): not shown
            weight = 1.0 if self.settings.user else None
            snap = leaderboard.snapshot_from_mlflow(self.mlflow, name, weight=weight)
        return Leaderboard(
            name,
            str(schema),
            m.n_examples,
            m.n_enabled,
            m.version,
            snap.n_candidates or len(candidates(schema)),  # `submit --models`: those in play
            snap.rows,
            snap.best_version,
            None if self.settings.user else snap.weight,  # the operator's view only
            as_of,
        )

    def _publish(self, name: str) -> None:
        """Operator: publish `name`'s leaderboard after a change made here (submit, weight)."""
        from tasks import leaderboard

        leaderboard.publish(self.store, name, leaderboard.snapshot_from_mlflow(self.mlflow, name))

    # -- operating -----------------------------------------------------------------------------
    def seer(
        self, name: str, model: str, deadline_min: float, budget_gpu_min: float, **options: Any
    ) -> dict[str, Any]:
        """Tune `model` of tenant `name` with SEER under a deadline (minutes) and a budget
        (GPU-minutes), here; see `flows.seer.seer` for the options. The plan and the model are
        checked before anything runs (`policy.seer.PlanError` / ValueError name the problem);
        `mlflow_plugin.tracking.JobBusyError` when another process trains the same request."""
        from flows.seer import seer
        from tasks import SeerOptions
        from trainers import torch_candidates

        self._operator_only("running SEER jobs")
        self.settings.ensure_applied()  # the flow reads its settings from the process
        schema = self.store.schema(name)  # unknown tenant -> clear error
        valid = [c.name for c in torch_candidates(schema)]
        if model not in valid:
            raise ValueError(
                f"model {model!r} is not a torch candidate of tenant {name!r}; valid: "
                f"{', '.join(valid) or 'none (this schema has only scikit-learn models)'}"
            )
        # the options as the job will hold them (`tasks.SeerOptions` checks the tuner, the seed
        # and the global batch), and the plan as the job will make it: a trial gets no more
        # GPUs than the global batch (`SeerJob.widest`); a wider one failed only in its stage,
        # after the stage's other trials had trained
        given = {k: v for k, v in options.items() if k != "deadline_at"}
        given_apart = ("deadline_min", "budget_gpu_min")  # this method's own arguments
        names = [f.name for f in dataclasses.fields(SeerOptions) if f.name not in given_apart]
        if unknown := sorted(set(given) - set(names)):
            raise ValueError(
                f"SEER option {unknown[0]!r} is not valid: use {', '.join(names)} or deadline_at"
            )
        SeerOptions(deadline_min, budget_gpu_min, **given).job(name, model, 0, "check").plan()
        if self.store.manifest(name).n_enabled < 10:
            raise ValueError(f"tenant {name!r} has fewer than 10 enabled examples; feed more")
        with self.settings.in_use():  # its trials read the process's environment
            out: dict[str, Any] = seer(name, model, deadline_min, budget_gpu_min, **options)
        if "busy" in out:  # another process trains that job (a ValueError: one line)
            from mlflow_plugin.tracking import JobBusyError

            raise JobBusyError(out["busy"])
        return out

    def start_prefect(self) -> None:
        """Start what `run` will wait for first, the embedded service's Prefect server, in the
        background now (`tasks.prefect_start`): a caller that has other work before `run`
        (imports, a view) calls this first. Nothing on servers, or if started and still running
        (another home's `run` in this process stops it: `tasks.prefect_start`)."""
        if self.settings.mode != "embedded":
            return
        self.settings.ensure_applied()  # the server's home: the process's PREFECT_HOME
        if self._prefect_start is None or not self._prefect_start.alive:
            from tasks.prefect_start import start_early

            self._prefect_start = start_early()

    def run(
        self,
        ticks: int | None = None,
        *,
        on_progress: Callable[[SchedulerEvent], None] | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Run the scheduler flow here (see `flows.scheduler.scheduler` for the options).

        `on_progress` is called with each `tasks.JobDispatched`, `tasks.JobFinished`,
        `tasks.JobLeft` (a job left to another process that trains it) and `tasks.Stopping` as it
        happens. SIGINT or SIGTERM (Ctrl-C) stops the scheduler after
        the pass it interrupts: the summary's ``interrupted`` names the signal and
        ``in_flight`` counts the jobs left going, which the next `run` resumes. Started while a
        server is unreachable, it waits for it (`tasks.outage.wait_for_servers`); build the
        client with ``check_servers=False`` to get that far.

        Raises:
            tasks.SchedulerBusyError: another scheduler runs on this home (on this machine)."""
        self._operator_only("running the scheduler")
        self.settings.ensure_applied()  # the flow reads its settings from the process
        self.start_prefect()  # a no-op when `start_prefect` was called earlier
        from flows.scheduler import scheduler
        from tasks import listen
        from tasks.outage import wait_for_servers

        _check_scheduler_options(scheduler.fn, ticks, options)

        if self.settings.mode == "servers":
            # The scheduler is the service, not a user's short command: started while a server
            # is down it waits, with the lines and the patience a running scheduler has
            # (Prefect first of all: the flow run cannot start without it).
            wait_for_servers(self.settings, options.get("outage_patience_s"), say=print)
        if self._prefect_start is not None:
            # MLflow's store for this home (seconds: its SQL store's imports and set-up), built
            # while Prefect's server is still starting; the scheduler's `connect` finds it built
            _ = self.mlflow
            self._prefect_start.wait()
        start = time.monotonic()
        # another home's Client applied meanwhile would move this run's jobs to its home
        with self.settings.in_use(), listen(on_progress) if on_progress else nullcontext():
            out: dict[str, Any] = scheduler(ticks=ticks, **options)
        if "busy" in out:  # another scheduler runs on this home (a ValueError: one line)
            from tasks import SchedulerBusyError

            raise SchedulerBusyError(out["busy"])
        out.setdefault("wall_s", time.monotonic() - start)
        return out


def _check_scheduler_options(
    flow_fn: Callable[..., Any], ticks: Any, options: dict[str, Any]
) -> None:
    """The scheduler's options checked as the flow will check them (`tasks.SchedulerOptions`),
    before its Prefect server is waited for: a bad one took 28 s to be named, among Prefect's
    lines, and an unknown name came back as Prefect's whole signature."""
    import inspect

    from tasks import SchedulerOptions

    signature = inspect.signature(flow_fn)
    unknown = sorted(set(options) - set(signature.parameters))
    if unknown:
        raise ValueError(
            f"scheduler options {unknown} are not valid: use {', '.join(signature.parameters)}"
        )
    bound = signature.bind(ticks=ticks, **options)
    bound.apply_defaults()
    try:
        SchedulerOptions(**bound.arguments)  # raises ValueError naming each bad one
    except TypeError:  # a value of another type ("2"), which Prefect's validation coerces
        return  # (or names): the flow checks it as before
