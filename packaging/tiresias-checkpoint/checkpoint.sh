# shellcheck shell=bash
# Tiresias checkpoint snippet for batch scripts: `source` it, define a function that
# writes your checkpoint, and call tiresias_checkpoint_trap with its name.
#
#   source "$(python3 -m tiresias_checkpoint --shell-helper)"   # or its path, e.g.
#   source /usr/local/share/tiresias/checkpoint.sh   # (tiresias install-files /)
#   save_state() { tiresias_save_atomically ckpt.txt "$step"; }
#   tiresias_checkpoint_trap save_state
#   for step in $(seq "$(cat ckpt.txt 2>/dev/null || echo 0)" 1000); do work "$step"; done
#
# On the checkpoint signal ($TIRESIAS_CHECKPOINT_SIGNAL, default USR1; the controller
# sends it to the batch shell, then requeues after a grace period) the trap runs the
# function, writes the marker the node epilog detects, and exits with
# $TIRESIAS_REQUEUE_EXIT (default 85; pair it with RequeueExit=85 in slurm.conf).
# With TIRESIAS_CHECKPOINT_ON_TERM=1 TERM runs it too: scancel and the time limit send
# TERM, then KILL KillWait seconds later (30 s by default); the controller never sends TERM.
# bash runs a trap only between foreground commands: run long steps in the
# background and `wait` for them so the trap fires at once (see examples/).

TIRESIAS_REQUEUE_EXIT=${TIRESIAS_REQUEUE_EXIT:-85}

# tiresias_write_atomic PATH: stdin -> PATH via temp file + fsync + rename + dir fsync.
tiresias_write_atomic() {
    local target=$1 dir tmp
    dir=$(dirname -- "$target")
    tmp=$(mktemp "$dir/.$(basename -- "$target").XXXXXX") || return 1
    if ! cat >"$tmp" || ! sync -- "$tmp" || ! mv -f -- "$tmp" "$target"; then
        rm -f -- "$tmp"
        return 1
    fi
    sync -- "$dir" 2>/dev/null || sync
}

# tiresias_save_atomically PATH TEXT...: write TEXT (one line) to PATH atomically.
tiresias_save_atomically() {
    local target=$1
    shift
    printf '%s\n' "$*" | tiresias_write_atomic "$target"
}

# tiresias_marker_path: where the epilog looks for this job's checkpoint marker.
tiresias_marker_path() {
    if [ -n "${TIRESIAS_CHECKPOINT_MARKER:-}" ]; then
        printf '%s\n' "$TIRESIAS_CHECKPOINT_MARKER"
    elif [ -n "${SLURM_JOB_ID:-}" ] && [ -n "${SLURM_SUBMIT_DIR:-}" ]; then
        printf '%s\n' "$SLURM_SUBMIT_DIR/.tiresias-checkpoint-$SLURM_JOB_ID"
    fi
}

tiresias_write_marker() {
    local marker
    marker=$(tiresias_marker_path)
    [ -n "$marker" ] || return 0
    printf '{"job_id":"%s","time_s":%s}\n' "${SLURM_JOB_ID:-}" "$(date +%s)" \
        | tiresias_write_atomic "$marker" || echo "tiresias checkpoint: cannot write $marker" >&2
}

# Runs on the signal: the user's function, the marker, then a requeue-friendly exit.
tiresias_on_checkpoint_signal() {
    local save_function=$1
    echo "tiresias checkpoint: signal received at $(date +%T), saving" >&2
    if "$save_function"; then
        tiresias_write_marker
        exit "$TIRESIAS_REQUEUE_EXIT"
    fi
    echo "tiresias checkpoint: $save_function failed; not exiting" >&2
}

# tiresias_checkpoint_trap FUNCTION: install the trap.
tiresias_checkpoint_trap() {
    local signal_name=${TIRESIAS_CHECKPOINT_SIGNAL:-USR1}
    signal_name=${signal_name#SIG}
    # shellcheck disable=SC2064  # expand the function name now, on purpose
    trap "tiresias_on_checkpoint_signal $1" "$signal_name"
    case ${TIRESIAS_CHECKPOINT_ON_TERM:-} in
        1 | yes | true | on) trap "tiresias_on_checkpoint_signal $1" TERM ;;
    esac
}
