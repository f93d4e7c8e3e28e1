"""What the poller keeps of an /api/show reply (ollama_tap/ollama/state.py `shown_facts`)."""

from __future__ import annotations

from ollama_tap.ollama.state import shown_facts

BLOB = "a" * 64


def test_the_facts_the_rules_need_from_api_show() -> None:
    reply = {
        "details": {"family": "mllama", "parameter_size": "11B", "quantization_level": "Q4_K_M"},
        "model_info": {"general.architecture": "mllama", "mllama.context_length": 131072},
        "capabilities": ["completion", "vision"],
        "parameters": 'stop    "<|eot_id|>"\nnum_keep    24',
        "modelfile": f"# Modelfile\nFROM /root/.ollama/models/blobs/sha256-{BLOB}\n",
    }
    details, (train, vision, keep, blob) = shown_facts(reply)
    assert details == ("mllama", "11B", "Q4_K_M")
    assert (train, vision, keep, blob) == (131072, True, 24, BLOB)


def test_a_bare_reply_has_no_facts() -> None:
    assert shown_facts({}) == (("", "", ""), (None, False, None, None))
    assert shown_facts({"parameters": "num_keep x", "modelfile": 7})[1] == (None, False, None, None)
