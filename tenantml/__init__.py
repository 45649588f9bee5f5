"""tenantml: multi-tenant, cost-aware model selection for a shared GPU pool."""

__version__ = "0.1.0"
__all__ = ["__version__"]
