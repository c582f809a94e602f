"""What the demo agents say and what their tools print: a coding task, two math
problems and a search task, each a script of turns with small seeded variations, so a
rollout reads like real agent work (multi-line code, test output, citations).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolRun:
    name: str
    arguments: dict[str, Any]
    output: str

    @property
    def json_arguments(self) -> str:
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class Step:
    """One model turn: its text, optional reasoning, and the tools it calls (several
    in one step run in parallel)."""

    text: str
    runs: tuple[ToolRun, ...] = ()
    reasoning: str | None = None


@dataclass(frozen=True)
class Problem:
    kind: str
    name: str
    prompt: str
    system_prompt: str
    answer: str
    script: Callable[[random.Random], list[Step]]


def tool(name: str, description: str, **params: str) -> dict[str, Any]:
    """A function tool as verifiers records it; every parameter is a required string."""
    return {
        "type": "function",
        "name": name,
        "namespace": None,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {key: {"type": "string", "description": text} for key, text in params.items()},
            "required": list(params),
        },
        "strict": None,
    }


BASH = tool("bash", "Run a bash command and return its combined stdout and stderr.", command="The bash command to run.")
READ = tool("read_file", "Read a text file and return it with line numbers.", path="File path (relative to cwd or absolute).")
EDIT = tool(
    "edit",
    "Replace a unique string in a file. old_str must appear exactly once in the file.",
    path="File path (relative to cwd or absolute).",
    old_str="Exact string to find (must appear exactly once).",
    new_str="Replacement string.",
)
PYTHON = tool("python", "Run a Python 3.12 snippet and return what it prints.", code="The Python source to run.")
SEARCH = tool("web_search", "Search the web; returns titles, URLs and snippets.", query="The search query.")
FETCH = tool("fetch_url", "Fetch a URL and return its main text.", url="The URL to fetch.")

TOOLS = {"coding": [BASH, READ, EDIT], "math": [PYTHON], "search": [SEARCH, FETCH], "judge": []}

HARNESS_PROMPTS = {
    "coding": "You are a coding agent working in a git checkout. Use bash to explore and run "
    "commands, read_file to read files and edit for single-occurrence replacements. "
    "Run the tests before you finish.",
    "math": "You are a careful mathematician with a Python sandbox. Verify every count by computation.",
    "search": "You are a research assistant. Search the web, read the primary sources, and cite them.",
    "judge": "You grade another agent's final answer against the task. Reply with JSON only.",
}


def numbered(text: str) -> str:
    return "\n".join(f"{i:>4}  {line}" for i, line in enumerate(text.splitlines(), 1))


REPORT_PY = '''"""Monthly ledger report: totals per account, printed as a rich table."""

from decimal import ROUND_HALF_UP, Decimal

from rich.console import Console
from rich.table import Table

from ledger.models import Entry

CENT = Decimal("0.01")


def account_totals(entries: list[Entry]) -> dict[str, Decimal]:
    totals: dict[str, Decimal] = {}
    for entry in entries:
        amount = entry.amount.quantize(CENT, rounding=ROUND_HALF_UP)
        totals[entry.account] = totals.get(entry.account, Decimal(0)) + amount
    return totals


def render(entries: list[Entry], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="[bold]Ledger[/bold] by account")
    table.add_column("Account", style="cyan")
    table.add_column("Total", justify="right")
    totals = account_totals(entries)
    for account, total in sorted(totals.items()):
        table.add_row(account, f"{total:,.2f}")
    console.print(table)
    console.print(f"[bold]Grand total:[/bold] {sum(e.amount for e in entries):,.2f}")
'''

PYTEST_FAIL = """============================= test session starts ==============================
platform linux -- Python 3.12.4, pytest-8.3.2, pluggy-1.5.0
rootdir: /workspace/ledger
configfile: pyproject.toml
collected 14 items

tests/test_models.py ......                                              [ 42%]
tests/test_report.py ..F.                                                [ 71%]
tests/test_import.py ....                                                [100%]

