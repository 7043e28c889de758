"""nemo_rl: a compact Ray-based post-training library. Importing it changes nothing in the
process: what a run needs of its environment is set by the entry point (examples/_cli.py) or
handed to the Ray job it starts (nemo_rl.distributed.ray_cluster.job_runtime_env)."""
