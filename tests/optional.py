"""What a fresh machine may lack, and the one way a test may depend on it.

`make test` must give the same verdict on a newcomer's machine as in CI, which installs
everything. So a test that needs something beyond the dev extras' Python packages (a program,
tiktoken's files, `../shared`, an extra package, Linux's `/proc`) asks for it here, and
nowhere else (`tests/test_repository.py` checks that no test skips or looks a program up by
any other way). Asking does two things:

- where it is missing, the test is skipped, with the reason and how to get it;
- either way, the rest of the test counts in the coverage context "optional"
  (`tests.gates`), which the gates leave out: what it reaches runs only where the thing is (or
  only where it is not), so an example test that always runs must reach it too.

Asked inside a test (or a fixture), the rest of that test counts as optional; asked at a test
module's top level, all of the module's tests do (and the module is skipped where the thing is
missing). `@pytest.mark.needs("codex")` makes a whole test optional and skips it where the
tool is missing, before any of its fixtures runs.

`known_failure(reason)` marks a test that asserts what an open issue asks for and fails today:
it runs, and fails the suite the day it passes (strict), so the mark goes with the fix. It is
made here, as skips are, so that every such test is found by one name.
"""

from __future__ import annotations

import importlib
import inspect
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import NoReturn

import pytest

from tests import gates


@dataclass(frozen=True, slots=True)
class Tool:
    """A program (or a set-up) some tests need: how to find it, and how to get it."""

    name: str
    locate: Callable[[], str | None]
    """Its path, or None where it is missing."""
    install: str
    """What to do where it is missing (said in the skip's reason)."""

    @property
    def missing(self) -> str:
        return f"{self.name} is not available here: {self.install}"


def _which(*names: str, override: str | None = None) -> Callable[[], str | None]:
    def locate() -> str | None:
        chosen = os.environ.get(override) if override else None
        if chosen:
            return shutil.which(chosen)
        return next((found for name in names if (found := shutil.which(name))), None)

    return locate


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool("codex", _which("codex"), "npm install -g @openai/codex (.ci/run installs it)"),
        Tool(
            "claude",
            _which("claude"),
            "npm install -g @anthropic-ai/claude-code (.ci/run installs it)",
        ),
        Tool("aider", _which("aider"), "pip install aider-chat (.ci/run installs it)"),
        Tool("opencode", _which("opencode"), "npm install -g opencode-ai (.ci/run installs it)"),
        # opencode's grep and glob tools run ripgrep, which it downloads where none is
        # installed: the opencode test needs Debian's, so that it never reaches for the network.
        Tool("rg", _which("rg"), "apt-get install ripgrep (.ci/run installs Debian's ripgrep)"),
        # Debian and Ubuntu name it `chromium` (`chromium-browser` on older releases); a Chrome
        # works as well. CHROMIUM, when set, names the binary to use instead.
        Tool(
            "chromium",
            _which(
                "chromium",
                "chromium-browser",
                "google-chrome",
                "google-chrome-stable",
                override="CHROMIUM",
            ),
            "apt-get install chromium (.ci/run installs Debian's chromium)",
        ),
        Tool(
            "redis-server",
            _which("redis-server"),
            "apt-get install redis-server (.ci/run installs Debian's redis-server)",
        ),
    )
}


def register(tool: Tool) -> None:
    """Add a tool a folder of tests defines (the real model: `tests/e2e/conftest.py`)."""
    TOOLS[tool.name] = tool


_optional_modules: set[str] = set()
"""Test modules that asked for something at their top level: all their tests are optional."""


def module_is_optional(name: str) -> bool:
    return name in _optional_modules


def _depend() -> None:
    """The caller's test (or, at a test module's top level, all of the module's tests) counts
    as optional from here on."""
    if gates.running() is not None:
        gates.leave_example(gates.OPTIONAL)
        return
    if not gates.in_suite:  # the bench, which uses the suite's helpers: nothing is counted
        return
    # At import: a test module's top level marks the module. A helper module's top level
    # would mark nobody (its importers are not known here), so it may not ask.
    frame = inspect.currentframe()
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    caller = "" if frame is None else str(frame.f_globals.get("__name__", ""))
    if not caller.rpartition(".")[2].startswith("test_"):
        raise RuntimeError(
            f"{caller or 'this code'} asks for an optional tool outside a test: ask inside the "
            "test or fixture that needs it, or at a test module's top level"
        )
    _optional_modules.add(caller)


def find(name: str) -> str | None:
    """The tool `name` (`TOOLS`), or None where it is missing; the test counts as optional
    either way (its path now depends on the machine)."""
    _depend()
    return TOOLS[name].locate()


def uses(name: str) -> None:
    """The test uses the tool `name` that a fixture of a wider scope found (for the module,
    once): the rest of it counts as optional, as if it had found the tool itself."""
    assert name in TOOLS, name
    _depend()


def require(name: str) -> str:
    """The tool `name`; where it is missing, the test (at top level: the module) is skipped."""
    found = find(name)
    if found is None:
        _skip(TOOLS[name].missing)
    return found


def skip_unless(available: bool, reason: str) -> None:
    """For a dependency that is not a program (a file, an encoding, the platform): skip with
    `reason` unless `available`; the test counts as optional either way."""
    _depend()
    if not available:
        _skip(reason)


def skip(reason: str) -> NoReturn:
    """Skip now, for want of something optional, with `reason`."""
    _depend()
    _skip(reason)


def module(name: str, install: str) -> ModuleType:
    """The Python package `name`, imported; skipped where it is not installed (`install`)."""
    _depend()
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        _skip(f"{name} is not installed ({exc}): {install}")


def known_failure(reason: str) -> pytest.MarkDecorator:
    """The mark of a test that fails today for `reason` (what fails, and the issue that fixes
    it): an expected failure, strict, so that a pass is reported as a failure until the mark
    goes."""
    return pytest.mark.xfail(strict=True, reason=reason)


def _skip(reason: str) -> NoReturn:
    at_top_level = gates.running() is None
    # Reported at the test's own location (as a skip marker's is), not at this line.
    raise pytest.skip.Exception(
        reason, allow_module_level=at_top_level, _use_item_location=not at_top_level
    )
