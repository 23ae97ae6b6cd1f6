"""The litdata data formats litstore stores and decodes: checked without importing litdata.

A stored media value names the litdata serializer that decodes it (its "data
format", such as ``image:png``), and stored bytes may come from anyone. Some of
litdata's serializers unpickle their bytes (``pickle``, ``graph``), which would run
code chosen by whoever wrote the store, so only the serializers that decode media
(:data:`MEDIA_FORMATS`) are used, both to write and to read.
"""

from __future__ import annotations

#: The litdata serializers a media value may be stored with: those that turn bytes into
#: arrays, tensors, text or decoder objects and never unpickle (``pickle``, ``graph`` and
#: ``json`` are left out).
MEDIA_FORMATS = frozenset(
    {
        "str", "text", "bool", "int", "float", "bytes", "file",
        "image", "pil", "jpeg", "jpeg_array", "tifffile", "video", "audio",
        "numpy", "no_header_numpy", "tensor", "no_header_tensor",
        "mesh", "pdf", "nifti",
    }
)  # fmt: skip

#: Data formats litdata writes under another name than its serializer's: ``litdata.Tiff``
#: values are stored as ``"tiff"`` and decoded by the ``tifffile`` serializer.
SERIALIZER_OF = {"tiff": "tifffile"}

# trimesh.load is told the file type by the stored format; only the types litdata writes.
MESH_TYPES = frozenset({"glb", "ply", "stl"})


def serializer_name(data_format: str) -> str | None:
    """The litdata serializer that decodes ``data_format``, or ``None`` if litstore never decodes it."""
    name, _, detail = data_format.partition(":")
    name = SERIALIZER_OF.get(name, name)
    if name not in MEDIA_FORMATS or (name == "mesh" and detail not in MESH_TYPES):
        return None
    return name
