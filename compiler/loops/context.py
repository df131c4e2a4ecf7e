"""`Context`: what is global to one loop program while it is built and rewritten —
deterministic name counters (`%0`, `%i0`, `t0`), the workspace temporaries and the error
sites — shared by the lowering (`to_loops/`) and the loop passes that create names."""

from __future__ import annotations

from reverie.compiler.ir.dims import Shape
from reverie.compiler.loops.ir import Buffer, ErrorSite, Var


class Context:
    """Program-wide state: name counters, temporaries and error sites."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.temps: list[Buffer] = []
        self.sites: list[ErrorSite] = []

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
