"""What the poller keeps of an /api/show reply (ollama_tap/ollama/state.py `shown_facts`)."""

from __future__ import annotations

from ollama_tap.ollama.state import shown_facts

BLOB = "a" * 64


def test_the_facts_the_rules_need_from_api_show() -> None:
    reply = {
        "details": {"family": "mllama", "parameter_size": "11B", "quantization_level": "Q4_K_M"},
        "model_info": {"general.architecture": "mllama", "mllama.context_length": 131072},
        "capabilities": ["completion", "vision"],
        "parameters": 'stop    "<|eot_id|>"\nnum_keep    24\nnum_ctx    8192\n'
        "use_mmap    false\nnum_gpu    -1\ntemperature    0.5\nnum_batch    x",
        "modelfile": f"# Modelfile\nFROM /root/.ollama/models/blobs/sha256-{BLOB}\n"
        f"ADAPTER /root/.ollama/models/blobs/sha256-{'b' * 64}\nTEMPLATE {{{{ .Prompt }}}}\n"
        "PARAMETER num_ctx 8192\n",
    }
    details, (train, vision, keep, blob, params, hidden) = shown_facts(reply)
    assert details == ("mllama", "11B", "Q4_K_M")
    assert (train, vision, keep, blob) == (131072, True, 24, BLOB)
    # The runner options the Modelfile sets, typed; not temperature, nor a number that is not.
    assert params == (("num_ctx", 8192), ("num_gpu", -1), ("use_mmap", False))
    # What else starts a runner: the weights and the adapter, not the template.
    assert hidden == (
        f"FROM /root/.ollama/models/blobs/sha256-{BLOB}\n"
        f"ADAPTER /root/.ollama/models/blobs/sha256-{'b' * 64}"
    )


def test_a_bare_reply_has_no_facts() -> None:
    assert shown_facts({}) == (("", "", ""), (None, False, None, None, (), None))
    bad = shown_facts({"parameters": "num_keep x", "modelfile": 7})[1]
    assert bad == (None, False, None, None, (), None)
