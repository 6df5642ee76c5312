"""The run's manifest, typed: "Load a typed `Manifest` once per invocation: a dataclass with typed
roles, settings and transport, read and written only in `storage/manifest.py` ... Reporting reads typed fields, with
no `manifest["…"]` outside storage."""

import ast
import json
from pathlib import Path

import pytest

from lexpilot.storage.manifest import Manifest
from lexpilot.storage.manifest_notes import earlier_served, record_served
from tests.helpers.paths import ROOT
from tests.helpers.runs import run_folder
from tests.helpers.source import keys_read
from tests.helpers.stages import STAGES


@pytest.fixture
def manifest_reads(monkeypatch):
    """Each time a manifest.json is opened, however: Path.read_text, read_bytes and open go through Path.open,
    open() and json.load(open(…)) through the builtin (each read counted once, on Python 3.10 as on 3.11)."""
    import builtins

    reads, path_open, builtin_open = [], Path.open, builtins.open

    def opened(file) -> None:
        if isinstance(file, (str, Path)) and Path(file).name == "manifest.json":
            reads.append(file)

    def counted_path_open(self, *args, **kwargs):
        opened(self)
        return path_open(self, *args, **kwargs)

    def counted_open(file, *args, **kwargs):
        opened(file)
        return builtin_open(file, *args, **kwargs)

    monkeypatch.setattr(Path, "open", counted_path_open)
    monkeypatch.setattr(builtins, "open", counted_open)
    return reads


@pytest.mark.slow
@pytest.mark.parametrize("mode", [(), ("--batch", "--batch-poll", "1")], ids=["synchronous", "batch"])
def test_a_stage_reads_the_runs_manifest_once_per_invocation(harness, manifest_reads, mode):
    """The first invocation writes the manifest and reads it never; each later one reads it once: a later stage,
    the same with nothing left to do, and again with its records removed (calls to make, a transport to note)."""
    assert harness.run("LexAwN", *mode) == 0
    assert manifest_reads == []
    for invocation in ("a later stage", "nothing left to do", "its records removed"):
        if invocation == "its records removed":
            for step in STAGES["DCG"].steps:
                harness.file(step.kind).unlink()
        assert harness.run("DCG", *mode) == 0
        assert len(manifest_reads) == 1, (invocation, manifest_reads)
        manifest_reads.clear()


@pytest.mark.parametrize("flags", [("--dry-run",), ("--batch-status",)], ids=["dry run", "batch status"])
def test_a_dry_run_and_a_batch_status_read_the_manifest_once(harness, manifest_reads, flags):
    assert harness.run("LexAwN") == 0
    manifest_reads.clear()
    assert harness.run("DCG", *flags) == 0
    assert len(manifest_reads) == 1, manifest_reads


def test_a_noted_transport_is_read_back_without_another_read(harness, provider, manifest_reads):
    """The output-limit field a role's endpoint takes is noted in the manifest once found, and a later invocation
    starts with it: from the manifest it read once, not a second read."""
    from tests.helpers.replies import MAX_TOKENS_REFUSED

    provider.script = lambda kind, prompt, body: MAX_TOKENS_REFUSED if "max_tokens" in body else None
    assert harness.run("gold", "--limit", "3", "--concurrency", "1") == 0
    saved = json.loads(harness.file("runs", "manifest.json").read_text(encoding="utf-8"))
    assert saved["token_fields"]["eval"] == saved["token_fields"]["judge"] == "max_completion_tokens"
    manifest_reads.clear()
    results = harness.file("eval_results", "LJP_gold.jsonl")
    results.write_text(
        "".join(results.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]), encoding="utf-8"
    )
    provider.requests = []
    assert harness.run("gold", "--limit", "3") == 0
    assert len(manifest_reads) == 1  # (the test's own read above was cleared)
    # started with the field
    assert provider.requests and not any("max_tokens" in r for r in provider.requests)


