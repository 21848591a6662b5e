"""A Hugging Face hub cache laid out on disk, as huggingface_hub lays out a download, so tests
(and transcripts) load hub ids without the network.

    HF_HOME/hub/models--ORG--NAME/
        blobs/<sha256 of the file>                 the file's bytes, stored once
        snapshots/<commit>/<file> -> ../../blobs/<sha256>   (relative symlinks)
        refs/<branch or tag>                       the commit that name points at
        .no_exist/<commit>/<file>                  files transformers looks for that the
                                                   repository lacks (empty markers)

`lay_out_hub_model(hf_home, "org/name", model, tokenizer)` saves a model (save_pretrained) and
returns its commit; `HF_HOME=hf_home HF_HUB_OFFLINE=1 knowflow eval --model org/name` then
loads it from there. Plain functions, no pytest: `benchmarks/data/hub_cache_demo.py` uses them too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

# Files transformers looks for beside a model's own; a download records each one the repository
# lacks under .no_exist/<commit>/, so that later loads (online or not) do not ask again.
LOOKED_FOR = ("adapter_config.json", "added_tokens.json", "special_tokens_map.json",
              "tokenizer.model", "chat_template.jinja", "chat_template.json",
              "processor_config.json", "preprocessor_config.json", "model.safetensors.index.json",
              "generation_config.json", "custom_generate/generate.py")


def repo_folder(hf_home: str | Path, repo_id: str) -> Path:
    """Where huggingface_hub keeps model `repo_id` under `hf_home`."""
    return Path(hf_home) / "hub" / f"models--{repo_id.replace('/', '--')}"


def lay_out_hub_folder(hf_home: str | Path, repo_id: str, folder: str | Path,
                       revision: str | None = "main") -> str:
    """Every file under `folder` as one snapshot of hub model `repo_id` in `hf_home`'s cache;
    `revision` (a branch or tag) is pointed at it (None: reachable by its commit only).
    Returns the snapshot's commit hash (40 hex digits, from the files and the revision)."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    digests = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    commit = hashlib.sha1("".join(f"{p.relative_to(folder).as_posix()}:{d};"
                                  for p, d in digests.items()).encode()
                          + str(revision).encode()).hexdigest()
    repo = repo_folder(hf_home, repo_id)
    for path, digest in digests.items():
        blob = repo / "blobs" / digest
        if not blob.exists():
            blob.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, blob)
        link = repo / "snapshots" / commit / path.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    present = {p.relative_to(folder).as_posix() for p in files}
    for name in LOOKED_FOR:
        if name not in present:
            marker = repo / ".no_exist" / commit / name
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
    if revision is not None:
        ref = repo / "refs" / revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)  # huggingface_hub writes the bare hash, no newline
    return commit


def lay_out_hub_model(hf_home: str | Path, repo_id: str, model, tokenizer=None,
                      revision: str | None = "main") -> str:
    """`model` (and `tokenizer`), saved with save_pretrained, as hub model `repo_id` at
    `revision` in `hf_home`'s cache (see `lay_out_hub_folder`); returns the commit hash."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        return lay_out_hub_folder(hf_home, repo_id, tmp, revision)
