"""lab.adaptive: the switch against hand-written alpha-beta formulas, the Pareto front, the
compression gain, and the online controller (same choice on every rank; bad args refused)."""
import itertools
import math

import numpy as np
import pytest
import torch

from lab.adaptive import (AUTHORS_CANDIDATES, DensityController, asf_pick, choose,
                          compression_gains, exact_choice, exchange_costs, fit_objectives,
                          nsga2_choice, pareto_front, weighted_choice)
from lab.aggregate import make
from lab.comm import Collective
from lab.runtime import launch


def _lab_by_hand(k, p, a, b):
    lg = math.ceil(math.log2(p))
    bcast = lg * (a + 4 * k * b)
    return {"ring": bcast + 2 * (p - 1) * a + 2 * (p - 1) / p * 4 * k * b,
            "tree": bcast + lg * (a + 4 * k * b),
            "allgather": (p - 1) * (a + 8 * k * b)}


def _authors_by_hand(k, p, a, b):
    """getLatencyBWCommTime in the authors' adaptive_moo/run_MOOCompression.py, in seconds."""
    lg = math.log(p, 2)
    bcast = a * lg + lg * k * 4 * b
    return {"ring": bcast + 2 * (p - 1) * a + 2 * (p - 1) * k * 4 * b / p,
            "tree": bcast + 2 * a * lg + 2 * lg * k * 4 * b,
            "allgather": a * lg + (p - 1) * k * 4 * 2 * b}


def _cheapest_by_hand(k, p, a, b):
    lg = math.ceil(math.log2(p))
    bcast = lg * (a + 4 * k * b)
    return {"ring": bcast + 2 * (p - 1) * a + 2 * (p - 1) / p * 4 * k * b,
            "tree": bcast + min(lg * (a + 4 * k * b), 2 * lg * (a + 4 * k * b)),
            "allgather": min((p - 1) * (a + 8 * k * b), lg * a + (p - 1) * 8 * k * b)}


GRID = list(itertools.product([1e-6, 1e-4, 1e-3, 32e-3], [1e8, 1.25e8, 3.125e9, 1e11],
                              [0.001, 0.01, 0.1], [2, 4, 16, 64, 1024]))


@pytest.mark.parametrize("model, by_hand", [("authors", _authors_by_hand), ("lab", _lab_by_hand),
                                            ("cheapest", _cheapest_by_hand)])
def test_switch_picks_lowest_modeled_cost_on_a_grid(model, by_hand):
    n, picked = 1_000_000, set()
    for a, bw, d, p in GRID:
        k = round(d * n)
        want = by_hand(k, p, a, 1 / bw)
        got = exchange_costs(k, p, a, 1 / bw, model=model)
        for c in want:
            assert got[c] == pytest.approx(want[c], rel=1e-12)
        best = choose(got)
        assert want[best] == min(want.values())
        picked.add(best)
    assert {"ring", "allgather"} <= picked  # the grid exercises both paths


def test_default_model_is_the_authors_and_models_disagree_somewhere():
    assert exchange_costs(100, 8, 1e-3, 1e-9) == exchange_costs(100, 8, 1e-3, 1e-9, model="authors")
    differ = sum(choose(exchange_costs(round(d * 1e6), p, a, 1 / bw)) !=
                 choose(exchange_costs(round(d * 1e6), p, a, 1 / bw, model="lab"))
                 for a, bw, d, p in GRID)
    assert 0 < differ < len(GRID)
    with pytest.raises(ValueError, match="model"):
        exchange_costs(1, 2, 0, 0, model="nope")


def test_var_adds_one_norm_allgather():
    s, v = exchange_costs(100, 8, 1e-3, 1e-9), exchange_costs(100, 8, 1e-3, 1e-9, "var")
    assert v["allgather"] == s["allgather"]
    assert v["ring"] - s["ring"] == pytest.approx(3 * 1e-3 + 7 * 4e-9)  # authors' allgather
    s, v = (exchange_costs(100, 8, 1e-3, 1e-9, m, "lab") for m in ("star", "var"))
    assert v["ring"] - s["ring"] == pytest.approx(7 * (1e-3 + 4e-9))


