"""Native CPU kernels for the cores of the cast, sign, 1-bit, QSGD and TernGrad codecs, the
sparse codecs' checked scatter and the payload checks' ranges (``kernels.c``).

On the CPU, a codec written in torch or numpy is a chain of passes over the tensor (abs,
divide, scale, random bytes, add, compare, cast, pack), and QSGD's chain cost 20-30x a memory
copy. ``kernels.c`` does each chain in one vectorized pass (``python -m lab bench codecs``:
QSGD 7-9x a copy, TernGrad 9-12x, EF-SGD about 5x; a cast with its finiteness check, about 2x).
The random numbers come from a counter-based hash of (value index, a 64-bit key drawn from the
codec's seeded torch generator), so a seed still fixes the payload, and each value's draw is
independent of the others. Sums are taken in float64 here and in the CPU reference alike, so the deterministic
codecs give the same bits on both paths.

The C file is compiled with the system's C compiler (``$CC``, else ``cc``) on first use, into a
per-machine cache (``$LAB_CACHE_DIR``, else ``~/.cache/lab``); that takes about a second, once.
Where no compiler is found, or with ``LAB_NATIVE=0``, the codecs run their torch/numpy
reference, which the tests compare the kernels with. ``kernels_small.c`` and
``kernels_select.c``, included at the end of ``kernels.c`` (one translation unit), fuse whole
encodes and decodes for the codecs' small-tensor paths (issue 31 item 4); their wrappers are in
:mod:`lab.compress.native_small`.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import struct
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("kernels.c")
# -march=native is missing on some compilers; -ffp-contract=off: a product and a sum are
# rounded apart, as torch's separate ops round them (DGC's u = m u + g), never fused
_FLAGS = (["-O3", "-march=native", "-ffp-contract=off"], ["-O3", "-ffp-contract=off"])
_state: dict = {}


def enabled(x: torch.Tensor) -> bool:
    """Whether the kernels run for ``x``: a CPU tensor of < 2**31 values (the hash's counter
    is 32 bits), ``LAB_NATIVE`` not ``0`` (read once, at the first call), outside
    :func:`reference`, and the library built."""
    on = _state.get("on")
    if on is None:  # reading the environment costs ~1 us a call: small tensors pay it often
        on = _state["on"] = os.environ.get("LAB_NATIVE", "1") != "0" and library() is not None
    return on and x.is_cpu and x.numel() < 2 ** 31 and not _state.get("off")


@contextlib.contextmanager
def reference():
    """Run the codecs' torch reference instead of the kernels inside the block (this process;
    ``LAB_NATIVE=0`` does it for every process)."""
    before = _state.get("off", False)
    _state["off"] = True
    try:
        yield
    finally:
        _state["off"] = before


def library() -> ctypes.CDLL | None:
    """The compiled kernels, built on the first call; None where they cannot be built."""
    if "lib" not in _state:
        _state["lib"] = _load()
    return _state["lib"]


def _load() -> ctypes.CDLL | None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    errors = []
    for flags in _FLAGS:
        path = _cache_dir() / f"kernels-{_fingerprint(compiler, flags)}.so"
        if not path.exists() and not _compile(compiler, flags, path, errors):
            continue
        try:
            return _declare(ctypes.CDLL(str(path)))
        except OSError as err:
            errors.append(str(err))
    warnings.warn(f"lab.compress.native: could not build {SOURCE.name} ({'; '.join(errors)[:300]}); "
                  "the codecs run their slower torch reference")
    return None


def _cache_dir() -> Path:
    root = os.environ.get("LAB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lab")
    try:
        os.makedirs(root, exist_ok=True)
        return Path(root)
    except OSError:
        return Path(tempfile.gettempdir())


def _fingerprint(compiler: str, flags: list[str]) -> str:
    """A key for the source, compiler, flags and CPU: -march=native code for one CPU may not
    run on another that shares the home directory."""
    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            cpu = next((line for line in f if line.startswith(("flags", "Features"))), "")
    sources = [f.read_text() for f in sorted(SOURCE.parent.glob("kernels*.c"))]  # and its includes
    text = "\n".join([*sources, compiler, *flags, platform.machine(), cpu])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _compile(compiler: str, flags: list[str], path: Path, errors: list) -> bool:
    """Compile to a private file, then rename: ranks that start together never load half a
    file."""
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        run = subprocess.run([compiler, *flags, "-shared", "-fPIC", "-std=gnu11", "-o", tmp,
                              str(SOURCE)], capture_output=True, text=True, timeout=120)
        if run.returncode:
            errors.append(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else
                          f"{compiler} exited with {run.returncode}")
            return False
        os.replace(tmp, path)
        return True
    except (OSError, subprocess.SubprocessError) as err:
        errors.append(str(err))
        return False
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    ptr, i64, f32, u32, i32 = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_uint32,
                               ctypes.c_int32)
    lib.lab_stochastic_levels.argtypes = [ptr, i64, i64, ptr, f32, u32, u32, ptr, ptr]
    lib.lab_stochastic_levels.restype = None
    lib.lab_dequantize.argtypes = [ptr, i32, ptr, i64, i64, ptr, f32, ptr]
    lib.lab_dequantize.restype = None
    lib.lab_expand_bits.argtypes = [ptr, i64, i64, ptr, ptr, i32]
    lib.lab_expand_bits.restype = None
    lib.lab_sign_bits.argtypes = [ptr, i64, ptr, i32]
    lib.lab_sign_bits.restype = ctypes.c_double
    lib.lab_side_sums.argtypes = [ptr, i64, i64, ptr, ptr]
    lib.lab_side_sums.restype = None
    lib.lab_cast.argtypes = [ptr, i64, i32, ptr]
    lib.lab_cast.restype = ctypes.c_int32
    lib.lab_scatter.argtypes = [ptr, ptr, i64, i64, ptr]
    lib.lab_scatter.restype = i64
    lib.lab_expand_codes2.argtypes = [ptr, i64, ptr, ptr]
    lib.lab_expand_codes2.restype = None
    lib.lab_float32_range.argtypes = [ptr, i64]
    lib.lab_float32_range.restype = i64
    lib.lab_int32_range.argtypes = [ptr, i64]
    lib.lab_int32_range.restype = i64
    _declare_small(lib, ptr, i64, f32, i32)
    return lib


def _declare_small(lib: ctypes.CDLL, ptr, i64, f32, i32) -> None:
    """The small-tensor kernels' signatures (the end of ``kernels.c``; their wrappers:
    :mod:`lab.compress.native_small`)."""
    for name, args, res in (
            ("lab_expand_pair", [ptr, i64, f32, f32, ptr], None),
            ("lab_scatter_into", [ptr, ptr, i32, i64, i64, ptr], i64),
            ("lab_scatter_signs", [ptr, ptr, i64, i64, f32, ptr], i64),
            ("lab_expand_ternary", [ptr, i64, f32, ptr], None),
            ("lab_dequantize_checked", [ptr, i32, ptr, i64, i64, ptr, f32, ptr], i32),
            ("lab_qsgd_encode", [ptr, i64, i64, ptr, f32, i32, ptr, ptr, ptr], None),
            ("lab_absmax_squares", [ptr, i64, ptr, ptr], f32),
            ("lab_ternary_codes", [ptr, i64, f32, ptr, ptr], None),
            ("lab_ef_scaled_sign", [ptr, ptr, i64, ptr, ptr, ptr], ctypes.c_double),
            ("lab_onebit_encode", [ptr, i64, ptr, ptr], i32),
            ("lab_qsgd_prepare", [ptr, i64, ptr, i64], i32),
            ("lab_threshold_count", [ptr, i64, f32], i64),
            ("lab_threshold_fill", [ptr, i64, f32, ptr, ptr], None),
            ("lab_dgc_step", [ptr, ptr, ptr, i64, f32, i32, i64, ptr, ptr, i32], i32),
            ("lab_topk_abs", [ptr, i64, i64, ptr, ptr, ptr, ptr], i32),
            ("lab_random_indices", [ptr, i64, i64, ptr, ptr, ptr, ptr], i32)):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res


def _key(generator: torch.Generator) -> tuple[int, int]:
    """Two 32-bit words of key from the codec's generator (advancing it, like any draw)."""
    k = torch.randint(0, 2 ** 32, (2,), generator=generator, dtype=torch.int64)
    return int(k[0]), int(k[1])


