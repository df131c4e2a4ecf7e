"""Source text to AST: the Reverie parser (docs/language.md syntax, docs/language.md §13 errors).

Consumes a `.rv` source string; produces a `reverie.dsl.ast.Module` whose every node
carries the `Span` of its text. The grammar is `grammar.lark` next to this file, run by
Lark's LALR(1) parser (linear time, an explicit stack, no recursion); `ast_builder` then
turns the parse tree into AST dataclasses without recursion either.

Building the LALR tables from the grammar is slow (longer than a warm start), so it is
done once, ahead of time: `generated_parser.py` is Lark's stand-alone parser for
grammar.lark (its tables and the part of Lark that runs them; tests/runtime/test_startup.py
checks that it is up to date and regenerates it with REVERIE_UPDATE_GOLDEN=1). Loading
those tables takes a while, so what needs only the language's keywords takes
them from `check.py`, not from here.

`parse` raises nothing but `ParseError`, whatever the input:
- Lark's exceptions become diagnostics with readable token names, e.g.
  `expected ';' or an operator but found identifier 'y'` (this module);
- shapes the grammar accepts only to reject them with a better message (chained
  comparisons, unknown dtypes, ...) are refused by `ast_builder`;
- brackets and the AST are limited to MAX_NESTING levels (here and in `ast_builder`), so
  the recursive passes that run after the parser cannot overflow the Python stack;
- after a syntax error parsing resumes after the statement that holds it (at the next `fn`
  outside a function body), so one ParseError lists them all; its `partial` module holds
  the functions without one, which the pipeline's parse stage type-checks to report
  their errors in the same ParseError (`module_lowering.with_type_errors`).
"""

from __future__ import annotations

import collections
import functools
import re

from reverie.dsl import ast
from reverie.dsl.ast_builder import MAX_NESTING, STRAY_RANGE, build_ast, check_tree, token_span
from reverie.dsl.check import KEYWORDS
from reverie.dsl.diagnostics import Diagnostic, ParseError, error_at
from reverie.dsl.generated_parser import (
    Lark,
    Lark_StandAlone,
    PatternStr,
    Token,
    UnexpectedCharacters,
    UnexpectedToken,
)

# Token groups used to shorten "expected ..." lists (readable names, see _token_names).
EXPRESSION_START = frozenset({"identifier", "number", "'('"})
PREFIX_TOKENS = frozenset({"'-'", "'+'", "'not'", "'true'", "'false'"})
OPERATORS = frozenset(
    "'+' '-' '*' '/' '//' '%' '@' '**' '<' '<=' '>' '>=' '==' '!=' 'and' 'or' '(' '[' '.'".split()
)
# Words of other languages that Reverie lacks, each with what to write instead: a syntax
# error at (or just after) one of them is reported as this message, at the word.
FOREIGN_WORDS = {
    "break": "Reverie has no 'break': write the loop as 'while cond { ... }' whose condition "
             "says when to stop, or keep a 'var' unchanged with where(done, old, new)",
    "continue": "Reverie has no 'continue': put the rest of the step in 'if cond { ... }', "
                "or keep a 'var' unchanged in a step with where(skip, old, new)",
    "else": "'else' must follow the closing '}' of an 'if' block: 'if c { ... } else { ... }'",
    "def": "functions are declared with 'fn', as in 'fn f(x: f32[N]) -> f32 { ... }'",
    "function": "functions are declared with 'fn', as in 'fn f(x: f32[N]) -> f32 { ... }'",
    "mut": "Reverie has no 'let mut'; declare a value that changes with 'var x = ...;'",
    "const": "Reverie has no 'const'; declare a value with 'let x = ...;'",
}
COMPOUND_OPERATORS = frozenset({"+", "-", "*", "/", "%", "@", "**", "//"})
TERMINAL_WORDS = {"NAME": "identifier", "INT": "number", "FLOAT": "number", "$END": "end of file"}
BRACKET_PAIRS = {")": "(", "]": "[", "}": "{"}
NEXT_FUNCTION = re.compile(r"^[ \t]*fn\b", re.MULTILINE)  # where parsing resumes after an error
ELSE = re.compile(r"\s*else\b")  # after an `if` block's `}`: the statement goes on
MAX_SYNTAX_ERRORS = 50  # reported of one source (each costs a parse of the whole text)


