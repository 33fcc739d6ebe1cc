#!/usr/bin/env bash
# The suite on three Slurm releases at the same time: the whole suite on this host's
# Slurm (containers/slurm-cluster.sh) and the real-Slurm tests in a debootstrap root of
# each other release (containers/release-root.sh: Debian 12 host -> trixie 24.11 and
# sid 26.05; Debian 13 host -> bookworm 22.05 and sid). Why at the same time: the
# real-Slurm tests spend their time waiting on slurmctld, not on the CPU, and each
# root runs in its own namespaces (its own loopback, ports, daemons, /tmp), so the
# three never meet.
#
#   containers/test-releases.sh                 once: every release, one summary line each
#   containers/test-releases.sh --repeat N      the real-Slurm tests N times on every
#                                               release; lists every test that failed in
#                                               any run (the bar: none)
#
# Environment: PYTEST_ARGS (host pytest arguments; default: the whole suite, or -m slurm
#   with --repeat), ROOT_PYTEST_ARGS (default -m slurm), TEST_WORKERS (pytest-xdist
#   workers per release, default 3; 0: none), RELEASES (default "host" plus
#   every suite of `release-root.sh suites`), TEST_LOG_DIR (default build/test-logs).
# Exit status: 0 when every run of every release passed. Needs root.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_DIR=$PWD
PY=${PYTHON_BIN:-$REPO_DIR/.venv/bin/python}
LOGS=${TEST_LOG_DIR:-$REPO_DIR/build/test-logs}
REPEAT=1
if [ "${1:-}" = --repeat ]; then
    REPEAT=${2:-}
    [[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || { echo "test-releases: --repeat '$REPEAT': give a count >= 1" >&2; exit 2; }
fi
RELEASES=${RELEASES:-host $(bash containers/release-root.sh suites)} || exit 1
read -r -a HOST_ARGS <<<"${PYTEST_ARGS:-}"
read -r -a ROOT_ARGS <<<"${ROOT_PYTEST_ARGS:--m slurm}"
[ "$REPEAT" -gt 1 ] && [ -z "${PYTEST_ARGS:-}" ] && HOST_ARGS=(-m slurm)
# pytest-xdist workers per release (tests/conftest.py keeps a module, and the tests on
# the default cluster, on one worker); 0: none.
WORKERS=${TEST_WORKERS:-3}
[[ "$WORKERS" =~ ^[0-9]+$ ]] || { echo "test-releases: TEST_WORKERS '$WORKERS': give a count" >&2; exit 2; }
XDIST=()
[ "$WORKERS" -gt 0 ] && XDIST=(-n "$WORKERS" --dist loadscope)
mkdir -p "$LOGS"
log() { echo "[test-releases] $*"; }
clock() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

# Roots first, all at once (cached: nothing to do once built; a minute or two each when not).
t0=$SECONDS
pids=()
for release in $RELEASES; do
    [ "$release" = host ] && continue
    TIRESIAS_OTHER_SUITE=$release bash containers/release-root.sh build >"$LOGS/build-$release.log" 2>&1 &
    pids+=("$!:$release")
done
build_failed=""
for entry in "${pids[@]}"; do
    wait "${entry%%:*}" || { build_failed+=" ${entry#*:}"; tail -20 "$LOGS/build-${entry#*:}.log" >&2; }
done
[ -z "$build_failed" ] || { log "building the root of$build_failed failed"; exit 1; }
log "roots ready in $(clock $((SECONDS - t0)))"
if [[ " $RELEASES " == *" host "* ]]; then
    bash containers/slurm-cluster.sh up >"$LOGS/host-cluster-up.log" 2>&1 \
        || { tail -30 "$LOGS/host-cluster-up.log" >&2; log "the host's test cluster did not come up"; exit 1; }
fi

# run_release RELEASE RUN: one pytest run of RELEASE, its output in $LOGS/RELEASE-RUN.log.
run_release() {
    local release=$1 run=$2 out="$LOGS/$1-$2.log"
    if [ "$release" = host ]; then
        "$PY" -m pytest -q -rfE -p no:cacheprovider --durations=20 "${XDIST[@]}" "${HOST_ARGS[@]}" >"$out" 2>&1
    else
        TIRESIAS_OTHER_SUITE=$release bash containers/release-root.sh test -rfE --durations=20 "${XDIST[@]}" "${ROOT_ARGS[@]}" \
            >"$out" 2>&1
    fi
}

# The release's Slurm version, for the summary.
version_of() {
    if [ "$1" = host ]; then slurmctld -V | awk '{print $2}'
    else chroot "${TIRESIAS_ROOTFS_DIR:-/var/cache/tiresias}/rootfs-$1" slurmctld -V | awk '{print $2}'; fi
}

# pytest's closing line of a log ("50 passed, 1 skipped in 1120.32s (0:18:40)").
closing_line() {
    grep -E '^(=+ )?[0-9]+ (passed|failed|error|errors|skipped|deselected)' "$1" | tail -1 | sed -E 's/^=+ //; s/ =+$//'
}

status=0
failed_any="$LOGS/failed-any-run.txt"
: >"$failed_any"
for run in $(seq 1 "$REPEAT"); do
    pids=()
    for release in $RELEASES; do
        ( start=$SECONDS; run_release "$release" "$run"; rc=$?; echo "$rc $((SECONDS - start))" >"$LOGS/$release-$run.rc" ) &
        pids+=("$!")
    done
    log "run $run of $REPEAT: $RELEASES at once (logs in $LOGS)"
    wait "${pids[@]}"
    for release in $RELEASES; do
        read -r rc seconds <"$LOGS/$release-$run.rc"
        out="$LOGS/$release-$run.log"
        # A run with no closing line (killed, crashed) or exit 5 (no test ran) fails too.
        line=$(closing_line "$out")
        [ -n "$line" ] || { line="no pytest summary (exit $rc)"; [ "$rc" = 0 ] && rc=1; }
        [ "$rc" = 5 ] && line="$line: no test ran"
        grep -E '^(FAILED|ERROR) ' "$out" | sed "s/^/$release run $run: /" >>"$failed_any"
        [ "$rc" = 0 ] || status=1
        printf -v "summary_${release}_$run" '%s' "$rc|$seconds|$line"
    done
done
total=$((SECONDS - t0))

# Each run's whole output, the host's last (its closing line ends the output), then the summary.
for release in $RELEASES; do
    [ "$release" = host ] && continue
    for run in $(seq 1 "$REPEAT"); do echo "===== $release run $run ====="; cat "$LOGS/$release-$run.log"; done
done
if [[ " $RELEASES " == *" host "* ]]; then
    for run in $(seq 1 "$REPEAT"); do echo "===== host run $run ====="; cat "$LOGS/host-$run.log"; done
fi
echo
echo "===== releases: $RELEASES, $REPEAT run(s), wall $(clock "$total") ====="
for release in $RELEASES; do
    for run in $(seq 1 "$REPEAT"); do
        var="summary_${release}_$run"
        IFS='|' read -r rc seconds line <<<"${!var}"
        verdict=PASS; [ "$rc" = 0 ] || verdict="FAIL (exit $rc)"
        printf 'Slurm %-8s %-8s run %d: %s: %s [%s]\n' "$(version_of "$release")" "($release)" "$run" "$verdict" \
            "$line" "$(clock "$seconds")"
    done
done
if [ -s "$failed_any" ]; then
    echo "tests that failed in any run ($(cut -d: -f2- "$failed_any" | sort -u | wc -l)):"
    cat "$failed_any"
else
    echo "tests that failed in any run: none"
fi
echo "wall time, roots included: $(clock "$total")"
# One closing line for every run of every release together (pytest's own words), also
# kept in $LOGS/total.txt for .ci/run to repeat last.
passed=0 failed=0 skipped=0
for release in $RELEASES; do
    for run in $(seq 1 "$REPEAT"); do
        var="summary_${release}_$run"
        IFS='|' read -r rc seconds line <<<"${!var}"
        count() { grep -oE "[0-9]+ $1" <<<"$line" | awk '{s += $1} END {print s + 0}'; }
        passed=$((passed + $(count passed)))
        failed=$((failed + $(count failed) + $(count 'errors?')))
        skipped=$((skipped + $(count skipped)))
        # a run that failed with no failed test or error counted (it died) counts as one
        [ "$rc" = 0 ] || [ $(($(count failed) + $(count 'errors?'))) -gt 0 ] || failed=$((failed + 1))
    done
done
echo "releases: $passed passed, $failed failed, $skipped skipped" | tee "$LOGS/total.txt"
exit $status