def test_the_typed_manifest_reads_an_older_or_malformed_manifest_without_an_error():
    older = Manifest.of(
        {
            "run_id": "r1",
            "models": {"eval": {"model": "m"}, "judge": "?"},
            "generation": {"temperature": 0, "max_tokens": 8192, "judge_max_tokens": 512},
        }
    )
    assert (older.model("eval"), older.model("judge"), older.model("user")) == ("m", None, None)
    assert older.generation["judge"].max_tokens == 512 and older.generation["user"].max_tokens == 8192
    # a re-judged run is one whatever its field holds, as the reports always took it; only a string names a source
    malformed = Manifest.of({"rejudged_from": 3})
    assert (malformed.rejudged, malformed.rejudged_from, Manifest.of({"rejudged_from": "r1"}).rejudged) == (
        True,
        None,
        True,
    )
    assert (older.user_condition, older.rejudged_from, older.token_fields, older.selected_cases) == (
        "standard",
        None,
        None,
        None,
    )


def test_the_served_models_add_up_over_invocations_and_a_malformed_entry_is_left_out(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text("{}", encoding="utf-8")
    manifest = Manifest.of({}, path)
    assert manifest.served == {}
    manifest = record_served(manifest, {"judge": {"r1": 2}}, {"judge": ["r1"]}, [])
    manifest = record_served(
        manifest, {"judge": {"r1": 1, "r2": 3}}, {"judge": ["r1", "r2"]}, [("judge", "r2")]
    )
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["served_models"] == {"judge": {"calls": {"r1": 3, "r2": 3}, "accepted": ["r1", "r2"]}}
    assert saved["served_model_changes_allowed"] == [{"role": "judge", "served": "r2"}]
    assert earlier_served(manifest) == {"judge": (["r1", "r2"], {"r1": 3, "r2": 3})}
    # nothing new: not rewritten
    path.write_text("{}", encoding="utf-8")
    assert record_served(manifest, {}, {"judge": ["r1", "r2"]}, []) is manifest
    assert path.read_text(encoding="utf-8") == "{}"
    # a hand-edited entry: what is not a count or an id is left out, never an error
    edited = Manifest.of({"served_models": {"judge": {"calls": {"r1": "3", "r2": 2, "r3": True}, "accepted": [1]},
                                            "user": "?"}})  # fmt: skip
    assert edited.served["judge"].calls == {"r2": 2} and edited.served["judge"].accepted == []
    assert edited.served["user"].calls == {} and earlier_served(edited)["judge"] == (["r2"], {"r2": 2})


def string_keyed_manifest_reads(tree: ast.AST) -> list[int]:
    """Lines that read a manifest by string key: `….manifest["x"]`, `manifest["x"]`, `manifest.get("x")`, or reach
    for the JSON it was read from (`manifest.saved`)."""

    def is_manifest(node) -> bool:
        return (isinstance(node, ast.Name) and "manifest" in node.id) or (
            isinstance(node, ast.Attribute) and "manifest" in node.attr
        )

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "saved" and is_manifest(node.value):
            lines.append(node.lineno)
        if (
            isinstance(node, ast.Subscript)
            and is_manifest(node.value)
            and isinstance(node.slice, ast.Constant)
        ):
            lines.append(node.lineno)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and is_manifest(node.func.value)
        ):
            lines.append(node.lineno)
    return lines


# a manifest's own fields, by the names no record, report or grid file uses for anything else ("models",
# "user_condition" and "schema_version" are record or grid-file fields too, and are found by the name check above)
MANIFEST_KEYS = {
    "run_id", "dataset_sha256", "dataset_path", "selected_cases", "code_hash", "code_files", "prompt_hash",
    "prompt_files", "generation", "rejudged_from", "package_versions", "incarnation", "incarnation_late",
    "settings_digest", "token_fields", "batches_submitted", "rebuilt_from_records", "code_hashes_resumed_with",
    "served_models", "served_model_changes_allowed",
}  # fmt: skip


