"""Quantizing aggregators in real processes: majority vote, Signum, Dist-EF-SGD, TernGrad
with a shared scaler. Two launches in all (world 3, then world 2 for tied votes); each rank
returns what it saw, and the caller checks it against a from-scratch recomputation, since
every rank's gradient comes from a seed the caller knows too."""
from __future__ import annotations

import math

import pytest
import torch

import lab
from lab import aggregate
from lab.aggregate.dist_ef_sgd import block_compress, block_decompress
from lab.aggregate.terngrad_shared import pack_fields, unpack_fields

N, BLOCK, STEPS = 1001, 64, 3  # 7 x 143, not divisible by 3 or 2: uneven server chunks


def grad(rank, step, n=N):
    g = torch.randn(n, generator=torch.Generator().manual_seed(1000 * step + rank))
    g[::97] = 0.0  # exact zeros must vote +1, not vanish
    return g


def sign1(x):
    return torch.where(x >= 0, 1.0, -1.0)


def worker(ctx, n, steps):
    comm, out = ctx.comm, {}
    mv = aggregate.make("majority_vote", comm)
    out["vote"] = mv.aggregate([grad(ctx.rank, 0, n)], 0)[0]
    out["vote_bytes"] = [r.bytes for r in comm.ledger.records if r.tag == "signs"]
    sg = aggregate.make("signum", comm, beta=0.8)
    out["signum"] = [sg.aggregate([grad(ctx.rank, t, n)], t)[0] for t in range(steps)]
    de = aggregate.make("dist_ef_sgd", comm, block_size=BLOCK)
    out["dist"] = []
    for t in range(steps):
        e_old = de.worker_error.get("flat", torch.zeros(n)).clone()
        se_old = de.server_error.get("flat")
        upd = de.aggregate([grad(ctx.rank, t, n).view(7, -1)], t)[0]  # a 2-D "layer"
        out["dist"].append(dict(update=upd.reshape(-1), e_old=e_old,
                                e_new=de.worker_error["flat"].clone(),
                                se_old=None if se_old is None else se_old.clone(),
                                se_new=de.server_error["flat"].clone()))
    tg = aggregate.make("terngrad_shared", comm, clip=None, seed=ctx.rank)
    v = grad(ctx.rank, 0, 64)
    mark = len(comm.ledger.records)
    out["tern"] = tg.aggregate([v.repeat(4000)], 0)[0].view(4000, 64)
    out["tern_bytes"] = [(r.tag, r.bytes) for r in comm.ledger.records[mark:]]
    return out


@pytest.fixture(scope="module")
def world3():
    return lab.launch(worker, 3, N, STEPS, progress=False)


def test_majority_vote_is_sign_of_summed_signs(world3):
    votes = sum(sign1(grad(r, 0)) for r in range(3))
    for res in world3:  # every rank gets the same update direction, not divided by 3
        assert torch.equal(res["vote"], torch.sign(votes))
        assert set(res["vote"].unique().tolist()) <= {-1.0, 1.0}  # odd world: no ties
        assert res["vote_bytes"] == [math.ceil(N / 8)]  # packed bits on the wire


def test_signum_votes_on_momentum(world3):
    m = [torch.zeros(N) for _ in range(3)]
    for t in range(STEPS):
        m = [0.8 * m[r] + 0.2 * grad(r, t) for r in range(3)]
        want = torch.sign(sum(sign1(mr) for mr in m))
        for res in world3:
            assert torch.equal(res["signum"][t], want)


def _chunks(x, world):
    return x.split([c.numel() for c in torch.tensor_split(torch.empty(x.numel()), world)])


def _cd(x):
    """Blockwise scaled sign, compress then decompress."""
    return block_decompress(*block_compress(x, BLOCK), x.numel(), BLOCK)


def test_dist_ef_sgd_error_feedback_identities(world3):
    world = 3
    for t in range(STEPS):
        steps = [res["dist"][t] for res in world3]
        sent = []
        for r, st in enumerate(steps):  # worker side: g + e_old = D(C(g + e_old)) + e_new
            p = grad(r, t) + st["e_old"]
            d = torch.cat([_cd(c) for c in _chunks(p, world)])
            assert torch.allclose(p, d + st["e_new"], atol=1e-6)
            sent.append(d)
        server_out = []
        for j, st in enumerate(steps):  # server side, rank j serves chunk j
            avg = sum(_chunks(s, world)[j] for s in sent) / world
            se_old = torch.zeros_like(avg) if st["se_old"] is None else st["se_old"]
            p = avg + se_old
            assert torch.allclose(p, _cd(p) + st["se_new"], atol=1e-6)
            server_out.append(_cd(p))
        for st in steps:  # everyone applies the same, twice-compressed update
            assert torch.allclose(st["update"], torch.cat(server_out), atol=1e-6)


