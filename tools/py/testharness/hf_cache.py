"""Can a (gated) Hugging Face model be loaded here? (pure: no pytest, no Ray)"""

from __future__ import annotations

import os

_TRUE = {"1", "true", "yes", "on"}


def hf_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) forbids downloads."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def model_in_cache(repo_id: str) -> bool:
    """True when the model's config.json is in the local HF cache (HF_HOME / HF_HUB_CACHE)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except (ValueError, OSError):  # a malformed repo id (HFValidationError) or an unreadable cache: absent
        return False
    return isinstance(found, str)


def hf_token_present() -> bool:
    """A token from HF_TOKEN or a stored `hf auth login`."""
    if os.environ.get("HF_TOKEN"):
        return True
    try:
        from huggingface_hub import get_token
    except ImportError:
        return False
    try:
        return bool(get_token())
    except Exception:  # noqa: BLE001  huggingface_hub raises what its version does for a broken token file: no token
        return False


def model_unavailable_reason(repo_id: str) -> str | None:
    """None when the model can be loaded, else a one-line reason naming it."""
    if model_in_cache(repo_id):
        return None
    if hf_offline():
        return f"gated model {repo_id} is not in the local Hugging Face cache (HF_HUB_OFFLINE is set)"
    if hf_token_present():
        return None
    return (
        f"gated model {repo_id} is not in the local Hugging Face cache and no HF_TOKEN is set "
        "(accept its licence on the Hub, then export HF_TOKEN or run `hf auth login`)"
    )
