"""Training throughput of our ResNet-18 step vs a plain PyTorch loop on the same batch.

Both sides train torchvision's ResNet-18 with SGD on one synthetic batch held on the device, at
equal batch size. *Plain* is the textbook loop (NCHW float32 input, fp32). *Ours* is
`trainers.torch_trainer.Stepper` on `build_net("resnet18", ...)`: the schema's HWC input goes
through the model's preprocessing (standardize, to CHW, channels-last) and, on CUDA, bf16
autocast. The two alternate in rounds and the medians are compared, so drift of a shared machine
hits both alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["TrainerBench", "measure_trainer"]


@dataclass(frozen=True)
class TrainerBench:
    device: str
    image_size: int
    batch_size: int
    steps: int
    rounds: int
    plain_images_per_s: float
    ours_images_per_s: float

    @property
    def ratio(self) -> float:
        """Ours / plain throughput (>= 0.9 is the target)."""
        return self.ours_images_per_s / self.plain_images_per_s

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}


def measure_trainer(
    *,
    device: str | None = None,
    image_size: int = 64,
    batch_size: int = 32,
    steps: int = 5,
    rounds: int = 3,
    warmup: int = 2,
    on_step: Callable[[], None] | None = None,
) -> TrainerBench:
    """Images/s of both loops (module docstring): ``warmup`` untimed steps of each, then
    ``rounds`` rounds of ``steps`` timed steps of each; the medians over rounds.

    ``on_step``: called after each round (both loops timed), so ``rounds`` times in all; the
    warmup is not counted."""
    import torch
    import torchvision
    from torch.nn import functional as F  # noqa: N812

    from store.schema import Schema, Tensor
    from trainers.torch_trainer import Stepper, build_net, pick_device

    dev = pick_device(device)
    gen = torch.Generator().manual_seed(0)
    x_hwc = torch.rand(batch_size, image_size, image_size, 3, generator=gen).to(dev)
    x_chw = x_hwc.permute(0, 3, 1, 2).contiguous()
    y = torch.randint(0, 10, (batch_size,), generator=gen).to(dev)

    torch.manual_seed(0)
    plain = torchvision.models.resnet18(num_classes=10).to(dev)
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.01, momentum=0.9)

    def plain_step() -> None:
        plain_opt.zero_grad()
        F.cross_entropy(plain(x_chw), y).backward()  # type: ignore[no-untyped-call]
        plain_opt.step()

    torch.manual_seed(0)
    net = build_net("resnet18", Schema(input=Tensor(image_size, image_size, 3), output=Tensor(10)))
    net = net.to(dev)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        net = net.to(memory_format=torch.channels_last)
    ours = Stepper(net, torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9), dev, True)
    plain.train()
    net.train()

    def timed(step: Any) -> float:
        if dev.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return steps * batch_size / (time.perf_counter() - start)

    for _ in range(warmup):
        plain_step()
        ours.step(x_hwc, y)
    plain_rates, our_rates = [], []
    for _ in range(rounds):
        plain_rates.append(timed(plain_step))
        our_rates.append(timed(lambda: ours.step(x_hwc, y)))
        if on_step is not None:
            on_step()
    return TrainerBench(
        str(dev),
        image_size,
        batch_size,
        steps,
        rounds,
        statistics.median(plain_rates),
        statistics.median(our_rates),
    )
