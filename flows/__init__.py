"""Prefect flows that only compose `tasks` (ARCHITECTURE principle 10).

* `flows.scheduler.scheduler`: the long-running service loop (one tick: decide, dispatch, record);
* `flows.train.train`: one training job on one GPU slot (the ``train`` deployment, pool ``gpu``);
* `flows.seer.seer`: one elastic tuning job under a deadline and a GPU-minute budget (SEER).
"""
