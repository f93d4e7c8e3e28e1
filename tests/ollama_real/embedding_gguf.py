"""Write an embedding model: the Gemma 3 270M GGUF with `gemma3.pooling_type` set to mean.

    python embedding_gguf.py SOURCE TARGET NAME    # PYTHONPATH naming gguf-py (`gguf`)

Ollama v0.30.0 starts llama-server with `--embedding` (and `-b`/`-ub` from num_batch) for
a GGUF whose architecture has a `pooling_type` key (llm/llama_server.go, `isEmbedding`), and
llama-server then pools the last hidden states into one vector: a real embedding run, with
Ollama's own input cut and batch retry, whatever the vectors are worth. The weights and every
other key are copied as they are by gguf-py's own `copy_with_new_metadata` (the code of
gguf-new-metadata, which has no option for an arbitrary key); `general.name` is rewritten
too. Run by tests/ollama_real/provision.py in a scratch environment: the tests never import
gguf.
"""

from __future__ import annotations

import sys

import gguf
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata


def main(source: str, target: str, name: str) -> None:
    reader = gguf.GGUFReader(source, "r")
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(target, arch=arch, endianess=reader.endianess)
    alignment = reader.fields.get(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment.contents()
    pooling = MetadataDetails(gguf.GGUFValueType.UINT32, int(gguf.PoolingType.MEAN))
    renamed = MetadataDetails(gguf.GGUFValueType.STRING, name)
    new = {f"{arch}.pooling_type": pooling, gguf.Keys.General.NAME: renamed}
    copy_with_new_metadata(reader, writer, new, [])


if __name__ == "__main__":
    main(*sys.argv[1:4])
