"""The ``tenantml`` command line, one module per area.

* `tenantml.cli.app`: the Typer app, the replay benchmarks (``bench``, ``bench-overhead``,
  ``bench-demo``) and the registration of the other areas' commands;
* `tenantml.cli.service`: the live service (``submit``, ``feed``, ``infer``, ``status``,
  ``run``, ``demo``, ``up``/``down``, ...);
* `tenantml.cli.seer`, `tenantml.cli.spot`, `tenantml.cli.chaos`: elastic tuning, spot
  capacity, and fault injection.
"""

from tenantml.cli.app import app, main

__all__ = ["app", "main"]
