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
# (optional): tests/gpu's -k.
#
# Every step has its own time limit and logs to $OUT (or
# /tmp/gpu-checklist), so one that fails or hangs costs only its own
# minutes.
set -u
OUT=${OUT:-/tmp/gpu-checklist}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 SDL_AUDIODRIVER=dummy SDL_VIDEODRIVER=dummy
if [ -n "${DEPS:-}" ]; then
    mkdir -p /tmp/site
    for d in $DEPS; do tar -xJf "$d" -C /tmp/site; done
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
if [ -n "${GL:-}" ]; then
    mkdir -p /tmp/gl
    for f in "$GL"/*.deb; do dpkg -x "$f" /tmp/gl; done
    export LD_LIBRARY_PATH=/tmp/gl/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
step() {  # step NAME SECONDS COMMAND...: runs COMMAND, logs to $OUT/NAME.log
    local name=$1 limit=$2; shift 2
    [[ $name =~ ${ONLY:-.} ]] || return 0
    echo "=== $name ($(date +%T), limit ${limit}s): $*"
    local t0=$SECONDS
    timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - t0)) s"
    tail -n "${TAIL:-25}" "$OUT/$name.log"
    return $rc
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
# 1. the CUDA tests, several at once (each is a short CLI run)
step gpu_tests 120 python3 -m pytest -q -p no:cacheprovider -n 8 tests/gpu ${PYTEST_K:+-k "$PYTEST_K"}
# 4. MetaDrive, one environment per core: bare x cores vs training, sync
# and async, on 1 and 2 CPU processes and 1 GPU process; then on 4 and 8
# CPU processes (the scaling curve). Two steps, so that a slow one still
# leaves the other's table.
MD="--workload metadrive --repeats 1 --num_env_steps 32768
    --gin_param TrainerConfig.num_envs=$(nproc)
    --gin_param TrainerConfig.unroll_length=$((4096 / $(nproc)))"
TAIL=30 md metadrive_12 230 python3 benchmarks/async_collection.py $MD \
    --processes 1,2 --devices cpu,cuda
TAIL=30 md metadrive_48 190 python3 benchmarks/async_collection.py $MD \
    --processes 4,8
# 2. CartPole: --distributed multi-gpu on one GPU, and cuda vs cpu rates
step cart_pole_multi_gpu 40 python3 -m alf.bin.train \
    --gin_file ppo_cart_pole.gin --root_dir /tmp/gc/multi_gpu \
    --distributed multi-gpu --gin_param TrainerConfig.num_env_steps=8192
step cart_pole_rates 50 python3 benchmarks/async_collection.py \
    --workload cart_pole --repeats 1 --processes 1 --modes sync \
    --devices cpu,cuda --num_env_steps 20480
# 5. the CNN (84x84 top-down frames) on cuda vs cpu
md metadrive_bev 60 python3 benchmarks/async_collection.py \
    --workload metadrive_bev --repeats 1 --processes 1 --modes async \
    --devices cpu,cuda --gin_param TrainerConfig.num_envs=$(nproc) \
    --gin_param TrainerConfig.unroll_length=$((1024 / $(nproc)))
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
