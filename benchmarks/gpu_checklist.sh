#!/bin/bash
# ../shared/notes/gpu-checklist.md as one script, for a lent GPU machine whose
# python3 holds torch but not alf's other dependencies.
#
#   DEPS=.whl/dsite.tar.xz bash benchmarks/gpu_checklist.sh
#
# DEPS (optional): tar.xz archives (space-separated), each of a
# site-packages folder with what the machine lacks (gin-config, gymnasium,
# optree, metadrive-simulator and its own dependencies), unpacked onto
# PYTHONPATH. ONLY (optional): a regex; only the steps whose names match it
# run (e.g. ONLY='env|metadrive'). PYTEST_K (optional): tests/gpu's -k.
#
# Every step has its own time limit and logs to $OUT (or
# /tmp/gpu-checklist), so one that fails or hangs costs only its own
# minutes. MetaDrive also needs the system's libGL.so.1 and libX11.so.6,
# which the lent machines' image lacked (2026-11-26): unpack them first (the
# device README's .gl recipe, plus libx11-6).
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
step() {  # step NAME SECONDS COMMAND...: runs COMMAND, logs to $OUT/NAME.log
    local name=$1 limit=$2; shift 2
    [[ $name =~ ${ONLY:-.} ]] || return 0
    echo "=== $name ($(date +%T), limit ${limit}s): $*"
    local t0=$SECONDS
    timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "=== $name: exit $? after $((SECONDS - t0)) s"
    tail -n "${TAIL:-25}" "$OUT/$name.log"
}
step env 30 python3 -c "
import os, torch, alf, metadrive, gin, gymnasium, optree, numpy
print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-',
      'gymnasium', gymnasium.__version__, 'numpy', numpy.__version__,
      'cores', os.cpu_count())"
# 1. the CUDA tests, several at once (each is a short CLI run)
step gpu_tests 120 python3 -m pytest -q -p no:cacheprovider -n 8 tests/gpu ${PYTEST_K:+-k "$PYTEST_K"}
# 4. MetaDrive, one environment per core: bare x cores vs training, 1 and 2
# CPU processes sync and async; then async on 1 GPU process and 1, 2, 4 and 8
# CPU processes (the scaling curve).
MD="--workload metadrive --repeats 1 --num_env_steps 32768
    --gin_param TrainerConfig.num_envs=$(nproc)
    --gin_param TrainerConfig.unroll_length=$((4096 / $(nproc)))"
TAIL=30 step metadrive_12 170 python3 benchmarks/async_collection.py $MD \
    --processes 1,2
TAIL=30 step metadrive_scaling 230 python3 benchmarks/async_collection.py $MD \
    --processes 1,2,4,8 --modes async --devices cuda,cpu
# 2. CartPole: --distributed multi-gpu on one GPU, and cuda vs cpu rates
step cart_pole_multi_gpu 40 python3 -m alf.bin.train \
    --gin_file ppo_cart_pole.gin --root_dir /tmp/gc/multi_gpu \
    --distributed multi-gpu --gin_param TrainerConfig.num_env_steps=8192
step cart_pole_rates 50 python3 benchmarks/async_collection.py \
    --workload cart_pole --repeats 1 --processes 1 --modes sync \
    --devices cpu,cuda --num_env_steps 20480
# 5. the CNN (84x84 top-down frames) on cuda vs cpu
step metadrive_bev 60 python3 benchmarks/async_collection.py \
    --workload metadrive_bev --repeats 1 --processes 1 --modes async \
    --devices cpu,cuda --gin_param TrainerConfig.num_envs=$(nproc) \
    --gin_param TrainerConfig.unroll_length=$((1024 / $(nproc)))
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
