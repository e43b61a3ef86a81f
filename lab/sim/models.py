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
    return [((c,), 0.0), ((c,), 0.0)]


def _conv(cout, cin, k, hw):
    """A conv layer's shape and forward FLOPs per sample at output size ``hw`` x ``hw``."""
    return ((cout, cin, k, k), 2.0 * cout * cin * k * k * hw * hw)


def _fc(out, inp):
    return [((out, inp), 2.0 * out * inp), ((out,), 0.0)]


def resnet_layers(blocks=(3, 4, 6, 3), classes=1000):
    """ResNet's (shape, forward FLOPs per sample) in forward order: conv1 at 112 x 112, stage
    ``i``'s convolutions at ``56 / 2**i`` (He et al. 2016, Table 1)."""
    s = [_conv(64, 3, 7, 112)] + _bn(64)
    cin = 64
    for i, n in enumerate(blocks):
        width, hw = 64 * 2 ** i, 56 // 2 ** i
        for b in range(n):
            s += [_conv(width, cin, 1, hw)] + _bn(width) + [_conv(width, width, 3, hw)] + _bn(width)
            s += [_conv(4 * width, width, 1, hw)] + _bn(4 * width)
            if b == 0:
                s += [_conv(4 * width, cin, 1, hw)] + _bn(4 * width)
            cin = 4 * width
    return s + _fc(classes, cin)


def vgg19_layers(classes=1000):
    """VGG-19 (config E): 3 x 3 convolutions at 224, 112, 56, 28, 14, then three FC layers."""
    cfg = [(64, 224)] * 2 + [(128, 112)] * 2 + [(256, 56)] * 4 + [(512, 28)] * 4 + [(512, 14)] * 4
    s, cin = [], 3
    for c, hw in cfg:
        s += [_conv(c, cin, 3, hw), ((c,), 0.0)]
        cin = c
    return s + _fc(4096, 512 * 7 * 7) + _fc(4096, 4096) + _fc(classes, 4096)


def bert_base_layers(layers=12, h=768, vocab=30522, tokens=128):
    """BERT-base: embeddings (a lookup, no FLOPs), then per layer the attention's and the
    feed-forward's matrices at 2 FLOPs per value per token."""
    s = [((vocab, h), 0.0), ((512, h), 0.0), ((2, h), 0.0), ((h,), 0.0), ((h,), 0.0)]
    for _ in range(layers):
        s += [((3 * h, h), 2.0 * 3 * h * h * tokens), ((3 * h,), 0.0), ((h, h), 2.0 * h * h * tokens),
              ((h,), 0.0), ((h,), 0.0), ((h,), 0.0), ((4 * h, h), 2.0 * 4 * h * h * tokens),
              ((4 * h,), 0.0), ((h, 4 * h), 2.0 * 4 * h * h * tokens), ((h,), 0.0), ((h,), 0.0),
              ((h,), 0.0)]
    return s + [((h, h), 2.0 * h * h), ((h,), 0.0)]


def alexnet_layers(classes=1000):
    """AlexNet as Caffe's reference model stores it (Krizhevsky et al., NeurIPS 2012: conv2, 4 and
    5 in two groups): 60,965,224 values, the 232.56 MB of Lin et al. (ICLR 2018, Table 3)."""
    convs = [(96, 3, 11, 55), (256, 48, 5, 27), (384, 256, 3, 13), (384, 192, 3, 13), (256, 192, 3, 13)]
    s = []
    for cout, cin, k, hw in convs:
        s += [_conv(cout, cin, k, hw), ((cout,), 0.0)]
    return s + _fc(4096, 256 * 6 * 6) + _fc(4096, 4096) + _fc(classes, 4096)


def _lstm(h, inp, tokens):
    """One LSTM layer as MXNet stores it: i2h and h2h weights and their biases."""
    return [((4 * h, inp), 2.0 * 4 * h * inp * tokens), ((4 * h, h), 2.0 * 4 * h * h * tokens),
            ((4 * h,), 0.0), ((4 * h,), 0.0)]


