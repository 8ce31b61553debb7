#!/bin/bash
# ../shared/notes/gpu-checklist.md as one script, for a lent GPU machine whose
# python3 holds torch but not alf's other dependencies.
#
#   DEPS=.whl/dsite.tar.xz GL=.whl/gl bash benchmarks/gpu_checklist.sh
#
# (`benchmarks/gpu_deps.sh` builds both.) DEPS (optional): tar.xz archives
# (space-separated), each of a site-packages folder with what the machine
# lacks, unpacked onto PYTHONPATH. GL (optional): a folder of .deb packages
# of the system's OpenGL and X11 libraries, which MetaDrive's engine loads
# even when it renders nothing and the 2026-11 image lacks; unpacked into
# /tmp and put on LD_LIBRARY_PATH. ONLY (optional): a regex; only the steps
# whose names match it run (e.g. ONLY='env|metadrive'). PYTEST_K
# (optional): tests/gpu's -k. VARIANTS (optional): the metadrive_variants
# step's --modes. SCALING (optional): the metadrive_scaling step's
# --processes (e.g. 4,8 where 1 and 2 were measured before).
#
# Every step has its own time limit and logs to $OUT (or
# /tmp/gpu-checklist), so one that fails or hangs costs only its own
# minutes.
set -u
OUT=${OUT:-/tmp/gpu-checklist}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 SDL_AUDIODRIVER=dummy SDL_VIDEODRIVER=dummy
if [ -n "${DEPS:-}" ]; then
    # Unpacked once per machine: a call may run this script twice (two
    # ONLY filters, to order the steps).
    if [ ! -e /tmp/site/.unpacked ]; then
        mkdir -p /tmp/site
        for d in $DEPS; do tar -xJf "$d" -C /tmp/site; done
        touch /tmp/site/.unpacked
    fi
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
if [ -n "${GL:-}" ]; then
    if [ ! -e /tmp/gl/.unpacked ]; then
        mkdir -p /tmp/gl
        for f in "$GL"/*.deb; do dpkg -x "$f" /tmp/gl; done
        touch /tmp/gl/.unpacked
    fi
    export LD_LIBRARY_PATH=/tmp/gl/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
step() {  # step NAME SECONDS COMMAND...: runs COMMAND, logs to $OUT/NAME.log
    local name=$1 limit=$2; shift 2
    [[ $name =~ ${ONLY:-.} ]] || return 0
    echo "=== $name ($(date +%T), limit ${limit}s): $*"
    local t0=$SECONDS
    # -k 30: the benchmarks stop their runs' process groups on SIGTERM
    # (benchmarks/runs.py), which takes a few seconds.
    timeout -k 30 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    reap
    echo "=== $name: exit $rc after $((SECONDS - t0)) s"
    tail -n "${TAIL:-25}" "$OUT/$name.log" | grep -v pkg_resources
    return $rc
}
reap() {  # no part of a step's runs may load the next step's machine
    local i
    for i in $(seq 20); do
        pgrep -f "[a]lf[.]bin[.]train|[s]pawn_main" > /dev/null || return 0
        sleep 1
    done
    echo "=== killing what the last step left running:"
    pgrep -af "[a]lf[.]bin[.]train|[s]pawn_main" | cut -c1-120
    pkill -9 -f "[a]lf[.]bin[.]train|[s]pawn_main"
}
step env 30 python3 -c "
import os, torch, alf, metadrive, gin, gymnasium, optree, numpy
print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-',
      'gymnasium', gymnasium.__version__, 'numpy', numpy.__version__,
      'cores', os.cpu_count())"
# One MetaDrive engine (10 s): without it the MetaDrive steps below are
# skipped rather than left to fail slowly.
if ! step metadrive_smoke 45 python3 -c "
from alf.environments.metadrive_env_fn import make_env
env = make_env('metadrive.envs.metadrive_env:MetaDriveEnv',
               dict(num_scenarios=1, start_seed=0, horizon=100, log_level=50))
env.reset(seed=0)
for _ in range(10):
    env.step(env.action_space.sample())
print('MetaDrive stepped')"; then
    SKIP_MD=1
fi
md() { [ -z "${SKIP_MD:-}" ] && step "$@"; }
# What an actor adds to each MetaDrive step on these cores (~30 s): with
# the simulator's own CPU per step it bounds the fraction of bare
# MetaDrive that training can reach here.
md actor_overhead 60 python3 benchmarks/actor_overhead.py
# 4. MetaDrive, one environment per core, against bare MetaDrive x cores:
# first the scaling curve of asynchronous collection (1, 2, 4 and 8 CPU
# processes; 12 iterations each, the first left out of the rate), then
# synchronous collection on 1 and 2, then asynchronous on the GPU. Each
# variant costs ~40 s of start-up (16 engines) plus its training, each
# step ~20 s more for bare MetaDrive: ONLY picks what the budget allows.
MD="--workload metadrive --repeats 1
    --gin_param TrainerConfig.num_envs=$(nproc)
    --gin_param TrainerConfig.unroll_length=$((4096 / $(nproc)))"
TAIL=30 md metadrive_scaling 300 python3 benchmarks/async_collection.py $MD \
    --processes "${SCALING:-1,2,4,8}" --modes async
# Where one process's asynchronous collection loses its time on many cores
# (2026-11-30's H200 machine: 0.61 of bare, the actors waiting 25% for a
# policy with the slowest actor 2.3x the fastest, the learner 12% for
# unrolls; max_policy_lag=2 recovered none of it): segments that any actor
# fills (a quarter unroll: no unroll waits for its slowest environment),
# the learner on the GPU, and the actors at the learner's priority against
# below it (~60-80 s each). With the GPU tests this step fits one
# 15-minute session:
# ONLY='^(env|metadrive_smoke|metadrive_variants|gpu_tests)$' (~8 min).
SEG=$((4096 / $(nproc) / 4))
TAIL=30 md metadrive_variants 420 python3 benchmarks/async_collection.py $MD \
    --processes 1 --num_env_steps 32768 --modes "${VARIANTS:-async,async+segment_length=$SEG,async+device='cuda',async+actor_niceness=0}"
TAIL=30 md metadrive_sync 170 python3 benchmarks/async_collection.py $MD \
    --processes 1,2 --modes sync --num_env_steps 32768
TAIL=30 md metadrive_cuda 100 python3 benchmarks/async_collection.py $MD \
    --processes 1 --modes async --devices cuda
# 1. the CUDA tests, several at once (each is a short CLI run)
step gpu_tests 120 python3 -m pytest -q -p no:cacheprovider -n 8 tests/gpu ${PYTEST_K:+-k "$PYTEST_K"}
# 2. CartPole: --distributed multi-gpu on one GPU, and cuda vs cpu rates
step cart_pole_multi_gpu 40 python3 -m alf.bin.train \
    --gin_file ppo_cart_pole.gin --root_dir /tmp/gc/multi_gpu \
    --distributed multi-gpu --gin_param TrainerConfig.num_env_steps=8192
step cart_pole_rates 50 python3 benchmarks/async_collection.py \
    --workload cart_pole --repeats 1 --processes 1 --modes sync \
    --devices cpu,cuda --num_env_steps 20480
# 5. the CNN (84x84 top-down frames) on cuda vs cpu
md metadrive_bev 150 python3 benchmarks/async_collection.py \
    --workload metadrive_bev --repeats 1 --processes 1 --modes async \
    --devices cpu,cuda --gin_param TrainerConfig.num_envs=$(nproc) \
    --gin_param TrainerConfig.unroll_length=$((1024 / $(nproc)))
# Issue 10's 300k comparison on many cores: ppg_metadrive.gin, 2 processes,
# one environment per core, sync then async, evaluations as configured
# (~5 + ~3.5 min: a call of its own, ONLY=metadrive_300k).
TAIL=40 md metadrive_300k 560 python3 benchmarks/mode_curves.py \
    --gin_file ppg_metadrive.gin --root /tmp/gc/modes --processes 2 \
    --gin_param TrainerConfig.num_envs=$(nproc) \
    --gin_param TrainerConfig.unroll_length=$((4096 / $(nproc)))
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
