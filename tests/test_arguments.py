"""Every argument checked where it is given (issue 44): one declaration per argument
(:mod:`lab.argspec`), used by every registered factory, the configs and the command line.

Property-based (hypothesis): for every argument of every registry entry, values of the wrong
type and out of range raise an error that names the argument and its owner; valid values pass
and round-trip; the command line and the Python API accept the same values. Also: the strict
``Network.parse``, the codecs' values at the edges, tampered payloads, and the compress
package without an import circle."""
from __future__ import annotations

import ast
import dataclasses
import math
import pathlib

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from lab import aggregate, attack, averaging, compress, data, models, schedule, sync
from lab.argspec import Arg, ArgumentError, ArgumentTypeError, settings as declared_settings, takes
from lab.comm import Collective, Network
from lab.compress import PayloadError
from lab.pipeline.config import PipelineConfig
from lab.registry import _arguments
from lab.run.config import TrainConfig

FAST = settings(max_examples=8, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

#: registry -> what lab passes a factory itself (never a user's argument)
REGISTRIES = {compress.REGISTRY: (), aggregate.REGISTRY: ("comm", "compressor"),
              attack.REGISTRY: ("engine",), averaging.REGISTRY: ("engine",),
              schedule.REGISTRY: ("engine",), sync.REGISTRY: ("workers",),
              models.REGISTRY: ("data",), data.REGISTRY: ()}

ENTRIES = [(reg, name) for reg in REGISTRIES for name in reg.names()]
ARGUMENTS = [(reg, name, arg, spec) for reg, name in ENTRIES
             for arg, spec in reg.arguments(name).items() if arg not in REGISTRIES[reg]]


def _id(p):
    return p.kind.replace(" ", "_") if hasattr(p, "kind") and hasattr(p, "names") else \
        p if isinstance(p, str) else ""


# -- strategies from a declaration ---------------------------------------------------------------
def _numeric(spec: Arg) -> bool:
    return spec.type in (int, float)


def wrong_type(spec: Arg):
    """Values no declaration of this type accepts: bools for numbers, numbers for bools,
    strings for numbers (never converted), None where None is not declared, containers."""
    t = spec.type
    options = [st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2),
                                                                    st.integers(), max_size=1)]
    if t is int:
        options += [st.booleans(), st.text(max_size=4), st.floats(allow_nan=False).filter(
            lambda v: v != int(v) if math.isfinite(v) else True), st.just(1.0)]
    elif t is float:
        options += [st.booleans(), st.text(max_size=4), st.just("0.1"), st.just(1j)]
    elif t is bool:
        options += [st.integers(), st.floats(), st.text(max_size=4), st.just("false")]
    elif t is str:
        options += [st.integers(), st.booleans(), st.floats()]
    elif t is tuple:
        options = [st.integers(), st.floats(), st.booleans(), st.dictionaries(
            st.text(max_size=2), st.integers(), max_size=1)]
    else:
        options += [st.integers(), st.floats(), st.booleans()]
    if not spec.none:
        options.append(st.none())
    also = [a for a in spec.also]
    return st.one_of(options).filter(lambda v: not any(v == a and type(v) is type(a)
                                                       for a in also))


def out_of_range(spec: Arg):
    """Numbers of the right type outside the declared range (and NaN/Inf for a finite
    float), or strings that are not among the choices."""
    options = []
    lo = spec.gt if spec.gt is not None else spec.ge
    hi = spec.lt if spec.lt is not None else spec.le
    if spec.type is int:
        if lo is not None:
            options.append(st.integers(max_value=lo - (spec.gt is None)))
        if hi is not None:
            options.append(st.integers(min_value=hi + (spec.lt is None)))
    elif spec.type is float:
        options.append(st.just(math.nan))
        if spec.finite:
            options.append(st.sampled_from([math.inf, -math.inf]))
        if lo is not None:
            options.append(st.floats(max_value=lo, exclude_max=spec.gt is None,
                                     allow_nan=False))
        if hi is not None:
            options.append(st.floats(min_value=hi, exclude_min=spec.lt is None,
                                     allow_nan=False))
    elif spec.type is str and spec._choices() is not None:
        choices = spec._choices()
        options.append(st.text(max_size=8).filter(lambda v: v not in choices))
    if not options:
        return None
    also = spec.also
    return st.one_of(options).filter(lambda v: not any(v == a and type(v) is type(a)
                                                       for a in also))


