"""Sparsifiers: Top-k (exact, sampled), Random-k (private, shared seed), Strom threshold,
gradient dropping, AdaComp, DGC, Wangni. Two real multi-process launches at the end."""
from __future__ import annotations

import math

import pytest
import torch

import lab
import lab.compress as C
from lab.compress import wire_bytes
from lab.compress.dgc import DGC
from lab.compress.randomk import distinct_indices
from lab.compress.wangni import wangni_probabilities

SPARSE = ["topk", "topk_sampled", "randomk", "randomk_shared", "threshold", "strom", "drop",
          "gradient_dropping", "adacomp", "dgc", "wangni"]


def heavy_tailed(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, generator=g) * torch.rand(n, generator=g).pow(-1.5)).float()


# -- contract ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SPARSE)
def test_defaults_shapes_dtypes_and_edge_sizes(name):
    torch.manual_seed(0)
    c = C.make(name)
    assert c.name == name
    base = torch.randn(60, 50) * 0.05
    cases = [base, base.t(), torch.zeros(0), torch.tensor([0.3]), torch.randn(9, dtype=torch.float64)]
    for i, x in enumerate(cases):  # non-contiguous, empty and one-element inputs included
        payload, ctx = c.compress(x, key=i)
        y = c.decompress(payload, ctx)
        assert y.shape == x.shape and y.dtype == x.dtype
        for t in payload:
            assert t.dtype not in (torch.int64, torch.bool), f"{name}: {t.dtype} on the wire"
        if x.numel() == 0:
            assert wire_bytes(payload) <= 4  # nothing but possibly one scale
    with pytest.raises(FloatingPointError):
        c.compress(torch.tensor([1.0, float("nan")]))


@pytest.mark.parametrize("name,kw,arg", [
    ("topk", dict(density=0.0), "density"), ("topk", dict(density=1.5), "density"),
    ("topk", dict(density=-0.1), "density"), ("topk", dict(k=0), "k"),
    ("topk_sampled", dict(density=2.0), "density"), ("randomk", dict(density=0), "density"),
    ("randomk_shared", dict(k=-3), "k"), ("wangni", dict(density=1.01), "density"),
    ("dgc", dict(density=0), "density"), ("threshold", dict(tau=-1.0), "tau"),
    ("threshold", dict(tau=0.0), "tau"), ("strom", dict(tau=-0.5), "tau"),
    ("drop", dict(drop_ratio=1.0), "drop_ratio"), ("adacomp", dict(bin_size=0), "bin_size"),
])
def test_bad_arguments_name_the_argument(name, kw, arg):
    with pytest.raises(ValueError, match=arg):
        C.make(name, **kw)


@pytest.mark.parametrize("name", ["topk", "topk_sampled", "randomk", "randomk_shared", "wangni"])
def test_k_larger_than_n_refused_and_k_equal_n_kept(name):
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="k=11"):
        C.make(name, k=11).compress(torch.randn(10))
    x = torch.randn(10)
    c = C.make(name, k=10)
    torch.testing.assert_close(c.decompress(*c.compress(x)), x)


def test_density_to_k_rounding():
    from lab.compress.topk import resolve_k
    assert resolve_k(1000, 0.01) == 10 and resolve_k(10, 0.01) == 1 and resolve_k(0, 0.5) == 0
    assert resolve_k(10, 0.25) == 3 and resolve_k(10, 1.0) == 10 and resolve_k(7, 0.07, k=7) == 7


# -- Top-k -----------------------------------------------------------------------------------
def test_topk_keeps_exactly_the_k_largest_magnitudes_with_ties():
    g = torch.Generator().manual_seed(1)
    x = (torch.randint(-6, 7, (1000,), generator=g) / 4).float()  # many ties
    k = 137
    c = C.make("topk", k=k)
    (vals, idx), ctx = c.compress(x)
    assert vals.dtype == torch.float32 and idx.dtype == torch.int32
    assert wire_bytes((vals, idx)) == 8 * k
    assert idx.unique().numel() == k
    kept = vals.abs().sort().values
    torch.testing.assert_close(kept, x.abs().sort().values[-k:], rtol=0, atol=0)
    dropped = torch.ones(1000, dtype=torch.bool)
    dropped[idx.long()] = False
    assert vals.abs().min() >= x[dropped].abs().max()
    y = c.decompress((vals, idx), ctx)
    assert torch.equal(y[idx.long()], x[idx.long()]) and not y[dropped].any()