=================================== FAILURES ===================================
_________________________ test_totals_round_once __________________________

    def test_totals_round_once():
        entries = [Entry("fees", Decimal("0.005")) for _ in range(3)]
>       assert account_totals(entries)["fees"] == Decimal("0.02")
E       AssertionError: assert Decimal('0.03') == Decimal('0.02')

tests/test_report.py:31: AssertionError
=========================== short test summary info ============================
FAILED tests/test_report.py::test_totals_round_once - AssertionError: assert Decimal('0.03') == Decimal('0.02')
========================= 1 failed, 13 passed in 0.38s ========================="""

PYTEST_FAIL_RENDER = """tests/test_report.py ...F                                                [ 71%]

=================================== FAILURES ===================================
____________________________ test_render_grand_total ____________________________

capsys = <_pytest.capture.CaptureFixture object at 0x7f3a1c2b9d90>

    def test_render_grand_total(capsys):
        render([Entry("fees", Decimal("0.005"))] * 5, Console(width=60, color_system=None))
>       assert "Grand total: 0.03" in capsys.readouterr().out
E       AssertionError: assert 'Grand total: 0.03' in 'Ledger by account\\n Account  Total \\n fees      0.03 \\nGrand total: 0.02\\n'

tests/test_report.py:44: AssertionError
========================= 1 failed, 13 passed in 0.41s ========================="""

PYTEST_PASS = """============================= test session starts ==============================
platform linux -- Python 3.12.4, pytest-8.3.2, pluggy-1.5.0
rootdir: /workspace/ledger
collected 14 items

tests/test_models.py ......                                              [ 42%]
tests/test_report.py ....                                                [ 71%]
tests/test_import.py ....                                                [100%]

============================== 14 passed in 0.36s =============================="""

GIT_DIFF = """diff --git a/src/ledger/report.py b/src/ledger/report.py
index 3f1c2aa..9b07e41 100644
--- a/src/ledger/report.py
+++ b/src/ledger/report.py
@@ -13,10 +13,10 @@ CENT = Decimal("0.01")
 def account_totals(entries: list[Entry]) -> dict[str, Decimal]:
     totals: dict[str, Decimal] = {}
     for entry in entries:
-        amount = entry.amount.quantize(CENT, rounding=ROUND_HALF_UP)
-        totals[entry.account] = totals.get(entry.account, Decimal(0)) + amount
-    return totals
+        totals[entry.account] = totals.get(entry.account, Decimal(0)) + entry.amount
+    # Round once per account: rounding each entry first drifts by a cent per entry.
+    return {account: total.quantize(CENT, rounding=ROUND_HALF_UP) for account, total in totals.items()}"""

GIT_DIFF_RENDER = """
@@ -31,4 +31,4 @@ def render(entries: list[Entry], console: Console | None = None) -> None:
     for account, total in sorted(totals.items()):
         table.add_row(account, f"{total:,.2f}")
     console.print(table)
