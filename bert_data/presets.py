"""YAML presets, and how settings from outside become a :class:`~bert_data.config.Config`.

``--config`` names a shipped preset or a YAML file (:func:`resolve_config`); the file is read
with limits and a strict loader, and every key and value is checked against the Config's fields
(:func:`load_yaml_config`). A numeric setting is read from text by one parser, the flag's
``type=`` and the file's alike (:func:`text_parser`: ``8M``, ``1e6``), so a file takes exactly
the spellings the command line takes. :func:`build_config` merges dataclass defaults < preset <
explicit flags and validates the result once (:func:`bert_data.config.validate`); an error about
a value the file set names the file and the key (:class:`FileSettings`), not a flag the user
never typed. :func:`effective_yaml` writes a Config back as a preset (``--print_config``). The
Config itself and its rules are :mod:`bert_data.config`'s, which does not import this module.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from .config import FIELD_NAMES, PATH_SETTINGS, ZERO_MEANS, Config, short_repr, validate, value_problem
from .errors import ConfigError

MAX_CONFIG_BYTES = 1 << 20  # a preset is a few lines; a larger file is not one
PRESETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")  # package data
# set by the runner for each half of a split job, or derived by the plan (the NSP negative pool), never by users
INTERNAL_SETTINGS = frozenset({"split_role", "negative_pool", "listed_outputs"})
COMMAND_LINE_ONLY = frozenset({"config", "log_level", "quiet", "print_config"})  # flags that are not settings


def preset_names() -> Tuple[str, ...]:
    """The presets shipped with the package (``--config NAME``), sorted."""
    try:
        names = os.listdir(PRESETS_DIR)
    except OSError:
        return ()
    return tuple(sorted(n[: -len(".yaml")] for n in names if n.endswith(".yaml")))


def resolve_config(value: str) -> str:
    """``--config``: a path to a YAML file, or the name of a shipped preset (``bert_base_msl128``,
    with or without ``.yaml``). An existing path wins over a preset of the same name."""
    if value and os.path.lexists(value):
        return value
    presets = preset_names()
    stem = os.path.basename(value)
    for suffix in (".yaml", ".yml"):
        stem = stem[: -len(suffix)] if stem.endswith(suffix) else stem
    if value and "/" not in value and stem in presets:
        return os.path.join(PRESETS_DIR, stem + ".yaml")
    if stem in presets:
        hint = f"; did you mean the preset {stem} (--config {stem})?"
    else:
        hint = f"; give a YAML file or a preset: {', '.join(presets)}" if presets else "; give a YAML file"
    raise ConfigError(f"--config {short_repr(value)}: no such file, and no preset of that name{hint}")


def _read_config_text(path: str) -> str:
    """The preset's text: a regular file (never a FIFO or device: they could block or never end)
    of at most ``MAX_CONFIG_BYTES``, in UTF-8."""
    import stat as stat_module

    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from None
    if not stat_module.S_ISREG(info.st_mode):
        raise ConfigError(f"--config {path}: not a regular file (a directory, FIFO or device); give a YAML file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"--config {path}: {info.st_size} bytes, more than a preset can be ({MAX_CONFIG_BYTES})")
    try:
        # O_NONBLOCK: had the path been swapped for a FIFO since the stat, the open must not block
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as handle:
            if not stat_module.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ConfigError(f"--config {path}: not a regular file (a directory, FIFO or device); give a YAML file")
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"--config {path}: more than {MAX_CONFIG_BYTES} bytes, more than a preset can be")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"--config {path}: not UTF-8 text (line {line}); save it as UTF-8") from None


def _strict_loader():
    """yaml.SafeLoader refusing anchors and aliases (a preset never needs them, and they make
    a few bytes expand to gigabytes: the billion laughs), merge keys (``<<``) and a key given
    twice (PyYAML would silently keep the last one)."""
    import yaml
    from yaml.composer import ComposerError
    from yaml.constructor import ConstructorError

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent, index):  # type: ignore[override]
            event = self.peek_event()
            if self.check_event(yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ComposerError(None, None, "anchors and aliases (& and *) are not allowed", event.start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):  # type: ignore[override]
            seen: Dict[str, int] = {}
            for key_node, _ in getattr(node, "value", ()):
                line = key_node.start_mark.line + 1
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise ConstructorError(None, None, "merge keys (<<) are not allowed", key_node.start_mark)
                if isinstance(key_node, yaml.ScalarNode):
                    if key_node.value in seen:
                        raise ConstructorError(
                            None, None, f"{key_node.value} is given twice (lines {seen[key_node.value]} and {line}); "
                            "keep one", key_node.start_mark,
                        )
                    seen[key_node.value] = line
            return super().construct_mapping(node, deep)

    return Loader


def _yaml_problem(exc: BaseException) -> str:
    """One line saying what is wrong in a YAML text, with the line when known."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem:
        problem = problem.rstrip(".")
        context = getattr(exc, "context", None)
        if context and problem.startswith("but "):  # "expected a single document ... but found another"
            problem = f"{context} {problem}"
        return f"{problem}, line {mark.line + 1}" if mark is not None and "line" not in problem else problem
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    text = (str(exc).splitlines() or [type(exc).__name__])[0]
    return text.split(";")[0]


