"""The AR-Topk paper's baselines (Tyagi & Swany, BigData 2023): MSTopK (Shi et al., MLSys 2021)
and layer-wise Top-k, each through the allgather; a property from each paper, the exchange
against a from-scratch version, and the ledger's bytes."""
import json
import subprocess
import sys

import pytest
import torch

from lab.aggregate import make
from lab.aggregate.mstopk import mstopk_indices
from lab.comm import Collective
from lab.runtime import launch


# -- MSTopK -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n, k, rounds", [(10_000, 100, 25), (10_000, 100, 1), (997, 3, 4),
                                          (5000, 2500, 25)])
def test_mstopk_selects_exactly_k_between_its_two_thresholds(n, k, rounds):
    """Shi et al.'s MSTopK: after N rounds of the threshold search, k1 <= k < k2 (the counts at
    its two thresholds); the selection is exactly k entries, every one of the k1 largest and
    none outside the k2 largest, found by counting, never by sorting."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(n + k)) ** 3
    idx, s = mstopk_indices(x, k, rounds, torch.Generator().manual_seed(0))
    assert idx.numel() == k == idx.unique().numel()
    assert s["k1"] <= k < s["k2"]
    order = torch.argsort(x.abs(), descending=True)
    chosen = set(idx.tolist())
    assert set(order[: s["k1"]].tolist()) <= chosen <= set(order[: s["k2"]].tolist())


def test_mstopk_search_narrows_with_rounds():
    """The binary search halves the threshold interval each round: more rounds, a narrower
    band (k2 - k1), and at 25 rounds on continuous data the exact top-k."""
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(1))
    k = 1000
    widths = [mstopk_indices(x, k, r)[1] for r in (2, 8, 25)]
    bands = [s["k2"] - s["k1"] for s in widths]
    assert bands[0] > bands[1] > bands[2] >= 1
    idx, _ = mstopk_indices(x, k, 25)
    assert set(idx.tolist()) == set(torch.topk(x.abs(), k).indices.tolist())


def test_mstopk_ties_select_k_not_everything():
    # every entry ties at the maximum: no threshold gives a count <= k; the band fills k
    # (the authors' code keeps t1 = 0 and would send all n)
    idx, s = mstopk_indices(torch.ones(100), 7, 25, torch.Generator().manual_seed(0))
    assert idx.numel() == 7 and s["k1"] == 0


def _ms_steps(ctx, n, density, steps):
    import torch
    from lab.aggregate import make
    from lab.comm import Collective
    agg = make("mstopk", Collective(), density=density, seed=3)
    out = []
    for step in range(steps):
        g = torch.randn(n, generator=torch.Generator().manual_seed(10 * step + ctx.rank))
        e = agg.residuals.get("flat", torch.zeros(n)).clone()
        mark = agg.comm.ledger.mark()
        avg = agg.aggregate([g], step)[0]
        recs = agg.comm.ledger.since(mark)
        out.append(dict(acc=g + e, avg=avg, e=agg.residuals["flat"].clone(), info=agg.info(),
                        ops=[(r.op, r.bytes, r.recv_bytes) for r in recs]))
    return out


def test_mstopk_exchange_is_the_mean_of_the_selections_with_error_feedback():
    n, d, p = 3000, 0.02, 2
    runs = launch(_ms_steps, p, n, d, 3)
    k = round(d * n)
    for step in range(3):
        want = torch.zeros(n)
        for r in runs:
            s = r[step]
            sent = s["acc"] - s["e"]                  # what this rank sent: a - residual
            assert torch.count_nonzero(sent) == k     # exactly k entries left the rank
            want += sent
        for r in runs:
            torch.testing.assert_close(r[step]["avg"], want / p)
            assert r[step]["ops"] == [("allgather", 8 * k, (p - 1) * 8 * k)]  # no size exchange


# -- layer-wise Top-k -------------------------------------------------------------------------
def _lw_steps(ctx, sizes, density, scheme):
    import torch
    from lab.aggregate import make
    from lab.comm import Collective
    from lab.compress import ErrorFeedback, make as codec
    comm = Collective()
    agg = (make("lwtopk", comm, density=density) if scheme == "lwtopk" else
           make("compressed", comm, compressor=ErrorFeedback(codec("topk", density=density))))
    gen = torch.Generator().manual_seed(ctx.rank)
    # the last tensor's gradients are 1000 times smaller than the others'
    grads = [torch.randn(s, generator=gen) * (1e-3 if i == len(sizes) - 1 else 1.0)
             for i, s in enumerate(sizes)]
    mark = comm.ledger.mark()
    out = agg.aggregate(grads, 0)
    return dict(out=out, ops=[(r.op, r.bytes) for r in comm.ledger.since(mark)],
                info=agg.info())


def test_layerwise_topk_sends_every_layer_at_the_density():
    """Layer-wise Top-k (DGC's per-layer selection; the authors' lwtopk baseline): every tensor
    sends k_l = round(d n_l) entries in an allgather of its own, so a layer of small gradients
    still sends; a global Top-k at the same density gives that layer nothing."""
    sizes, d, p = [4000, 1000, 500], 0.01, 2
    lw = launch(_lw_steps, p, sizes, d, "lwtopk")
    glob = launch(_lw_steps, p, sizes, d, "global")
    ks = [round(d * s) for s in sizes]
    for r in lw:
        assert r["ops"] == [("allgather", 8 * k) for k in ks]          # one exchange per tensor
        assert r["info"] == {"k": sum(ks), "layers": len(sizes)}
        assert [int(torch.count_nonzero(o)) > 0 for o in r["out"]] == [True] * len(sizes)
    # the global selection skips the small layer entirely
    assert int(torch.count_nonzero(glob[0]["out"][-1])) == 0


def test_layerwise_topk_is_per_tensor_topk_with_error_feedback():
    agg = make("lwtopk", Collective(), density=0.1)   # a world of one: the mean is the selection
    g = [torch.randn(50), torch.randn(30)]
    out = agg.aggregate(g, 0)
    for t, o, key in zip(g, out, (0, 1)):
        k = round(0.1 * t.numel())
        i = torch.topk(t.abs(), k).indices
        want = torch.zeros_like(t)
        want[i] = t[i]
        torch.testing.assert_close(o, want)
        torch.testing.assert_close(agg.residuals[key], t - want)


# -- reachable by name -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mstopk", "lwtopk"])
def test_reachable_from_the_command_line(name, tmp_path):
    r = subprocess.run([sys.executable, "-m", "lab", "train", "--aggregator", name,
                        "--aggregator-kw", "density=0.05", "--steps", "3", "--workers", "2",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    h = json.loads((tmp_path / "history.json").read_text())
    assert h["config"]["aggregator"] == name and len(h["loss"]) == 3
    assert all(set(t) == {"allgather"} for t in h["series"]["traffic"])  # what ran, per step


@pytest.mark.parametrize("name, kw", [("mstopk", dict(density=0.0)), ("mstopk", dict(rounds=0)),
                                      ("lwtopk", dict(density=2.0)),
                                      ("lwtopk", dict(layerwise=True))])
def test_bad_arguments_refused_before_launch(name, kw):
    from lab.train import TrainConfig
    with pytest.raises((ValueError, TypeError)):
        TrainConfig(aggregator=name, aggregator_kw=kw).check_workers(2)
