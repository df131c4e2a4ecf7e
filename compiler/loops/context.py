"""`Context`: what is global to one loop program while it is built and rewritten —
deterministic name counters (`%0`, `%i0`, `t0`), the workspace temporaries and the error
sites — shared by the lowering (`to_loops/`) and the loop passes that create names.

A loop pass is `Program -> Program`; one that creates names takes the program's context
with `Context.of(program)`, whose counters continue after every name the program holds:

    ctx = Context.of(program)
    program.body = rewrite(program.body, ctx)       # new scalars are %N past the last one
"""

from __future__ import annotations

from reverie.compiler.ir.dims import Shape
from reverie.compiler.loops.ir import (
    BLOCK_STMTS,
    Accumulator,
    ArgUpdate,
    Buffer,
    ErrorSite,
    ForLoop,
    Guarded,
    Let,
    Load,
    Loop,
    Program,
    Stmt,
    Var,
    WhileLoop,
)


class Context:
    """Program-wide state: name counters, temporaries and error sites."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.temps: list[Buffer] = []
        self.sites: list[ErrorSite] = []

    @classmethod
    def of(cls, program: Program) -> Context:
        """The context of a built program: its temporaries and error sites (the same lists,
        so new ones join the program), and each name counter past the highest number the
        program uses with that prefix (`%7` defined: the next `%` name is `%8`)."""
        ctx = cls()
        ctx.temps, ctx.sites = program.temps, program.sites
        for name in defined_names(program.body) | {t.name for t in program.temps}:
            prefix = name.rstrip("0123456789")
            if prefix != name:
                number = int(name[len(prefix):]) + 1
                ctx.counters[prefix] = max(ctx.counters.get(prefix, 0), number)
        return ctx

    def fresh(self, prefix: str) -> str:
        """The next name with `prefix` (`%0`, `%i0`, `t0`, ...)."""
        n = self.counters.get(prefix, 0)
        self.counters[prefix] = n + 1
        return f"{prefix}{n}"

    def var(self, dtype: str, prefix: str = "%") -> Var:
        return Var(self.fresh(prefix), dtype)

    def temp(self, dtype: str, shape: Shape) -> Buffer:
        """A new workspace buffer."""
        buffer = Buffer(self.fresh("t"), dtype, tuple(shape), "temp", len(self.temps))
        self.temps.append(buffer)
        return buffer

    def site(self, kind: str, label: str = "", axis: int = 0) -> int:
        """The number of an error site (reused when identical)."""
        site = ErrorSite(kind, label, axis)
        if site not in self.sites:
            self.sites.append(site)
        return self.sites.index(site)


def defined_names(stmts: list[Stmt]) -> set[str]:
    """Names of the variables (scalars and loop variables) defined in `stmts`, nested too."""
    names: set[str] = set()
    for stmt in stmts:
        if isinstance(stmt, Let | Load | Guarded | Accumulator):
            names.add(stmt.var.name)
        elif isinstance(stmt, ArgUpdate):
            names |= {stmt.best.name, stmt.best_index.name}
        if isinstance(stmt, Loop | ForLoop | WhileLoop):
            names.add(stmt.var)
        if isinstance(stmt, BLOCK_STMTS):
            names |= defined_names(stmt.body)
    return names
