"""`mens launch torchrun|slurm|kubeflow`: the file an engine the user already runs needs to start
`python -m mens <the user's overrides>` on hw.nodes nodes × hw.devices processes (one module per
emitter; mens.launch.common holds what they share). No engine code of mens's own: torchrun,
srun or the Kubeflow trainer start the processes and set the world; Lightning reads it.
`mens launch ray` (mens.launch.ray) is the one executor: Ray Train's workers start that command."""
