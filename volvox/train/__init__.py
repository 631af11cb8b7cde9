"""Training on the inference graph: training graphs of loaded models (graph.py), optimisers and
schedules (optim.py, schedule.py), data (data.py), LoRA adapters (lora.py; where they go:
volvox.architectures.lora), checkpoints and the finetune loop (checkpoint.py, finetune.py); autodiff
lives in volvox.compile.autodiff, losses and grad ops in volvox.ops.

    import volvox, volvox.train
    lm = volvox.load("smollm2-135m-instruct")
    volvox.train.finetune(lm, "chats.jsonl", steps=200, out_dir="my-adapter")
    tuned = volvox.load("smollm2-135m-instruct", adapter="my-adapter")
"""

from volvox.architectures.lora import LoraConfig
from volvox.train.graph import TrainingGraph, block_checkpoints, causal_lm_graph, trainable_graph, training_graph
from volvox.train.finetune import TrainResult, finetune

__all__ = ["TrainingGraph", "block_checkpoints", "causal_lm_graph", "trainable_graph", "training_graph",
           "LoraConfig", "TrainResult", "finetune"]
