"""docker/build/smdebug_pb2_upgrade.py: old generated modules become builder-style ones."""

from __future__ import annotations

import ast

import smdebug_pb2_upgrade as upgrade

OLD = """
from google.protobuf import descriptor as _descriptor
from smdebug.core.tfevent.proto import tensor_pb2 as smdebug_dot_tensor__pb2
import os

DESCRIPTOR = _descriptor.FileDescriptor(
  name='smdebug/core/tfevent/proto/event.proto',
  package='smdebug',
  serialized_pb=b'\\n\\x05event\\x12\\x07smdebug',
  dependencies=[smdebug_dot_tensor__pb2.DESCRIPTOR,])
_X = _descriptor.Descriptor(name='X')
"""


def test_rewrites_module_keeping_descriptor_bytes_and_pb2_imports(tmp_path):
    pkg = tmp_path / "smdebug" / "proto"
    pkg.mkdir(parents=True)
    (tmp_path / "smdebug" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "event_pb2.py").write_text(OLD)

    assert upgrade.main([str(pkg)]) == 0

    new = (pkg / "event_pb2.py").read_text()
    tree = ast.parse(new)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    added = [c for c in calls if getattr(c.func, "attr", "") == "AddSerializedFile"]
    assert [ast.literal_eval(c.args[0]) for c in added] == [b"\n\x05event\x12\x07smdebug"]
    assert "from smdebug.core.tfevent.proto import tensor_pb2 as smdebug_dot_tensor__pb2" in new
    assert "import os" not in new
    assert "_descriptor.Descriptor(" not in new
    assert "'smdebug.proto.event_pb2'" in new


def test_directory_without_modules_is_an_error(tmp_path, capsys):
    assert upgrade.main([str(tmp_path)]) == 1
    assert "no *_pb2.py" in capsys.readouterr().err


def test_module_without_descriptor_is_refused(tmp_path):
    (tmp_path / "x_pb2.py").write_text("A = 1\n")
    try:
        upgrade.main([str(tmp_path)])
    except ValueError as exc:
        assert "serialized_pb" in str(exc)
    else:
        raise AssertionError("a module without a FileDescriptor was accepted")