def test_pareto_front_and_weighted_choice():
    t = [1.0, 2.0, 3.0, 2.5]
    inv_gain = [3.0, 2.0, 1.0, 2.5]  # the last is dominated by the second
    assert pareto_front(t, inv_gain) == [True, True, True, False]
    # normalised by the max: scores .6*t/3 + .4*g/3 -> [.333, .4667, .7333, ...]
    assert weighted_choice(t, inv_gain, (0.6, 0.4)) == 0
    assert weighted_choice(t, inv_gain, (0.0, 1.0)) == 2


def test_compression_gain_is_norm_ratio():
    x = torch.tensor([3.0, -4.0, 0.0, 1.0])
    g = compression_gains(x, [1, 2, 4])
    assert g == pytest.approx([4 / math.sqrt(26), 5 / math.sqrt(26), 1.0])
    assert compression_gains(torch.zeros(5), [1, 2]) == [1.0, 1.0]


def test_grid_controller_trades_time_for_gain():
    ctl = DensityController([0.001, 0.01, 0.1], smoothing=0.0, method="grid", model="lab")
    ctl.observe([0.3, 0.6, 0.9])
    # a fast link: every density costs about one latency, so the best gain wins
    assert ctl.decide(10_000, 4, 1e-3, 1 / 3.125e9) == 0.1
    # a slow link and a big model: time dominates, a low density wins
    assert ctl.decide(25_000_000, 4, 1e-4, 1 / 1.25e8) < 0.1
    assert not ctl.needs_decision(None)
    ctl.observe([0.1, 0.1, 0.1])  # the gain falls: re-decide
    assert ctl.needs_decision(None)


def _by_hand_asf(F, w):
    F = np.asarray(F, float)
    nF = (F - F.min(0)) / (F.max(0) - F.min(0))
    # pymoo's ASF divides by the weights it is given; the authors give 1/w: max_i w_i nF_i
    return int(np.argmin(np.max(nF * np.asarray(w), axis=1)))


def test_asf_pick_matches_definition():
    rng = np.random.default_rng(0)
    for _ in range(20):
        F = rng.random((15, 2))
        assert asf_pick(F, (0.6, 0.4)) == _by_hand_asf(F, (0.6, 0.4))


def test_fits_pass_through_the_points():
    d = list(AUTHORS_CANDIDATES)
    times = 5 * np.exp(20 * np.array(d)) - 1  # of the authors' form: recovered exactly
    gains = [0.9, 0.7, 0.5, 0.35, 0.2]
    f1, f2, ok = fit_objectives(d, times, gains)
    assert ok
    assert np.allclose(f1(np.array(d)), times, rtol=1e-4)
    assert np.allclose(1 / f2(np.array(d)), gains, atol=0.05)
    assert 1 / f2(np.array([1.0])) == pytest.approx(1.0, abs=0.05)  # pinned at (1, 1)


def test_nsga2_agrees_with_exact_search_and_is_deterministic():
    rng = np.random.default_rng(1)
    d, agree, n = sorted(AUTHORS_CANDIDATES), 0, 12
    for _ in range(n):
        g = np.sort(rng.uniform(0.05, 0.95, 5))
        t = np.sort(rng.uniform(0.5, 5, 5)) * rng.choice([1, 10, 100])
        f1, f2, _ = fit_objectives(d, t, g)
        x, X, F = nsga2_choice(f1, f2, d[0], d[-1])
        assert d[0] <= x <= d[-1] and x == nsga2_choice(f1, f2, d[0], d[-1])[0]  # seeded
        y = exact_choice(f1, f2, d[0], d[-1])[0]
        agree += abs(x - y) <= 0.05 * (d[-1] - d[0])
    assert agree >= n - 2, agree  # the NSGA-II front is an approximation of the exact one


