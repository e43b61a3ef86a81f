"""Download, on a CPU machine with a package index, the wheels the GPU machine lacks.

    python tools/gpu_wheels.py [--dest .whl] [--python 3.12] [--check PYTHON]

The GPU machine (x86-64, Python 3.12, no package index) has torch, numpy, scipy,
scikit-learn, matplotlib, pytest and much else (:data:`GPU_HAS`, read off its image), but not
the Jupyter stack, nbval or pymoo, which the notebooks and the GPU check need. This resolves
those (:data:`NEED`) with every dependency, at the versions ``requirements.txt`` pins, as
manylinux x86-64 wheels for that Python; downloads them into ``--dest`` (``.whl``, ignored by
git; the device tool carries it); and removes the ones the machine already has, so nothing
shadows its own numpy or torch. There they install with
``pip install --no-index --no-deps --target /tmp/site .whl/*.whl`` (``tools/gpu_check.py``).

``--check PYTHON``: install the wheels that way into a fresh folder and import what the check
needs with that interpreter (one with only the machine's packages, e.g. a venv of Python 3.12
with torch and the others of :data:`GPU_HAS` that the check uses): the list is complete when
this passes.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
NEED = ("nbval", "nbclient", "nbformat", "ipykernel", "ipywidgets", "pymoo")
#: what the GPU machine's image holds (its package list, 2026-11-17; the device tool's KINDS.md)
GPU_HAS = set("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn
einops equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec
gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio
iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13
nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
xxhash yarl zipp
""".split())
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
#: what the check imports with them (the notebooks' kernel, nbval, pymoo, lab itself)
IMPORTS = "import lab, lab.adaptive.moo, nbval, nbclient, nbformat, ipykernel, ipywidgets, pymoo, IPython"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_project(path: pathlib.Path) -> str:
    return canonical(path.name.split("-")[0])


def constraints(folder: pathlib.Path) -> pathlib.Path:
    """requirements.txt's pins, less those of packages the machine has (its own versions win)."""
    keep = [line for line in (ROOT / "requirements.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")
            and canonical(line.split("==")[0]) not in GPU_HAS]
    path = folder / "constraints.txt"
    path.write_text("\n".join(keep) + "\n")
    return path


def download(dest: pathlib.Path, python: str) -> list[pathlib.Path]:
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--implementation", "cp",
               "--python-version", python, *[a for p in PLATFORMS for a in ("--platform", p)],
               "-c", str(constraints(pathlib.Path(tmp))), "-d", str(dest), *NEED]
        subprocess.run(cmd, check=True)
    removed = [w for w in dest.glob("*.whl") if wheel_project(w) in GPU_HAS]
    for w in removed:
        w.unlink()
    kept = sorted(dest.glob("*.whl"))
    names = [wheel_project(w) for w in kept]
    twice = {n for n in names if names.count(n) > 1}
    if twice:  # two versions of one project stop the whole install there
        raise SystemExit(f"gpu_wheels: two versions of {', '.join(sorted(twice))} in {dest}; "
                         "empty it and run again")
    print(f"{len(kept)} wheels in {dest} ({sum(w.stat().st_size for w in kept) / 2 ** 20:.1f} MiB); "
          f"removed {len(removed)} the GPU machine has: {', '.join(sorted(wheel_project(w) for w in removed))}")
    return kept


def check(dest: pathlib.Path, python: str) -> None:
    """Install as the GPU machine does, then import with only that interpreter's packages."""
    with tempfile.TemporaryDirectory() as site:
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--target", site, *map(str, sorted(dest.glob("*.whl")))], check=True)
        env = {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir()}
        subprocess.run([python, "-c", f"{IMPORTS}; print('imports fine with', len(__import__('os')"
                        f".listdir({site!r})), 'entries in the target')"], check=True, env=env)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dest", default=str(ROOT / ".whl"), help="wheel folder (default .whl)")
    ap.add_argument("--python", default="3.12", help="the GPU machine's Python (default 3.12)")
    ap.add_argument("--check", metavar="PYTHON", help="verify with this interpreter after downloading")
    ap.add_argument("--no-download", action="store_true", help="only --check what is there")
    a = ap.parse_args(argv)
    dest = pathlib.Path(a.dest)
    if not a.no_download:
        download(dest, a.python)
    if a.check:
        check(dest, a.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
