"""Policy registry: one module per policy, looked up by its CLI name. The one list of
policy names: every other place (the config's choices, the CLIs' choices, explain, the
tuner, the benches' baselines) reads it or a subset of it by a policy's own flags."""
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

# in the order the config documents them: the controller's own first, the baselines after
POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (DiscretizedLas, DiscretizedGittins, Las, Gittins, FifoSkip, Fifo, Srtf, Srsf, TimeShare, Learned)
}
# what the controller may run: every policy that does not read the true duration
CONTROLLER_POLICIES: tuple[str, ...] = tuple(name for name, cls in POLICIES.items() if not cls.needs_duration)
# MLFQ policies: their levels are queues (explain's "queue 2 of 3"), their thresholds tunable
MLFQ_POLICIES: tuple[str, ...] = tuple(name for name, cls in POLICIES.items() if cls.discretized)
# stock Slurm's own order as a policy: FIFO with backfill (fifo-skip) and strict FIFO (fifo)
STOCK_POLICIES: tuple[str, ...] = tuple(name for name, cls in POLICIES.items() if cls.static_order)


def get_policy(name: str, priority_expression: str | None = None) -> Policy:
    """Instantiate a policy by name; unknown names are a one-line InputError.

    ``learned`` evaluates ``priority_expression`` (the text of a learned function;
    default: the published example function)."""
    if name not in POLICIES:
        raise InputError(f"policy '{name}' is unknown; choose from {', '.join(POLICIES)}")
    if name == Learned.name and priority_expression:
        return Learned(priority_expression)
    return POLICIES[name]()


__all__ = ["CONTROLLER_POLICIES", "MLFQ_POLICIES", "POLICIES", "STOCK_POLICIES", "Policy", "PolicyContext", "get_policy"]
