"""``from controller import checkpoint`` for jobs written against the controller's
package: the helper itself is the top-level module ``tiresias_checkpoint`` (one file,
standard library only, installable alone as ``tiresias-checkpoint``), re-exported here
so that both names share one signal state."""
from tiresias_checkpoint import (  # noqa: F401  (re-exports)
    DEFAULT_SIGNAL, INSTALLED_SHELL_HELPER, MARKER_ENV, REQUEUE_EXIT_CODE, SHELL_HELPER_NAME, SIGNAL_ENV, clear,
    exit_for_requeue, install, marker_path, requested, save_atomically, shell_helper_candidates, shell_helper_path,
    signal_number, write_atomic, write_marker)
