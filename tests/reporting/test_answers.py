"""A notebook's computed answer folded in its output (at2po_lib.reporting.answers): what the
block prints becomes one closed <details> block, whatever the frontend does with
``outputs_hidden`` (JupyterLab 4 unfolds outputs whenever a cell runs)."""

from __future__ import annotations

import IPython
import IPython.display
import pytest

from at2po_lib.reporting.answers import ANSWER_SUMMARY, answer_fold, answer_html


def test_printed_answer_is_displayed_in_a_closed_fold(monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: shown.append((a, k)))
    with answer_fold():
        print("[2 8 7 6]")
        print("a < b & c")
    assert capsys.readouterr().out == ""  # nothing printed beside the fold
    assert len(shown) == 1
    (bundle,), kwargs = shown[0]
    assert kwargs == {"raw": True}
    assert bundle["text/plain"] == "[2 8 7 6]\na < b & c\n"
    page = bundle["text/html"]
    assert page.startswith("<details><summary>") and "<details open" not in page
    assert f"<summary>{ANSWER_SUMMARY}</summary>" in page
    assert "[2 8 7 6]\na &lt; b &amp; c\n</pre></details>" in page


def test_without_ipython_it_prints_as_it_is(monkeypatch, capsys):
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    with answer_fold():
        print("42")
    assert capsys.readouterr().out == "42\n"


def test_an_error_in_the_block_keeps_what_was_printed(monkeypatch, capsys):
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: pytest.fail("displayed"))
    with pytest.raises(ZeroDivisionError):
        with answer_fold():
            print("so far")
            1 / 0
    assert capsys.readouterr().out == "so far\n"


def test_answer_html_escapes_the_summary_too():
    assert answer_html("x", "<b>") == (
        "<details><summary>&lt;b&gt;</summary><pre style='margin:0'>x</pre></details>"
    )