def test_nsga2_controller_moves_with_the_link():
    ctl = DensityController(smoothing=0.0)
    ctl.observe([0.2, 0.35, 0.5, 0.7, 0.9])  # for 0.001 .. 0.1
    fast = ctl.decide(1_000_000, 8, 1e-4, 1 / 1.25e9)
    assert ctl.last["fit"] == "curve_fit" and not ctl.needs_decision(None)
    slow = ctl.decide(1_000_000, 8, 1e-3, 1 / 1.25e6)
    assert 0.001 <= fast <= 0.1 and 0.001 <= slow <= 0.1 and fast != slow


@pytest.mark.parametrize("bad, word", [([], "candidates"), ([0.0, 0.1], "density"),
                                       ([0.5, 2.0], "density")])
def test_controller_bad_candidates(bad, word):
    with pytest.raises(ValueError, match=word):
        DensityController(bad)
    with pytest.raises(ValueError, match=rf"{word}|candidates\[\d\]"):  # the declared element
        make("adaptive_topk", Collective(), candidates=bad)


def test_bad_candidates_refused_before_launch():
    from lab.train import TrainConfig
    with pytest.raises(ValueError, match="candidates"):  # when the config is made
        TrainConfig(aggregator="adaptive_topk", aggregator_kw=dict(candidates=[])).check_workers(2)


def _adaptive(ctx):
    from lab.comm import NetworkSchedule
    sched = NetworkSchedule.parse("25Gbps,1ms:4 1Gbps,32ms:4")
    comm = Collective()
    agg = make("adaptive_topk", comm, candidates=[0.01, 0.1, 0.5], probe_every=2, warmup_steps=2)
    out = []
    for step in range(8):
        comm.network = sched.at(step)
        g = torch.Generator().manual_seed(10 * step + ctx.rank)
        agg.aggregate([torch.randn(4000, generator=g) ** 3 * (1 + ctx.rank)], step)
        out.append(agg.info())
    return out


def test_controller_choice_identical_on_every_rank():
    runs = launch(_adaptive, 3)
    assert len(runs[0]) == 8
    assert [r["density"] for r in runs[0][:2]] == [1.0, 0.5]  # warm-up: 1.0 down to max candidate
    assert [r["warmup"] for r in runs[0]] == [True] * 2 + [False] * 6
    for step in range(8):
        assert len({(r[step]["density"], r[step]["collective"], r[step]["leader"])
                    for r in runs}) == 1
        assert runs[0][step]["gains"] == runs[1][step]["gains"]
    assert runs[0][2]["decide_s"] > 0 and runs[0][4]["decide_s"] > 0  # after warm-up, new link


def _decisions(ctx):
    from lab.comm import NetworkSchedule
    sched = NetworkSchedule.parse("25Gbps,1ms:4 1Gbps,32ms:4")
    comm = Collective()
    agg = make("adaptive_topk", comm, candidates=[0.01, 0.1, 0.5], warmup_steps=2, trigger="link")
    out = []
    for step in range(8):
        comm.network = sched.at(step)
        mark = comm.ledger.mark()
        g = torch.Generator().manual_seed(10 * step + ctx.rank)
        agg.aggregate([torch.randn(4000, generator=g) ** 3 * (1 + ctx.rank)], step)
        sent = [r for r in comm.ledger.since(mark) if r.tag == "adaptive:decision"]
        out.append(dict(agg.info(), shared=[(r.bytes, r.recv_bytes) for r in sent],
                        fit=agg.controller.last.get("fit")))
    return out


def test_decision_runs_on_rank_0_and_is_broadcast():
    runs = launch(_decisions, 3)
    decided = [s for s, r in enumerate(runs[0]) if r["decide_s"] > 0]
    assert decided == [4]                       # the change of link; NSGA-II on rank 0 only
    for rank, steps in enumerate(runs):
        if rank:
            assert all(r["decide_s"] == 0 for r in steps) and steps[4]["fit"] == "broadcast"
        for s, r in enumerate(steps):          # one 8-byte broadcast per decision, in the ledger
            assert r["shared"] == ([(8, 0) if rank == 0 else (0, 8)] if s == 4 else [])
            assert r["density"] == runs[0][s]["density"]
        assert steps[4]["share_s"] > 0
    ctl = DensityController([0.01, 0.1, 0.5], smoothing=0.0)
    with pytest.raises(RuntimeError, match="observe"):
        ctl.adopt(0.1, 4000, 3, 1e-3, 1e-9)
    ctl.observe([0.3, 0.6, 0.9])
    with pytest.raises(ValueError, match="density"):
        ctl.adopt(0.9, 4000, 3, 1e-3, 1e-9)


