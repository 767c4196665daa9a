"""Cutting documents into drawer-sized sections (palace_client.importers.sections)."""

from __future__ import annotations

from palace_client.importers.sections import MAX_CHARS, split


def test_long_section_is_cut_between_paragraphs_under_its_title() -> None:
    paragraphs = [f"paragraph {i} " + "word " * 80 for i in range(20)]
    text = "# Intro\n\nShort.\n\n## Setup\n\n" + "\n\n".join(paragraphs) + "\n"
    parts = split(text, "markdown")
    assert [p.heading for p in parts][:2] == ["Intro", "Setup"]
    setup = [p for p in parts if p.heading == "Setup"]
    assert len(setup) > 1 and all(len(p.text) <= MAX_CHARS for p in parts)
    assert setup[0].text.startswith("## Setup") and setup[0].line == 5
    assert all(p.text.startswith("Setup\n\nparagraph ") for p in setup[1:])
    joined = "\n".join(p.text for p in setup)
    assert all(para.strip() in joined for para in paragraphs)  # nothing lost, none cut


def test_one_huge_line_is_cut_anywhere() -> None:
    parts = split("x" * (3 * MAX_CHARS), "text")
    assert len(parts) >= 3 and all(len(p.text) <= MAX_CHARS for p in parts)
    assert sum(len(p.text) for p in parts) == 3 * MAX_CHARS


def test_headings_in_code_and_rules_are_not_headings() -> None:
    md = "Text\n\n---\n\n```\n# code\n```\n\n~~~\n## more\n~~~\n"
    assert [p.heading for p in split(md, "markdown")] == [None]
    rst = "Title\n=====\n\nBody.\n\n----\n\nMore body.\n"
    assert [(p.heading, p.line) for p in split(rst, "rst")] == [("Title", 1)]
