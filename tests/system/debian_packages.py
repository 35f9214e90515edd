"""This machine's dpkg database as the Dockerfile check needs it: which
package owns a file (`dpkg -S`), what installing a set of packages brings
with it (their Depends and Pre-Depends, recursively, as `apt-get install
--no-install-recommends` does), and which files those packages hold.

The answers are this machine's: it runs Debian 12 like the image, and
scripts/install-deps.sh has installed every package the image does."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Installed:
    name: str
    essential: bool
    priority: str
    provides: tuple[str, ...]
    depends: tuple[tuple[str, ...], ...]  # each a list of alternatives


def _names(field: str) -> list[tuple[str, ...]]:
    """'a (>= 1) | b:any, c' -> [('a', 'b'), ('c',)]"""
    out = []
    for group in field.split(","):
        names = tuple(re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", alt).strip().split(":")[0]
                      for alt in group.split("|"))
        names = tuple(n for n in names if n)
        if names:
            out.append(names)
    return out


@functools.lru_cache(maxsize=None)
def installed() -> dict[str, Installed]:
    """Every installed package of this machine, by name."""
    fmt = "${Package}\t${db:Status-Status}\t${Essential}\t${Priority}\t${Provides}\t" \
          "${Pre-Depends}, ${Depends}\n"
    text = subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True,
                          check=True).stdout
    out = {}
    for line in text.splitlines():
        name, status, essential, priority, provides, depends = line.split("\t")
        if status != "installed":
            continue
        out[name] = Installed(name, essential == "yes", priority,
                              tuple(alts[0] for alts in _names(provides)), tuple(_names(depends)))
    return out


@functools.lru_cache(maxsize=None)
def _providers() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for pkg in installed().values():
        for virtual in pkg.provides:
            out.setdefault(virtual, []).append(pkg.name)
    return out


def closure(packages: set[str] | frozenset[str]) -> set[str]:
    """`packages` and everything their Depends/Pre-Depends pull in, taking
    for each alternative group the first one installed here (a virtual
    package: an installed provider). Requires every named package to be
    installed on this machine (KeyError naming it otherwise)."""
    db = installed()
    done: set[str] = set()
    pending = list(packages)
    while pending:
        name = pending.pop()
        if name in done:
            continue
        if name not in db:
            raise KeyError(f"package {name} is not installed on this machine "
                           "(run scripts/install-deps.sh)")
        done.add(name)
        for alternatives in db[name].depends:
            if any(a in done for a in alternatives):
                continue
            chosen = next((a for a in alternatives if a in db), None)
            if chosen is None:
                chosen = next((p for a in alternatives for p in _providers().get(a, [])), None)
            if chosen is not None:
                pending.append(chosen)
    return done


def base_image_packages() -> set[str]:
    """What debian:12 holds before any apt-get: its Essential and
    Priority: required packages (a minbase system) with their dependencies."""
    return closure({p.name for p in installed().values()
                    if p.essential or p.priority == "required"})


def _spellings(path: str) -> list[str]:
    """`path` as dpkg may list it: the real path first, then as given; Debian
    12 merged /bin, /sbin and /lib into /usr, and packages list either."""
    out = [os.path.realpath(path), path]
    for p in list(out):
        if p.startswith(("/lib", "/bin", "/sbin")):
            out.append("/usr" + p)
        elif p.startswith(("/usr/lib", "/usr/bin", "/usr/sbin")):
            out.append(p[len("/usr"):])
    return list(dict.fromkeys(out))


def owners(paths: list[str]) -> dict[str, str]:
    """path -> the package that owns it, from one `dpkg -S` over every
    spelling of every path. Raises LookupError naming a path no package owns."""
    spellings = {p: _spellings(p) for p in paths}
    every = sorted({s for ss in spellings.values() for s in ss})
    result = subprocess.run(["dpkg", "-S", *every], capture_output=True, text=True)
    owned = {}
    for line in result.stdout.splitlines():
        packages, _, file = line.partition(": ")
        owned[file.strip()] = packages.split(",")[0].split(":")[0].strip()
    out = {}
    for path, candidates in spellings.items():
        found = next((owned[c] for c in candidates if c in owned), None)
        if found is None:
            raise LookupError(f"no package owns {path} (tried {', '.join(candidates)})")
        out[path] = found
    return out


def owner(path: str) -> str:
    """The package that owns `path` (`dpkg -S`)."""
    return owners([path])[path]


def files_of(packages: set[str]) -> set[str]:
    """Every path the packages install (`dpkg -L`), with /bin, /sbin and
    /lib also under /usr (the merged layout)."""
    text = subprocess.run(["dpkg-query", "-L", *sorted(packages)], capture_output=True,
                          text=True, check=True).stdout
    out = set()
    for line in text.splitlines():
        if line.startswith("/"):
            out.add(line)
            for top in ("/bin/", "/sbin/", "/lib/"):
                if line.startswith(top):
                    out.add("/usr" + line)
    return out
