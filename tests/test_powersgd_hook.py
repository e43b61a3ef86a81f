"""lab's PowerSGD as a DDP hook: torch's powerSGD_hook as a peer oracle, many buckets, zeros."""
import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from lab.hooks.powersgd import PowerSGDHookState, powersgd_hook
from lab.runtime import launch

STEPS, START = 5, 2


def _model():
    torch.manual_seed(0)  # distinct shapes: torch's hook groups Q's by shape, ours keeps order
    return nn.Sequential(nn.Linear(20, 48), nn.ReLU(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 6))


def _train(ctx, which, rank=2, seed=7):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as th
    model = _model()
    ddp = DDP(model, bucket_cap_mb=1000)  # one bucket: where torch's hook works on gloo
    if which == "torch":
        state = th.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                 start_powerSGD_iter=START, warm_start=True,
                                 use_error_feedback=True, random_seed=seed)
        ddp.register_comm_hook(state, th.powerSGD_hook)
    else:
        # torch seeds its first Q's with one draw from numpy's RandomState(seed): use the same
        first = int(np.random.RandomState(seed).randint(1_000_000_000))
        state = PowerSGDHookState(rank=rank, start_iter=START, seed=first)
        ddp.register_comm_hook(state, powersgd_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + ctx.rank)
    snaps = []
    for _ in range(STEPS):
        x, y = torch.randn(16, 20, generator=g), torch.randint(0, 6, (16,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        snaps.append(torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()]))
        opt.step()
    return snaps


def _both(ctx):
    return _train(ctx, "torch"), _train(ctx, "lab")


def test_equals_torch_powersgd_hook_step_for_step():
    for theirs, ours in launch(_both, 2):
        for step, (a, b) in enumerate(zip(theirs, ours)):
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-5), f"step {step}: {(a - b).abs().max()}"


def _many_buckets(ctx):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    model[0].weight.requires_grad_(False)  # a frozen layer
    ddp = DDP(model, bucket_cap_mb=0.1)
    state = PowerSGDHookState(rank=2)
    ddp.register_comm_hook(state, powersgd_hook)
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(ctx.rank))
    for _ in range(3):
        model.zero_grad()
        ddp(x).square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
    buckets = len(state.power.iters)
    # a fresh replica whose loss is all zero: every gradient is zero and must stay zero, at
    # the first step and after warm start (torch's hook gives NaN with its default epsilon)
    fresh = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)), bucket_cap_mb=0.01)
    fresh.register_comm_hook(PowerSGDHookState(rank=2), powersgd_hook)
    for _ in range(2):
        fresh.zero_grad()
        (fresh(x) * 0).sum().backward()
    zeros = [p.grad.clone() for p in fresh.parameters()]
    return grads, buckets, zeros, state.comm.ledger.total_bytes()


@pytest.mark.parametrize("world", [2, 4])
def test_many_buckets_zeros_and_frozen_layer(world):
    out = launch(_many_buckets, world)
    grads, buckets, zeros, nbytes = out[0]
    assert buckets >= 3 and nbytes > 0
    for other in out[1:]:  # replicas agree
        for a, b in zip(grads, other[0]):
            assert torch.equal(a, b)
    for g in grads:
        assert torch.isfinite(g).all()
    for z in zeros:
        assert torch.equal(z, torch.zeros_like(z))


def test_rank_zero_refused():
    with pytest.raises(ValueError, match="rank"):
        PowerSGDHookState(rank=0)
