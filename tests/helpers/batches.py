"""Batch runs' records compared, and a batch API's work done offline."""

import json

VOLATILE = ("usage", "digest", "upstream_hash")  # batched calls are marked in usage, hence new digests


def contents(h, name_top, name_file):
    """A file's records in case order, the fields batched calls change left out."""
    return sorted(
        ({k: v for k, v in r.items() if k not in VOLATILE} for r in h.records(name_top, name_file)),
        key=lambda r: r["case_number"],
    )


def run_batch_files(provider, folder) -> int:
    """What `vllm run-batch` does, offline, with each input file of `folder` not answered yet; how many files."""
    inputs = [
        p
        for p in sorted(folder.glob("*.jsonl"))
        if not p.name.endswith(".out.jsonl") and not p.with_name(p.stem + ".out.jsonl").exists()
    ]
    for path in inputs:
        lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
        assert len({x["body"]["model"] for x in lines}) == 1  # one model per file
        out = []
        for i, x in enumerate(lines):
            status, _, payload = provider._answer(x["body"])
            out.append(
                {
                    "id": f"vllm-{i}",
                    "custom_id": x["custom_id"],
                    "response": {"status_code": status, "body": json.loads(payload)},
                    "error": None,
                }
            )
        path.with_name(path.stem + ".out.jsonl").write_text(
            "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in out), encoding="utf-8"
        )
    return len(inputs)
