"""SpotTune (shared/papers/004): the spot market side, the tuner and its learning-curve predictor.

* `policy.spot` (this package): market features, Alg. 2 (GETBESTINST), Eq. 1-3 and the refund
  rule (re-exported from `policy.spot._market`).
* `policy.spot.spottune`: Alg. 1 replayed on price traces, with the single-instance peer.
* `policy.spot.earlycurve`: EarlyCurve, the final-accuracy predictor of Eq. 4-7.
"""

from policy.spot._market import (
    FEATURES,
    HISTORY,
    Market,
    best_instance,
    calibrate,
    expected_cost_per_hour,
    expected_step_cost,
    features,
    instance_cost,
    revoked_within,
    revpred_max_price,
    tributary_max_price,
)

__all__ = [
    "FEATURES",
    "HISTORY",
    "Market",
    "best_instance",
    "calibrate",
    "expected_cost_per_hour",
    "expected_step_cost",
    "features",
    "instance_cost",
    "revpred_max_price",
    "revoked_within",
    "tributary_max_price",
]