def manifest_keys_read(tree: ast.AST) -> list[int]:
    """Lines that read one of a manifest's own fields by its name from anything: `x["selected_cases"]`,
    `x.get("token_fields")`, whatever `x` is called (a renamed variable, a decoded JSON, a compared-settings dict)."""
    return [line for line, _ in keys_read(tree, MANIFEST_KEYS)]


@pytest.mark.slow
def test_no_manifest_is_read_by_string_key_outside_storage():
    files = [p for p in (ROOT / "lexpilot").rglob("*.py") if "storage" not in p.relative_to(ROOT).parts]
    files += [p for p in ROOT.glob("*.py")] + list((ROOT / "bench").glob("*.py"))
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in files}
    found = [
        f"{p.relative_to(ROOT)}:{line}"
        for p, tree in trees.items()
        for line in string_keyed_manifest_reads(tree)
    ]
    found += [
        f"{p.relative_to(ROOT)}:{line}" for p, tree in trees.items() for line in manifest_keys_read(tree)
    ]
    assert found == []


def test_the_string_key_finders_find_each_form():
    source = (
        'a = r.manifest["models"]\nb = manifest.get("run_id")\nc = saved_manifest["x"]\nd = r.manifest.run_id\n'
        "e = run.manifest.saved"
    )
    assert string_keyed_manifest_reads(ast.parse(source)) == [1, 2, 3, 5]
    renamed = 'm = load(p)\na = m.get("selected_cases")\nb = json.loads(t)["token_fields"]\nc = settings["prompt_hash"]\n'
    assert manifest_keys_read(ast.parse(renamed + 'd = record["case_number"]\ne = m.run_id\n')) == [2, 3, 4]


# ----------------------------------------------------------------------------- a lost manifest


def test_a_lost_manifest_is_rebuilt_from_records_made_with_the_same_settings(harness, capsys):
    assert harness.run("gold", "--limit", "2") == 0
    manifest = run_folder(harness) / "manifest.json"
    saved = json.loads(manifest.read_text(encoding="utf-8"))
    manifest.unlink()
    assert harness.run("gold", "--limit", "3") == 0
    assert "was missing: rebuilt" in capsys.readouterr().err
    rebuilt = json.loads(manifest.read_text(encoding="utf-8"))
    assert rebuilt["generation"] == saved["generation"] and rebuilt["rebuilt_from_records"] is True


def test_a_lost_manifest_is_never_relabelled_with_other_settings(harness, provider, capsys):
    assert harness.run("gold", "--limit", "2") == 0
    (run_folder(harness) / "manifest.json").unlink()
    provider.requests = []
    assert harness.run("gold", "--limit", "3", "--temperature", "0.2", "--max-tokens", "100") == 2
    err = capsys.readouterr().err
    assert "manifest is missing and its saved records were made with other settings" in err
    assert not provider.requests and not (run_folder(harness) / "manifest.json").exists()


# ----------------------------------------------------------------------------- a setting edited by hand


def test_an_edited_manifest_setting_is_noticed_by_stages_and_reports(harness, capsys):
    """A setting edited by hand in manifest.json (temperature 0.7 -> 0.9) stops a stage and is said by a report,
    which leaves the run out."""
    import show_results

    assert harness.run("gold", "--limit", "2") == 0
    manifest = next((harness.root / "runs").glob("*/*/manifest.json"))
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace('"temperature": 0.7', '"temperature": 0.9'),
        encoding="utf-8",
    )
    capsys.readouterr()
    assert harness.run("gold", "--limit", "2") == 2
    assert "settings were changed after it started" in capsys.readouterr().err
    assert show_results.main(["--output-root", str(harness.root)]) == 0
    captured = capsys.readouterr()
    assert "settings were changed after it started" in captured.err and "0.9" not in captured.out
