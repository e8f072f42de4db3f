"""A ResNet-18 and a small U-Net written in torch (no torchvision), in eval mode, with the
spatial plan of bench/plan_quality.py (batch on dp, H on mp)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spmdrules import plan

#: the input ``x`` [N, C, H, W]: the batch on dp, H on mp
SPATIAL_PLAN: dict[str, Any] = {"x": plan.Spec(("dp", None, "mp", None))}


def resnet18(classes: int = 10) -> Any:
    """ResNet-18 (He et al. 2016: a 7x7/2 stem, a 3x3/2 max pool, four stages of two basic
    blocks, 64 to 512 channels, global average pool, a linear head)."""
    import torch
    from torch import nn

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.down(x))

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
            self.stages = nn.Sequential(*(nn.Sequential(Basic(i, o, s), Basic(o, o, 1))
                                          for i, o, s in widths))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, classes)

        def forward(self, x: Any) -> Any:
            return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))

    torch.manual_seed(0)
    return ResNet18().eval()


def unet(base: int = 16, up: str = "transpose") -> Any:
    """A small U-Net (Ronneberger et al. 2015): three levels of two 3x3 conv + BatchNorm + ReLU,
    2x2 max pools down, skip concatenations, a 1x1 head. Up: 2x2 stride-2 transposed convs
    (``up="transpose"``), or ``nn.Upsample(scale_factor=2)`` in ``up`` mode ("nearest",
    "bilinear") followed by a 1x1 conv that halves the channels."""
    import torch
    from torch import nn

    def double(cin: int, cout: int) -> Any:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU(), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU())

    def upconv(cin: int, cout: int) -> Any:
        if up == "transpose":
            return nn.ConvTranspose2d(cin, cout, 2, 2)
        return nn.Sequential(nn.Upsample(scale_factor=2, mode=up), nn.Conv2d(cin, cout, 1))

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c = [base, 2 * base, 4 * base]
            self.down0, self.down1, self.mid = double(3, c[0]), double(c[0], c[1]), double(c[1], c[2])
            self.pool = nn.MaxPool2d(2)
            self.up1, self.up0 = upconv(c[2], c[1]), upconv(c[1], c[0])
            self.dec1 = double(2 * c[1], c[1])
            self.dec0 = double(2 * c[0], c[0])
            self.head = nn.Conv2d(c[0], 2, 1)

        def forward(self, x: Any) -> Any:
            s0 = self.down0(x)
            s1 = self.down1(self.pool(s0))
            m = self.mid(self.pool(s1))
            d1 = self.dec1(torch.cat([self.up1(m), s1], 1))
            return self.head(self.dec0(torch.cat([self.up0(d1), s0], 1)))

    torch.manual_seed(0)
    return UNet().eval()


#: kind -> (display name, builder, input H = W)
CNNS: dict[str, tuple[str, Callable[[], Any], int]] = {
    "resnet18": ("ResNet-18", resnet18, 32),
    "unet": ("U-Net", unet, 32),
    "unet_nearest": ("U-Net, nearest upsampling", lambda: unet(up="nearest"), 32),
    "unet_bilinear": ("U-Net, bilinear upsampling", lambda: unet(up="bilinear"), 32),
}
