"""Test hygiene: what a test leaves behind (Ray actors, placement groups, child processes, GPU
memory) and where a hung test is stuck (its Ray actors' stacks).

core.py is pure (no pytest, no Ray imports): snapshots, differences, leak records, stack
parsing and the one-line reasons. probe.py reads this process's Ray cluster (GCS), children
(/proc, psutil) and GPUs (NVML); hang.py dumps stacks (py-spy) and ends a hung test's
processes; plugin.py only translates pytest hooks into calls on those.
"""
