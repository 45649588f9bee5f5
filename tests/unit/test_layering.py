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