def valid(spec: Arg, cap: int = 64):
    """Values the declaration accepts, kept small (``cap``) so a codec built with them runs
    in microseconds."""
    options = []
    if spec.type is int:
        lo = spec.ge if spec.ge is not None else (spec.gt + 1 if spec.gt is not None else -cap)
        hi = spec.le if spec.le is not None else (spec.lt - 1 if spec.lt is not None else lo + cap)
        options.append(st.integers(lo, max(lo, min(hi, lo + cap - 1))))
    elif spec.type is float:
        lo = spec.ge if spec.ge is not None else spec.gt if spec.gt is not None else -10.0
        hi = spec.le if spec.le is not None else spec.lt if spec.lt is not None else lo + 10.0
        hi = min(hi, lo + 10.0)
        options.append(st.floats(lo, hi, exclude_min=spec.gt is not None,
                                 exclude_max=spec.lt is not None or spec.le is None,
                                 allow_nan=False))
        if spec.ge is not None and spec.ge == int(spec.ge):
            options.append(st.just(int(spec.ge)))  # an int is a number
    elif spec.type is bool:
        options.append(st.booleans())
    elif spec._choices() is not None:
        options.append(st.sampled_from(list(spec._choices())))
    if spec.none:
        options.append(st.none())
    return st.one_of(options) if options else None


def _names_it(err: Exception, owner: str, arg: str) -> bool:
    text = str(err)
    return owner in text and arg in text


# -- every argument of every registry entry ------------------------------------------------------
def test_every_argument_of_every_entry_is_declared():
    """No registered factory takes an argument it does not declare (type, range, meaning)."""
    missing = []
    for reg, name in ENTRIES:
        for arg in _arguments(reg.get(name)) or []:
            if arg not in REGISTRIES[reg] and arg not in ("engine", "byzantine") \
                    and arg not in reg.arguments(name):
                missing.append(f"{reg.kind} {name}: {arg}")
    assert not missing, missing
    assert len(ARGUMENTS) > 150


def test_defaults_pass_their_declarations():
    import inspect
    for reg, name in ENTRIES:
        for arg, spec in reg.arguments(name).items():
            factory = reg.get(name)
            fn = factory.__init__ if isinstance(factory, type) else factory
            p = inspect.signature(fn).parameters.get(arg)
            if arg in REGISTRIES[reg]:
                continue  # lab passes it (the compressed aggregator's codec)
            if p is not None and p.default is not p.empty:
                spec.check(p.default, arg, name)


@pytest.mark.parametrize("reg, name, arg, spec", ARGUMENTS,
                         ids=[f"{r.kind}-{n}-{a}" for r, n, a, _ in ARGUMENTS])
@FAST
@given(data=st.data())
def test_wrong_type_is_refused_naming_the_argument(reg, name, arg, spec, data):
    value = data.draw(wrong_type(spec))
    with pytest.raises(TypeError) as err:  # an ArgumentTypeError: a ValueError too
        reg.check_arguments(name, {arg: value}, REGISTRIES[reg])
    assert isinstance(err.value, ValueError) and _names_it(err.value, name, arg), err.value


RANGED = [a for a in ARGUMENTS if out_of_range(a[3]) is not None]


@pytest.mark.parametrize("reg, name, arg, spec", RANGED,
                         ids=[f"{r.kind}-{n}-{a}" for r, n, a, _ in RANGED])
@FAST
@given(data=st.data())
def test_out_of_range_is_refused_naming_the_argument(reg, name, arg, spec, data):
    value = data.draw(out_of_range(spec))
    with pytest.raises(ValueError) as err:
        reg.check_arguments(name, {arg: value}, REGISTRIES[reg])
    assert _names_it(err.value, name, arg) and spec.accepted() in str(err.value), err.value


CODEC_ARGS = [a for a in ARGUMENTS if a[0] is compress.REGISTRY and valid(a[3]) is not None
              and a[1] != "ef"]


@pytest.mark.parametrize("reg, name, arg, spec", CODEC_ARGS,
                         ids=[f"{n}-{a}" for _, n, a, _ in CODEC_ARGS])
