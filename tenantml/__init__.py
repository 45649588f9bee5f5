"""tenantml: multi-tenant, cost-aware model selection for a shared GPU pool.

The user-facing layer: the SDK (``from tenantml import Client``), the ``tenantml`` command line
(`tenantml.cli`), operations (`tenantml.ops`: local servers, chaos), benchmarks
(`tenantml.bench`) and the data the project carries (`tenantml.data`, `tenantml.datasets`).
The SDK is imported on first use, so ``import tenantml`` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenantml.client import Client, Leaderboard, LeaderboardRow, NoModelYetError

__version__ = "0.1.0"
__all__ = ["Client", "Leaderboard", "LeaderboardRow", "NoModelYetError", "__version__"]

_SDK = frozenset({"Client", "Leaderboard", "LeaderboardRow", "NoModelYetError"})


def __getattr__(name: str) -> Any:
    if name in _SDK:
        from tenantml import client

        return getattr(client, name)
    raise AttributeError(f"module 'tenantml' has no attribute {name!r}")
