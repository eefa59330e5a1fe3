#!/usr/bin/env bash
# The GPU checks in one command, for a GPU server held for a few minutes: each stage runs under
# its own time limit inside a total budget, a stage that fails does not stop the next, and the
# results are packed into OUT_DIR/gpu-check.tgz after every stage (so that a command cut short
# still leaves what was measured).
#
#   bash benchmarks/gpu/check.sh OUT_DIR BUDGET_S STAGE...
#
# stages: smoke (one run on CUDA; the others are skipped if it fails), tests (pytest -m gpu),
# truth (benchmarks/gpu/truth.py, one round), script (task=script against the script's own log,
# alone and under sweeper, and under sweeper with the drift check on, or SWEEPER_SCRIPT_SIDE's overrides),
# steps (the script with one loader worker, its steps recorded alone and the run's stops replayed on them),
# frameworks (benchmarks/framework_agreement.py: the Lightning and Trainer examples on the GPU),
# decode (2,000 generated JPEGs, resnet18 inference read by task.decoder=pil, torchvision and device),
# sweep:TASK (a search=gpu sweep of mnist_mlp, image_classification or language_model).
# SWEEPER_TRUTH_ROUNDS (1) and SWEEPER_TRUTH_S (4: seconds measured per run) size truth, SWEEPER_SCRIPT_ROUNDS (1) script;
# SWEEPER_TRUTH_WINDOW_ONLY=1 leaves out truth's per-step runs; SWEEPER_SWEEP_S (200) caps each sweep; SWEEPER_GPU_TESTS picks tests by pytest's -k.
# With the wheels in .whl/ (pack_wheels.sh) they are installed first (install.sh).
set -uo pipefail
out=$(realpath -m "$1")
budget=$2
shift 2
mkdir -p "$out"
work=$(mktemp -d)
mkdir "$work/tmp"
export TMPDIR=$work/tmp PYTHONUNBUFFERED=1
started=$SECONDS
summary=$work/summary.txt

left() { echo $((budget - (SECONDS - started))); }
# without compiler caches and scratch; if still too large to carry, the text files alone
pack() {
    tar czf "$out/gpu-check.tgz" -C "$work" --exclude=./tmp --exclude='torchinductor*' . 2>/dev/null
    if (($(stat -c %s "$out/gpu-check.tgz") > 15000000)); then
        (cd "$work" && find . -path ./tmp -prune -o -type f \( -name '*.log' -o -name '*.json' -o -name '*.txt' \
            -o -name '*.csv' -o -name '*.yaml' \) -size -1M -print | tar czf "$out/gpu-check.tgz" -T -)
    fi
}
note() { echo "$*" | tee -a "$summary"; }

# run NAME LIMIT_S COMMAND...: under `timeout`, its output in $work/NAME.log
run() {
    local name=$1 limit=$2
    shift 2
    local have
    have=$(left)
    if ((have < 30)); then
        note "$name: skipped, ${have}s of the budget left"
        return 1
    fi
    ((limit > have - 10)) && limit=$((have - 10))
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" >"$work/$name.log" 2>&1
    local rc=$?
    note "$name: exit $rc after $((SECONDS - t0))s (limit ${limit}s)"
    pack
    return $rc
}

if [[ -d .whl ]]; then
    bash benchmarks/gpu/install.sh >"$work/install.log" 2>&1 || {
        cat "$work/install.log"
        exit 1
    }
    export PYTHONPATH=/tmp/site:$PWD
    tail -1 "$work/install.log"
fi
{
    nvidia-smi
    nproc
    free -g
    python3 -c "import torch, sys; print(sys.version); print('torch', torch.__version__, torch.version.cuda, \
torch.cuda.get_device_name(0), 'cudnn', torch.backends.cudnn.version())"
} >"$work/machine.txt" 2>&1
grep -m1 -E "NVIDIA|torch" "$work/machine.txt"

