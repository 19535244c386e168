set -e
MENS_RDZV_HOST=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
torchrun --nnodes=$SKYPILOT_NUM_NODES --nproc-per-node=$SKYPILOT_NUM_GPUS_PER_NODE --node-rank=$SKYPILOT_NODE_RANK --rdzv-backend=c10d --rdzv-endpoint=$MENS_RDZV_HOST:29500 --rdzv-id=mens-8b-full --max-restarts=1 -m mens rerun="$HOME/mens/run" hydra.run.dir="$HOME/mens/outputs/r"