@FAST
@given(data=st.data())
def test_valid_codec_arguments_round_trip(reg, name, arg, spec, data):
    value = data.draw(valid(spec))
    kw = {arg: value}
    if name == "atomo" and arg == "budget" and value is None:
        kw["density"] = 0.5  # budget=None needs a density (the rule across the two)
    reg.check_arguments(name, kw)
    codec = compress.make(name, **kw)
    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    payload, ctx = codec.compress(x)
    out = codec.decompress(payload, ctx)
    assert out.shape == x.shape and torch.isfinite(out).all()


def test_wrong_codec_arguments_are_refused_when_built_too():
    """The constructor itself checks (``TopK(...)``, not only ``make``), naming the codec."""
    from lab.compress.dgc import DGC
    from lab.compress.topk import TopK
    with pytest.raises(TypeError, match=r"dgc: momentum must be a finite number in \[0, 1\), "
                                        r"got 'abc' \(str\)"):
        DGC(momentum="abc")
    for kw in (dict(momentum=False), dict(momentum_correction=2)):
        with pytest.raises(TypeError, match=r"dgc: momentum.* must be .*\((bool|int)\)$"):
            DGC(**kw)
    with pytest.raises(ValueError, match=r"topk: density must be .* got 2"):
        TopK(density=2)
    with pytest.raises(ValueError, match=r"adacomp: bin_size must be an int in \[1, 2\*\*20\]"):
        compress.make("adacomp", bin_size=10 ** 12)
    with pytest.raises(TypeError, match="adacomp: seed"):
        compress.make("adacomp", seed=True)
    with pytest.raises(TypeError, match="keyword arguments"):
        compress.ErrorFeedback(compress.make("topk"), density=0.1)  # would be ignored


AGG_ARGS = [a for a in ARGUMENTS if a[0] is aggregate.REGISTRY and valid(a[3]) is not None
            and a[2] != "layerwise" and a[1] not in ("allreduce", "compressed")]


@pytest.mark.parametrize("reg, name, arg, spec", AGG_ARGS,
                         ids=[f"{n}-{a}" for _, n, a, _ in AGG_ARGS])
@settings(max_examples=4, deadline=None, database=None)
@given(data=st.data())
def test_valid_aggregator_arguments_build(reg, name, arg, spec, data):
    value = data.draw(valid(spec))
    kw = {arg: value}
    if name == "adaptive_topk" and arg == "method" and value == "nsga2":
        kw["method"] = "grid"  # pymoo's import is slow; the choice is checked all the same
    reg.check_arguments(name, kw, REGISTRIES[reg])
    agg = aggregate.make(name, comm=Collective(), **kw)
    assert isinstance(agg, aggregate.Aggregator)


def test_declarations_across_arguments():
    with pytest.raises(ValueError, match="atomo: give budget or density"):
        compress.make("atomo", budget=None)
    with pytest.raises(ValueError, match=r"gpt: dim \(10\) must be divisible by heads \(3\)"):
        models.REGISTRY.check_arguments("gpt", {"dim": 10, "heads": 3}, ("data",))
    with pytest.raises(ValueError, match="easgd: give rho or beta, not both"):
        averaging.REGISTRY.check_arguments("easgd", {"rho": 1.0, "beta": 0.5}, ("engine",))
    with pytest.raises(ValueError, match="krum: robust rules act on the whole gradient"):
        aggregate.make("krum", comm=Collective(), layerwise=True)


def test_a_declaration_names_what_its_factory_does_not_take_at_import():
    with pytest.raises(TypeError, match="declares"):
        @takes(nope=Arg(int))
        def f(x: int = 0):
            return x


@FAST
@given(st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3),
                 st.none()))
def test_an_arg_never_coerces(value):
    """What passes is returned as it is; a bool is never a number, a string never one."""
    for spec in (Arg(int, ge=0), Arg(float, gt=0), Arg(bool), Arg(str)):
        try:
            out = spec.check(value, "x", "f")
        except ArgumentError as e:
            assert "f: x must be" in str(e) and isinstance(e, ValueError)
            continue
        assert out is value
        if spec.type in (int, float):
            assert not isinstance(value, (bool, str))


# -- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [TrainConfig, PipelineConfig])
def test_every_config_field_is_declared(config):
    """A field is one line with its declaration (``setting(default, Arg(...))``)."""
    fields = [f.name for f in dataclasses.fields(config)]
    assert list(declared_settings(config)) == fields


