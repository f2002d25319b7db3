#!/usr/bin/env bash
# examples/loop.py as torchrun runs it in each task, for the integration tests' HYDRO_TEST_PROGRAM=torchrun:
# `torchrun --standalone --nproc-per-node=2 loop.py ARGS...`, 2 workers per node in a Gloo group, each in a
# session of its own with its descriptors closed, as torchrun starts them. bash execs torchrun, so
# hydro-launch's child is torchrun itself. Only the worker of local rank 0 prints to stdout (its steps
# and its weights_digest, as the tests read one per task; DDP keeps both workers' weights equal);
# the other's stdout goes to /dev/null, and both workers' hydro log lines (stderr) stay. torchrun runs
# each worker as `bash -c` (--no-python), which execs the example: the worker's pid is the example's.
# A step of several nodes (one task each) runs one torchrun per node, which meet at the first node's
# c10d rendezvous: 2 workers per node, ranks in the order they meet (the data follows the rank).
rdzv=(--standalone)
if [ "${SLURM_STEP_NUM_NODES:-1}" -gt 1 ]; then
  head=$(scontrol show hostnames "$SLURM_STEP_NODELIST" | head -1)
  rdzv=(--nnodes="$SLURM_STEP_NUM_NODES" --rdzv-backend=c10d --rdzv-id="$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}"
    --rdzv-endpoint="$head:$((29400 + SLURM_JOB_ID % 500))")
fi
exec torchrun "${rdzv[@]}" --nproc-per-node=2 --max-restarts=3 --no-python \
  bash -c '[ "$LOCAL_RANK" = 0 ] || exec >/dev/null; exec "$0" "$@"' "$(dirname "$0")/../../examples/loop.py" "$@"
