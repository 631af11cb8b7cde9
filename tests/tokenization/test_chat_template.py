"""Chat templates: SmolLM2's own template, the ChatML fallback, and the sandbox."""

import jinja2
import pytest

from volvox.errors import TokenizerError
from volvox.tokenizers import CHATML_TEMPLATE, ByteLevelBPETokenizer, render_chat_template

gguf = pytest.importorskip("gguf")

QUESTION = [{"role": "user", "content": "What is 2+2?"}]

# Written out by hand from SmolLM2's template: it adds its default system prompt.
SMOLLM2_EXPECTED = (
    "<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\n"
    "What is 2+2?<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def smollm2_template(smollm2_gguf_path):
    field = gguf.GGUFReader(smollm2_gguf_path).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def _tiny_tokenizer(template):
    tokens = ["<s>", "</s>", "a"]
    return ByteLevelBPETokenizer(tokens, [], {"<s>": 0, "</s>": 1}, bos_id=0, eos_id=1, chat_template=template)


def test_smollm2_template(smollm2_template):
    assert render_chat_template(smollm2_template, QUESTION) == SMOLLM2_EXPECTED


def test_smollm2_template_matches_plain_jinja2(smollm2_template):
    # transformers' context, in an unsandboxed environment: the sandbox must not change the output.
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    for messages in (QUESTION, [{"role": "system", "content": "Be terse."}, *QUESTION,
                                {"role": "assistant", "content": "4"}, {"role": "user", "content": "Sure?"}]):
        for add in (True, False):
            expected = env.from_string(smollm2_template).render(
                messages=messages, bos_token="<|im_start|>", eos_token="<|im_end|>", add_generation_prompt=add
            )
            got = render_chat_template(smollm2_template, messages, bos_token="<|im_start|>",
                                       eos_token="<|im_end|>", add_generation_prompt=add)
            assert got == expected


def test_system_message_replaces_default(smollm2_template):
    messages = [{"role": "system", "content": "Be terse."}, *QUESTION]
    out = render_chat_template(smollm2_template, messages, add_generation_prompt=False)
    assert out == "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"


def test_tokenizer_apply_chat_template(smollm2_template):
    tok = _tiny_tokenizer(smollm2_template)
    assert tok.apply_chat_template(QUESTION) == SMOLLM2_EXPECTED
    assert tok.apply_chat_template(QUESTION, add_generation_prompt=False) == SMOLLM2_EXPECTED.removesuffix(
        "<|im_start|>assistant\n"
    )


def test_missing_template_falls_back_to_chatml():
    tok = _tiny_tokenizer(None)
    assert tok.apply_chat_template(QUESTION) == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert render_chat_template(None, QUESTION) == render_chat_template(CHATML_TEMPLATE, QUESTION)


def test_context_has_bos_eos_and_block_trimming():
    template = (
        "{{ bos_token }}\n"
        "{% for m in messages %}\n"
        "    {% if m['role'] == 'user' %}\n"
        "[{{ m['content'] | tojson }}]\n"
        "    {% endif %}\n"
        "{% endfor %}\n"
        "{{ eos_token }}"
    )
    out = _tiny_tokenizer(template).apply_chat_template([{"role": "user", "content": "é\"x"}])
    assert out == '<s>\n["é\\"x"]\n</s>'


def test_loop_controls_available():
    template = "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m['content'] }}{% endfor %}"
    assert render_chat_template(template, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "a"


def test_raise_exception_becomes_tokenizer_error():
    template = (
        "{% if messages[0]['role'] != 'system' %}"
        "{{ raise_exception('first message must be system') }}{% endif %}"
    )
    with pytest.raises(TokenizerError, match="first message must be system"):
        render_chat_template(template, QUESTION)


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__init__.__globals__ }}",
        "{{ raise_exception.__globals__['__builtins__'] }}",
        "{% set _ = messages.append({'role': 'x'}) %}",
        "{{ messages[0].update({'role': 'hacked'}) }}",
    ],
)
def test_sandbox_blocks_escapes(template):
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(TokenizerError, match="unsafe"):
        render_chat_template(template, messages)
    assert messages == [{"role": "user", "content": "hi"}]


def test_syntax_error_names_line():
    with pytest.raises(TokenizerError, match="syntax error at line 2"):
        render_chat_template("ok\n{% for m in messages %}", QUESTION)


def test_runtime_error_in_template():
    with pytest.raises(TokenizerError, match="chat template failed"):
        render_chat_template("{{ messages[0]['content'] + 1 }}", QUESTION)


def test_bad_messages():
    with pytest.raises(TokenizerError, match="list of dicts"):
        render_chat_template(None, "hello")
