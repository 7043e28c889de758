"""The Megatron-core policy path (extra `mcore`: `uv run --extra mcore ...`).

- `convert`: Hugging Face Llama/Qwen2 weights <-> megatron-core GPT weights, and tensor-parallel
  sharding of the latter (pure torch; importable without megatron-core).
- `model`: builds a megatron-core `GPTModel` with the local layer spec (no Transformer Engine).
- `megatron_policy_worker`: `MegatronPolicyWorker`, the Ray actor selected by
  `policy.megatron_cfg.enabled=true`.

Nothing here is imported unless the Megatron path is chosen: megatron-core is optional.
"""
