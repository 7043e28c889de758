"""pytest plugin: marker-based selection (--hf-gated, --mcore-only), run_first, GPU-count skips, tracker."""
