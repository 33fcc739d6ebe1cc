#!/bin/bash
# GPU check of MPS SM quotas (needs an NVIDIA GPU; exits 0 with a message without one).
# Starts a private MPS control daemon on GPU ${GPU:-0}, runs the same matmul under
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 and =100 and without MPS (exclusive), prints
# throughput per tier, and checks that the output is bit-identical (sha256) in every
# run: a quota caps SMs and must not change the kernels' results.
# Then the daemon-side limit the prolog sets: set_default_active_thread_percentage and
# set_default_device_pinned_mem_limit through the control client, read back with the
# get_ commands, a run with no client-side percentage at all (the limit must still
# hold: its throughput near the 25% run's), and the undo read back (100).
# Workload: a small CUDA program when nvcc exists, else Python with torch or cupy.
set -u -o pipefail

GPU=${GPU:-0}
N=${N:-2048}
REPS=${REPS:-50}
TIERS=${TIERS:-"25 100"}
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_mps_check: nvidia-smi not found: no NVIDIA GPU here, nothing to check"
    exit 0
fi
if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    echo "gpu_mps_check: nvidia-cuda-mps-control not found (install the CUDA MPS tools)"
    exit 1
fi

WORK=$(mktemp -d /tmp/tiresias-mps-check.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY=$WORK/pipe CUDA_MPS_LOG_DIRECTORY=$WORK/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"

# shellcheck disable=SC2317  # runs from the EXIT trap
cleanup() {
    echo quit | CUDA_VISIBLE_DEVICES=$GPU nvidia-cuda-mps-control >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# build_runner: sets RUNNER to a command that takes OUTFILE and prints "seconds".
build_runner() {
    if command -v nvcc >/dev/null 2>&1; then
        cat >"$WORK/mm.cu" <<'CU'
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
__global__ void mm(const float *a, const float *b, float *c, int n) {
    int r = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < n && k < n) { float s = 0; for (int i = 0; i < n; ++i) s += a[r * n + i] * b[i * n + k]; c[r * n + k] = s; }
}
int main(int argc, char **argv) {
    int n = atoi(argv[2]), reps = atoi(argv[3]); size_t bytes = (size_t) n * n * sizeof(float);
    float *h = (float *) malloc(bytes), *a, *b, *c;
    for (size_t i = 0; i < (size_t) n * n; ++i) h[i] = (float) ((i * 2654435761u) % 1000) / 1000.0f;
    cudaMalloc(&a, bytes); cudaMalloc(&b, bytes); cudaMalloc(&c, bytes);
    cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice); cudaMemcpy(b, h, bytes, cudaMemcpyHostToDevice);
    dim3 t(16, 16), g((n + 15) / 16, (n + 15) / 16);
    mm<<<g, t>>>(a, b, c, n); cudaDeviceSynchronize();
    cudaEvent_t s, e; cudaEventCreate(&s); cudaEventCreate(&e); cudaEventRecord(s);
    for (int i = 0; i < reps; ++i) mm<<<g, t>>>(a, b, c, n);
    cudaEventRecord(e); cudaEventSynchronize(e); float ms; cudaEventElapsedTime(&ms, s, e);
    cudaMemcpy(h, c, bytes, cudaMemcpyDeviceToHost);
    FILE *f = fopen(argv[1], "wb"); fwrite(h, 1, bytes, f); fclose(f);
    if (cudaGetLastError() != cudaSuccess) return 1;
    printf("%f\n", ms / 1000.0); return 0;
}
CU
        nvcc -O2 -o "$WORK/mm" "$WORK/mm.cu" || return 1
        RUNNER=("$WORK/mm")
        return 0
    fi
    local lib
    for lib in torch cupy; do
        if python3 -c "import $lib" >/dev/null 2>&1; then
            cat >"$WORK/mm.py" <<'PY'
import sys, time
out, n, reps, lib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if lib == "torch":
    import torch
    x = (torch.arange(n * n, dtype=torch.float64) * 2654435761 % 1000 / 1000).float().reshape(n, n).cuda()
    mm, sync, host = torch.matmul, torch.cuda.synchronize, lambda t: t.cpu().numpy()
else:
    import cupy
    x = (cupy.arange(n * n, dtype=cupy.float64) * 2654435761 % 1000 / 1000).astype(cupy.float32).reshape(n, n)
    mm, sync, host = cupy.matmul, cupy.cuda.Device().synchronize, cupy.asnumpy
y = mm(x, x); sync()
t0 = time.perf_counter()
for _ in range(reps):
    y = mm(x, x)
sync()
elapsed = time.perf_counter() - t0
open(out, "wb").write(host(y).tobytes())
print(elapsed)
PY
            RUNNER=(python3 "$WORK/mm.py")
            RUNNER_TAIL=("$lib")
            return 0
        fi
    done
    echo "gpu_mps_check: no workload available: install nvcc (CUDA toolkit), or torch/cupy for python3"
    return 1
}

