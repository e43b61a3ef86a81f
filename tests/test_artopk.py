"""AR-Topk (STAR/VAR) in real processes: shared indices, from-scratch equality, error-feedback
identity, ledger bytes independent of p, and bad arguments (Tyagi & Swany, BigData 2023)."""
import pytest
import torch

from lab.aggregate import make
from lab.comm import Collective
from lab.runtime import launch

N, DENSITY, STEPS = 500, 0.02, 4


def _grad(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(N, generator=g) * (1 + rank)  # ranks differ in scale: VAR has a choice


def _run(ctx, variant, collective="auto", network=None, kw=None):
    comm = Collective(network=network)
    agg = make("artopk", comm, variant=variant, density=DENSITY, collective=collective,
               **(kw or {}))
    out = []
    for step in range(STEPS):
        before = len(comm.ledger.records)
        e_before = agg.residuals.get("flat", torch.zeros(N)).clone()
        g = _grad(ctx.rank, step)
        avg = agg.aggregate([g], step)[0]
        recs = comm.ledger.records[before:]
        out.append(dict(avg=avg, e_before=e_before, e_after=agg.residuals["flat"].clone(),
                        info=agg.info(), g=g,
                        bytes={r.op: r.bytes for r in recs if not r.tag.endswith("norm")},
                        recv={r.op: r.recv_bytes for r in recs if not r.tag.endswith("norm")}))
    return out


@pytest.mark.parametrize("variant", ["star", "var"])
def test_shared_indices_equal_from_scratch_and_ef_identity(variant):
    runs = launch(_run, 3, variant, "ring", None, dict(window=2))
    p = len(runs)
    for step in range(STEPS):
        infos = [r[step]["info"] for r in runs]
        assert len({i["leader"] for i in infos}) == 1  # every rank agrees on the leader
        leader = infos[0]["leader"]
        if variant == "star":
            assert leader == step % p
        # from scratch: the leader's top-k of its own g + e, everyone's values there, averaged
        accs = [r[step]["g"] + r[step]["e_before"] for r in runs]
        k = infos[0]["k"]
        idx = torch.topk(accs[leader].abs(), k).indices
        want = torch.zeros(N)
        want[idx] = sum(a[idx] for a in accs) / p
        for r, acc in zip(runs, accs):
            torch.testing.assert_close(r[step]["avg"], want)
            # error feedback, per rank: e' = (g + e) - (what this rank sent), zero at idx
            sent = torch.zeros(N)
            sent[idx] = acc[idx]
            torch.testing.assert_close(r[step]["e_after"], acc - sent)
    if variant == "var":  # the leader has the largest smoothed norm: here the largest scale
        assert runs[0][-1]["info"]["leader"] == p - 1


@pytest.mark.parametrize("world", [2, 4])
def test_star_ledger_bytes_independent_of_p(world):
    runs = launch(_run, world, "star", "ring")
    k = runs[0][0]["info"]["k"]
    for r in runs:
        for s in r:
            leader = s["info"]["leader"]
            assert s["bytes"]["allreduce"] == 4 * k  # k fp32 values
            # the k int32 indices: sent by the leader, received by every other rank
            mine = s["bytes"]["broadcast"] + s["recv"]["broadcast"]
            assert mine == 4 * k, (leader, s["bytes"], s["recv"])
            assert sorted(s["bytes"]) == ["allreduce", "broadcast"]


def test_allgather_is_plain_topk_with_ef():
    runs = launch(_run, 2, "star", "allgather")
    for step in range(STEPS):
        accs = [r[step]["g"] + r[step]["e_before"] for r in runs]
        k = runs[0][step]["info"]["k"]
        want = torch.zeros(N)
        for a in accs:
            i = torch.topk(a.abs(), k).indices
            want[i] += a[i] / 2
        for r in runs:
            torch.testing.assert_close(r[step]["avg"], want)
            assert r[step]["bytes"]["allgather"] == 8 * k and r[step]["info"]["leader"] == -1


def test_auto_switch_follows_the_model_on_the_emulated_link():
    # p = 2 at 32 ms latency: allgather (1 message) beats broadcast + allreduce (2 or 3)
    runs = launch(_run, 2, "star", "auto", "1Gbps,32ms")
    for s in runs[0]:
        costs = {c: s["info"][f"cost_{c}_s"] for c in ("ring", "tree", "allgather")}
        assert s["info"]["collective"] == min(costs, key=costs.get) == "allgather"


def test_residual_starts_at_zero_and_single_rank_is_identity():
    agg = make("artopk", Collective(), density=1.0)  # world of one, keep everything
    g = torch.randn(50)
    torch.testing.assert_close(agg.aggregate([g], 0)[0], g)
    assert torch.count_nonzero(agg.residuals["flat"]) == 0


@pytest.mark.parametrize("kw, word", [
    (dict(density=0.0), "density"), (dict(density=1.5), "density"),
    (dict(variant="max"), "variant"), (dict(collective="ps"), "collective"),
    (dict(smoothing=1.0, variant="var"), "smoothing"),
])
def test_bad_arguments_refused(kw, word):
    with pytest.raises(ValueError, match=word):
        make("artopk", Collective(), **kw)


@pytest.mark.parametrize("name, kw, word", [("artopk", dict(variant="nope"), "variant"),
                                             ("artopk", dict(densty=0.1), "densty"),
                                             ("adaptive_topk", dict(candidate=[0.1]), "candidate")])
def test_bad_arguments_refused_before_launch(name, kw, word):
    from lab.train import TrainConfig
    with pytest.raises(ValueError, match=word):  # from the declaration, when the config is made
        TrainConfig(aggregator=name, aggregator_kw=kw).check_workers(2)


def test_nan_refused():
    agg = make("artopk", Collective())
    with pytest.raises(FloatingPointError):
        agg.aggregate([torch.tensor([1.0, float("nan")])], 0)


def _windowed_by_hand(norms, window, s):
    """The authors' EWMAMeter (miscellaneous/helper.py), written out: 0 until the window is
    full, then the newest value weighted (1-s), the oldest (1-s)^window."""
    out = []
    for t in range(len(norms)):
        if t + 1 < window:
            out.append(0.0)
            continue
        vals = norms[t + 1 - window:t + 1]
        w = [(1 - s) ** (window - i) for i in range(window)]
        out.append(sum(a * b for a, b in zip(w, vals)) / sum(w))
    return out


def _var_leaders(ctx, steps, window, smoothing):
    comm = Collective()
    agg = make("artopk", comm, variant="var", density=DENSITY, collective="ring",
               window=window, smoothing=smoothing)
    out = []
    for step in range(steps):
        # rank scales cross over: rank 0 large early, rank 2 large late, so the leader moves
        g = torch.randn(N, generator=torch.Generator().manual_seed(7 * step + ctx.rank))
        g = g * (1 + (ctx.rank if step >= steps // 2 else 2 - ctx.rank))
        agg.aggregate([g], step)
        out.append((float(g.norm()), agg.info()["leader"]))
    return out


def test_var_leader_is_largest_windowed_smoothed_raw_norm():
    steps, window, s = 12, 4, 0.3
    runs = launch(_var_leaders, 3, steps, window, s)
    smoothed = [_windowed_by_hand([n for n, _ in r], window, s) for r in runs]
    leaders = [runs[0][t][1] for t in range(steps)]
    for t in range(steps):
        assert len({r[t][1] for r in runs}) == 1
        col = [sm[t] for sm in smoothed]
        assert leaders[t] == col.index(max(col))  # argmax, first on ties
    assert leaders[:window - 1] == [0] * (window - 1)  # window not full: all zero, rank 0
    assert leaders[-1] == 2 and 0 in leaders[window:]  # the leader followed the norms


def test_var_leader_ema_variant():
    agg = make("artopk", Collective(), variant="var", leader="ema")
    assert agg.var_leader.rule == "ema" and agg.var_leader.smoothing == 0.9
    assert not agg.var_leader.raw_norm
    with pytest.raises(ValueError, match="leader"):
        make("artopk", Collective(), variant="var", leader="biggest")
    with pytest.raises(ValueError, match="window"):
        make("artopk", Collective(), variant="var", window=0)
