"""Neural networks of the model zoo, each wrapped with the tenant's input preprocessing.

Shapes: an image-shaped schema input ``Tensor[A, B, C]`` arrives as ``x (N, A, B, C)`` (height,
width, channels, as fed: uint8 or float); a sequence input ``{[Tensor[A]], [next]}`` as
``x (N, T_max, A)`` zero-padded with ``lengths (N,)``. Class outputs are logits ``(N, D)``;
``Tensor[D, E, F]`` outputs (image recovery) are ``(N, D, E, F)``.

`TenantNet` = `Preprocess` + body (+ output scaling), so training and `infer` run the very same
preprocessing: it lives in the saved weights (buffers), not in caller code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torchvision.models as tvm
from torch import nn
from torch.nn import functional as F  # noqa: N812

__all__ = [
    "IMAGE_NETS",
    "SEQUENCE_NETS",
    "BNAlexNet",
    "ConvAutoencoder",
    "LeNet5",
    "NetworkInNetwork",
    "Preprocess",
    "SequenceClassifier",
    "TenantNet",
    "normalize_fk",
    "translate_images",
]


def normalize_fk(x: torch.Tensor, k: float) -> torch.Tensor:
    """ease.ml's automatic normalization (shared/papers/000, Sec. 2.1, Fig. 5).

    ``f_k(x) = -x^(2k) + x^k`` applied to each example after min-max scaling it to ``[0, 1]``;
    the result lies in ``[0, 1/4]`` and is multiplied by 4 so it spans ``[0, 1]`` like an image.
    Small ``k`` lifts values many orders of magnitude below the maximum (high dynamic range).
    `x` is ``(N, ...)``; the scaling is per example.
    """
    flat = x.flatten(1)
    lo = flat.min(dim=1, keepdim=True).values
    hi = flat.max(dim=1, keepdim=True).values
    u = ((flat - lo) / (hi - lo).clamp_min(1e-12)).clamp(0.0, 1.0)
    uk = u.pow(k)
    return (4.0 * (uk - uk * uk)).view_as(x)


def translate_images(x: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """``x`` ``(b, H, W, C)`` float moved by ``shifts`` ``(b, 2)``: right by ``shifts[:, 0]``
    of the width, down by ``shifts[:, 1]`` of the height; bilinear between pixels, 0 where the
    moved image has nothing (the fill of torchvision's ``RandomAffine``, and of the pad-and-crop
    of He et al. 2016 on CIFAR-10). Training-time augmentation (`Preprocess`); no flips, which
    change what a digit or a letter is."""
    b = x.shape[0]
    theta = torch.zeros(b, 2, 3, device=x.device, dtype=x.dtype)
    theta[:, 0, 0] = 1.0
    theta[:, 1, 1] = 1.0
    # affine_grid samples the input at (output position + offset) on a [-1, 1] frame, 2 wide:
    # to move the content right by s of the width, each output pixel samples 2 s to its left.
    theta[:, :, 2] = -2.0 * shifts.to(x.device, x.dtype)
    images = x.permute(0, 3, 1, 2)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    moved = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return moved.permute(0, 2, 3, 1)


class Preprocess(nn.Module):
    """Raw schema-shaped input -> the float tensor a body expects.

    Steps: to float, divided by 255 when the training data was uint8 (buffer `input_scale`, so
    images cast to float at inference get the same treatment); optional f_k normalization
    (`k`); in training, when the trainer gives ``shifts``, the random translation of each image
    (`translate_images`: after f_k, whose per-image scaling and non-monotonic curve would turn
    the blend of shifted pixels into other values, and before standardization, so what the
    image moves away from is filled with 0, the fed images' zero); per-channel standardization
    with training-set statistics (buffers `mean`, `std`, last axis of the input); for images,
    HWC -> CHW (channels-last memory on CUDA) and bilinear resize up to `min_size` when the
    input is smaller.
    """

    mean: torch.Tensor
    std: torch.Tensor
    input_scale: torch.Tensor

    def __init__(self, n_channels: int, *, k: float | None, image: bool, min_size: int) -> None:
        super().__init__()
        self.k = k
        self.image = image
        self.min_size = min_size
        self.register_buffer("mean", torch.zeros(n_channels))
        self.register_buffer("std", torch.ones(n_channels))
        self.register_buffer("input_scale", torch.ones(()))

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """Everything before standardization; used to fit `mean` and `std` too."""
        x = x.float() * self.input_scale
        if self.k is not None:
            x = normalize_fk(x, self.k)
        return x

    @torch.no_grad()
    def fit(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> None:
        """Set `input_scale`, `mean`, `std` from training inputs (padding excluded)."""
        self.input_scale.fill_(1.0 / 255.0 if x.dtype == torch.uint8 else 1.0)
        v = self.scale(x)
        if lengths is not None:
            mask = torch.arange(v.shape[1])[None, :] < lengths[:, None]
            v = v[mask]
        v = v.reshape(-1, v.shape[-1])
        self.mean.copy_(v.mean(0))
        self.std.copy_(v.std(0).clamp_min(1e-6))

    def forward(self, x: torch.Tensor, shifts: torch.Tensor | None = None) -> torch.Tensor:
        """``shifts`` ``(N, 2)``: translations of the images (training only; `translate_images`)."""
        x = self.scale(x)
        if shifts is not None and self.image:
            x = translate_images(x, shifts)
        x = (x - self.mean) / self.std
        if self.image:
            x = x.permute(0, 3, 1, 2)
            h, w = x.shape[-2:]
            if min(h, w) < self.min_size:
                size = (max(h, self.min_size), max(w, self.min_size))
                x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
            # Channels-last pays on CUDA (tensor cores); on CPU the plain layout is faster.
            fmt = torch.channels_last if x.is_cuda else torch.contiguous_format
            x = x.contiguous(memory_format=fmt)
        return x


class TenantNet(nn.Module):
    """`Preprocess` then the body; tensor outputs are standardized in training (`out_mean/std`)."""

    out_mean: torch.Tensor
    out_std: torch.Tensor

    def __init__(self, pre: Preprocess, body: nn.Module, *, sequence: bool = False) -> None:
        super().__init__()
        self.pre = pre
        self.body = body
        self.sequence = sequence
        self.register_buffer("out_mean", torch.zeros(()))
        self.register_buffer("out_std", torch.ones(()))

    def forward(
        self,
        x: torch.Tensor,
        lengths: torch.Tensor | None = None,
        shifts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``shifts``: training-time translations of image inputs (`Preprocess`)."""
        z = self.pre(x, shifts)
        out: torch.Tensor = self.body(z, lengths) if self.sequence else self.body(z)
        return out

    def decode(self, out: torch.Tensor) -> torch.Tensor:
        """Network output -> target units (identity for logits)."""
        return out * self.out_std + self.out_mean


class _ChannelAdapter(nn.Module):
    """A learnable 1x1 convolution from C channels to the 3 an ImageNet architecture expects."""

    def __init__(self, c_in: int, net: nn.Module) -> None:
        super().__init__()
        self.adapt = nn.Conv2d(c_in, 3, kernel_size=1) if c_in != 3 else nn.Identity()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(self.adapt(x))
        return out


class LeNet5(nn.Module):
    """LeCun et al. 1998, in the 28x28 form (first convolution padded by 2)."""

    def __init__(self, c_in: int, n_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(c_in, 6, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(5),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * 25, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.classifier(self.features(x))
        return out


class BNAlexNet(nn.Module):
    """AlexNet (Krizhevsky et al. 2012) with batch normalization after every convolution
    (Ioffe & Szegedy 2015), the BN-AlexNet of the ease.ml model set."""

    def __init__(self, c_in: int, n_classes: int) -> None:
        super().__init__()

        def conv(a: int, b: int, k: int, s: int = 1, p: int = 0) -> list[nn.Module]:
            return [nn.Conv2d(a, b, k, s, p, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(
            *conv(c_in, 64, 11, 4, 2),
            nn.MaxPool2d(3, 2),
            *conv(64, 192, 5, p=2),
            nn.MaxPool2d(3, 2),
            *conv(192, 384, 3, p=1),
            *conv(384, 256, 3, p=1),
            *conv(256, 256, 3, p=1),
            nn.MaxPool2d(3, 2),
            nn.AdaptiveAvgPool2d(6),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(256 * 36, 4096),
            nn.BatchNorm1d(4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, 4096),
            nn.BatchNorm1d(4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.classifier(self.features(x))
        return out


class NetworkInNetwork(nn.Module):
    """Lin, Chen & Yan 2013, the CIFAR-10 model: three mlpconv blocks and global average pooling.

    The convolutions start from He et al.'s initialization (ICCV 2015: normal, std
    ``sqrt(2 / fan_out)``, zero bias), as torchvision initializes its ResNets and VGGs. With
    PyTorch's default initialization the nine ReLU convolutions (no batch normalization) pass on
    too small a signal: on the 8x8 digits the net stayed at chance (0.10 validation accuracy)
    at every rate of the grid, and reaches >= 0.98 with this initialization.
    """

    def __init__(self, c_in: int, n_classes: int) -> None:
        super().__init__()

        def mlpconv(a: int, b: int, c: int, d: int, k: int) -> list[nn.Module]:
            return [
                nn.Conv2d(a, b, k, padding=k // 2),
                nn.ReLU(inplace=True),
                nn.Conv2d(b, c, 1),
                nn.ReLU(inplace=True),
                nn.Conv2d(c, d, 1),
                nn.ReLU(inplace=True),
            ]

        self.net = nn.Sequential(
            *mlpconv(c_in, 192, 160, 96, 5),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.Dropout(0.5),
            *mlpconv(96, 192, 192, 192, 5),
            nn.AvgPool2d(3, 2, ceil_mode=True),
            nn.Dropout(0.5),
            *mlpconv(192, 192, 192, n_classes, 3)[:-1],
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        for module in self.net:
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


class ConvAutoencoder(nn.Module):
    """Image "recovery" (Fig. 4, row 2): a convolutional encoder-decoder to ``(D, E, F)``."""

    def __init__(self, c_in: int, out_shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.out_shape = out_shape
        self.encoder = nn.Sequential(
            nn.Conv2d(c_in, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU()
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(64, 32, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(32, 32, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(32, out_shape[2], 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d, e, _f = self.out_shape
        z = self.decoder(self.encoder(x))
        z = F.interpolate(z, size=(d, e), mode="bilinear", align_corners=False)
        return z.permute(0, 2, 3, 1)  # back to the schema's (N, D, E, F)


class SequenceClassifier(nn.Module):
    """Time-series classification (Fig. 4, row 3): RNN, LSTM, bi-LSTM or GRU over ``(N, T, A)``;
    the last valid hidden state (both directions for bi-LSTM) feeds a linear layer."""

    CELLS: dict[str, Callable[..., nn.Module]] = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}

    def __init__(
        self,
        cell: str,
        n_features: int,
        n_classes: int,
        *,
        hidden: int = 64,
        bidirectional: bool = False,
    ) -> None:
        super().__init__()
        self.rnn = self.CELLS[cell](
            n_features, hidden, batch_first=True, bidirectional=bidirectional
        )
        self.bidirectional = bidirectional
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), n_classes)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        if lengths is None:
            lengths = torch.full((x.shape[0],), x.shape[1], dtype=torch.int64)
        packed = nn.utils.rnn.pack_padded_sequence(
            x, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        _, h = self.rnn(packed)
        if isinstance(h, tuple):  # LSTM: (h_n, c_n)
            h = h[0]
        last = torch.cat([h[-2], h[-1]], dim=1) if self.bidirectional else h[-1]
        out: torch.Tensor = self.head(last)
        return out


def _tv(builder: Callable[..., nn.Module], **kw: object) -> Callable[[int, int], nn.Module]:
    def make(c_in: int, n_classes: int) -> nn.Module:
        return _ChannelAdapter(c_in, builder(weights=None, num_classes=n_classes, **kw))

    return make


# name -> (builder(c_in, n_classes), smallest input side the architecture takes)
IMAGE_NETS: dict[str, tuple[Callable[[int, int], nn.Module], int]] = {
    "alexnet": (_tv(tvm.alexnet), 64),
    "bn_alexnet": (BNAlexNet, 64),
    "resnet18": (_tv(tvm.resnet18), 32),
    "resnet50": (_tv(tvm.resnet50), 32),
    "googlenet": (_tv(tvm.googlenet, aux_logits=False, init_weights=True), 32),
    "squeezenet": (_tv(tvm.squeezenet1_1), 32),
    "vgg16": (_tv(tvm.vgg16), 32),
    "nin": (NetworkInNetwork, 8),
    "lenet": (LeNet5, 28),
}

SEQUENCE_NETS: dict[str, dict[str, object]] = {
    "rnn": {"cell": "rnn"},
    "lstm": {"cell": "lstm"},
    "bilstm": {"cell": "lstm", "bidirectional": True},
    "gru": {"cell": "gru"},
}
