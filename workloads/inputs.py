"""One bounded reader for every file a user hands the tools (the platform's CLI in infra/ and
the workloads' verbs alike), so that a hostile or careless file is one line, never a hang,
a traceback or gigabytes of memory:

- regular files only: a FIFO (which would block forever), a device (/dev/zero never ends),
  a socket or a directory is refused by what it is; a symbolic link is followed, and what
  it ends in must be a regular file (a loop is refused);
- a size cap per kind of file, checked on the open file before reading, and the read itself
  stops one byte past the cap, so a file that grows while read is refused too;
- UTF-8 text;
- YAML with duplicate keys refused (the Pulumi CLI refuses them, and a second
  `mlplat:residency` must not win silently), nesting bounded, aliases bounded by the size
  of what they expand to (a billion-laughs file is refused, never expanded), integers of
  at most 100 digits, and, where asked, string keys only;
- JSON with the same bounds on nesting and numbers.

Errors name the file and quote at most a short excerpt of a value (`excerpt`), never the
contents of a file that is not what it was asked to be.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_DEPTH = 64  # nesting of YAML or JSON: stack files reach 8, Pulumi's preview JSON about 30
MAX_NODES = 1_000_000  # values a YAML document may expand to through its aliases
MAX_DIGITS = 100  # digits of an integer: a quantity, never a 4,300-digit number
EXCERPT = 60  # characters of a value an error quotes


class InputError(ValueError):
    """A file or value a user handed the tools is not what it must be: one line."""


def excerpt(value: Any, limit: int = EXCERPT) -> str:
    """A short, one-line quotation of a value for an error message: its repr (newlines and
    control characters escaped), cut past `limit` characters with the whole length said."""
    size = len(value) if isinstance(value, (str, bytes)) else None
    text = repr(value[: limit * 2] if size is not None and size > limit * 2 else value)
    if size is None and len(text) <= limit or size is not None and size <= limit * 2 and len(text) <= limit * 2:
        return text
    return f"{text[:limit]}... (cut; {size if size is not None else len(text):,} characters)"


def named(value: Any, limit: int = EXCERPT) -> str:
    """A name (a config key, a column) as an error line shows it: as written when short and
    printable, quoted and cut otherwise (a name may hold a newline)."""
    text = str(value)
    return text if text and text.isprintable() and len(text) <= limit else excerpt(text)


def shown(path: Path | str) -> str:
    """A path as an error line names it: as given, unless it holds a newline or a control
    character, which would break the line (then quoted, escaped)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: Path | str, what: str, limit: int) -> bytes:
    """A regular file's bytes, at most `limit` of them; `what` names the kind of file for
    the message ("stack file", "base report")."""
    path = Path(path)
    try:
        # O_NONBLOCK: a FIFO put in the file's place after any check still cannot block the
        # open; O_NOCTTY: a terminal is never made ours.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{shown(path)}: no such file; check the path of the {what}") from None
    except IsADirectoryError:
        raise InputError(f"{shown(path)}: is a directory, not a {what}") from None
    except PermissionError:
        raise InputError(f"{shown(path)}: cannot be read (permission denied); make the {what} readable by this user") \
            from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{shown(path)}: is a symbolic link that loops; point it at the {what}") from None
        raise InputError(f"{shown(path)}: cannot be read ({err.strerror or err}); check the path of the {what}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{shown(path)}: is {file_kind(info.st_mode)}, not a {what}; name the file itself")
        if info.st_size > limit:
            raise InputError(f"{shown(path)}: is {info.st_size:,} bytes; a {what} may be at most {limit:,}")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise InputError(f"{shown(path)}: grew past {limit:,} bytes while read; a {what} may be at most {limit:,}")
        return b"".join(chunks)
    except OSError as err:
        raise InputError(f"{shown(path)}: cannot be read ({err.strerror or err}); check the path of the {what}") from None
    finally:
        os.close(fd)


