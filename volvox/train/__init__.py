"""Training: losses' drivers, optimisers, schedules, LoRA adapters, data and the finetune loop."""
