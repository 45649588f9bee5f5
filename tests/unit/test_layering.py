"""ARCHITECTURE.md: importing policy loads none of prefect, mlflow, torch, boto3."""

import subprocess
import sys


def test_policy_imports_no_frameworks() -> None:
    code = (
        "import sys, policy, policy.replay, policy.regret, policy.synthetic\n"
        "bad = sorted(m for m in ('prefect', 'mlflow', 'torch', 'boto3', 'optuna') "
        "if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def _loaded(imports: str, frameworks: tuple[str, ...]) -> list[str]:
    code = (
        f"import sys, {imports}\n"
        f"print(','.join(sorted(m for m in {frameworks!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_tenant_data_layer_imports_no_frameworks() -> None:
    """The schema and the store are what every layer reads: no torch, Prefect or MLflow."""
    assert _loaded("tenantml.schema, tenantml.store", ("torch", "prefect", "mlflow")) == []


def test_trainers_import_no_orchestration() -> None:
    """trainers/ may use torch (lazily), never Prefect or MLflow (ARCHITECTURE layers)."""
    assert _loaded("trainers", ("prefect", "mlflow", "torch")) == []
