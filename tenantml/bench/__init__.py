"""Benchmarks: commands that print and save numbers, never timed assertions in tests.

* replay of the scheduling policies on quality/cost tables (ease.ml App. A protocol):
  `runner`, `datasets`, `report`, `overhead`, `optuna_peer`, `tpe`;
* elastic tuning on tabulated learning curves (SEER): `seer`, `curves`;
* spot capacity (SpotTune): `spot_sim`, `spot_data`, `revpred`, `revoke`, `earlycurve`;
* the live service and its parts: `service`, `trainer`, `feed`.
"""
