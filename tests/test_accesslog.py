"""The access log line: the model as its metrics label, so a made-up name is `other` there too."""

from __future__ import annotations

from structlog.testing import capture_logs

from ollama_tap.accesslog import AccessLog
from ollama_tap.exchange import Outcome
from ollama_tap.names import ModelLabels
from tests.support.exchanges import new_exchange


def test_the_line_logs_the_label_not_the_name_as_typed() -> None:
    labels = ModelLabels(10)
    labels.set_known("tags", ["hf.co/User/Repo:Q4_K_M"])
    log = AccessLog(labels.label)
    logged = []
    for name in ("hf.co/user/repo:q4_k_m", "typo-model", None):
        ex = new_exchange("/api/generate", status=404, outcome=Outcome.UPSTREAM_ERROR)
        ex.request.model = name
        with capture_logs() as lines:
            log.response(ex)
        logged.append(lines[0]["model"])
    assert logged == ["hf.co/User/Repo:Q4_K_M", "other", None]
