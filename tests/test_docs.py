"""The README and docs/ hold together: every relative link resolves, every cited heading exists."""

import re

import pytest
from conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Where citations are written: the code, the tests, the docs and the deployment files.
SOURCES = [
    *DOCS,
    *(p for d in ("core", "streamer", "tests", "examples") for p in (ROOT / d).rglob("*.py")),
    *(ROOT / "deploy").rglob("*.y*ml"),
    *(ROOT / "systemd").glob("*"),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: ``README, "Heading"``, ``docs/design.md, "Heading"``, ``[results.md](results.md), "Heading"``
CITATION = re.compile(r"\b(README(?:\.md)?|(?:docs/)?[a-z_]+\.md)\)?,? \"([^\"\n]+)\"")


def headings(path):
    lines = path.read_text().splitlines()
    return [re.sub(r"[`*]", "", line.lstrip("#").strip()) for line in lines if line.startswith("#")]


def test_readme_is_short():
    """Issue 25: a README a newcomer reads in five minutes; the rest lives in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves(doc):
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+://|#|mailto:", target):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{doc.name}: link to {target} does not resolve"


def test_every_cited_heading_exists():
    bad = []
    for src in SOURCES:
        if not src.is_file() or src.name == "test_docs.py":  # its own docstring shows the form
            continue
        for name, title in CITATION.findall(src.read_text(errors="replace")):
            target = ROOT / "README.md" if name.startswith("README") else ROOT / "docs" / name.removeprefix("docs/")
            if not target.exists():
                bad.append(f"{src.relative_to(ROOT)}: {name} does not exist")
            elif not any(h.startswith(title) for h in headings(target)):
                bad.append(f'{src.relative_to(ROOT)}: {name} has no heading "{title}"')
    assert not bad, "\n".join(bad)


def test_every_alert_has_a_description_and_a_runbook_section():
    """Issue 27 (part): each rule says what it means and links its section of docs/runbook.md."""
    import yaml

    groups = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    sections = {h.lower(): h for h in headings(ROOT / "docs" / "runbook.md")}
    assert len(rules) >= 10
    for rule in rules:
        notes = rule["annotations"]
        assert len(notes.get("description", "")) > 40, rule["alert"]
        assert notes["runbook_url"] == f"docs/runbook.md#{rule['alert'].lower()}"
        assert rule["alert"].lower() in sections, f"docs/runbook.md has no section {rule['alert']}"
