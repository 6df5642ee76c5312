"""The grid file (`run_grid.py --grid FILE`, TOML): per evaluated model id, the endpoint it lives on (base URL, the
name of the environment variable holding its key) and optional limits; per any other model id (the User Model's,
the judge's), optional limits. Every mistake is one line naming the file, the key and its line.

    [models."Qwen3-32B"]            # a local vLLM
    base_url = "http://gpu-1:8000/v1"
    concurrency = 32
    batch = false                   # no batch API there: with --batch, its calls are made directly

    [models."GPT-5.6-Sol"]          # a cloud API
    base_url = "https://api.openai.com/v1"
    key_variable = "OPENAI_API_KEY"
    rpm = 500
    tpm = 200000

    [limits."DeepSeek-R1"]          # the judge's endpoint, configured as for a stage
    rpm = 1000
    off_peak = true                 # its calls start only outside its peak windows (--prices gives them)

    [limits."gpt-5.6-mini"]         # a judge asked at the flex tier (batch prices, slower; docs/cost.md)
    service_tier = "flex"

    [servers."http://127.0.0.1:8080/v1"]   # one llama.cpp server serving two model ids, one request at a time
    concurrency = 1
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):  # the standard library's; on 3.10 the same parser is tomli (requirements.txt)
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from lexpilot.errors import HarnessError
from lexpilot.models.limits import Limits, limit_value, parse_limits
from lexpilot.settings import SERVICE_TIERS, check_api_key, check_base_url

TIER_KEY = "service_tier"  # in a [models] or [limits] table: the tier every role using that model id asks for
MODEL_KEYS = ("base_url", "key_variable", "batch", TIER_KEY, "off_peak", *Limits.NAMES)
LIMITS_KEYS = (*Limits.NAMES, TIER_KEY, "off_peak")


@dataclass(frozen=True)
class ModelEndpoint:
    """Where one evaluated model lives: its base URL, the variable holding its key (None: no key is sent), and
    whether it takes batches (false: an endpoint without a batch API, such as llama.cpp's server; with --batch the
    model is asked directly within the cycles, the other roles still in batches)."""

    base_url: str
    key_variable: str | None = None
    batch: bool = True


@dataclass
class GridFile:
    endpoints: dict[str, ModelEndpoint] = field(default_factory=dict)  # evaluated model id -> endpoint
    limits: dict[str, Limits] = field(default_factory=dict)  # any model id -> its limits
    # a base URL -> the limits every model served there shares, on top of its own
    servers: dict[str, Limits] = field(default_factory=dict)
    tiers: dict[str, str] = field(default_factory=dict)  # any model id -> the service tier it is asked at
    # model id -> where its `off_peak = true` is (file:line: key), for a refusal naming it
    off_peak: dict[str, str] = field(default_factory=dict)


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line of each table header and key, (table..., key) -> line: tomllib says where the syntax is wrong,
    not where a valid key holds a wrong value."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r"\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$", line)
        if header:
            table = tuple(
                part.strip().strip("\"'") for part in re.findall(r'"[^"]*"|\'[^\']*\'|[^.]+', header.group(1))
            )
            for n in range(1, len(table) + 1):  # [models."m"] is where `models` first appears too
                lines.setdefault(table[:n], number)
            continue
        key = re.match(r"\s*(\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+)\s*=", line)
        if key:
            lines.setdefault((*table, key.group(1).strip("\"'")), number)
    return lines


# far above any grid file (a model's table is a few lines: a thousand models fit in 100 KB); a file read whole must be
# bounded, or `--grid /dev/zero`'s like fills the memory
MAX_GRID_BYTES = 1 << 20


def grid_text(path: Path) -> str:
    """The grid file's text, read only from a regular file (a FIFO would block the read forever, a device never end)
    and at most MAX_GRID_BYTES of it; OSError and UnicodeDecodeError for the caller to say."""
    if path.exists() and not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file (a device, a FIFO or a socket)"
        raise HarnessError(f"--grid {path}: {kind}; pass the grid's TOML file")
    with path.open("rb") as f:
        data = f.read(MAX_GRID_BYTES + 1)
    if len(data) > MAX_GRID_BYTES:
        raise HarnessError(
            f"--grid {path}: too large for a grid file (over {MAX_GRID_BYTES:,} bytes); pass the grid's TOML file"
        )
    return data.decode("utf-8")


def read_grid_file(path: Path, env) -> GridFile:
    """The grid file's endpoints and limits, checked; a HarnessError names the file, key and line."""
    try:
        text = grid_text(path)
        data = tomllib.loads(text)
    except OSError as e:
        raise HarnessError(f"--grid {path}: {(e.strerror or str(e)).lower()}") from None
    except UnicodeDecodeError:
        raise HarnessError(f"--grid {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:  # its message names the line and column
        raise HarnessError(toml_mistake(path, str(e))) from None
    lines = key_lines(text)

    def where(*keys: str) -> str:
        line = next((lines[keys[:n]] for n in range(len(keys), 0, -1) if keys[:n] in lines), None)
        return f"{path}:{line}: {'.'.join(keys)}" if line else f"{path}: {'.'.join(keys)}"

    grid = GridFile()
    for top, value in data.items():
        if top not in ("models", "limits", "servers"):
            kind = "table" if isinstance(value, dict) else "key (outside any table)"
            raise HarnessError(
                f'{where(top)}: unknown {kind}; a grid file has [models."ID"], [limits."ID"] and '
                '[servers."BASE_URL"] tables only'
            )
        if not isinstance(value, dict) or any(not isinstance(v, dict) for v in value.values()):
            raise HarnessError(f'{where(top)}: write each model as its own table, [{top}."MODEL_ID"]')
    for table in ("models", "limits"):
        for model, entry in data.get(table, {}).items():
            if entry.get("off_peak", False) is not False:
                grid.off_peak[model] = off_peak_entry(entry["off_peak"], where(table, model, "off_peak"))
    for model, entry in data.get("models", {}).items():
        entry = {k: v for k, v in entry.items() if k != "off_peak"}
        grid.endpoints[model], limits = model_endpoint(entry, env, lambda *k, m=model: where("models", m, *k))
        if limits:
            grid.limits[model] = limits
        _read_tier(grid, model, entry, lambda *k, m=model: where("models", m, *k))
    for model, entry in data.get("limits", {}).items():
        if model in grid.endpoints:
            raise HarnessError(
                f"{where('limits', model)}: model {model!r} is given twice; put its limits in its "
                "[models] table"
            )
        unknown = sorted(set(entry) - set(LIMITS_KEYS))
        if unknown:
            raise HarnessError(
                f"{where('limits', model, unknown[0])}: unknown key; a [limits] table takes "
                f"{', '.join(LIMITS_KEYS)}"
            )
        _read_tier(grid, model, entry, lambda *k, m=model: where("limits", m, *k))
        given = {k: v for k, v in entry.items() if k in Limits.NAMES}
        if given or not entry:  # as before for the limits; a tier or off_peak alone sets none
            grid.limits[model] = entry_limits(given, lambda *k, m=model: where("limits", m, *k))
    for url, entry in data.get("servers", {}).items():
        grid.servers[check_base_url(url, where("servers", url))] = server_entry(
            entry, lambda *k, u=url: where("servers", u, *k)
        )
    return grid


def _read_tier(grid: GridFile, model: str, entry: dict, where) -> None:
    if TIER_KEY not in entry:
        return
    tier = entry[TIER_KEY]
    if tier not in SERVICE_TIERS:
        raise HarnessError(f"{where(TIER_KEY)}: {', '.join(repr(t) for t in SERVICE_TIERS)} (a string)")
    grid.tiers[model] = tier


def off_peak_entry(value, where: str) -> str:
    """`off_peak = true`: where it is said (the model's windows are checked against the price file later)."""
    if value is not True:
        raise HarnessError(f"{where}: true or false (true: its calls start only outside its peak windows)")
    return where


def server_entry(entry: dict, where) -> Limits:
    unknown = sorted(set(entry) - set(Limits.NAMES))
    if unknown:
        raise HarnessError(
            f"{where(unknown[0])}: unknown key; a [servers] table takes {', '.join(Limits.NAMES)}"
        )
    if not entry:
        raise HarnessError(f"{where()}: no limit given; e.g. concurrency = 1 for a server with one slot")
    return entry_limits(entry, where)


def model_endpoint(entry: dict, env, where) -> tuple[ModelEndpoint, Limits | None]:
    unknown = sorted(set(entry) - set(MODEL_KEYS))
    if unknown:
        raise HarnessError(
            f"{where(unknown[0])}: unknown key; a [models] table takes {', '.join(MODEL_KEYS)}"
        )
    if not isinstance(entry.get("base_url"), str):
        raise HarnessError(f"{where('base_url')}: missing or not a string; give the model's base URL")
    base_url = check_base_url(entry["base_url"], where("base_url"))
    variable = entry.get("key_variable")
    if variable is not None:
        if not isinstance(variable, str) or not variable:
            raise HarnessError(f"{where('key_variable')}: the name of an environment variable, as a string")
        if not env.get(variable):
            raise HarnessError(
                f"{where('key_variable')}: {variable} is not set; export it with the model's key, "
                "or remove key_variable to send no key"
            )
        check_api_key(env[variable], variable)
    if not isinstance(entry.get("batch", True), bool):
        raise HarnessError(f"{where('batch')}: true or false (false: the model's endpoint has no batch API)")
    limits = {k: entry[k] for k in Limits.NAMES if k in entry}
    endpoint = ModelEndpoint(base_url, variable, entry.get("batch", True))
    return endpoint, entry_limits(limits, where) if limits else None


def entry_limits(entry: dict, where) -> Limits:
    values = {name: limit_value(name, value, where(name)) for name, value in entry.items()}
    concurrency = values.get("concurrency")  # a whole number (limit_value)
    return Limits(int(concurrency) if concurrency is not None else None, values.get("rpm"), values.get("tpm"))


def command_limits(entries: list[str]) -> dict[str, Limits]:
    """--limit MODEL=rpm:R,tpm:T,concurrency:C, repeatable -> model id -> Limits."""
    limits = {}
    for entry in entries:
        model, _, text = entry.partition("=")
        if not model or not text:
            raise HarnessError(f"--limit {entry[:80]!r}: use MODEL=rpm:R,tpm:T,concurrency:C (any of them)")
        if model in limits:
            raise HarnessError(f"--limit {model}: given twice; give each model's limits once")
        limits[model] = parse_limits(text, f"--limit {model}")
    return limits


def split_limits(options: list[str]) -> tuple[list[str], list[str]]:
    """(--limit MODEL=... entries, the other options): `--limit N` is the stages' number of cases, `--limit
    MODEL=rpm:R,...` an endpoint's limits; the value tells them apart (a model id is never a number)."""
    limits, rest, i = [], [], 0
    while i < len(options):
        option = options[i]
        value = (
            option.partition("=")[2]
            if option.startswith("--limit=")
            else options[i + 1]
            if option == "--limit" and i + 1 < len(options)
            else None
        )
        if value is not None and "=" in value:
            limits.append(value)
            i += 1 if option.startswith("--limit=") else 2
            continue
        rest.append(option)
        i += 1
    return limits, rest


def toml_mistake(path: Path, said: str) -> str:
    """The TOML parser's complaint in the grid file's words: a model (or key) given twice, or where it is not TOML."""
    line = re.search(r"at line (\d+)", said)
    at = f"{path}:{line[1]}" if line else str(path)
    twice = re.match(r"Cannot declare \((.*)\) twice", said)
    if twice:
        keys = ".".join(k.strip(" '\"") for k in twice[1].split(","))
        return f"{at}: {keys}: the same model id twice; give each model one table"
    if said.startswith("Cannot overwrite a value"):
        return f"{at}: a key given twice in one table; give it once"
    return f"{path}: not valid TOML: {said}"
