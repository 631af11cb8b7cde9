"""GPU backends: ``devices.open_device(name)``, the shared API in ``backend``, op lowering in ``lowering``.

Nothing is imported here, so a missing driver or binding never breaks ``import volvox``.
"""
