"""SYN generator (Sec. 5.1 / App. B) and accuracy-loss accounting (App. A Eq. 2-3)."""

import numpy as np

from policy import Observation, loss_curves, syn


def test_syn_is_seeded_and_shaped() -> None:
    q1, c1 = syn(0.5, 0.1, np.random.default_rng(4))
    q2, c2 = syn(0.5, 0.1, np.random.default_rng(4))
    assert q1.shape == (200, 100) and c1.shape == (200, 100)
    np.testing.assert_array_equal(q1, q2)
    np.testing.assert_array_equal(c1, c2)
    assert q1.min() >= 0 and q1.max() <= 1 and c1.min() > 0 and c1.max() <= 1


def test_syn_correlation_grows_with_sigma_m() -> None:
    """Larger sigma_M = smoother Sigma_M = more correlated models (Fig. 12's premise)."""

    def mean_abs_corr(sigma_m: float) -> float:
        q, _ = syn(
            sigma_m,
            1.0,
            np.random.default_rng(0),
            n_users=400,
            n_models=20,
            baselines=(0.5,),
            sigma_b=0.0,
        )
        corr = np.corrcoef(q.T)
        return float(np.abs(corr[np.triu_indices(20, 1)]).mean())

    assert mean_abs_corr(0.5) > mean_abs_corr(0.01) + 0.2


def test_two_baseline_groups() -> None:
    q, _ = syn(0.5, 0.1, np.random.default_rng(1))
    assert abs(q[0::2].mean() - 0.75) < 0.05 and abs(q[1::2].mean() - 0.25) < 0.05


def test_loss_curves_eq2_eq3() -> None:
    best = np.array([0.9, 0.8])
    trace = [
        Observation(0, 0, 0.7, 1, 1.0),
        Observation(1, 0, 0.8, 1, 2.0),
        Observation(0, 1, 0.6, 1, 3.0),
        Observation(0, 2, 0.9, 1, 4.0),
    ]
    lc = loss_curves(trace, best, np.array([0.0, 1.0, 2.5, 3.5, 4.0]))
    np.testing.assert_allclose(lc.avg_loss, [0.85, 0.5, 0.1, 0.1, 0.0])
    np.testing.assert_allclose(lc.worst_loss, [0.9, 0.8, 0.2, 0.2, 0.0])
    np.testing.assert_allclose(lc.rel_accuracy[-1], 1.0)
    weighted = loss_curves(trace, best, np.array([2.5]), weights=np.array([3.0, 1.0]))
    np.testing.assert_allclose(weighted.avg_loss, [0.15])
