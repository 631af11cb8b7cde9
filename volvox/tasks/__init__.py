"""Task front-ends over the graph runtime: text generation (and later classify, detect, ctc, embed)."""