def sockeye_layers(src_vocab=17191, tgt_vocab=7709, h=512, tokens=25):
    """The Sockeye RNN model of the P3 authors' ``run_exp.sh``: 512-wide embeddings, a 2-layer
    LSTM encoder (the first layer bidirectional, 256 a direction), a 2-layer LSTM decoder fed its
    previous attentional state, MLP attention of 512, on IWSLT'15 en-vi (vocabularies of
    17,191 and 7,709 words, Luong and Manning 2015); ``tokens`` per sentence (a bucket of
    about the corpus's mean length). Input feeding and the attentional layer follow Sockeye 1.x's
    defaults as read here (Hieber et al., arXiv 1712.05690), an assumption the book states."""
    s = [((src_vocab, h), 0.0)]
    s += _lstm(h // 2, h, tokens) + _lstm(h // 2, h, tokens) + _lstm(h, h, tokens)
    s += [((h, h), 2.0 * h * h * tokens), ((h, h), 2.0 * h * h * tokens), ((h,), 0.0),
          ((1, h), 2.0 * h * tokens * tokens)]                 # MLP attention: key, query, v
    s += [((tgt_vocab, h), 0.0)] + _lstm(h, 2 * h, tokens) + _lstm(h, h, tokens)
    s += [((h, 2 * h), 2.0 * h * 2 * h * tokens), ((h,), 0.0)]  # attentional hidden layer
    return s + [((tgt_vocab, h), 2.0 * tgt_vocab * h * tokens), ((tgt_vocab,), 0.0)]


def _shapes(layers):
    return [shape for shape, _ in layers]


def resnet(blocks=(3, 4, 6, 3), classes=1000):
    return _shapes(resnet_layers(blocks, classes))


def vgg19(classes=1000):
    return _shapes(vgg19_layers(classes))


def bert_base(layers=12, h=768, vocab=30522):
    return _shapes(bert_base_layers(layers, h, vocab))


#: name -> a function giving (shape, forward FLOPs per sample) per layer, in forward order
LAYERS = {"alexnet": alexnet_layers, "resnet50": resnet_layers, "resnet101": lambda: resnet_layers((3, 4, 23, 3)),
          "vgg19": vgg19_layers, "bert-base": bert_base_layers, "sockeye": sockeye_layers}


def layers(name: str) -> list:
    """(shape, forward FLOPs per sample) of each layer of ``name``, in forward order."""
    model(name)
    return LAYERS[name]()


#: name -> (layer shapes, forward FLOPs per sample, where the numbers come from)
MODELS = {
    "resnet50": (resnet(), 8.2e9, "He et al. 2016, Table 1"),
    "resnet101": (resnet((3, 4, 23, 3)), 15.6e9, "He et al. 2016, Table 1"),
    "vgg19": (vgg19(), 39.2e9, "Simonyan and Zisserman 2015, config E"),
    "bert-base": (bert_base(), 2 * 110e6 * 128, "Devlin et al. 2019; 2 x params per token, 128 tokens"),
    "alexnet": (_shapes(alexnet_layers()), sum(f for _, f in alexnet_layers()),
                "Krizhevsky et al. 2012, Caffe's grouped reference model; FLOPs from its layers"),
    "sockeye": (_shapes(sockeye_layers()), sum(f for _, f in sockeye_layers()),
                "the P3 authors' run_exp.sh (Sockeye RNN, IWSLT'15 en-vi); FLOPs from its layers"),
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
             batch: int = 32, per_node: int = 1, codec_s_per_value: float = 0.0,
             compute_s: float | None = None) -> dict:
    """One prediction for a published model on a cluster, with speedups over fp32 and bf16
    allreduce and the error band of the technique's family (the stored validation).
    ``compute_s``: the step's forward + backward seconds measured on the device (a layer
    profile's sum, :func:`lab.sim.device_profile.layer_profile`) in place of FLOPs over
    ``device_flops``."""
    from ..comm import Network
    from .network import Cluster
    from .step import Config, family, predict
    from .band import band
    if workers % per_node:
        raise ValueError(f"workers ({workers}) must be a multiple of per_node ({per_node})")
    net = Network.parse(link)
    c = Cluster(workers // per_node, net.bandwidth, net.latency, per_node,
                600e9 if per_node > 1 else float("inf"))
    if compute_s is not None and not (0 <= compute_s < float("inf")):
        raise ValueError(f"compute_s must be a finite number >= 0 seconds or None, got {compute_s!r}")
    comp = compute_seconds(name, batch, device_flops) if compute_s is None else compute_s
    shapes = tuple(model(name)[0])
    # a real NIC is full duplex: a parameter server receives pushes while it sends pulls
    mk = lambda t: predict(Config(shapes, t, c, comp, codec_s_per_value if t == technique else 0.0,  # noqa: E731
                                  server_duplex=True))
    me, fp32, bf16 = mk(technique), mk("fp32"), mk("bf16")
    b, why = band(family(technique))
    return {**me.as_dict(), "speedup_fp32": fp32.step_s / me.step_s,
            "speedup_bf16": bf16.step_s / me.step_s, "band": b, "band_from": why}
