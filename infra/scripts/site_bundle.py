"""Pack what the service needs beside a CUDA image's own Python packages into one archive.

A lent GPU machine (an image with PyTorch, NumPy, SciPy, scikit-learn, pandas, Matplotlib for
its own Python, often another minor version than ``.venv``'s, and no package index) lacks
Prefect, MLflow and their dependencies. This script packs them for it: every distribution
installed in ``.venv`` except those such images ship (`IMAGE_SHIPS`: the compiled numeric stack,
torch and NVIDIA's libraries, whose builds must match the image's), the test and lint tools, and
what only other commands need (`NOT_NEEDED`: the S3 mock, Kubernetes, the time-series data set
package); boto3 only when ``--with-boto3`` (the embedded default stores to local files). The
wheels are fetched for the target's Python (``--python 3.12``) and Linux x86-64, installed into
one folder, stripped of their tests, caches and MLflow's web UI (``mlflow server`` is not run
there), and packed as ``.tar.xz`` (about 38 MB for Python 3.12; xz packs 220 MB of Python
files far smaller than the wheels' zip).

On the GPU machine, from the repository root::

    mkdir -p /tmp/b && tar -xJf .devbundle/site312.tar.xz -C /tmp/b
    PYTHONPATH=/tmp/b/site312:$PWD python3 -m tenantml.cli bench-live images ...

Usage: ``.venv/bin/python infra/scripts/site_bundle.py [--python 3.12] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: built against the image's own NumPy/CUDA: the image's copies are used
IMAGE_SHIPS = frozenset(
    """torch torchvision triton numpy scipy scikit-learn pandas matplotlib contourpy kiwisolver
    fonttools pillow pyarrow numba llvmlite sympy mpmath networkx narwhals joblib threadpoolctl
    cycler pyparsing pygments regex pluggy pip setuptools""".split()
)
#: tests, lint, types, and what only other commands use
NOT_NEEDED = frozenset(
    """hypothesis pytest pytest-xdist pytest-timeout execnet iniconfig ruff mypy mypy-extensions
    librt ast-serialize pandas-stubs moto cfn-lint aws-xray-sdk py-partiql-parser responses
    xmltodict openapi-schema-validator openapi-spec-validator jsonschema-path pathable
    lazy-object-proxy jsonpath-ng iso8601 sortedcontainers kopf kubernetes-asyncio
    prefect-kubernetes aeon optuna colorlog psycopg2-binary tenantml xgboost""".split()
)
BOTO3 = frozenset({"boto3", "botocore", "s3transfer", "jmespath"})
#: XGBoost's PyPI wheel carries its CUDA build (about 200 MB); its CPU build is enough for FLAML
REPLACEMENTS = {"xgboost": "xgboost-cpu"}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")  # fmt: skip


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(with_boto3: bool) -> list[str]:
    """``name==version`` of every distribution to pack (module docstring)."""
    skip = IMAGE_SHIPS | NOT_NEEDED | (frozenset() if with_boto3 else BOTO3)
    out = []
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        key = _key(name)
        if key in REPLACEMENTS:
            out.append(f"{REPLACEMENTS[key]}=={dist.version}")
        if key in skip or key.startswith(("nvidia-", "cuda-", "syne-tune")):
            continue
        out.append(f"{name}=={dist.version}")
    return sorted(set(out))


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def build(python: str, out: Path, with_boto3: bool) -> Path:
    target_args = ["--python-version", python, "--implementation", "cp", "--only-binary=:all:"]
    for p in PLATFORMS:
        target_args += ["--platform", p]
    tag = python.replace(".", "")
    with tempfile.TemporaryDirectory(prefix="tenantml-bundle-") as tmp:
        wheels, site = Path(tmp) / "wheels", Path(tmp) / f"site{tag}"
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text("\n".join(requirements(with_boto3)) + "\n")
        _pip("download", "-q", "--no-deps", *target_args, "-d", str(wheels), "-r", str(reqs))
        _pip("install", "-q", "--no-deps", "--no-index", "--no-compile", "--target", str(site),
             *target_args, *map(str, sorted(wheels.glob("*.whl"))))  # fmt: skip
        shutil.rmtree(site / "mlflow" / "server" / "js", ignore_errors=True)
        for junk in [*site.rglob("__pycache__"), *site.rglob("tests")]:
            if junk.is_dir():
                shutil.rmtree(junk, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out, "w:xz", preset=9) as tar:
            tar.add(site, arcname=site.name)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", default="3.12", help="the GPU image's Python, X.Y")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--with-boto3", action="store_true", help="also S3 (boto3, 17 MB)")
    args = parser.parse_args()
    out = args.out or ROOT / ".devbundle" / f"site{args.python.replace('.', '')}.tar.xz"
    path = build(args.python, out, args.with_boto3)
    print(f"{path}: {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
