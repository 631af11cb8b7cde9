"""Running compiled graphs: the executor, run contexts and the KV cache."""
