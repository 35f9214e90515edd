"""A Dockerfile read without a container runtime: its stages and
instructions, and the files its final image holds as far as COPY puts them
there (test_dockerfile.py adds the files of the packages it installs).

Only the instructions deploy/Dockerfile uses are understood (FROM, COPY,
RUN, ENV, WORKDIR, CMD, ENTRYPOINT); any other is an error, so that the
check cannot silently ignore a step it does not model."""

from __future__ import annotations

import fnmatch
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

KNOWN = {"FROM", "COPY", "RUN", "ENV", "WORKDIR", "CMD", "ENTRYPOINT"}


@dataclass
class Instruction:
    keyword: str
    text: str  # the arguments, continuation lines joined
    line: int  # where it starts in the file (1-based)

    def exec_form(self) -> list[str]:
        """CMD/ENTRYPOINT/RUN arguments as an argv (JSON form, else `sh -c`)."""
        if self.text.startswith("["):
            return json.loads(self.text)
        return ["/bin/sh", "-c", self.text]


@dataclass
class Copy:
    sources: list[str]
    destination: str
    stage: str | None  # --from=STAGE; None: the build context
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def runs(self) -> list[str]:
        return [i.text for i in self.instructions if i.keyword == "RUN"]

    def copies(self) -> list[Copy]:
        out = []
        for i in self.instructions:
            if i.keyword != "COPY":
                continue
            words = shlex.split(i.text)
            stage = None
            while words and words[0].startswith("--"):
                flag = words.pop(0)
                if flag.startswith("--from="):
                    stage = flag.split("=", 1)[1]
                else:
                    raise ValueError(f"line {i.line}: COPY flag {flag} is not modelled")
            if len(words) < 2:
                raise ValueError(f"line {i.line}: COPY needs a source and a destination")
            out.append(Copy(words[:-1], words[-1], stage, i.line))
        return out

    def env(self) -> dict[str, str]:
        """ENV KEY=VALUE ... of this stage (later settings win)."""
        out: dict[str, str] = {}
        for i in self.instructions:
            if i.keyword == "ENV":
                for word in shlex.split(i.text):
                    key, _, value = word.partition("=")
                    out[key] = value
        return out

    def last(self, keyword: str) -> Instruction | None:
        found = [i for i in self.instructions if i.keyword == keyword]
        return found[-1] if found else None


def parse(path: Path) -> list[Stage]:
    """The stages of the Dockerfile at `path`, in order."""
    stages: list[Stage] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        while line.endswith("\\"):
            line = line[:-1]
            # Comment lines inside a continuation are dropped, as Docker does.
            while i < len(lines) and lines[i].strip().startswith("#"):
                i += 1
            if i < len(lines):
                line += " " + lines[i].strip()
                i += 1
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword not in KNOWN:
            raise ValueError(f"{path}:{start + 1}: instruction {keyword} is not modelled")
        instruction = Instruction(keyword, rest.strip(), start + 1)
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        elif not stages:
            raise ValueError(f"{path}:{start + 1}: {keyword} before FROM")
        else:
            stages[-1].instructions.append(instruction)
    return stages


def ignored(relative: str, patterns: list[str]) -> bool:
    """Whether a context path is excluded by .dockerignore patterns (no `!`)."""
    parts = PurePosixPath(relative).parts
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        for n in range(1, len(parts) + 1):
            prefix = "/".join(parts[:n])
            if fnmatch.fnmatchcase(prefix, pattern) or (
                    pattern.startswith("**/") and fnmatch.fnmatchcase(parts[n - 1], pattern[3:])):
                return True
    return False


def ignore_patterns(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.strip().startswith("#")]


def copied_files(copy: Copy, source_root: Path, source_prefix: str = "") -> dict[str, Path]:
    """Image path -> the file on this machine that the COPY puts there.

    A source is resolved under `source_root` after stripping `source_prefix`
    (for --from=build: the build stage's /build is this machine's build tree).
    Docker's rules: several sources need a destination ending in '/'; a
    directory source copies its contents into the destination."""
    out: dict[str, Path] = {}
    many = len(copy.sources) > 1
    for source in copy.sources:
        relative = source[len(source_prefix):] if source_prefix else source
        local = source_root / relative.lstrip("/")
        if not local.exists():
            raise FileNotFoundError(f"line {copy.line}: COPY source {source} is {local}, "
                                    "which does not exist")
        if local.is_dir():
            for f in sorted(p for p in local.rglob("*") if p.is_file()):
                if "__pycache__" in f.parts:
                    continue
                out[str(PurePosixPath(copy.destination) / f.relative_to(local).as_posix())] = f
        elif many or copy.destination.endswith("/"):
            out[str(PurePosixPath(copy.destination) / local.name)] = local
        else:
            out[copy.destination] = local
    return out
