"""--upstream NAME=URL: the boxes of the settings, from flags and the environment, and the
mistakes `serve` refuses with the fix."""

from __future__ import annotations

import pytest
from yarl import URL

from ollama_tap.boxes.spec import DEFAULT_BOX, BoxSpec
from ollama_tap.cli import main
from ollama_tap.config import Settings


def test_one_plain_url_is_the_default_box_unnamed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "10.1.2.3:4567")
    for settings in (Settings(), Settings(upstream="gpu:11434")):
        assert [b.name for b in settings.boxes] == [DEFAULT_BOX]
        assert not settings.named_boxes
    assert Settings().upstream_url == URL("http://10.1.2.3:4567")
    assert Settings(upstream="gpu").upstream_url == URL("http://gpu:11434")


def test_named_boxes_from_flags_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_TAP_UPSTREAM", "gpu1=http://a:11434, gpu2=b")
    settings = Settings()
    assert settings.boxes == (
        BoxSpec("gpu1", URL("http://a:11434")),
        BoxSpec("gpu2", URL("http://b:11434")),
    )
    assert settings.named_boxes and settings.upstream_url == URL("http://a:11434")
    one = Settings(upstream=("gpu1=http://a:11434",))
    assert one.named_boxes and [b.name for b in one.boxes] == ["gpu1"]
    # A URL with a query is never taken for a name.
    assert not Settings(upstream="http://a:11434/ollama?x=1").named_boxes


@pytest.mark.parametrize(
    ("values", "said"),
    [
        (["gpu1=http://a:11434", "http://b:11434"], "has no name; with several upstreams"),
        (["gpu1=http://a:11434", "gpu1=http://b:11434"], "'gpu1' is given twice"),
        (["gpu1=http://a:11434/api"], "names an API path"),
    ],
)
def test_serve_refuses_boxes_that_cannot_work(
    values: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--port", "0"]
    for value in values:
        argv += ["--upstream", value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
