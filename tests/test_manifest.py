"""The run's manifest, typed (issue 37 item 1): "Load a typed `Manifest` once per invocation: a dataclass with typed
roles, settings and transport, read and written only in `storage/manifest.py` ... Reporting reads typed fields, with
no `manifest["…"]` outside storage."""

import ast
import json
from pathlib import Path

import pytest

from lexpilot.storage.manifest import Manifest
from tests.conftest import STAGES

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def manifest_reads(monkeypatch):
    """Each time a manifest.json is read from disk, whoever reads it."""
    reads = []
    read_text = Path.read_text

    def counted(self, *args, **kwargs):
        if self.name == "manifest.json":
            reads.append(self)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    return reads


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


def test_a_noted_transport_is_read_back_without_another_read(harness, provider, manifest_reads):
    """The output-limit field a role's endpoint takes is noted in the manifest once found, and a later invocation
    starts with it: from the manifest it read once, not a second read."""
    from tests.test_provider_faults import MAX_TOKENS_REFUSED

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
    assert (older.user_condition, older.rejudged_from, older.token_fields, older.selected_cases) == (
        "standard",
        None,
        None,
        None,
    )


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


def test_no_manifest_is_read_by_string_key_outside_storage():
    files = [p for p in (ROOT / "lexpilot").rglob("*.py") if "storage" not in p.relative_to(ROOT).parts]
    files += [p for p in ROOT.glob("*.py")] + list((ROOT / "bench").glob("*.py"))
    found = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in files
        for line in string_keyed_manifest_reads(ast.parse(p.read_text(encoding="utf-8")))
    ]
    assert found == []


def test_the_string_key_finder_finds_each_form():
    source = (
        'a = r.manifest["models"]\nb = manifest.get("run_id")\nc = saved_manifest["x"]\nd = r.manifest.run_id\n'
        "e = run.manifest.saved"
    )
    assert string_keyed_manifest_reads(ast.parse(source)) == [1, 2, 3, 5]