def parse(source: str, filename: str = "<source>") -> ast.Module:
    """Parse Reverie source text into a Module; raise ParseError for any malformed input
    (with every syntax error found, and the functions that parsed as its `partial` module)."""
    try:
        functions = _parse_functions(source)
    except ParseError as error:
        if error.partial is not None:
            error.partial.filename = filename
        raise error.with_source(source, filename) from None
    return ast.Module(functions, source, filename)


@functools.cache
def _lark() -> Lark:
    """The LALR parser for grammar.lark, from its generated tables."""
    return Lark_StandAlone()


def _parse_functions(source: str) -> list[ast.FunctionDef]:
    """Parse and validate; raise ParseError without source attached."""
    _check_brackets(source)
    try:
        tree = _lark().parse(source)
    except (UnexpectedCharacters, UnexpectedToken) as error:
        diagnostics, offsets = _syntax_errors(source, error)
        raise _with_partial(ParseError(diagnostics), source, offsets) from None
    functions = build_ast(tree)
    check_tree(functions)
    return functions


def _syntax_errors(source: str, first: UnexpectedCharacters | UnexpectedToken
                   ) -> tuple[list[Diagnostic], list[int]]:
    """The diagnostics of syntax error `first` and of each later one, and their offsets.

    After an error inside a function body, parsing resumes after the statement that holds
    it (`_statement_around`: its text blanked, so positions stay those of `source`);
    elsewhere (a function's header, between functions) at the next line that starts a
    function (`fn`), the text before it blanked.
    """
    diagnostics: list[Diagnostic] = []
    offsets: list[int] = []
    text, error = source, first
    while error is not None and len(diagnostics) < MAX_SYNTAX_ERRORS:
        if isinstance(error, UnexpectedToken):
            diagnostics += _token_error(error, text, _check_brackets(text)).diagnostics
            if error.token.type == "$END":
                break
            line, offset = error.token.line, error.token.start_pos
        else:
            diagnostics += _character_error(error, text).diagnostics
            line, offset = error.line, error.pos_in_stream
        offsets.append(offset)
        statement = _statement_around(text, offset)
        if statement is not None:
            text = text[:statement[0]] + _blank(text[statement[0]:statement[1]]) + \
                text[statement[1]:]
        else:
            resume = NEXT_FUNCTION.search(source, _start_of_line(source, line + 1))
            if resume is None:
                break
            text = _blank(source[:resume.start()]) + source[resume.start():]
        try:
            _lark().parse(text)
            error = None
        except (UnexpectedCharacters, UnexpectedToken) as later:
            error = later
    return diagnostics, offsets


def _blank(text: str) -> str:
    """`text` with every character but line breaks made a space (positions kept)."""
    return re.sub(r"[^\n]", " ", text)


def _statement_around(text: str, offset: int) -> tuple[int, int] | None:
    """The [start, end) offsets of the statement of a function body that holds `offset`:
    from just after the `;`, `{` or `}` before it to its `;` (or the end of its block
    statement, `else` included, or just before the `}` that closes the body around it); None
    where `offset` is outside every body, or the statement is blank."""
    marks = [(m.start(), m.group()) for m in re.finditer(f"{_comment()}|[{{}};]", text)
             if not m.group().startswith("#")]
    before = [(pos, char) for pos, char in marks if pos < offset]
    if sum(1 if char == "{" else -1 if char == "}" else 0 for _, char in before) <= 0:
        return None
    start = before[-1][0] + 1 if before else 0
    end, depth = len(text), 0
    for pos, char in (m for m in marks if m[0] >= offset):
        if char == "{":
            depth += 1
        elif char == "}" and depth == 0:
            end = pos
            break
        elif char == "}":
            depth -= 1
            if depth == 0 and not ELSE.match(text, pos + 1):
                end = pos + 1
                break
        elif depth == 0:
            end = pos + 1
            break
    return (start, end) if text[start:end].strip() else None