def stochastic_levels(x: torch.Tensor, bucket: int, norms: torch.Tensor, s: int,
                      generator: torch.Generator, signed_codes: bool = False):
    """Levels of ``r = min(|x_i| / norm * s, s)`` rounded up with probability ``r - floor(r)``
    (to within 2**-31), as uint8, with the ``x < 0`` flags as bool; or, with ``signed_codes``,
    only ``level << (x < 0)`` (TernGrad's codes). ``x``: 1-D contiguous float32; ``norms``:
    float32 > 0, one per ``bucket`` values; ``s`` <= 255."""
    n = x.numel()
    norms = norms.float().contiguous()
    if not (x.is_contiguous() and 0 < s <= 255 and norms.numel() >= -(-n // bucket)):
        raise ValueError(f"stochastic_levels: need contiguous x, 0 < s <= 255 and a norm per "
                         f"bucket, got s={s}, {norms.numel()} norms for {n} values")
    levels = torch.empty(n, dtype=torch.uint8)
    negative = None if signed_codes else torch.empty(n, dtype=torch.bool)
    k0, k1 = _key(generator)
    library().lab_stochastic_levels(x.data_ptr(), n, bucket, norms.data_ptr(), float(s), k0, k1,
                                    levels.data_ptr(),
                                    None if negative is None else negative.data_ptr())
    return levels if signed_codes else (levels, negative)


def dequantize(codes: torch.Tensor, bits: int, signs: torch.Tensor, numel: int, bucket: int,
               norms: torch.Tensor, s: int) -> torch.Tensor:
    """``level * norm / s`` with the sign bit set from packed ``signs``, for levels packed at
    ``bits`` in (1, 2, 4, 8); ``bucket`` a multiple of 8 unless ``numel <= bucket``."""
    if bits not in (1, 2, 4, 8) or (bucket % 8 and numel > bucket):
        raise ValueError(f"dequantize: bits must be 1, 2, 4 or 8 and bucket a multiple of 8, "
                         f"got bits={bits}, bucket={bucket}")
    codes, signs = codes.contiguous(), signs.contiguous()
    norms = norms.float().contiguous()
    if (codes.dtype != torch.uint8 or signs.dtype != torch.uint8
            or codes.numel() < -(-numel * bits // 8) or signs.numel() < -(-numel // 8)
            or norms.numel() < -(-numel // bucket)):  # the kernel must never read past them
        raise ValueError(f"dequantize: payload too short or not uint8 for {numel} values "
                         f"({codes.numel()} code bytes, {signs.numel()} sign bytes, "
                         f"{norms.numel()} norms)")
    out = torch.empty(numel, dtype=torch.float32)
    library().lab_dequantize(codes.data_ptr(), bits, signs.data_ptr(), numel, bucket,
                             norms.data_ptr(), float(s), out.data_ptr())
    return out


def expand_bits(packed: torch.Tensor, numel: int, bucket: int, values: torch.Tensor,
                out: torch.Tensor | None = None, subtract: bool = False) -> torch.Tensor:
    """``values[k, bit]`` for the first ``numel`` bits of ``packed`` (bucket ``k`` = index //
    ``bucket``; ``values``: float32 (buckets, 2)), written to ``out`` (new if None), or with
    ``subtract`` taken off ``out`` in place (float32, contiguous)."""
    packed = packed.contiguous()
    values = values.float().contiguous()
    if out is None:
        out = torch.empty(numel, dtype=torch.float32)
    if (packed.dtype != torch.uint8 or packed.numel() < -(-numel // 8)
            or values.numel() < 2 * -(-numel // bucket) or (bucket % 8 and numel > bucket)
            or out.dtype != torch.float32 or not out.is_contiguous() or out.numel() != numel):
        raise ValueError(f"expand_bits: {packed.numel()} bytes of {packed.dtype}, "
                         f"{values.numel()} values, bucket {bucket} and out "
                         f"{tuple(out.shape)} {out.dtype} do not fit {numel} values")
    library().lab_expand_bits(packed.data_ptr(), numel, bucket, values.data_ptr(),
                              out.data_ptr(), int(subtract))
    return out


def expand_pair(packed: torch.Tensor, numel: int, zero: float, one: float,
                out: torch.Tensor | None = None, subtract: bool = False) -> torch.Tensor:
    """:func:`expand_bits` with one bucket whose two values are Python floats (rounded to
    float32, as a float32 tensor of them would hold): no tensor built for them, the sign
    decoders' small-tensor path (~5 us less a call)."""
    values = (ctypes.c_float * 2)(zero, one)
    if out is None:
        out = torch.empty(numel, dtype=torch.float32)
    if (packed.dtype is not torch.uint8 or not packed.is_contiguous()
            or packed.numel() < -(-numel // 8) or out.dtype is not torch.float32
            or not out.is_contiguous() or out.numel() != numel):
        raise ValueError(f"expand_pair: {packed.numel()} bytes of {packed.dtype} and out "
                         f"{tuple(out.shape)} {out.dtype} do not fit {numel} values")
    library().lab_expand_bits(packed.data_ptr(), numel, max(numel, 1), values, out.data_ptr(),
                              int(subtract))
    return out


def expand_codes2(packed: torch.Tensor, numel: int, table) -> torch.Tensor:
    """float32 ``table[code]`` for the first ``numel`` 2-bit codes of uint8 ``packed`` (four a
    byte, as :func:`~lab.compress.packing.pack_uint` packs them); ``table``: four Python
    floats (rounded to float32). What ``expand_codes(packed, numel, 2, tensor(table))``
    gives, without building the table tensors."""
    if (packed.dtype is not torch.uint8 or not packed.is_contiguous()
            or packed.numel() < -(-numel // 4) or len(table) != 4):
        raise ValueError(f"expand_codes2: {packed.numel()} bytes of {packed.dtype} and "
                         f"{len(table)} table entries do not fit {numel} 2-bit codes")
    out = torch.empty(numel, dtype=torch.float32)
    library().lab_expand_codes2(packed.data_ptr(), numel, (ctypes.c_float * 4)(*table),
                                out.data_ptr())
    return out


def sign_bits(x: torch.Tensor, with_sum: bool = True) -> tuple[torch.Tensor, float | None]:
    """The flags ``x >= 0`` of float32 ``x`` packed 8 a byte, little-endian bit order (what
    ``pack_bits(x >= 0)`` gives), and (``with_sum``) ``sum |x|`` in float64 (NaN if x holds
    one), in one pass."""
    if x.dim() != 1 or not x.is_contiguous():
        x = x.reshape(-1).contiguous()
    if x.dtype != torch.float32:
        raise ValueError(f"sign_bits: x must be float32, got {x.dtype}")
    bits = torch.empty(-(-x.numel() // 8), dtype=torch.uint8)
    l1 = library().lab_sign_bits(x.data_ptr(), x.numel(), bits.data_ptr(), int(with_sum))
    return bits, l1 if with_sum else None


def side_sums(x: torch.Tensor, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per ``bucket`` values of float32 ``x`` (the last bucket may be short): float64 (buckets,
    2) sums of the values >= 0 and of the others (NaN lands there), and int64 counts of the
    values >= 0, in one pass."""
    x = x.reshape(-1).contiguous()
    if x.dtype != torch.float32:
        raise ValueError(f"side_sums: x must be float32, got {x.dtype}")
    buckets = -(-x.numel() // bucket)
    sums = torch.empty(buckets, 2, dtype=torch.float64)
    counts = torch.empty(buckets, dtype=torch.int64)
    library().lab_side_sums(x.data_ptr(), x.numel(), bucket, sums.data_ptr(), counts.data_ptr())
    return sums, counts


_CAST_MODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def cast(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, bool] | None:
    """float32 ``x`` copied to ``dtype`` (float32, float16 or bfloat16; what ``x.to(dtype)``
    gives, as a new tensor) and whether every value of the result is finite, in one pass; None
    where the compiler had no fp16 type (the caller casts with torch)."""
    if x.dim() != 1 or not x.is_contiguous():
        x = x.reshape(-1).contiguous()
    mode = _CAST_MODES.get(dtype)
    if x.dtype is not torch.float32 or mode is None:
        raise ValueError(f"cast: float32 to one of {list(_CAST_MODES)}, got {x.dtype} to {dtype}")
    n = x.numel()
    out = torch.empty(n, dtype=dtype)
    bad = cast_function()(x.data_ptr(), n, mode, out.data_ptr())
    return None if bad < 0 else (out, bad == 0)


def cast_function():
    """``lab_cast(x_ptr, n, mode, out_ptr)`` itself (mode: 0 float32, 1 float16, 2 bfloat16;
    returns 1 if a result is not finite, -1 where fp16 needs torch): the casts' small-tensor
    path calls it without :func:`cast`'s checks, kept here (a CDLL attribute read costs
    ~0.3 us)."""
    return _state.get("lab_cast") or _state.setdefault("lab_cast", library().lab_cast)


def int32_range(x: torch.Tensor) -> tuple[int, int]:
    """(min, max) of a non-empty contiguous int32 CPU tensor, in one pass (the caller checks
    those; ~1 us less than ``torch.aminmax`` and two reads on a 10^4-entry index part)."""
    return unpack_range(library().lab_int32_range(x.data_ptr(), x.numel()))


def float32_range(x: torch.Tensor) -> tuple[float, float]:
    """(min, max) of a non-empty contiguous float32 CPU tensor in one pass, both NaN if any
    entry is NaN (a header part's finiteness check: norms, scales)."""
    return unpack_float_range(library().lab_float32_range(x.data_ptr(), x.numel()))


_TWO_FLOATS = struct.Struct("<ff")


def unpack_float_range(packed: int) -> tuple[float, float]:
    """(min, max) from ``lab_float32_range``'s int64: max's bits high, min's low."""
    return _TWO_FLOATS.unpack((packed & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"))


def unpack_range(packed: int) -> tuple[int, int]:
    """(min, max) from ``lab_int32_range``'s int64: max in the high half, min in the low."""
    return ((packed & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000, packed >> 32


def scatter(values: torch.Tensor, indices: torch.Tensor, numel: int) -> torch.Tensor | None:
    """float32 zeros of ``numel`` with ``values[i]`` at ``indices[i]`` (float32 and int32, 1-D
    contiguous, the same length), every index checked in the same pass; None if one is outside
    ``[0, numel)`` (the caller names it)."""
    k = indices.numel()
    if not (values.dtype is torch.float32 and indices.dtype is torch.int32 and values.numel() == k
            and values.is_contiguous() and indices.is_contiguous()):
        raise ValueError(f"scatter: need contiguous float32 values and int32 indices of one "
                         f"length, got {values.numel()} {values.dtype} and {k} {indices.dtype}")
    out = torch.zeros(numel, dtype=torch.float32)
    if k and library().lab_scatter(values.data_ptr(), indices.data_ptr(), k, numel,
                                   out.data_ptr()):
        return None
    return out
