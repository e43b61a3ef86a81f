"""P3 on sharded parameter servers (``sync="p3-ps"``, issue 25 item 3): the same parameters as
``bsp`` on the server, pushes leave in priority order, every slice lives on its round-robin
server (ledger per rank), bad ``sync_kw`` is refused before launch."""
import pytest

from lab.schedule.plan import make_units
from lab.sync.p3_server import KEY_BYTES, homes
from lab.train import TrainConfig, train, train_many

CFG = TrainConfig(model="mlp", data="digits", steps=5, batch_size=24, lr=0.2, momentum=0.9,
                  eval_every=0)
SIZES = [64 * 64 + 64, 10 * 64 + 10]   # the mlp's layers in forward order
SLICE = 300


def ps(servers, slice_size=SLICE, priority=True, **kw):
    return CFG.with_(sync="p3-ps", sync_kw={"servers": servers, "slice_size": slice_size,
                                            "priority": priority}, **kw)


def test_same_parameters_as_bsp_on_the_server_for_one_and_two_servers():
    bsp = train(CFG.with_(sync="bsp"), 3)                 # 1 server + 2 workers
    one = train_many([ps(1, "inf"), ps(1), ps(1, priority=False)], 3)
    two = train(ps(2), 4)                                 # 2 servers + the same 2 workers
    for h in one + [two]:
        # the same per-worker batches and sums in the same order: bitwise equal, every step's
        # loss (computed by the workers on pulled parameters) and the final evaluation (of the
        # servers' slices, put together)
        assert h.loss == bsp.loss
        assert h.test_loss == bsp.test_loss and h.test_acc == bsp.test_acc
    assert bsp.loss[-1] < bsp.loss[0]


def test_pushes_leave_in_priority_order_and_fifo_in_arrival_order():
    slow = dict(network="100Mbps,10ms", steps=3)  # a slow link, so that slices queue up
    p3, fifo = train_many([ps(1, **slow), ps(1, priority=False, **slow)], 3)
    last = [k for k, layer in enumerate(p3.series["unit_layer"]) if layer == 1]
    overtaken = []
    for rows in p3.series["pushes"]:   # one row per push, in the order the worker sent them
        for step, key, seq, queued, sent, waiting in rows:
            assert all(key < w for w in waiting)   # the highest priority queued slice goes first
        for t in range(slow["steps"]):
            keys = [r[1] for r in rows if r[0] == t]
            seqs = [r[2] for r in rows if r[0] == t]
            assert sorted(keys) == list(range(len(last) + 14))
            # layer 0's slices, queued after the last layer's, overtook some of them
            overtaken.append(seqs != sorted(seqs) and keys.index(0) < keys.index(last[-1]))
    assert any(overtaken)
    for rows in fifo.series["pushes"]:
        assert [r[2] for r in rows] == sorted(r[2] for r in rows)  # first queued, first sent
        keys = [r[1] for r in rows if r[0] == 0]
        assert keys[:len(last)] == last            # backward order: the last layer first
    assert p3.loss == fifo.loss                    # the order changes no parameter


def test_every_slice_lands_on_its_round_robin_server():
    units = make_units(SIZES, SLICE)
    home = homes(units, SIZES, 2, SLICE)
    # sliced layers round-robin from server 0; the authors' rule, also for a small layer
    assert home == [j % 2 for j in range(14)] + [0, 1, 0]
    assert homes(make_units(SIZES, None), SIZES, 2, None) == [0, 9973 % 2]
    h = train(ps(2), 4)
    assert h.series["home"] == home
    assert h.series["keys_by_server"] == [[k for k in range(len(units)) if home[k] == s]
                                          for s in (0, 1)]
    n, steps = 2, CFG.steps
    msg = [4 * u.numel + KEY_BYTES for u in units]       # a key header, then the slice
    for s in (0, 1):   # a server sends each of its slices to every worker each step, then stop
        mine = sum(m for m, hs in zip(msg, home) if hs == s)
        assert h.rank_bytes[s] == steps * n * mine + n * KEY_BYTES
    for w in (2, 3):   # a worker pushes every slice once per step
        assert h.rank_bytes[w] == steps * sum(msg)
    assert sum(h.bytes) == steps * n * sum(m for m, hs in zip(msg, home) if hs == 0) + n * KEY_BYTES


