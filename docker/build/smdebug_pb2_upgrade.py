"""Rewrite protoc-3-era *_pb2.py modules in the form current protoc emits.

smdebug 1.0.34 ships generated modules that build descriptors by hand
(``_descriptor.FieldDescriptor(...)``); protobuf >= 4 refuses that ("Descriptors cannot be
created directly") unless the slow pure-Python backend is forced for the whole process. Each old
module embeds its serialized FileDescriptorProto (``serialized_pb=b'...'``), which is all the new
form needs: ``AddSerializedFile`` plus the builder. Imports of other *_pb2 modules are kept, so
dependencies register first. Usage: python smdebug_pb2_upgrade.py DIR [DIR ...]
"""

from __future__ import annotations

import ast
import pathlib
import sys

TEMPLATE = """# -*- coding: utf-8 -*-
# Regenerated from the serialized descriptor of smdebug's original module
# (docker/build/smdebug_pb2_upgrade.py); the message definitions are unchanged.
from google.protobuf import descriptor_pool as _descriptor_pool
from google.protobuf import symbol_database as _symbol_database
from google.protobuf.internal import builder as _builder

_sym_db = _symbol_database.Default()

{imports}
DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile({serialized!r})

_globals = globals()
_builder.BuildMessageAndEnumDescriptors(DESCRIPTOR, _globals)
_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, {module!r}, _globals)
"""


def serialized_descriptor(tree: ast.Module) -> bytes:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "FileDescriptor":
            for kw in node.keywords:
                if kw.arg == "serialized_pb":
                    return ast.literal_eval(kw.value)
    raise ValueError("no FileDescriptor(serialized_pb=...) call")


def pb2_imports(tree: ast.Module, source: str) -> list[str]:
    lines = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            text = ast.get_source_segment(source, node)
            if text and "_pb2" in text:
                lines.append(text)
    return lines


def upgrade(path: pathlib.Path, package: str) -> None:
    source = path.read_text()
    tree = ast.parse(source)
    module = f"{package}.{path.stem}"
    new = TEMPLATE.format(
        imports="\n".join(pb2_imports(tree, source)),
        serialized=serialized_descriptor(tree),
        module=module,
    )
    path.write_text(new)
    print(f"smdebug_pb2_upgrade: {module}")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for directory in map(pathlib.Path, argv):
        files = sorted(directory.glob("*_pb2.py"))
        if not files:
            print(f"smdebug_pb2_upgrade: no *_pb2.py in {directory}", file=sys.stderr)
            return 1
        # The import path of DIR, read from the site root (the first parent without __init__.py).
        parts = []
        here = directory.resolve()
        while (here / "__init__.py").exists():
            parts.insert(0, here.name)
            here = here.parent
        for f in files:
            upgrade(f, ".".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