@pytest.mark.parametrize("overshoot", [2.0, 0.3])  # 0.3: too few candidates, full fallback
def test_topk_exact_on_large_tensors_via_sampled_route(overshoot):
    from lab.compress.topk import SAMPLED_MIN_N, topk_indices
    g = torch.Generator().manual_seed(13)
    n, k = 2 * SAMPLED_MIN_N, 3000
    x = (torch.randint(-4000, 4001, (n + 37,), generator=g) / 8).float()  # ties at the boundary
    idx = topk_indices(x, k, torch.Generator().manual_seed(14), overshoot=overshoot)
    assert idx.numel() == k and idx.unique().numel() == k
    torch.testing.assert_close(x[idx].abs().sort().values, x.abs().sort().values[-k:],
                               rtol=0, atol=0)


@pytest.mark.parametrize("frac", [0.0005, 0.002, 0.05])
def test_block_screened_candidates_equal_direct_selection(frac):
    from lab.compress.topk import candidates
    x = torch.randn(100_003, generator=torch.Generator().manual_seed(15))
    thr = x.abs().quantile(1 - frac)
    assert torch.equal(candidates(x, thr, frac), torch.where(x.abs() >= thr)[0])


def test_topk_sampled_recall_on_gaussian():
    x = torch.randn(1_000_000, generator=torch.Generator().manual_seed(2))
    for d in (0.01, 0.001):
        k = round(d * x.numel())
        c = C.make("topk_sampled", density=d)
        (vals, idx), _ = c.compress(x)
        assert idx.numel() <= k and idx.dtype == torch.int32
        truth = set(torch.topk(x.abs(), k).indices.tolist())
        recall = len(truth & set(idx.tolist())) / k
        assert recall >= 0.9, (d, recall)


# -- Random-k --------------------------------------------------------------------------------
@pytest.mark.parametrize("n,k", [(100, 60), (100_000, 100), (50, 1)])
def test_randomk_indices_distinct(n, k):
    idx = distinct_indices(n, k, torch.Generator().manual_seed(3))
    assert idx.numel() == k and idx.unique().numel() == k
    assert 0 <= int(idx.min()) and int(idx.max()) < n


def test_randomk_uniform_over_coordinates():
    g, n, k, T = torch.Generator().manual_seed(4), 20, 3, 4000
    counts = torch.zeros(n)
    for _ in range(T):
        counts[distinct_indices(n, k, g)] += 1
    p = k / n
    sd = math.sqrt(T * p * (1 - p))
    assert (counts - T * p).abs().max() < 5 * sd


def _monte_carlo(codec, x, T):
    draws = torch.stack([codec.decompress(*codec.compress(x)) for _ in range(T)]).double()
    return draws.mean(0), draws.std(0) / math.sqrt(T), draws.var(0).sum()


@pytest.mark.parametrize("name", ["randomk", "wangni"])
def test_unbiased_by_monte_carlo(name):
    x = heavy_tailed(40, seed=5)
    kw = dict(scale=True) if name == "randomk" else {}
    mean, se, _ = _monte_carlo(C.make(name, density=0.2, seed=6, **kw), x, 3000)
    z = (mean - x.double()).abs() / se.clamp_min(1e-12)
    assert z.max() < 5, float(z.max())


# -- Wangni ----------------------------------------------------------------------------------
def test_wangni_budget_form_and_lower_variance_than_randomk():
    x = heavy_tailed(2000, seed=7)
    budget = 0.05 * x.numel()
    p = wangni_probabilities(x.abs(), budget)
    assert abs(float(p.sum()) - budget) < 1e-9 * budget
    free = (p < 1) & (p > 0)
    lam = p[free] / x.abs().double()[free]
    torch.testing.assert_close(lam, lam.mean().expand_as(lam))  # p_i = lambda |g_i| below 1
    assert (x.abs().double()[p == 1].min() >= x.abs().double()[free].max())
    pg = wangni_probabilities(x.abs(), budget, method="greedy", iters=5)
    assert float(pg.sum()) <= budget * 1.0001 and float(pg.sum()) > 0.95 * budget
    # variance, closed form and measured: Wangni vs scaled Random-k at the same mean density
    v_w = float((x.double() ** 2 * (1 / p.clamp_min(1e-300) - 1))[p > 0].sum())
    v_r = (1 / 0.05 - 1) * float(x.double().pow(2).sum())
    assert v_w < 0.2 * v_r
    _, _, mv_w = _monte_carlo(C.make("wangni", density=0.05, seed=8), x, 300)
    _, _, mv_r = _monte_carlo(C.make("randomk", density=0.05, scale=True, seed=8), x, 300)
    assert mv_w < 0.5 * mv_r
    counts = [C.make("wangni", density=0.05, seed=s).compress(x)[0][0].numel() for s in range(20)]
    assert abs(sum(counts) / 20 - budget) < 4 * math.sqrt(budget / 20)


