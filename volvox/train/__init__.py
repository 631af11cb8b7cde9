"""Training on the inference graph: training graphs of loaded models (graph.py); autodiff lives in
volvox.compile.autodiff, losses and grad ops in volvox.ops."""

from volvox.train.graph import TrainingGraph, block_checkpoints, causal_lm_graph, trainable_graph, training_graph

__all__ = ["TrainingGraph", "block_checkpoints", "causal_lm_graph", "trainable_graph", "training_graph"]
