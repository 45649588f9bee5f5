"""RevPred (shared/papers/004, Sec. III-B) and its two peers, trained per market on real prices.

Samples: every ``stride`` minutes of a window, the 59 previous minutes' six features
(:func:`policy.spot.features`) and the present record (the six features and a maximum price);
label = the price exceeds the maximum price within the next hour.

- **RevPred**: a 3-layer LSTM over the history and 3 fully connected layers over the present
  record, concatenated into a probability; maximum prices from Alg. 2 when training, random
  (``price + U(1e-5, 0.2)``) at inference; class-weighted loss (positives weighted phi_-,
  negatives phi_+) and the odds calibration of Eq. 3.
- **Tributary-style**: one LSTM over all 60 records, each carrying the maximum price, trained on
  random maximum prices (the Tributary recipe SpotTune compares with).
- **Logistic regression**: the present record and the history's mean features.

Evaluation (Sec. IV-D): train on one time window, test on the following one, with random
maximum prices at test time for every predictor; accuracy and F1 of ``P >= 0.5``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from policy.spot import (
    HISTORY,
    Market,
    calibrate,
    features,
    revoked_within,
    revpred_max_price,
    tributary_max_price,
)

__all__ = [
    "MarketPredictors",
    "Samples",
    "evaluate_market",
    "probabilities",
    "revocation_function",
    "run_revpred",
    "samples",
    "train_market",
]


@dataclass
class Samples:
    """``hist`` (n, 59, 6), ``now`` (n, 7) = six features + maximum price, ``y`` (n,)."""

    hist: NDArray[np.float32]
    now: NDArray[np.float32]
    y: NDArray[np.float32]


def _feature_table(m: Market, lo: int, hi: int) -> NDArray[np.float64]:
    return np.stack([features(m, t) for t in range(lo, hi)])


def samples(
    m: Market, start: int, end: int, *, stride: int, max_price: str, rng: np.random.Generator
) -> Samples:
    """Samples at minutes ``start, start + stride, ...`` before ``end``; ``max_price``:
    ``alg2`` (training, Alg. 2) or ``random`` (``price + U(1e-5, 0.2)``)."""
    lo = max(HISTORY, start)
    hi = min(end, len(m.prices) - 61)
    table = _feature_table(m, lo - HISTORY, hi)
    ts = np.arange(lo, hi, stride)
    hist, now, y = [], [], []
    for t in ts:
        b = (
            revpred_max_price(m, int(t))
            if max_price == "alg2"
            else tributary_max_price(m, int(t), rng)
        )
        k = int(t) - (lo - HISTORY)
        hist.append(table[k - HISTORY : k])
        now.append(np.append(table[k], b))
        y.append(revoked_within(m, int(t), b))
    return Samples(
        np.asarray(hist, np.float32), np.asarray(now, np.float32), np.asarray(y, np.float32)
    )


@dataclass
class MarketPredictors:
    """The three trained predictors of one market and the training class shares."""

    revpred: object
    tributary: object
    logistic: object
    phi_pos: float
    scale: tuple[NDArray[np.float32], NDArray[np.float32]]


def _scale(s: Samples, mean: NDArray[np.float32], std: NDArray[np.float32]) -> Samples:
    return Samples((s.hist - mean[:6]) / std[:6], (s.now - mean) / std, s.y)


def _nets(hidden: int = 32) -> tuple[object, object]:
    import torch
    from torch import nn

    class RevPredNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(6, hidden, num_layers=3, batch_first=True)
            self.present = nn.Sequential(
                nn.Linear(7, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
            )
            self.head = nn.Linear(2 * hidden, 1)

        def forward(self, hist: torch.Tensor, now: torch.Tensor) -> torch.Tensor:
            _, (h, _) = self.lstm(hist)
            out: torch.Tensor = self.head(torch.cat([h[-1], self.present(now)], 1)).squeeze(1)
            return out

    class TributaryNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(7, hidden, num_layers=3, batch_first=True)
            self.head = nn.Linear(hidden, 1)

        def forward(self, hist: torch.Tensor, now: torch.Tensor) -> torch.Tensor:
            b = now[:, -1:].unsqueeze(1).expand(-1, hist.shape[1], 1)
            seq = torch.cat([torch.cat([hist, b], 2), now.unsqueeze(1)], 1)
            _, (h, _) = self.lstm(seq)
            out: torch.Tensor = self.head(h[-1]).squeeze(1)
            return out

    return RevPredNet(), TributaryNet()


def _fit(net: object, s: Samples, phi_pos: float, epochs: int, seed: int) -> object:
    import torch

    torch.manual_seed(seed)
    assert isinstance(net, torch.nn.Module)
    hist, now, y = torch.from_numpy(s.hist), torch.from_numpy(s.now), torch.from_numpy(s.y)
    # class weights: phi_- for positives, phi_+ for negatives (Sec. III-B)
    w = torch.where(y > 0.5, 1.0 - phi_pos, phi_pos)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen)
        for i in range(0, len(y), 128):
            b = order[i : i + 128]
            opt.zero_grad()
            logit = net(hist[b], now[b])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y[b], weight=w[b])
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
    return net.eval()


def _predict(net: object, s: Samples) -> NDArray[np.float64]:
    import torch

    with torch.no_grad():
        logit = net(torch.from_numpy(s.hist), torch.from_numpy(s.now))  # type: ignore[operator]
    return torch.sigmoid(logit).double().numpy()


def train_market(
    m: Market, start: int, end: int, *, stride: int = 5, epochs: int = 8, seed: int = 0
) -> MarketPredictors:
    """Train the three predictors of market ``m`` on minutes ``[start, end)``."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(seed)
    alg2 = samples(m, start, end, stride=stride, max_price="alg2", rng=rng)
    rand = samples(m, start, end, stride=stride, max_price="random", rng=rng)
    mean = alg2.now.mean(0)
    std = alg2.now.std(0) + 1e-6
    a, r = _scale(alg2, mean, std), _scale(rand, mean, std)
    phi = float(np.clip(a.y.mean(), 1e-3, 1 - 1e-3))
    revnet, tribnet = _nets()
    revnet = _fit(revnet, a, phi, epochs, seed)
    tribnet = _fit(tribnet, r, 0.5, epochs, seed)  # Tributary: no class weighting
    x = np.hstack([r.now, r.hist.mean(1)])
    logistic = LogisticRegression(max_iter=1000, class_weight="balanced")
    if len(np.unique(r.y)) > 1:
        logistic.fit(x, r.y)
    else:
        logistic = None
    return MarketPredictors(revnet, tribnet, logistic, phi, (mean, std))