def _with_partial(error: ParseError, source: str, offsets: list[int]) -> ParseError:
    """`error`, given the functions that hold none of the syntax errors at `offsets` as its
    `partial` module (the others blanked) and the names of the others as `broken`, so that
    the type checker can report the mistakes of the functions that parsed with it."""
    starts = [m.start() for m in NEXT_FUNCTION.finditer(source)]
    bounds = list(zip([0, *starts], [*starts, len(source)], strict=True))
    spoilt = [(a, b) for a, b in bounds if any(a <= offset < b for offset in offsets)]
    text = source
    for a, b in spoilt:
        text = text[:a] + _blank(text[a:b]) + text[b:]
    error.broken = frozenset(m[1] for a, b in spoilt
                             if (m := re.match(r"\s*fn\s+(\w+)", source[a:b])))
    try:
        functions = build_ast(_lark().parse(text))
        check_tree(functions)
    except (UnexpectedCharacters, UnexpectedToken, ParseError):
        return error  # (the rest is not well formed either: no partial module)
    error.partial = ast.Module(functions, source, "<source>")
    return error


def _start_of_line(source: str, line: int) -> int:
    """The offset of 1-based line `line` in `source` (its length past the last line)."""
    offset = 0
    for _ in range(line - 1):
        offset = source.find("\n", offset) + 1
        if offset == 0:
            return len(source)
    return offset


def _error_at(line: int, column: int, message: str) -> ParseError:
    """A ParseError at one character position."""
    return ParseError([Diagnostic(line, column, message, line, column)])


# ------------------------------------------------------------------ nesting limits


@functools.cache
def _comment() -> str:
    """The regular expression of a comment (the grammar's COMMENT terminal)."""
    return _lark().get_terminal("COMMENT").pattern.to_regexp()


def _check_brackets(source: str) -> list[tuple[str, int, int]]:
    """Reject brackets nested beyond MAX_NESTING; return the unclosed ones (char, line, col)."""
    comment = _comment()
    open_brackets: list[tuple[str, int, int]] = []
    line, line_start, previous = 1, 0, 0
    for match in re.finditer(f"{comment}|[][(){{}}]", source):
        start = match.start()
        newlines = source.count("\n", previous, start)
        if newlines:
            line += newlines
            line_start = source.rfind("\n", previous, start) + 1
        previous = start
        char = match.group()
        if char.startswith("#"):
            continue
        if char in "([{":
            open_brackets.append((char, line, start - line_start + 1))
            if len(open_brackets) > MAX_NESTING:
                raise _error_at(
                    line,
                    start - line_start + 1,
                    f"brackets are nested too deeply (more than {MAX_NESTING} levels)",
                )
        elif open_brackets and open_brackets[-1][0] == BRACKET_PAIRS[char]:
            open_brackets.pop()
    return open_brackets


# ------------------------------------------------------------------ syntax error messages


@functools.cache
def _token_names() -> dict[str, str]:
    """Lark terminal name -> readable name: `';'`, `'fn'`, `identifier`, `end of file`."""
    names = {
        terminal.name: f"'{terminal.pattern.value}'"
        for terminal in _lark().terminals
        if isinstance(terminal.pattern, PatternStr)
    }
    names.update(TERMINAL_WORDS)
    return names


def _describe_expected(expected: set[str]) -> str:
    """`expected ';'`, `expected ';' or an operator`, `expected one of ')', ',', '['`."""
    names = {_token_names().get(terminal, terminal) for terminal in expected}
    groups = []
    if EXPRESSION_START <= names:
        names -= EXPRESSION_START | PREFIX_TOKENS
        groups.append("an expression")
    if "'*'" in names:
        names -= OPERATORS
        groups.append("an operator")
    items = sorted(name for name in names if name.startswith("'"))
    items += sorted(name for name in names if not name.startswith("'")) + groups
    if len(items) == 1:
        return f"expected {items[0]}"
    if len(items) == 2:
        return f"expected {items[0]} or {items[1]}"
    return "expected one of " + ", ".join(items)


