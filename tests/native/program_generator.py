"""Random well-typed Reverie programs, for the property tests of the native backend.

`generate_program(rng, name)` returns a `GeneratedProgram`: the source of one function
`fn name(params...) -> float` with 1–3 `float` parameters over the dimensions N and M,
1–6 `let`s (elementwise built-ins on safe domains, broadcasting arithmetic, reductions,
transposes, matmuls, slices, concat, roll, softmax, scans and orderings, an occasional
`for` loop, `if`/`else`, `while`, indexed update or index notation) and a scalar result,
so that `grad` applies. Shapes are tracked as tuples of dimension strings ("N", "M", "1",
"N - 1", ...); two shapes broadcast only when the strings agree or one of them is "1",
which is never looser than the compiler's own rule.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

Shape = tuple[str, ...]

PARAM_SHAPES: list[Shape] = [("N",), ("M",), ("N", "M"), ("M", "N"), ()]
BASE_DIMS = {"N", "M"}
# elementwise functions safe on any finite input, with values that stay of order one
BOUNDED_UNARY = ["tanh", "sin", "cos", "sigmoid", "erf"]
# functions that need a positive argument or grow fast, with the wrapper that makes them safe
GUARDED_UNARY = ["log(abs({}) + 1.0)", "sqrt(abs({}) + 1.0)", "rsqrt({0} * {0} + 1.0)",
                 "exp(tanh({}))", "softplus({})", "log1p(abs({}))", "expm1(sin({}))",
                 "relu({})", "abs({})", "-{}", "0.5 * {} ** 2"]
BINARY = ["+", "-", "*"]


@dataclass
class Value:
    """An expression of the generated program and its shape."""

    text: str
    shape: Shape

    def can_be_empty(self) -> bool:
        """Whether some axis may have length 0 (a slice like `x[1:]` of a length-1 axis)."""
        return any(dim not in BASE_DIMS and dim != "1" for dim in self.shape)


@dataclass
class GeneratedProgram:
    """The source of one generated function and the shapes of its parameters."""

    name: str
    source: str
    param_shapes: list[Shape] = field(default_factory=list)


def broadcast(a: Shape, b: Shape) -> Shape | None:
    """The NumPy broadcast of two symbolic shapes, or None when they do not broadcast."""
    result: list[str] = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else "1"
        db = b[-i] if i <= len(b) else "1"
        if da != db and "1" not in (da, db):
            return None
        result.append(db if da == "1" else da)
    return tuple(reversed(result))


class ProgramBuilder:
    """Builds one random function from a `random.Random`, statement by statement."""

    def __init__(self, rng: random.Random, name: str) -> None:
        self.rng = rng
        self.name = name
        self.values: list[Value] = []
        self.statements: list[str] = []
        self.counter = 0

    def fresh(self, prefix: str = "v") -> str:
        """A new local name."""
        self.counter += 1
        return f"{prefix}{self.counter}"

    def pick(self, predicate: object = None) -> Value | None:
        """A random available value satisfying `predicate`, or None."""
        choices = [v for v in self.values if predicate is None or predicate(v)]
        return self.rng.choice(choices) if choices else None

    def build(self) -> GeneratedProgram:
        """Draw parameters and statements; return the finished program."""
        count = self.rng.randint(1, 3)
        shapes = [self.rng.choice(PARAM_SHAPES[:4])] + \
            [self.rng.choice(PARAM_SHAPES) for _ in range(count - 1)]
        params = []
        for index, shape in enumerate(shapes):
            name = "xyz"[index]
            params.append(f"{name}: float[{', '.join(shape)}]" if shape else f"{name}: float")
            self.values.append(Value(name, shape))
        for _ in range(self.rng.randint(1, 6)):
            self.add_statement()
        lets = self.values[count:]
        terms = [f"sum({lets[-1].text})"] + [f"0.25 * sum({v.text})" for v in lets[:-1]]
        terms += [f"0.5 * sum({v.text})" for v in self.values[:count] if self.rng.random() < 0.5]
        body = "".join(f"    {s}\n" for s in self.statements)
        source = (f"fn {self.name}({', '.join(params)}) -> float {{\n{body}"
                  f"    return {' + '.join(terms)};\n}}\n")
        return GeneratedProgram(self.name, source, shapes)

    def add_statement(self) -> None:
        """Append one `let` (or a small loop, branch or index-notation definition)."""
        roll = self.rng.random()
        if roll < 0.08 and self.add_loop():
            return
        if roll < 0.16 and self.add_index_notation():
            return
        if roll < 0.22 and self.add_control_flow():
            return
        if roll < 0.28 and self.add_indexed_update():
            return
        value = self.expression()
        name = self.fresh()
        self.statements.append(f"let {name} = {value.text};")
        self.values.append(Value(name, value.shape))

    def expression(self) -> Value:
        """A random expression over the available values."""
        makers = [self.unary, self.binary, self.binary, self.reduction, self.comparison,
                  self.matmul, self.data_movement, self.softmax_like, self.scan]
        while True:
            value = self.rng.choice(makers)()
            if value is not None:
                return value

    def unary(self) -> Value | None:
        """An elementwise built-in on a safe domain."""
        arg = self.pick()
        if self.rng.random() < 0.4:
            return Value(f"{self.rng.choice(BOUNDED_UNARY)}({arg.text})", arg.shape)
        return Value(self.rng.choice(GUARDED_UNARY).format(f"({arg.text})"), arg.shape)

    def binary(self) -> Value | None:
        """`+ - * /`, `max`/`min` or a scalar-literal combination, with broadcasting."""
        a = self.pick()
        if self.rng.random() < 0.2:
            return Value(f"({a.text} * {self.rng.choice(['0.5', '2.0', '-1.5'])})", a.shape)
        b = self.pick(lambda v: broadcast(a.shape, v.shape) is not None)
        shape = broadcast(a.shape, b.shape)
        kind = self.rng.random()
        if kind < 0.6:
            return Value(f"({a.text} {self.rng.choice(BINARY)} {b.text})", shape)
        if kind < 0.75:
            return Value(f"({a.text} / (abs({b.text}) + 1.0))", shape)
        if kind < 0.8:
            return Value(f"pow(abs({a.text}) + 1.0, tanh({b.text}))", shape)
        return Value(f"{self.rng.choice(['max', 'min'])}({a.text}, {b.text})", shape)

    def comparison(self) -> Value | None:
        """`where` with a comparison as its condition."""
        a = self.pick()
        b = self.pick(lambda v: broadcast(a.shape, v.shape) is not None)
        op = self.rng.choice(["<", ">", "<=", ">="])
        shape = broadcast(a.shape, b.shape)
        return Value(f"where({a.text} {op} {b.text}, {a.text} * 2.0, {b.text} - 1.0)", shape)

    def reduction(self) -> Value | None:
        """`sum`/`mean`/`max`/`min`/`logsumexp`/`prod`, over all axes or one, maybe keepdims."""
        arg = self.pick(lambda v: len(v.shape) > 0)
        if arg is None:
            return None
        kinds = ["sum"] if arg.can_be_empty() else ["sum", "mean", "max", "min", "logsumexp",
                                                     "prod"]
        kind = self.rng.choice(kinds)
        text = f"(sigmoid({arg.text}) + 0.5)" if kind == "prod" else arg.text
        if self.rng.random() < 0.3:
            return Value(f"{kind}({text})", ())
        axis = self.rng.randrange(len(arg.shape))
        keep = self.rng.random() < 0.4
        shape = tuple("1" if i == axis else d for i, d in enumerate(arg.shape)) if keep \
            else arg.shape[:axis] + arg.shape[axis + 1:]
        spelled_axis = axis - len(arg.shape) if self.rng.random() < 0.3 else axis
        keepdims = ", keepdims=true" if keep else ""
        return Value(f"{kind}({text}, axis={spelled_axis}{keepdims})", shape)

    def softmax_like(self) -> Value | None:
        """`softmax` or `log_softmax` along a non-empty axis."""
        arg = self.pick(lambda v: len(v.shape) > 0 and not v.can_be_empty())
        if arg is None:
            return None
        axis = self.rng.randrange(len(arg.shape))
        return Value(f"{self.rng.choice(['softmax', 'log_softmax'])}({arg.text}, axis={axis})",
                     arg.shape)

    def matmul(self) -> Value | None:
        """`a @ b` between operands whose inner dimensions agree."""
        pairs = [(a, b) for a in self.values for b in self.values
                 if 1 <= len(a.shape) <= 2 and 1 <= len(b.shape) <= 2
                 and a.shape[-1] == b.shape[0] and a.shape[-1] in BASE_DIMS]
        if not pairs:
            return None
        a, b = self.rng.choice(pairs)
        return Value(f"({a.text} @ {b.text})", a.shape[:-1] + b.shape[1:])

    def data_movement(self) -> Value | None:
        """A transpose, subscript, slice, strided slice, reshape, concat or roll."""
        arg = self.pick(lambda v: len(v.shape) > 0)
        if arg is None:
            return None
        kind = self.rng.choice(["T", "slice", "concat", "roll", "pick", "stride", "reshape"])
        if kind == "T":
            if len(arg.shape) == 2 and self.rng.random() < 0.5:
                return Value(f"transpose({arg.text}, (1, 0))", arg.shape[::-1])
            return Value(f"{arg.text}.T", tuple(reversed(arg.shape)))
        if kind == "reshape":
            if len(arg.shape) != 2 or not set(arg.shape) <= BASE_DIMS:
                return None
            flat = f"{arg.shape[0]} * {arg.shape[1]}"
            return Value(f"reshape({arg.text}, ({flat},))", (flat,))
        axis = self.rng.randrange(len(arg.shape))
        dim = arg.shape[axis]
        if kind == "roll":
            shift = self.rng.choice([1, -1, 2])
            if self.rng.random() < 0.3:
                return Value(f"roll({arg.text}, {shift})", arg.shape)
            return Value(f"roll({arg.text}, {shift}, axis={axis})", arg.shape)
        if dim not in BASE_DIMS:
            return None
        before = ":, " * axis
        if kind == "pick":
            rest = arg.shape[:axis] + arg.shape[axis + 1:]
            if self.rng.random() < 0.5:
                return Value(f"{arg.text}[{before}0]", rest)
            return Value(f"{arg.text}[{before}-1:]", arg.shape[:axis] + ("1",) + rest[axis:])
        if kind == "stride":
            shape = arg.shape[:axis] + (f"({dim} + 1) // 2",) + arg.shape[axis + 1:]
            return Value(f"{arg.text}[{before}::2]", shape)
        if kind == "slice":
            shape = arg.shape[:axis] + (f"{dim} - 1",) + arg.shape[axis + 1:]
            return Value(f"({arg.text}[{before}1:] - 0.5 * {arg.text}[{before}:{dim} - 1])",
                         shape)
        other = self.pick(lambda v: len(v.shape) == len(arg.shape) and all(
            a == b for i, (a, b) in enumerate(zip(v.shape, arg.shape, strict=True))
            if i != axis))
        shape = arg.shape[:axis] + (f"{dim} + {other.shape[axis]}",) + arg.shape[axis + 1:]
        return Value(f"concat(({arg.text}, {other.text}), axis={axis})", shape)

    def scan(self) -> Value | None:
        """`cumsum`, `cumprod` (of values near 1), `sort` or the largest element by `topk`,
        along one axis of length N or M."""
        arg = self.pick(lambda v: len(v.shape) > 0)
        if arg is None:
            return None
        axis = self.rng.randrange(len(arg.shape))
        if arg.shape[axis] not in BASE_DIMS:
            return None
        kind = self.rng.choice(["cumsum", "cumprod", "sort", "topk"])
        if kind == "cumsum":
            return Value(f"cumsum({arg.text}, axis={axis})", arg.shape)
        if kind == "cumprod":
            return Value(f"cumprod(0.5 * tanh({arg.text}) + 1.0, axis={axis})", arg.shape)
        if kind == "sort":
            return Value(f"sort({arg.text}, axis={axis})", arg.shape)
        return Value(f"topk({arg.text}, 1, axis={axis})",
                     arg.shape[:axis] + ("1",) + arg.shape[axis + 1:])

    def add_indexed_update(self) -> bool:
        """A `var` copy of a value with its first row (or its last column) replaced:
        `u[0] = ...;`, `u[:, -1] = ...;` (a differentiable, bounds-checked update)."""
        state = self.pick(lambda v: len(v.shape) in (1, 2) and v.shape[0] in BASE_DIMS)
        if state is None:
            return False
        name = self.fresh("u")
        self.statements.append(f"var {name} = {state.text};")
        if len(state.shape) == 2 and self.rng.random() < 0.5:
            target, part = f"{name}[:, -1]", state.shape[:1]
        else:
            target, part = f"{name}[0]", state.shape[1:]
        source = self.pick(lambda v: v.shape == part)
        value = f"tanh({source.text}) * 0.5" if source is not None else "0.25"
        self.statements.append(f"{target} = {value};")
        self.values.append(Value(name, state.shape))
        return True

    def add_loop(self) -> bool:
        """A `var` updated by a short `for` loop, maybe reading rows of a matrix."""
        state = self.pick(lambda v: len(v.shape) <= 2)
        rows = self.pick(lambda v: len(v.shape) == 2 and v.shape[0] in BASE_DIMS
                         and broadcast(state.shape, v.shape[1:]) == state.shape)
        name = self.fresh("acc")
        if rows is not None and self.rng.random() < 0.6:
            bound, step = rows.shape[0], f"{rows.text}[t]"
        else:
            bound, step = str(self.rng.randint(1, 3)), "0.25 * t"
        self.statements.append(f"var {name} = {state.text};")
        self.statements.append(f"for t in 0..{bound} {{ {name} = tanh({name} * 0.75 + {step});"
                               f" }}")
        self.values.append(Value(name, state.shape))
        return True

    def add_control_flow(self) -> bool:
        """A `var` updated by an `if`/`else` on the sign of a sum, or halved by a `while`
        until it is small (at most a few steps; halving is exact, so every backend takes
        the same number of steps)."""
        state = self.pick(lambda v: len(v.shape) <= 2)
        test = self.pick()
        name = self.fresh("c")
        self.statements.append(f"var {name} = {state.text};")
        if self.rng.random() < 0.5:
            self.statements.append(
                f"if sum({test.text}) > 0.0 {{ {name} = tanh({name} * 0.5 + 0.1); }} "
                f"else {{ {name} = sin({name}) * 0.75; }}")
        else:
            steps = self.fresh("k")
            self.statements.append(f"var {steps} = 0;")
            self.statements.append(
                f"while {steps} < {self.rng.randint(1, 4)} and max(abs({name})) > 0.05 "
                f"{{ {name} = {name} * 0.5; {steps} = {steps} + 1; }}")
        self.values.append(Value(name, state.shape))
        return True

    def add_index_notation(self) -> bool:
        """`let y[i] = sum[j](A[i, j] * v[j])`, an elementwise map, or a padded difference."""
        matrix = self.pick(lambda v: len(v.shape) == 2 and v.shape[0] in BASE_DIMS
                           and v.shape[1] in BASE_DIMS and v.text.isidentifier())
        name = self.fresh("w")
        if matrix is not None:
            vector = self.pick(lambda v: v.shape == matrix.shape[1:] and v.text.isidentifier())
            if vector is not None:
                self.statements.append(
                    f"let {name}[i] = sum[j]({matrix.text}[i, j] * tanh({vector.text}[j]));")
                self.values.append(Value(name, matrix.shape[:1]))
                return True
            self.statements.append(
                f"let {name}[i, j] = {matrix.text}[j, i] * 0.5 + sin({matrix.text}[j, i]);")
            self.values.append(Value(name, matrix.shape[::-1]))
            return True
        vector = self.pick(lambda v: len(v.shape) == 1 and v.shape[0] in BASE_DIMS
                           and v.text.isidentifier())
        if vector is None:
            return False
        dim = vector.shape[0]
        self.statements.append(f"let {name}[i in 0..{dim}] = {vector.text}[i] - "
                               f"{vector.text}[i - 1] * 0.5;")
        self.values.append(Value(name, vector.shape))
        return True


def generate_program(rng: random.Random, name: str) -> GeneratedProgram:
    """One random well-typed function called `name`."""
    return ProgramBuilder(rng, name).build()