@pytest.mark.parametrize("kw, error, match", [
    (dict(lr="0.1"), TypeError, r"TrainConfig: lr must be a finite number > 0, got '0.1' \(str\)"),
    (dict(lr=None), TypeError, "lr"),
    (dict(momentum="a"), TypeError, "momentum"),
    (dict(weight_decay=-1), ValueError, "weight_decay"),
    (dict(seed="a"), TypeError, "seed"),
    (dict(layerwise="yes"), TypeError, "layerwise"),
    (dict(error_feedback="no"), TypeError, "error_feedback"),
    (dict(batch_size=4096), ValueError, r"batch_size \(4096\) exceeds the \d+ training examples"),
    (dict(model_kw={"hiden": 3}), TypeError, "model_kw: .*'hiden'; did you mean 'hidden'"),
    (dict(data_kw={"n": 10}), TypeError, "data_kw: .*unknown argument 'n'"),
    (dict(aggregator="signum", aggregator_kw={"beta": 2}), ValueError, "aggregator_kw: signum: beta"),
    (dict(model="gpt"), ValueError, "model='gpt' does not fit data='digits'"),
    (dict(compressor="dgc", compressor_kw={"warmup": "false"}), TypeError,
     "compressor_kw: dgc: warmup must be True or False"),
    (dict(attack="alie", byzantine=1), ValueError, "knowledge='own'.*byzantine >= 2"),
    (dict(aggregator="median", layerwise=True, batch_size=12), ValueError, "whole gradient"),
    (dict(optimizer="adam", momentum=0.9), ValueError, "momentum"),
    (dict(network="100Mbps,2"), ValueError, "network: .*needs a unit"),
    (dict(jitter=math.inf), ValueError, "jitter"),
    (dict(schedule="fifo", schedule_kw={"slice_size": 10}), ValueError, "not an option"),
])
def test_train_config_refuses_at_the_line_that_made_it(kw, error, match):
    with pytest.raises(error, match=match):
        TrainConfig(**kw)


@pytest.mark.parametrize("kw, match", [
    (dict(lr="1e-3"), "lr"), (dict(beta1=True), "beta1"), (dict(stages="4"), "stages"),
    (dict(model="mlp"), "does not fit"), (dict(dp="sparse-avg", replicas=2, dp_kw={"fracton": 0.1},
                                                batch_size=16), "did you mean 'fraction'"),
    (dict(schedule="async-nesterov", schedule_kw={"momentum": 1.5}), "momentum"),
    (dict(optimizer="sgd", beta1=0.9), "beta1"), (dict(model_kw={"heads": 3}), "divisible"),
])
def test_pipeline_config_refuses_when_made(kw, match):
    with pytest.raises(ValueError, match=match):
        PipelineConfig(**kw)


# -- the command line and the Python API agree -------------------------------------------------
TRAIN_FLAGS = {"steps": "--steps", "batch_size": "--batch-size", "lr": "--lr",
               "momentum": "--momentum", "jitter": "--jitter", "byzantine": "--byzantine",
               "eval_every": "--eval-every", "seed": "--seed"}
_TEXT = st.one_of(st.integers(-3, 3000).map(str), st.floats(allow_nan=True).map(repr),
                  st.sampled_from(["abc", "1e400", "nan", "inf", "-0", "0x10", "1_000", " 3",
                                   "true", "1.0", "0.5", "1e3", ""]))


def _python(text: str):
    """The value the text means in Python: an int, else a float, else the text itself."""
    for read in (int, float):
        try:
            return read(text)
        except ValueError:
            pass
    return text


def _cli_accepts(argv) -> bool:
    from lab.cli import train as cli_train
    try:
        a = cli_train.parser().parse_args(argv)
    except SystemExit:
        return False
    try:
        cli_train.config(a)
    except (TypeError, ValueError):
        return False
    return True


def _api_accepts(**kw) -> bool:
    try:
        TrainConfig(**kw)
    except (TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize("field", list(TRAIN_FLAGS))
@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT)
def test_the_command_line_and_the_api_accept_the_same_values(field, text, capsys):
    extra = {"byzantine": dict(attack="signflip")}.get(field, {})
    argv = [f"{TRAIN_FLAGS[field]}={text}"] + (["--attack", "signflip"] if extra else [])
    cli = _cli_accepts(argv)
    api = _api_accepts(**{field: _python(text)}, **extra)
    capsys.readouterr()  # argparse's messages
    assert cli == api, (field, text, cli, api)


