"""Policy registry: one module per policy, looked up by its CLI name."""
from controller.core.model import InputError
from controller.core.policies.base import Policy, PolicyContext
from controller.core.policies.dgittins import DiscretizedGittins
from controller.core.policies.dlas import DiscretizedLas
from controller.core.policies.fifo import Fifo
from controller.core.policies.fifo_skip import FifoSkip
from controller.core.policies.gittins import Gittins
from controller.core.policies.las import Las
from controller.core.policies.learned import Learned
from controller.core.policies.srsf import Srsf
from controller.core.policies.srtf import Srtf
from controller.core.policies.timeshare import TimeShare

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (Fifo, FifoSkip, Srtf, Srsf, Las, Gittins, DiscretizedLas, DiscretizedGittins, TimeShare, Learned)
}


def get_policy(name: str, priority_expression: str | None = None) -> Policy:
    """Instantiate a policy by name; unknown names are a one-line InputError.

    ``learned`` evaluates ``priority_expression`` (the text of a learned function;
    default: the published example function)."""
    if name not in POLICIES:
        raise InputError(f"policy '{name}' is unknown; choose from {', '.join(POLICIES)}")
    if name == Learned.name and priority_expression:
        return Learned(priority_expression)
    return POLICIES[name]()


__all__ = ["POLICIES", "Policy", "PolicyContext", "get_policy"]