for stage in "$@"; do
    case $stage in
    smoke)
        if ! run smoke 90 python3 -m sweeper backend.device=cuda measure.windows=3 "hydra.run.dir=$work/smoke"; then
            tail -30 "$work/smoke.log"
            break
        fi
        python3 -c "import json,sys; r=json.load(open('$work/smoke/result.json')); \
print({k: r.get(k) for k in ('status','samples_per_sec','wall_s')})" | tee -a "$summary"
        ;;
    tests)
        run tests 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py --durations=0 -rfEs \
            ${SWEEPER_GPU_TESTS:+-k "$SWEEPER_GPU_TESTS"}
        grep -E "^(FAILED|ERROR)|passed|failed" "$work/tests.log" | tail -8 | tee -a "$summary"
        ;;
    truth)
        run truth $((200 * ${SWEEPER_TRUTH_ROUNDS:-1})) python3 benchmarks/gpu/truth.py "${SWEEPER_TRUTH_ROUNDS:-1}" \
            "$work/truth.json" "${SWEEPER_TRUTH_S:-4}" ${SWEEPER_TRUTH_WINDOW_ONLY:+window}
        grep -E "^(\||round)" "$work/truth.log" | tee -a "$summary"
        ;;
    script)
        # a line every 10 steps, so that sweeper's short runs hold a few of the script's own; sweeper's
        # runs kept (harness_cpu_pct in each result.json), and each also with the drift check off as it
        # shipped before (SWEEPER_SCRIPT_SIDE: other overrides; SWEEPER_AGREEMENT_NO_NVML=1 in the
        # environment adds a side with NVML's sampling hidden)
        SWEEPER_AGREEMENT_DIR=$work/script_runs \
            SWEEPER_AGREEMENT_OVERRIDES=${SWEEPER_SCRIPT_SIDE:-measure.drift_tol=null} \
            run script $((240 * ${SWEEPER_SCRIPT_ROUNDS:-1})) python3 benchmarks/script_agreement.py \
            "${SWEEPER_SCRIPT_ROUNDS:-1}" 300 10
        grep -E "^\|" "$work/script.log" | tee -a "$summary"
        ;;
    steps)
        # the script with one loader worker, its steps recorded alone (2 runs of 330 steps), and the
        # run's stops replayed on them: the share of the precision stop and of the drift check (0.5 as
        # shipped; replayed off, and at 5%) there
        SPAN_SCRIPT="examples/train_script.py --batch-size 256 --workers 1 --max-steps 330 --log-every 10"
        OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 run steps 200 python3 benchmarks/stop_rule_replay.py 2 \
            "measure.drift_tol=null" "measure.drift_tol=0.05" "measure.drift_tol=null measure.rel_precision=null" \
            --script "$SPAN_SCRIPT" --keep "$work/steps-script-256-1worker.json"
        grep -E "^  " "$work/steps.log" | tee -a "$summary"
        ;;
    frameworks)
        run frameworks 200 python3 benchmarks/framework_agreement.py 1
        grep -E "^\|" "$work/frameworks.log" | tee -a "$summary"
        ;;
    decode)
        python3 -m sweeper.data images "$work/jpegs" --images 2000 >"$work/jpegs.log" 2>&1
        for decoder in pil torchvision device; do
            run "decode-$decoder" 90 python3 -m sweeper backend.device=cuda task=image_classification \
                task.mode=inference "task.data_dir=$work/jpegs" task.num_classes=10 task.epoch_samples=null \
                loader.batch_size=256 loader.num_workers=8 "task.decoder=$decoder" "hydra.run.dir=$work/decode-$decoder"
            grep -m1 "samples/sec" "$work/decode-$decoder.log" | sed "s/^/$decoder: /" | tee -a "$summary"
        done
        ;;
    sweep:*)
        task=${stage#sweep:}
        limit=$(($(left) - 10))
        ((limit > ${SWEEPER_SWEEP_S:-200})) && limit=${SWEEPER_SWEEP_S:-200}
        # the search stops itself 45 s before the limit, leaving time to confirm the winner
        run "sweep-$task" "$limit" python3 -m sweeper -m "task=$task" "hydra.sweeper.timeout=$((limit - 45))s" \
            hydra.sweeper.n_trials=40 "hydra.sweep.dir=$work/sweeps/$task" \
            "hydra.sweeper.storage=sqlite:///$work/sweeper.db"
        grep -iE "confirmed|winner|stopped" "$work/sweep-$task.log" | tail -4 | tee -a "$summary"
        ;;
    *) note "unknown stage $stage" ;;
    esac
done
pack
echo "---- summary ($((SECONDS - started))s)"
cat "$summary"