def probabilities(p: MarketPredictors, s: Samples) -> dict[str, NDArray[np.float64]]:
    """P(revocation within the hour) of each predictor for raw (unscaled) samples."""
    x = _scale(s, *p.scale)
    raw = _predict(p.revpred, x)
    out = {
        "revpred": calibrate(raw, p.phi_pos, 1 - p.phi_pos),
        "tributary": _predict(p.tributary, x),
    }
    if p.logistic is not None:
        out["logistic"] = p.logistic.predict_proba(np.hstack([x.now, x.hist.mean(1)]))[:, 1]  # type: ignore[attr-defined]
    else:
        out["logistic"] = np.zeros(len(s.y))
    return out


def _scores(y: NDArray[np.float32], p: NDArray[np.float64]) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score

    pred = p >= 0.5
    return {
        "accuracy": float(accuracy_score(y > 0.5, pred)),
        "f1": float(f1_score(y > 0.5, pred, zero_division=0.0)),
    }


def evaluate_market(
    p: MarketPredictors, m: Market, start: int, end: int, *, stride: int = 5, seed: int = 1
) -> dict[str, object]:
    """Accuracy and F1 of each predictor on ``[start, end)`` with random maximum prices."""
    s = samples(m, start, end, stride=stride, max_price="random", rng=np.random.default_rng(seed))
    probs = probabilities(p, s)
    return {
        "market": m.name,
        "test_samples": int(len(s.y)),
        "test_positive_share": float(s.y.mean()),
        **{name: _scores(s.y, pr) for name, pr in probs.items()},
    }


def pooled_scores(
    per_market: Sequence[tuple[NDArray[np.float32], dict[str, NDArray[np.float64]]]],
) -> dict[str, dict[str, float]]:
    """Scores over the samples of all markets together."""
    y = np.concatenate([a for a, _ in per_market])
    return {
        name: _scores(y, np.concatenate([b[name] for _, b in per_market]))
        for name in per_market[0][1]
    }


def run_revpred(
    markets: Sequence[Market],
    *,
    train_days: float = 9,
    test_days: float = 3,
    offset_days: float = 0,
    stride: int = 10,
    epochs: int = 6,
    seed: int = 0,
    on_step: Callable[[], None] | None = None,
) -> tuple[dict[str, object], dict[str, MarketPredictors]]:
    """Sec. IV-D: per market, train on ``train_days`` then test on the next ``test_days``
    (from ``offset_days`` into the traces). Returns the report and the trained predictors.

    ``on_step``: called as each market is trained and tested: ``len(markets)`` times in all."""
    a = int(offset_days * 1440) + HISTORY
    b = a + int(train_days * 1440)
    c = b + int(test_days * 1440)
    trained: dict[str, MarketPredictors] = {}
    rows, pooled = [], []
    for m in markets:
        p = train_market(m, a, b, stride=stride, epochs=epochs, seed=seed)
        trained[m.name] = p
        s = samples(m, b, c, stride=stride, max_price="random", rng=np.random.default_rng(seed + 1))
        probs = probabilities(p, s)
        pooled.append((s.y, probs))
        rows.append(
            {
                "market": m.name,
                "test_samples": int(len(s.y)),
                "test_positive_share": float(s.y.mean()),
                **{k: _scores(s.y, v) for k, v in probs.items()},
            }
        )
        if on_step is not None:
            on_step()
    report: dict[str, object] = {
        "train_minutes": [a, b],
        "test_minutes": [b, c],
        "pooled": pooled_scores(pooled),
        "mean_over_markets": {
            k: {s: float(np.mean([r[k][s] for r in rows])) for s in ("accuracy", "f1")}  # type: ignore[index]
            for k in ("revpred", "tributary", "logistic")
        },
        "markets": rows,
    }
    return report, trained


def revocation_function(trained: dict[str, MarketPredictors], which: str = "revpred") -> object:
    """``(market, t, max_price) -> P(revocation within the hour)`` for the simulator."""

    def p(m: Market, t: int, max_price: float) -> float:
        tt = max(HISTORY, t)
        table = _feature_table(m, tt - HISTORY, tt + 1)
        s = Samples(
            table[None, :HISTORY].astype(np.float32),
            np.append(table[HISTORY], max_price)[None].astype(np.float32),
            np.zeros(1, np.float32),
        )
        return float(probabilities(trained[m.name], s)[which][0])

    return p
