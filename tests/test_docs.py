"""What a user reads: the README and docs link only to what a clone has, stay short enough to guide, and
describe the product as it is (no development history), and so do every command's --help and the configs."""

from __future__ import annotations

import contextlib
import io
import re
import sys
from importlib import import_module
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")

HISTORY = [
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"(?<![\w#/-])issues? \d+",  # this project's issues; another project's (nerfstudio#2818) are fine
        r"\bthis (session|stop)\b",
        r"\buntil issue\b",
        r"\bwas called\b",
        r"\bclosing note\b",
        r"\b(former|old|previous) defaults?\b",
        r"\bcorrected\b",
        r"\bat [0-9a-f]{7,12}\b",  # "measured at 5224ac6": a commit hash
        r"\bcommit [0-9a-f]{7,40}\b",
    )
]


def history_in(text: str) -> list[str]:
    return [match.group(0) for pattern in HISTORY for match in pattern.finditer(text)]


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", head.strip().lower()).replace(" ", "-") for head in heads}


def test_history_patterns_catch_what_they_should():
    assert history_in("Until issue 13 it was black") and history_in("the CI at 5224ac6")
    assert history_in("as this session measured") and history_in("the former default")
    assert not history_in("nerfstudio#2818 and nerfstudio's issue tracker; 99.2% of the teacher")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_links_resolve_inside_a_clone(document: Path):
    text = document.read_text()
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        assert resolved.is_relative_to(ROOT), f"{document.name}: {target} points outside the repository"
        assert resolved.exists(), f"{document.name}: {target} does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved.read_text()), f"{document.name}: no heading #{anchor} in {path}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_documents_describe_the_product_not_its_history(document: Path):
    assert not history_in(document.read_text()), document.name


def test_readme_is_a_guide():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250 and len(text.split()) <= 2500
    assert "make demo" in text and "make test" in text and "arxiv.org/abs/2601.22563" in text


def test_configs_carry_no_history():
    for path in [*ROOT.glob("configs/**/*.yaml"), *ROOT.glob("eugen_nerf/**/*.yaml")]:
        assert not history_in(path.read_text()), path


def console_scripts() -> dict[str, str]:
    """``[project.scripts]`` of pyproject.toml: command name -> ``module:function``."""
    section = (ROOT / "pyproject.toml").read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.]+:\w+)"', section, flags=re.MULTILINE))


def help_text(entrypoint, argv: list[str], monkeypatch) -> str:
    """What ``entrypoint()`` prints for the command line ``argv`` (it reads ``sys.argv``), which must exit 0."""
    out = io.StringIO()
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(sys, "argv", argv)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), pytest.raises(SystemExit) as exit_:
        entrypoint()
    assert exit_.value.code in (0, None), out.getvalue()
    return out.getvalue()


@pytest.mark.parametrize("name", sorted(console_scripts()))
def test_every_command_help_is_free_of_history(name, monkeypatch):
    module, _, function = console_scripts()[name].partition(":")
    entrypoint = getattr(import_module(module), function)
    text = help_text(entrypoint, [name, "--help"], monkeypatch)
    assert "usage" in text.lower() and not history_in(text), name
    assert f"usage: {name}" in text, "the usage line names the command, not the script's path"


def test_docstring_lines_join_into_paragraphs_lists_and_examples_without_rest_literals():
    from eugen_nerf.inputs.options import join_wrapped_lines

    text = """What it does, wrapped
    (here) across ``three``
    lines.

    - one item,
      wrapped;
    - another.

        eugen-eval lpips A.png B.png
        eugen-eval setup-lpips
    Then text again."""
    assert join_wrapped_lines(text).split("\n") == [
        "What it does, wrapped (here) across three lines.",  # reST literals lose their backquotes
        "- one item, wrapped;",
        "- another.",
        "",
        "    eugen-eval lpips A.png B.png",
        "    eugen-eval setup-lpips",
        "Then text again.",
    ]


def test_option_help_joins_a_docstring_s_wrapped_lines(monkeypatch):
    from eugen_nerf.distill.cli import entrypoint

    text = help_text(entrypoint, ["eugen-distill", "--help"], monkeypatch)
    # DistillOptions.width_fraction's docstring wraps after "gives": tyro alone kept that line break
    assert "the default 5/8 gives m = 160 on a 256-wide teacher" in text


METHODS = ["eugen-nerf", "eugen-zipnerf", "eugen-nerfacto", "eugen-siren", "eugen-isdf"]


@pytest.mark.parametrize("method", METHODS)
def test_ns_train_help_of_our_methods_is_free_of_history(method, monkeypatch):
    from nerfstudio.scripts.train import entrypoint

    text = help_text(entrypoint, ["ns-train", method, "--help"], monkeypatch)
    assert "pipeline.model" in text and not history_in(text), method
