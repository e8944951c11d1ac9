"""The repository's Markdown points only at what the repository holds: a newcomer's clone has no ../shared."""

from __future__ import annotations

import re
import subprocess

from conftest import ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _markdown_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    return listed.stdout.split()


def test_no_markdown_file_points_outside_the_repository():
    outside = [f"{name}: {line.strip()[:80]}" for name in _markdown_files()
               for line in (ROOT / name).read_text().splitlines() if "../shared" in line]
    assert outside == []


def test_every_relative_markdown_link_resolves_inside_the_repository():
    broken = []
    for name in _markdown_files():
        for target in LINK.findall((ROOT / name).read_text()):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            path = ((ROOT / name).parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(ROOT) or not path.exists():
                broken.append(f"{name}: {target}")
    assert broken == []
