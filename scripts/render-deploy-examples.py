#!/usr/bin/env python3
"""Refreshes the rendered manifests pasted in docs/deploy.md.

Each example in the document sits between two markers:

    <!-- k8s-render KIND DESCRIPTION -->
    ```yaml
    ...output of `tandem k8s render -f DESCRIPTION --kind KIND`...
    ```
    <!-- /k8s-render -->

Usage: scripts/render-deploy-examples.py [--check] [TANDEM_BINARY]
  TANDEM_BINARY defaults to build/bin/tandem. With --check nothing is written
  and the exit status is 1 when the document is out of date (the system test
  tests/system/test_k8s_render.py runs this check).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "deploy.md"
BLOCK = re.compile(
    r"(<!-- k8s-render (?P<kind>\S+) (?P<desc>\S+) -->\n)(?P<body>.*?)(<!-- /k8s-render -->)",
    re.S)


def render(tandem: Path, kind: str, description: str) -> str:
    result = subprocess.run(
        [str(tandem), "k8s", "render", "-f", str(ROOT / description), "--kind", kind],
        capture_output=True, text=True, check=True, timeout=30)
    return result.stdout


def refreshed(text: str, tandem: Path) -> str:
    def replace(m: re.Match) -> str:
        body = render(tandem, m["kind"], m["desc"])
        return f"{m.group(1)}```yaml\n{body}```\n{m.group(5)}"

    return BLOCK.sub(replace, text)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    tandem = Path(rest[0]) if rest else ROOT / "build" / "bin" / "tandem"
    text = DOC.read_text()
    new = refreshed(text, tandem)
    if check:
        if new != text:
            print(f"{DOC} is out of date: run scripts/render-deploy-examples.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
