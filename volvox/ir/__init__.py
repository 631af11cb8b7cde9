"""The intermediate representation: graphs of named tensors (graph.py) and the quantized weight
blocks they may hold (quant_blocks.py). Imports nothing of volvox above errors."""
