"""Reading SageMaker channels from PyTorch: Pipe-mode FIFOs and File/FastFile directories.

See docs/data.md and byoc.data.dataset for the details.
"""

__all__ = [
    "FRAMINGS",
    "ChannelDataset",
    "ChannelError",
    "FanoutError",
    "RecordError",
    "ShardError",
    "StallError",
    "Topology",
    "read_recordio",
    "read_text",
    "read_tfrecord",
    "shuffled",
    "topology",
    "write_shards",
]

_WHERE = {
    "ChannelDataset": "byoc.data.dataset",
    "Topology": "byoc.data.dataset",
    "shuffled": "byoc.data.dataset",
    "topology": "byoc.data.dataset",
    "ChannelError": "byoc.data.pipe",
    "FanoutError": "byoc.data.fanout",
    "FRAMINGS": "byoc.data.framing",
    "RecordError": "byoc.data.framing",
    "StallError": "byoc.data.framing",
    "ShardError": "byoc.data.shards",
    "read_recordio": "byoc.data.framing",
    "read_text": "byoc.data.framing",
    "read_tfrecord": "byoc.data.framing",
    "write_shards": "byoc.data.shards",
}


def __getattr__(name: str):
    # Lazy: the fan-out reader process imports byoc.data.fanout without torch.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'byoc.data' has no attribute {name!r}")