@pytest.mark.parametrize("item, ok", [("density=0.5", True), ("density=abc", False),
                                      ("density=2", False), ("densty=0.1", False)])
def test_keyword_flags_are_checked_by_the_same_declaration(item, ok, capsys):
    assert _cli_accepts(["--compressor", "topk", "--compressor-kw", item]) is ok
    k, _, v = item.partition("=")
    try:
        value = ast.literal_eval(v)
    except ValueError:
        value = v
    assert _api_accepts(compressor="topk", compressor_kw={k: value}) is ok
    capsys.readouterr()


def test_a_command_line_spells_booleans_and_infinity():
    from lab.cli.args import key_value
    assert key_value("warmup=false") == ("warmup", False)
    assert key_value("staleness=inf") == ("staleness", math.inf)
    assert _cli_accepts(["--compressor", "dgc", "--compressor-kw", "warmup=False"])


@FAST
@given(lo=st.integers(-5, 5), text=_TEXT)
def test_cli_number_types_are_the_declaration(lo, text):
    from lab.cli.args import integer, number
    import argparse
    for make_type, spec in ((integer(lo), Arg(int, ge=lo)),
                            (number(lo, lo_open=True), Arg(float, gt=lo))):
        try:
            got, cli = make_type(text), True
        except argparse.ArgumentTypeError:
            cli = False
        try:
            spec.parse(text)
            api = True
        except ArgumentError:
            api = False
        assert cli == api
        if cli:
            assert got == spec.parse(text)


# -- Network.parse -------------------------------------------------------------------------------
@FAST
@given(value=st.floats(0.01, 999), prefix=st.sampled_from(["k", "M", "G", "m", "g", "T"]),
       latency=st.floats(0, 50))
def test_network_units_in_bits_and_bytes(value, prefix, latency):
    scale = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[prefix.lower()]
    for bits_unit, bytes_unit in (("bps", "Bps"), ("b/s", "B/s")):
        spec = f"{value!r}{prefix}{bits_unit},{latency!r}ms"
        if not 1e3 <= value * scale <= 1e15:
            with pytest.raises(ValueError, match="out of range"):
                Network.parse(spec)
            continue
        bits = Network.parse(spec)
        assert bits.bandwidth == pytest.approx(value * scale / 8)
        assert bits.latency == pytest.approx(latency * 1e-3)
        if value * scale * 8 <= 1e15:
            byte = Network.parse(f"{value!r}{prefix}{bytes_unit},{latency!r}ms")
            assert byte.bandwidth == pytest.approx(8 * bits.bandwidth)
            assert "b/s" in byte.label  # labelled in bits


@pytest.mark.parametrize("spec, match", [
    ("1e400Gbps", "out of range"), ("1Gbps,1e400s", "out of range"), ("1e-300bps", "out of range"),
    ("1-2Gbps", "not understood"), ("100Mbps,2", "needs a unit"), ("1Gbps,", "not understood"),
    ("1Gbps,2parsecs", "not understood"), ("nanGbps", "not understood"), (7, "string"),
])
def test_network_refuses_what_it_cannot_mean(spec, match):
    with pytest.raises(ValueError, match=match):
        Network.parse(spec)


def test_network_reads_gigabytes_as_bytes():
    assert Network.parse("1GBps").bandwidth == 1e9 and Network.parse("1GB/s").bandwidth == 1e9
    assert Network.parse("1Gbps").bandwidth == 1.25e8 == Network.parse("1gbps").bandwidth
    assert Network.parse("100MBps").bandwidth == 1e8
    for kw in (dict(latency=True, bandwidth=1e9), dict(latency=0.0, bandwidth=math.inf),
               dict(latency=0.0, bandwidth=1e-300), dict(latency=math.nan, bandwidth=1e9)):
        with pytest.raises(ValueError, match="Network: (latency|bandwidth)"):
            Network(**kw)


def test_the_cli_says_the_latency_needs_a_unit():
    import argparse
    from lab.cli.args import network_type
    with pytest.raises(argparse.ArgumentTypeError, match="needs a unit"):
        network_type()("100Mbps,2")


