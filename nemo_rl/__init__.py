"""nemo_rl: a compact Ray-based post-training library."""
