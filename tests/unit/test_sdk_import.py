"""The SDK is importable as documented, and `import tenantml` alone stays cheap."""

import subprocess
import sys


def test_client_is_importable_from_the_package() -> None:
    from tenantml import Client
    from tenantml.client import Client as Direct

    assert Client is Direct


def test_importing_the_package_loads_no_service_framework() -> None:
    code = (
        "import sys, tenantml\n"
        "print(','.join(m for m in ('mlflow', 'prefect', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_unknown_names_still_fail_clearly() -> None:
    import pytest

    import tenantml

    with pytest.raises(AttributeError, match="no attribute 'Klient'"):
        tenantml.Klient  # noqa: B018
