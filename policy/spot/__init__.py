"""SpotTune (shared/papers/004): the spot market side, the tuner and its learning-curve predictor.

* `policy.spot` (this package): market features, Alg. 2 (GETBESTINST), Eq. 1-3 and the refund
  rule (re-exported from `policy.spot._market`).
* `policy.spot.spottune`: Alg. 1 replayed on price traces, with the single-instance peer.
* `policy.spot.earlycurve`: EarlyCurve, the final-accuracy predictor of Eq. 4-7.
"""

from policy.spot import _market
from policy.spot._market import *  # noqa: F403  (the public names are _market's __all__)

__all__ = list(_market.__all__)