def read_text(path: Path | str, what: str, limit: int) -> str:
    """A regular file's UTF-8 text (as read_bytes)."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{shown(path)}: is not UTF-8 text (byte {err.start} is {data[err.start]:#04x}); a {what} is "
                         "UTF-8 text, so check it is the file you meant") from None


# --- YAML ---------------------------------------------------------------------------------

class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the bounds above. Composition is where nesting and aliases
    are seen; construction is where keys and integers are."""

    string_keys = False

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise InputError(f"line {mark.line + 1}: nested more than {MAX_DEPTH} deep")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        # The keys written in this mapping, before merge keys (`<<: *base`) bring in others
        # that it may override, as YAML means it to.
        seen: dict[Any, int] = {}
        for key_node, _value in node.value if isinstance(node, yaml.MappingNode) else ():
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            line = key_node.start_mark.line + 1
            if self.string_keys and key_node.tag != "tag:yaml.org,2002:str":
                raise InputError(f"line {line}: key {excerpt(key_node.value)} is not a string; quote it")
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise InputError(f"line {line}: a key is a list or mapping") from None
            if key in seen:
                raise InputError(f"line {line}: key {excerpt(key)} appears twice (first on line {seen[key]}); "
                                 "keep one")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> int:
        digits = sum(c.isalnum() for c in str(node.value))
        if digits > MAX_DIGITS:
            raise InputError(f"line {node.start_mark.line + 1}: an integer of {digits:,} digits; at most "
                             f"{MAX_DIGITS} are read")
        return super().construct_yaml_int(node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


class _StringKeyLoader(_BoundedLoader):
    string_keys = True


def _expanded_size(node: Any, limit: int) -> int:
    """How many values the node stands for once every alias is expanded (an alias shares
    its anchor's node, so a billion-laughs file is small here and huge expanded)."""
    sizes: dict[int, int] = {}

    def size(n: Any) -> int:
        if id(n) in sizes:
            return sizes[id(n)]
        sizes[id(n)] = 0  # a recursive alias counts once
        if isinstance(n, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in n.value)
        elif isinstance(n, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in n.value)
        else:
            total = 1
        sizes[id(n)] = total = min(total, limit + 1)
        return total

    return size(node)


def load_yaml(text: str, source: str, string_keys: bool = False) -> Any:
    """One YAML document, bounded; InputError (one line, naming `source`) otherwise."""
    loader = None
    try:
        loader = (_StringKeyLoader if string_keys else _BoundedLoader)(text)
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, MAX_NODES) > MAX_NODES:
            raise InputError(f"its aliases expand to more than {MAX_NODES:,} values; write the values out")
        return loader.construct_document(node)
    except InputError as err:
        raise InputError(f"{source}: {err}") from None
    except RecursionError:
        raise InputError(f"{source}: nested too deeply to read") from None
    except yaml.reader.ReaderError as err:  # a character YAML never allows: NUL, most control bytes
        code = err.character if isinstance(err.character, int) else ord(err.character)
        raise InputError(f"{source}: is not text (character #x{code:04x} at byte {err.position}); check it is the "
                         "file you meant") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise InputError(f"{source}:{where} is not valid YAML: {getattr(err, 'problem', None) or 'unreadable'}") \
            from None
    finally:
        if loader is not None:
            loader.dispose()


# --- JSON ---------------------------------------------------------------------------------

def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise InputError(f"an integer of {len(text.lstrip('-')):,} digits; at most {MAX_DIGITS} are read")
    return int(text)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputError(f"the number {excerpt(text)} is out of range")
    return value


def _reject_constant(name: str) -> float:
    raise InputError(f"{name} is not JSON")


def depth_of(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply lists and objects nest in a parsed value: one level at a time, keeping
    only lists and objects (never recursion; a report of millions of leaves stays fast)."""
    depth, level = 0, [value] if isinstance(value, (dict, list)) else []
    while level and depth <= limit:
        depth += 1
        level = [child for item in level for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, (dict, list))]
    return depth


def load_json(text: str | bytes, source: str) -> Any:
    """One JSON document, bounded; InputError (one line, naming `source`) otherwise."""
    try:
        value = json.loads(text, parse_int=_bounded_int, parse_float=_finite, parse_constant=_reject_constant)
    except InputError as err:
        raise InputError(f"{source}: {err}") from None
    except RecursionError:
        raise InputError(f"{source}: nested more than {MAX_DEPTH} deep") from None
    except UnicodeDecodeError:
        raise InputError(f"{source}: is not UTF-8 text") from None
    except ValueError as err:  # json.JSONDecodeError is one
        where = f" line {err.lineno}" if isinstance(err, json.JSONDecodeError) else ""
        said = err.msg if isinstance(err, json.JSONDecodeError) else "unreadable"
        raise InputError(f"{source}:{where} is not valid JSON: {said}") from None
    if depth_of(value) > MAX_DEPTH:
        raise InputError(f"{source}: nested more than {MAX_DEPTH} deep")
    return value


def read_yaml(path: Path | str, what: str, limit: int, string_keys: bool = False) -> Any:
    return load_yaml(read_text(path, what, limit), shown(path), string_keys=string_keys)


def read_json(path: Path | str, what: str, limit: int) -> Any:
    return load_json(read_text(path, what, limit), shown(path))


# --- output paths ---------------------------------------------------------------------------

def check_output(path: Path | str, what: str, folder: bool = False) -> None:
    """Before any work: a file (or, with `folder`, a directory) the tool will write can be
    written there. A directory where a file goes, a file where a folder goes, a device, or
    a parent that is a file or cannot be written are refused. Missing parents are fine when
    they can be made: the tools make them (`--out out/base` on a fresh checkout)."""
    path = Path(path)
    if folder:
        if path.exists() and not path.is_dir():
            raise InputError(f"{shown(path)}: is not a directory; name a folder for the {what}")
    else:
        if path.is_dir():
            raise InputError(f"{shown(path)}: is a directory; name the file to write the {what} to")
        if path.exists() and not path.is_file():
            raise InputError(f"{shown(path)}: is {file_kind(path.stat().st_mode)}; name a regular file to write the {what} to")
    if path.exists():
        if not os.access(path, os.W_OK) or (folder and not os.access(path, os.X_OK)):
            raise InputError(f"{shown(path)}: cannot be written (permission denied) for the {what}")
        if not folder:
            return
    ancestor = path.absolute().parent if not path.exists() else path.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"{shown(ancestor)}: is not a directory, so the {what} cannot be written under it")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputError(f"{shown(ancestor)}: cannot be written (permission denied), so the {what} cannot be written there")
