"""Loading a script of ``infra/scripts`` as a module, for the tests that check what it builds
or prints: shared by the unit tests of the prior, the carried tenants and the seer table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "infra" / "scripts"


def load_script(name: str) -> ModuleType:
    """``infra/scripts/<name>.py`` as the module ``name`` (registered in ``sys.modules``: a
    script's dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