# -- error feedback, Strom, gradient dropping, AdaComp ----------------------------------------
@pytest.mark.parametrize("make", [
    lambda: C.make("ef", inner="topk", density=0.05), lambda: C.make("strom", tau=0.05),
    lambda: C.make("gradient_dropping", drop_ratio=0.9), lambda: C.make("adacomp", bin_size=16)])
def test_error_feedback_identity(make):
    c, g = make(), torch.Generator().manual_seed(9)
    residual = getattr(c, "residual", None) or getattr(c, "residue")
    e_old = torch.zeros(3000)
    for step in range(4):
        grad = torch.randn(3000, generator=g) * 0.05
        payload, ctx = c.compress(grad, key="w")
        e_new = residual("w")
        torch.testing.assert_close(grad + e_old, c.decompress(payload, ctx) + e_new,
                                   rtol=1e-6, atol=1e-7)
        assert e_new.abs().sum() > 0
        e_old = e_new.clone()


def test_strom_values_are_plus_minus_tau_and_bytes_exact():
    tau = 0.5
    x = torch.tensor([0.1, -0.7, 0.5, 2.0, -0.5, -3.0, 0.51, 0.0] * 5)
    c = C.make("threshold", tau=tau)
    (idx, signs), ctx = c.compress(x)
    m = idx.numel()
    assert idx.dtype == torch.int32 and signs.dtype == torch.uint8
    assert m == 20 and wire_bytes((idx, signs)) == 4 * m + math.ceil(m / 8)
    y = c.decompress((idx, signs), ctx)
    assert set(y[idx.long()].tolist()) == {tau, -tau}
    torch.testing.assert_close(y, torch.where(x.abs() > tau, torch.sign(x) * tau, 0.0))


def test_gradient_dropping_sends_about_one_minus_R():
    x = torch.randn(200_000, generator=torch.Generator().manual_seed(10))
    counts = [C.make("drop", drop_ratio=0.99, seed=s).compress(x)[0][1].numel() for s in range(20)]
    assert 0.75 * 2000 < sum(counts) / 20 < 1.25 * 2000  # the threshold is only estimated
    (vals, idx), _ = C.make("drop", drop_ratio=0.99, seed=1).compress(x)
    assert vals.abs().min() >= x.abs()[torch.ones(200_000, dtype=bool).index_fill_(0, idx.long(), False)].max()


def test_adacomp_selection_rule_first_step():
    dw = torch.tensor([0.1, -0.4, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3, -0.29, 0.1, 0.16])
    c = C.make("adacomp", bin_size=4)
    (idx, signs, scale), ctx = c.compress(dw)
    # residue 0: G = dW, H = 2 dW; send |2 dW| >= max_bin |dW|; the all-zero bin sends nothing
    assert idx.tolist() == [1, 2, 8, 9, 11]
    gmax = torch.tensor([0.4, 0.0, 0.3])
    torch.testing.assert_close(scale, gmax.mean().reshape(1))
    y = c.decompress((idx, signs, scale), ctx)
    torch.testing.assert_close(y[idx.long()], torch.sign(dw[idx.long()]) * gmax.mean())
    assert wire_bytes((idx, signs, scale)) == 4 * 5 + 1 + 4


# -- DGC -------------------------------------------------------------------------------------
def test_dgc_warmup_schedule():
    c = DGC(density=0.001, warmup_steps=10, sampled=False)
    assert [c.density_at(s) for s in (0, 9, 10, 20, 30, 39, 40, 1000)] == \
        [0.25, 0.25, 0.0625, 0.015625, 0.00390625, 0.00390625, 0.001, 0.001]
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(12))
    for step, k in [(0, 2500), (15, 625), (25, 156), (35, 39), (45, 10)]:
        c.set_step(step)
        assert c.compress(x, key=step)[0][0].numel() == k
    assert DGC(warmup=False).density_at(0) == 0.001