def load_yaml_config(path: str) -> Dict[str, Any]:
    """Read a YAML preset; unknown keys and values of the wrong type are errors naming the key
    and the file (catches typos early)."""
    import difflib

    import yaml

    text = _read_config_text(path)
    try:
        data, spelled = _load_yaml(text)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        # ValueError: an integer of more than 4300 digits; RecursionError: [[[[...]]]] nested too deeply
        raise ConfigError(f"--config {path}: not valid YAML ({_yaml_problem(exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of flag names to values, got {type(data).__name__}")
    settable = [n for n in FIELD_NAMES if n not in INTERNAL_SETTINGS]
    for key in data:
        if key in settable:
            continue
        if key in INTERNAL_SETTINGS:
            raise ConfigError(f"--config {path}: {key} is set by create_tfrecords itself, not by a preset; drop it")
        if key in COMMAND_LINE_ONLY:
            raise ConfigError(f"--config {path}: {key} is a command-line flag only, not a setting; give --{key} instead")
        close = difflib.get_close_matches(str(key), settable, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else " (the keys are the flag names, without --)"
        raise ConfigError(f"--config {path}: unknown setting {short_repr(key, 40)}{hint}")
    read = {key: _as_the_flag_reads(path, key, value, spelled.get(key)) for key, value in data.items()}
    for key, value in read.items():
        problem = value_problem(key, value)
        if problem:
            raise ConfigError(f"--config {path}: {key}: {problem}")
    return read


def _load_yaml(text: str) -> Tuple[Any, Dict[str, str]]:
    """The document (as ``yaml.load`` makes it, strictly), and how each top-level value written
    as a plain scalar was spelled (``seed: 0x10``: ``0x10``): YAML 1.1 reads spellings as numbers
    that the flag would refuse or read otherwise, and only the spelling tells."""
    import yaml

    loader = _strict_loader()(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    spelled: Dict[str, str] = {}
    numbers = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")  # (a tagged scalar is read as one in any style:
    for key_node, value_node in node.value if isinstance(node, yaml.MappingNode) else ():  # !!int '017' is 15)
        if isinstance(key_node, yaml.ScalarNode) and isinstance(value_node, yaml.ScalarNode) and (
                value_node.style is None or value_node.tag in numbers):
            spelled[key_node.value] = value_node.value.strip()  # (a block scalar ends with its newline)
    return data, spelled


def _as_the_flag_reads(path: str, key: str, value: Any, spelled: Optional[str]) -> Any:
    """A file's numeric value as its flag reads the same text (:func:`text_parser`): ``8M`` and
    ``1e6`` are taken as on the command line, and a spelling that YAML 1.1 reads as a number but
    the flag refuses or reads otherwise (``0x10``, ``017``, ``1:30``) is refused, never silently
    another number. Anything else is left for :func:`bert_data.config.value_problem` to name."""
    parse = text_parser(key)
    if parse is None or isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return value
    text = value if isinstance(value, str) else spelled
    if text is None:
        return value
    try:
        read = parse(text)
    except argparse.ArgumentTypeError as exc:  # the flag's own words (byte_size, token_count)
        if isinstance(value, str):
            raise ConfigError(f"--config {path}: {key}: {exc}") from None
        read = None
    except (ValueError, OverflowError):  # int() and float(): value_problem's words, as before
        read = None
    if isinstance(value, str) or read == value:
        return value if read is None else read
    if read is None and value_problem(key, value):
        return value  # (seed: 1.5: not an integer, whoever reads it)
    form = f"--{key} takes {TEXT_FORMS[parse]}"
    if read is None:
        raise ConfigError(f"--config {path}: {key}: {text} is YAML 1.1's spelling of {value!r}, which --{key} does not "
                          f"take; write {value!r} ({form})")
    raise ConfigError(f"--config {path}: {key}: YAML 1.1 reads {text} as {value!r} but --{key} as {read!r}; write "
                      f"the number you mean ({form})")


def byte_size(text: str) -> int:
    """A size: an integer with an optional K, M or G suffix (powers of 1024), e.g. 8M (the
    ``type=`` of --group_bytes / --max_document_chars, and how a --config file's text is read)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    body = text.strip().upper().removesuffix("B")
    scale = units.get(body[-1:], 1)
    try:
        value = float(body[:-1] if scale > 1 else body) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size: {text!r} (an integer, or with K, M or G: 8M)") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"invalid size: {text!r}")
    return int(value)


def token_count(text: str) -> int:
    """An integer that may be written like 1e6 (as the Model Zoo's --buffer_size default)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer value: {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"invalid integer value: {text!r}")
    return int(value)


# How each numeric setting is read from text, on the command line (argparse's ``type=``, which
# raises ArgumentTypeError to have its words shown) and in a --config file alike; and the form
# each takes, for the line that refuses another.
_SPECIAL_PARSERS: Dict[str, Callable[[str], Any]] = {
    "group_bytes": byte_size, "max_document_chars": byte_size, "buffer_size": token_count,
}
_PARSER_OF_TYPE: Dict[str, Callable[[str], Any]] = {"int": int, "Optional[int]": int, "float": float}
_FIELD_TYPES = {f.name: str(f.type) for f in fields(Config)}
TEXT_FORMS: Dict[Callable[[str], Any], str] = {
    int: "a decimal integer", float: "a decimal number such as 0.1 or 1e-3",
    byte_size: "an integer, or with K, M or G: 8M", token_count: "an integer, which may be written like 1e6",
}


def text_parser(name: str) -> Optional[Callable[[str], Any]]:
    """The function that reads setting ``name`` from text (its flag's ``type=``), or None for a
    setting that is text, a switch or a list."""
    return _SPECIAL_PARSERS.get(name) or _PARSER_OF_TYPE.get(_FIELD_TYPES.get(name, ""))


# Settings whose default is "" (none) that a given, empty value must not silently fall back to: an
# empty --from_tokens read the text instead of the cache, an empty --scheduler_address started a
# LocalCluster on this machine instead of reaching the cluster.
EMPTY_IS_NOT_UNSET = {
    "from_tokens": "the token cache's directory (bert-data tokenize --output_dir DIR)",
    "scheduler_address": "the scheduler's tcp://HOST:PORT",
    "scheduler_file": "the scheduler file's path",
}


def build_config(
    overrides: Mapping[str, Any],
    config_file: Optional[str] = None,
    base: Optional[Config] = None,
    require_inputs: bool = True,
) -> Config:
    """defaults < YAML preset < explicit overrides (entries whose value is None are ignored).

    ``config_file`` is a path or the name of a shipped preset (:func:`resolve_config`);
    ``require_inputs=False`` (``--print_config``) lets --metadata_files / --vocab_file be absent."""
    return configure(overrides, config_file, base, require_inputs)[0]


def configure(
    overrides: Mapping[str, Any],
    config_file: Optional[str] = None,
    base: Optional[Config] = None,
    require_inputs: bool = True,
) -> Tuple[Config, Optional["FileSettings"]]:
    """:func:`build_config`, and what its ``config_file`` set that no override replaced (None
    without one): a tool explains the run's later errors with it too (:meth:`FileSettings.explain`)."""
    values: Dict[str, Any] = {}
    from_file = None
    if config_file is not None:
        values.update(load_yaml_config(resolve_config(config_file)))
        from_file = FileSettings(config_file, {k: v for k, v in values.items() if overrides.get(k) is None})
    for name, what in EMPTY_IS_NOT_UNSET.items():
        flag, given = overrides.get(name), from_file.values.get(name) if from_file else None
        if isinstance(flag, str) and not flag.strip():  # (a flag given empty: an unset shell variable)
            raise ConfigError(f"--{name} is empty (an unset shell variable?): give {what}, or leave it out")
        if isinstance(given, str) and given and not given.strip():  # (in a file "" is a preset's none: blanks are a slip)
            raise ConfigError(f"--config {config_file}: {name} is blank: give {what}, or leave it out")
    values.update({k: v for k, v in overrides.items() if v is not None})
    unknown = sorted(set(values) - set(FIELD_NAMES))
    if unknown:
        raise ConfigError(f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    try:
        return _merged(values, base, require_inputs), from_file
    except ConfigError as exc:
        if from_file is None:
            raise
        raise ConfigError(from_file.explain(str(exc))) from None


def _merged(values: Dict[str, Any], base: Optional[Config], require_inputs: bool) -> Config:
    """The Config of the merged ``values``, coerced to the fields' types and validated."""
    values = {k: _coerce(k, v) for k, v in values.items()}
    config = base.replace(**values) if base is not None else Config(**values)  # dependent defaults see the final values
    if config.disable_masking and config.unmasked_format == "tokens" and config.dupe_factor != 1:
        import logging

        logging.getLogger("bert_data").warning(
            "--disable_masking writes each window once, as the Model Zoo does (masks are drawn by the reader): "
            "--dupe_factor %s is taken as 1", config.dupe_factor)
        config = config.replace(dupe_factor=1)
    validate(config, require_inputs=require_inputs)
    return config


# "--KEY VALUE ...", "--KEY must ...", "--KEY: ...", but not "--A and --B contradict" nor "--A/--B are for ..."
_LEADING_FLAG = re.compile(r"--([a-z][a-z0-9_]*)(?::? |:$|$)(?!and --)")
_FLAG_TOKEN = r"(?:^|(?<=[\s(`'\"/]))--{}(?![a-z0-9_])"  # a flag as a line names it, never inside a value: 'a--seed/b'
_FLAG_NAMED = re.compile(_FLAG_TOKEN.format("([a-z][a-z0-9_]*)"))
_NOT_FOUND = ("does not exist", "no such", "not found", "matches no file")


@dataclass(frozen=True)
class FileSettings:
    """The settings a --config file gave that no flag overrode. Errors name settings as flags
    (``--max_seq_length -5 is too small``); about one of these, a user would look for the flag on
    the command line and not find it, so :meth:`explain` points at the file instead."""

    path: str  # as given to --config (a file's path, or a shipped preset's name)
    values: Mapping[str, Any]

    def explain(self, message: str, mentions: bool = True) -> str:
        """``message`` with the file named where it speaks of the file's settings: a leading
        ``--KEY ...`` becomes ``--config PATH: KEY: ...`` (load_yaml_config's form); with
        ``mentions`` (a validation error: every flag it names is this run's), another ``--KEY`` it
        names gets "KEY is set in --config PATH"; and a path of the file's that is not found gets
        where relative paths resolve (the working directory, not the file's)."""
        head, lead = "", None
        match = _LEADING_FLAG.match(message)
        if match and match.group(1) in self.values:
            lead = match.group(1)
            head, message = f"--config {self.path}: {lead}: ", message[match.end():]
            message = re.sub(_FLAG_TOKEN.format(lead), f"{lead} (in the file)", message)  # (the fix's "drop --KEY"
            # is about the file's line: the user typed no such flag)
        notes = []
        named = [k for k in dict.fromkeys(_FLAG_NAMED.findall(message)) if k in self.values and k != lead]
        if mentions and named:
            notes.append(f"{' and '.join(named)} {'is' if len(named) == 1 else 'are'} set in --config {self.path}")
        resolved = f"resolve against {_working_directory()}, not the file's directory"
        for key, relative in self._missing_paths(message, lead).items():
            if key == lead:
                notes += [f"relative paths in --config {self.path} {resolved}"] if relative else []
            else:
                where = f", whose relative paths {resolved}" if relative else ""
                notes.append(f"{key} is set in --config {self.path}{where}")
        return head + message + "".join(f"; {note}" for note in notes)

    def _missing_paths(self, message: str, lead: Optional[str] = None) -> Dict[str, bool]:
        """The path settings of the file that ``message`` says are not found, each with whether
        one of its missing paths is relative (``lead``: the setting the message is about, its
        value first)."""
        if not any(marker in message.lower() for marker in _NOT_FOUND):
            return {}
        found: Dict[str, bool] = {}
        for key in PATH_SETTINGS:
            if key == "output_dir":  # (the run makes it: its not being there yet is never the cause)
                continue
            given = self.values.get(key)
            paths = [given] if isinstance(given, str) else list(given) if isinstance(given, (list, tuple)) else []
            gone = [p for p in paths if isinstance(p, str) and p and "://" not in p
                    and _names_missing(message, p, key, key == lead)]
            if gone:
                found[key] = any(not os.path.isabs(p) for p in gone)
        return found


def _names_missing(message: str, path: str, key: str, leading: bool = False) -> bool:
    """Whether ``message`` names ``path`` (for the prefix: a path under it), and no such file is
    there: only then is where it resolved the answer. ``leading``: the message is about ``key``,
    its value first ("tokens: no such directory")."""
    if leading and message.startswith(path) and not os.path.lexists(path):
        return True
    if key == "input_files_prefix":
        pattern, there = re.escape(path.rstrip("/") + "/"), os.path.isdir(path)
    elif "/" in path or "." in path:
        pattern, there = re.escape(path) + r"(?=$|[\s'\":;,)])", os.path.lexists(path)
    else:  # (a bare word, "vocab": named only where quoted, or it is any word of the message's prose)
        pattern, there = "['\"]" + re.escape(path) + "['\"]", os.path.lexists(path)
    return not there and re.search(r"(?:^|(?<=[\s'\"(]))" + pattern, message) is not None


def _working_directory() -> str:
    """The working directory as a line names it, with its path (without it when it is gone:
    deleted under the run, os.getcwd fails)."""
    try:
        return f"the working directory ({os.getcwd()})"
    except OSError:
        return "the working directory"


def _coerce(name: str, value: Any) -> Any:
    """Normalise a value from YAML or flags to the dataclass field's type."""
    if name in ("metadata_files", "validation_metadata_files"):
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"--{name} must be a path or a list of paths, got {short_repr(value)}")
        return tuple(value)
    if name in ZERO_MEANS and isinstance(value, int) and not isinstance(value, bool) and value <= 0:
        return ZERO_MEANS[name]  # the Model Zoo's spellings: 0 (or less) means "all files" / "one file"
    if name == "multiple_docs_separator" and isinstance(value, str) and "\\" in value:
        # Shell users write '\n' literally; honour the usual escapes.
        try:
            return value.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"--multiple_docs_separator {short_repr(value)} has a bad escape ({exc.reason}); write \\n, \\t, \\\\ "
                f"(a backslash) or \\uXXXX"
            ) from None
    return value


def escape_separator(value: str) -> str:
    """The inverse of the separator's escape decoding (for --print_config): backslashes and
    unprintable characters written as escapes, so the printed preset reads back the same."""
    return "".join(c.encode("unicode_escape").decode("ascii") if c == "\\" or not c.isprintable() else c for c in value)


def effective_yaml(config: Config, source: str = "") -> str:
    """The settings of ``config`` as a YAML preset (``--print_config``): given back to ``--config``
    it makes the same Config (the separator is written with its escapes)."""
    import yaml

    data = {k: v for k, v in config.to_json().items() if k not in INTERNAL_SETTINGS}
    data["multiple_docs_separator"] = escape_separator(config.multiple_docs_separator)
    header = f"# create_tfrecords effective settings: defaults < {source or 'no --config'} < flags\n"
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=None, width=1 << 16)