@pytest.mark.parametrize("kw, word", [(dict(method="pareto"), "method"),
                                      (dict(warmup_steps=-1), "warmup_steps"),
                                      (dict(cost_model="fast"), "model"),
                                      (dict(leader="max", variant="var"), "leader")])
def test_adaptive_bad_arguments_refused(kw, word):
    with pytest.raises(ValueError, match=word):
        make("adaptive_topk", Collective(), **kw)
    from lab.train import TrainConfig
    with pytest.raises(ValueError, match=word):
        TrainConfig(aggregator="adaptive_topk", aggregator_kw=kw).check_workers(2)


# -- the authors' trigger: re-decide on a change of link only ---------------------------------
def test_link_trigger_holds_until_the_link_changes():
    ctl = DensityController(smoothing=0.0, trigger="link")
    ctl.hold(0.1, "fast")                 # the last warm-up density, on the link at step 0
    assert ctl.density == 0.1 and not ctl.needs_decision("fast")
    ctl.observe([0.2, 0.3, 0.4, 0.5, 0.6])
    ctl.observe([0.01] * 5)               # the gain collapses: the authors do not re-decide
    assert not ctl.needs_decision("fast") and ctl.needs_decision("slow")
    ctl.decide(1_000_000, 4, 1e-3, 1 / 1.25e8, network="slow")
    assert not ctl.needs_decision("slow") and ctl.needs_decision("fast")
    lab = DensityController(smoothing=0.0)  # the lab's trigger re-decides on the gain shift
    lab.observe([0.5] * 5)
    lab.decide(1_000_000, 4, 1e-3, 1 / 1.25e8, network="slow")
    lab.observe([0.01] * 5)
    assert lab.needs_decision("slow")
    with pytest.raises(ValueError, match="trigger"):
        DensityController(trigger="gain")


def _triggered(ctx, trigger):
    from lab.comm import NetworkSchedule
    sched = NetworkSchedule.parse("25Gbps,1ms:5 1Gbps,32ms:3 1Gbps,32ms:3 25Gbps,1ms:3")
    comm = Collective()
    agg = make("adaptive_topk", comm, candidates=[0.01, 0.05, 0.2], warmup_steps=2,
               trigger=trigger, probe_every=2)
    out = []
    for step in range(14):
        comm.network = sched.at(step)
        mark = comm.ledger.mark()
        g = torch.randn(3000, generator=torch.Generator().manual_seed(10 * step + ctx.rank))
        agg.aggregate([g ** 3 * (1 + step % 3)], step)
        out.append(dict(agg.info(), probes=sum(r.tag == "adaptive:gain"
                                                for r in comm.ledger.since(mark))))
    return out


def test_adaptive_link_trigger_decides_at_link_changes_only():
    runs = launch(_triggered, 2, "link")
    steps = runs[0]
    decided = [s for s, r in enumerate(steps) if r["decide_s"] > 0]
    assert decided == [5, 11]            # the two changes of link (5 -> 8 is the same link)
    probes = [s for s, r in enumerate(steps) if r["probes"]]
    assert probes == decided             # gains measured only when a decision is due
    assert [r["density"] for r in steps[2:5]] == [0.2] * 3  # the last warm-up density held
    for s in range(14):
        assert runs[0][s]["density"] == runs[1][s]["density"]
    lab = launch(_triggered, 2, "link+gain")[0]
    assert lab[2]["decide_s"] > 0        # the lab's reading decides right after warm-up
    assert sum(r["probes"] for r in lab) > len(probes)