# -- values at the edges -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["qsgd", "qsgd_elias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_qsgd_norm_does_not_underflow(name, dtype):
    x = torch.zeros(100, dtype=dtype)
    x[3], x[7] = 3.75e-30, -1e-30
    codec = compress.make(name)
    torch.manual_seed(0)
    outs = torch.stack([codec.decompress(*codec.compress(x)) for _ in range(200)])
    assert outs.abs().max() > 0  # not all zeros
    assert outs.mean(0)[3].item() == pytest.approx(3.75e-30, rel=0.2)  # unbiased


def test_qsgd_small_path_and_general_route_agree_on_tiny_norms():
    from lab.compress import native_small
    x = torch.randn(1000) * 1e-21
    x[:512] *= 1e10  # one bucket of ordinary values, one whose squares underflow
    a, b = compress.make("qsgd", seed=3), compress.make("qsgd", seed=3)
    pa, _ = a.compress(x)
    with native_small.general():
        pb, _ = b.compress(x)
    assert all(torch.equal(u, v) for u, v in zip(pa, pb))
    assert pa[0][1] > 0


def test_countsketch_refuses_a_cast_that_overflows():
    codec = compress.make("countsketch", rows=3, width=16)
    with pytest.raises(OverflowError, match="countsketch"):
        codec.compress(torch.full((10,), 1e300, dtype=torch.float64))
    with pytest.raises(OverflowError, match="countsketch"):
        codec.compress(torch.full((10,), 3e38))  # the counters' sums
    with pytest.raises(FloatingPointError):
        codec.compress(torch.tensor([1.0, math.nan]))


@pytest.mark.parametrize("atoms", ["svd", "coordinate"])
@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0)])
def test_atomo_on_an_empty_tensor(atoms, shape):
    codec = compress.make("atomo", atoms=atoms)
    payload, ctx = codec.compress(torch.zeros(shape))
    assert compress.wire_bytes(payload) == 0
    assert codec.decompress(payload, ctx).shape == shape


# -- tampered payloads are refused by the declared format ----------------------------------------
def test_atomo_with_either_part_truncated_is_refused():
    codec = compress.make("atomo", budget=3)
    (us, v), ctx = codec.compress(torch.randn(10, 6, generator=torch.Generator().manual_seed(1)))
    assert us.shape[1] >= 2
    for payload in ((us.reshape(-1)[:-1], v), (us, v.reshape(-1)[:-1]),
                    (us[:, :-1], v), (us, v[:, :-1])):
        with pytest.raises(PayloadError):
            codec.decompress(payload, ctx)


def test_countsketch_with_its_table_truncated_is_refused():
    codec = compress.make("countsketch", rows=3, width=16)
    (table,), ctx = codec.compress(torch.randn(100))
    for bad in (table[:-1], table.reshape(-1)[:-1], table.reshape(-1)[:16]):
        with pytest.raises(PayloadError, match="table"):
            codec.decompress((bad,), ctx)


def test_sketchml_with_a_key_past_the_tensor_is_refused():
    codec = compress.make("sketchml")
    x = torch.zeros(10 ** 6 + 1)
    x[5], x[10 ** 6] = 1.0, 2.0
    payload, _ = codec.compress(x)
    _, small = codec.compress(torch.randn(1000))
    ctx = (torch.Size([1000]), torch.float32, small[2])  # a peer's payload for n = 1000
    with pytest.raises(PayloadError, match="key"):
        codec.decompress(payload, ctx)


# -- the compress package has no import circle ---------------------------------------------------
def test_compress_has_no_import_circle():
    pkg = pathlib.Path(compress.__file__).parent
    graph = {}
    for f in pkg.glob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):  # lazy imports inside functions too
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module.split(".")[0]} if node.module else \
                    {a.name for a in node.names}
        graph[f.stem] = deps - {f.stem}
    graph.pop("__init__")
    seen, done = set(), set()

    def visit(m, path):
        assert m not in seen - done, f"import circle: {' -> '.join(path)}"
        if m in done:
            return
        seen.add(m)
        for d in graph.get(m, ()):
            visit(d, path + [d])
        done.add(m)
    for m in sorted(graph):
        visit(m, [m])
    assert "base" not in graph["wire"] and "randomk" not in graph["native_small"]


def test_errors_are_both_kinds():
    """A type error is a ValueError too, so code that catches ValueError for any refused
    setting keeps working; a range error is a ValueError."""
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ValueError)
    assert issubclass(ArgumentError, ValueError) and not issubclass(ArgumentError, TypeError)
