"""volvox serve: an OpenAI-compatible HTTP server with continuous batching and a chat page.

``create_app`` (app.py) builds the ASGI app over a loaded model; ``run`` (server.py) loads a model
and serves it with uvicorn. Needs the ``serve`` extra (``pip install volvox[serve]``).
"""
