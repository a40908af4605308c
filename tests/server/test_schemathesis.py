"""Schemathesis against docs/openapi.yaml: schema-driven valid and invalid requests, no 5xx.

The run uses a copy of the schema with small generation limits (max_tokens, n, batch sizes), so
every generated request is cheap on the CPU backend; the published schema keeps the real limits.
Bounded by --max-examples per operation and a wall-clock timeout.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, Server, text_model_dir

MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", 25))


def tighten(node):
    """Caps the sizes that drive generation time, in place."""
    if isinstance(node, dict):
        props = node.get("properties", {})
        for key in ("max_tokens", "max_new_tokens", "max_completion_tokens"):
            if key in props:
                props[key]["maximum"] = 8
        if "n" in props and "maximum" in props["n"]:
            props["n"]["maximum"] = 2
        if node.get("type") == "array":
            node["maxItems"] = min(node.get("maxItems", 4), 4)
        for v in node.values():
            tighten(v)
    elif isinstance(node, list):
        for v in node:
            tighten(v)


def schemathesis_cli():
    path = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")
    if not Path(path).exists():
        pytest.fail("schemathesis is not installed: pip install -r tests/server/requirements.txt")
    return path


def test_schemathesis(tmp_path):
    schema = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())
    tighten(schema)
    # Token ids the fixture's 512-entry vocabulary knows, so generated prompts are mostly valid.
    schema["components"]["schemas"]["TokenIds"]["items"]["maximum"] = 511
    schema_path = tmp_path / "openapi.yaml"
    schema_path.write_text(yaml.safe_dump(schema))
    # 8 pages per rank (128 tokens): a chat request without max_tokens, which gets what the KV
    # capacity leaves, stays short too.
    server = Server(text_model_dir(), "--served-model-name", "st", name="schemathesis", kv_pages=8)
    try:
        run = subprocess.run(
            [schemathesis_cli(), "run", str(schema_path), "--url", server.url, "--checks", "not_a_server_error",
             "--max-examples", str(MAX_EXAMPLES), "--seed", "1", "--no-shrink", "--request-timeout", "20",
             "--generation-database", "none", "--phases", "examples,coverage,fuzzing", "--no-color"],
            cwd=tmp_path, capture_output=True, text=True, timeout=150)
        print(run.stdout[-3000:])
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:] + server.log_tail()
        assert server.proc.poll() is None
        server.wait_drained(timeout=30)
    finally:
        assert server.stop() == 0, server.log_tail()