def _describe_token(token: Token) -> str:
    """`'}'`, `identifier 'x'`, `number '12'` or `end of file`."""
    text = token.value if len(token.value) <= 30 else token.value[:27] + "..."
    if token.type == "$END":
        return "end of file"
    if token.type == "NAME":
        return f"identifier '{text}'"
    if token.type in ("INT", "FLOAT"):
        return f"number '{text}'"
    return f"'{text}'"


def _describe_character(char: str) -> str:
    """`'$'` for printable ASCII, `'é' (U+00E9)` or `U+0000` otherwise."""
    code = f"U+{ord(char):04X}"
    if char == "'":
        return '"\'"'
    if char.isascii() and char.isprintable():
        return f"'{char}'"
    return f"'{char}' ({code})" if char.isprintable() else code


def _character_error(error: UnexpectedCharacters, source: str) -> ParseError:
    """Rewrite Lark's UnexpectedCharacters."""
    char = source[error.pos_in_stream]
    message = f"unexpected character {_describe_character(char)}"
    if not char.isascii():
        message += "; Reverie code is ASCII (other characters may only appear in comments)"
    return _error_at(error.line, error.column, message)


def _token_error(
    error: UnexpectedToken, source: str, unclosed: list[tuple[str, int, int]]
) -> ParseError:
    """Rewrite Lark's UnexpectedToken as `expected X but found Y`, with hints."""
    token = error.token
    expected = _expected_terminals(error)
    foreign = _foreign_construct(token, {_token_names().get(t, t) for t in expected}, source)
    if foreign is not None:
        return foreign
    message = f"{_describe_expected(expected)} but found {_describe_token(token)}"
    if token.value in KEYWORDS and "NAME" in expected:
        message += f"; '{token.value}' is a keyword and cannot be used as a name"
    elif token.value == "in" and token.type != "NAME":
        message += f"; {STRAY_RANGE}"
    if token.type == "$END":
        if unclosed:
            bracket, line, column = unclosed[-1]
            message += f"; the '{bracket}' at {line}:{column} is never closed"
        return _error_at(token.end_line, token.end_column, message)
    if any(_token_names().get(name) == "';'" for name in expected):
        previous = _previous_token(source, token.start_pos)
        if previous is not None and previous.end_line < token.line:
            return _error_at(previous.end_line, previous.end_column, message)  # missing ';'
    return error_at(token_span(token), message, ParseError)


def _foreign_construct(token: Token, expected: set[str], source: str) -> ParseError | None:
    """A tailored error for a construct Reverie lacks (`while`, `break`, `def`, `x += 1`,
    ...), or None: a word of FOREIGN_WORDS where a function must start or just before a
    statement goes wrong, or an operator directly followed by '=' where '=' was due."""
    if token.type == "NAME" and token.value in FOREIGN_WORDS and "'fn'" in expected:
        return error_at(token_span(token), FOREIGN_WORDS[token.value], ParseError)
    if "'='" not in expected:
        return None
    previous = _previous_token(source, token.start_pos)
    if previous is not None and previous.type == "NAME" and previous.value in FOREIGN_WORDS:
        return error_at(token_span(previous), FOREIGN_WORDS[previous.value], ParseError)
    if token.value in COMPOUND_OPERATORS and source.startswith("=", token.end_pos):
        named = previous is not None and previous.type == "NAME"
        target = previous.value if named else "h[t]"
        return error_at(token_span(token), f"compound assignment '{token.value}=' is not "
                        f"supported; write '{target} = {target} {token.value} ...;'", ParseError)
    return None


def _expected_terminals(error: UnexpectedToken) -> set[str]:
    """The terminals that could come next in this context.

    `accepts()` tries each candidate token on a copy of the parser, which is exact but costs
    time proportional to the parser stack; on pathological stacks (thousands of pending
    `**` or `-`) Lark's cheaper per-state set, which may list a few extra tokens, is used.
    """
    parser = error.interactive_parser
    if len(parser.parser_state.state_stack) > 10 * MAX_NESTING:
        return set(error.expected)
    return parser.accepts()


def _previous_token(source: str, position: int) -> Token | None:
    """The last token that ends before `position` (re-lexes the prefix; errors only)."""
    last = collections.deque(_lark().lex(source[:position]), maxlen=1)
    return last[0] if last else None
