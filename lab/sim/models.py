"""Published models as the simulator sees them: layer shapes (forward order) and FLOPs per sample.

Shapes are generated from the architectures' papers, not downloaded: ResNet-50/101 (He et al.,
CVPR 2016, Table 1: bottleneck blocks [3,4,6,3] / [3,4,23,3], 25.6 M / 44.5 M parameters,
4.1 / 7.8 GFLOPs forward at 224x224; FLOPs here count a multiply-add as two, so 8.2 / 15.6),
VGG-19 (Simonyan and Zisserman, ICLR 2015, config E: 143.7 M parameters, 19.6 G multiply-adds),
BERT-base (Devlin et al., NAACL 2019: 12 layers, hidden 768, 110 M parameters; FLOPs 6 x params
per token for forward + backward, Kaplan et al. 2020, at 128 tokens). A step's forward +
backward compute is 3 x forward FLOPs x batch / device rate (backward costs twice the forward).
"""
from __future__ import annotations


def _bn(c):
    return [(c,), (c,)]


def resnet(blocks=(3, 4, 6, 3), classes=1000):
    s = [(64, 3, 7, 7)] + _bn(64)
    cin = 64
    for i, n in enumerate(blocks):
        width = 64 * 2 ** i
        for b in range(n):
            s += [(width, cin, 1, 1)] + _bn(width) + [(width, width, 3, 3)] + _bn(width)
            s += [(4 * width, width, 1, 1)] + _bn(4 * width)
            if b == 0:
                s += [(4 * width, cin, 1, 1)] + _bn(4 * width)
            cin = 4 * width
    return s + [(classes, cin), (classes,)]


def vgg19(classes=1000):
    cfg = [64, 64, 128, 128, 256, 256, 256, 256] + [512] * 8
    s, cin = [], 3
    for c in cfg:
        s += [(c, cin, 3, 3), (c,)]
        cin = c
    return s + [(4096, 512 * 7 * 7), (4096,), (4096, 4096), (4096,), (classes, 4096), (classes,)]


def bert_base(layers=12, h=768, vocab=30522):
    s = [(vocab, h), (512, h), (2, h), (h,), (h,)]
    for _ in range(layers):
        s += [(3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,), (4 * h, h), (4 * h,), (h, 4 * h),
              (h,), (h,), (h,)]
    return s + [(h, h), (h,)]


#: name -> (layer shapes, forward FLOPs per sample, where the numbers come from)
MODELS = {
    "resnet50": (resnet(), 8.2e9, "He et al. 2016, Table 1"),
    "resnet101": (resnet((3, 4, 23, 3)), 15.6e9, "He et al. 2016, Table 1"),
    "vgg19": (vgg19(), 39.2e9, "Simonyan and Zisserman 2015, config E"),
    "bert-base": (bert_base(), 2 * 110e6 * 128, "Devlin et al. 2019; 2 x params per token, 128 tokens"),
}


def model(name: str):
    if name not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {name!r}")
    return MODELS[name]


def compute_seconds(name: str, batch: int, device_flops: float) -> float:
    """Forward + backward seconds per rank and step: 3 x forward FLOPs x batch / rate."""
    if not device_flops > 0:
        raise ValueError(f"device_flops must be > 0, got {device_flops!r}")
    return 3 * model(name)[1] * batch / device_flops


def scenario(name: str, technique: str, workers: int, link: str, device_flops: float,
             batch: int = 32, per_node: int = 1, codec_s_per_value: float = 0.0) -> dict:
    """One prediction for a published model on a cluster, with speedups over fp32 and bf16
    allreduce and the error band of the technique's family (the stored validation)."""
    from ..comm import Network
    from .network import Cluster
    from .step import Config, family, predict
    from .band import band
    if workers % per_node:
        raise ValueError(f"workers ({workers}) must be a multiple of per_node ({per_node})")
    net = Network.parse(link)
    c = Cluster(workers // per_node, net.bandwidth, net.latency, per_node,
                600e9 if per_node > 1 else float("inf"))
    comp = compute_seconds(name, batch, device_flops)
    shapes = tuple(model(name)[0])
    mk = lambda t: predict(Config(shapes, t, c, comp, codec_s_per_value if t == technique else 0.0))  # noqa: E731
    me, fp32, bf16 = mk(technique), mk("fp32"), mk("bf16")
    b, why = band(family(technique))
    return {**me.as_dict(), "speedup_fp32": fp32.step_s / me.step_s,
            "speedup_bf16": bf16.step_s / me.step_s, "band": b, "band_from": why}
