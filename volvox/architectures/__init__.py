"""Graph builders by model family (LLaMA, GPT-2, GPT-Neo, BERT, EfficientNet-Lite), with the weight
name maps of the checkpoints they read (Hugging Face folders, GGUF files)."""