def test_dgc_momentum_correction_and_masking_from_scratch():
    g, n, m = torch.Generator().manual_seed(11), 500, 0.9
    c = DGC(density=0.02, momentum=m, warmup=False, sampled=False)
    u, v = torch.zeros(n), torch.zeros(n)
    for step in range(5):
        grad = torch.randn(n, generator=g)
        u = m * u + grad
        v = v + u
        (vals, idx), _ = c.compress(grad, key="w")
        i = idx.long()
        torch.testing.assert_close(vals, v[i])
        assert idx.numel() == 10
        v[i], u[i] = 0, 0
        assert not c.velocity["w"][i].any() and not c.accumulated["w"][i].any()
        torch.testing.assert_close(c.velocity["w"], u)
        torch.testing.assert_close(c.accumulated["w"], v)
    c2 = DGC(density=0.02, warmup=False, sampled=False, masking=False)
    (vals, idx), _ = c2.compress(torch.randn(n, generator=g), key="w")
    assert c2.velocity["w"][idx.long()].all() and not c2.accumulated["w"][idx.long()].any()


def test_dgc_local_clipping_scales_by_inverse_sqrt_world():
    c = DGC(density=1.0, warmup=False, momentum_correction=False, clipping=True, clip_norm=1.0)
    c.bind(rank=0, world_size=4)
    y = c.decompress(*c.compress(torch.full((100,), 3.0)))
    assert abs(float(y.norm()) - 0.5) < 1e-5


# -- real processes --------------------------------------------------------------------------
def _grads(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(30, 20, generator=g), torch.randn(401, generator=g)]


def _worker(ctx, k):
    import lab.aggregate as A
    import lab.compress as C
    comm = ctx.comm
    agg = A.make("compressed", comm=comm, compressor=C.make("topk", k=k))
    mark = comm.ledger.mark()
    out = agg.aggregate(_grads(ctx.rank), step=0)
    gather_bytes = sum(r.bytes for r in comm.ledger.since(mark)
                       if r.op == "allgather" and r.tag == "grad")
    shared = C.make("randomk_shared", k=k, scale=True, seed=7).bind(ctx.rank, ctx.world_size)
    x = torch.randn(1001, generator=torch.Generator().manual_seed(ctx.rank))
    payload, cctx = shared.compress(x)
    own = shared.decompress(tuple(p.clone() for p in payload), cctx)
    mark = comm.ledger.mark()
    total = shared.decompress(comm.allreduce_payload(payload, tag="rk"), cctx)
    reduce_bytes = comm.ledger.total_bytes("allreduce", "rk")
    return dict(out=out, gather_bytes=gather_bytes, idx=cctx[2], own=own, total=total,
                reduce_bytes=reduce_bytes)


def test_multiprocess_topk_allgather_and_shared_randomk_allreduce():
    k = 25
    per_world = {}
    for world in (2, 3):
        res = lab.launch(_worker, world, k, progress=False, timeout=60)
        # compressed aggregator (allgather path) == from-scratch mean of each rank's top-k
        flats = [torch.cat([t.reshape(-1) for t in _grads(r)]) for r in range(world)]
        expect = torch.zeros_like(flats[0])
        for f in flats:
            i = torch.topk(f.abs(), k).indices
            expect[i] += f[i]
        expect /= world
        for r in res:
            got = torch.cat([t.reshape(-1) for t in r["out"]])
            torch.testing.assert_close(got, expect)
            assert r["gather_bytes"] == 8 * k  # this rank's payload: 4 B value + 4 B index
        per_world[world] = sum(r["gather_bytes"] for r in res)
        # shared-seed Random-k: same distinct indices everywhere; allreduce == sum of decodes
        assert all(torch.equal(r["idx"], res[0]["idx"]) for r in res)
        assert res[0]["idx"].unique().numel() == k
        summed = sum(r["own"] for r in res)
        for r in res:
            torch.testing.assert_close(r["total"], summed)
            assert r["reduce_bytes"] == 4 * k  # values only, no indices
    assert per_world[3] > per_world[2]


def test_randomk_is_shared_seed_by_default_and_private_on_request():
    """Issue 31: Random-k sends values only and travels by allreduce unless asked otherwise."""
    shared, private = C.make("randomk", density=0.1), C.make("randomk_private", density=0.1)
    assert shared.allreduce_compatible and not private.allreduce_compatible
    x = torch.randn(1000, generator=torch.Generator().manual_seed(4))
    (values,), _ = shared.compress(x)
    assert values.numel() == 100
    pv, pi = private.compress(x)[0]
    assert pv.numel() == pi.numel() == 100 and pi.dtype == torch.int32
    assert C.make("randomk_shared").allreduce_compatible  # the old name still works