@pytest.mark.parametrize("kw, workers, match", [
    (dict(sync_kw={"servers": 0}), 3, "servers"),
    (dict(sync_kw={"servers": "2"}), 3, "servers"),
    (dict(sync_kw={"servers": 3}), 3, "servers"),
    (dict(sync_kw={"slice_size": 0}), 3, "slice_size"),
    (dict(sync_kw={"slice_size": 2.5}), 3, "slice_size"),
    (dict(sync_kw={"priority": "yes"}), 3, "priority"),
    (dict(sync_kw={"bandwidth": 1}), 3, "bandwidth"),
    (dict(sync_kw={"servers": 2}, slow_ranks={1: 2.0}), 4, "slow_ranks"),
    (dict(sync_kw={"servers": 2}, batch_size=1), 4, "batch_size"),
    (dict(schedule="p3"), 3, "schedule"),
])
def test_bad_sync_kw_is_refused_before_launch(kw, workers, match):
    with pytest.raises(ValueError, match=match):
        CFG.with_(sync="p3-ps", **kw).check_workers(workers)


def test_the_emulated_links_carry_every_slice_on_time():
    """Rank 0's ledger books each slice at the link's alpha-beta time, and no step beats the
    server's downlink, which must carry every worker's slices one at a time."""
    from lab.comm import Network
    net, steps = Network.parse("10Mbps,1ms"), 6
    h = train(ps(1, network="10Mbps,1ms", steps=steps), 3)
    units = make_units(SIZES, SLICE)
    one_way = sum(net.time("send", 4 * u.numel, 3) for u in units)   # the model, slice by slice
    # per step the server receives the model from each of 2 workers and sends it to each
    assert h.modeled_comm_s == pytest.approx([2 * 2 * one_way] * steps, rel=1e-6)
    assert sum(h.step_s[1:]) >= (steps - 2) * 2 * one_way


# -- the paper's baseline (issue 39): MXNet's default KVStore on the same servers -------------
def test_kvstore_places_layers_whole_or_split_over_every_server_as_mxnet_does():
    from lab.sync.kvstore import kvstore_placement
    units, home = kvstore_placement([160, 2320, 262656, 5130], 2)
    assert [(u.layer, u.start, u.stop) for u in units] == [(0, 0, 160), (1, 0, 2320),
                                                           (2, 0, 262656), (3, 0, 5130)]
    assert home == [0, 9973 % 2, 2 * 9973 % 2, 3 * 9973 % 2]      # key * 9973 mod S
    units, home = kvstore_placement([10, 2_500_000], 3)           # a big array: S parts
    assert [(u.start, u.stop) for u in units[1:]] == [(0, 833333), (833333, 1666667),
                                                      (1666667, 2500000)]
    assert home == [0, 0, 1, 2]


def test_kvstore_and_colocated_servers_give_the_parameters_of_bsp():
    kv = [CFG.with_(sync="kvstore"), CFG.with_(sync="kvstore", sync_kw={"servers": 2})]
    bsp2 = train(CFG.with_(sync="bsp"), 3)                        # 1 server + 2 workers
    one, two = train(kv[0], 3), train(kv[1], 4)
    assert one.loss == two.loss == bsp2.loss
    assert one.series["unit_layer"] == [0, 1]                     # unsliced: one message a layer
    bsp3 = train(CFG.with_(sync="bsp"), 4)                        # 3 workers, like 3 co-located
    co = train_many([CFG.with_(sync="p3-ps", sync_kw={"colocated": True, "slice_size": SLICE}),
                     CFG.with_(sync="kvstore", sync_kw={"colocated": True})], 3)
    for h in co:
        assert h.loss == bsp3.loss and h.test_loss == bsp3.test_loss
    # every rank serves its share; a rank's own slices never cross the network
    units = make_units(SIZES, SLICE)
    home = co[0].series["home"]
    assert sorted(k for ks in co[0].series["keys_by_server"] for k in ks) == list(range(len(units)))
    for r in range(3):
        out = sum(4 * u.numel + KEY_BYTES for u, h in zip(units, home) if h != r)   # pushes
        back = 2 * sum(4 * u.numel + KEY_BYTES for u, h in zip(units, home) if h == r)  # replies
        assert co[0].rank_bytes[r] == CFG.steps * (out + back)


@pytest.mark.parametrize("kw, match", [({"colocated": True, "servers": 2}, "colocated"),
                                       ({"colocated": "yes"}, "colocated"),
                                       ({"bound": 0}, "bound")])
def test_bad_kvstore_and_colocated_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        CFG.with_(sync="kvstore", sync_kw=kw).check_workers(3)