-    console.print(f"[bold]Grand total:[/bold] {sum(e.amount for e in entries):,.2f}")
+    console.print(f"[bold]Grand total:[/bold] {sum(totals.values()):,.2f}")"""


def coding_script(rng: random.Random) -> list[Step]:
    steps = [
        Step(
            "I'll look at the layout and run the test suite to see what fails.",
            (
                ToolRun("bash", {"command": "git status --short && ls -R src tests | head -30"},
                        " M pyproject.toml\nsrc:\nledger\n\nsrc/ledger:\n__init__.py\ncli.py\nmodels.py\nreport.py\n\n"
                        "tests:\nconftest.py\ntest_import.py\ntest_models.py\ntest_report.py\n"),
                ToolRun("bash", {"command": "python -m pytest -q 2>&1 | tail -40"}, PYTEST_FAIL),
            ),
            reasoning="The issue says report totals drift by a cent. Two things at once: the layout and "
            "the failing test, so I know where to look.",
        ),
        Step(
            "`test_totals_round_once` fails: three entries of 0.005 should total 0.02 but give 0.03. "
            "Let me read the report module.",
            (ToolRun("read_file", {"path": "src/ledger/report.py"}, numbered(REPORT_PY)),),
        ),
        Step(
            "Found it: `account_totals` quantizes each entry before summing, so every half cent rounds "
            "up on its own. I'll sum the exact amounts and round once per account.",
            (
                ToolRun(
                    "edit",
                    {
                        "path": "src/ledger/report.py",
                        "old_str": "        amount = entry.amount.quantize(CENT, rounding=ROUND_HALF_UP)\n"
                        "        totals[entry.account] = totals.get(entry.account, Decimal(0)) + amount\n"
                        "    return totals",
                        "new_str": "        totals[entry.account] = totals.get(entry.account, Decimal(0)) + entry.amount\n"
                        "    # Round once per account: rounding each entry first drifts by a cent per entry.\n"
                        "    return {account: total.quantize(CENT, rounding=ROUND_HALF_UP) "
                        "for account, total in totals.items()}",
                    },
                    "Edited src/ledger/report.py: replaced 1 occurrence (3 lines -> 3 lines).",
                ),
            ),
            reasoning="Decimal keeps the exact sum; quantizing at the end matches what the test expects "
            "(0.015 -> 0.02 with ROUND_HALF_UP).",
        ),
    ]
    diff = GIT_DIFF
    if rng.random() < 0.6:
        # the same bug twice: the grand total sums raw entries and rounds half-even
        diff += GIT_DIFF_RENDER
        steps += [
            Step(
                "Re-running the report tests.",
                (ToolRun("bash", {"command": "python -m pytest -q tests/test_report.py 2>&1 | tail -20"},
                         PYTEST_FAIL_RENDER),),
            ),
            Step(
                "The same bug in a second place: the table row says 0.03 but the grand total sums the raw "
                "entries and lets the format spec round (half-even) to 0.02. It should add up the "
                "per-account totals.",
                (ToolRun(
                    "edit",
                    {
                        "path": "src/ledger/report.py",
                        "old_str": "{sum(e.amount for e in entries):,.2f}",
                        "new_str": "{sum(totals.values()):,.2f}",
                    },
                    "Edited src/ledger/report.py: replaced 1 occurrence (1 line -> 1 line).",
                ),),
                reasoning="Format specs on Decimal round half-even, so 0.025 prints as 0.02. Summing the "
                "already-rounded totals keeps the grand total consistent with the rows.",
            ),
            Step(
                "Running the whole suite.",
                (ToolRun("bash", {"command": "python -m pytest -q 2>&1 | tail -12"}, PYTEST_PASS),),
            ),
        ]
    else:
        steps.append(
            Step("Running the whole suite.",
                 (ToolRun("bash", {"command": "python -m pytest -q 2>&1 | tail -12"}, PYTEST_PASS),)),
        )
    steps += [
        Step("All 14 tests pass. Reviewing the final diff.",
             (ToolRun("bash", {"command": "git diff -- src"}, diff),)),
        Step(
            "Fixed the one-cent drift in the ledger report.\n\n"
            "- `account_totals` rounded every entry before summing, so entries of 0.005 each gained half "
            "a cent. It now sums exact `Decimal` amounts and rounds once per account (`ROUND_HALF_UP`).\n"
            "- The grand total now adds up the rounded per-account totals, so it always matches the rows.\n"
            "- The suite passes: 14 passed.\n\n"
            "The `[bold]` markup in `render` is untouched; only the arithmetic changed."
        ),
    ]
    return steps


TWIN_CODE = """N = 10_000
sieve = bytearray([1]) * (N + 3)
sieve[0] = sieve[1] = 0
for i in range(2, int((N + 2) ** 0.5) + 1):
    if sieve[i]:
        sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
