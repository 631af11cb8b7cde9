"""volvox: a small, fast inference engine for small neural networks.

    import volvox
    lm = volvox.load("smollm2-135m-instruct")
    print(lm.generate("The capital of France is", max_new_tokens=16))
"""

from volvox.errors import (AudioError, BlueprintError, ClosedError, DataError, GenerationError, GGUFError, KernelError, ModelNotFoundError,
                           ShapeError, TokenizerError, UnsupportedError, VolvoxError, WeightsError)
from volvox.cpu import get_num_threads, set_num_threads
from volvox.loader import load

__version__ = "0.1.0"

__all__ = [
    "load", "set_num_threads", "get_num_threads", "__version__",
    "VolvoxError", "AudioError", "BlueprintError", "WeightsError", "GGUFError", "TokenizerError", "ModelNotFoundError",
    "UnsupportedError", "ShapeError", "GenerationError", "KernelError", "ClosedError", "DataError",
]