# -- which exchange a step ran, from the ledger ------------------------------------------------
def test_exchange_taken_reads_the_traffic():
    from lab.adaptive import exchange_taken
    k = 100
    assert exchange_taken({"broadcast": [1, 400], "allreduce": [1, 400]}, k) == "ar"
    assert exchange_taken({"broadcast": [1, 0], "allreduce": [2, 420]}, k) == "ar"  # + gains
    assert exchange_taken({"broadcast": [1, 0], "allreduce": [1, 400],
                           "allgather": [1, 4]}, k) == "ar"                      # VAR's norm
    assert exchange_taken({"allgather": [1, 800]}, k) == "allgather"
    assert exchange_taken({"allgather": [1, 800], "broadcast": [1, 8]}, k) == "allgather"  # + decision
    assert exchange_taken({"broadcast": [2, 408], "allreduce": [1, 400]}, k) == "ar"
    assert exchange_taken({"allgather": [1, 800], "allreduce": [1, 20]}, k) == "allgather"
    # what is not an AR-Topk exchange of k entries
    assert exchange_taken({"allreduce": [1, 400]}, k) == "other"            # no broadcast
    assert exchange_taken({"broadcast": [1, 400], "allreduce": [1, 4000]}, k) == "other"
    assert exchange_taken({"allgather": [2, 816]}, k) == "other"            # ragged: + sizes
    assert exchange_taken({"allgather": [1, 800]}, 99) == "other"           # another density


def _exchanges(ctx, collective):
    from lab.train import TrainConfig
    from lab.train.loop import train_rank
    cfg = TrainConfig(aggregator="artopk", steps=4, eval_every=0,
                      aggregator_kw=dict(density=0.05, collective=collective))
    return train_rank(ctx, cfg)


@pytest.mark.parametrize("collective, path", [("ring", "ar"), ("tree", "ar"),
                                              ("allgather", "allgather")])
def test_exchanges_of_a_training_run(collective, path):
    from lab.adaptive import ar_fraction, exchanges
    h = launch(_exchanges, 2, collective)[0]
    n = round(h.series["k"][0] / 0.05)
    got = exchanges(h, n, 0.05)
    assert got == [path] * 4 and ar_fraction(got) == (1.0 if path == "ar" else 0.0)
    assert exchanges(h, n, 0.1) == ["other"] * 4     # the bytes of another density do not pass


# -- the authors' schedule, rescaled -----------------------------------------------------------
def test_authors_schedule_keeps_the_ratio_of_latency_to_bandwidth_time():
    from lab.adaptive import authors_schedule
    from lab.adaptive.schedule import AUTHORS_PHASES, RESNET50_PARAMS
    from lab.comm import NetworkSchedule
    full = NetworkSchedule.parse(authors_schedule(2))
    small = NetworkSchedule.parse(authors_schedule(2, n=20_000, time_scale=0.25))
    assert len(small.segments) == 12 and small.at(23) == small.segments[-1][0]
    for (ms, gbps), (net, steps), (big, _) in zip(AUTHORS_PHASES, small.segments, full.segments):
        assert steps == 2 and big.latency == pytest.approx(ms * 1e-3)
        assert big.bandwidth == pytest.approx(gbps * 1e9 / 8)
        # the small model's message on the small link: both terms scaled by the same factor
        assert net.latency == pytest.approx(0.25 * big.latency)
        assert 4 * 20_000 / net.bandwidth == pytest.approx(
            0.25 * 4 * RESNET50_PARAMS / big.bandwidth, rel=1e-5)
    with pytest.raises(ValueError):
        authors_schedule(0)


def test_static_artopk_warms_up_like_the_adaptive_one():
    agg = make("artopk", Collective(), density=0.1, warmup_steps=4)
    seen = []
    for step in range(6):
        agg.aggregate([torch.randn(1000)], step)
        seen.append((agg.info()["density"], agg.info()["warmup"]))
    assert [d for d, _ in seen] == pytest.approx([1.0, 0.7, 0.4, 0.1, 0.1, 0.1])
    assert [w for _, w in seen] == [True] * 4 + [False] * 2