twins = [n for n in range(1, N + 1) if sieve[n] and sieve[n + 2]]
print(len(twins))
print("first:", twins[:8])
print("last:", twins[-5:])"""

TWIN_CHECK = """def is_prime(n):
    if n < 2:
        return False
    f = 2
    while f * f <= n:
        if n % f == 0:
            return False
        f += 1
    return True

print(sum(1 for n in range(1, 10_001) if is_prime(n) and is_prime(n + 2)))"""

LATTICE_CODE = """R2 = 45 ** 2
count = sum(1 for x in range(-45, 46) for y in range(-45, 46) if x * x + y * y <= R2)
print(count)
print("axis points:", 4 * 45 + 1)"""

LATTICE_CHECK = """from math import isqrt
# column by column: for each x, the ys with y^2 <= R^2 - x^2
print(sum(2 * isqrt(45**2 - x * x) + 1 for x in range(-45, 46)))"""


def math_script(
    warmup: ToolRun, code: str, check: str, output: str, answer: str, idea: str
) -> Callable[[random.Random], list[Step]]:
    def script(rng: random.Random) -> list[Step]:
        small = Step(
            "Before the full count, a small case I can check by hand.",
            (warmup,),
            reasoning="If the method reproduces a hand count on a small bound, the big run is trustworthy.",
        )
        first = Step(
            "I'll compute it directly first.",
            (ToolRun("python", {"code": code}, output),),
            reasoning=idea,
        )
        check_run = ToolRun("python", {"code": check}, answer + "\n")
        steps = [small, first]
        if rng.random() < 0.5:
            steps.append(Step("Cross-checking with an independent method.", (check_run,),
                              reasoning="A second, slower method guards against an off-by-one in the bounds."))
        else:
            steps.append(Step("Cross-checking two ways at once: an independent count and the bounds.",
                              (check_run, ToolRun("python", {"code": "print(10_000 ** 0.5, 45 ** 2)"}, "100.0 2025\n")),
                              reasoning="Run both checks in parallel; they are independent."))
        steps.append(Step(
            f"Both methods agree.\n\nThe answer is $\\boxed{{{answer}}}$.",
            reasoning=f"Computation and the check both give {answer}; the bounds are inclusive as stated.",
        ))
        return steps

    return script


SEARCH_RESULTS = """1. PEP 634 – Structural Pattern Matching: Specification | peps.python.org
   https://peps.python.org/pep-0634/
   This PEP provides the technical specification for the match statement. It replaces PEP 622...
2. What's New In Python 3.10 | docs.python.org
   https://docs.python.org/3/whatsnew/3.10.html
   New features: PEP 634, Structural Pattern Matching: Specification; PEP 635: Motivation...
3. PEP 636 – Structural Pattern Matching: Tutorial | peps.python.org
   https://peps.python.org/pep-0636/
4. Python 3.10.0 | python.org
   https://www.python.org/downloads/release/python-3100/
   Release Date: Oct. 4, 2021"""

RELEASE_RESULTS = """1. Python Release Python 3.10.0 | Python.org
   https://www.python.org/downloads/release/python-3100/
   Release Date: Oct. 4, 2021. This is the stable release of Python 3.10.0...
2. PEP 619 – Python 3.10 Release Schedule
   https://peps.python.org/pep-0619/
   3.10.0 final: Monday, 2021-10-04"""

WHATSNEW_TEXT = """What's New In Python 3.10

Summary – Release highlights
New syntax features:
  PEP 634, Structural Pattern Matching: Specification
  PEP 635, Structural Pattern Matching: Motivation and Rationale
  PEP 636, Structural Pattern Matching: Tutorial
  bpo-12782, Parenthesized context managers are now officially allowed.

Structural Pattern Matching
Structural pattern matching has been added in the form of a match statement and case
statements of patterns with associated actions:

    match subject:
        case <pattern_1>:
            <action_1>
        case <pattern_2>:
            <action_2>
        case _:
            <action_wildcard>
