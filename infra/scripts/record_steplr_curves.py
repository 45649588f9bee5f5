"""Record real learning curves with learning-rate steps (for EarlyCurve and the spot simulator).

``python infra/scripts/record_steplr_curves.py [OUT.csv.gz]`` trains LeNet on scikit-learn's
digits (1,437 train / 360 validation, upsampled to 28x28 as LeNet expects) with SGD for 30
epochs under a step schedule, for the 16
configurations of SpotTune's Table II pattern: batch size {32, 64} x learning rate {0.1, 0.01} x
decay rate {1.0, 0.1} (no decay / x0.1) x decay epoch {10, 15}. Writes the long curve CSV
``group,curve_id,step,metric,seconds,hp_*`` with metric = validation cross-entropy after each
epoch (lower is better) and seconds = measured cumulative training time on this machine (CPU,
one thread), three seeds as three groups. The committed copy is
``tenantml/data/curves/steplr-digits.csv.gz``; ``steplr-digits-train.csv.gz`` holds the same runs'
mean training loss per epoch, and ``steplr-digits.scaling.json`` the seconds per epoch of one
configuration on 1 and 2 threads (for Amdahl's parallel fraction in ``tenantml spot simulate``).
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from trainers.nets import LeNet5

OUT = Path(__file__).resolve().parents[2] / "tenantml" / "data" / "curves" / "steplr-digits.csv.gz"
EPOCHS = 30


def record(out: Path, scaling_only: bool = False) -> None:
    torch.set_num_threads(1)
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    x = torch.nn.functional.interpolate(torch.from_numpy(x), size=28, mode="bilinear").numpy()
    xtr, xva, ytr, yva = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    xtr_t, ytr_t = torch.from_numpy(xtr), torch.from_numpy(ytr)
    xva_t, yva_t = torch.from_numpy(xva), torch.from_numpy(yva)
    rows: list[dict[str, object]] = []
    train_rows: list[dict[str, object]] = []
    grid = list(itertools.product([32, 64], [0.1, 0.01], [1.0, 0.1], [10, 15]))
    for seed in range(0 if scaling_only else 3):
        for cid, (bs, lr, dr, de) in enumerate(grid):
            torch.manual_seed(seed * 100 + cid)
            net = LeNet5(1, 10)
            opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=de, gamma=dr)
            spent = 0.0
            gen = torch.Generator().manual_seed(seed)
            for epoch in range(1, EPOCHS + 1):
                start = time.perf_counter()
                net.train()
                order = torch.randperm(len(xtr_t), generator=gen)
                total, batches = 0.0, 0
                for s in range(0, len(order), bs):
                    b = order[s : s + bs]
                    opt.zero_grad()
                    loss = torch.nn.functional.cross_entropy(net(xtr_t[b]), ytr_t[b])
                    loss.backward()
                    opt.step()
                    total += float(loss.detach())
                    batches += 1
                sched.step()
                spent += time.perf_counter() - start
                net.eval()
                with torch.no_grad():
                    val = float(torch.nn.functional.cross_entropy(net(xva_t), yva_t))
                rows.append(
                    {
                        "group": f"lenet-digits-seed{seed}",
                        "curve_id": cid,
                        "step": epoch,
                        "metric": val,
                        "seconds": spent,
                        "hp_batch_size": bs,
                        "hp_lr": lr,
                        "hp_decay_rate": dr,
                        "hp_decay_epochs": de,
                    }
                )
                train_rows.append({**rows[-1], "metric": total / batches})
            print(f"seed {seed} config {cid}: final val loss {val:.4f} in {spent:.1f} s")
    out.parent.mkdir(parents=True, exist_ok=True)
    for data, path in (
        []
        if scaling_only
        else ((rows, out), (train_rows, out.with_name("steplr-digits-train.csv.gz")))
    ):
        pd.DataFrame(data).to_csv(
            path, index=False, float_format="%.6g", compression={"method": "gzip", "mtime": 0}
        )
        print(f"wrote {path}: {len(data)} rows")
    timing = {}
    for threads in (1, 2):  # Amdahl's parallel fraction of one epoch (batch 64, lr 0.01)
        torch.set_num_threads(threads)
        net = LeNet5(1, 10)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for s in range(0, len(xtr_t), 64):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(
                    net(xtr_t[s : s + 64]), ytr_t[s : s + 64]
                ).backward()
                opt.step()
            best = min(best, time.perf_counter() - start)
        timing[str(threads)] = best
    (out.parent / "steplr-digits.scaling.json").write_text(
        json.dumps(
            {"seconds_per_epoch": timing, "what": "LeNet, digits, batch 64, min of 5"}, indent=2
        )
        + "\n"
    )
    print(timing)


if __name__ == "__main__":
    # --scaling-only: re-measure steplr-digits.scaling.json alone (on an otherwise idle machine)
    args = [a for a in sys.argv[1:] if a != "--scaling-only"]
    record(Path(args[0]) if args else OUT, scaling_only="--scaling-only" in sys.argv)
