# mens launch torchrun: 2 node(s) × 8 process(es); run line i on node i (c10d store on node 0 at node0:29400).
# node 0
torchrun --nnodes=2 --nproc-per-node=8 --node-rank=0 --rdzv-backend=c10d --rdzv-endpoint=node0:29400 --rdzv-id=run-1 --max-restarts=1 -m mens +hw=h100 hw.devices=8 hw.nodes=2 +rung=8b lane=full 'data.system_prompt='"'"'You are terse.'"'"'' hydra.run.dir=<RUN_DIR>
# node 1
torchrun --nnodes=2 --nproc-per-node=8 --node-rank=1 --rdzv-backend=c10d --rdzv-endpoint=node0:29400 --rdzv-id=run-1 --max-restarts=1 -m mens +hw=h100 hw.devices=8 hw.nodes=2 +rung=8b lane=full 'data.system_prompt='"'"'You are terse.'"'"'' hydra.run.dir=<RUN_DIR>
