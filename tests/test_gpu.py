"""What needs a GPU (every test here is marked ``gpu``; CI skips them, ``tools/gpu_check.py``
runs them on a GPU machine and counts a skip as a failure): codec payloads on CUDA equal the
CPU's where the codec is deterministic, stochastic ones unbiased on the device, NCCL and gloo
with CUDA tensors through ``lab.comm``, lab's DDP hooks on CUDA against PyTorch's, a training run
and an overlapping schedule computing on the GPU."""
import pytest
import torch

import lab.compress as C
from lab.runtime import launch

pytestmark = pytest.mark.gpu


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# each codec's payload from a CUDA tensor, against the one from the same values on the CPU:
# exactly equal where every step is elementwise or a selection; equal up to float rounding of
# a sum (a scale: the CPU sums in float64, CUDA in float32 with another order)
EXACT = ("none", "fp16", "bf16", "sign", "topk", "threshold")
ROUNDED = ("scaled_sign", "onebit")


@pytest.mark.parametrize("name", EXACT + ROUNDED)
def test_deterministic_payloads_equal_on_cuda_and_cpu(name):
    x = torch.randn(300_001, generator=gen())
    kw = {"tau": 2.5} if name == "threshold" else {}
    cpu, gpu = C.make(name, **kw), C.make(name, **kw)
    (pc, cc), (pg, cg) = cpu.compress(x), gpu.compress(x.cuda())
    assert C.wire_bytes(pc) == C.wire_bytes(pg)
    out_c, out_g = cpu.decompress(pc, cc), gpu.decompress(pg, cg).cpu()
    if name == "topk":  # the same k entries; torch.topk lists them in another order on CUDA
        pc, pg = [t.sort().values for t in pc], [t.cpu().sort().values for t in pg]
    if name in EXACT:
        assert all(torch.equal(a, b.cpu()) for a, b in zip(pc, pg))
        assert torch.equal(out_c, out_g)
    else:
        assert torch.allclose(out_c, out_g, rtol=1e-5, atol=0)


@pytest.mark.parametrize("s", [4, 15])  # 3-bit levels: the general route; 4-bit: fused
def test_cuda_qsgd_unbiased(s):
    x = torch.randn(2 ** 19, generator=gen()).cuda()  # above FUSE_MIN_NUMEL: compiled
    codec = C.make("qsgd", s=s, bucket_size=512)
    draws = 200
    mean = sum(codec.decompress(*codec.compress(x)) for _ in range(draws)) / draws
    norms = x.view(-1, 512).norm(dim=1).repeat_interleave(512)
    # a level's spread is at most one step norm / s: the std of the mean, per entry
    sigma = norms / s / 2 / draws ** 0.5
    assert ((mean - x).abs() <= 6 * sigma + 1e-6).float().mean() > 0.999


@pytest.mark.parametrize("name", ["fp16", "bf16", "sign", "scaled_sign", "qsgd", "terngrad"])
def test_device_paths_compiled_on_cuda_decode_like_the_cpu(name):
    """The fused device paths (lab.compress.device), compiled: a payload the CPU decodes to
    the same tensor, and (deterministic codecs) the CPU's own payload's values."""
    x = torch.randn(2 ** 20, generator=gen())
    codec = C.make(name)
    for _ in range(3):  # compiled from the second call on
        payload, ctx = codec.compress(x.cuda())
    got = codec.decompress(payload, ctx).cpu()
    cpu_decode = C.make(name).decompress(tuple(t.cpu() for t in payload), ctx)
    assert torch.allclose(got, cpu_decode, rtol=1e-6, atol=0)
    if name in ("fp16", "bf16", "sign"):
        assert torch.equal(got, C.make(name).decompress(*C.make(name).compress(x)))


def test_cuda_stochastic_codecs_draw_on_the_device_and_repeat_with_the_seed():
    x = torch.randn(2 ** 20, generator=gen()).cuda()
    for name in ("qsgd", "terngrad", "randomk"):
        a, b = C.make(name, seed=3), C.make(name, seed=3)
        pa, pb = a.compress(x)[0], b.compress(x)[0]
        assert all(t.is_cuda for t in pa)
        assert all(torch.equal(s, t) for s, t in zip(pa, pb)), name


def _collectives(ctx):
    t = torch.full((1000,), float(ctx.rank + 1), device=ctx.device)
    ctx.comm.allreduce(t)
    parts = ctx.comm.allgather(torch.arange(ctx.rank + 1, dtype=torch.float32, device=ctx.device))
    return (t.device.type, t[0].item(), [p.device.type for p in parts], [p.numel() for p in parts],
            ctx.backend, ctx.comm.ledger.total_bytes())


def test_nccl_on_one_gpu():
    dev, total, kinds, sizes, backend, sent = launch(_collectives, 1, backend="nccl",
                                                     device="cuda")[0]
    assert (dev, total, backend, sizes) == ("cuda", 1.0, "nccl", [1])
    assert sent == 0  # one rank puts nothing on a wire: the ledger books no bytes


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_with_cuda_tensors(world):
    res = launch(_collectives, world, backend="gloo", device="cuda")
    for dev, total, kinds, sizes, backend, _ in res:
        assert (dev, backend) == ("cuda", "gloo")
        assert total == sum(range(1, world + 1))
        assert sizes == list(range(1, world + 1)) and set(kinds) == {"cuda"}


@pytest.mark.parametrize("world, backend", [(1, "nccl"), (2, "gloo")])
def test_hooks_on_cuda_match_torch(world, backend):
    from lab.bench.hooks import run
    rows = {r["hook"]: r for r in run(world, backend, "cuda", hidden=64, steps=6, batch=32)}
    assert all(r["device"] == "cuda" and r["backend"] == backend for r in rows.values())
    fp16, psgd = rows["lab codec_hook fp16"], rows["lab powersgd_hook"]
    assert fp16["param diff"] <= (0.0 if world == 1 else 1e-3)  # fp16 rounding, averaged apart
    assert psgd["param diff"] <= 1e-4


def test_training_on_the_gpu_matches_the_cpu():
    from lab.train import TrainConfig, train
    cfg = TrainConfig(model="mlp", data="digits", steps=20, batch_size=64, lr=0.1, eval_every=0)
    cpu, gpu = train(cfg, 2, progress=False, device="cpu"), train(cfg, 2, progress=False, device="cuda")
    assert abs(cpu.loss[-1] - gpu.loss[-1]) < 1e-3 * max(1.0, abs(cpu.loss[-1]))


def test_p3_schedule_on_the_gpu_sums_as_sync():
    from lab.bench.p3 import config, turns
    cfgs = [config("vgg", s, "1Gbps,0.1ms", 4) for s in ("sync", "p3")]
    sync, p3 = turns(cfgs, 2, rounds=2, block=2, timeout=180, device="cuda")
    assert p3["param_diff"] <= 1e-5 and abs(p3["loss"][-1] - sync["loss"][-1]) < 1e-4