RUNNER=()
RUNNER_TAIL=()
build_runner || exit 1

# run LABEL: one measured run; prints "LABEL seconds GFLOP/s sha256".
run() {
    local label=$1 out="$WORK/out-$1.bin" seconds gflops digest
    seconds=$(CUDA_VISIBLE_DEVICES=$GPU "${RUNNER[@]}" "$out" "$N" "$REPS" "${RUNNER_TAIL[@]}") || {
        echo "gpu_mps_check: run $label failed"; return 1; }
    gflops=$(awk -v n="$N" -v r="$REPS" -v s="$seconds" 'BEGIN { printf "%.1f", 2 * n * n * n * r / s / 1e9 }')
    digest=$(sha256sum "$out" | cut -d' ' -f1)
    printf '%-14s %10.4f s %10s GFLOP/s  sha256 %s\n' "$label" "$seconds" "$gflops" "$digest"
    echo "$digest" >"$WORK/digest-$label"
}

status=0
run exclusive || status=1
CUDA_VISIBLE_DEVICES=$GPU nvidia-cuda-mps-control -d || { echo "gpu_mps_check: cannot start MPS"; exit 1; }
for tier in $TIERS; do
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$tier run "mps-$tier%" || status=1
done
# control LINE: one control command; prints its answer.
control() { echo "$1" | CUDA_VISIBLE_DEVICES=$GPU nvidia-cuda-mps-control; }
# expect WHAT GOT WANT: GOT must start with WANT.
expect() {
    case "$2" in "$3"*) echo "gpu_mps_check: $1 read back $2";;
        *) echo "gpu_mps_check: FAIL: $1 read back '$2', wanted $3"; status=1;; esac
}
# The daemon-side limit (as the prolog sets it): servers started after it get 25%.
echo quit | CUDA_VISIBLE_DEVICES=$GPU nvidia-cuda-mps-control >/dev/null 2>&1
sleep 1
CUDA_VISIBLE_DEVICES=$GPU nvidia-cuda-mps-control -d || { echo "gpu_mps_check: cannot restart MPS"; exit 1; }
control "set_default_active_thread_percentage 25" >/dev/null
expect "default active thread percentage" "$(control get_default_active_thread_percentage)" "25"
control "set_default_device_pinned_mem_limit 0 2G" >/dev/null
expect "default pinned memory limit" "$(control 'get_default_device_pinned_mem_limit 0')" "2"
control "start_server -uid $(id -u)" >/dev/null
env -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE bash -c "$(declare -f run); $(declare -p RUNNER RUNNER_TAIL GPU N REPS WORK); run daemon-25%" \
    || status=1
control "set_default_active_thread_percentage 100" >/dev/null  # the epilog's undo
expect "default after the undo" "$(control get_default_active_thread_percentage)" "100"
TIERS="$TIERS daemon-25"
cp "$WORK/digest-daemon-25%" "$WORK/digest-mps-daemon-25%" 2>/dev/null

reference=$(cat "$WORK/digest-exclusive" 2>/dev/null)
for tier in $TIERS; do
    if [ "$(cat "$WORK/digest-mps-$tier%" 2>/dev/null)" != "$reference" ] || [ -z "$reference" ]; then
        echo "gpu_mps_check: FAIL: output under the $tier% tier differs from the exclusive run"
        status=1
    fi
done
[ "$status" = 0 ] && echo "gpu_mps_check: OK: outputs bit-identical across exclusive and MPS tiers ($TIERS)"
exit "$status"
