"""Function length: no function in product code runs over MAX_LINES lines, so each can be read
on one screen and a new rule gets a helper with a name instead of twenty more lines in a
function that already does five things.

A function's length is `end_lineno - lineno + 1` of its def in the syntax tree (its
docstring, comments and blank lines inside it included; its decorators not); methods and
nested functions are measured on their own, and a nested one counts in its outer one too.
Product code is every module of PRODUCT_PACKAGES outside `migrations/` folders.

The order pipelines of WAITING_FOR_ORDER_ADMISSION were left long while one order admission
replaced them; it has, and the list is empty. It may only shrink: the test fails when one of
its entries is gone or back under the limit, to have it taken off."""

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.product_code import PRODUCT_PACKAGES, ROOT, product_files

MAX_LINES = 60
# (path, qualified name): the order pipelines one order admission was to replace; it has (all
# three pass compute.admission.admit), and the list is empty.
WAITING_FOR_ORDER_ADMISSION: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Function:
    """One def of a module: where it is, its qualified name (`Class.method`, `outer.inner`)
    and its length in lines."""

    path: str
    name: str
    line: int
    length: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name} is {self.length} lines"


def functions_in(source: str, path: str = "<source>") -> list[Function]:
    """Every function and method of a module's source, nested ones included, in order."""
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                found.append(Function(path, name, child.lineno, length))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def too_long(functions: Sequence[Function]) -> list[Function]:
    return [function for function in functions if function.length > MAX_LINES]


@cache
def product_functions() -> tuple[Function, ...]:
    """Read once a session: two tests walk the same files."""
    functions = []
    for relative in product_files():
        functions += functions_in((ROOT / relative).read_text(), relative.as_posix())
    return tuple(functions)


def test_no_function_in_product_code_is_over_the_limit():
    long = [
        function
        for function in too_long(product_functions())
        if (function.path, function.name) not in WAITING_FOR_ORDER_ADMISSION
    ]
    assert long == [], f"functions over {MAX_LINES} lines (split them):\n" + "\n".join(
        map(str, long)
    )


def test_the_functions_waiting_for_order_admission_are_still_there_and_still_long():
    lengths: dict[tuple[str, str], list[int]] = {}
    for function in product_functions():
        lengths.setdefault((function.path, function.name), []).append(function.length)
    for path, name in sorted(WAITING_FOR_ORDER_ADMISSION):
        assert (path, name) in lengths, (
            f"{path}: {name} is gone: remove it from WAITING_FOR_ORDER_ADMISSION"
        )
        assert max(lengths[path, name]) > MAX_LINES, (
            f"{path}: {name} is {max(lengths[path, name])} lines now, within the limit: "
            "remove it from WAITING_FOR_ORDER_ADMISSION"
        )


def test_the_walk_reads_every_product_package_and_no_migration():
    files = product_files()
    assert {path.parts[0] for path in files} == set(PRODUCT_PACKAGES)
    assert not any("migrations" in path.parts for path in files)
    assert Path("billing/disputes.py") in files


def _function(lines: int, header: str = "def f() -> None:") -> str:
    """A function of exactly `lines` lines: its def, a docstring and assignments."""
    body = ['    """A docstring counts."""'] + [f"    x{i} = {i}" for i in range(lines - 2)]
    return "\n".join([header, *body]) + "\n"


def test_a_61_line_function_is_flagged_and_a_60_line_one_passes():
    source = _function(61, "def long() -> None:") + "\n\n" + _function(60, "def short() -> None:")
    functions = functions_in(source)
    assert [(f.name, f.length) for f in functions] == [("long", 61), ("short", 60)]
    assert [f.name for f in too_long(functions)] == ["long"]


def test_methods_async_and_nested_functions_are_measured_with_their_qualified_names():
    method = "\n".join("    " + line for line in _function(61, "async def run(self):").splitlines())
    nested = "\n".join("    " + line for line in _function(3, "def inner():").splitlines())
    source = f"class Agent:\n{method}\n\n\ndef outer():\n{nested}\n    return inner\n"
    functions = functions_in(source, "nodeagent/x.py")
    assert [(f.name, f.line, f.length) for f in functions] == [
        ("Agent.run", 2, 61),
        ("outer", 65, 5),
        ("outer.inner", 66, 3),
    ]
    assert [str(f) for f in too_long(functions)] == ["nodeagent/x.py:2: Agent.run is 61 lines"]