def test_terngrad_shared_scaler_unbiased_and_packed(world3):
    vs = [grad(r, 0, 64) for r in range(3)]
    s = max(v.abs().max() for v in vs)
    mean = sum(vs) / 3
    for res in world3:
        y = res["tern"].double()
        assert torch.equal(y, world3[0]["tern"])  # the same sum on every rank
        k = y * 3 / s  # integer vote counts in [-3, 3]
        assert torch.allclose(k, k.round(), atol=1e-4) and k.abs().max() <= 3 + 1e-4
        se = y.std(0) / math.sqrt(y.shape[0])
        assert ((y.mean(0) - mean).abs() <= 5 * se + 1e-6).all()
        n = 64 * 4000
        assert res["tern_bytes"] == [("terngrad:scaler", 4),
                                     ("terngrad:codes", 8 * math.ceil(n / 21))]  # 3 bits/value


def test_field_packing_sums_without_carry():
    u = torch.randint(0, 3, (1000,), generator=torch.Generator().manual_seed(0))
    w = pack_fields(u, 3)
    assert torch.equal(unpack_fields(w + w + w, 3, 1000), 3 * u)


def worker_ties(ctx):
    comm = ctx.comm
    g = torch.tensor([1.0, -1.0, 0.0, 2.0]) * (1 if ctx.rank == 0 else -1)
    vote = aggregate.make("majority_vote", comm).aggregate([g], 0)[0]
    tiny = aggregate.make("dist_ef_sgd", comm).aggregate([torch.tensor([0.5])], 0)[0]
    return vote, tiny


def test_world2_ties_and_tiny_tensor():
    (v0, t0), (v1, t1) = lab.launch(worker_ties, 2, progress=False)
    # rank 1 sends -0.0 for the zero, which still votes +1: the tie is only at 1, -1, 2
    assert torch.equal(v0, torch.tensor([0.0, 0.0, 1.0, 0.0])) and torch.equal(v0, v1)
    # one value, two servers: rank 1's chunk is empty; mean of two +0.5 is 0.5
    assert torch.equal(t0, torch.tensor([0.5])) and torch.equal(t1, t0)


def _corrupt_receipts(comm, method, corrupt):
    """Corrupt what ``comm.method`` delivers on this rank (after a real transfer): every
    rank does it, so all raise at the same point and none waits on a collective."""
    real = getattr(comm, method)

    def patched(*args, **kw):
        return corrupt(real(*args, **kw))
    setattr(comm, method, patched)
    return real


def _nan_scale(messages):
    bad = [m.clone() for m in messages]
    bad[-1][:4] = torch.tensor([math.nan]).view(torch.uint8)  # the first block's scale
    return bad


def worker_corrupt(ctx):
    """Dist-EF-SGD with corrupted peer messages, up (alltoall) and down (allgather): each
    rank returns the (part, message) of the PayloadError it raised, or None."""
    from lab.compress import PayloadError
    comm, seen = ctx.comm, []
    cases = [("alltoall", lambda ms: [m[:-1] for m in ms]),            # a message cut short
             ("alltoall", _nan_scale),                                 # a NaN block scale
             ("allgather_payload", lambda ps: [(s[:-1], sc) for s, sc in ps]),  # signs cut
             ("allgather_payload", lambda ps: [(s, -sc) for s, sc in ps]),      # scales < 0
             ("allgather_payload", lambda ps: [(s, sc.double()) for s, sc in ps])]
    for method, corrupt in cases:
        de = aggregate.make("dist_ef_sgd", comm, block_size=BLOCK)
        real = _corrupt_receipts(comm, method, corrupt)
        try:
            de.aggregate([grad(ctx.rank, 0, 300)], 0)
            seen.append(None)
        except PayloadError as err:
            seen.append((err.codec, err.part, str(err)))
        finally:
            setattr(comm, method, real)
    return seen


def test_dist_ef_sgd_names_a_corrupted_peer_payload():
    for seen in lab.launch(worker_corrupt, 2, progress=False):
        assert [s and s[:2] for s in seen] == [
            ("dist_ef_sgd", "message"), ("dist_ef_sgd", "scales"), ("dist_ef_sgd", "signs"),
            ("dist_ef_sgd", "scales"), ("dist_ef_sgd", "scales")], seen
        assert "got entries in [nan" in seen[1][2] and "dtype torch.float64" in seen[4][2]