"""

PEP_TEXT = """PEP 634 – Structural Pattern Matching: Specification
Author: Brandt Bucher, Guido van Rossum
Status: Final   Type: Standards Track   Created: 12-Sep-2020   Python-Version: 3.10
Replaces: 622

Abstract
This PEP provides the technical specification for the match statement. It replaces
PEP 622, which is hereby split in three parts: PEP 634 (Specification), PEP 635
(Motivation and Rationale), PEP 636 (Tutorial)."""


def search_script(rng: random.Random) -> list[Step]:
    steps = [
        Step(
            "Searching for the PEP and the release at the same time.",
            (
                ToolRun("web_search", {"query": "python match statement PEP specification"}, SEARCH_RESULTS),
                ToolRun("web_search", {"query": "python 3.10.0 release date"}, RELEASE_RESULTS),
            ),
            reasoning="Two independent facts: which PEP, and which release. Search both in parallel.",
        ),
        Step(
            "Reading the primary sources to confirm.",
            (
                ToolRun("fetch_url", {"url": "https://docs.python.org/3/whatsnew/3.10.html"}, WHATSNEW_TEXT),
                ToolRun("fetch_url", {"url": "https://peps.python.org/pep-0634/"}, PEP_TEXT),
            ),
        ),
    ]
    if rng.random() < 0.5:
        steps.append(Step(
            "Checking whether any earlier alpha or beta shipped `match` under a flag.",
            (ToolRun("web_search", {"query": "python 3.10.0a6 pattern matching alpha"},
                     "1. Python 3.10.0a6 is now available for testing | Python Insider\n"
                     "   https://pythoninsider.blogspot.com/2021/03/python-3100a6-is-now-available-for.html\n"
                     "   ... this release includes PEP 634 Structural Pattern Matching ...\n"
                     "2. What's New In Python 3.10 | docs.python.org\n"
                     "   https://docs.python.org/3/whatsnew/3.10.html"),),
            reasoning="Pre-releases are not releases; the question asks for the first release that shipped it.",
        ))
    else:
        steps.append(Step(
            "Checking the release schedule for the exact date.",
            (ToolRun("fetch_url", {"url": "https://peps.python.org/pep-0619/"},
                     "PEP 619 – Python 3.10 Release Schedule\n...\n3.10.0 final: Monday, 2021-10-04\n"
                     "3.10.1: Monday, 2021-12-06\n"),),
        ))
    steps.append(Step(
        "The `match` statement arrived in **Python 3.10.0**, released on 4 October 2021 [1][3]. "
        "It is specified by **PEP 634** (Structural Pattern Matching: Specification), with PEP 635 "
        "(motivation) and PEP 636 (tutorial) as companions; together they replace PEP 622 [2].\n\n"
        "[1] https://docs.python.org/3/whatsnew/3.10.html\n"
        "[2] https://peps.python.org/pep-0634/\n"
        "[3] https://www.python.org/downloads/release/python-3100/"
    ))
    return steps


PROBLEMS = {
    "coding": [
        Problem(
            "coding", "ledger: totals drift by a cent",
            "The monthly ledger report in this repo is off by a cent for accounts with many small "
            "entries, and `tests/test_report.py::test_totals_round_once` fails. Find the cause, fix it "
            "without changing the report's format, and make sure the whole suite passes.",
            "Work in /workspace/ledger. Do not modify the tests.",
            "14 passed", coding_script,
        )
    ],
    "math": [
        Problem(
            "math", "twin primes up to 10^4",
            "How many integers n with 1 <= n <= 10000 are such that both n and n + 2 are prime? "
            "Give the final answer as \\boxed{N}.",
            "Show your reasoning briefly; verify counts by computation.",
            "205",
            math_script(
                ToolRun("python", {"code": "from sympy import isprime\n"
                                   "pairs = [(p, p + 2) for p in range(2, 100) if isprime(p) and isprime(p + 2)]\n"
                                   "print(len(pairs), pairs)"},
                        "8 [(3, 5), (5, 7), (11, 13), (17, 19), (29, 31), (41, 43), (59, 61), (71, 73)]\n"),
                TWIN_CODE, TWIN_CHECK, "205\nfirst: [3, 5, 11, 17, 29, 41, 59, 71]\n"
                        "last: [9677, 9719, 9767, 9857, 9929]\n", "205",
                        "Sieve to N + 2 so that n + 2 is covered for n = N, then count pairs. "
                        "n itself must be <= 10000; n + 2 may reach 10002."),
        ),
        Problem(
            "math", "lattice points in a disc of radius 45",
            "How many points (x, y) with integer coordinates satisfy x^2 + y^2 <= 2025? "
            "Give the final answer as \\boxed{N}.",
            "Show your reasoning briefly; verify counts by computation.",
            "6361",
            math_script(
                ToolRun("python", {"code": "pts = [(x, y) for x in range(-2, 3) for y in range(-2, 3) if x*x + y*y <= 4]\n"
                                   "print(len(pts))\nprint(pts)"},
                        "13\n[(-2, 0), (-1, -1), (-1, 0), (-1, 1), (0, -2), (0, -1), (0, 0), (0, 1), (0, 2), "
                        "(1, -1), (1, 0), (1, 1), (2, 0)]\n"),
                LATTICE_CODE, LATTICE_CHECK, "6361\naxis points: 181\n", "6361",
                        "Gauss circle problem for r = 45: roughly pi * 2025 = 6361.7, so expect about 6360. "
                        "Count exactly by brute force over the bounding square."),
        ),
    ],
    "search": [
        Problem(
            "search", "when did `match` land in CPython?",
            "Which CPython release first shipped the `match` statement, when was it released, and "
            "which PEP specifies it? Cite primary sources.",
            "Answer in at most five sentences with numbered citations.",
            "PEP 634", search_script,
        )
    ],
}


def judge_steps(problem: Problem, reply: str) -> tuple[str, list[Step]]:
    """The judge's prompt and its one verdict turn for a solver's final reply."""
    prompt = f"Task:\n{problem.prompt}\n\nReference answer: {problem.answer}\n\nSubmitted answer:\n{reply}"
    verdict = {"verdict": "correct", "confidence": 0.93, "reason": f"matches the reference ({problem.answer})"}
    return prompt, [Step(json.dumps(verdict, indent=2),
                         reasoning="Compare the boxed value with the reference; ignore formatting.")]


PROVIDER_ERRORS = {
    "context": (400, 'upstream 400: {"error": {"message": "This model\'s maximum context length is 32768 '
               'tokens. However, your messages resulted in 33417 tokens. Please reduce the length of the '
               'messages.", "type": "invalid_request_error", "code": "context_length_exceeded"}}'),
    "overloaded": (503, 'upstream 503: {"error": {"message": "The server is overloaded, please retry '
                  'shortly.", "type": "server_error", "code": 503}}'),
    "rate": (429, 'upstream 429: {"error": {"message": "Rate limit reached for requests: limit 60 per '
            'minute. Please try again in 1s.", "type": "rate_limit_error", "code": 429}}'),
}

SANDBOX_CRASH = (
    "sandbox exited unexpectedly (exit code 137, killed: out of memory) while running "
    "`python -m pytest -q`",
    "Traceback (most recent call last):\n"
    '  File "verifiers/v1/rollout.py", line 412, in step\n'
    "    result = await self.runtime.exec(command, timeout=self._timeouts.tool)\n"
    '  File "verifiers/v1/runtimes/subprocess.py", line 188, in exec\n'
    "    raise SandboxError(f\"sandbox exited unexpectedly (exit code {code}, ...)\")\n"
    "verifiers.v1.errors.SandboxError: sandbox exited unexpectedly (exit code 137, killed: out of memory)\n",
)
