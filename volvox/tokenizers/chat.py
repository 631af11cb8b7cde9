"""Chat templates: render a model's jinja2 template in a sandbox, as transformers does.

Templates come from model files, which are untrusted: they run in jinja2's
ImmutableSandboxedEnvironment (no attribute escapes, no mutation of the
messages), and every template problem surfaces as a TokenizerError.
"""

import datetime
import functools
import json

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from volvox.errors import TokenizerError

# Used when a model ships no template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class _TemplateRaised(Exception):
    """Carries a template's own raise_exception() message out of jinja2."""


def _raise_exception(message):
    raise _TemplateRaised(str(message))


def _tojson(value, indent=None):
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(template)


def render_chat_template(
    template: str | None,
    messages: list[dict],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    **extra,
) -> str:
    """Render ``messages`` with a jinja2 chat ``template`` (ChatML when None).

    The context matches transformers' apply_chat_template: ``messages``,
    ``bos_token``, ``eos_token``, ``add_generation_prompt``, ``raise_exception``,
    plus any ``extra`` variables (e.g. ``tools``).
    """
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        raise TokenizerError("chat messages must be a list of dicts with 'role' and 'content'")
    source = CHATML_TEMPLATE if template is None else template
    try:
        return _compile(source).render(
            messages=messages,
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
            **extra,
        )
    except _TemplateRaised as exc:
        raise TokenizerError(f"chat template rejected the messages: {exc}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise TokenizerError(f"chat template syntax error at line {exc.lineno}: {exc.message}") from None
    except jinja2.exceptions.SecurityError as exc:
        raise TokenizerError(f"chat template tried an unsafe operation (sandbox): {exc}") from None
    except Exception as exc:  # any other failure inside untrusted template code
        raise TokenizerError(f"chat template failed: {type(exc).__name__}: {exc}") from None
