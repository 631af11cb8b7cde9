"""volvox's exceptions: one base class, one subclass per kind of problem.

Every error a user can provoke (a bad file, a bad argument, a missing model)
is raised as a subclass of :class:`VolvoxError` whose message names the file,
tensor, node or field at fault.
"""


class VolvoxError(Exception):
    """Base class of every error volvox raises on purpose."""


class BlueprintError(VolvoxError):
    """config.json is malformed, or the graph it describes is inconsistent."""


class WeightsError(VolvoxError):
    """A weights file (safetensors) is truncated, malformed or lies about its tensors."""


class GGUFError(VolvoxError):
    """A GGUF file is truncated, malformed or not a GGUF file at all."""


class TokenizerError(VolvoxError):
    """Tokenizer data is missing or malformed, or text/ids cannot be converted."""


class ModelNotFoundError(VolvoxError):
    """A model name, path or file could not be found or fetched."""


class UnsupportedError(VolvoxError):
    """A valid input uses something volvox does not implement (architecture, op, quant type)."""


class ShapeError(VolvoxError):
    """Tensor shapes or dtypes do not match what an op or graph input requires."""


class GenerationError(VolvoxError):
    """Invalid generation arguments, or a request that exceeds the model's context."""


class AudioError(VolvoxError):
    """An audio file or array that cannot be heard: missing, unreadable, empty, wrong sample type, NaNs."""


class DataError(VolvoxError):
    """Training data that cannot be used: a missing file, a malformed JSON line, a conversation without
    an assistant turn, an empty corpus; the message names the file and line."""


class KernelError(VolvoxError):
    """A kernel was handed arrays it cannot process (dtype, layout, shape)."""


class ClosedError(VolvoxError):
    """A model or session was used after close()."""


class DeviceError(VolvoxError):
    """A GPU failed at run time (out of device memory, device lost, a hung submit); the message
    names the backend and the operation."""
