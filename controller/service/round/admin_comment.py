"""The AdminComment lines users see (``scontrol show job``): planned in the core
(controller.core.levers.comments, through the lever planner) and written by the round's
lever module (controller.service.round.levers, which also keeps ``AdminComments`` for the
callers that write them one book at a time: tests, benches); re-exported here."""
from __future__ import annotations

from controller.core.levers.comments import (CommentBook, combined, our_line, ours_in,  # noqa: F401  (re-exported)
                                             rounded_gpu_s, site_part)
from controller.service.round.levers import AdminComments  # noqa: F401  (re-exported)
