"""policy.tokenizer.name (upstream's key) reaches the policy worker.

Its own file: the last test of test_dtensor_worker.py inherits, at that module's teardown, what
the module's shared worker ran (generation among it); this one shares no worker.
"""

import json
import shutil
from pathlib import Path

from nemo_rl.distributed.virtual_cluster import cluster_from_config
from nemo_rl.models.policy.policy import Policy
from tests.unit.policy_helpers import one_worker_gpus, policy_config


def test_policy_tokenizer_name_is_the_workers_tokenizer(ray_cluster, tiny_llama: str, tmp_path) -> None:
    # upstream's policy.tokenizer.name: the worker loads that tokenizer, not the model folder's
    # (a checkpoint's HF export carries the worker's tokenizer)
    tok = tmp_path / "tokenizer"
    shutil.copytree(Path(tiny_llama), tok, ignore=shutil.ignore_patterns("*.safetensors", "*config.json"))
    shutil.copy(Path(tiny_llama) / "tokenizer_config.json", tok)
    settings = json.loads((tok / "tokenizer_config.json").read_text())
    settings["model_max_length"] = 321  # what tells this tokenizer from the model's own
    (tok / "tokenizer_config.json").write_text(json.dumps(settings))
    p = Policy(policy_config(tiny_llama, tokenizer={"name": str(tok)}), cluster_from_config(1, one_worker_gpus()))
    try:
        p.save_checkpoint(str(tmp_path / "ck"))
    finally:
        p.shutdown()
    assert json.loads((tmp_path / "ck" / "hf" / "tokenizer_config.json").read_text())["model_max_length"] == 321
