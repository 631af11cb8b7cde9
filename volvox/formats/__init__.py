"""File formats, readers only: each turns bytes into what volvox computes with (a graph and
weights, weights and metadata, or tensors), naming the file and field at fault when they are bad."""
