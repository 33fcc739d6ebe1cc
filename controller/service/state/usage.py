"""The epilog's usage records: the spool collected into the store every usage_collect_s,
and their retention (usage_max_age_s). Moved out of controller.service.round.daemon."""
from __future__ import annotations

import logging
import math
import os
import time

from controller.service.state.decision_log import PRUNE_EVERY_S
from controller.service.state.spool import collect_spool
from controller.service.state.store import StoreError

log = logging.getLogger("tiresias.controller")


class UsageCollector:
    """Collects the spool for the controller's rounds; a failure is logged once (until
    collection works again) and never ends the round."""

    def __init__(self, config, store):
        self.config = config
        self.store = store
        self.collected_at = -math.inf
        self._failing = False
        self._pruned_at = -math.inf

    def collect(self, now: float) -> None:
        """Collect the epilog usage spool every usage_collect_s, when the directory exists.
        A failure is logged once (until collection works again) and never ends the round."""
        cfg = self.config
        if now - self.collected_at < cfg.usage_collect_s or not os.path.isdir(cfg.usage_spool_dir):
            return
        self.collected_at = now
        try:
            added, duplicates, bad = collect_spool(cfg.usage_spool_dir, self.store)
        except Exception as err:  # store down, permissions: collection only waits
            if not self._failing:
                log.warning("usage spool %s not collected (retrying every %gs): %s: %s", cfg.usage_spool_dir,
                            cfg.usage_collect_s, type(err).__name__, err)
            self._failing = True
            return
        if self._failing:
            log.warning("usage spool %s collected again", cfg.usage_spool_dir)
            self._failing = False
        if added or bad:
            log.info("usage spool: %d records stored, %d already stored, %d unreadable lines", added, duplicates,
                     bad)
        self._prune()

    def _prune(self) -> None:
        """Usage-record retention (usage_max_age_s), hourly; on the store's clock
        (``added_s`` is the wall time the record was stored)."""
        wall = time.time()
        if not self.config.usage_max_age_s or wall - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = wall
        try:
            deleted = self.store.prune_usage_records(self.config.cluster, before_s=wall - self.config.usage_max_age_s)
        except StoreError as err:  # retried in an hour
            log.warning("usage records not pruned: %s", err)
            return
        if deleted:
            log.info("usage records: %d older than %gs deleted", deleted, self.config.usage_max_age_s)
